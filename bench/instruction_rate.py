"""How often real tool output reads as instruction-like, and what the detector costs on it.

Every tool use of the recorded sessions (a directory of Claude Code transcripts, default
the corpus) is converted into the event its PostToolUse hook would send
(:mod:`sessionmem.replay.convert`); the text the worker checks of it -- every string of
the tool's response, or the error of a failed one, as
:func:`sessionmem.compress.promotion.tool_output_text` gathers it -- goes through
:func:`sessionmem.protocol.instructions.find_instruction`. Printed: the tool uses, how many
were flagged (the rate), by rule, the time per tool use (mean and slowest) as the worker
reads it (its needles found in one pass, :func:`sessionmem.compress.promotion.needle_finder`)
and with a substring search a needle (the detector alone, as the hooks and imports run it), then
``--show`` of the flagged excerpts. The same for the assistant's last messages of the turns
(what an offline summary's "Next steps" is read from). Then the worst case: a text of
64 KiB repeating each rule's needle.

Usage: ``.venv/bin/python bench/instruction_rate.py [TRANSCRIPTS] [--show N] [--json]``
"""

from __future__ import annotations

import argparse
import collections
import json
import time
from pathlib import Path

from sessionmem.compress.promotion import needle_finder, tool_output_text
from sessionmem.protocol.instructions import MAX_SCAN, find_instruction, groups
from sessionmem.replay.convert import ConversionStats, convert, transcript_files

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "transcripts"  # beside the checkout


def _rate(texts: list[str], show: int, label: str) -> dict[str, object]:
    rules: collections.Counter[str] = collections.Counter()
    shown: list[str] = []
    total = 0.0
    slowest = 0.0
    alone = 0.0
    finder = needle_finder()
    for text in texts:
        started = time.perf_counter()
        finding = find_instruction(text, finder)
        took = time.perf_counter() - started
        total += took
        slowest = max(slowest, took)
        started = time.perf_counter()
        if find_instruction(text) != finding:
            raise SystemExit(f"the one-pass needles and the substring searches disagree on {text[:200]!r}")
        alone += time.perf_counter() - started
        if finding is not None:
            rules[finding.rule] += 1
            if len(shown) < show:
                shown.append(f"  [{finding.rule}] {finding.excerpt[:160]!r}")
    flagged = sum(rules.values())
    print(f"{label}: {len(texts)}, flagged {flagged} ({100 * flagged / max(len(texts), 1):.2f} %)"
          f" {dict(rules)}; {1e6 * total / max(len(texts), 1):.0f} µs mean, {1e3 * slowest:.1f} ms slowest"
          f" ({1e6 * alone / max(len(texts), 1):.0f} µs mean a needle at a time)")
    for line in shown:
        print(line)
    return {"texts": len(texts), "flagged": flagged, "rate": flagged / max(len(texts), 1), "rules": dict(rules),
            "mean_us": 1e6 * total / max(len(texts), 1), "slowest_ms": 1e3 * slowest,
            "mean_us_a_needle_at_a_time": 1e6 * alone / max(len(texts), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("transcripts", nargs="?", type=Path, default=CORPUS)
    parser.add_argument("--show", type=int, default=0, help="print this many flagged excerpts of each kind")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line at the end")
    args = parser.parse_args()
    stats = ConversionStats()
    sessions = convert(transcript_files(args.transcripts), stats)
    outputs: list[str] = []
    messages: list[str] = []
    for session in sessions:
        for event in session.events:
            payload = event.payload
            if event.stage in ("PostToolUse", "PostToolUseFailure"):
                outputs.append(tool_output_text(payload.get("tool_response"), str(payload.get("error") or "")))
            elif event.stage == "Stop" and payload.get("last_assistant_message"):
                messages.append(str(payload["last_assistant_message"]))
    print(f"{stats.files} transcripts, {len(sessions)} sessions")
    groups()  # the patterns compiled once, before anything is timed
    figures = {"tool_outputs": _rate(outputs, args.show, "tool outputs"),
               "last_messages": _rate(messages, args.show, "last assistant messages")}
    worst = []
    for needles, shapes in groups():
        for needle in needles:
            for unit in (needle + " ", needle + " x | ", needle + " to \n"):
                text = unit * (MAX_SCAN // len(unit))
                started = time.perf_counter()
                find_instruction(text)
                worst.append((time.perf_counter() - started, shapes[0].rule, unit))
    worst.sort(reverse=True)
    print("slowest 64 KiB texts repeating one needle:")
    for seconds, rule, needle in worst[:5]:
        print(f"  {1e3 * seconds:7.1f} ms  {rule}: {needle!r}")
    figures["worst_ms"] = 1e3 * worst[0][0]
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
