"""The README's promise under back-pressure: an event the worker cannot take is not lost.

A worker with a two-slot mailbox whose model stalls, and 50 real PostToolUse hook
processes for one session: the mailbox fills, the worker answers 503, the hooks wait
out ``Retry-After`` within their budget and then spool; when the model answers again,
the worker imports the spool. Every tool use is stored exactly once. The same when the
database is write-locked by another process: hooks run out of their budget and spool.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import apsw
import pytest

from sessionmem.testing.messages_api import ScriptedMessagesAPI
from sessionmem.testing.worker_process import WorkerProcess

from .test_hooks import assert_silent_success, run_hook

pytestmark = pytest.mark.slow

HOOKS = 50
SESSION = "backpressure-session"


def tool_use(n: int) -> dict[str, Any]:
    return {"session_id": SESSION, "cwd": "/work/bp", "hook_event_name": "PostToolUse", "tool_name": "Read",
            "tool_use_id": f"toolu_bp_{n:02d}", "tool_input": {"file_path": f"/work/bp/f{n}.py"},
            "tool_response": {"file": {"content": f"line {n}\n"}}}


def stored(data_dir: Path) -> dict[str, int]:
    connection = apsw.Connection(str(data_dir / "sessionmem.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return dict(connection.execute(
            "SELECT tool_use_id, count(*) FROM observations GROUP BY tool_use_id").fetchall())
    finally:
        connection.close()


def test_fifty_hooks_against_a_full_mailbox_lose_nothing(worker_factory: Callable[..., WorkerProcess],
                                                         messages_api: ScriptedMessagesAPI) -> None:
    messages_api.stall()
    worker = worker_factory(ANTHROPIC_API_KEY="sk-test-dummy", ANTHROPIC_BASE_URL=messages_api.url,
                            SESSIONMEM_COMPRESSOR="anthropic", SESSIONMEM_MAILBOX_SIZE=2, SESSIONMEM_BATCH_SIZE=4,
                            SESSIONMEM_BATCH_QUIET=0.05, SESSIONMEM_LLM_TIMEOUT=120)
    with ThreadPoolExecutor(max_workers=10) as pool:
        results = list(pool.map(lambda n: run_hook("PostToolUse", tool_use(n), worker.data_dir), range(HOOKS)))
    for result in results:
        assert_silent_success(result)  # never an error for Claude Code, whatever the worker said

    # While the model stalls, the mailbox is full: the worker refused, and the hooks spooled.
    debug = worker.get("/debug")
    assert debug["sessions"]["rejectedFull"] > 0
    log = (worker.data_dir / "hooks.log").read_text()
    assert log.count("event spooled (HTTP 503") > 0 and "lost" not in log and "refused" not in log
    # On a loaded machine a hook may also run out of its 2 s budget and spool for that.
    spooled = log.count("event spooled")
    assert len(stored(worker.data_dir)) < HOOKS

    messages_api.resume()
    worker.wait_until(lambda: not list((worker.data_dir / "spool").glob("*.json")), timeout=120)
    debug = worker.wait_idle(timeout=120)
    counts = stored(worker.data_dir)
    assert sorted(counts) == [f"toolu_bp_{n:02d}" for n in range(HOOKS)]
    assert set(counts.values()) == {1}  # exactly once: nothing lost, nothing twice
    assert debug["spool"]["imported"] + debug["spool"]["duplicates"] == spooled
    assert debug["spool"]["rejected"] == 0 and debug["journal"]["pending"] == 0
    print(f"\n{HOOKS} hooks: {debug['sessions']['rejectedFull']} answers 503, {spooled} events spooled and imported, "
          f"{len(counts)} stored, each {set(counts.values())} time(s)")


def test_hooks_against_a_locked_database_spool_and_lose_nothing(worker_factory: Callable[..., WorkerProcess]) -> None:
    """Another process holds SQLite's write lock for ~3 s (an open transaction in `sqlite3`, say): the
    journal cannot commit. Two events wait for it (/debug shows how long); hooks wait out their 2 s
    budget and spool; once the lock is gone the waiting events are stored, the spool is imported, and
    every tool use is stored exactly once."""
    worker = worker_factory(SESSIONMEM_BATCH_QUIET=0.05)
    assert worker.request("POST", "/api/sessions/observations", tool_use_body(0))[0] == 202
    blocker = apsw.Connection(str(worker.data_dir / "sessionmem.db"))
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with ThreadPoolExecutor(max_workers=12) as pool:
            # The first is taken into a transaction that waits for the lock; the second waits behind it.
            waiting = [pool.submit(worker.request, "POST", "/api/sessions/observations", tool_use_body(1))]
            time.sleep(0.2)
            waiting.append(pool.submit(worker.request, "POST", "/api/sessions/observations", tool_use_body(2)))
            worker.wait_until(lambda: worker.get("/debug")["store"]["writer"]["requestWaitMs"] > 300, timeout=4)
            hooks = list(pool.map(lambda n: run_hook("PostToolUse", tool_use(n), worker.data_dir), range(3, 11)))
            blocker.execute("ROLLBACK")  # within the writer's 5 s busy timeout: the hooks' budget is 2 s
            answered = [future.result()[0] for future in waiting]
    finally:
        blocker.close()
    assert answered == [202, 202]  # what waited was stored once the lock was gone
    for result in hooks:
        assert_silent_success(result)  # Claude Code never sees the worker's trouble

    log = (worker.data_dir / "hooks.log").read_text()
    assert log.count("event spooled") == 8 and "refused" not in log
    worker.wait_until(lambda: not list((worker.data_dir / "spool").glob("*.json")), timeout=60)
    debug = worker.wait_idle(timeout=60)
    counts = stored(worker.data_dir)
    assert sorted(counts) == [f"toolu_bp_{n:02d}" for n in range(11)] and set(counts.values()) == {1}
    assert debug["store"]["writer"]["requestWaitMs"] == 0  # nothing left counted as waiting
    assert debug["journal"]["pending"] == 0 and debug["spool"]["rejected"] == 0
    print(f"\n8 hooks spooled behind a locked database; {len(counts)} tool uses stored, each "
          f"{set(counts.values())} time(s)")


def tool_use_body(n: int) -> dict[str, Any]:
    hook = tool_use(n)
    return {"claudeSessionId": SESSION, "cwd": hook["cwd"], "tool_name": hook["tool_name"],
            "tool_use_id": hook["tool_use_id"], "tool_input": hook["tool_input"],
            "tool_response": hook["tool_response"]}
