"""The embedded SQLite backend of :class:`~sessionmem.storage.base.Store`, on APSW.

Resource handling:
    One writer connection, owned by a :class:`GroupCommitWriter` (one thread at a
    time), a :class:`ReaderPool` of read-only connections, and a :class:`ReadGatherer`
    with one more (file recall's short reads). Nothing here touches SQLite on the Trio
    thread. The writer and gatherer tasks run in the nursery that
    :func:`open_sqlite_store` owns; leaving that block commits what is queued, then
    closes every connection.

Error handling:
    SQL errors propagate to the caller as ``apsw`` exceptions; the HTTP layer turns
    them into 500s and the actors count them as crashes. ``synchronous=FULL``: an
    acknowledged event survives a process crash and a power cut.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

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
from sessionmem.protocol.prompts import typed_prompt
from sessionmem.records import (
    OBSERVATION,
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
    SessionHead,
    SessionInfo,
    SessionRow,
    SummaryInputs,
    SummaryRow,
)
from sessionmem.storage import recall, retention, transfer
from sessionmem.storage.base import (
    Accepted,
    InitAccepted,
    KeyReused,
    OnCommit,
    StorageUnavailable,
    StoreStatistics,
)
from sessionmem.storage.checkpointer import IDLE_S, Checkpointer
from sessionmem.storage.readers import ReaderPool, ReadGatherer
from sessionmem.storage.recall_cache import FileRecallCache
from sessionmem.storage.schema import migrate
from sessionmem.storage.writer import BACKGROUND_WEIGHT, GroupCommitWriter

# What the disk or the file system does to a write, as opposed to what a request does:
# SQLITE_FULL, SQLITE_IOERR, SQLITE_READONLY, SQLITE_CANTOPEN.
UNAVAILABLE = (apsw.FullError, apsw.IOError, apsw.ReadOnlyError, apsw.CantOpenError)
# Weights of background writes (storage/writer.py), in observation rows: a summary is one
# row and its FTS5 rows, longer texts; a batch of pruning takes a transaction's share alone.
SUMMARY_WEIGHT = 4
PRUNE_WEIGHT = BACKGROUND_WEIGHT
# Observations stored by one INSERT (store_observations says why one): 24 parameters
# each, well within SQLite's 32,766.
ROWS_PER_STATEMENT = 500
# The writer's journal_size_limit: a WAL a burst left larger is cut back to this when it
# starts over (storage/checkpointer.py).
WAL_LIMIT_BYTES = 64 << 20

_bestpractice_applied = False


def _apply_bestpractice() -> None:
    global _bestpractice_applied
    if not _bestpractice_applied:
        apsw.bestpractice.apply(apsw.bestpractice.recommended)
        _bestpractice_applied = True


def open_writer(path: Path) -> apsw.Connection:
    """Open (creating if needed) and migrate the database; returns the writer connection."""
    _apply_bestpractice()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # Created private before SQLite opens it (APSW's best practice turns WAL on right
    # there): SQLite gives the -wal and -shm files the database file's own mode.
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    connection = apsw.Connection(str(path))
    retention.use_incremental_vacuum_if_new(connection)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("PRAGMA synchronous = FULL")
    # A WAL that grew during a burst is cut back to this when it restarts (checkpoints
    # beside the writer truncate it whenever the database is idle).
    connection.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT_BYTES}")
    # Checkpoints run beside the writer (storage/checkpointer.py), not inside a commit.
    connection.execute("PRAGMA wal_autocheckpoint = 0")
    connection.set_busy_timeout(5000)
    migrate(connection)
    return connection


_SESSION_COLUMNS = (
    "id, claude_session_id, project, cwd, first_prompt, prompt_counter, status, failure, input_tokens,"
    " output_tokens, created_at, updated_at, completed_at,"
    " (SELECT count(*) FROM observations o WHERE o.session_db_id = s.id)"
)
# In ObservationRow's field order.
_OBSERVATION_COLUMNS = (
    "o.id, s.claude_session_id, o.project, o.prompt_number, o.tool_name, o.tool_use_id, o.agent_id, o.agent_type,"
    " o.failed, o.type, o.title, o.subtitle, o.facts, o.narrative, o.concepts, o.files_read, o.files_modified,"
    " o.compressed, o.compressor, o.model, o.input_tokens, o.output_tokens, o.created_at"
)
_OBSERVATIONS_FROM = "FROM observations o JOIN sessions s ON s.id = o.session_db_id"
_FAILED, _FACTS, _CONCEPTS, _FILES_READ, _FILES_MODIFIED, _COMPRESSED = 8, 12, 14, 15, 16, 17
_OBSERVATION_WIDTH = 23
_json_list = msgspec.json.Decoder(list[str])


def _observation_fields(row: tuple[Any, ...]) -> list[Any]:
    """An ``_OBSERVATION_COLUMNS`` row with SQLite's integers and JSON texts decoded."""
    fields = list(row[:_OBSERVATION_WIDTH])
    for index in (_FACTS, _CONCEPTS, _FILES_READ, _FILES_MODIFIED):
        fields[index] = _json_list.decode(fields[index])
    fields[_FAILED] = bool(fields[_FAILED])
    fields[_COMPRESSED] = bool(fields[_COMPRESSED])
    return fields


