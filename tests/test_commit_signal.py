"""The store's commit signal: one "something was stored" for every consumer that must not miss a row.

The signal itself on trio's mock clock; the writer publishing it against a real SQLite file (the
commit runs on a worker thread, which the mock clock would count as blocked); the vector index as
its consumer, reading what is new once per commit however many commits came while it was busy.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio
import trio.testing

from sessionmem.storage.commits import CommitSignal

DIMENSIONS = 8


async def _consume(signal: CommitSignal, wakes: list[int], busy_s: float = 0.0) -> None:
    seen = signal.committed()
    while True:
        seen = await signal.wait_committed(seen)
        wakes.append(seen)
        await trio.sleep(busy_s)  # what the consumer does with a wake-up


async def test_a_consumer_wakes_once_per_commit(autojump_clock: trio.testing.MockClock) -> None:
    signal = CommitSignal()
    wakes: list[int] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_consume, signal, wakes)
        for _ in range(3):
            await trio.testing.wait_all_tasks_blocked()
            assert signal.publish() == len(wakes) + 1
        await trio.testing.wait_all_tasks_blocked()
        assert wakes == [1, 2, 3]
        await trio.sleep(60)
        assert wakes == [1, 2, 3]  # and not again without a commit
        nursery.cancel_scope.cancel()


async def test_commits_while_a_consumer_is_busy_wake_it_once_more(autojump_clock: trio.testing.MockClock) -> None:
    signal = CommitSignal()
    wakes: list[int] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_consume, signal, wakes, 1.0)
        await trio.testing.wait_all_tasks_blocked()
        signal.publish()
        await trio.testing.wait_all_tasks_blocked(cushion=0.0)
        assert wakes == [1]  # and busy for a second
        for _ in range(5):
            signal.publish()
        await trio.sleep(10)
        assert wakes == [1, 6]  # once, with the latest number: not five times
        nursery.cancel_scope.cancel()


async def test_every_waiter_wakes_and_cancellation_goes_through(autojump_clock: trio.testing.MockClock) -> None:
    signal = CommitSignal()
    first: list[int] = []
    second: list[int] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_consume, signal, first)
        nursery.start_soon(_consume, signal, second)
        await trio.testing.wait_all_tasks_blocked()
        signal.publish()
        await trio.testing.wait_all_tasks_blocked()
        assert first == second == [1]
        nursery.cancel_scope.cancel()
    with trio.move_on_after(5) as waited:
        await signal.wait_committed(signal.committed())
    assert waited.cancelled_caught  # nothing committed: the wait is cancelled, not answered
    assert await signal.wait_committed(0) == 1  # a commit after the number given: at once


async def test_the_store_publishes_once_per_group_commit_and_only_when_rows_changed(tmp_path: Path) -> None:
    from sessionmem.events import InitEvent
    from sessionmem.storage.sqlite import open_sqlite_store

    async with open_sqlite_store(tmp_path / "db.sqlite") as store:
        wakes: list[int] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_consume, store._commits, wakes)
            await trio.testing.wait_all_tasks_blocked()
            before = store.statistics().writer.batches
            async with trio.open_nursery() as writes:  # twenty prompts at once: they share commits
                for n in range(20):
                    writes.start_soon(store.accept_init, InitEvent(f"s{n}", "proj", prompt=f"prompt {n}"),
                                      lambda envelope: None)
            commits = store.statistics().writer.batches - before
            assert store.committed() == commits < 20
            with trio.fail_after(10):
                while not wakes or wakes[-1] < commits:
                    await trio.sleep(0.01)
            assert len(wakes) <= commits and wakes[-1] == commits  # never more than once per commit

            # A commit that changed no rows says nothing.
            await store.write(lambda connection: connection.execute("SELECT count(*) FROM sessions").fetchall())
            assert store.committed() == commits
            nursery.cancel_scope.cancel()


class _Gate:
    """An embedder that can be held inside a chunk (the index busy)."""

    name = "gate"
    model_id = "gate@1"
    dimensions = DIMENSIONS

    def __init__(self) -> None:
        self.open = threading.Event()
        self.open.set()
        self.inside = threading.Event()
        self.chunks = 0

    def embed(self, texts: list[str], *, threads: int | None = None) -> np.ndarray:
        self.chunks += 1
        self.inside.set()
        self.open.wait(30)
        vectors = np.random.default_rng(self.chunks).standard_normal((len(texts), DIMENSIONS)).astype(np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    def statistics(self) -> Any:
        return None

    def close(self) -> None:
        pass


class _ReadsOfNewCounted:
    """The real store, counting the index's reads of what is new (``document_ids`` above its newest rows)."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.reads_of_new = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def document_ids(self, *, after: dict[str, int] | None = None, limit: int | None = None
                           ) -> dict[str, list[int]]:
        self.reads_of_new += after is not None
        return await self._store.document_ids(after=after, limit=limit)


