"""What the database keeps, and for how long: raw tool payloads pruned, space given back, sizes told.

The journal keeps every event as it arrived, raw tool input and output included, so
that an event can be replayed until its observation is stored and so that
``GET /api/observations/{id}`` can show what the tool really did. Once an observation
is stored and older than the retention age, its raw payload has served: :func:`prune_payloads`
rewrites the journal entry without ``tool_input`` and ``tool_response`` (the entry stays,
with its idempotency key, so a re-sent event is still recognised as a duplicate).

Space: a database created by this version uses SQLite's incremental auto-vacuum, and
:func:`reclaim` hands freed pages back to the file system after a prune. An older
database is converted by one full :func:`vacuum` (``sessionmem prune --vacuum``).

Each function runs on the writer's thread: :func:`prune_payloads` inside a group commit,
the others outside any transaction (SQLite refuses VACUUM inside one).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import apsw

from sessionmem.storage.base import StorageReport
from sessionmem.storage.sqlite.values import all_rows, integer, one_row

WRITE_BACK_RETRY_S = 1.0  # a checkpoint of the other connection copies a few MB in milliseconds
CHECKPOINT_LOCK_BUSY_S = 0.05  # answered busy this fast: the other checkpoint, not a reader, is in the way
PRUNE_BATCH = 500  # journal entries rewritten per transaction: other writers wait at most this long


def prune_payloads(connection: apsw.Connection, before: float, *, after_id: int = 0,
                   limit: int = PRUNE_BATCH) -> tuple[int, int]:
    """Strip the raw tool data of stored observations that happened before ``before``, among up to
    ``limit`` journal entries after ``after_id``; returns (pruned, the last entry looked at, or 0 once at
    the end). When an event happened is the time it carries, else (``occurred_at`` 0, as a live hook
    sends it) its arrival."""
    rows = all_rows(
        connection,
        "SELECT j.id, j.kind = 'observation' AND j.status = 'done'"
        " AND coalesce(nullif(json_extract(CAST(p.payload AS TEXT), '$.occurred_at'), 0), j.accepted_at) < ?"
        " AND json_type(CAST(p.payload AS TEXT), '$.pruned') IS NULL"
        " FROM journal j JOIN journal_payloads p ON p.id = j.id WHERE j.id > ? ORDER BY j.id LIMIT ?",
        (before, after_id, limit))
    ids = [(integer(row_id),) for row_id, prunable in rows if prunable]
    connection.executemany(
        "UPDATE journal_payloads SET payload = CAST(json_set(json_remove(CAST(payload AS TEXT),"
        " '$.tool_input', '$.tool_response'), '$.pruned', json('true')) AS BLOB) WHERE id = ?", ids)
    return len(ids), (integer(rows[-1][0]) if len(rows) == limit else 0)


def reclaim(connection: apsw.Connection) -> int:
    """Give free pages back to the file system (incremental auto-vacuum); returns the pages freed."""
    before = _freelist_count(connection)
    connection.execute("PRAGMA incremental_vacuum").fetchall()  # runs a page per row: read them all
    after = _freelist_count(connection)
    if before != after:
        _write_back(connection)
    return before - after


def _freelist_count(connection: apsw.Connection) -> int:
    return integer(one_row(connection, "PRAGMA freelist_count")[0])


def vacuum(connection: apsw.Connection) -> None:
    """Rewrite the whole database compactly, switching it to incremental auto-vacuum."""
    connection.execute("PRAGMA auto_vacuum = INCREMENTAL")
    connection.execute("VACUUM")
    _write_back(connection)


def _write_back(connection: apsw.Connection) -> None:
    """Copy the WAL into the database file and empty it, so the file is its new size now.

    Error handling:
        While another connection checkpoints (the checkpointer's round, on its own thread), SQLite
        answers busy at once instead of waiting, so that is tried again for up to
        :data:`WRITE_BACK_RETRY_S`. A reader still in the way after the busy timeout is left to the
        checkpointer, which empties the WAL once the database is idle.
    """
    deadline = time.monotonic() + WRITE_BACK_RETRY_S
    while True:
        tried_at = time.monotonic()
        try:
            connection.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
            return
        except apsw.BusyError:
            answered_at = time.monotonic()
            if answered_at - tried_at > CHECKPOINT_LOCK_BUSY_S or answered_at > deadline:
                return
            time.sleep(CHECKPOINT_LOCK_BUSY_S / 10)


def use_incremental_vacuum_if_new(connection: apsw.Connection) -> None:
    """A database without tables yet gets incremental auto-vacuum (it cannot be turned on later
    without a full VACUUM)."""
    (tables,) = one_row(connection, "SELECT count(*) FROM sqlite_master")
    if integer(tables) == 0:
        vacuum(connection)


def report(connection: apsw.Connection, path: Path) -> StorageReport:
    """Sizes on disk and what holds them (a scan of the journal's payloads: for an operator, not a hot path)."""
    (observations,) = one_row(connection, "SELECT count(*) FROM observations")
    raw_bytes, raw_count = one_row(
        connection,
        "SELECT coalesce(sum(length(p.payload)), 0), count(*) FROM journal j JOIN journal_payloads p ON p.id = j.id"
        " WHERE j.kind = 'observation' AND json_type(CAST(p.payload AS TEXT), '$.pruned') IS NULL")
    mode = integer(one_row(connection, "PRAGMA auto_vacuum")[0])
    return StorageReport(
        database_bytes=_size(path), wal_bytes=_size(Path(str(path) + "-wal")), observations=integer(observations),
        raw_payload_bytes=integer(raw_bytes), raw_payloads=integer(raw_count),
        auto_vacuum={0: "none", 1: "full", 2: "incremental"}.get(mode, str(mode)),
        free_pages=_freelist_count(connection))


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
