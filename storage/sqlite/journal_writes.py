"""Journal writes of the SQLite store: accepting events (the journal row and its payload, the
session they belong to, the prompt of an init), and parking, unparking and marking them done.

Each function takes the writer connection and runs inside the writer's transaction, on its
thread (:class:`~sessionmem.storage.writer.GroupCommitWriter`); the contract they keep (an
idempotency key journals an event once, a parked session's events wait for a replay) is
stated in :mod:`sessionmem.storage.base`.

Error handling:
    :class:`~sessionmem.storage.base.KeyReused` when an idempotency key names another
    event; SQL errors propagate as ``apsw`` exceptions.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import apsw
import msgspec

from sessionmem.events import (
    CompleteEvent,
    Envelope,
    InitEvent,
    ObservationEvent,
    SummarizeEvent,
    encode_event,
    event_kind,
)
from sessionmem.storage.base import Accepted, InitAccepted, KeyReused
from sessionmem.storage.sqlite.row_reads import journal_envelope
from sessionmem.storage.sqlite.values import all_rows, integer, one_row, optional_row, placeholders, text, to_json


def _load_session(connection: apsw.Connection, claude_session_id: str) -> tuple[int, int, str] | None:
    row = optional_row(
        connection, "SELECT id, prompt_counter, status FROM sessions WHERE claude_session_id = ?", (claude_session_id,))
    if row is None:
        return None
    session_db_id, prompt_counter, status = row
    return integer(session_db_id), integer(prompt_counter), text(status)


def _create_session(connection: apsw.Connection, claude_session_id: str, project: str, cwd: str, now: float, *,
                    agent: str, project_key: str = "", share_file: bool = False) -> int:
    """A new session, of the agent its first event names: a later event naming another never changes it."""
    connection.execute(
        "INSERT INTO sessions (claude_session_id, project, cwd, created_at, updated_at, project_key, share_file, agent)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (claude_session_id, project, cwd, now, now, project_key, share_file, agent),
    )
    return connection.last_insert_rowid()


def _note_repository(connection: apsw.Connection, session_db_id: int, event: InitEvent) -> None:
    """A session made before its first prompt said where it runs (an observation came first) learns its
    project key then; the opt-in file, once seen, stays."""
    connection.execute(
        "UPDATE sessions SET project_key = CASE project_key WHEN '' THEN ?1 ELSE project_key END,"
        " share_file = max(share_file, ?2) WHERE id = ?3 AND ((project_key = '' AND ?1 != '') OR share_file < ?2)",
        (event.project_key, event.share_file, session_db_id))


def touch_session(connection: apsw.Connection, session_db_id: int, when: float) -> None:
    """The session spans ``when``: events may arrive out of their time order (a backfill after live use)."""
    connection.execute("UPDATE sessions SET created_at = min(created_at, ?1), updated_at = max(updated_at, ?1)"
                       " WHERE id = ?2", (when, session_db_id))


_JOURNAL_COLUMNS = "id, claude_session_id, kind, status, accepted_at, processed_at, idempotency_key"


def _journal_row(event_id: int | None, event: Any, status: str, now: float) -> tuple[Any, ...]:
    """The ``journal`` row of ``event`` (:data:`_JOURNAL_COLUMNS`); ``event_id`` None: SQLite's choice."""
    return (event_id, event.claude_session_id, event_kind(event), status, now, now if status == "done" else None,
            event.key or None)


def _journal(connection: apsw.Connection, event: Any, status: str, now: float) -> Envelope:
    connection.execute(f"INSERT INTO journal ({_JOURNAL_COLUMNS}) VALUES {placeholders(7)}",
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
    row = optional_row(
        connection,
        "SELECT j.id, p.payload, j.claude_session_id, j.kind FROM journal j JOIN journal_payloads p ON p.id = j.id"
        " WHERE j.idempotency_key = ?",
        (event.key,),
    )
    if row is None:
        return None
    claude_session_id, kind = row[2], row[3]
    if (text(claude_session_id), text(kind)) != (event.claude_session_id, event_kind(event)):
        raise KeyReused(f"idempotency key {event.key[:100]!r} was used for another event")
    return journal_envelope(row)


def accept_init(connection: apsw.Connection, event: InitEvent) -> InitAccepted:
    """Journal an init event and store its prompt (numbered in its session) in the same transaction."""
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
                                                 when, agent=event.agent, project_key=event.project_key,
                                                 share_file=event.share_file), 0
    else:
        session_db_id, counter, _status = found
        if event.project_key or event.share_file:
            _note_repository(connection, session_db_id, event)
    skipped, reason = False, ""
    if not event.prompt:
        skipped, reason = True, event.skip_reason or "prompt is empty"
        touch_session(connection, session_db_id, when)
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
        touch_session(connection, session_db_id, when)
    stamped = msgspec.structs.replace(event, prompt_number=counter)
    # The prompt is stored right here, in the accepting transaction: init needs no replay.
    envelope = _journal(connection, stamped, "done", now)
    return InitAccepted(envelope, session_db_id, counter, skipped, reason)


