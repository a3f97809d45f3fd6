"""Gemini CLI transcripts: a chat file the pinned Gemini CLI wrote, played back as the hook payloads the CLI fires
and backfilled into a real worker (`sessionmem backfill --agent gemini-cli`), idempotently; recording again with
the pinned CLI plays back the same session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sessionmem.replay.convert import ConversionStats, read_entries
from sessionmem.replay.gemini_chats import chat_files, chat_messages, chat_payloads, convert_chats, project_root
from sessionmem.testing.gemini_recording import (
    FIRST_PROMPT,
    FIRST_REPLY,
    GEMINI,
    SECOND_PROMPT,
    SECOND_REPLY,
    record,
)
from sessionmem.testing.worker_process import start_worker

from .conftest import FIXTURES

CHATS = FIXTURES / "gemini" / "tmp"
[CHAT] = sorted(CHATS.glob("*/chats/session-*.jsonl"))
PROJECT = "/home/user/project"


def outline(chats: list[Path]) -> list[tuple[str, Any]]:
    """What each contract event says, in order: the prompt, the tool and its file or command, the reply."""
    [session] = convert_chats(chats)
    said = []
    for event in session.events:
        payload = event.payload
        tool_input = payload.get("tool_input") or {}
        said.append((event.stage, payload.get("prompt") if event.stage == "UserPromptSubmit" else
                     payload.get("last_assistant_message") if event.stage == "Stop" else
                     (payload["tool_name"], tool_input.get("file_path") or tool_input.get("command"))
                     if "tool_name" in payload else None))
    return said


EXPECTED = [
    ("SessionStart", None),
    ("UserPromptSubmit", FIRST_PROMPT),
    ("PostToolUse", ("Read", f"{PROJECT}/calc.py")),
    ("PostToolUse", ("Edit", f"{PROJECT}/calc.py")),
    ("PostToolUseFailure", ("Edit", f"{PROJECT}/calc.py")),  # its old_string is not in the file
    ("PostToolUseFailure", ("Bash", "python3 -c 'import calc; calc.divide(1, 0)'")),  # exit code 1
    ("PostToolUse", ("Write", f"{PROJECT}/NOTES.md")),
    ("Stop", FIRST_REPLY),
    ("UserPromptSubmit", SECOND_PROMPT),  # resumed: the history the CLI rewrote is not played twice
    ("Stop", SECOND_REPLY),
    ("SessionEnd", None),
]


def test_a_chat_file_plays_back_as_the_sessions_prompts_tool_uses_and_replies() -> None:
    stats = ConversionStats()
    [session] = convert_chats(chat_files(CHATS), stats)
    assert session.cwd == PROJECT == project_root(CHAT)
    assert session.session_id == json.loads(CHAT.read_text().splitlines()[0])["sessionId"]
    assert outline([CHAT]) == EXPECTED
    failed = [e.payload for e in session.events if e.stage == "PostToolUseFailure"]
    assert failed[0]["error"].startswith("Could not find an exact match for 'old_string'")
    assert failed[1]["error"].startswith("Exit code 1\n") and "ZeroDivisionError: b is 0" in failed[1]["error"]
    assert (stats.prompts, stats.tool_uses, stats.failed_tool_uses, stats.stops) == (2, 5, 2, 2)
    assert len({e.key for e in session.events}) == len(session.events)  # a key of its own each


def test_the_payloads_have_the_shapes_the_gemini_cli_sends() -> None:
    """Before the adapter, each payload has the fields of the one the CLI's hook of that event receives."""
    stats = ConversionStats()
    session_id, messages = chat_messages(list(read_entries(CHAT, stats)))
    payloads = {name: payload for _, name, _, payload in chat_payloads(session_id, messages, PROJECT, str(CHAT), stats)}
    hooks = FIXTURES / "gemini" / "hooks"
    for name, fixture in (("SessionStart", "SessionStart"), ("BeforeAgent", "BeforeAgent"),
                          ("AfterTool", "AfterTool-write_file"), ("AfterAgent", "AfterAgent"), ("SessionEnd", "SessionEnd")):
        live = json.loads((hooks / f"{fixture}.json").read_text())
        assert set(live) <= set(payloads[name]), name
        if name == "AfterTool":
            assert set(live["tool_response"]) <= set(payloads[name]["tool_response"])


def test_broken_lines_are_counted_never_fatal(tmp_path: Path) -> None:
    chats = tmp_path / "project" / "chats"
    chats.mkdir(parents=True)
    lines = CHAT.read_text().splitlines(keepends=True)
    (chats / CHAT.name).write_text("".join(lines[:3]) + "{broken\n" + "".join(lines[3:]) + '{"id": "cut')
    (tmp_path / "project" / ".project_root").write_text(PROJECT)
    stats = ConversionStats()
    assert outline([chats / CHAT.name]) == EXPECTED
    convert_chats(chat_files(tmp_path), stats)
    assert stats.broken_lines == 2


