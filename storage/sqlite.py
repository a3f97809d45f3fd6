"""The embedded SQLite backend of :class:`~sessionmem.storage.base.Store`, on APSW.

Resource handling:
    One writer connection, owned by a :class:`GroupCommitWriter` (one thread at a
    time), and a :class:`ReaderPool` of read-only connections. Nothing here touches
    SQLite on the Trio thread. The writer task runs in the
    nursery that :func:`open_sqlite_store` owns; leaving that block commits what is
    queued, then closes every connection.

Error handling:
    SQL errors propagate to the caller as ``apsw`` exceptions; the HTTP layer turns
    them into 500s and the actors count them as crashes. ``synchronous=FULL``: an
    acknowledged event survives a process crash and a power cut.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import apsw
import apsw.bestpractice
import msgspec
import trio

from sessionmem.events import (
    CompleteEvent,
    Envelope,
    InitEvent,
    ObservationEvent,
    SummarizeEvent,
    decode_event,
    encode_event,
    event_kind,
)
from sessionmem.records import CompressedObservation, CompressedSummary
from sessionmem.storage.base import (
    Accepted,
    InitAccepted,
    JournalCounts,
    OnCommit,
    SessionInfo,
    SummaryInputs,
)
from sessionmem.storage.checkpointer import run_checkpointer
from sessionmem.storage.readers import ReaderPool
from sessionmem.storage.schema import migrate
from sessionmem.storage.writer import GroupCommitWriter

_bestpractice_applied = False


def _apply_bestpractice() -> None:
    global _bestpractice_applied
    if not _bestpractice_applied:
        apsw.bestpractice.apply(apsw.bestpractice.recommended)
        _bestpractice_applied = True


def open_writer(path: Path) -> apsw.Connection:
    """Open (creating if needed) and migrate the database; returns the writer connection."""
    _apply_bestpractice()
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = apsw.Connection(str(path))
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("PRAGMA synchronous = FULL")
    # Checkpoints run beside the writer (storage/checkpointer.py), not inside a commit.
    connection.execute("PRAGMA wal_autocheckpoint = 0")
    connection.set_busy_timeout(5000)
    migrate(connection)
    return connection


def _rows(cursor: apsw.Cursor) -> list[dict[str, Any]]:
    names: list[str] | None = None
    out = []
    for row in cursor:
        if names is None:
            names = [d[0] for d in cursor.get_description()]
        out.append(dict(zip(names, row)))
    return out


_JSON_LIST_COLUMNS = ("facts", "concepts", "files_read", "files_modified")
_json_list = msgspec.json.Decoder(list[str])


def _observation_public(row: dict[str, Any]) -> dict[str, Any]:
    for column in _JSON_LIST_COLUMNS:
        if column in row and isinstance(row[column], str):
            row[column] = _json_list.decode(row[column])
    payload = row.pop("payload", None)
    if payload is not None:  # the raw tool data lives in the journal row of the event
        event = decode_event(payload)
        if isinstance(event, ObservationEvent):
            row["tool_input"] = event.tool_input
            row["tool_response"] = event.error if event.failed and event.tool_response is None else event.tool_response
    for column in ("compressed", "failed"):
        if column in row:
            row[column] = bool(row[column])
    return row


def _to_json(value: Any) -> str:
    return msgspec.json.encode(value).decode()


# ---------------------------------------------------------------------------
# Write operations: each runs inside the writer's transaction, on its thread.


def _load_session(connection: apsw.Connection, claude_session_id: str) -> tuple[int, int, str] | None:
    return connection.execute(
        "SELECT id, prompt_counter, status FROM sessions WHERE claude_session_id = ?", (claude_session_id,)
    ).fetchone()


def _create_session(connection: apsw.Connection, claude_session_id: str, project: str, cwd: str, now: float) -> int:
    connection.execute(
        "INSERT INTO sessions (claude_session_id, project, cwd, created_at, updated_at) VALUES (?, ?, ?, ?, ?)",
        (claude_session_id, project, cwd, now, now),
    )
    return connection.last_insert_rowid()


def _journal(connection: apsw.Connection, event: Any, status: str, now: float) -> Envelope:
    connection.execute(
        "INSERT INTO journal (claude_session_id, kind, status, accepted_at, processed_at, idempotency_key)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (event.session_id, event_kind(event), status, now, now if status == "done" else None, event.key or None),
    )
    event_id = connection.last_insert_rowid()
    connection.execute("INSERT INTO journal_payloads (id, payload) VALUES (?, ?)", (event_id, encode_event(event)))
    return Envelope(event_id, event)


def _already_journaled(connection: apsw.Connection, key: str) -> Envelope | None:
    if not key:
        return None
    row = connection.execute(
        "SELECT j.id, p.payload FROM journal j JOIN journal_payloads p ON p.id = j.id WHERE j.idempotency_key = ?",
        (key,),
    ).fetchone()
    return Envelope(row[0], decode_event(row[1])) if row else None


def _accept_init(connection: apsw.Connection, event: InitEvent) -> InitAccepted:
    now = time.time()
    earlier = _already_journaled(connection, event.key)
    if earlier is not None:
        first = earlier.event
        assert isinstance(first, InitEvent)
        found = _load_session(connection, first.session_id)
        return InitAccepted(earlier, found[0] if found else 0, first.prompt_number, skipped=not first.prompt,
                            reason=first.skip_reason, duplicate=True)
    found = _load_session(connection, event.session_id)
    if found is None:
        session_db_id, counter = _create_session(connection, event.session_id, event.project, event.cwd, now), 0
    else:
        session_db_id, counter, _status = found
    skipped, reason = False, ""
    if not event.prompt:
        skipped, reason = True, event.skip_reason or "prompt is empty"
        connection.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (now, session_db_id))
    else:
        counter += 1
        connection.execute(
            "INSERT INTO user_prompts (session_id, prompt_number, text, created_at) VALUES (?, ?, ?, ?)",
            (session_db_id, counter, event.prompt, now),
        )
        connection.execute(
            "UPDATE sessions SET prompt_counter = ?, first_prompt = coalesce(first_prompt, ?),"
            " status = CASE status WHEN 'failed' THEN 'failed' ELSE 'active' END,"
            " completed_at = NULL, updated_at = ? WHERE id = ?",
            (counter, event.prompt, now, session_db_id),
        )
    stamped = msgspec.structs.replace(event, prompt_number=counter)
    # The prompt is stored right here, in the accepting transaction: init needs no replay.
    envelope = _journal(connection, stamped, "done", now)
    return InitAccepted(envelope, session_db_id, counter, skipped, reason)


def _accept_event(connection: apsw.Connection, event: ObservationEvent | SummarizeEvent | CompleteEvent) -> Accepted:
    now = time.time()
    earlier = _already_journaled(connection, event.key)
    if earlier is not None:
        found = _load_session(connection, earlier.event.session_id)
        prompt_number = getattr(earlier.event, "prompt_number", 0)
        return Accepted(earlier, found[0] if found else 0, prompt_number, parked=False, duplicate=True)
    found = _load_session(connection, event.session_id)
    if found is None:
        # An event for a session we never saw init for (worker started mid-session):
        # keep it rather than lose it.
        project = event.project or "unknown"
        session_db_id, counter, status = _create_session(connection, event.session_id, project, getattr(event, "cwd", ""), now), 0, "initialized"
    else:
        session_db_id, counter, status = found
    if not isinstance(event, CompleteEvent):
        event = msgspec.structs.replace(event, prompt_number=counter)
    parked = status == "failed"
    envelope = _journal(connection, event, "parked" if parked else "pending", now)
    return Accepted(envelope, session_db_id, counter, parked)


def _mark_done(connection: apsw.Connection, event_ids: Sequence[int], now: float) -> None:
    connection.executemany(
        "UPDATE journal SET status = 'done', processed_at = ? WHERE id = ?", [(now, i) for i in event_ids]
    )


@asynccontextmanager
async def open_sqlite_store(path: Path, *, readers: int = 4) -> AsyncIterator[SQLiteStore]:
    """Open (creating and migrating) the database at ``path`` for the duration of the block.

    The writer task lives in a nursery owned by this context manager. On exit, the
    writer stops taking submissions, commits what is queued, and every connection
    is closed.
    """
    store = SQLiteStore(path, readers=readers)
    await store._open()
    try:
        async with trio.open_nursery() as nursery:
            assert store._writer is not None
            await nursery.start(store._writer.run)
            checkpoints = trio.CancelScope()

            async def checkpoint_until_closed() -> None:
                with checkpoints:
                    await run_checkpointer(path)

            nursery.start_soon(checkpoint_until_closed)
            try:
                yield store
            finally:
                store._writer.close()  # the writer drains what is queued, then returns
                checkpoints.cancel(reason="store closing")
    finally:
        with trio.CancelScope(shield=True):
            await store._close()


class SQLiteStore:
    """SQLite in WAL mode under ``path``; see the module docstring. Use :func:`open_sqlite_store`."""

    def __init__(self, path: Path, *, readers: int = 4) -> None:
        self.path = path
        self._readers = ReaderPool(path, readers)
        self._connection: apsw.Connection | None = None
        self._writer: GroupCommitWriter | None = None

    # -- lifecycle ---------------------------------------------------------------

    async def _open(self) -> None:
        self._connection = await trio.to_thread.run_sync(open_writer, self.path)
        self._writer = GroupCommitWriter(self._connection)
        await self._readers.open()

    async def _close(self) -> None:
        await self._readers.aclose()
        if self._connection is not None:
            connection, self._connection = self._connection, None
            await trio.to_thread.run_sync(connection.close)

    def statistics(self) -> dict[str, Any]:
        return {"path": str(self.path), "writer": self._writer.statistics() if self._writer else None}

    async def _write(self, fn: Any, *args: Any, on_commit: Any = None) -> Any:
        if self._writer is None:
            raise RuntimeError("store is not open")
        return await self._writer.submit(lambda connection: fn(connection, *args), on_commit=on_commit)

    # -- journal -------------------------------------------------------------------

    async def accept_init(self, event: InitEvent, on_commit: OnCommit) -> InitAccepted:
        def deliver(accepted: InitAccepted) -> None:
            if not accepted.duplicate:
                on_commit(accepted.envelope)

        return await self._write(_accept_init, event, on_commit=deliver)

    async def accept_event(
        self, event: ObservationEvent | SummarizeEvent | CompleteEvent, on_commit: OnCommit
    ) -> Accepted:
        def deliver(accepted: Accepted) -> None:
            if not accepted.parked and not accepted.duplicate:
                on_commit(accepted.envelope)

        return await self._write(_accept_event, event, on_commit=deliver)

    async def pending_events(self) -> list[Envelope]:
        def query(connection: apsw.Connection) -> list[Envelope]:
            cursor = connection.execute(
                "SELECT j.id, p.payload FROM journal j JOIN journal_payloads p ON p.id = j.id"
                " WHERE j.status = 'pending' ORDER BY j.id"
            )
            return [Envelope(event_id, decode_event(payload)) for event_id, payload in cursor]

        return await self._readers.run(query)

    async def park_session(self, claude_session_id: str, error: str) -> int:
        def park(connection: apsw.Connection) -> int:
            now = time.time()
            connection.execute(
                "UPDATE sessions SET status = 'failed', failure = ?, updated_at = ? WHERE claude_session_id = ?",
                (error, now, claude_session_id),
            )
            connection.execute(
                "UPDATE journal SET status = 'parked' WHERE claude_session_id = ? AND status = 'pending'",
                (claude_session_id,),
            )
            return connection.changes()

        return await self._write(park)

    async def unpark_session(
        self, claude_session_id: str, on_commit: Callable[[list[Envelope]], None]
    ) -> list[Envelope]:
        def unpark(connection: apsw.Connection) -> list[Envelope]:
            rows = connection.execute(
                "SELECT j.id, p.payload FROM journal j JOIN journal_payloads p ON p.id = j.id"
                " WHERE j.claude_session_id = ? AND j.status = 'parked' ORDER BY j.id",
                (claude_session_id,),
            ).fetchall()
            connection.execute(
                "UPDATE journal SET status = 'pending' WHERE claude_session_id = ? AND status = 'parked'",
                (claude_session_id,),
            )
            connection.execute(
                "UPDATE sessions SET status = CASE WHEN prompt_counter > 0 THEN 'active' ELSE 'initialized' END,"
                " failure = NULL, updated_at = ? WHERE claude_session_id = ? AND status = 'failed'",
                (time.time(), claude_session_id),
            )
            return [Envelope(event_id, decode_event(payload)) for event_id, payload in rows]

        return await self._write(unpark, on_commit=on_commit)

    # -- results ---------------------------------------------------------------------

    async def session_info(self, claude_session_id: str) -> SessionInfo | None:
        def query(connection: apsw.Connection) -> SessionInfo | None:
            row = connection.execute(
                "SELECT s.id, s.claude_session_id, s.project, s.status, s.prompt_counter,"
                " coalesce((SELECT text FROM user_prompts p WHERE p.session_id = s.id"
                "           ORDER BY prompt_number DESC LIMIT 1), '')"
                " FROM sessions s WHERE s.claude_session_id = ?",
                (claude_session_id,),
            ).fetchone()
            return SessionInfo(*row) if row else None

        return await self._readers.run(query)

    async def store_observations(
        self,
        session: SessionInfo,
        items: Sequence[tuple[Envelope, ObservationEvent, CompressedObservation]],
    ) -> int:
        def store(connection: apsw.Connection) -> int:
            now = time.time()
            inserted = tokens_in = tokens_out = 0
            for envelope, event, obs in items:
                connection.execute(
                    "INSERT OR IGNORE INTO observations (session_id, project, prompt_number, event_id, tool_name,"
                    " tool_use_id, agent_id, agent_type, failed, type, title, subtitle, facts, narrative, concepts,"
                    " files_read, files_modified, compressed, compressor, model, input_tokens, output_tokens,"
                    " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        session.db_id, session.project, event.prompt_number, envelope.event_id, event.tool_name,
                        event.tool_use_id or f"event-{envelope.event_id}", event.agent_id or None,
                        event.agent_type or None, int(event.failed), obs.type, obs.title, obs.subtitle,
                        _to_json(obs.facts), obs.narrative, _to_json(obs.concepts), _to_json(obs.files_read),
                        _to_json(obs.files_modified), int(obs.compressed), obs.compressor, obs.model or None,
                        obs.input_tokens, obs.output_tokens, now,
                    ),
                )
                if connection.changes():
                    inserted += 1
                    tokens_in += obs.input_tokens
                    tokens_out += obs.output_tokens
            connection.execute(
                "UPDATE sessions SET input_tokens = input_tokens + ?, output_tokens = output_tokens + ?,"
                " updated_at = ? WHERE id = ?",
                (tokens_in, tokens_out, now, session.db_id),
            )
            _mark_done(connection, [envelope.event_id for envelope, _, _ in items], now)
            return inserted

        return await self._write(store)

    async def store_summary(self, session: SessionInfo, envelope: Envelope, summary: CompressedSummary) -> bool:
        event = envelope.event
        assert isinstance(event, SummarizeEvent)

        def store(connection: apsw.Connection) -> bool:
            now = time.time()
            connection.execute(
                "INSERT OR IGNORE INTO session_summaries (session_id, project, prompt_number, event_id, request,"
                " investigated, learned, completed, next_steps, notes, compressed, compressor, model,"
                " input_tokens, output_tokens, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    session.db_id, session.project, event.prompt_number, envelope.event_id, summary.request,
                    summary.investigated, summary.learned, summary.completed, summary.next_steps, summary.notes,
                    int(summary.compressed), summary.compressor, summary.model or None, summary.input_tokens,
                    summary.output_tokens, now,
                ),
            )
            inserted = connection.changes() > 0
            connection.execute(
                "UPDATE sessions SET input_tokens = input_tokens + ?, output_tokens = output_tokens + ?,"
                " updated_at = ? WHERE id = ?",
                (summary.input_tokens if inserted else 0, summary.output_tokens if inserted else 0, now, session.db_id),
            )
            _mark_done(connection, [envelope.event_id], now)
            return inserted

        return await self._write(store)

    async def complete_session(self, session: SessionInfo, envelope: Envelope) -> None:
        def complete(connection: apsw.Connection) -> None:
            now = time.time()
            connection.execute(
                "UPDATE sessions SET status = 'completed', completed_at = ?, updated_at = ?"
                " WHERE id = ? AND status != 'failed'",
                (now, now, session.db_id),
            )
            _mark_done(connection, [envelope.event_id], now)

        await self._write(complete)

    async def summary_inputs(self, session: SessionInfo) -> SummaryInputs:
        def query(connection: apsw.Connection) -> SummaryInputs:
            prompts = [
                text
                for (text,) in connection.execute(
                    "SELECT text FROM user_prompts WHERE session_id = ? ORDER BY prompt_number", (session.db_id,)
                )
            ]
            observations = _rows(
                connection.execute(
                    "SELECT id, prompt_number, tool_name, failed, type, title, subtitle, facts, files_read,"
                    " files_modified FROM observations WHERE session_id = ? ORDER BY id",
                    (session.db_id,),
                )
            )
            return SummaryInputs(prompts, [_observation_public(row) for row in observations])

        return await self._readers.run(query)

    # -- reads -------------------------------------------------------------------------

    async def list_sessions(self, *, project: str | None, limit: int, offset: int) -> list[dict[str, Any]]:
        def query(connection: apsw.Connection) -> list[dict[str, Any]]:
            return _rows(
                connection.execute(
                    "SELECT id AS sessionDbId, claude_session_id AS claudeSessionId, project, first_prompt,"
                    " prompt_counter, status, failure, input_tokens, output_tokens, created_at, updated_at,"
                    " completed_at, (SELECT count(*) FROM observations o WHERE o.session_id = s.id) AS observations"
                    " FROM sessions s WHERE (?1 IS NULL OR project = ?1) ORDER BY updated_at DESC, id DESC"
                    " LIMIT ?2 OFFSET ?3",
                    (project, limit, offset),
                )
            )

        return await self._readers.run(query)

    async def session_by_db_id(self, session_db_id: int) -> dict[str, Any] | None:
        def query(connection: apsw.Connection) -> dict[str, Any] | None:
            rows = _rows(
                connection.execute(
                    "SELECT id AS sessionDbId, claude_session_id AS claudeSessionId, project, cwd, status,"
                    " prompt_counter FROM sessions WHERE id = ?",
                    (session_db_id,),
                )
            )
            return rows[0] if rows else None

        return await self._readers.run(query)

    async def list_observations(self, *, project: str | None, limit: int, offset: int) -> list[dict[str, Any]]:
        def query(connection: apsw.Connection) -> list[dict[str, Any]]:
            rows = _rows(
                connection.execute(
                    "SELECT o.id, s.claude_session_id AS claudeSessionId, o.project, o.prompt_number, o.tool_name,"
                    " o.tool_use_id, o.agent_id, o.agent_type, o.failed, o.type, o.title, o.subtitle, o.facts,"
                    " o.narrative, o.concepts, o.files_read, o.files_modified, o.compressed, o.compressor,"
                    " o.model, o.input_tokens, o.output_tokens, o.created_at"
                    " FROM observations o JOIN sessions s ON s.id = o.session_id"
                    " WHERE (?1 IS NULL OR o.project = ?1) ORDER BY o.id DESC LIMIT ?2 OFFSET ?3",
                    (project, limit, offset),
                )
            )
            return [_observation_public(row) for row in rows]

        return await self._readers.run(query)

    async def get_observation(self, observation_id: int) -> dict[str, Any] | None:
        def query(connection: apsw.Connection) -> dict[str, Any] | None:
            rows = _rows(
                connection.execute(
                    "SELECT o.*, s.claude_session_id AS claudeSessionId, p.payload FROM observations o"
                    " JOIN sessions s ON s.id = o.session_id LEFT JOIN journal_payloads p ON p.id = o.event_id"
                    " WHERE o.id = ?",
                    (observation_id,),
                )
            )
            return _observation_public(rows[0]) if rows else None

        return await self._readers.run(query)

    async def list_summaries(self, *, project: str | None, limit: int, offset: int) -> list[dict[str, Any]]:
        def query(connection: apsw.Connection) -> list[dict[str, Any]]:
            rows = _rows(
                connection.execute(
                    "SELECT m.id, s.claude_session_id AS claudeSessionId, m.project, m.prompt_number, m.request,"
                    " m.investigated, m.learned, m.completed, m.next_steps, m.notes, m.compressed, m.compressor,"
                    " m.model, m.input_tokens, m.output_tokens, m.created_at"
                    " FROM session_summaries m JOIN sessions s ON s.id = m.session_id"
                    " WHERE (?1 IS NULL OR m.project = ?1) ORDER BY m.id DESC LIMIT ?2 OFFSET ?3",
                    (project, limit, offset),
                )
            )
            for row in rows:
                row["compressed"] = bool(row["compressed"])
            return rows

        return await self._readers.run(query)

    async def journal_counts(self) -> JournalCounts:
        def query(connection: apsw.Connection) -> JournalCounts:
            # Open rows come from the small partial index; journal rows are never
            # deleted, so the rest are done: no scan of the whole journal per /debug.
            counts = dict(connection.execute(
                "SELECT status, count(*) FROM journal WHERE status != 'done' GROUP BY status").fetchall())
            (total,) = connection.execute("SELECT coalesce(max(id), 0) FROM journal").fetchone()
            pending, parked = counts.get("pending", 0), counts.get("parked", 0)
            return JournalCounts(pending, parked, total - pending - parked)

        return await self._readers.run(query)
