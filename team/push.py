"""Pushing: this machine's rows of shared projects to the team database, a batch a transaction.

One step (:meth:`Pusher.push_batch`) reads a batch above a cursor
(:func:`sessionmem.storage.sqlite.team_rows.read_outbox`), adds the vectors the local index
holds of its observations and summaries, pushes it in one transaction of the team
database, and only then moves the local cursor. A crash between the two pushes the batch
again: the team database takes it as a no-op (its upserts are idempotent). The same step
serves the outbox (new memory, cursor ``push``) and ``sessionmem share push`` (a project's
past memory, cursor ``share:<project>``).

Vectors: fresh rows are embedded by the local index a moment after they are stored. A
batch waits for them at most :data:`VECTOR_WAIT_S`, and only while the index has a short
backlog (under a replay the index yields to hooks for up to half a minute: waiting then
would hold every push up, and another machine finds the rows by its own index anyway).
What went without is sent again once the index has it (:meth:`Pusher.fill_vectors`,
cursor ``push.vectors``): the team database fills a missing vector, and keeps the rest.

Error handling:
    :class:`~sessionmem.storage.pg.store.TeamUnavailable` propagates (the caller waits and
    tries again); the local cursor has not moved then. A batch the team database refuses
    for what it holds (any other error) is pushed again a row at a time: a row refused
    twice is logged, counted (``refused``) and passed over, so that one row PostgreSQL
    cannot take never holds up the rows after it. (Texts lose their NUL characters in the
    team store: :mod:`sessionmem.storage.pg.text`.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import msgspec
import trio

from sessionmem.index.actor import IndexState, VectorIndex
from sessionmem.runtime.logs import log_exception
from sessionmem.storage.pg.store import TeamStore, TeamUnavailable
from sessionmem.storage.sqlite.store import SQLiteStore
from sessionmem.storage.sqlite.team_rows import (
    OUTBOX,
    VECTORS,
    Kind,
    OutboxBatch,
    OutboxCursor,
    OutboxRow,
    Shared,
    encode,
)
from sessionmem.storage.team_records import Origin, SharedRow

log = logging.getLogger(__name__)

VECTOR_WAIT_S = 2.0  # the most a batch waits for the index to embed its rows
VECTOR_WAIT_BACKLOG = 64  # ...and only while the index has at most this many documents to embed
VECTOR_POLL_S = 0.1
DOCUMENT_KINDS: tuple[Kind, ...] = ("observation", "summary")
REFUSED_RETRY_S = 1.0  # a row refused alone is tried once more after this, then passed over


class PushOutcome(msgspec.Struct, frozen=True):
    pushed: int  # rows sent to the team database
    scanned: int  # rows read locally (0: nothing above the cursor)
    without_vectors: int  # observations and summaries sent without their vector
    after: OutboxCursor
    refused: int = 0  # rows the team database would not take (logged; kept here only)


def shared_rows(rows: Sequence[OutboxRow], vectors: dict[tuple[str, int], bytes], origin: Origin,
                model: str) -> list[SharedRow]:
    """The batch as the team database takes it: each row with its origin, and its vector when there is one."""
    shared = []
    for row in rows:
        vector = vectors.get(row.document) if row.document is not None else None
        shared.append(SharedRow(record=row.record, project_key=row.project_key, origin=origin,
                                vector=vector, model=model if vector is not None else ""))
    return shared


class Pusher:
    """Push steps for one machine; see the module docstring."""

    def __init__(self, store: SQLiteStore, team: TeamStore, index: VectorIndex, *, origin: Origin,
                 batch: int, after_push: Callable[[], None] | None = None) -> None:
        self._after_push = after_push  # tests only: what happens between the team commit and the cursor's move
        self._store = store
        self._team = team
        self._index = index
        self._origin = origin
        self._batch = batch

    async def push_batch(self, cursor_name: str, shared: Shared, *, project: str | None = None,
                         wait_for_vectors: bool = True) -> PushOutcome:
        """Push one batch above the cursor ``cursor_name`` (of ``project`` only, if given) and move the cursor."""
        cursor = await self._store.team_outbox_cursor(cursor_name)
        batch = await self._store.team_outbox(cursor=cursor, shared=shared, limit=self._batch, project=project)
        if not batch.moved:
            return PushOutcome(0, 0, 0, cursor)
        vectors = await self._vectors(batch, wait=wait_for_vectors)
        documents = sum(row.document is not None for row in batch.rows)
        refused = 0
        if batch.rows:
            refused = await self._push(shared_rows(batch.rows, vectors, self._origin, self._index.model_id))
            if self._after_push is not None:
                self._after_push()
        advanced = {cursor_name: encode(batch.after)}
        if project is None and self._index.enabled:
            # The vector cursor follows when nothing below it is missing a vector.
            fill = await self._store.team_outbox_cursor(VECTORS)
            if len(vectors) == documents and (fill.observation, fill.summary) == (cursor.observation, cursor.summary):
                advanced[VECTORS] = encode(batch.after)
        elif project is None:
            advanced[VECTORS] = encode(batch.after)
        await self._store.team_advance(advanced)
        return PushOutcome(len(batch.rows) - refused, batch.scanned, documents - len(vectors), batch.after, refused)

    async def fill_vectors(self, shared: Shared) -> int:
        """Send again, with their vectors, rows pushed without (once the index has embedded them); returns how
        many were sent. Nothing while the index is still catching up."""
        if not self._index.enabled:
            return 0
        if self._index.statistics().state is not IndexState.READY or self._index.pending:
            return 0
        fill = await self._store.team_outbox_cursor(VECTORS)
        pushed = await self._store.team_outbox_cursor(OUTBOX)
        if fill.observation >= pushed.observation and fill.summary >= pushed.summary:
            return 0
        batch = await self._store.team_outbox(cursor=fill, shared=shared, limit=self._batch, kinds=DOCUMENT_KINDS,
                                              upto=pushed)
        vectors = await self._vectors(batch, wait=False)
        rows = [row for row in batch.rows if row.document is None or row.document in vectors]
        if any(row.document is not None for row in rows):
            await self._push(shared_rows(rows, vectors, self._origin, self._index.model_id))
        after = batch.after if batch.moved else pushed
        await self._store.team_advance({VECTORS: encode(msgspec.structs.replace(
            fill, observation=after.observation, summary=after.summary))})
        return len(vectors)

    async def _push(self, rows: list[SharedRow]) -> int:
        """``rows`` in one transaction of the team database; returns how many it refused (see the module
        docstring: 0 unless the batch was refused for what it holds)."""
        try:
            await self._team.push(rows)
            return 0
        except TeamUnavailable:
            raise
        except Exception as exc:
            log_exception(log, f"team push: a batch of {len(rows)} row(s) was refused; pushing it a row at a time",
                          exc)
        refused = 0
        for row in rows:
            for attempt in range(2):
                try:
                    await self._team.push([row])
                    break
                except TeamUnavailable:
                    raise
                except Exception as exc:
                    if attempt == 0:
                        await trio.sleep(REFUSED_RETRY_S)
                        continue
                    refused += 1
                    record = row.record
                    log.warning("team push: the team database refused a %s of session %s (%s: %s); kept here only",
                                type(record).__name__, record.claude_session_id, type(exc).__name__, str(exc)[:300])
        return refused

    async def _vectors(self, batch: OutboxBatch, *, wait: bool) -> dict[tuple[str, int], bytes]:
        keys = [row.document for row in batch.rows if row.document is not None]
        if not keys or not self._index.enabled:
            return {}
        vectors = await self._index.vectors_of(keys)
        if not wait:
            return vectors
        with trio.move_on_after(VECTOR_WAIT_S):
            while len(vectors) < len(keys) and self._index.pending <= VECTOR_WAIT_BACKLOG:
                await trio.sleep(VECTOR_POLL_S)
                vectors = await self._index.vectors_of(keys)
        return vectors
