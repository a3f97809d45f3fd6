"""A genuine OpenCode database, recorded with the pinned OpenCode and the scripted chat completions server.

:func:`record` plays scripted sessions with OpenCode run headless (``opencode run --auto``) in a
temporary home with no plugin: in ``project``, "Fix the divide bug in calc.py" -- a ``read`` of a
``README.md`` that does not exist (the tool fails), a ``read``, an ``edit``, a ``bash`` command that exits
1, a ``write`` of ``NOTES.md``, a reply; then, in the same session (``--session``), "Check the divide fix
then compact" -- a reply with a ``bash`` call whose usage all but fills the context, so OpenCode compacts
the session and goes on, then a last reply; then, in ``other``, a new session "What did we change last
time?": a ``task`` call, whose subagent (a session of its own, its ``parent_id`` the first's) runs ``ls``
and answers, then the reply. OpenCode 1.18.33 keeps them in the SQLite database
``$XDG_DATA_HOME/opencode/opencode.db`` (WAL). ``python -m sessionmem.testing.opencode_recording DIR``
writes ``DIR/opencode.db``: the database copied into one file (no WAL), this machine's paths replaced by
``/home/user`` (HOME): ``tests/fixtures/opencode``.

Resource handling:
    The scripted server and every OpenCode process end before :func:`record` returns (each run under a
    timeout); the temporary home lives in the caller's directory.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sessionmem.testing.chat_completions_api import Message, ScriptedChatCompletionsAPI, tool_call

REPO = Path(__file__).resolve().parent.parent
OPENCODE = REPO / "e2e" / "node_modules" / ".bin" / "opencode"
# What OpenCode installs into its config folder on a first start, pinned beside it (e2e/opencode-config).
CONFIG_DEPENDENCIES = REPO / "e2e" / "opencode-config" / "node_modules"
MODEL = "scripted/scripted-model"
NEUTRAL_HOME = "/home/user"
FIRST_PROMPT = "Fix the divide bug in calc.py"
SECOND_PROMPT = "Check the divide fix then compact"
OTHER_PROMPT = "What did we change last time?"
FIRST_REPLY = "Done: divide() rejects zero."
CHECKING = "Checking the divide fix first."
SECOND_REPLY = "The divide fix holds."
OTHER_REPLY = "We fixed divide() last time."
SUBAGENT_PROMPT = "List the files here and say what they are"
SUBAGENT_REPLY = "Only the notes."
SUMMARY = "divide() in calc.py rejects b == 0; NOTES.md says so."
TITLE = "Calc session"
CALC = "def add(a, b):\n    return a + b\n\n\ndef divide(a, b):\n    return a / b\n"
FAILING_COMMAND = "python3 -c 'import calc; calc.divide(1, 0)'"
RUN_TIMEOUT_S = 180


def user_config(base_url: str) -> dict[str, Any]:
    """OpenCode's configuration: the scripted model as an OpenAI-compatible provider (with a context window,
    so a session that overflows it is compacted), no update check, no sharing."""
    return {
        "$schema": "https://opencode.ai/config.json",
        "provider": {"scripted": {"npm": "@ai-sdk/openai-compatible", "name": "Scripted",
                                  "options": {"baseURL": base_url, "apiKey": "scripted-key"},
                                  "models": {"scripted-model": {"name": "Scripted",
                                                                "limit": {"context": 100_000, "output": 4_000}}}}},
        "model": MODEL, "autoupdate": False, "share": "disabled",
    }


def turn(body: dict[str, Any]) -> tuple[str, int]:
    """The user's prompt of the turn a request continues, and how many tool results followed it."""
    results = 0
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "tool":
            results += 1
        elif message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
            return str(content or ""), results
    return "", results


