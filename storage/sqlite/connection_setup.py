"""Connection set-up of the SQLite store: opening and migrating the writer connection, and the
way every job of the store binds values.

Error handling:
    SQL and file-system errors propagate as ``apsw`` exceptions (or ``OSError`` for the
    data directory); :class:`~sessionmem.storage.sqlite.store.SQLiteStore` turns those a full
    or read-only disk raises into :class:`~sessionmem.storage.base.StorageUnavailable`.
"""

from __future__ import annotations

import os
from pathlib import Path

import apsw
import apsw.bestpractice

from sessionmem.storage.sqlite import retention
from sessionmem.storage.sqlite.schema import migrate

# The writer's journal_size_limit: a WAL a burst left larger is cut back to this when it
# starts over (storage/sqlite/checkpointer.py).
WAL_LIMIT_BYTES = 64 << 20

_bestpractice_applied = False


def _apply_bestpractice() -> None:
    """APSW's recommended settings (WAL, busy timeout, foreign keys...), once, before a connection opens."""
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
    # On macOS a plain fsync leaves a commit in the drive's cache: F_FULLFSYNC for every sync, as
    # sessionmem.protocol.oskit.sync_file does for our own files (SQLite ignores it elsewhere).
    connection.execute("PRAGMA fullfsync = ON")
    # A WAL that grew during a burst is cut back to this when it restarts (checkpoints
    # beside the writer truncate it whenever the database is idle).
    connection.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT_BYTES}")
    # Checkpoints run beside the writer (storage/sqlite/checkpointer.py), not inside a commit.
    connection.execute("PRAGMA wal_autocheckpoint = 0")
    connection.set_busy_timeout(5000)
    migrate(connection)
    return connection
