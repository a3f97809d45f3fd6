"""The README's promise under back-pressure: an event the worker cannot take is not lost.

A worker with a two-slot mailbox whose model stalls, and 50 real PostToolUse hook
processes for one session: the mailbox fills, and each hook either waits out a 503's
``Retry-After`` or runs out of its budget, then spools; once one event is spooled the
later hooks queue behind it without asking the worker. Which of these paths a hook takes
depends on how fast the machine is; the promise does not: every hook exits 0 silently
within its budget, and when the model answers again the worker imports the spool and
every tool use is stored exactly once. The 503 path itself is shown on its own with the
mailbox held full. The same promise holds when the database is write-locked by another
process: hooks run out of their budget and spool.
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
# A hook's hard timer: its HTTP budget (``hook_timeout_s``, 2 s) and one second more (hooks/run.py).
HOOK_DEADLINE_S = 3.0
# Starting the interpreter is outside that timer: ten hook processes at once on a busy two-core
# machine take up to a few seconds to start; a hook that hung on the worker would take 30 s.
START_SLACK_S = 5.0


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


def timed_hook(n: int, data_dir: Path, **env: str) -> tuple[Any, float]:
    started = time.monotonic()
    result = run_hook("PostToolUse", tool_use(n), data_dir, **env)
    return result, time.monotonic() - started


def stalled_worker(worker_factory: Callable[..., WorkerProcess], messages_api: ScriptedMessagesAPI) -> WorkerProcess:
    """A worker whose model stalls, with a two-slot mailbox per session."""
    messages_api.stall()
    return worker_factory(SESSIONMEM_ANTHROPIC_API_KEY="sk-test-dummy", SESSIONMEM_ANTHROPIC_BASE_URL=messages_api.url,
                          SESSIONMEM_COMPRESSOR="anthropic", SESSIONMEM_MAILBOX_SIZE=2, SESSIONMEM_BATCH_SIZE=4,
                          SESSIONMEM_BATCH_QUIET=0.05, SESSIONMEM_LLM_TIMEOUT=120)


def test_fifty_hooks_against_a_full_mailbox_lose_nothing(worker_factory: Callable[..., WorkerProcess],
                                                         messages_api: ScriptedMessagesAPI) -> None:
    worker = stalled_worker(worker_factory, messages_api)
    with ThreadPoolExecutor(max_workers=10) as pool:
        results = list(pool.map(lambda n: timed_hook(n, worker.data_dir), range(HOOKS)))
    for result, took in results:
        assert_silent_success(result)  # never an error for Claude Code, whatever the worker said
        assert took < HOOK_DEADLINE_S + START_SLACK_S, took

    # While the model stalls the worker cannot take them all: what it did not take was spooled, not
    # lost or refused (whether after a 503, a timeout, or behind earlier spooled events).
    log = (worker.data_dir / "hooks.log").read_text()
    assert "lost" not in log and "refused" not in log
    spooled = log.count("event spooled")
    assert spooled > 0 and len(stored(worker.data_dir)) < HOOKS

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


def test_a_hook_answered_503_spools_and_the_event_is_stored_once(worker_factory: Callable[..., WorkerProcess],
                                                                 messages_api: ScriptedMessagesAPI) -> None:
    """The 503 path, whatever the machine's speed: the mailbox is filled until the worker refuses,
    and held full by the stalled model; a hook then meets the 503. Its budget (1 s) is shorter
    than ``Retry-After`` (1 s) plus the time the answer took, so it spools at once."""
    worker = stalled_worker(worker_factory, messages_api)
    accepted = 0
    while (status := worker.request("POST", "/api/sessions/observations", tool_use_body(accepted), timeout=30)[0]) == 202:
        accepted += 1
        assert accepted < 20, "the mailbox never filled"
    assert status == 503 and worker.get("/debug")["sessions"]["rejectedFull"] == 1
    hook = accepted + 1
    result, _ = timed_hook(hook, worker.data_dir, SESSIONMEM_HOOK_TIMEOUT="1")
    assert_silent_success(result)
    log = (worker.data_dir / "hooks.log").read_text()
    assert log.count("event spooled (HTTP 503") == 1 and "lost" not in log, log
    assert worker.get("/debug")["sessions"]["rejectedFull"] == 2

    messages_api.resume()
    worker.wait_until(lambda: not list((worker.data_dir / "spool").glob("*.json")), timeout=120)
    assert worker.request("POST", "/api/sessions/observations", tool_use_body(accepted), timeout=30)[0] == 202
    debug = worker.wait_idle(timeout=120)
    counts = stored(worker.data_dir)
    assert sorted(counts) == [f"toolu_bp_{n:02d}" for n in range(hook + 1)] and set(counts.values()) == {1}
    assert debug["spool"]["imported"] == 1 and debug["spool"]["rejected"] == 0


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
            worker.wait_until(lambda: worker.get("/debug")["store"]["writer"]["requestWaitMs"] > 300, timeout=10)
            hooks = list(pool.map(lambda n: run_hook("PostToolUse", tool_use(n), worker.data_dir), range(3, 11)))
            blocker.execute("ROLLBACK")  # usually within the writer's 5 s busy timeout: the hooks' budget is 2 s
            answered = [future.result()[0] for future in waiting]
    finally:
        blocker.close()
    for result in hooks:
        assert_silent_success(result)  # Claude Code never sees the worker's trouble
    # What waited is stored once the lock is gone (202). Should the hooks' start on a busy machine
    # keep the lock past the writer's busy timeout, the worker refuses instead (503, nothing half
    # written) and the client sends it again, as every client does.
    assert set(answered) <= {202, 503}, answered
    for n, status in zip((1, 2), answered, strict=True):
        if status == 503:
            worker.wait_until(lambda n=n: worker.request("POST", "/api/sessions/observations",
                                                         tool_use_body(n))[0] == 202, timeout=60, interval=1)

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
