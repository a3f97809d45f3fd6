"""The embedded SQLite backend of :class:`~sessionmem.storage.base.Store`, on APSW: a thin
:class:`SQLiteStore` that runs each job's functions on the connection that owns the job.

The jobs live in their own modules, each a set of synchronous functions taking a
connection: :mod:`~sessionmem.storage.sqlite.connection_setup` (opening and migrating the writer
connection), :mod:`~sessionmem.storage.sqlite.journal_writes` (accepting, parking, unparking
events), :mod:`~sessionmem.storage.sqlite.result_writes` (observations, summaries, completions,
with their journal "done" marks), :mod:`~sessionmem.storage.sqlite.row_reads` (sessions,
observations, summaries, the journal's counts), and the search side's
:mod:`~sessionmem.storage.sqlite.fulltext`, :mod:`~sessionmem.storage.sqlite.cards` and
:mod:`~sessionmem.storage.sqlite.file_memories`.

Resource handling:
    One writer connection, owned by a :class:`GroupCommitWriter` (one thread at a
    time), a :class:`ReaderPool` of read-only connections, and a :class:`ReadGatherer`
    with one more (file recall's short reads). Nothing here touches SQLite on the Trio
    thread. The writer and gatherer tasks run in the nursery that
    :func:`open_sqlite_store` owns; leaving that block commits what is queued, then
    closes every connection.

Error handling:
    SQL errors propagate to the caller as ``apsw`` exceptions; the HTTP layer turns
    them into 500s and the actors count them as crashes. ``synchronous=FULL`` (and ``fullfsync``,
    which macOS needs to get past the drive's cache): an acknowledged event survives a process
    crash and a power cut.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from pathlib import Path
from typing import TypeVar, TypeVarTuple

import apsw
import trio

from sessionmem.events import (
    CompleteEvent,
    Envelope,
    InitEvent,
    ObservationEvent,
    SummarizeEvent,
)
from sessionmem.protocol.path_case import FOLDS_FILE_CASE
from sessionmem.records import (
    CompressedObservation,
    CompressedSummary,
    ContextRows,
    ContextStart,
    Document,
    DocumentCard,
    FileMemory,
    JournalCounts,
    ObservationDetail,
    ObservationRow,
    ProjectRow,
    RankedKey,
    SearchFilters,
    SessionInfo,
    SessionRow,
    SummaryInputs,
    SummaryRow,
)
from sessionmem.storage import boundary
from sessionmem.storage.base import (
    Accepted,
    InitAccepted,
    OnCommit,
    RowIds,
    StorageReport,
    StorageUnavailable,
    StoreStatistics,
)
from sessionmem.storage.commits import SHAREABLE, CommitSignal, Stored
from sessionmem.storage.consolidation_rules import ConsolidationStep, Marks, Use
from sessionmem.storage.export_records import ImportCounts, Record
from sessionmem.storage.search_terms import query_terms
from sessionmem.storage.sqlite import (
    cards,
    consolidation,
    export_import,
    file_memories,
    fulltext,
    journal_writes,
    result_writes,
    retention,
    row_reads,
    team_rows,
    words_held,
)
from sessionmem.storage.sqlite.checkpointer import IDLE_S, Checkpointer
from sessionmem.storage.sqlite.connection_setup import open_writer
from sessionmem.storage.sqlite.file_memory_cache import FileRecallCache
from sessionmem.storage.sqlite.fulltext import BASENAME_NOCASE_INDEX
from sessionmem.storage.sqlite.project_rows import ProjectRows
from sessionmem.storage.sqlite.readers import ReaderPool, ReadGatherer
from sessionmem.storage.sqlite.team_rows import Kind, OutboxBatch, OutboxCursor, Shared
from sessionmem.storage.team_records import PullCursor, SharedRow
from sessionmem.storage.writer import BACKGROUND_WEIGHT, GroupCommitWriter, Together

T = TypeVar("T")
A = TypeVar("A")
Args = TypeVarTuple("Args")

# What the disk or the file system does to a write, as opposed to what a request does:
# SQLITE_FULL, SQLITE_IOERR, SQLITE_READONLY, SQLITE_CANTOPEN.
UNAVAILABLE = (apsw.FullError, apsw.IOError, apsw.ReadOnlyError, apsw.CantOpenError)
# A batch of pruning takes a transaction's share of background writes alone (storage/writer.py).
PRUNE_WEIGHT = BACKGROUND_WEIGHT
# What each write may store, for the commit signal (storage/commits.py): the kinds of rows whose
# consumers it must wake, and no others.
_ACCEPT_INIT = Stored.JOURNAL | Stored.SESSIONS | Stored.PROMPTS
_ACCEPT_INIT_EMPTY = Stored.JOURNAL | Stored.SESSIONS
_SESSION_STATE = Stored.JOURNAL | Stored.SESSIONS  # parked, unparked, completed
_OBSERVATIONS = Stored.OBSERVATIONS | Stored.SESSIONS | Stored.JOURNAL  # their tokens, their events done
_SUMMARY = Stored.SUMMARIES | Stored.SESSIONS | Stored.JOURNAL


@asynccontextmanager
async def open_sqlite_store(path: Path, *, readers: int = 4, checkpoint_idle_s: float = IDLE_S,
                            fold_file_case: bool = FOLDS_FILE_CASE) -> AsyncIterator[SQLiteStore]:
    """Open (creating and migrating) the database at ``path`` for the duration of the block.

    Resource handling:
        The writer and checkpointer tasks live in a nursery owned by this context
        manager. On exit, the writer stops taking submissions and commits what is
        queued (a commit that started always finishes), the checkpointer makes one
        last attempt, and every connection is closed; the clean-up after the writer's
        drain takes at most :attr:`SQLiteStore.close_timeout_s`, which the owner may
        lower before leaving the block (its share of a shutdown budget).
    """
    store = SQLiteStore(path, readers=readers, checkpoint_idle_s=checkpoint_idle_s, fold_file_case=fold_file_case)
    await store._open()
    try:
        async with trio.open_nursery() as nursery:
            assert store._writer is not None
            await nursery.start(store._writer.run)
            checkpoints = trio.CancelScope()

            async def checkpoint_until_closed() -> None:
                with checkpoints:
                    await store._checkpointer.run(close_timeout_s=store.close_timeout_s)

            nursery.start_soon(checkpoint_until_closed)
            await nursery.start(store._gathered.run)
            try:
                yield store
            finally:
                store._writer.close()  # the writer drains what is queued, then returns
                store._gathered.close()  # so do the gathered reads
                checkpoints.cancel(reason="store closing")
    finally:
        with trio.move_on_after(store.close_timeout_s, shield=True):
            await store._close()


class SQLiteStore:
    """SQLite in WAL mode under ``path``; see the module docstring. Use :func:`open_sqlite_store`."""

    def __init__(self, path: Path, *, readers: int = 4, checkpoint_idle_s: float = IDLE_S,
                 fold_file_case: bool = FOLDS_FILE_CASE) -> None:
        self.path = path
        self.close_timeout_s = 5.0
        self._readers = ReaderPool(path, readers)
        self._gathered = ReadGatherer(path)  # file recall's short reads, on every PostToolUse of a file
        self._project_rows = ProjectRows()  # each project's row ids, brought up to date by each read
        # and the rows they answer from, until an observation about the file is stored; file names match
        # in any case where the OS's disks ignore it (sessionmem.protocol.path_case)
        self._file_recall = FileRecallCache(fold_case=fold_file_case)
        self._checkpointer = Checkpointer(path, idle_s=checkpoint_idle_s)
        self._connection: apsw.Connection | None = None
        self._writer: GroupCommitWriter | None = None
        self._commits = CommitSignal()  # the writer publishes each commit that changed rows

    # -- lifecycle ---------------------------------------------------------------

    async def _open(self) -> None:
        self._connection = await trio.to_thread.run_sync(open_writer, self.path)
        if self._file_recall.fold_case:  # file recall looks names up in any case: an index for it (once)
            await trio.to_thread.run_sync(self._connection.execute, BASENAME_NOCASE_INDEX)
        self._writer = GroupCommitWriter(self._connection, commits=self._commits)
        await self._readers.open()

    async def _close(self) -> None:
        await self._readers.aclose(timeout_s=self.close_timeout_s)
        if self._connection is not None:
            connection, self._connection = self._connection, None
            await trio.to_thread.run_sync(connection.close)

    def statistics(self) -> StoreStatistics:
        if self._writer is None:
            raise RuntimeError("store is not open")
        return StoreStatistics(str(self.path), self._writer.statistics(), self._checkpointer.statistics(),
                               self._gathered.statistics(), self._file_recall.statistics())

    @property
    def commits(self) -> CommitSignal:
        """The commit signal ("something was stored", and what): what the vector index, the team push
        and the live pages wait on (:mod:`~sessionmem.storage.commits`)."""
        return self._commits

    async def write(self, fn: Callable[[apsw.Connection, *Args], T], *args: *Args,
                    on_commit: Callable[[T], None] | None = None, background: bool = False, weight: int = 1,
                    stores: Stored = Stored.NOTHING) -> T:
        """``fn(connection, *args)`` in a group commit; ``background``, ``weight`` and ``stores`` (the kinds
        of rows it may store, for the commit signal) as :meth:`GroupCommitWriter.submit` has them (what
        actors store is background work). Every write of the store goes through here; a database that
        cannot take writes raises :class:`StorageUnavailable`."""
        with self._taking_writes() as writer:
            return await writer.submit(lambda connection: fn(connection, *args), on_commit=on_commit,
                                       background=background, weight=weight, stores=stores)

    async def _write_together(self, together: Together[A, T], argument: A, *,
                              on_commit: Callable[[T], None] | None = None, background: bool = False,
                              weight: int = 1, stores: Stored = Stored.NOTHING) -> T:
        """``together(connection, [argument])[0]`` in a group commit, in one call with the writes of
        its kind beside it (:meth:`GroupCommitWriter.submit_together`)."""
        with self._taking_writes() as writer:
            return await writer.submit_together(together, argument, on_commit=on_commit, background=background,
                                                weight=weight, stores=stores)

    @contextmanager
    def _taking_writes(self) -> Iterator[GroupCommitWriter]:
        """The writer; a database that cannot take writes (disk full, read-only) raised as :class:`StorageUnavailable`."""
        if self._writer is None:
            raise RuntimeError("store is not open")
        try:
            yield self._writer
        except UNAVAILABLE as exc:
            raise StorageUnavailable(f"the database cannot take writes: {exc}") from exc

    # -- journal (storage/sqlite/journal_writes.py) -----------------------------------------

    async def accept_init(self, event: InitEvent, on_commit: OnCommit) -> InitAccepted:
        def deliver(accepted: InitAccepted) -> None:
            if not accepted.duplicate:
                on_commit(accepted.envelope)

        # The prompt is stored with the accept (a document); without one, only the session is touched.
        stores = _ACCEPT_INIT if event.prompt else _ACCEPT_INIT_EMPTY
        return await self.write(journal_writes.accept_init, event, on_commit=deliver, stores=stores)

    async def accept_event(
        self, event: ObservationEvent | SummarizeEvent | CompleteEvent, on_commit: OnCommit
    ) -> Accepted:
        def deliver(accepted: Accepted) -> None:
            if not accepted.parked and not accepted.duplicate:
                on_commit(accepted.envelope)

        # The journal only (the hot path: it wakes neither the index nor the push). A session made here for an
        # event that came before its init travels with the first result stored for it.
        return await self._write_together(journal_writes.accept_events, event, on_commit=deliver,
                                          stores=Stored.JOURNAL)

    async def pending_events(self) -> list[Envelope]:
        return await self._readers.run(row_reads.pending_events)

    async def park_session(self, claude_session_id: str, error: str) -> int:
        return await self.write(journal_writes.park_session, claude_session_id, error, stores=_SESSION_STATE)

    async def unpark_session(
        self, claude_session_id: str, on_commit: Callable[[list[Envelope]], None]
    ) -> list[Envelope]:
        return await self.write(journal_writes.unpark_session, claude_session_id, on_commit=on_commit,
                                stores=_SESSION_STATE)

    # -- results (storage/sqlite/result_writes.py) -------------------------------------------

    async def session_info(self, claude_session_id: str) -> SessionInfo | None:
        return await self._readers.run(partial(row_reads.session_info, claude_session_id=claude_session_id))

    async def store_observations(
        self,
        session: SessionInfo,
        items: Sequence[tuple[Envelope, ObservationEvent, CompressedObservation]],
    ) -> int:
        if not items:
            return 0

        def stored(result: result_writes.Stored) -> None:
            self._file_recall.stored(session.claude_session_id, session.project, result.recalled,
                                     agent=session.agent)

        result = await self._write_together(result_writes.store_observations, (session, items), on_commit=stored,
                                            background=True, weight=len(items), stores=_OBSERVATIONS)
        return result.inserted

    async def store_summary(self, session: SessionInfo, envelope: Envelope, summary: CompressedSummary) -> bool:
        assert isinstance(envelope.event, SummarizeEvent)
        return await self.write(result_writes.store_summary, session, envelope, summary, background=True,
                                weight=result_writes.SUMMARY_WEIGHT, stores=_SUMMARY)

    async def complete_session(self, session: SessionInfo, envelope: Envelope) -> None:
        await self.write(result_writes.complete_session, session, envelope, background=True, stores=_SESSION_STATE)

    async def summary_inputs(self, session: SessionInfo) -> SummaryInputs:
        return await self._readers.run(partial(row_reads.summary_inputs, session=session))

    # -- reads (storage/sqlite/row_reads.py) ---------------------------------------------------

    async def list_sessions(self, *, project: str | None, limit: int, offset: int,
                            agent: str | None = None) -> list[SessionRow]:
        return await self._readers.run(partial(row_reads.list_sessions, project=project, limit=limit, offset=offset,
                                               agent=agent))

    async def list_projects(self, *, limit: int, offset: int = 0, containing: str | None = None) -> list[ProjectRow]:
        return await self._readers.run(partial(row_reads.list_projects, limit=limit, offset=offset,
                                               containing=containing))

    async def session_by_db_id(self, session_db_id: int) -> SessionRow | None:
        return await self._readers.run(partial(row_reads.session_by_db_id, session_db_id=session_db_id))

    async def list_observations(self, *, project: str | None, limit: int, offset: int, origin: str | None = None,
                                flagged: bool = False, agent: str | None = None) -> list[ObservationRow]:
        return await self._readers.run(partial(row_reads.list_observations, project=project, limit=limit,
                                               offset=offset, origin=origin, flagged=flagged, agent=agent))

    async def get_observation(self, observation_id: int) -> ObservationDetail | None:
        return await self._readers.run(partial(row_reads.get_observation, observation_id=observation_id))

    async def list_summaries(self, *, project: str | None, limit: int, offset: int, origin: str | None = None,
                             flagged: bool = False, agent: str | None = None) -> list[SummaryRow]:
        return await self._readers.run(partial(row_reads.list_summaries, project=project, limit=limit, offset=offset,
                                               origin=origin, flagged=flagged, agent=agent))

    async def llm_tokens_since(self, timestamp: float) -> int:
        return await self._readers.run(partial(row_reads.llm_tokens_since, timestamp=timestamp))

    async def journal_counts(self) -> JournalCounts:
        return await self._readers.run(row_reads.journal_counts)

    # -- retention (storage/sqlite/retention.py) ------------------------------------------------

    async def prune_payloads(self, before: float) -> int:
        """Strip raw tool data from stored observations that happened before ``before``, a batch a
        transaction (other writes go between them); returns how many."""
        pruned, after = 0, 0
        while True:
            count, after = await self.write(partial(retention.prune_payloads, before=before, after_id=after),
                                            background=True, weight=PRUNE_WEIGHT, stores=Stored.JOURNAL)
            pruned += count
            if after == 0:
                return pruned

    # -- consolidation (storage/sqlite/consolidation.py) ---------------------------------------------

    async def consolidation_behind(self, *, limit: int) -> tuple[int, list[str]]:
        return await self._readers.run(partial(consolidation.behind, limit=limit))

    async def consolidate(self, told: Mapping[str, Collection[int]], *, limit: int) -> ConsolidationStep:
        """The next ``limit`` observations consolidated, in one background transaction (links and counts
        only: nothing a consumer of the commit signal follows)."""
        return await self.write(partial(consolidation.consolidate, told=told, now=time.time(), limit=limit),
                                background=True, weight=max(1, limit // 8))

    async def mark_fetched(self, ids: Sequence[int], *, key: str) -> dict[int, Use]:
        return await self.write(partial(consolidation.mark_fetched, ids=ids, key=key), background=True)

    async def consolidation_state(self) -> tuple[set[int], dict[int, Use]]:
        """Every observation not handed over (merged or superseded), and the use counts."""
        return await self._readers.run(lambda connection: (consolidation.hidden_ids(connection),
                                                           consolidation.uses(connection)))

    async def consolidation_marks(self, ids: Sequence[int]) -> dict[int, Marks]:
        return await self._readers.run(partial(consolidation.marks, ids=ids))

    async def reclaim_space(self, *, full: bool = False) -> None:
        """Give freed pages back to the file system: incrementally, or by a full VACUUM (``full``)."""
        with self._taking_writes() as writer:
            await writer.run_alone(retention.vacuum if full else retention.reclaim)

    async def storage_report(self) -> StorageReport:
        return await self._readers.run(partial(retention.report, path=self.path))

    # -- export and import (storage/sqlite/export_import.py) ---------------------------------------

    async def export_page(self, *, project: str | None, since: float | None,
                          after_session: int) -> tuple[list[Record], int]:
        return await self._readers.run(partial(export_import.export_page, project=project, since=since,
                                               after_session=after_session))

    async def import_records(self, records: Sequence[Record]) -> ImportCounts:
        records = await boundary.cleaned_off_thread(boundary.clean_records, records)  # no secret from a file
        return await self.write(partial(export_import.import_records, records=records, now=time.time()),
                                on_commit=lambda _: self._file_recall.clear(), stores=SHAREABLE)

    # -- team memory (storage/sqlite/team_rows.py): the outbox, the cursors, pulled rows ---------------------

    async def team_start(self) -> str:
        """This data dir's machine id (made at the first call, with the outbox cursors above what is stored)."""
        return await self.write(team_rows.start_outbox, background=True)

    async def team_outbox_cursor(self, name: str) -> OutboxCursor:
        return await self._readers.run(partial(team_rows.read_outbox_cursor, name=name))

    async def team_pull_state(self, share_projects: Sequence[str] | None = None, approved: Collection[str] = ()
                              ) -> tuple[PullCursor, list[str] | None, list[str] | None]:
        """The pull cursor, the project keys pulled so far (``None``: all), and those to pull now given
        ``share_projects`` (``None`` when it is ``None``: every project) and the keys the user ``approved``:
        one snapshot, one reader trip."""
        def read(connection: apsw.Connection) -> tuple[PullCursor, list[str] | None, list[str] | None]:
            with connection:  # one snapshot: cursor and keys were written in one transaction
                cursor, keys = team_rows.read_pull_cursor(connection), team_rows.read_pull_keys(connection)
                wanted = None if share_projects is None else team_rows.pull_keys(connection, share_projects, approved)
            return cursor, keys, wanted

        return await self._readers.run(read)

    async def team_outbox(self, *, cursor: OutboxCursor, shared: Shared, limit: int, project: str | None = None,
                          kinds: Sequence[Kind] = ("session", "prompt", "observation", "summary"),
                          upto: OutboxCursor | None = None) -> OutboxBatch:
        return await self._readers.run(partial(team_rows.read_outbox, cursor=cursor, shared=shared, limit=limit,
                                               project=project, kinds=kinds, upto=upto))

    async def team_advance(self, values: dict[str, str]) -> None:
        """Set team cursors (name -> encoded value) in one transaction."""
        await self.write(team_rows.advance, values, background=True)

    async def team_import(self, rows: Sequence[SharedRow], cursor: tuple[str, str] | None, *,
                          keys: Sequence[str] | None) -> team_rows.PulledImport:
        """Import pulled rows, each only into a project of ``keys`` (those the pull asked for; ``None``: any),
        and set the cursor ``(name, encoded value)``, if given, in the same transaction."""
        rows = await boundary.cleaned_off_thread(boundary.clean_rows, rows)  # no secret from another machine
        return await self.write(partial(team_rows.import_pulled, rows=rows, cursor=cursor, now=time.time(),
                                        keys=keys),
                                on_commit=lambda _: self._file_recall.clear(), background=True,
                                weight=max(1, len(rows)), stores=SHAREABLE if rows else Stored.NOTHING)

    async def team_backlog(self, *, cursor: OutboxCursor, shared: Shared) -> int:
        return await self._readers.run(partial(team_rows.backlog, cursor=cursor, shared=shared))

    async def team_rows_above(self, *, project: str, cursor: OutboxCursor) -> int:
        return await self._readers.run(partial(team_rows.rows_above, project=project, cursor=cursor))

    async def team_project_keys(self, project: str) -> list[str]:
        """The keys the sessions of ``project`` here know it by (``""``: no remote); none: no such project."""
        return await self._readers.run(partial(team_rows.project_keys, project=project))

    async def team_share_requests(self) -> list[tuple[str, str]]:
        """``(project_key, project)`` of the sessions whose repository asks to share (its share file)."""
        return await self._readers.run(team_rows.share_requests)

    # -- search (storage/sqlite/fulltext.py, project_rows.py, cards.py, file_memories.py) ----------------

    async def search_text(self, query: str, filters: SearchFilters, limit: int, *,
                          every_word_first: bool = False) -> list[RankedKey]:
        terms = query_terms(query)
        if not terms:
            return []
        return await self._readers.run(partial(self._search_text, terms=terms, filters=filters, limit=limit,
                                               every_word_first=every_word_first))

    def _search_text(self, connection: apsw.Connection, *, terms: list[str], filters: SearchFilters, limit: int,
                     every_word_first: bool) -> list[RankedKey]:
        """On a reader thread: full-text search, told which rows the project holds (``project_rows.py``)."""
        rows = None
        if filters.project is not None:
            rows = self._project_rows.read(connection, filters.project, filters.wanted_kinds())
        return fulltext.search_text(connection, terms, filters, limit, every_word_first=every_word_first,
                                    project_rows=rows)

    async def search_text_held(self, query: str, filters: SearchFilters, limit: int, *,
                               held_of_first: int) -> tuple[list[RankedKey], dict[tuple[str, int], float]]:
        terms = query_terms(query)
        if not terms:
            return [], {}

        def read(connection: apsw.Connection) -> tuple[list[RankedKey], dict[tuple[str, int], float]]:
            # One trip to a reader thread for both: a second would cost more than the share itself.
            found = self._search_text(connection, terms=terms, filters=filters, limit=limit,
                                      every_word_first=True)
            first = [(key.kind, key.row_id) for key in found[:held_of_first]]
            return found, words_held.words_held(connection, terms, first) if first else {}

        return await self._readers.run(read)

    async def keep_matching(self, keys: Sequence[tuple[str, int]], filters: SearchFilters) -> set[tuple[str, int]]:
        return await self._readers.run(partial(fulltext.keep_matching, keys=keys, filters=filters))

    async def project_rows(self, project: str, kinds: tuple[str, ...]) -> dict[str, RowIds]:
        return await self._readers.run(partial(self._project_rows.read, project=project, kinds=kinds))

    async def cards(self, keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], DocumentCard]:
        return await self._readers.run(partial(cards.cards, keys=keys))

    async def documents(self, keys: Sequence[tuple[str, int]]) -> list[Document]:
        return await self._readers.run(partial(cards.documents, keys=keys))

    async def document_ids(self, *, after: dict[str, int] | None = None,
                           limit: int | None = None) -> dict[str, list[int]]:
        return await self._readers.run(partial(cards.document_ids, after=after, limit=limit))

    async def timeline(self, anchor: tuple[str, int], *, before: int, after: int,
                       origin: str | None = None) -> list[DocumentCard] | None:
        return await self._readers.run(partial(cards.timeline, anchor=anchor, before=before, after=after,
                                               origin=origin))

    async def observations_by_ids(self, ids: Sequence[int]) -> list[ObservationRow]:
        return await self._readers.run(partial(row_reads.observations_by_ids, ids=ids))

    async def file_memories(self, project: str, path: str, *, exclude_session: str,
                            limit: int) -> list[FileMemory]:
        key = self._file_recall.key(project, path)
        fold_case = self._file_recall.fold_case
        rows = self._file_recall.get(key)
        if rows is None:
            ticket = self._file_recall.ticket()
            rows = await self._gathered.read(partial(file_memories.file_memory_rows, project=project, path=path,
                                                     exclude_session=None, most=self._file_recall.rows_kept,
                                                     fold_case=fold_case))
            self._file_recall.put(key, ticket, rows)
        others = sum(1 for row in rows if row.claude_session_id != exclude_session)
        if len(rows) == self._file_recall.rows_kept and others < limit * 4:
            # The asking session's own memories crowd the file's newest rows: older ones of
            # other sessions may be past them. Rare; read exactly what it is answered.
            return await self._gathered.read(partial(file_memories.file_memories, project=project, path=path,
                                                     exclude_session=exclude_session, limit=limit,
                                                     fold_case=fold_case))
        return file_memories.choose_file_memories(rows, exclude_session, limit)

    async def context_start(self, project: str, *, summaries: int, recent: int, latest_prompt: bool,
                            session: str = "", origin: str | None = None, own: bool = False) -> ContextStart:
        return await self._readers.run(partial(row_reads.read_context_start, project=project, summaries=summaries,
                                               recent=recent, latest_prompt=latest_prompt, session=session,
                                               origin=origin, own=own))

    async def context_rows(self, candidates: Sequence[tuple[str, int]], filters: SearchFilters,
                           choose: Callable[[set[int]], list[int]]) -> ContextRows:
        return await self._readers.run(partial(row_reads.context_rows, candidates=candidates, filters=filters,
                                               choose=choose))
