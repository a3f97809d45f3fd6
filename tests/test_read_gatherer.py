"""Short reads gathered into one thread trip: reads queued behind a batch share the next,
each read's error stays its own, and closing or cancelling answers every queued read."""

from __future__ import annotations

import threading
from pathlib import Path

import apsw
import pytest
import trio
from trio.testing import wait_all_tasks_blocked

from sessionmem.storage.sqlite.readers import ReadGatherer


@pytest.fixture
def database(tmp_path: Path) -> Path:
    path = tmp_path / "reads.db"
    connection = apsw.Connection(str(path))
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("CREATE TABLE numbers (n INTEGER)")
    connection.executemany("INSERT INTO numbers VALUES (?)", [(n,) for n in range(10)])
    connection.close()
    return path


def count_below(limit: int, threads: list[int]):
    def read(connection: apsw.Connection) -> int:
        threads.append(threading.get_ident())
        return connection.execute("SELECT count(*) FROM numbers WHERE n < ?", (limit,)).fetchone()[0]
    return read


async def test_reads_queued_behind_a_batch_share_the_next_trip(database: Path) -> None:
    gatherer = ReadGatherer(database)
    gate = threading.Event()
    threads: list[int] = []
    results: dict[int, int] = {}

    async def ask(limit: int) -> None:
        results[limit] = await gatherer.read(count_below(limit, threads))

    async with trio.open_nursery() as nursery:
        await nursery.start(gatherer.run)
        nursery.start_soon(gatherer.read, lambda connection: gate.wait(10))  # holds the first trip
        await wait_all_tasks_blocked()
        for limit in range(1, 6):
            nursery.start_soon(ask, limit)
        await wait_all_tasks_blocked()
        assert gatherer.statistics().queued == 5 and not results
        gate.set()
        with trio.fail_after(10):
            while len(results) < 5:
                await trio.sleep(0.01)
        stats = gatherer.statistics()
        gatherer.close()
    assert results == {1: 1, 2: 2, 3: 3, 4: 4, 5: 5}
    assert (stats.reads, stats.trips, stats.largest_batch, stats.queued) == (6, 2, 5, 0)
    assert len(set(threads)) == 1  # the five ran in one trip, on one thread


async def test_a_failing_read_fails_only_its_caller(database: Path) -> None:
    gatherer = ReadGatherer(database)
    gate = threading.Event()
    outcomes: dict[str, object] = {}

    async def ask(name: str, fn) -> None:
        try:
            outcomes[name] = await gatherer.read(fn)
        except apsw.SQLError as exc:
            outcomes[name] = exc

    async with trio.open_nursery() as nursery:
        await nursery.start(gatherer.run)
        nursery.start_soon(gatherer.read, lambda connection: gate.wait(10))
        await wait_all_tasks_blocked()
        nursery.start_soon(ask, "before", count_below(3, []))
        await wait_all_tasks_blocked()
        nursery.start_soon(ask, "broken", lambda connection: connection.execute("SELECT * FROM missing").fetchall())
        await wait_all_tasks_blocked()
        nursery.start_soon(ask, "after", count_below(7, []))
        await wait_all_tasks_blocked()
        gate.set()
        with trio.fail_after(10):
            while len(outcomes) < 3:
                await trio.sleep(0.01)
        assert gatherer.statistics().trips == 2
        gatherer.close()
    assert outcomes["before"] == 3 and outcomes["after"] == 7
    assert isinstance(outcomes["broken"], apsw.SQLError) and "missing" in str(outcomes["broken"])


async def test_close_runs_what_is_queued_and_refuses_what_comes_after(database: Path) -> None:
    gatherer = ReadGatherer(database)
    gate = threading.Event()
    results: list[int] = []

    async def ask(limit: int) -> None:
        results.append(await gatherer.read(count_below(limit, [])))

    async with trio.open_nursery() as nursery:
        await nursery.start(gatherer.run)
        nursery.start_soon(gatherer.read, lambda connection: gate.wait(10))
        await wait_all_tasks_blocked()
        nursery.start_soon(ask, 4)
        await wait_all_tasks_blocked()
        gatherer.close()
        gate.set()
    assert results == [4]  # run returned only after answering it
    with pytest.raises(trio.ClosedResourceError):
        await gatherer.read(count_below(1, []))


async def test_a_cancelled_gatherer_answers_every_queued_read(database: Path) -> None:
    gatherer = ReadGatherer(database)
    gate = threading.Event()
    errors: list[BaseException] = []

    async def ask() -> None:
        try:
            await gatherer.read(count_below(2, []))
        except trio.ClosedResourceError as exc:
            errors.append(exc)

    async with trio.open_nursery() as callers:
        async with trio.open_nursery() as serving:
            await serving.start(gatherer.run)
            callers.start_soon(gatherer.read, lambda connection: gate.wait(10))  # in the thread when cancelled
            await wait_all_tasks_blocked()
            for _ in range(3):
                callers.start_soon(ask)
            await wait_all_tasks_blocked()
            serving.cancel_scope.cancel()
            gate.set()  # the trip under way finishes (its thread has the connection), then run ends
    assert len(errors) == 3 and "closed" in str(errors[0])
