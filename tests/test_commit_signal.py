"""The store's commit signal: one "something was stored", and what, for every consumer that must not miss a row.

The signal itself on trio's mock clock; the writer publishing it, with what each write stored,
against a real SQLite file (the commit runs on a worker thread, which the mock clock would count
as blocked); the vector index and the team push as its consumers: each wakes once per commit of
the rows it follows (however many came while it was busy), and a journal accept wakes neither.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio
import trio.testing

from sessionmem.storage.commits import DOCUMENTS, SHAREABLE, CommitSignal, Stored

DIMENSIONS = 8


async def _consume(signal: CommitSignal, wakes: list[int], kinds: Stored | None = None, busy_s: float = 0.0) -> None:
    seen = signal.committed(kinds)
    while True:
        seen = await signal.wait_committed(seen, kinds)
        wakes.append(seen)
        await trio.sleep(busy_s)  # what the consumer does with a wake-up


async def test_a_consumer_wakes_once_per_commit_of_what_it_follows(autojump_clock: trio.testing.MockClock) -> None:
    signal = CommitSignal()
    documents: list[int] = []
    shareable: list[int] = []
    everything: list[int] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_consume, signal, documents, DOCUMENTS)
        nursery.start_soon(_consume, signal, shareable, SHAREABLE)
        nursery.start_soon(_consume, signal, everything)
        await trio.testing.wait_all_tasks_blocked()
        for _ in range(3):  # journal accepts: the ingest hot path
            signal.publish(Stored.JOURNAL)
            await trio.testing.wait_all_tasks_blocked()
        assert documents == shareable == [] and everything == [1, 2, 3]
        assert signal.statistics().woken == 3 and signal.statistics().waiting == 3
        signal.publish(Stored.JOURNAL | Stored.SESSIONS)  # a session completed: shared, not embedded
        await trio.testing.wait_all_tasks_blocked()
        assert documents == [] and shareable == [4]
        signal.publish(Stored.OBSERVATIONS | Stored.SESSIONS | Stored.JOURNAL)  # observations stored
        await trio.testing.wait_all_tasks_blocked()
        assert documents == [5] and shareable == [4, 5] and everything == [1, 2, 3, 4, 5]
        signal.publish(Stored.NOTHING)  # rows no one follows (a team cursor)
        await trio.sleep(60)
        assert documents == [5] and shareable == [4, 5] and everything[-1] == 6  # and not again without a commit
        assert signal.committed(DOCUMENTS) == 5 and signal.committed(Stored.SESSIONS) == 5
        assert signal.committed(Stored.JOURNAL) == 5 and signal.committed() == 6
        nursery.cancel_scope.cancel()


async def test_commits_while_a_consumer_is_busy_wake_it_once_more(autojump_clock: trio.testing.MockClock) -> None:
    signal = CommitSignal()
    wakes: list[int] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_consume, signal, wakes, DOCUMENTS, 1.0)
        await trio.testing.wait_all_tasks_blocked()
        signal.publish(Stored.PROMPTS)
        await trio.testing.wait_all_tasks_blocked(cushion=0.0)
        assert wakes == [1]  # and busy for a second
        for _ in range(5):
            signal.publish(Stored.PROMPTS)
        signal.publish(Stored.JOURNAL)
        await trio.sleep(10)
        assert wakes == [1, 6]  # once, with the latest of its kinds: not five times, and not for the journal
        nursery.cancel_scope.cancel()


async def test_every_waiter_wakes_and_cancellation_goes_through(autojump_clock: trio.testing.MockClock) -> None:
    signal = CommitSignal()
    first: list[int] = []
    second: list[int] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_consume, signal, first, DOCUMENTS)
        nursery.start_soon(_consume, signal, second, Stored.SUMMARIES)
        await trio.testing.wait_all_tasks_blocked()
        signal.publish(Stored.SUMMARIES)
        await trio.testing.wait_all_tasks_blocked()
        assert first == second == [1]
        nursery.cancel_scope.cancel()
    assert signal.statistics().waiting == 0  # a cancelled wait leaves nothing behind
    with trio.move_on_after(5) as waited:
        await signal.wait_committed(signal.committed())
    assert waited.cancelled_caught  # nothing committed: the wait is cancelled, not answered
    assert signal.statistics().waiting == 0
    assert await signal.wait_committed(0, DOCUMENTS) == 1  # a commit after the number given: at once


async def test_the_store_publishes_once_per_group_commit_and_only_when_rows_changed(tmp_path: Path) -> None:
    from sessionmem.events import InitEvent
    from sessionmem.storage.sqlite.store import open_sqlite_store

    async with open_sqlite_store(tmp_path / "db.sqlite") as store:
        wakes: list[int] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_consume, store.commits, wakes)
            await trio.testing.wait_all_tasks_blocked()
            before = store.statistics().writer.batches
            async with trio.open_nursery() as writes:  # twenty prompts at once: they share commits
                for n in range(20):
                    writes.start_soon(store.accept_init, InitEvent(f"s{n}", "proj", prompt=f"prompt {n}"),
                                      lambda envelope: None)
            commits = store.statistics().writer.batches - before
            assert store.commits.committed() == store.commits.committed(Stored.PROMPTS) == commits < 20
            with trio.fail_after(10):
                while not wakes or wakes[-1] < commits:
                    await trio.sleep(0.01)
            assert len(wakes) <= commits and wakes[-1] == commits  # never more than once per commit

            # A commit that changed no rows says nothing.
            await store.write(lambda connection: connection.execute("SELECT count(*) FROM sessions").fetchall())
            assert store.commits.committed() == commits
            nursery.cancel_scope.cancel()


def _pulled_rows(session: str = "pulled") -> list[Any]:
    """A session of another machine as a pull brings it: the session, a prompt, an observation, a summary."""
    from sessionmem.storage.export_records import ObservationRecord, PromptRecord, SessionRecord, SummaryRecord
    from sessionmem.storage.team_records import Origin, SharedRow

    origin, key = Origin("m-bob", "laptop", "bob"), "github.com/a/calc"
    return [
        SharedRow(record=SessionRecord(claude_session_id=session, project="calcproj", created_at=1.0,
                                       updated_at=2.0), project_key=key, origin=origin),
        SharedRow(record=PromptRecord(session, 1, "fix divide", 1.0, provenance="prompt"),
                  project_key=key, origin=origin),
        SharedRow(record=ObservationRecord(
            claude_session_id=session, project="calcproj", prompt_number=1, tool_name="Bash", tool_use_id="t1",
            type="bugfix", title="Ran the tests", created_at=1.5, provenance="tool"), project_key=key,
            origin=origin),
        SharedRow(record=SummaryRecord(claude_session_id=session, project="calcproj", prompt_number=1,
                                       created_at=1.9, request="fix divide", provenance="model"),
                  project_key=key, origin=origin),
    ]


async def test_each_write_of_the_store_publishes_the_rows_it_stored(tmp_path: Path) -> None:
    from sessionmem.events import InitEvent, ObservationEvent
    from sessionmem.storage.sqlite.store import open_sqlite_store

    async with open_sqlite_store(tmp_path / "db.sqlite") as store:
        commits = store.commits

        def latest() -> tuple[int, int, int]:
            return commits.committed(Stored.JOURNAL), commits.committed(DOCUMENTS), commits.committed(SHAREABLE)

        await store.accept_init(InitEvent("s", "proj", prompt="first prompt"), lambda envelope: None)
        assert latest() == (1, 1, 1)  # the prompt is stored with the accept
        for n in range(3):  # the ingest hot path: journal rows only
            await store.accept_event(ObservationEvent("s", "proj", tool_name="Read", tool_use_id=f"t{n}"),
                                     lambda envelope: None)
        assert latest() == (4, 1, 1)
        await store.accept_init(InitEvent("s", "proj", prompt=""), lambda envelope: None)  # a prompt skipped
        assert latest() == (5, 1, 5)
        await store.team_advance({"a-cursor": "1"})  # rows no consumer follows
        assert latest() == (5, 1, 5) and commits.committed() == 6
        await store.import_records([row.record for row in _pulled_rows("imported")])  # a file's import
        assert latest() == (5, 7, 7)
        await store.team_import(_pulled_rows(), ("a-cursor", "2"), keys=None)  # a pull
        assert latest() == (5, 8, 8) and commits.committed() == 8


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
    from sessionmem.storage.sqlite.store import open_sqlite_store

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


async def test_the_index_is_not_woken_by_journal_accepts_and_once_by_an_import_or_a_pull(tmp_path: Path) -> None:
    from sessionmem.embed.service import EmbedderService
    from sessionmem.events import ObservationEvent
    from sessionmem.index.actor import VectorIndex
    from sessionmem.storage.sqlite.store import open_sqlite_store

    async with open_sqlite_store(tmp_path / "db.sqlite") as real:
        store = _ReadsOfNewCounted(real)
        index = VectorIndex(store, EmbedderService(_Gate()), tmp_path / "index", quiet_s=0.05, max_yield_s=1)
        async with trio.open_nursery() as nursery:
            await nursery.start(index.run)
            with trio.fail_after(30):
                await index.caught_up()
                while real.commits.statistics().waiting < 1:  # the index waits for documents
                    await trio.sleep(0.01)
            reads, woken = store.reads_of_new, real.commits.statistics().woken
            for n in range(10):  # the ingest hot path
                await real.accept_event(ObservationEvent("s", "proj", tool_name="Read", tool_use_id=f"t{n}"),
                                        lambda envelope: None)
            assert real.commits.statistics().woken == woken and real.commits.statistics().waiting == 1
            assert store.reads_of_new == reads

            await real.import_records([row.record for row in _pulled_rows("imported")])  # a file's import: one commit
            with trio.fail_after(30):
                await index.caught_up()
            assert real.commits.statistics().woken == woken + 1 and store.reads_of_new == reads + 1
            assert index.statistics().vectors == 3

            await real.team_import(_pulled_rows(), ("pull", "1"), keys=None)  # what a pull stores: one commit, one wake
            with trio.fail_after(30):
                await index.caught_up()
            assert real.commits.statistics().woken == woken + 2 and store.reads_of_new == reads + 2
            assert index.statistics().vectors == 6
            nursery.cancel_scope.cancel()


@pytest.mark.xdist_group("team")
async def test_the_team_push_is_woken_by_rows_it_shares_not_by_journal_accepts(
        tmp_path: Path, team_database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The push waits on the store for shareable rows: the accepts of the ingest hot path leave it waiting."""
    from sessionmem.events import InitEvent, ObservationEvent
    from sessionmem.team import sync
    from sessionmem.testing.harness import open_worker

    from .test_team_sync import team_settings, wait_for

    monkeypatch.setattr(sync, "PUSH_INTERVAL_S", 3600.0)  # no timed pass: only the commit signal wakes it
    # The consolidation pass waits on the signal too (for observations): off, so the push is its one waiter.
    async with open_worker(tmp_path / "a", consolidation=False,
                           **team_settings(team_database_url, "laptop", share_projects="shop")) as worker:
        commits = worker.services.store.commits

        async def push_waiting() -> bool:  # after its first pass, the push is the signal's one waiter (no index)
            return bool((await worker.debug())["team"]["sharing"]) and commits.statistics().waiting == 1

        await wait_for(push_waiting)
        woken = commits.statistics().woken
        for n in range(10):  # journal accepts alone (nothing delivered: no result follows them)
            await worker.services.store.accept_event(
                ObservationEvent("s1", "shop", tool_name="Read", tool_use_id=f"t{n}"), lambda envelope: None)
        assert commits.statistics().woken == woken and commits.statistics().waiting == 1
        await worker.services.store.accept_init(InitEvent("s2", "shop", prompt="make checkout faster"),
                                                lambda envelope: None)
        assert commits.statistics().woken == woken + 1  # a prompt is shared: the push wakes, once