def _observation_row(row: tuple[Any, ...]) -> ObservationRow:
    return ObservationRow(*_observation_fields(row))


def _observation_detail(row: tuple[Any, ...]) -> ObservationDetail:
    session_db_id, event_id, payload = row[_OBSERVATION_WIDTH:]
    tool_input = tool_response = None
    if payload is not None:  # the raw tool data lives in the journal row of the event
        event = decode_event(payload)
        if isinstance(event, ObservationEvent):
            tool_input = event.tool_input
            tool_response = event.error if event.failed and event.tool_response is None else event.tool_response
    return ObservationDetail(*_observation_fields(row), session_db_id=session_db_id, event_id=event_id,
                             tool_input=tool_input, tool_response=tool_response)


def _to_json(value: Any) -> str:
    return msgspec.json.encode(value).decode()


# ---------------------------------------------------------------------------
# Reads: each runs on a reader thread with a pooled read connection; some
# methods run several of them in one job (a thread hop costs 0.1-0.2 ms on a busy machine).


@contextmanager
def _snapshot(connection: apsw.Connection) -> Iterator[None]:
    """Reads inside see one state of the database (a read transaction)."""
    connection.execute("BEGIN")
    try:
        yield
    finally:
        connection.execute("COMMIT")


def _of_project(column: str, project: str | None) -> str:
    """The condition that rows are of ``project`` (``:project``), or none when ``project`` is ``None``.

    Written out only when asked for: ``(:project IS NULL OR column = :project)`` hides the
    column's index from SQLite, which then walked every project's rows newest first until
    enough were of this one -- the whole table, for a project with little stored (3 ms for
    the summaries of a new project at 7,700 summaries, on every SessionStart).
    """
    return f"{column} = :project" if project is not None else "1"


def _session_heads(connection: apsw.Connection, *, claude_session_ids: Sequence[str]) -> list[SessionHead]:
    rows = connection.execute(
        "SELECT claude_session_id, created_at, first_prompt FROM sessions"
        " WHERE claude_session_id IN (SELECT value FROM json_each(?))", (_to_json(list(claude_session_ids)),))
    return [SessionHead(*row) for row in rows]


def _recent_observation_ids(connection: apsw.Connection, *, project: str, limit: int) -> list[int]:
    rows = connection.execute(  # observations_created (project, created_at) covers it
        "SELECT id FROM observations WHERE project = ? ORDER BY created_at DESC, id DESC LIMIT ?", (project, limit))
    return [row_id for (row_id,) in rows]


def _list_summaries(connection: apsw.Connection, *, project: str | None, limit: int,
                    offset: int) -> list[SummaryRow]:
    rows = connection.execute(
        "SELECT m.id, s.claude_session_id, m.project, m.prompt_number, m.request, m.investigated,"
        " m.learned, m.completed, m.next_steps, m.notes, m.compressed, m.compressor, m.model,"
        " m.input_tokens, m.output_tokens, m.created_at"
        f" FROM session_summaries m JOIN sessions s ON s.id = m.session_db_id WHERE {_of_project('m.project', project)}"
        " ORDER BY m.created_at DESC, m.id DESC LIMIT :limit OFFSET :offset",
        {"project": project, "limit": limit, "offset": offset},
    )
    return [SummaryRow(*row[:10], bool(row[10]), *row[11:]) for row in rows]


def _observations_by_ids(connection: apsw.Connection, *, ids: Sequence[int]) -> list[ObservationRow]:
    rows = connection.execute(
        f"SELECT {_OBSERVATION_COLUMNS} {_OBSERVATIONS_FROM} WHERE o.id IN (SELECT value FROM json_each(?))",
        (_to_json(list(ids)),))
    by_id = {row.id: row for row in map(_observation_row, rows)}
    return [by_id[i] for i in dict.fromkeys(ids) if i in by_id]


# A prompt with fewer words that mean something than this ("continue", "yes, go on",
# "keep going") says nothing to rank memories by: the focus is the newest prompt before it
# that does, among the newest FOCUS_LOOKBACK (else the newest, whatever it says).
FOCUS_MIN_WORDS = 3
FOCUS_LOOKBACK = 20


def _latest_prompt(connection: apsw.Connection, *, project: str, session: str = "") -> tuple[int, str] | None:
    """The newest prompt of ``session`` (resumed or compacted: its own work), else of the project, that says
    what the work is about (:data:`FOCUS_MIN_WORDS`).

    A slash command is judged, and returned, as the user typed it
    (:func:`~sessionmem.protocol.prompts.typed_prompt`): earlier backfills stored its
    transcript tags, which read as five words.
    """
    # The session's own first (a trial: the resume of one session was focused on another's newer prompt
    # of the project), on its (session, prompt_number) key; then the project's, on the prompts_project
    # index (project, created_at), newest first: the cost does not grow with the store (schema _V6).
    queries = [("SELECT p.id, p.text FROM sessions s CROSS JOIN user_prompts p ON p.session_db_id = s.id"
                " WHERE s.claude_session_id = ? AND p.project = ? ORDER BY p.prompt_number DESC, p.id DESC LIMIT ?",
                (session, project, FOCUS_LOOKBACK))] if session else []
    queries.append(("SELECT id, text FROM user_prompts WHERE project = ? ORDER BY created_at DESC, id DESC LIMIT ?",
                    (project, FOCUS_LOOKBACK)))
    newest = None
    for sql, params in queries:
        for row_id, stored in connection.execute(sql, params):
            text = typed_prompt(stored)
            if len(recall.query_terms(text)) >= FOCUS_MIN_WORDS:
                return row_id, text
            newest = newest or (row_id, text)
    return newest