class ScriptedModel:
    """The model's side of the recorded sessions: each turn's steps, one a model request, chosen by its prompt."""

    def __init__(self, project: Path) -> None:
        self.project = project

    def steps(self, prompt: str) -> list[Message]:
        calc = str(self.project / "calc.py")
        if prompt == FIRST_PROMPT:
            return [
                {"content": None, "tool_calls": [tool_call("read", {"filePath": str(self.project / "README.md")})]},
                {"content": None, "tool_calls": [tool_call("read", {"filePath": calc})]},
                {"content": None, "tool_calls": [tool_call("edit", {
                    "filePath": calc, "oldString": "    return a / b",
                    "newString": "    if b == 0:\n        raise ZeroDivisionError('b is 0')\n    return a / b"})]},
                {"content": None, "tool_calls": [tool_call("bash", {"command": FAILING_COMMAND,
                                                                    "description": "Check the new error"})]},
                {"content": None, "tool_calls": [tool_call("write", {"filePath": "NOTES.md",
                                                                     "content": "divide() now rejects b == 0\n"})]},
                {"content": FIRST_REPLY},
            ]
        if prompt == SECOND_PROMPT:
            # The context reported all but full after this step: OpenCode compacts, then asks the model to go on.
            return [{"content": CHECKING, "prompt_tokens": 99_000,
                     "tool_calls": [tool_call("bash", {"command": "echo divide-checked", "description": "Check"})]}]
        if prompt.startswith("Continue"):  # the message OpenCode adds after a compaction
            return [{"content": SECOND_REPLY}]
        if prompt == SUBAGENT_PROMPT:
            return [{"content": None, "tool_calls": [tool_call("bash", {"command": "ls", "description": "List"})]},
                    {"content": SUBAGENT_REPLY}]
        return [{"content": None, "tool_calls": [tool_call("task", {
                    "description": "List the files", "prompt": SUBAGENT_PROMPT, "subagent_type": "general"})]},
                {"content": OTHER_REPLY}]

    def __call__(self, body: dict[str, Any]) -> Message:
        prompt, done = turn(body)
        if not body.get("tools"):  # OpenCode's side calls: the session's title, and a compaction's summary
            return {"content": SUMMARY if "<conversation>" in prompt else TITLE}
        steps = self.steps(prompt)
        return steps[done] if done < len(steps) else {"content": SECOND_REPLY}


def _pinned_version(package_json: Path) -> str:
    return str(json.loads(package_json.read_text())["version"])


def place_config_dependencies(home: Path) -> None:
    """Put the pinned ``@opencode-ai/plugin`` and its dependencies in ``home``'s OpenCode config folder.

    On its first start in a config folder OpenCode installs ``@opencode-ai/plugin`` at its own version
    there from the npm registry: 15-20 s of a busy machine's CPU, for every test home. With the same
    packages already in place it finds nothing to install. A copy, not a link: what OpenCode does in
    its folder stays out of the checkout.

    Error handling:
        :class:`FileNotFoundError` if ``make test`` has not installed the pin; :class:`ValueError` if the
        pin is not at the pinned OpenCode's version (OpenCode would install its own again).
    """
    if not CONFIG_DEPENDENCIES.is_dir():
        raise FileNotFoundError(f"{CONFIG_DEPENDENCIES} is missing: `make test` installs it (npm ci in "
                                "e2e/opencode-config)")
    plugin = _pinned_version(CONFIG_DEPENDENCIES / "@opencode-ai" / "plugin" / "package.json")
    opencode = _pinned_version(REPO / "e2e" / "node_modules" / "opencode-ai" / "package.json")
    if plugin != opencode:
        raise ValueError(f"e2e/opencode-config pins @opencode-ai/plugin {plugin}, but OpenCode is {opencode}: "
                         "pin the same version in both package.json files")
    shutil.copytree(CONFIG_DEPENDENCIES, home / ".config" / "opencode" / "node_modules", symlinks=True,
                    dirs_exist_ok=True)


def configure(home: Path, base_url: str) -> None:
    """``home``'s OpenCode configured for the scripted model at ``base_url`` (:func:`user_config`), with what
    it would install on a first start already in place (:func:`place_config_dependencies`)."""
    folder = home / ".config" / "opencode"
    folder.mkdir(parents=True)
    (folder / "opencode.json").write_text(json.dumps(user_config(base_url)))
    place_config_dependencies(home)


