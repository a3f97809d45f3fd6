"""The README's promise under back-pressure: an event the worker cannot take is not lost.

A worker with a two-slot mailbox whose model stalls, and 50 real PostToolUse hook
processes for one session: the mailbox fills, the worker answers 503, the hooks wait
out ``Retry-After`` within their budget and then spool; when the model answers again,
the worker imports the spool. Every tool use is stored exactly once.
"""

from __future__ import annotations

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
