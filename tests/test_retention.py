"""What the database keeps: raw tool data pruned when old, space given back, a WAL that does not stay large."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import apsw
import pytest
import trio

from sessionmem.events import ObservationEvent
from sessionmem.storage.sqlite.store import open_sqlite_store
from sessionmem.testing.harness import open_worker

DAY = 86400.0
BIG = "x" * 50_000  # a large tool output, as a Read of a big file returns


@contextmanager
def checkpointing_beside(path: Path) -> Iterator[None]:
    """Another connection checkpoints the database again and again, as the worker's checkpointer does
    on a round of its own: SQLite answers a second checkpoint busy at once while one runs."""
    stop = threading.Event()

    def checkpoint_until_stopped() -> None:
        other = apsw.Connection(str(path))
        other.set_busy_timeout(0)
        try:
            while not stop.is_set():
                try:
                    other.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)
                except apsw.BusyError:
                    pass
        finally:
            other.close()

    thread = threading.Thread(target=checkpoint_until_stopped)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


async def test_old_raw_tool_data_is_pruned_and_the_file_shrinks(tmp_path: Path) -> None:
    async with open_worker(tmp_path / "data", embedder="none", batch_quiet_s=0.05) as worker:
        for number in range(60):
            old = number < 40
            # 40 backfilled 40 days ago, 15 a day ago, and 5 live: hooks send no time, and a live event
            # must not be taken for 1970 and lose its raw data at the first round.
            when = {"occurredAt": time.time() - (40 if old else 1) * DAY} if number < 55 else {}
            reply = await worker.request("POST", "/api/sessions/observations", {
                "claudeSessionId": "old" if old else "new", "cwd": "/w/proj", "tool_name": "Read",
                "tool_use_id": f"t{number}", "tool_input": {"file_path": f"/w/proj/f{number}.py"},
                "tool_response": BIG + str(number), "idempotencyKey": f"k{number}", **when})
            assert reply.status == 202
        await worker.wait_idle()
        before = await worker.get("/api/storage")
        assert before["autoVacuum"] == "incremental" and before["observations"] == 60 and before["rawPayloads"] == 60

        with checkpointing_beside(worker.settings.db_path):
            report = (await worker.request("POST", "/api/maintenance/prune",
                                            {"olderThanDays": 30, "vacuum": True})).json()
        assert report["pruned"] == 40 and report["after"]["rawPayloads"] == 20
        on_disk = {moment: report[moment]["databaseBytes"] + report[moment]["walBytes"] for moment in ("before", "after")}
        assert on_disk["after"] < on_disk["before"] - 40 * 40_000  # given back to the file system

        old = await worker.get("/api/observations/1")
        new = await worker.get("/api/observations/60")
        assert old["toolInput"] is None and old["toolResponse"] is None and old["title"] == "Read f0.py"
        assert new["toolResponse"].startswith("xxx")
        # the journal entry is still there: the same event sent again is a duplicate, not a second row
        again = await worker.post("/api/sessions/observations", {
            "claudeSessionId": "old", "cwd": "/w/proj", "tool_name": "Read", "tool_use_id": "t0",
            "tool_response": "again", "idempotencyKey": "k0"})
        assert again["status"] == "duplicate"
        await worker.wait_idle()
        assert len((await worker.get("/api/observations?limit=100"))["observations"]) == 60
        nothing_left = (await worker.request("POST", "/api/maintenance/prune", {"olderThanDays": 30})).json()
        assert nothing_left["pruned"] == 0
        assert (await worker.request("POST", "/api/maintenance/prune", {"olderThanDays": -1})).status == 400
        retention = (await worker.debug())["retention"]
        assert (retention["retentionDays"], retention["rounds"], retention["pruned"], retention["failures"]) == (
            30.0, 2, 40, 0) and retention["lastRoundAt"] > time.time() - 60


async def test_the_wal_is_cut_back_once_the_database_is_idle(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    # Idle for 2 s: a busy machine's pause between two writes is not yet an idle database.
    async with open_sqlite_store(path, checkpoint_idle_s=2.0) as store:
        for number in range(120):
            event = ObservationEvent(claude_session_id="s", project="p", tool_name="Read", tool_use_id=f"t{number}",
                                     tool_response=BIG)
            await store.accept_event(event, lambda envelope: None)
        assert os.path.getsize(str(path) + "-wal") > 5_000_000
        with trio.fail_after(10):  # the file is cut on the checkpointer's thread, then counted on Trio's
            while os.path.getsize(str(path) + "-wal") > 0 or store.statistics().checkpointer.truncations < 1:
                await trio.sleep(0.1)
        assert len(await store.pending_events()) == 120  # all of it is in the database itself


async def test_under_load_the_wal_starts_over_instead_of_growing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No idle moment to cut the WAL: a RESTART checkpoint lets the writer write it from its beginning
    again, and the writer cuts a file a burst left larger back to its limit. A reader in the way only
    delays that; what it does not need is copied meanwhile."""
    from sessionmem.storage.sqlite import checkpointer, connection_setup

    monkeypatch.setattr(checkpointer, "THRESHOLD_PAGES", 100)
    monkeypatch.setattr(connection_setup, "WAL_LIMIT_BYTES", 1_000_000)  # the writer's journal_size_limit
    path = tmp_path / "db.sqlite"
    wal = str(path) + "-wal"
    async with open_sqlite_store(path, checkpoint_idle_s=60) as store:
        async def write(count: int, first: int) -> None:
            for number in range(first, first + count):
                event = ObservationEvent(claude_session_id="s", project="p", tool_name="Read",
                                         tool_use_id=f"t{number}", tool_response=BIG)
                await store.accept_event(event, lambda envelope: None)

        await write(40, 0)
        await write(1, 40)  # right before the reader: its snapshot needs frames of the WAL
        reader = apsw.Connection(str(path))
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM journal").fetchone() == (41,)  # holds its snapshot
        restarts = store.statistics().checkpointer.restarts
        await write(39, 41)
        # Three more tries: the third's PASSIVE is counted once the second try, which began after these
        # writes, has also tried its RESTART (one try a second, each a PASSIVE then a RESTART).
        tried = store.statistics().checkpointer.checkpoints + 3
        with trio.fail_after(30):
            while store.statistics().checkpointer.checkpoints < tried:
                await trio.sleep(0.1)
        stats = store.statistics().checkpointer
        assert os.path.getsize(wal) > 1_000_000 and stats.restarts == restarts  # the reader is in the way
        assert stats.checkpoints >= 1  # copied what it could all the same
        reader.execute("COMMIT")
        reader.close()
        with trio.fail_after(10):
            while store.statistics().checkpointer.restarts <= restarts:
                await trio.sleep(0.1)
        await write(1, 80)  # the WAL starts over: the file is cut back to the limit
        assert os.path.getsize(wal) <= 1_000_000
        await write(8, 81)  # ~0.6 MB: written over the start of the file, which does not grow
        assert os.path.getsize(wal) <= 1_000_000
        assert len(await store.pending_events()) == 89
        assert store.statistics().checkpointer.truncations == 0  # never idle: never cut to zero


