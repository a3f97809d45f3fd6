"""OpenCode's stored sessions: the database the pinned OpenCode wrote, played back as the payloads sessionmem's
plugin sends and backfilled into a real worker (`sessionmem backfill --agent opencode`), idempotently, read
while OpenCode writes to it; a database the pinned OpenCode writes in the test plays back the same."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sessionmem.replay.convert import ConversionStats
from sessionmem.replay.opencode_sessions import (
    convert_sessions,
    data_dir,
    database_files,
    default_root,
    read_database,
    session_payloads,
)
from sessionmem.testing.opencode_recording import (
    CHECKING,
    FAILING_COMMAND,
    FIRST_PROMPT,
    FIRST_REPLY,
    OPENCODE,
    OTHER_PROMPT,
    OTHER_REPLY,
    SECOND_PROMPT,
    SECOND_REPLY,
    SUBAGENT_PROMPT,
    SUBAGENT_REPLY,
    record,
)
from sessionmem.testing.worker_process import start_worker

from .conftest import FIXTURES

RECORDED = FIXTURES / "opencode"
DATABASE = RECORDED / "opencode.db"
HOOKS = RECORDED / "hooks"
HOME = "/home/user"


def outline(paths: list[Path], home: str = HOME) -> list[tuple[str, str, list[tuple[str, Any]]]]:
    """Each session's folder and what each of its contract events says: the prompt, the tool and its file or
    command, the reply, the source or trigger."""
    said = []
    for session in convert_sessions(paths):
        events = []
        for event in session.events:
            payload = event.payload
            tool_input = payload.get("tool_input") or {}
            events.append((event.stage, payload.get("prompt") if event.stage == "UserPromptSubmit" else
                           payload.get("last_assistant_message") if event.stage in ("Stop", "PreCompact") else
                           payload.get("source") if event.stage == "SessionStart" else
                           (payload["tool_name"], tool_input.get("file_path") or tool_input.get("command")
                            or tool_input.get("description"))
                           if "tool_name" in payload else None))
        said.append((session.session_id[:4], session.cwd.replace(home, HOME), [
            (stage, tuple(s.replace(home, HOME) for s in what) if isinstance(what, tuple) else what)
            for stage, what in events]))
    return said


PROJECT = f"{HOME}/project"
EXPECTED = [
    ("ses_", PROJECT, [
        ("SessionStart", "startup"),
        ("UserPromptSubmit", FIRST_PROMPT),
        ("PostToolUseFailure", ("Read", f"{PROJECT}/README.md")),  # there is none: the tool threw
        ("PostToolUse", ("Read", f"{PROJECT}/calc.py")),
        ("PostToolUse", ("Edit", f"{PROJECT}/calc.py")),
        ("PostToolUseFailure", ("Bash", FAILING_COMMAND)),  # exit code 1
        ("PostToolUse", ("Write", f"{PROJECT}/NOTES.md")),  # a relative filePath, made absolute
        ("Stop", FIRST_REPLY),
        ("UserPromptSubmit", SECOND_PROMPT),  # the same session, continued
        ("PostToolUse", ("Bash", "echo divide-checked")),
        ("PreCompact", CHECKING),  # the turn so far, not the summary OpenCode wrote
        ("SessionStart", "compact"),
        ("Stop", SECOND_REPLY),  # the request to go on OpenCode wrote itself is nobody's prompt
        ("SessionEnd", None),
    ]),
    ("ses_", f"{HOME}/other", [
        ("SessionStart", "startup"),
        ("UserPromptSubmit", OTHER_PROMPT),
        ("PostToolUse", ("task", "List the files")),  # a subagent's work, in a session of its own
        ("Stop", OTHER_REPLY),
        ("SessionEnd", None),
    ]),
    ("ses_", f"{HOME}/other", [  # the subagent's: no SessionStart, as the plugin asks no memory for it
        ("UserPromptSubmit", SUBAGENT_PROMPT),
        ("PostToolUse", ("Bash", "ls")),
        ("Stop", SUBAGENT_REPLY),
        ("SessionEnd", None),
    ]),
]


def test_the_database_plays_back_as_each_sessions_prompts_tool_uses_and_replies() -> None:
    stats = ConversionStats()
    sessions = convert_sessions(database_files(RECORDED), stats)
    assert outline([DATABASE]) == EXPECTED
    assert [s.session_id for s in sessions] == [s.id for s in read_database(DATABASE, ConversionStats())]
    failed = [e.payload for e in sessions[0].events if e.stage == "PostToolUseFailure"]
    assert failed[0]["error"] == f"File not found: {PROJECT}/README.md"
    assert failed[1]["error"].startswith("Exit code 1\n") and "ZeroDivisionError: b is 0" in failed[1]["error"]
    assert {e.payload["session_id"] for s in sessions for e in s.events} == {s.session_id for s in sessions}
    assert (stats.sessions, stats.prompts, stats.tool_uses, stats.failed_tool_uses, stats.stops, stats.compactions,
            stats.broken_lines, stats.broken_files) == (3, 4, 8, 2, 4, 1, 0, 0)
    keys = [e.key for s in sessions for e in s.events]
    assert len(set(keys)) == len(keys)  # a key of its own each: run twice, nothing is stored twice
    checkpoint = next(e.payload for e in sessions[0].events if e.stage == "PreCompact")
    assert (checkpoint["trigger"], checkpoint["last_user_message"]) == ("auto", SECOND_PROMPT)
    times = [e.at for e in sessions[0].events]
    assert times == sorted(times) and times[0] > 1.7e9  # OpenCode's own times (ms), in seconds


def test_the_payloads_are_the_ones_the_plugin_sends() -> None:
    """Before the adapter, each payload has exactly the fields of the one the live plugin sent for that event
    (tests/fixtures/opencode/hooks), and the same values where the session is the same."""
    stats = ConversionStats()
    first = read_database(DATABASE, stats)[0]
    played: dict[str, dict[str, Any]] = {}
    for _, stage, _, payload in session_payloads(first, stats):
        name = stage
        if stage == "PostToolUse":
            name = f"PostToolUse-{payload['tool_name']}" + ("-failed" if "error" in payload else "")
        played.setdefault(name, payload)
    for fixture in sorted(HOOKS.glob("*.json")):
        # The live session ran the same scripted turn in /home/user/calcproj.
        live = json.loads(fixture.read_text().replace("/home/user/calcproj", PROJECT))
        mine = played[fixture.stem]
        assert set(mine) == set(live), fixture.name
        assert {k: v for k, v in mine.items() if k not in ("session_id", "tool_use_id")} == {
            k: v for k, v in live.items() if k not in ("session_id", "tool_use_id")}, fixture.name
    assert played["PostToolUse-bash"]["exit_code"] == 1


def test_bad_records_and_files_are_counted_never_fatal(tmp_path: Path) -> None:
    copy = tmp_path / "opencode.db"
    shutil.copy(DATABASE, copy)
    with sqlite3.connect(copy) as db:
        parts = {json.loads(data).get("tool"): (part_id, data) for part_id, data in db.execute(
            "SELECT id, data FROM part WHERE data LIKE '%\"type\":\"tool\"%' ORDER BY id")}
        db.execute("UPDATE part SET data = '{\"type\": \"tool\", \"tool\": ' WHERE id = ?", (parts["edit"][0],))
        running = json.loads(parts["write"][1])
        running["state"] = {"status": "running", "input": running["state"]["input"]}  # an interrupted session
        db.execute("UPDATE part SET data = ? WHERE id = ?", (json.dumps(running), parts["write"][0]))
        db.execute("UPDATE message SET data = '[]' WHERE id = (SELECT id FROM message ORDER BY id DESC LIMIT 1)")
    (tmp_path / "opencode-dev.db").write_bytes(b"not a database, whatever its name says")
    (tmp_path / "opencode-old.db").write_bytes(b"")  # an empty file is a database without OpenCode's tables
    stats = ConversionStats()
    sessions = convert_sessions(database_files(tmp_path), stats)
    assert (stats.files, stats.broken_files, stats.broken_lines, stats.unpaired_tool_uses) == (3, 2, 2, 1)
    tools = [e.payload["tool_name"] for e in sessions[0].events if "tool_name" in e.payload]
    assert tools == ["Read", "Read", "Bash", "Bash"]  # the broken edit and the unfinished write left out
    assert len(sessions) == 3


def test_the_database_is_read_while_opencode_writes_to_it(tmp_path: Path) -> None:
    """OpenCode keeps its database in WAL mode: a writer's open transaction holds the backfill up for no time,
    and what it has not committed is not read."""
    copy = tmp_path / "opencode.db"
    shutil.copy(DATABASE, copy)
    writer = sqlite3.connect(copy, isolation_level=None)
    try:
        assert writer.execute("PRAGMA journal_mode = WAL").fetchone() == ("wal",)
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("DELETE FROM part")
        started = time.monotonic()
        stats = ConversionStats()
        sessions = convert_sessions([copy], stats)
        assert time.monotonic() - started < 1.5  # under the busy timeout: it never waited for the writer
        assert stats.broken_files == 0 and stats.tool_uses == 8 and len(sessions) == 3
        writer.execute("ROLLBACK")
    finally:
        writer.close()
    assert read_database(copy, ConversionStats())[0].messages  # and OpenCode's file is as it left it


def test_the_default_is_opencodes_data_folder() -> None:
    assert data_dir({"HOME": "/home/u"}) == Path("/home/u/.local/share/opencode")  # macOS too: OpenCode's XDG layout
    assert data_dir({"HOME": "/home/u", "XDG_DATA_HOME": "/data"}) == Path("/data/opencode")
    assert default_root({"HOME": "/home/u", "OPENCODE_DB": "/elsewhere/my.db"}) == Path("/elsewhere/my.db")
    assert default_root({"HOME": "/home/u", "OPENCODE_DB": "mine.db"}) == Path("/home/u/.local/share/opencode/mine.db")
    assert database_files(DATABASE) == [DATABASE]


def backfill(data_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONMEM_", "XDG_", "OPENCODE"))}
    return subprocess.run([sys.executable, "-m", "sessionmem", "backfill", "--no-wait", "--agent", "opencode", *args],
                          env={**clean, "SESSIONMEM_DATA_DIR": str(data_dir), **env},
                          capture_output=True, text=True, timeout=120)


def stored(worker: Any, project: str) -> tuple[list[tuple[str, bool, tuple[str, ...]]], list[dict[str, Any]]]:
    """The worker's observations (tool, failed, files modified) and sessions, once it is idle."""
    worker.wait_idle()
    observations = worker.get("/api/observations?limit=100")["observations"]
    assert {o["agent"] for o in observations} == {"opencode"}
    return (sorted((o["toolName"], o["failed"], tuple(f.replace(project, PROJECT) for f in o["filesModified"]))
                   for o in observations), worker.get("/api/sessions")["sessions"])


