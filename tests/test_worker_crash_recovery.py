"""kill -9 during a burst, and five times in a row under replay load: after the restarts every accepted
observation is stored exactly once."""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest

from sessionmem.settings import DEFAULT_SKIP_TOOLS
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


# The fixture transcripts, replayed as this many sets of sessions (244 events): enough that the kills
# land mid-replay (checked below: an idle 2-core machine accepts about 160 before the first, a busy one
# fewer; the later kills find it compressing, indexing and saving what it took), few enough that the
# index's catch-up, which runs at nice 19 on spare CPU only, ends soon on a busy machine.
REPLAY_COPIES = 2
KILLS = 5


def replay_events() -> list[tuple[str, str, str, bytes]]:
    """(key, tool_use_id or "", path, body) of every event of the fixture transcripts, ``REPLAY_COPIES`` times."""
    from sessionmem.protocol.requests import encoded_call
    from sessionmem.replay.convert import convert, transcript_files

    events = []
    sessions = convert(transcript_files(Path(__file__).parent / "fixtures" / "transcripts"))
    for copy in range(REPLAY_COPIES):
        for session in sessions:
            for event in session.events:
                payload = {**event.payload, "session_id": f"{session.session_id}-{copy}"}
                if "tool_use_id" in payload:
                    payload["tool_use_id"] = f"{payload['tool_use_id']}-{copy}"
                key = f"kill:{copy}:{event.key}"
                call = encoded_call(payload, project="killed", key=key)
                if call is not None and call[2] is not None:
                    events.append((key, str(payload.get("tool_use_id") or ""), call[1], call[2]))
    return events


def send_until_killed(worker: WorkerProcess, pending: list[tuple[str, str, str, bytes]], accepted: set[str],
                      kill_after: float) -> None:
    """Send ``pending`` from 4 threads (each session's events in order) and ``kill -9`` ``kill_after`` s after the
    first event of the round is accepted: the kill lands mid-replay however slowly a loaded machine gets going
    (a timer from the start alone killed five workers that had accepted nothing on a machine running three suites)."""
    by_session: dict[bytes, list[tuple[str, str, str, bytes]]] = {}
    for event in pending:
        by_session.setdefault(json.loads(event[3])["claudeSessionId"].encode(), []).append(event)
    queues = list(by_session.values())
    lock = threading.Lock()
    token = worker.token

    def sender() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", worker.port, timeout=5)
        while True:
            with lock:
                if not queues:
                    return
                queue = queues.pop()
            for key, _, path, body in queue:
                try:
                    connection.request("POST", path, body, {"Content-Type": "application/json",
                                                            "Authorization": f"Bearer {token}"})
                    response = connection.getresponse()
                    response.read()
                except (OSError, http.client.HTTPException):
                    return  # killed: the rest of this session waits for the next round
                if response.status in (200, 202):
                    with lock:
                        accepted.add(key)
                elif response.status == 503:
                    break  # busy: the rest of this session goes again next round, in order

    threads = [threading.Thread(target=sender) for _ in range(4)]
    before = len(accepted)
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 120
    while len(accepted) == before and any(thread.is_alive() for thread in threads) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(kill_after)
    worker.kill()
    for thread in threads:
        thread.join()


def test_five_kills_at_random_moments_under_replay_load_lose_nothing(
        worker_factory: Callable[..., WorkerProcess], tmp_path: Path) -> None:
    events = replay_events()
    data_dir = tmp_path / "data"
    accepted: set[str] = set()
    rng = random.Random(20261122)
    kills = []
    for _ in range(KILLS):
        pending = [e for e in events if e[0] not in accepted]
        # The vector index saves every half second: kills land mid-save too.
        worker = worker_factory(data_dir, SESSIONMEM_BATCH_SIZE=16, SESSIONMEM_BATCH_QUIET=0.5,
                                SESSIONMEM_INDEX_SAVE_INTERVAL=0.5)
        kill_after = rng.uniform(0.2, 0.8)
        send_until_killed(worker, pending, accepted, kill_after)
        kills.append((round(kill_after, 2), len(accepted)))
    # The kills landed mid-replay: events accepted before one, and some left to send after the last
    # (a slow machine may accept nothing before the first, a fast one everything before the last).
    assert kills[-1][1] > 0 and any(accepted_so_far < len(events) for _, accepted_so_far in kills), kills

    final = worker_factory(data_dir, SESSIONMEM_BATCH_QUIET=0.05)
    for _key, _, path, body in [e for e in events if e[0] not in accepted]:
        status, _ = final.request("POST", path, raw=body)
        assert status in (200, 202)
    debug = final.wait_idle(timeout=180)
    counts = stored_tool_uses(data_dir / "sessionmem.db")
    print(f"\nkills (seconds into the round, events accepted so far): {kills}; events {len(events)}; "
          f"tool uses stored {len(counts)}, each {set(counts.values())} time(s)")
    expected = {tool_use_id for _, tool_use_id, path, body in events if path == "/api/sessions/observations"
                and tool_use_id and json.loads(body)["tool_name"] not in DEFAULT_SKIP_TOOLS}
    assert set(counts) == expected  # every tool use, accepted before a kill or after
    assert set(counts.values()) == {1}, [k for k, n in counts.items() if n > 1][:5]  # exactly once
    assert debug["journal"]["pending"] == 0 and debug["sessions"]["failed"] == 0
    assert debug["sessions"]["replayed"] >= 0
    # The vector index catches up with SQLite: one vector for every stored document.
    index = final.wait_indexed(timeout=600)["index"]
    documents = stored_documents(data_dir / "sessionmem.db")
    print(f"vector index: {index['vectors']} vectors for {documents} documents, {index['rebuilds']} rebuild(s), "
          f"{index['catchUpPerSecond']} documents/s")
    assert index["vectors"] == documents and index["failures"] == 0


def stored_documents(db: Path) -> int:
    connection = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return sum(connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                   for table in ("observations", "session_summaries", "user_prompts"))
    finally:
        connection.close()


def stored_tool_uses(db: Path) -> dict[str, int]:
    connection = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return dict(connection.execute("SELECT tool_use_id, count(*) FROM observations GROUP BY tool_use_id"))
    finally:
        connection.close()
