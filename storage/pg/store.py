"""The team database: the memory several machines share, on PostgreSQL with pgvector.

Each machine keeps its whole memory in its local SQLite store; the team database holds
the shared projects' rows of every machine. A machine pushes its own rows
(:meth:`TeamStore.push`) and pulls the others' (:meth:`TeamStore.pull`); PostgreSQL is
never on a hook's or a local read's path. The schema and its migrations are in
:mod:`sessionmem.storage.pg.schema`, the statements in :mod:`sessionmem.storage.pg.transfer`
and :mod:`sessionmem.storage.pg.search`, the connections in
:mod:`sessionmem.storage.pg.connections`.

Identity between machines (the export format's, :mod:`sessionmem.storage.export_records`): a
session is its Claude session id; a prompt its session and number; an observation its
session and tool use id; a summary its session, prompt number and creation time. A
project is its :func:`~sessionmem.storage.team_records.shared_key`.

Conflict rule, when a pushed row's identity is already stored:
    - Prompts, observations, summaries: the first stored wins (``ON CONFLICT DO NOTHING``);
      they are facts of one tool use or one prompt, the same wherever they come from. The
      one exception is a vector: a row stored without one takes the vector of a later push
      (its text is unchanged, pullers are not told).
    - Sessions are merged: the status furthest along (initialized < active < completed; a
      failed session stays failed unless one side completed it), ``created_at`` the
      least, ``updated_at`` and ``completed_at`` the greatest, ``first_prompt`` the first
      non-empty one. The project and the origin stay those of the first writer. A merge
      that changes the row gives it a new place in the pull order (and records the
      machine that changed it); a push that changes nothing leaves it where it was.
    So a push repeated, whole or in part (a crash between PostgreSQL's commit and the
    local cursor's advance), changes nothing: pushes are idempotent.

Pull order: every row carries ``xid``, the id of the transaction that wrote it last
(``pg_current_xact_id()``), and ``seq``, from one sequence for all tables. A pull
returns rows with ``(xid, seq) > cursor`` and ``xid < pg_snapshot_xmin(pg_current_snapshot())``,
in ``(xid, seq)`` order: a transaction still in flight holds the horizon below its own
rows, so a transaction that commits after a later one's rows were pulled is still pulled
(a cursor on ``seq`` alone would skip it for good). It leaves out the puller's own rows
(``exclude_machine_id``; for sessions, those it changed last) and, with ``keys``, the
projects it does not share. Pulled rows come without their vectors: the puller's local
index embeds what it imports. Each row is decoded by the rules of an import (the record
types of :mod:`~sessionmem.storage.export_records`, the caps of
:mod:`~sessionmem.storage.record_rules`); a row that breaks them, or is larger than a
batch, is refused (which row and why, never its content), and the cursor moves past it.

Resource handling:
    :func:`open_team_store` owns the connections (:class:`~sessionmem.storage.pg.connections.TeamConnections`):
    none is opened before a call needs one, and leaving the block closes them (a write in
    progress finishes first).

Error handling:
    Every call raises :class:`TeamUnavailable` when the database cannot be reached, the
    connection is lost, or its schema is newer than this code; the message never holds
    the password. The store itself stays usable: the next call connects again. A push
    either committed whole or did nothing.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Collection, Sequence
from contextlib import asynccontextmanager
from functools import partial

import msgspec
import numpy as np
import trio

from sessionmem.records import RankedKey, SearchFilters
from sessionmem.storage import boundary
from sessionmem.storage.pg import search, transfer
from sessionmem.storage.pg.connections import Connection, TeamConnections
from sessionmem.storage.pg.errors import TeamUnavailable
from sessionmem.storage.pg.schema import schema_version
from sessionmem.storage.pg.search import TeamCard
from sessionmem.storage.pg.text import text_without_nul, without_nul
from sessionmem.storage.pg.transfer import PullBatch, PushCounts, RefusedRow
from sessionmem.storage.team_records import PullCursor, SharedRow

__all__ = ["PullBatch", "PushCounts", "RefusedRow", "TeamCard", "TeamCheck", "TeamStore", "TeamStoreStatistics", "TeamUnavailable",
           "open_team_store"]


class TeamCheck(msgspec.Struct, frozen=True, kw_only=True):
    """What ``sessionmem doctor`` says of the team database."""

    server_version: str  # PostgreSQL's, e.g. "18.3"
    pgvector_version: str
    schema_version: int
    round_trip_ms: float  # one trivial query on a connection already open


class TeamStoreStatistics(msgspec.Struct, frozen=True, kw_only=True):
    connected: bool  # the writer connection is open
    connects: int
    failures: int  # calls that ended in TeamUnavailable
    last_error: str | None  # sanitized: no password
    pushes: int
    rows_pushed: int
    pulls: int
    rows_pulled: int
    rows_refused: int  # rows pulled that broke the rules of an import (passed over)


@asynccontextmanager
async def open_team_store(url: str, *, connect_timeout_s: float = 5.0, readers: int = 2
                          ) -> AsyncIterator[TeamStore]:
    """The team database at ``url`` for the duration of the block; see the module docstring.

    Never fails because the database is down: the first call that needs it connects (and
    migrates the schema), and raises :class:`TeamUnavailable` if it cannot. A URL that is
    not one raises :class:`TeamUnavailable` here.
    """
    store = TeamStore(TeamConnections(url, connect_timeout_s=connect_timeout_s, readers=readers))
    try:
        yield store
    finally:
        with trio.move_on_after(connect_timeout_s + 5.0, shield=True):
            await store._connections.aclose()


class TeamStore:
    """A team database; use :func:`open_team_store`."""

    def __init__(self, connections: TeamConnections) -> None:
        self._connections = connections
        self._pushes = 0
        self._rows_pushed = 0
        self._pulls = 0
        self._rows_pulled = 0
        self._rows_refused = 0

    def statistics(self) -> TeamStoreStatistics:
        connections = self._connections.statistics()
        return TeamStoreStatistics(
            connected=connections.connected, connects=connections.connects, failures=connections.failures,
            last_error=connections.last_error, pushes=self._pushes, rows_pushed=self._rows_pushed,
            pulls=self._pulls, rows_pulled=self._rows_pulled, rows_refused=self._rows_refused)

    async def push(self, rows: Sequence[SharedRow]) -> PushCounts:
        """Store ``rows`` (this machine's) in one transaction, by the conflict rule; idempotent. Their texts
        cross the boundary first (:mod:`~sessionmem.storage.boundary`: no private span, no secret)."""
        if not rows:
            return PushCounts()
        rows = await boundary.cleaned_off_thread(boundary.clean_rows, rows)  # whatever redact_secrets says here
        rows = [msgspec.structs.replace(row, record=without_nul(row.record), origin=without_nul(row.origin),
                                        project_key=text_without_nul(row.project_key)) for row in rows]
        counts = await self._connections.write(partial(transfer.push_rows, rows=rows))
        self._pushes += 1
        self._rows_pushed += len(rows)
        return counts

    async def pull(self, cursor: PullCursor, *, keys: Collection[str] | None, exclude_machine_id: str,
                   limit: int) -> PullBatch:
        """The next rows of other machines after ``cursor`` (of the projects ``keys``; ``None``: all), in pull
        order, at most ``limit`` and :data:`~sessionmem.storage.pg.transfer.PULL_BATCH_BYTES` of them; the
        rows that broke the rules of an import (refused, with why); and the cursor to pull from next time,
        past both (``cursor`` itself when there is none)."""
        batch = await self._connections.read(partial(
            transfer.pull_rows, cursor=cursor, keys=_keys(keys), exclude_machine_id=exclude_machine_id, limit=limit))
        self._pulls += 1
        self._rows_pulled += len(batch.rows)
        self._rows_refused += len(batch.refused)
        return batch

    async def check(self) -> TeamCheck:
        """The server's and pgvector's versions, the schema's, and a round trip's time."""
        return await self._connections.write(_check)

    async def search_text(self, query: str, filters: SearchFilters, limit: int, *,
                          keys: Collection[str] | None = None) -> list[RankedKey]:
        """Full-text search, as the SQLite store's (see :func:`search.search_text`); ``keys``: only
        those projects."""
        if limit <= 0 or not query.strip():
            return []
        return await self._connections.read(partial(search.search_text, query=text_without_nul(query),
                                                    filters=without_nul(filters), limit=limit, keys=_keys(keys)))

    async def nearest(self, vector: np.ndarray, k: int, filters: SearchFilters, *, model: str,
                      keys: Collection[str] | None = None) -> list[RankedKey]:
        """The ``k`` documents whose vectors (of ``model``) are nearest ``vector``, passing ``filters``;
        score: cosine similarity."""
        if k <= 0:
            return []
        return await self._connections.read(partial(search.nearest, vector=vector, k=k,
                                                    filters=without_nul(filters), model=text_without_nul(model),
                                                    keys=_keys(keys)))

    async def cards(self, keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], TeamCard]:
        """The cards of the rows ``keys`` (their ids in the team database) that exist, with their origin."""
        if not keys:
            return {}
        return await self._connections.read(partial(search.cards, keys=keys))


def _keys(keys: Collection[str] | None) -> list[str] | None:
    return None if keys is None else [text_without_nul(key) for key in keys]


def _check(connection: Connection) -> TeamCheck:
    server = connection.execute("SHOW server_version").fetchone()
    vector = connection.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    started = time.perf_counter()
    connection.execute("SELECT 1").fetchone()
    round_trip_ms = (time.perf_counter() - started) * 1000
    return TeamCheck(server_version=str(server[0]) if server else "", pgvector_version=str(vector[0]) if vector else "",
                     schema_version=schema_version(connection), round_trip_ms=round_trip_ms)
