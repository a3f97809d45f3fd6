"""The narrow storage interface that actors and HTTP routes use.

Everything the rest of the worker knows about persistence is on :class:`Store`.
The SQLite backend (:mod:`sessionmem.storage.sqlite.store`) is the embedded default; a
shared PostgreSQL backend (pgvector, tsvector) can implement the same protocol
without touching actors or routes.

Contract every backend keeps:
- ``accept_*`` commit the event to the journal before returning, and call
  ``on_commit`` (on the Trio thread, in journal order, only for events that need
  processing) before any later-accepted event's callback.
- ``store_*`` and ``complete_session`` write their result and mark the journal
  event(s) done in one transaction; repeating them with the same event ids changes
  nothing (idempotent), which makes replay after a crash exactly-once.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Protocol

import msgspec
import numpy as np
import numpy.typing as npt

from sessionmem.events import CompleteEvent, Envelope, InitEvent, ObservationEvent, SummarizeEvent
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
from sessionmem.storage.commits import CommitSignal
from sessionmem.storage.consolidation_rules import ConsolidationStep, Marks, Use
from sessionmem.storage.export_records import ImportCounts, Record
from sessionmem.storage.writer import WriterStatistics


class StorageUnavailable(Exception):
    """The database cannot take writes right now (disk full, an I/O error, a read-only file).

    Nothing of the failed write happened. It is the environment failing, not the
    request or the actor: callers answer 503 and try again later (the HTTP edge), or
    wait and retry (the actors), and carry on once space is back.
    """


class KeyReused(Exception):
    """An idempotency key already names another session's event, or an event of another kind: not a
    retry of that event, and not to be answered as one (nor stored under it)."""


class InitAccepted(msgspec.Struct, frozen=True):
    envelope: Envelope
    session_db_id: int
    prompt_number: int
    skipped: bool
    reason: str = ""
    duplicate: bool = False  # an event with the same idempotency key was accepted before


class Accepted(msgspec.Struct, frozen=True):
    envelope: Envelope
    session_db_id: int
    prompt_number: int
    parked: bool  # the session has failed: kept in the journal, not processed
    duplicate: bool = False  # an event with the same idempotency key was accepted before


RowIds = npt.NDArray[np.int64]  # row ids of one kind, ascending


# What each part of the store counts (its writer, checkpoints, gathered reads, file recall's rows),
# as /debug shows it, and what the database holds: each part fills its own.
class CheckpointerStatistics(msgspec.Struct, frozen=True, kw_only=True):
    checkpoints: int
    wal_bytes: int  # size of the WAL file at the last look
    last_checkpointed_pages: int
    failures: int
    last_error: str
    truncations: int = 0  # TRUNCATE checkpoints that cut the WAL to zero bytes
    restarts: int = 0  # RESTART checkpoints after which the WAL is written from its beginning again


class GatheredReadStatistics(msgspec.Struct, frozen=True):
    reads: int
    trips: int  # to a worker thread and back, one per batch
    largest_batch: int
    queued: int


class FileRecallCacheStatistics(msgspec.Struct, frozen=True):
    entries: int
    hits: int
    misses: int
    dropped: int  # rows dropped: memories were imported


class StorageReport(msgspec.Struct, frozen=True, kw_only=True):
    database_bytes: int
    wal_bytes: int
    observations: int
    raw_payload_bytes: int  # journal payloads still holding raw tool data
    raw_payloads: int
    auto_vacuum: str  # incremental | none (pruning frees pages for reuse; `prune --vacuum` gives them back)
    free_pages: int


class StoreStatistics(msgspec.Struct, frozen=True):
    path: str
    writer: WriterStatistics
    checkpointer: CheckpointerStatistics
    gathered_reads: GatheredReadStatistics  # file recall's reads, several to a thread trip under load
    file_recall_cache: FileRecallCacheStatistics  # file recall's rows kept until their file's next observation


OnCommit = Callable[[Envelope], None]


class Store(Protocol):
    # Backends are opened by an async context manager of their own
    # (e.g. ``open_sqlite_store``) that owns their background tasks.
    def statistics(self) -> StoreStatistics: ...

    # -- the commit signal (storage/commits.py): "something was stored", and what
    @property
    def commits(self) -> CommitSignal: ...

    # -- journal (write side, used by routes)
    async def accept_init(self, event: InitEvent, on_commit: OnCommit) -> InitAccepted: ...
    async def accept_event(
        self, event: ObservationEvent | SummarizeEvent | CompleteEvent, on_commit: OnCommit
    ) -> Accepted: ...
    async def pending_events(self) -> list[Envelope]: ...
    async def park_session(self, claude_session_id: str, error: str) -> int: ...
    async def unpark_session(
        self, claude_session_id: str, on_commit: Callable[[list[Envelope]], None]
    ) -> list[Envelope]:
        """Make parked events pending again; ``on_commit`` receives them, in order."""

    # -- results (write side, used by session actors)
    async def session_info(self, claude_session_id: str) -> SessionInfo | None: ...
    async def store_observations(
        self,
        session: SessionInfo,
        items: Sequence[tuple[Envelope, ObservationEvent, CompressedObservation]],
    ) -> int: ...
    async def store_summary(
        self, session: SessionInfo, envelope: Envelope, summary: CompressedSummary
    ) -> bool: ...
    async def complete_session(self, session: SessionInfo, envelope: Envelope) -> None: ...
    async def summary_inputs(self, session: SessionInfo) -> SummaryInputs: ...

    # -- reads (used by routes)
    async def list_sessions(self, *, project: str | None, limit: int, offset: int,
                            agent: str | None = None) -> list[SessionRow]: ...
    async def list_projects(self, *, limit: int, offset: int = 0, containing: str | None = None) -> list[ProjectRow]:
        """Projects with sessions, the most recently active first; ``containing``: only names holding it
        (any case)."""

    async def list_observations(self, *, project: str | None, limit: int, offset: int, origin: str | None = None,
                                flagged: bool = False, agent: str | None = None) -> list[ObservationRow]: ...
    async def get_observation(self, observation_id: int) -> ObservationDetail | None: ...
    async def list_summaries(self, *, project: str | None, limit: int, offset: int, origin: str | None = None,
                             flagged: bool = False, agent: str | None = None) -> list[SummaryRow]: ...
    async def session_by_db_id(self, session_db_id: int) -> SessionRow | None: ...
    async def journal_counts(self) -> JournalCounts: ...
    async def llm_tokens_since(self, timestamp: float) -> int:
        """LLM tokens (input + output) of the results stored since ``timestamp`` (the daily budget's seed)."""

    # -- retention
    async def prune_payloads(self, before: float) -> int:
        """Strip raw tool data from stored observations that happened before ``before``; returns how many."""

    async def reclaim_space(self, *, full: bool = False) -> None: ...

    async def storage_report(self) -> StorageReport: ...

    # -- consolidation (storage/sqlite/consolidation.py; the rules: storage/consolidation_rules.py)
    async def consolidation_behind(self, *, limit: int) -> tuple[int, list[str]]:
        """Observations waiting to be consolidated, and the sessions of the next batch of them."""

    async def consolidate(self, told: Mapping[str, Collection[int]], *, limit: int) -> ConsolidationStep:
        """Consolidate the next ``limit`` observations; ``told``: what their sessions were handed over."""

    async def mark_fetched(self, ids: Sequence[int], *, key: str) -> dict[int, Use]:
        """Memories fetched whole were used (once each ``key``); their new counts."""

    async def consolidation_state(self) -> tuple[set[int], dict[int, Use]]: ...
    async def consolidation_marks(self, ids: Sequence[int]) -> dict[int, Marks]: ...

    # -- export and import (records of storage/export_records.py, which documents their identity rules)
    async def export_page(self, *, project: str | None, since: float | None,
                          after_session: int) -> tuple[list[Record], int]:
        """The records of a page of sessions after ``after_session``; the next ``after_session`` (0: done)."""

    async def import_records(self, records: Sequence[Record]) -> ImportCounts:
        """Store exported records, idempotently, with new row ids."""

    # -- the read half (search, timeline, the vector index's documents, file recall).
    # A document is named by its key: (kind, row id), kind one of records.DOCUMENT_KINDS.
    async def search_text(self, query: str, filters: SearchFilters, limit: int, *,
                          every_word_first: bool = False) -> list[RankedKey]:
        """Full-text search: the best ``limit`` documents of the wanted kinds, best first; with
        ``every_word_first``, those holding every word of ``query`` before those holding some.

        ``query`` is a user's text, never query syntax: any string is safe.
        """

    async def search_text_held(self, query: str, filters: SearchFilters, limit: int, *,
                               held_of_first: int) -> tuple[list[RankedKey], dict[tuple[str, int], float]]:
        """:meth:`search_text` with ``every_word_first``, and the share (0 to 1) of the words it looks for
        in ``query`` that each of its first ``held_of_first`` documents holds, by key: in one read."""

    async def keep_matching(self, keys: Sequence[tuple[str, int]], filters: SearchFilters) -> set[tuple[str, int]]:
        """Those of ``keys`` that exist and pass ``filters``."""

    async def project_rows(self, project: str, kinds: tuple[str, ...]) -> dict[str, RowIds]:
        """The row ids of every document of ``kinds`` of ``project``, by kind, ascending; rows deleted
        meanwhile may be among them (see ``storage/sqlite/project_rows.py``)."""

    async def cards(self, keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], DocumentCard]: ...
    async def documents(self, keys: Sequence[tuple[str, int]]) -> list[Document]:
        """The texts the vector index embeds, of those ``keys`` that exist, in order."""

    async def document_ids(self, *, after: dict[str, int] | None = None,
                           limit: int | None = None) -> dict[str, list[int]]:
        """Row ids by kind, ascending (those above ``after[kind]``, at most ``limit`` a kind)."""

    async def timeline(self, anchor: tuple[str, int], *, before: int, after: int,
                       origin: str | None = None) -> list[DocumentCard] | None:
        """The documents of the anchor's project around it in time, oldest first; ``None`` if no anchor.
        ``origin``: those of one origin (``SearchFilters.origin``), and the anchor."""

    async def observations_by_ids(self, ids: Sequence[int]) -> list[ObservationRow]:
        """Those of ``ids`` that exist, in the order asked."""

    async def file_memories(self, project: str, path: str, *, exclude_session: str,
                            limit: int) -> list[FileMemory]: ...

    # -- the SessionStart context, in two reads (each one snapshot, one thread hop)
    async def context_start(self, project: str, *, summaries: int, recent: int, latest_prompt: bool,
                            session: str = "", origin: str | None = None, own: bool = False) -> ContextStart:
        """The project's ``summaries`` newest summaries, ``recent`` newest observation ids, if
        ``latest_prompt`` the latest prompt of ``session``, else of the project; ``origin``: of that
        origin only (``SearchFilters.origin``); if ``own``, ``session``'s own work so far (``recent``
        of its newest observations)."""

    async def context_rows(self, candidates: Sequence[tuple[str, int]], filters: SearchFilters,
                           choose: Callable[[set[int]], list[int]]) -> ContextRows:
        """The observations ``choose`` picks, given which ``candidates`` pass ``filters`` (their ids),
        and their sessions. ``choose`` runs on the reader's thread: pure computation only."""
