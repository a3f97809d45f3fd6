"""Genuine Codex hook payloads and a session transcript, recorded with the pinned Codex CLI and the scripted model.

:func:`record` plays one scripted session in a temporary home (:mod:`.codex_cli`) with hooks that
save their stdin (:func:`~sessionmem.testing.codex_cli.recording_hooks`): a prompt, a shell command,
a failing one, an ``apply_patch`` that adds a file, one that updates a file and one that fails (its
file is missing: Codex 0.169.0 fires PreToolUse for it, no PostToolUse), a reply; then the session
resumed with a compaction before its second prompt. It returns each payload under its
fixture name (``<Event>[-variant]``), the first run's transcript (``rollout-*.jsonl``) and the whole
session's (both runs, the compaction between), with the temporary paths replaced by neutral ones
(:func:`neutral_paths`). ``python -m sessionmem.testing.codex_recording DIR`` writes them as
``DIR/hooks/<name>.json``, ``DIR/rollout-sample.jsonl`` and ``DIR/rollout-compacted.jsonl``
(``tests/fixtures/codex``); ``tests/test_e2e_codex.py`` records again
and holds the fixtures to what the pinned CLI sends.

Resource handling:
    The scripted server and every Codex process end before :func:`record` returns; the temporary
    home lives in the caller's directory.
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sessionmem.testing.codex_cli import CodexHome, recorded_payloads, recording_hooks
from sessionmem.testing.responses_api import (
    Item,
    ScriptedResponsesAPI,
    apply_patch,
    is_compaction,
    message,
    shell_command,
    tool_outputs,
    turn_prompt,
)

NEUTRAL_HOME = "/home/user"
FIRST_PROMPT = "Make add() commutative-safe and write down what you did."
SECOND_PROMPT = "What did we change?"
CALC = "def add(a, b):\n    return a + b\n"
FIRST_TURN: tuple[Item, ...] = (
    shell_command("cat calc.py"),
    shell_command("ls missing-notes.md"),
    apply_patch("*** Begin Patch\n*** Add File: NOTES.md\n+add() returns b + a now.\n*** End Patch\n"),
    apply_patch("*** Begin Patch\n*** Update File: calc.py\n@@\n def add(a, b):\n-    return a + b\n"
                "+    return b + a\n*** End Patch\n"),
    apply_patch("*** Begin Patch\n*** Update File: missing.py\n@@\n-old\n+new\n*** End Patch\n"),
)
FIRST_REPLY = "Done: add() returns b + a, and NOTES.md says so."
SECOND_REPLY = "We changed add() in calc.py and wrote NOTES.md."
SUMMARY = "add() in calc.py now returns b + a; NOTES.md records it."


def scripted_model(body: dict[str, Any]) -> list[Item]:
    """The model's side of the recorded session: :data:`FIRST_TURN` one call at a time, then the replies."""
    if is_compaction(body):
        return [message(SUMMARY)]
    if turn_prompt(body) == FIRST_PROMPT:
        done = len(tool_outputs(body))
        return [FIRST_TURN[done]] if done < len(FIRST_TURN) else [message(FIRST_REPLY)]
    return [message(SECOND_REPLY)]


@dataclass(frozen=True)
class Recording:
    """Payloads by fixture name, in the order they arrived, and the transcript's lines: the first run's, and the
    whole session's (the resumed run goes on in the same file)."""

    payloads: dict[str, dict[str, Any]]
    order: list[str]  # every payload's hook_event_name, in the order they arrived (both runs)
    rollout: str
    compacted_rollout: str = ""


def fixture_name(payload: dict[str, Any]) -> str:
    """``<Event>[-variant]``: the SessionStart source, the tool (Bash or apply_patch), a failed shell
    command, an added or updated file; the first payload of a name is kept."""
    event = str(payload["hook_event_name"])
    if event == "SessionStart":
        return f"{event}-{payload['source']}"
    if event in ("PreToolUse", "PostToolUse"):
        tool = str(payload["tool_name"])
        name = f"{event}-{tool}"
        command = str(payload.get("tool_input", {}).get("command", ""))
        if tool == "apply_patch" and event == "PostToolUse":
            name += "-failed" if "missing" in command else "-add" if "*** Add File:" in command else "-update"
        if tool == "Bash" and event == "PostToolUse" and "missing" in command:
            name += "-failed"
        return name
    return event


def neutral_paths(home: Path, project: Path) -> list[tuple[str, str]]:
    """(this machine's path, its neutral stand-in) pairs, longest first: the project, the Codex home,
    the home, each also as the real path (``/tmp`` may be a link)."""
    pairs = {str(project): f"{NEUTRAL_HOME}/project", str(home / ".codex"): f"{NEUTRAL_HOME}/.codex",
             str(home): NEUTRAL_HOME}
    for path, neutral in list(pairs.items()):
        pairs.setdefault(str(Path(path).resolve()), neutral)
    return sorted(pairs.items(), key=lambda pair: -len(pair[0]))


def scrub(text: str, replacements: list[tuple[str, str]]) -> str:
    for path, neutral in replacements:
        text = text.replace(path, neutral)
    return text


def record(root: Path) -> Recording:
    """Play the recorded session in ``root`` (made empty first) and return what Codex sent and wrote."""
    home, project, hooks = root / "user", root / "user" / "project", root / "hook-payloads"
    project.mkdir(parents=True)
    (project / "calc.py").write_text(CALC)
    with ScriptedResponsesAPI(responder=scripted_model) as api:
        codex = CodexHome.create(home, api.url, hooks=recording_hooks(hooks))
        first = codex.exec(FIRST_PROMPT, project=project, bypass_hook_trust=True).check()
        [rollout] = codex.rollouts()
        transcript = rollout.read_text()
        codex.resume(SECOND_PROMPT, project=project, session_id=first.session_id, bypass_hook_trust=True,
                     auto_compact_token_limit=1000).check()
        whole = rollout.read_text()
    replacements = neutral_paths(home, project) + [(api.url, "http://127.0.0.1:8080/v1")]
    payloads: dict[str, dict[str, Any]] = {}
    order = []
    for payload in recorded_payloads(hooks):
        order.append(str(payload["hook_event_name"]))
        payloads.setdefault(fixture_name(payload), json.loads(scrub(json.dumps(payload), replacements)))
    return Recording(payloads=payloads, order=order, rollout=scrub(transcript, replacements),
                     compacted_rollout=scrub(whole, replacements))


def write_fixtures(recording: Recording, folder: Path) -> None:
    """``folder/hooks/<name>.json`` (indented, keys in Codex's order), ``folder/rollout-sample.jsonl`` and
    ``folder/rollout-compacted.jsonl``."""
    (folder / "hooks").mkdir(parents=True, exist_ok=True)
    for name, payload in recording.payloads.items():
        (folder / "hooks" / f"{name}.json").write_text(json.dumps(payload, indent=2) + "\n")
    (folder / "rollout-sample.jsonl").write_text(recording.rollout)
    (folder / "rollout-compacted.jsonl").write_text(recording.compacted_rollout)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="codex-recording-") as temporary:
        made = record(Path(temporary))
        write_fixtures(made, Path(sys.argv[1]))
        print(" ".join(made.order))