STORED = [
    ("Bash", False, ()), ("Bash", False, ()), ("Bash", True, ()),  # the command that exited 1
    ("Edit", False, (f"{PROJECT}/calc.py",)),
    ("Read", False, ()), ("Read", True, ()),  # the README.md that does not exist
    ("Write", False, (f"{PROJECT}/NOTES.md",)),
    ("task", False, ()),
]


@pytest.mark.slow
def test_backfill_of_the_recorded_database_is_complete_and_idempotent(tmp_path: Path) -> None:
    with start_worker(tmp_path / "data", env={"SESSIONMEM_COMPRESSOR": "offline", "SESSIONMEM_EMBEDDER": "none"}) as worker:
        first = backfill(worker.data_dir, str(DATABASE))
        assert first.returncode == 0, first.stdout + first.stderr
        assert "sessionmem: OpenCode: 3 session(s) from 1 file(s): 4 prompts, 8 tool uses" in first.stdout
        assert "0 refused" in first.stdout and "0 lost" in first.stdout
        observations, sessions = stored(worker, PROJECT)
        assert observations == STORED
        assert sorted((s["cwd"], s["promptCounter"], s["status"], s["agent"]) for s in sessions) == [
            (f"{HOME}/other", 1, "completed", "opencode"), (f"{HOME}/other", 1, "completed", "opencode"),
            (PROJECT, 2, "completed", "opencode")]
        summaries = worker.get("/api/summaries")["summaries"]
        assert len(summaries) == 5  # four turns and the checkpoint at the compaction
        assert {s["request"] for s in summaries} == {FIRST_PROMPT, SECOND_PROMPT, OTHER_PROMPT, SUBAGENT_PROMPT}

        again = backfill(worker.data_dir, str(RECORDED))
        assert again.returncode == 0 and " 0 new" in again.stdout, again.stdout + again.stderr
        assert stored(worker, PROJECT)[0] == STORED
        assert len(worker.get("/api/summaries")["summaries"]) == len(summaries)


@pytest.mark.slow
@pytest.mark.xdist_group("opencode")
def test_a_database_the_pinned_opencode_writes_is_played_back_and_backfilled(tmp_path: Path) -> None:
    """The pinned OpenCode writes the sessions now (the fixture is what it writes); backfill finds them where
    OpenCode keeps them, in the database as it left it."""
    if not OPENCODE.exists():
        pytest.fail(f"{OPENCODE} is missing: `make test` installs the pinned OpenCode (npm ci in e2e/)")
    home = tmp_path / "user"
    fresh = record(home)  # the database as OpenCode left it (WAL mode), not a copy
    assert outline([fresh], str(home)) == EXPECTED
    with start_worker(tmp_path / "data", env={"SESSIONMEM_COMPRESSOR": "offline", "SESSIONMEM_EMBEDDER": "none"}) as worker:
        run = backfill(worker.data_dir, XDG_DATA_HOME=str(home / ".local" / "share"))  # its default
        assert run.returncode == 0, run.stdout + run.stderr
        assert "sessionmem: OpenCode: 3 session(s) from 1 file(s): 4 prompts, 8 tool uses" in run.stdout
        assert stored(worker, str(home / "project"))[0] == STORED
