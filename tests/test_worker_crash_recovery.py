"""Acceptance 4: kill -9 during a burst; after restart every accepted observation is stored exactly once."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest

from sessionmem.testing.worker_process import WorkerProcess

pytestmark = pytest.mark.slow

SESSIONS = 16
PLANNED = 3200
KILL_AFTER = 2000


def burst(worker: WorkerProcess, accepted: list[str], sent: list[str], kill_now: threading.Event) -> None:
    """Post observations from several threads until the worker dies or all are sent."""
    lock = threading.Lock()
    counter = iter(range(PLANNED))
    token = worker.token

    def sender() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", worker.port, timeout=5)
        while True:
            with lock:
                n = next(counter, None)
            if n is None:
                return
            tool_use_id = f"toolu_burst_{n:05d}"
            body = json.dumps({
                "claudeSessionId": f"burst-{n % SESSIONS}", "cwd": "/work/burst", "tool_name": "Bash",
                "tool_input": {"command": f"echo {n}"}, "tool_response": {"stdout": str(n)},
                "tool_use_id": tool_use_id,
            })
            with lock:
                sent.append(tool_use_id)
            try:
                connection.request("POST", "/api/sessions/observations", body,
                                   {"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
                response = connection.getresponse()
                response.read()
            except (OSError, http.client.HTTPException):
                return  # the worker is gone
            if response.status == 202:
                with lock:
                    accepted.append(tool_use_id)
                    if len(accepted) >= KILL_AFTER:
                        kill_now.set()

    threads = [threading.Thread(target=sender) for _ in range(8)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 120
    while not kill_now.wait(0.1) and any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        pass
    worker.kill()
    for thread in threads:
        thread.join()


def stored_counts(db: Path) -> dict[str, int]:
    connection = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return dict(connection.execute(
            "SELECT tool_use_id, count(*) FROM observations WHERE tool_use_id LIKE 'toolu_burst_%' GROUP BY tool_use_id"
        ).fetchall())
    finally:
        connection.close()


def test_kill_9_during_burst_loses_nothing(worker_factory: Callable[..., WorkerProcess], tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    # Long batches: most observations are still unprocessed when the kill lands.
    first = worker_factory(data_dir, SESSIONMEM_BATCH_SIZE=64, SESSIONMEM_BATCH_QUIET=30)
    accepted: list[str] = []
    sent: list[str] = []
    burst(first, accepted, sent, threading.Event())
    assert first.process.returncode == -9
    assert len(accepted) >= KILL_AFTER

    second = worker_factory(data_dir, SESSIONMEM_BATCH_QUIET=0.05)
    debug = second.wait_idle(timeout=120)
    assert debug["sessions"]["replayed"] > 0, "the kill should have left journal events to replay"

    counts = stored_counts(data_dir / "sessionmem.db")
    missing = set(accepted) - set(counts)
    assert not missing, f"{len(missing)} accepted observations lost, e.g. {sorted(missing)[:5]}"
    assert all(n == 1 for n in counts.values())
    assert set(counts) <= set(sent)  # nothing invented; in-flight unanswered ones may be stored
    assert debug["journal"]["pending"] == 0