def read_context_start(connection: apsw.Connection, *, project: str, summaries: int, recent: int,
                       latest_prompt: bool, session: str = "") -> ContextStart:
    """Where SessionStart's context starts, in one snapshot: the project's newest ``summaries``
    summaries, its ``recent`` newest observation ids, and (``latest_prompt``) its focus prompt,
    ``session``'s own if it has one.

    Each read walks the project's own index: its cost does not grow with what other
    projects hold (a new project's SessionStart once walked every summary and prompt of
    the store).
    """
    with _snapshot(connection):
        return ContextStart(
            _list_summaries(connection, project=project, limit=summaries, offset=0),
            _recent_observation_ids(connection, project=project, limit=recent),
            _latest_prompt(connection, project=project, session=session) if latest_prompt else None)


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


def _touch_session(connection: apsw.Connection, session_db_id: int, when: float) -> None:
    """The session spans ``when``: events may arrive out of their time order (a backfill after live use)."""
    connection.execute("UPDATE sessions SET created_at = min(created_at, ?1), updated_at = max(updated_at, ?1)"
                       " WHERE id = ?2", (when, session_db_id))


_JOURNAL_COLUMNS = "id, claude_session_id, kind, status, accepted_at, processed_at, idempotency_key"


def _journal_row(event_id: int | None, event: Any, status: str, now: float) -> tuple[Any, ...]:
    """The ``journal`` row of ``event`` (:data:`_JOURNAL_COLUMNS`); ``event_id`` None: SQLite's choice."""
    return (event_id, event.claude_session_id, event_kind(event), status, now, now if status == "done" else None,
            event.key or None)


def _placeholders(width: int, rows: int = 1) -> str:
    """``VALUES`` placeholders for ``rows`` rows of ``width`` values: one statement for many rows."""
    return ", ".join(["(" + ", ".join(["?"] * width) + ")"] * rows)


def _journal(connection: apsw.Connection, event: Any, status: str, now: float) -> Envelope:
    connection.execute(f"INSERT INTO journal ({_JOURNAL_COLUMNS}) VALUES {_placeholders(7)}",
                       _journal_row(None, event, status, now))
    event_id = connection.last_insert_rowid()
    connection.execute("INSERT INTO journal_payloads (id, payload) VALUES (?, ?)", (event_id, encode_event(event)))
    return Envelope(event_id, event)


def _already_journaled(connection: apsw.Connection, event: Any) -> Envelope | None:
    """The event journaled earlier under ``event``'s idempotency key, if any: the same event, sent again.

    Raises :class:`KeyReused` when the key names another session's event or another kind of event.
    """
    if not event.key:
        return None
    row = connection.execute(
        "SELECT j.id, p.payload, j.claude_session_id, j.kind FROM journal j JOIN journal_payloads p ON p.id = j.id"
        " WHERE j.idempotency_key = ?",
        (event.key,),
    ).fetchone()
    if row is None:
        return None
    if (row[2], row[3]) != (event.claude_session_id, event_kind(event)):
        raise KeyReused(f"idempotency key {event.key[:100]!r} was used for another event")
    return Envelope(row[0], decode_event(row[1]))


def _accept_init(connection: apsw.Connection, event: InitEvent) -> InitAccepted:
    now = time.time()
    when = event.occurred_at or now
    earlier = _already_journaled(connection, event)
    if earlier is not None:
        first = earlier.event
        assert isinstance(first, InitEvent)
        found = _load_session(connection, first.claude_session_id)
        return InitAccepted(earlier, found[0] if found else 0, first.prompt_number, skipped=not first.prompt,
                            reason=first.skip_reason, duplicate=True)
    found = _load_session(connection, event.claude_session_id)
    if found is None:
        session_db_id, counter = _create_session(connection, event.claude_session_id, event.project, event.cwd,
                                                 when), 0
    else:
        session_db_id, counter, _status = found
    skipped, reason = False, ""
    if not event.prompt:
        skipped, reason = True, event.skip_reason or "prompt is empty"
        _touch_session(connection, session_db_id, when)
    else:
        counter += 1
        connection.execute(
            "INSERT INTO user_prompts (session_db_id, project, prompt_number, text, created_at)"
            " VALUES (?1, (SELECT project FROM sessions WHERE id = ?1), ?2, ?3, ?4)",
            (session_db_id, counter, event.prompt, when),
        )
        connection.execute(
            "UPDATE sessions SET prompt_counter = ?, first_prompt = coalesce(first_prompt, ?),"
            " status = CASE status WHEN 'failed' THEN 'failed' ELSE 'active' END,"
            " completed_at = NULL WHERE id = ?",
            (counter, event.prompt, session_db_id),
        )
        _touch_session(connection, session_db_id, when)
    stamped = msgspec.structs.replace(event, prompt_number=counter)
    # The prompt is stored right here, in the accepting transaction: init needs no replay.
    envelope = _journal(connection, stamped, "done", now)
    return InitAccepted(envelope, session_db_id, counter, skipped, reason)


