"""The group-commit writer's two lanes: requests first, background work a bounded share of each
transaction, every submission of a lane in order, and everything queued committed at close."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import apsw
import trio
from trio.testing import wait_all_tasks_blocked

from sessionmem.storage.writer import GroupCommitWriter


class RecordingWriter(GroupCommitWriter):
    """Notes what each transaction held (the operations append their names)."""

    def __init__(self, connection: apsw.Connection, **options: Any) -> None:
        super().__init__(connection, **options)
        self.transactions: list[list[str]] = []

    def _commit_batch(self, batch: list[Any]) -> None:
        self.transactions.append([])
        super()._commit_batch(batch)


def named(writer: RecordingWriter, name: str) -> Any:
    def operation(connection: apsw.Connection) -> str:
        connection.execute("INSERT INTO done (name) VALUES (?)", (name,))
        writer.transactions[-1].append(name)
        return name
    return operation


@asynccontextmanager
async def held(writer: GroupCommitWriter) -> AsyncIterator[trio.Nursery]:
    """``writer`` running and held inside a transaction for the block: what the block submits
    (in the nursery yielded) queues behind it. At the end the writer is let go and closed, and
    commits everything queued before the block is left."""
    gate = threading.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer.run)
        nursery.start_soon(writer.submit, lambda connection: gate.wait(10))
        await wait_all_tasks_blocked()
        try:
            yield nursery
        finally:
            writer.close()
            gate.set()


async def test_requests_go_first_and_background_work_takes_a_bounded_share(tmp_path: Path) -> None:
    connection = apsw.Connection(str(tmp_path / "writer.db"))
    connection.execute("CREATE TABLE done (name TEXT)")
    writer = RecordingWriter(connection, background_weight=10, request_background_weight=4)
    async with held(writer) as nursery:  # work queues behind the writer's transaction, one submission at a time
        for n in range(6):
            nursery.start_soon(partial(writer.submit, named(writer, f"b{n}"), background=True, weight=4))
            await wait_all_tasks_blocked()
        nursery.start_soon(partial(writer.submit, named(writer, "heavy"), background=True, weight=50))
        await wait_all_tasks_blocked()
        for n in range(3):
            nursery.start_soon(writer.submit, named(writer, f"r{n}"))
            await wait_all_tasks_blocked()
        stats = writer.statistics()
        assert (stats.queued, stats.background_queued) == (10, 7)
    # The requests come first, with background work up to its share beside requests (4: one
    # of 4), which wait for that commit; then background work up to its weight (10: two of 4);
    # work heavier than the whole share still goes, alone.
    assert writer.transactions == [[], ["r0", "r1", "r2", "b0"], ["b1", "b2"], ["b3", "b4"], ["b5"], ["heavy"]]
    assert [name for (name,) in connection.execute("SELECT name FROM done")] == [
        "r0", "r1", "r2", "b0", "b1", "b2", "b3", "b4", "b5", "heavy"]
    assert writer.statistics().queued == 0


async def test_closing_commits_both_lanes_then_refuses(tmp_path: Path) -> None:
    connection = apsw.Connection(str(tmp_path / "writer.db"))
    connection.execute("CREATE TABLE done (name TEXT)")
    writer = RecordingWriter(connection, background_weight=1)
    gate = threading.Event()
    results: list[str] = []

    async def submit(name: str, **options: Any) -> None:
        results.append(await writer.submit(named(writer, name), **options))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer.run)
        nursery.start_soon(writer.submit, lambda connection: gate.wait(10))
        await wait_all_tasks_blocked()
        for n in range(3):
            nursery.start_soon(partial(submit, f"b{n}", background=True))
            nursery.start_soon(submit, f"r{n}")
        await wait_all_tasks_blocked()
        writer.close()
        gate.set()
    assert sorted(results) == ["b0", "b1", "b2", "r0", "r1", "r2"]  # all committed before run returned
    try:
        await writer.submit(named(writer, "late"))
    except trio.ClosedResourceError:
        pass
    else:
        raise AssertionError("a submission after close was taken")


async def test_writes_of_one_kind_beside_each_other_run_as_one_call(tmp_path: Path) -> None:
    """``submit_together``: consecutive writes naming one function share its call (and its
    statements); any other write between them starts a new run; each caller gets its own result."""
    connection = apsw.Connection(str(tmp_path / "writer.db"))
    connection.execute("CREATE TABLE done (name TEXT)")
    writer = RecordingWriter(connection)
    calls: list[list[str]] = []
    committed: list[str] = []

    def insert_all(connection: apsw.Connection, names: list[str]) -> list[str]:
        calls.append(names)
        connection.execute("INSERT INTO done (name) SELECT value FROM json_each(?)", (json.dumps(names),))
        return [name.upper() for name in names]

    results: dict[str, str] = {}

    async def together(name: str) -> None:
        results[name] = await writer.submit_together(insert_all, name, on_commit=committed.append, background=True)

    async with held(writer) as nursery:
        for name in ("a", "b", "c"):
            nursery.start_soon(together, name)
            await wait_all_tasks_blocked()
        nursery.start_soon(partial(writer.submit, named(writer, "plain"), background=True))
        await wait_all_tasks_blocked()
        for name in ("d", "e"):
            nursery.start_soon(together, name)
            await wait_all_tasks_blocked()
    assert len(writer.transactions) == 2  # the gate's, then everything queued behind it
    assert calls == [["a", "b", "c"], ["d", "e"]]
    assert results == {"a": "A", "b": "B", "c": "C", "d": "D", "e": "E"}
    assert committed == ["A", "B", "C", "D", "E"]
    assert [name for (name,) in connection.execute("SELECT name FROM done")] == ["a", "b", "c", "plain", "d", "e"]


async def test_a_write_that_fails_run_together_fails_alone(tmp_path: Path) -> None:
    """A run that raises is rolled back with its transaction, and every write is run again by
    itself: the one at fault gets its error, the others are committed."""
    connection = apsw.Connection(str(tmp_path / "writer.db"))
    connection.execute("CREATE TABLE done (name TEXT UNIQUE)")
    connection.execute("INSERT INTO done (name) VALUES ('taken')")
    writer = RecordingWriter(connection)
    calls: list[list[str]] = []

    def insert_each(connection: apsw.Connection, names: list[str]) -> list[str]:
        calls.append(names)
        for name in names:
            connection.execute("INSERT INTO done (name) VALUES (?)", (name,))
        return names

    outcomes: dict[str, object] = {}

    async def together(name: str) -> None:
        try:
            outcomes[name] = await writer.submit_together(insert_each, name, background=True)
        except apsw.ConstraintError as exc:
            outcomes[name] = exc

    async with held(writer) as nursery:
        for name in ("a", "taken", "b"):
            nursery.start_soon(together, name)
            await wait_all_tasks_blocked()
    assert calls == [["a", "taken", "b"], ["a"], ["taken"], ["b"]]
    assert outcomes["a"] == "a" and outcomes["b"] == "b" and isinstance(outcomes["taken"], apsw.ConstraintError)
    assert sorted(name for (name,) in connection.execute("SELECT name FROM done")) == ["a", "b", "taken"]