def environment(home: Path, cwd: Path) -> dict[str, str]:
    """OpenCode's environment: ``home`` as HOME and the XDG folders under it, ``cwd`` as PWD (OpenCode takes
    its folder from PWD)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SESSIONMEM_", "ANTHROPIC_", "CLAUDE", "OPENCODE", "OPENAI_", "XDG_"))}
    env.update(PWD=str(cwd), HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"),
               XDG_DATA_HOME=str(home / ".local" / "share"), XDG_CACHE_HOME=str(home / ".cache"),
               XDG_STATE_HOME=str(home / ".local" / "state"), OPENCODE_DISABLE_AUTOUPDATE="1", NO_COLOR="1")
    return env


def run(home: Path, cwd: Path, prompt: str, session_id: str = "") -> str:
    """One headless ``opencode run`` of ``prompt`` in ``cwd`` (continuing ``session_id``); returns the session's id."""
    resume = ["--session", session_id] if session_id else []
    # The prompt word by word: OpenCode puts a message argument that holds spaces in quotes.
    result = subprocess.run([str(OPENCODE), "run", "--auto", "--format", "json", "-m", MODEL, *resume, *prompt.split()],
                            cwd=cwd, env=environment(home, cwd), capture_output=True, text=True,
                            timeout=RUN_TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, f"opencode failed: {result.stdout[-2000:]} {result.stderr[-2000:]}"
    ids = {json.loads(line).get("sessionID") for line in result.stdout.splitlines() if line.startswith("{")} - {None}
    assert len(ids) == 1, result.stdout[-2000:]
    return str(ids.pop())


def record(home: Path) -> Path:
    """Play the recorded sessions with ``home`` as HOME (``home/project`` and ``home/other`` the working
    directories); returns the database OpenCode wrote (``home/.local/share/opencode``)."""
    project, other = home / "project", home / "other"
    for folder in (project, other):
        folder.mkdir(parents=True)
    (project / "calc.py").write_text(CALC)
    with ScriptedChatCompletionsAPI(responder=ScriptedModel(project)) as api:
        configure(home, api.url)
        first = run(home, project, FIRST_PROMPT)
        run(home, project, SECOND_PROMPT, first)
        run(home, other, OTHER_PROMPT)
    return home / ".local" / "share" / "opencode" / "opencode.db"


def write_fixture(database: Path, home: Path, folder: Path) -> Path:
    """``database`` as ``folder/opencode.db``: one file (its WAL folded in), ``home`` replaced by
    :data:`NEUTRAL_HOME` in every text column (as itself and its real path, each also without its leading
    ``/``, as OpenCode writes a session's ``path`` and a tool's ``title``)."""
    target = folder / "opencode.db"
    folder.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    source = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    copy = sqlite3.connect(target)
    try:
        source.backup(copy)
        copy.execute("PRAGMA journal_mode = DELETE")
        swaps = [(path, NEUTRAL_HOME) for path in sorted({str(home), str(home.resolve())}, key=len, reverse=True)]
        swaps += [(path.lstrip("/"), NEUTRAL_HOME.lstrip("/")) for path, _ in swaps]
        tables = [name for (name,) in copy.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        with copy:
            for table in tables:
                columns = [row[1] for row in copy.execute(f'PRAGMA table_info("{table}")')
                           if str(row[2]).lower() == "text"]
                for column in columns:
                    for old, new in swaps:
                        copy.execute(f'UPDATE "{table}" SET "{column}" = replace("{column}", ?, ?)', (old, new))
        copy.execute("VACUUM")
    finally:
        copy.close()
        source.close()
    return target


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="opencode-recording-") as temporary:
        home = Path(temporary) / "user"
        print(write_fixture(record(home), home, Path(sys.argv[1])))