@pytest.mark.slow
def test_prune_and_status_from_a_terminal(tmp_path: Path) -> None:
    from sessionmem.testing.harness import serve_in_thread

    from .test_search_cli import sessionmem

    data = tmp_path / "data"
    with serve_in_thread(data, embedder="none", batch_quiet_s=0.05) as worker:
        for number in range(5):
            worker.post("/api/sessions/observations", {
                "claudeSessionId": "s", "cwd": "/w/p", "tool_name": "Read", "tool_use_id": f"t{number}",
                "tool_response": BIG, "occurredAt": time.time() - 90 * DAY})
        worker.wait_idle()
        status = sessionmem(data, worker.port, "status")
        assert "storage: " in status.stdout and "5 observations" in status.stdout
        assert "raw tool data kept for 5" in status.stdout
        pruned = sessionmem(data, worker.port, "prune", "--older-than", "60", "--vacuum")
        assert pruned.returncode == 0, pruned.stderr
        assert "raw tool data of 5 observation(s) older than 60 day(s) pruned" in pruned.stdout
        assert "after:  " in pruned.stdout and "raw tool data kept for 0" in pruned.stdout
        assert sessionmem(data, worker.port, "prune", "--older-than", "-3").returncode == 2


def test_the_size_per_observation_leaves_the_transient_wal_out() -> None:
    from sessionmem.cli.data_commands import size_line

    report = {"databaseBytes": 10 * 1024 * 1024, "walBytes": 40 * 1024 * 1024, "observations": 1024,
              "rawPayloads": 3, "rawPayloadBytes": 0}
    line = size_line(report)
    assert line.startswith("50.0 MB on disk (WAL 40.0 MB), 1024 observations, 10.0 KB each in the database")
