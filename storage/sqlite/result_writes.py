"""Result writes of the SQLite store: observations, summaries and a session's completion, each
with its events' journal "done" mark in the same transaction.

Each function takes the writer connection and runs inside the writer's transaction, on its
thread. ``INSERT OR IGNORE`` on the event id makes a replayed result a no-op: a result is
stored exactly once however often its event is delivered (:mod:`sessionmem.storage.base`).

Error handling:
    SQL errors propagate as ``apsw`` exceptions.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import NamedTuple

import apsw
import msgspec

from sessionmem.events import Envelope, ObservationEvent, SummarizeEvent
from sessionmem.records import CompressedObservation, CompressedSummary, SessionInfo
from sessionmem.storage.sqlite.file_memories import recallable_files
from sessionmem.storage.sqlite.journal_writes import mark_done, touch_session
from sessionmem.storage.sqlite.values import integer, one_row, placeholders, text, to_json

# Observations stored by one INSERT (store_observations says why one): 26 parameters
# each, well within SQLite's 32,766.
ROWS_PER_STATEMENT = 500
# The weight of a summary as a background write (storage/writer.py), in observation rows:
# one row and its FTS5 rows, of longer texts.
SUMMARY_WEIGHT = 4


class Stored(NamedTuple):
    """What one store of observations added: how many rows, and (id, created_at, observation)
    of those file recall keeps."""

    inserted: int
    recalled: list[tuple[int, float, CompressedObservation]]


StoreArgument = tuple[SessionInfo, Sequence[tuple[Envelope, ObservationEvent, CompressedObservation]]]

_event_ids = msgspec.json.Decoder(dict[str, int])


def store_observations(connection: apsw.Connection, stores: list[StoreArgument]) -> list[Stored]:
    """The observations of ``stores`` (each a session and its items), in as few statements as one store has.

    One statement for every row: FTS5 writes what a statement added to its index as a
    segment of its own at the next statement's savepoint, so a statement per row would
    make a segment per observation, and merging them would grow into most of the
    writer's work as the index grows. And few long statements whatever the number of
    stores: each statement, and each row SQLite hands back, gives up the GIL, and one
    that runs longer than a busy Trio thread takes to grab it waits for the
    interpreter's switch interval to take it back. The rows inserted, not those ignored
    as already stored, are those above the largest id before; they are read back (one
    value, one step) only when a store's count cannot be known otherwise, or file recall
    keeps some of them.
    """
    now = time.time()
    items = [item for _, store_items in stores for item in store_items]
    rows = [
        (
            session.session_db_id, session.project, event.prompt_number, envelope.event_id, event.tool_name,
            event.tool_use_id or f"event-{envelope.event_id}", event.agent_id or None,
            event.agent_type or None, int(event.failed), obs.type, obs.title, obs.subtitle,
            to_json(obs.facts), obs.narrative, to_json(obs.concepts), to_json(obs.files_read),
            to_json(obs.files_modified), int(obs.compressed), obs.compressor, obs.model or None,
            obs.input_tokens, obs.output_tokens, event.occurred_at or now, now, str(obs.provenance),
            int(obs.flagged),
        )
        for session, store_items in stores for envelope, event, obs in store_items
    ]
    largest_before = integer(one_row(connection, "SELECT coalesce(max(id), 0) FROM observations")[0])
    inserted = 0
    for start in range(0, len(rows), ROWS_PER_STATEMENT):
        chunk = rows[start : start + ROWS_PER_STATEMENT]
        connection.execute(
            "INSERT OR IGNORE INTO observations (session_db_id, project, prompt_number, event_id, tool_name,"
            " tool_use_id, agent_id, agent_type, failed, type, title, subtitle, facts, narrative, concepts,"
            " files_read, files_modified, compressed, compressor, model, input_tokens, output_tokens,"
            " created_at, stored_at, provenance, flagged) VALUES "
            + placeholders(26, len(chunk)),
            [value for row in chunk for value in row],
        )
        inserted += connection.changes()
    recallable = any(recallable_files(obs) for _, _, obs in items)
    recalled: list[list[tuple[int, float, CompressedObservation]]] = [[] for _ in stores]  # (id, time, observation)
    if inserted in (0, len(rows)) and not recallable:  # every row added, or none: nothing to read back
        added = [[obs for _, _, obs in store_items] if inserted else [] for _, store_items in stores]
    else:  # which rows were added (the ids of a replay's rows already stored are not above the largest)
        (added_ids,) = one_row(connection, "SELECT json_group_object(event_id, id) FROM observations WHERE id > ?",
                               (largest_before,))
        ids = _event_ids.decode(text(added_ids))
        # A row added is the first store's to hold its event (the later were ignored).
        kept = [[(ids.pop(key), event.occurred_at or now, obs) for envelope, event, obs in store_items
                 if (key := str(envelope.event_id)) in ids] for _, store_items in stores]
        added = [[obs for _, _, obs in rows_added] for rows_added in kept]
        if recallable:
            recalled = kept
    # Each session: the tokens of its rows added, and the earliest and latest times its stores touch
    # it at (each store at its latest event's time). One short UPDATE a session: it takes the GIL back
    # before a waiting thread can grab it, where one UPDATE ... FROM json_each for all does not.
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
    results = [Stored(len(added_here), rows_recalled) for added_here, rows_recalled in zip(added, recalled)]
    mark_done(connection, [envelope.event_id for envelope, _, _ in items], now)
    return results


def store_summary(connection: apsw.Connection, session: SessionInfo, envelope: Envelope,
                  summary: CompressedSummary) -> bool:
    """Store the summary of ``envelope``'s summarize event; returns whether it was new."""
    event = envelope.event
    assert isinstance(event, SummarizeEvent)
    now = time.time()
    connection.execute(
        "INSERT OR IGNORE INTO session_summaries (session_db_id, project, prompt_number, event_id, request,"
        " investigated, learned, completed, next_steps, notes, compressed, compressor, model,"
        " input_tokens, output_tokens, created_at, stored_at, provenance, flagged)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            session.session_db_id, session.project, event.prompt_number, envelope.event_id, summary.request,
            summary.investigated, summary.learned, summary.completed, summary.next_steps, summary.notes,
            int(summary.compressed), summary.compressor, summary.model or None, summary.input_tokens,
            summary.output_tokens, event.occurred_at or now, now, str(summary.provenance), int(summary.flagged),
        ),
    )
    inserted = connection.changes() > 0
    connection.execute(
        "UPDATE sessions SET input_tokens = input_tokens + ?, output_tokens = output_tokens + ? WHERE id = ?",
        (summary.input_tokens if inserted else 0, summary.output_tokens if inserted else 0,
         session.session_db_id),
    )
    touch_session(connection, session.session_db_id, event.occurred_at or now)
    mark_done(connection, [envelope.event_id], now)
    return inserted


def complete_session(connection: apsw.Connection, session: SessionInfo, envelope: Envelope) -> None:
    """The session completed (unless it failed), at the time of ``envelope``'s event."""
    now = time.time()
    when = getattr(envelope.event, "occurred_at", 0.0) or now
    connection.execute(
        "UPDATE sessions SET status = 'completed', completed_at = ? WHERE id = ? AND status != 'failed'",
        (when, session.session_db_id),
    )
    touch_session(connection, session.session_db_id, when)
    mark_done(connection, [envelope.event_id], now)