async def test_the_index_reads_what_is_new_once_per_commit_and_once_after_being_busy(tmp_path: Path) -> None:
    from sessionmem.embed.service import EmbedderService
    from sessionmem.events import InitEvent
    from sessionmem.index.actor import VectorIndex
    from sessionmem.storage.sqlite import open_sqlite_store

    async with open_sqlite_store(tmp_path / "db.sqlite") as real:
        store = _ReadsOfNewCounted(real)
        embedder = _Gate()
        index = VectorIndex(store, EmbedderService(embedder), tmp_path / "index", quiet_s=0.05, max_yield_s=1)

        async def prompt(label: str) -> None:
            await real.accept_init(InitEvent(label, "proj", prompt=f"prompt {label}"), lambda envelope: None)

        async with trio.open_nursery() as nursery:
            await nursery.start(index.run)
            with trio.fail_after(30):
                await index.caught_up()
            reads = store.reads_of_new

            await prompt("one")  # one commit: nobody calls the index, the commit wakes it
            with trio.fail_after(30):
                await index.caught_up()
            assert store.reads_of_new == reads + 1 and index.statistics().vectors == 1

            embedder.open.clear()
            embedder.inside.clear()
            await prompt("two")
            with trio.fail_after(30):
                await trio.to_thread.run_sync(embedder.inside.wait)  # the index is busy embedding it
            reads = store.reads_of_new
            for n in range(5):  # five commits meanwhile
                await prompt(f"busy{n}")
            embedder.open.set()
            with trio.fail_after(30):
                await index.caught_up()
            assert store.reads_of_new == reads + 1  # woken once for the five
            assert index.statistics().vectors == 7
            nursery.cancel_scope.cancel()


@pytest.mark.xdist_group("team")
async def test_the_team_push_wakes_on_a_commit_no_live_event_announced(
        tmp_path: Path, team_database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An import publishes no live event for the pages: the push, waiting on the store, still sends it."""
    from sessionmem.team import sync
    from sessionmem.testing.harness import open_worker

    from .test_team_sync import pg_counts, shop_session, team_settings, wait_for
    from .test_transfer import export_all

    monkeypatch.setattr(sync, "PUSH_INTERVAL_S", 3600.0)  # no timed pass: only "something was stored" wakes it
    async with open_worker(tmp_path / "elsewhere") as elsewhere:
        await shop_session(elsewhere)
        records = await export_all(elsewhere)
    settings = team_settings(team_database_url, "laptop", share_projects="shop")
    async with open_worker(tmp_path / "a", **settings) as worker:
        async def first_pass_over() -> bool:  # the sharing list is read last in a push pass
            return bool((await worker.debug())["team"]["sharing"])

        await wait_for(first_pass_over)
        assert pg_counts(team_database_url)["observations"] == 0
        counts = (await worker.request("POST", "/api/import", {"records": records})).json()
        assert counts["observations"] == 2

        async def in_the_team_database() -> bool:
            return pg_counts(team_database_url)["observations"] == 2

        await wait_for(in_the_team_database)
