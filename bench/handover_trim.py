"""What if SessionStart handed over less: the whole handover's precision against recency's, from an eval's lines.

    .venv/bin/python bench/handover_trim.py FILE.json

``FILE.json`` is ``bench/handover_eval.py --out``'s: each session's record keeps, for every surface, the
lines it was handed with their kind (``summary``, ``earlier`` for an earlier session's line, else the
observation's type), how many observations each stands for and whether it named something the session
then needed (any category, or a file). For each rule below, SessionStart keeps only the lines the rule
keeps; prompt and file recall are kept whole (in the bounds, every memory prompt recall handed over counts
as relevant: what a perfect relevance signal at the same size would give); recency is the project's newest observations at the size
handed over (the first lines of the ``all`` surface's recency, newest first). Printed per half: the
observations a session, precision (any, files), recency's at that size and the ratio. Recall cannot be
recomputed from the lines (it needs what each line named): a rule worth having is measured by the eval
itself.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

Line = list[Any]  # kind, observations, relevant to anything, relevant to a file
Record = dict[str, Any]
Keep = Callable[[list[Line]], list[Line]]


def _rule(keep: Keep, *, perfect_prompt: bool = False) -> Callable[[Record], list[Line]]:
    """The whole handover when SessionStart keeps what ``keep`` keeps; with ``perfect_prompt`` (a bound, not a rule),
    every memory prompt recall handed over counts as relevant to anything and to a file."""
    def lines(record: Record) -> list[Line]:
        prompt = record["prompt_recall"]["handover"]["lines"]
        if perfect_prompt:
            prompt = [[kind, count, True, True] for kind, count, _, _ in prompt]
        return keep(record["session_start"]["handover"]["lines"]) + prompt + record["file_recall"]["handover"]["lines"]
    return lines


def _summary(lines: list[Line]) -> list[Line]:
    return [line for line in lines if line[0] == "summary"]


RULES: dict[str, Callable[[Record], list[Line]]] = {
    "as handed over": _rule(lambda lines: lines),
    "no SessionStart at all": _rule(lambda lines: []),
    "the last summary only": _rule(_summary),
    "summary, failures, bug fixes": _rule(lambda lines: [line for line in lines
                                                         if line[0] in ("summary", "failure", "bugfix")]),
    "no earlier sessions' lines": _rule(lambda lines: [line for line in lines if line[0] != "earlier"]),
    "summary and 3 observations": _rule(lambda lines: _summary(lines) + [
        line for line in lines if line[0] not in ("summary", "earlier")][:3]),
    # Bounds: what the same sizes would give were each memory prompt recall hands over relevant.
    "bound: as handed over, prompt recall all relevant": _rule(lambda lines: lines, perfect_prompt=True),
    "bound: the last summary only, prompt recall all relevant": _rule(_summary, perfect_prompt=True),
}


def trimmed(records: list[Record], half: str, rule: Callable[[Record], list[Line]]) -> dict[str, float]:
    handed = [0, 0, 0]  # observations, relevant to anything, to a file
    recency = [0, 0, 0]
    sessions = 0
    for record in records:
        if record["half"] != half:
            continue
        sessions += 1
        lines = rule(record)
        size = sum(count for _, count, _, _ in lines)
        handed[0] += size
        handed[1] += sum(count * relevant for _, count, relevant, _ in lines)
        handed[2] += sum(count * files for _, count, _, files in lines)
        newest = record["all"]["recency"]["lines"][:size]
        recency[0] += len(newest)
        recency[1] += sum(relevant for _, _, relevant, _ in newest)
        recency[2] += sum(files for _, _, _, files in newest)

    def share(counts: list[int], at: int) -> float:
        return counts[at] / counts[0] if counts[0] else 0.0

    return {"observations": handed[0] / sessions if sessions else 0.0,
            "any": share(handed, 1), "any_recency": share(recency, 1),
            "files": share(handed, 2), "files_recency": share(recency, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("eval_json", type=Path, help="bench/handover_eval.py --out's file")
    args = parser.parse_args(argv)
    records = json.loads(args.eval_json.read_text())["per_session"]
    if not records or "lines" not in records[0]["session_start"]["handover"]:
        parser.error("the file has no lines: write it with a bench/handover_eval.py that keeps them")
    for half in ("tune", "held_out"):
        print(f"\n### {half}\n")
        print("| SessionStart keeps | observations a session | precision any: handover / recency (ratio) |"
              " files: handover / recency (ratio) |")
        print("|---|---:|---|---|")
        for name, rule in RULES.items():
            f = trimmed(records, half, rule)
            print(f"| {name} | {f['observations']:.1f} | {f['any']:.0%} / {f['any_recency']:.0%}"
                  f" ({f['any'] / f['any_recency'] if f['any_recency'] else 0:.2f}×) |"
                  f" {f['files']:.0%} / {f['files_recency']:.0%}"
                  f" ({f['files'] / f['files_recency'] if f['files_recency'] else 0:.2f}×) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