_AcceptedEvent = ObservationEvent | SummarizeEvent | CompleteEvent


def _accept_event(connection: apsw.Connection, event: _AcceptedEvent) -> Accepted:
    now = time.time()
    earlier = _already_journaled(connection, event)
    if earlier is not None:
        found = _load_session(connection, earlier.event.claude_session_id)
        prompt_number = getattr(earlier.event, "prompt_number", 0)
        return Accepted(earlier, found[0] if found else 0, prompt_number, parked=False, duplicate=True)
    found = _load_session(connection, event.claude_session_id)
    if found is None:
        # An event for a session we never saw init for (worker started mid-session):
        # keep it rather than lose it.
        project = event.project or "unknown"
        session_db_id = _create_session(connection, event.claude_session_id, project, getattr(event, "cwd", ""),
                                        event.occurred_at or now)
        counter, status = 0, "initialized"
    else:
        session_db_id, counter, status = found
    if not isinstance(event, CompleteEvent):
        event = msgspec.structs.replace(event, prompt_number=counter)
    parked = status == "failed"
    envelope = _journal(connection, event, "parked" if parked else "pending", now)
    return Accepted(envelope, session_db_id, counter, parked)


_sessions_found = msgspec.json.Decoder(dict[str, tuple[int, int, str]])
_keys_found = msgspec.json.Decoder(list[str])


def _accept_events(connection: apsw.Connection, events: list[_AcceptedEvent]) -> list[Accepted]:
    """:func:`_accept_event` of each of ``events`` in turn, in three statements whatever their number.

    Each statement gives up the GIL and takes it back from a busy Trio thread (bench/README,
    "Fewer trips through the GIL"); a transaction of twenty accepts was eighty statements. One read
    answers, in one value each, the largest journal id, the sessions of ``events`` and
    which of their idempotency keys are journaled; then one insert of journal rows (with
    the ids SQLite would give them, the next ones in order) and one of their payloads.
    Events that need more -- a key seen before (a duplicate, or a key reused), a session
    not yet known -- are accepted one by one, as :func:`_accept_event` does.
    """
    now = time.time()
    keys = [event.key for event in events if event.key]
    largest, sessions_json, keys_json = connection.execute(
        "SELECT (SELECT coalesce(max(id), 0) FROM journal),"
        " (SELECT json_group_object(claude_session_id, json_array(id, prompt_counter, status)) FROM sessions"
        "  WHERE claude_session_id IN (SELECT value FROM json_each(?1))),"
        " (SELECT json_group_array(idempotency_key) FROM journal WHERE idempotency_key IN (SELECT value FROM json_each(?2)))",
        (_to_json(list({event.claude_session_id for event in events})), _to_json(keys)),
    ).fetchone()
    sessions = _sessions_found.decode(sessions_json)
    if _keys_found.decode(keys_json) or len(set(keys)) < len(keys) \
            or any(event.claude_session_id not in sessions for event in events):
        return [_accept_event(connection, event) for event in events]
    accepted: list[Accepted] = []
    for event_id, event in enumerate(events, largest + 1):
        session_db_id, counter, status = sessions[event.claude_session_id]
        if not isinstance(event, CompleteEvent):
            event = msgspec.structs.replace(event, prompt_number=counter)
        parked = status == "failed"
        accepted.append(Accepted(Envelope(event_id, event), session_db_id, counter, parked))
    connection.execute(
        f"INSERT INTO journal ({_JOURNAL_COLUMNS}) VALUES {_placeholders(7, len(accepted))}",
        [value for one in accepted for value in _journal_row(
            one.envelope.event_id, one.envelope.event, "parked" if one.parked else "pending", now)],
    )
    connection.execute(
        f"INSERT INTO journal_payloads (id, payload) VALUES {_placeholders(2, len(accepted))}",
        [value for one in accepted for value in (one.envelope.event_id, encode_event(one.envelope.event))],
    )
    return accepted


def _mark_done(connection: apsw.Connection, event_ids: Sequence[int], now: float) -> None:
    # One statement, not one an id: each would be a trip through the GIL (see store_observations).
    connection.execute(
        "UPDATE journal SET status = 'done', processed_at = ? WHERE id IN (SELECT value FROM json_each(?))",
        (now, _to_json(list(event_ids))),
    )


class _Stored(NamedTuple):
    """What one store of observations added: how many rows, and (id, created_at, observation)
    of those file recall keeps."""

    inserted: int
    recalled: list[tuple[int, float, CompressedObservation]]


_StoreArgument = tuple[SessionInfo, Sequence[tuple[Envelope, ObservationEvent, CompressedObservation]]]


