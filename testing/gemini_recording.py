"""A genuine Gemini CLI chat file, recorded with the pinned Gemini CLI and the scripted Gemini API.

:func:`record` plays one scripted session in a temporary home with no hooks: the prompt "Fix the
divide bug in calc.py", then ``read_file``, a ``replace`` that works, one whose ``old_string`` is not
in the file (the tool fails), a ``run_shell_command`` that exits 1, a ``write_file`` of ``NOTES.md``,
a reply; then ``--resume latest`` with "What did we fix?" and its reply. The Gemini CLI writes the
session to ``~/.gemini/tmp/<project>/chats/session-<time>-<id>.jsonl`` (beside it, ``.project_root``
names the working directory). ``python -m sessionmem.testing.gemini_recording DIR`` writes the chat
file and ``.project_root`` under ``DIR/tmp/project/`` with this machine's paths replaced by
``/home/user`` (HOME) and ``/home/user/project`` (the working directory): ``tests/fixtures/gemini``.

Resource handling:
    The scripted server and every Gemini CLI process end before :func:`record` returns (each run under
    a timeout); the temporary home lives in the caller's directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sessionmem.replay.convert import ConversionStats
from sessionmem.replay.gemini_chats import session_chats
from sessionmem.testing.gemini_api import Part, ScriptedGeminiAPI, default_parts, turn_parts

REPO = Path(__file__).resolve().parent.parent
GEMINI = REPO / "e2e" / "node_modules" / ".bin" / "gemini"
MODEL = "gemini-2.5-flash"  # named, so the CLI asks no router model which one to use
NEUTRAL_HOME = "/home/user"
FIRST_PROMPT = "Fix the divide bug in calc.py"
SECOND_PROMPT = "What did we fix?"
CALC = "def divide(a, b):\n    return a / b\n"
FIRST_TURN: tuple[Part, ...] = (
    {"functionCall": {"name": "read_file", "args": {"file_path": "calc.py"}}},
    {"functionCall": {"name": "replace", "args": {
        "file_path": "calc.py", "old_string": "    return a / b", "instruction": "reject zero",
        "new_string": "    if b == 0:\n        raise ZeroDivisionError('b is 0')\n    return a / b"}}},
    {"functionCall": {"name": "replace", "args": {
        "file_path": "calc.py", "old_string": "class Calculator:\n    precision = 10\n", "new_string": "",
        "instruction": "drop the unused class"}}},
    {"functionCall": {"name": "run_shell_command", "args": {
        "command": "python3 -c 'import calc; calc.divide(1, 0)'", "description": "Check the new error"}}},
    {"functionCall": {"name": "write_file", "args": {"file_path": "NOTES.md", "content": "divide() now rejects b == 0\n"}}},
)
FIRST_REPLY = "Done: divide() rejects zero."
SECOND_REPLY = "We fixed divide() in calc.py."
USER_SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "privacy": {"usageStatisticsEnabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
}
RUN_TIMEOUT_S = 180


def scripted_model(body: dict[str, Any]) -> list[Part]:
    """The model's side of the recorded session: :data:`FIRST_TURN` one call at a time, then the replies."""
    if not body.get("tools"):
        return default_parts(body)  # the CLI's side calls (next speaker, compression)
    prompt, done = turn_parts(body)
    if prompt == FIRST_PROMPT:
        return [FIRST_TURN[done]] if done < len(FIRST_TURN) else [{"text": FIRST_REPLY}]
    return [{"text": SECOND_REPLY}]


def record(root: Path) -> Path:
    """Play the recorded session with ``root`` as HOME (``root/project`` the working directory); returns the
    chat file the Gemini CLI wrote."""
    project = root / "project"
    project.mkdir(parents=True)
    (project / "calc.py").write_text(CALC)
    settings = root / ".gemini"
    settings.mkdir()
    (settings / "settings.json").write_text(json.dumps(USER_SETTINGS))
    (settings / "trustedFolders.json").write_text(json.dumps({str(project): "TRUST_FOLDER"}))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SESSIONMEM_", "ANTHROPIC_", "CLAUDE", "GEMINI_", "GOOGLE_", "GITHUB_SHA"))}
    with ScriptedGeminiAPI(responder=scripted_model) as api:
        env.update(HOME=str(root), GEMINI_API_KEY="scripted-key", GOOGLE_GEMINI_BASE_URL=api.url, NO_COLOR="1")
        session_id = ""
        for prompt in (FIRST_PROMPT, SECOND_PROMPT):
            # The first session's id, not `latest`: the CLI may not list a session it has just written yet.
            extra = ("--resume", session_id) if session_id else ()
            run = subprocess.run([str(GEMINI), "-p", prompt, "--yolo", "-m", MODEL, "--output-format", "json", *extra],
                                 cwd=project, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                                 stdin=subprocess.DEVNULL, check=True)
            session_id = session_id or json.loads(run.stdout)["session_id"]
    # The chat file is named after the session: session-<time>-<the id's first eight characters>.jsonl. The
    # resumed run may start a second, nearly empty, when the minute has changed: the backfill's choice is taken.
    chats = sorted((settings / "tmp").glob(f"*/chats/session-*-{session_id[:8]}.jsonl"))
    chosen = session_chats(chats, ConversionStats())
    assert list(chosen) == [session_id], f"expected the chat file of session {session_id}: {chats}"
    return chosen[session_id][0]


def write_fixture(chat: Path, home: Path, folder: Path) -> Path:
    """The chat file and its ``.project_root`` under ``folder/tmp/project/``, with ``home`` replaced by
    :data:`NEUTRAL_HOME` (as itself and as its real path: ``/tmp`` may be a link)."""
    target = folder / "tmp" / "project" / "chats" / chat.name
    target.parent.mkdir(parents=True, exist_ok=True)
    for source, destination in ((chat, target), (chat.parent.parent / ".project_root", target.parent.parent / ".project_root")):
        text = source.read_text()
        for path in sorted({str(home), str(home.resolve())}, key=len, reverse=True):
            text = text.replace(path, NEUTRAL_HOME)
        destination.write_text(text)
    return target


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="gemini-recording-") as temporary:
        home = Path(temporary) / "user"
        print(write_fixture(record(home), home, Path(sys.argv[1])))