def test_a_resumed_session_is_played_from_the_file_that_holds_it(tmp_path: Path) -> None:
    """Resuming, the pinned Gemini CLI may start a file of its own, named after the minute it resumed (a header
    and the session context only), and go on writing in the first: the session is the first file's, though the
    other's name sorts last. A later file that holds the whole conversation again is as good."""
    chats = tmp_path / "project" / "chats"
    chats.mkdir(parents=True)
    (tmp_path / "project" / ".project_root").write_text(PROJECT)
    lines = CHAT.read_text().splitlines(keepends=True)
    (chats / CHAT.name).write_text("".join(lines))
    stray = chats / CHAT.name.replace("T08-00-", "T08-01-")
    stray.write_text("".join(lines[:2]))
    assert [len(messages) for _, messages in [chat_messages(list(read_entries(stray, ConversionStats())))]] == [1]
    assert outline(chat_files(tmp_path)) == EXPECTED
    (chats / CHAT.name.replace("T08-00-", "T08-02-")).write_text("".join(lines))
    assert outline(chat_files(tmp_path)) == EXPECTED


@pytest.mark.slow
def test_backfill_of_gemini_cli_chats_is_complete_and_idempotent(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONMEM_")}

    def backfill(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "sessionmem", "backfill", "--no-wait", "--agent", "gemini-cli",
                               *args], env={**env, "SESSIONMEM_DATA_DIR": str(worker.data_dir)},
                              capture_output=True, text=True, timeout=120)

    with start_worker(tmp_path / "data", env={"SESSIONMEM_COMPRESSOR": "offline", "SESSIONMEM_EMBEDDER": "none"}) as worker:
        first = backfill(str(CHATS))
        assert first.returncode == 0, first.stdout + first.stderr
        assert "sessionmem: Gemini CLI: 1 session(s) from 1 file(s): 2 prompts, 5 tool uses" in first.stdout
        worker.wait_idle()
        observations = worker.get("/api/observations?limit=100")["observations"]
        assert sorted((o["toolName"], o["failed"], tuple(o["filesModified"])) for o in observations) == [
            ("Bash", True, ()),
            ("Edit", False, (f"{PROJECT}/calc.py",)), ("Edit", True, (f"{PROJECT}/calc.py",)),
            ("Read", False, ()),
            ("Write", False, (f"{PROJECT}/NOTES.md",)),
        ]
        [session] = worker.get("/api/sessions")["sessions"]
        assert (session["promptCounter"], session["status"], session["cwd"]) == (2, "completed", PROJECT)
        assert session["agent"] == "gemini-cli"
        assert sorted(s["request"] for s in worker.get("/api/summaries")["summaries"]) == sorted(
            [FIRST_PROMPT, SECOND_PROMPT])

        again = backfill(str(CHATS))
        assert again.returncode == 0 and " 0 new" in again.stdout, again.stdout + again.stderr
        worker.wait_idle()
        assert len(worker.get("/api/observations?limit=100")["observations"]) == len(observations)
        assert len(worker.get("/api/summaries")["summaries"]) == 2

        # Its default: ~/.gemini/tmp of the user running it.
        home = tmp_path / "home"
        (home / ".gemini").mkdir(parents=True)
        (home / ".gemini" / "tmp").symlink_to(CHATS.resolve())
        default = subprocess.run([sys.executable, "-m", "sessionmem", "backfill", "--no-wait", "--agent", "gemini-cli"],
                                 env={**env, "HOME": str(home), "SESSIONMEM_DATA_DIR": str(worker.data_dir)},
                                 capture_output=True, text=True, timeout=120)
        assert default.returncode == 0 and "Gemini CLI: 1 session(s)" in default.stdout and " 0 new" in default.stdout


@pytest.mark.slow
@pytest.mark.xdist_group("gemini")
def test_the_fixture_is_what_the_pinned_gemini_cli_writes(tmp_path: Path) -> None:
    if not GEMINI.exists():
        pytest.fail(f"{GEMINI} is missing: `make test` installs the pinned Gemini CLI (npm ci in e2e/)")
    fresh = record(tmp_path / "user")
    expected = [(stage, tuple(s.replace(PROJECT, str(tmp_path / "user" / "project")) for s in said)
                 if isinstance(said, tuple) else said) for stage, said in EXPECTED]
    assert outline([fresh]) == expected