def _store_observations(connection: apsw.Connection, stores: list[_StoreArgument]) -> list[_Stored]:
    """The observations of ``stores`` (each a session and its items), in as few statements as one store has.

    One statement for every row: FTS5 writes what a statement added to its index as a
    segment of its own at the next statement's savepoint, so a statement per row made a
    segment per observation, and merging them grew into most of the writer's work as the
    index grew (bench/README, "The open loop's tail"). And few long statements whatever
    the number of stores: each statement, and each row SQLite hands back, gives up the
    GIL, and one that runs longer than a busy Trio thread takes to grab it waits for the
    interpreter's switch interval to take it back (bench/README, "Fewer trips through the
    GIL", "Issue 11 at stop 26"). The rows inserted, not those ignored as already stored,
    are those above the largest id before; they are read back (one value, one step) only
    when a store's count cannot be known otherwise, or file recall keeps some of them.
    """
    now = time.time()
    items = [item for _, store_items in stores for item in store_items]
    rows = [
        (
            session.session_db_id, session.project, event.prompt_number, envelope.event_id, event.tool_name,
            event.tool_use_id or f"event-{envelope.event_id}", event.agent_id or None,
            event.agent_type or None, int(event.failed), obs.type, obs.title, obs.subtitle,
            _to_json(obs.facts), obs.narrative, _to_json(obs.concepts), _to_json(obs.files_read),
            _to_json(obs.files_modified), int(obs.compressed), obs.compressor, obs.model or None,
            obs.input_tokens, obs.output_tokens, event.occurred_at or now, now,
        )
        for session, store_items in stores for envelope, event, obs in store_items
    ]
    (largest_before,) = connection.execute("SELECT coalesce(max(id), 0) FROM observations").fetchone()
    inserted = 0
    for start in range(0, len(rows), ROWS_PER_STATEMENT):
        chunk = rows[start : start + ROWS_PER_STATEMENT]
        connection.execute(
            "INSERT OR IGNORE INTO observations (session_db_id, project, prompt_number, event_id, tool_name,"
            " tool_use_id, agent_id, agent_type, failed, type, title, subtitle, facts, narrative, concepts,"
            " files_read, files_modified, compressed, compressor, model, input_tokens, output_tokens,"
            " created_at, stored_at) VALUES "
            + _placeholders(24, len(chunk)),
            [value for row in chunk for value in row],
        )
        inserted += connection.changes()
    recallable = any(recall.recallable_files(obs) for _, _, obs in items)
    recalled: list[list[tuple[int, float, CompressedObservation]]] = [[] for _ in stores]  # (id, time, observation)
    if inserted in (0, len(rows)) and not recallable:  # every row added, or none: nothing to read back
        added = [[obs for _, _, obs in store_items] if inserted else [] for _, store_items in stores]
    else:  # which rows were added (the ids of a replay's rows already stored are not above the largest)
        (added_ids,) = connection.execute("SELECT json_group_object(event_id, id) FROM observations WHERE id > ?",
                                          (largest_before,)).fetchone()
        ids = _event_ids.decode(added_ids)
        # A row added is the first store's to hold its event (the later were ignored).
        kept = [[(ids.pop(key), event.occurred_at or now, obs) for envelope, event, obs in store_items
                 if (key := str(envelope.event_id)) in ids] for _, store_items in stores]
        added = [[obs for _, _, obs in rows_added] for rows_added in kept]
        if recallable:
            recalled = kept
    # Each session: the tokens of its rows added, and the earliest and latest times its stores touch
    # it at (each store at its latest event's time). A short UPDATE a session takes the GIL back
    # before a waiting thread can grab it; one UPDATE ... FROM json_each for all did not.
    changes: dict[int, list[float]] = {}
    for (session, store_items), added_here in zip(stores, added):
        when = max(event.occurred_at or now for _, event, _ in store_items)
        change = changes.setdefault(session.session_db_id, [0, 0, when, when])
        change[0] += sum(obs.input_tokens for obs in added_here)
        change[1] += sum(obs.output_tokens for obs in added_here)
        change[2], change[3] = min(change[2], when), max(change[3], when)
    connection.executemany(
        "UPDATE sessions SET input_tokens = input_tokens + ?, output_tokens = output_tokens + ?,"
        " created_at = min(created_at, ?), updated_at = max(updated_at, ?) WHERE id = ?",
        [(*change, session) for session, change in changes.items()],
    )
    results = [_Stored(len(added_here), rows_recalled) for added_here, rows_recalled in zip(added, recalled)]
    _mark_done(connection, [envelope.event_id for envelope, _, _ in items], now)
    return results


PARKED_SESSIONS_LISTED = 20


@asynccontextmanager
async def open_sqlite_store(path: Path, *, readers: int = 4,
                            checkpoint_idle_s: float = IDLE_S) -> AsyncIterator[SQLiteStore]:
    """Open (creating and migrating) the database at ``path`` for the duration of the block.

    Resource handling:
        The writer and checkpointer tasks live in a nursery owned by this context
        manager. On exit, the writer stops taking submissions and commits what is
        queued (a commit that started always finishes), the checkpointer makes one
        last attempt, and every connection is closed; the clean-up after the writer's
        drain takes at most :attr:`SQLiteStore.close_timeout_s`, which the owner may
        lower before leaving the block (its share of a shutdown budget).
    """
    store = SQLiteStore(path, readers=readers, checkpoint_idle_s=checkpoint_idle_s)
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