AcceptedEvent = ObservationEvent | SummarizeEvent | CompleteEvent


def accept_event(connection: apsw.Connection, event: AcceptedEvent) -> Accepted:
    """Journal ``event``, stamped with its session's prompt number: pending, or parked when the session failed."""
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
                                        event.occurred_at or now, agent=event.agent)
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


def accept_events(connection: apsw.Connection, events: list[AcceptedEvent]) -> list[Accepted]:
    """:func:`accept_event` of each of ``events`` in turn, in three statements whatever their number.

    Each statement gives up the GIL and has to take it back from a busy Trio thread, so
    the accepts of a transaction share three statements instead of four each. One read
    answers, in one value each, the largest journal id, the sessions of ``events`` and
    which of their idempotency keys are journaled; then one insert of journal rows (with
    the ids SQLite would give them, the next ones in order) and one of their payloads.
    Events that need more -- a key seen before (a duplicate, or a key reused), a session
    not yet known -- are accepted one by one, as :func:`accept_event` does.
    """
    now = time.time()
    keys = [event.key for event in events if event.key]
    largest, sessions_json, keys_json = one_row(
        connection,
        "SELECT (SELECT coalesce(max(id), 0) FROM journal),"
        " (SELECT json_group_object(claude_session_id, json_array(id, prompt_counter, status)) FROM sessions"
        "  WHERE claude_session_id IN (SELECT value FROM json_each(?1))),"
        " (SELECT json_group_array(idempotency_key) FROM journal WHERE idempotency_key IN (SELECT value FROM json_each(?2)))",
        (to_json(list({event.claude_session_id for event in events})), to_json(keys)),
    )
    sessions = _sessions_found.decode(text(sessions_json))
    if _keys_found.decode(text(keys_json)) or len(set(keys)) < len(keys) \
            or any(event.claude_session_id not in sessions for event in events):
        return [accept_event(connection, event) for event in events]
    accepted: list[Accepted] = []
    for event_id, event in enumerate(events, integer(largest) + 1):
        session_db_id, counter, status = sessions[event.claude_session_id]
        if not isinstance(event, CompleteEvent):
            event = msgspec.structs.replace(event, prompt_number=counter)
        parked = status == "failed"
        accepted.append(Accepted(Envelope(event_id, event), session_db_id, counter, parked))
    connection.execute(
        f"INSERT INTO journal ({_JOURNAL_COLUMNS}) VALUES {placeholders(7, len(accepted))}",
        [value for one in accepted for value in _journal_row(
            one.envelope.event_id, one.envelope.event, "parked" if one.parked else "pending", now)],
    )
    connection.execute(
        f"INSERT INTO journal_payloads (id, payload) VALUES {placeholders(2, len(accepted))}",
        [value for one in accepted for value in (one.envelope.event_id, encode_event(one.envelope.event))],
    )
    return accepted


def mark_done(connection: apsw.Connection, event_ids: Sequence[int], now: float) -> None:
    """The events' journal rows are done: written in the transaction that stores their results."""
    # One statement, not one an id: each would be a trip through the GIL
    # (see result_writes.store_observations).
    connection.execute(
        "UPDATE journal SET status = 'done', processed_at = ? WHERE id IN (SELECT value FROM json_each(?))",
        (now, to_json(list(event_ids))),
    )


def park_session(connection: apsw.Connection, claude_session_id: str, error: str) -> int:
    """The session failed with ``error``: its pending events are parked; returns how many."""
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


def unpark_session(connection: apsw.Connection, claude_session_id: str) -> list[Envelope]:
    """The session's parked events are pending again, and the session no longer failed; returns those events."""
    rows = all_rows(
        connection,
        "SELECT j.id, p.payload FROM journal j JOIN journal_payloads p ON p.id = j.id"
        " WHERE j.claude_session_id = ? AND j.status = 'parked' ORDER BY j.id",
        (claude_session_id,),
    )
    connection.execute(
        "UPDATE journal SET status = 'pending' WHERE claude_session_id = ? AND status = 'parked'",
        (claude_session_id,),
    )
    connection.execute(
        "UPDATE sessions SET status = CASE WHEN prompt_counter > 0 THEN 'active' ELSE 'initialized' END,"
        " failure = NULL, updated_at = ? WHERE claude_session_id = ? AND status = 'failed'",
        (time.time(), claude_session_id),
    )
    return [journal_envelope(row) for row in rows]