_event_ids = msgspec.json.Decoder(dict[str, int])


class SQLiteStore:
    """SQLite in WAL mode under ``path``; see the module docstring. Use :func:`open_sqlite_store`."""

    def __init__(self, path: Path, *, readers: int = 4, checkpoint_idle_s: float = IDLE_S) -> None:
        self.path = path
        self.close_timeout_s = 5.0
        self._readers = ReaderPool(path, readers)
        self._gathered = ReadGatherer(path)  # file recall's short reads, on every PostToolUse of a file
        self._file_recall = FileRecallCache()  # and the rows they answer from, until an observation about the file is stored
        self._checkpointer = Checkpointer(path, idle_s=checkpoint_idle_s)
        self._connection: apsw.Connection | None = None
        self._writer: GroupCommitWriter | None = None

    # -- lifecycle ---------------------------------------------------------------

    async def _open(self) -> None:
        self._connection = await trio.to_thread.run_sync(open_writer, self.path)
        self._writer = GroupCommitWriter(self._connection)
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

    async def _write(self, fn: Any, *args: Any, on_commit: Any = None, background: bool = False,
                     weight: int = 1) -> Any:
        """``fn(connection, *args)`` in a group commit; ``background`` and ``weight`` as
        :meth:`GroupCommitWriter.submit` has them (what actors store is background work)."""
        with self._taking_writes() as writer:
            return await writer.submit(lambda connection: fn(connection, *args), on_commit=on_commit,
                                       background=background, weight=weight)

    async def _write_together(self, together: Any, argument: Any, *, on_commit: Any = None, background: bool = False,
                              weight: int = 1) -> Any:
        """``together(connection, [argument])[0]`` in a group commit, in one call with the writes of
        its kind beside it (:meth:`GroupCommitWriter.submit_together`)."""
        with self._taking_writes() as writer:
            return await writer.submit_together(together, argument, on_commit=on_commit, background=background,
                                                weight=weight)

    @contextmanager
    def _taking_writes(self) -> Iterator[GroupCommitWriter]:
        """The writer; a database that cannot take writes (disk full, read-only) raised as :class:`StorageUnavailable`."""
        if self._writer is None:
            raise RuntimeError("store is not open")
        try:
            yield self._writer
        except UNAVAILABLE as exc:
            raise StorageUnavailable(f"the database cannot take writes: {exc}") from exc

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

        return await self._write_together(_accept_events, event, on_commit=deliver)

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
                " coalesce((SELECT text FROM user_prompts p WHERE p.session_db_id = s.id"
                "           ORDER BY prompt_number DESC LIMIT 1), ''), s.input_tokens + s.output_tokens"
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
        if not items:
            return 0

        def stored(result: _Stored) -> None:
            self._file_recall.stored(session.claude_session_id, session.project, result.recalled)

        result = await self._write_together(_store_observations, (session, items), on_commit=stored, background=True,
                                            weight=len(items))
        return result.inserted

    async def store_summary(self, session: SessionInfo, envelope: Envelope, summary: CompressedSummary) -> bool:
        event = envelope.event
        assert isinstance(event, SummarizeEvent)

        def store(connection: apsw.Connection) -> bool:
            now = time.time()
            connection.execute(
                "INSERT OR IGNORE INTO session_summaries (session_db_id, project, prompt_number, event_id, request,"
                " investigated, learned, completed, next_steps, notes, compressed, compressor, model,"
                " input_tokens, output_tokens, created_at, stored_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    session.session_db_id, session.project, event.prompt_number, envelope.event_id, summary.request,
                    summary.investigated, summary.learned, summary.completed, summary.next_steps, summary.notes,
                    int(summary.compressed), summary.compressor, summary.model or None, summary.input_tokens,
                    summary.output_tokens, event.occurred_at or now, now,
                ),
            )
            inserted = connection.changes() > 0
            connection.execute(
                "UPDATE sessions SET input_tokens = input_tokens + ?, output_tokens = output_tokens + ? WHERE id = ?",
                (summary.input_tokens if inserted else 0, summary.output_tokens if inserted else 0,
                 session.session_db_id),
            )
            _touch_session(connection, session.session_db_id, event.occurred_at or now)
            _mark_done(connection, [envelope.event_id], now)
            return inserted

        return await self._write(store, background=True, weight=SUMMARY_WEIGHT)

    async def complete_session(self, session: SessionInfo, envelope: Envelope) -> None:
        def complete(connection: apsw.Connection) -> None:
            now = time.time()
            when = getattr(envelope.event, "occurred_at", 0.0) or now
            connection.execute(
                "UPDATE sessions SET status = 'completed', completed_at = ? WHERE id = ? AND status != 'failed'",
                (when, session.session_db_id),
            )
            _touch_session(connection, session.session_db_id, when)
            _mark_done(connection, [envelope.event_id], now)

        await self._write(complete, background=True)

    async def summary_inputs(self, session: SessionInfo) -> SummaryInputs:
        def query(connection: apsw.Connection) -> SummaryInputs:
            prompts = [
                text
                for (text,) in connection.execute(
                    "SELECT text FROM user_prompts WHERE session_db_id = ? ORDER BY prompt_number",
                    (session.session_db_id,),
                )
            ]
            observations = connection.execute(
                f"SELECT {_OBSERVATION_COLUMNS} {_OBSERVATIONS_FROM} WHERE o.session_db_id = ? ORDER BY o.id",
                (session.session_db_id,),
            )
            return SummaryInputs(prompts, [_observation_row(row) for row in observations])

        return await self._readers.run(query)

    # -- reads -------------------------------------------------------------------------

    async def list_sessions(self, *, project: str | None, limit: int, offset: int) -> list[SessionRow]:
        def query(connection: apsw.Connection) -> list[SessionRow]:
            # The page first, then its observation counts: counted for every session of the
            # project before the sort, they cost 8 ms for 769 sessions of 130 observations.
            rows = connection.execute(
                f"SELECT {_SESSION_COLUMNS} FROM (SELECT * FROM sessions WHERE {_of_project('project', project)}"
                " ORDER BY updated_at DESC, id DESC LIMIT :limit OFFSET :offset) s ORDER BY updated_at DESC, id DESC",
                {"project": project, "limit": limit, "offset": offset},
            )
            return [SessionRow(*row) for row in rows]

        return await self._readers.run(query)

    async def list_projects(self, *, limit: int, offset: int = 0, containing: str | None = None) -> list[ProjectRow]:
        def query(connection: apsw.Connection) -> list[ProjectRow]:
            rows = connection.execute(  # the sessions_project index (project, updated_at) covers it
                "SELECT project, count(*), max(updated_at) FROM sessions"
                " WHERE ?1 IS NULL OR instr(lower(project), lower(?1)) > 0 GROUP BY project"
                " ORDER BY max(updated_at) DESC, project LIMIT ?2 OFFSET ?3", (containing, limit, offset))
            return [ProjectRow(*row) for row in rows]

        return await self._readers.run(query)

    async def session_by_db_id(self, session_db_id: int) -> SessionRow | None:
        def query(connection: apsw.Connection) -> SessionRow | None:
            row = connection.execute(f"SELECT {_SESSION_COLUMNS} FROM sessions s WHERE id = ?",
                                     (session_db_id,)).fetchone()
            return SessionRow(*row) if row else None

        return await self._readers.run(query)

    async def list_observations(self, *, project: str | None, limit: int, offset: int) -> list[ObservationRow]:
        def query(connection: apsw.Connection) -> list[ObservationRow]:
            rows = connection.execute(
                f"SELECT {_OBSERVATION_COLUMNS} {_OBSERVATIONS_FROM} WHERE {_of_project('o.project', project)}"
                " ORDER BY o.created_at DESC, o.id DESC LIMIT :limit OFFSET :offset",
                {"project": project, "limit": limit, "offset": offset},
            )
            return [_observation_row(row) for row in rows]

        return await self._readers.run(query)

    async def get_observation(self, observation_id: int) -> ObservationDetail | None:
        def query(connection: apsw.Connection) -> ObservationDetail | None:
            row = connection.execute(
                f"SELECT {_OBSERVATION_COLUMNS}, o.session_db_id, o.event_id, p.payload {_OBSERVATIONS_FROM}"
                " LEFT JOIN journal_payloads p ON p.id = o.event_id WHERE o.id = ?",
                (observation_id,),
            ).fetchone()
            return _observation_detail(row) if row else None

        return await self._readers.run(query)

    async def list_summaries(self, *, project: str | None, limit: int, offset: int) -> list[SummaryRow]:
        return await self._readers.run(partial(_list_summaries, project=project, limit=limit, offset=offset))

    async def llm_tokens_since(self, timestamp: float) -> int:
        def query(connection: apsw.Connection) -> int:
            (tokens,) = connection.execute(
                "SELECT (SELECT coalesce(sum(input_tokens + output_tokens), 0) FROM observations WHERE stored_at >= ?1)"
                " + (SELECT coalesce(sum(input_tokens + output_tokens), 0) FROM session_summaries"
                "    WHERE stored_at >= ?1)", (timestamp,)).fetchone()
            return int(tokens)

        return await self._readers.run(query)

    async def journal_counts(self) -> JournalCounts:
        def query(connection: apsw.Connection) -> JournalCounts:
            # Open rows come from the small partial index; journal rows are never
            # deleted, so the rest are done: no scan of the whole journal per /debug.
            counts = dict(connection.execute(
                "SELECT status, count(*) FROM journal WHERE status != 'done' GROUP BY status").fetchall())
            (total,) = connection.execute("SELECT coalesce(max(id), 0) FROM journal").fetchone()
            pending, parked = counts.get("pending", 0), counts.get("parked", 0)
            sessions = [session for (session,) in connection.execute(
                "SELECT DISTINCT claude_session_id FROM journal WHERE status = 'parked' LIMIT ?",
                (PARKED_SESSIONS_LISTED,))] if parked else []
            return JournalCounts(pending, parked, total - pending - parked, sessions)

        return await self._readers.run(query)

    # -- retention (storage/retention.py) ------------------------------------------------

    async def prune_payloads(self, before: float) -> int:
        """Strip raw tool data from stored observations that happened before ``before``, a batch a
        transaction (other writes go between them); returns how many."""
        pruned, after = 0, 0
        while True:
            count, after = await self._write(partial(retention.prune_payloads, before=before, after_id=after),
                                             background=True, weight=PRUNE_WEIGHT)
            pruned += count
            if after == 0:
                return pruned

    async def reclaim_space(self, *, full: bool = False) -> None:
        """Give freed pages back to the file system: incrementally, or by a full VACUUM (``full``)."""
        with self._taking_writes() as writer:
            await writer.run_alone(retention.vacuum if full else retention.reclaim)

    async def storage_report(self) -> retention.StorageReport:
        return await self._readers.run(partial(retention.report, path=self.path))

    # -- export and import (storage/transfer.py) ---------------------------------------------

    async def export_page(self, *, project: str | None, since: float | None,
                          after_session: int) -> tuple[list[transfer.Record], int]:
        return await self._readers.run(partial(transfer.export_page, project=project, since=since,
                                               after_session=after_session))

    async def import_records(self, records: Sequence[transfer.Record]) -> transfer.ImportCounts:
        return await self._write(partial(transfer.import_records, records=records, now=time.time()),
                                 on_commit=lambda _: self._file_recall.clear())

    # -- the read half (SQL in storage/recall.py) -------------------------------------------

    async def search_text(self, query: str, filters: SearchFilters, limit: int, *,
                          every_word_first: bool = False) -> list[RankedKey]:
        terms = recall.query_terms(query)
        if not terms:
            return []
        return await self._readers.run(partial(recall.search_text, terms=terms, filters=filters, limit=limit,
                                               every_word_first=every_word_first))

    async def keep_matching(self, keys: Sequence[tuple[str, int]], filters: SearchFilters) -> set[tuple[str, int]]:
        return await self._readers.run(partial(recall.keep_matching, keys=keys, filters=filters))

    async def small_project_keys(self, filters: SearchFilters, most: int) -> list[tuple[str, int]] | None:
        if filters.project is None:
            return None
        return await self._readers.run(partial(recall.small_project_keys, filters=filters, most=most))

    async def cards(self, keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], DocumentCard]:
        return await self._readers.run(partial(recall.cards, keys=keys))

    async def documents(self, keys: Sequence[tuple[str, int]]) -> list[Document]:
        return await self._readers.run(partial(recall.documents, keys=keys))

    async def document_ids(self, *, after: dict[str, int] | None = None,
                           limit: int | None = None) -> dict[str, list[int]]:
        return await self._readers.run(partial(recall.document_ids, after=after, limit=limit))

    async def timeline(self, anchor: tuple[str, int], *, before: int, after: int) -> list[DocumentCard] | None:
        def query(connection: apsw.Connection) -> list[DocumentCard] | None:
            found = recall.created_at(connection, *anchor)
            if found is None:
                return None
            moment, project = found
            keys = recall.around(connection, project, moment, anchor, before=before, after=after)
            by_key = recall.cards(connection, keys)
            return [by_key[key] for key in keys if key in by_key]

        return await self._readers.run(query)

    async def observations_by_ids(self, ids: Sequence[int]) -> list[ObservationRow]:
        return await self._readers.run(partial(_observations_by_ids, ids=ids))

    async def file_memories(self, project: str, path: str, *, exclude_session: str,
                            limit: int) -> list[FileMemory]:
        key = (project, path)
        rows = self._file_recall.get(key)
        if rows is None:
            ticket = self._file_recall.ticket()
            rows = await self._gathered.read(partial(recall.file_memory_rows, project=project, path=path,
                                                     exclude_session=None, most=self._file_recall.rows_kept))
            self._file_recall.put(key, ticket, rows)
        others = sum(1 for row in rows if row.claude_session_id != exclude_session)
        if len(rows) == self._file_recall.rows_kept and others < limit * 4:
            # The asking session's own memories crowd the file's newest rows: older ones of
            # other sessions may be past them. Rare; read exactly what it is answered.
            return await self._gathered.read(partial(recall.file_memories, project=project, path=path,
                                                     exclude_session=exclude_session, limit=limit))
        return recall.choose_file_memories(rows, exclude_session, limit)

    async def context_start(self, project: str, *, summaries: int, recent: int,
                            latest_prompt: bool, session: str = "") -> ContextStart:
        return await self._readers.run(partial(read_context_start, project=project, summaries=summaries,
                                               recent=recent, latest_prompt=latest_prompt, session=session))

    async def context_rows(self, candidates: Sequence[tuple[str, int]], filters: SearchFilters,
                           choose: Callable[[set[int]], list[int]]) -> ContextRows:
        def query(connection: apsw.Connection) -> ContextRows:
            with _snapshot(connection):
                kept = recall.keep_matching(connection, candidates, filters) if candidates else set()
                observations = _observations_by_ids(
                    connection, ids=choose({row_id for kind, row_id in kept if kind == OBSERVATION}))
                named = list(dict.fromkeys(row.claude_session_id for row in observations))
                return ContextRows(observations, _session_heads(connection, claude_session_ids=named))

        return await self._readers.run(query)
