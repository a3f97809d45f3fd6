"""WAL checkpoints off the commit path.

SQLite's automatic checkpoint runs inside whichever commit crosses the threshold,
so one unlucky request pays for copying the WAL into the database (and an fsync).
The writer connection has auto-checkpoint turned off; :class:`Checkpointer`
checkpoints from a connection of its own, on a worker thread, whenever the WAL has
grown past a threshold. PASSIVE mode never waits for readers or the writer: it copies
what it can and tries again next time.

Under steady load a PASSIVE checkpoint can rarely let the WAL start over: new frames
come in while it copies, so the file only grows (151 MB after a backfill, once). So each
PASSIVE checkpoint of a WAL holding :data:`THRESHOLD_PAGES` or more is followed by a
RESTART checkpoint: it takes the write lock for what the PASSIVE one left (about a
millisecond), and the writer's next transaction writes the WAL from its beginning
again. Under a steady load the file then stops growing (in a burst as fast as a
backfill it still grows: 87 MB at the peak of the whole corpus's), and the writer's
``journal_size_limit`` (``storage.sqlite.connection_setup.WAL_LIMIT_BYTES``) cuts one that a burst left larger back
when it starts over. When nothing has been committed for ``idle_s``, a TRUNCATE
checkpoint cuts the file to zero bytes. (TRUNCATE is kept for then: cutting a 64 MB
file took 31-35 ms with the write lock held, against ~1 ms for a RESTART; under a 500
events/s open loop, each of the three it did in 20 s held every accept back for 35-57
ms.)

Neither waits: if a reader or the writer is in the way it tries again a second later.
Each try starts with a PASSIVE checkpoint, so the one that holds the write lock finds
little left to copy (a TRUNCATE that did not once copied 60 MB with every commit waiting,
100-290 ms).

Resource handling:
    The checkpoint connection belongs to :meth:`Checkpointer.run` and is closed when
    it is cancelled (after one last attempt, bounded by ``close_timeout_s``).
"""

from __future__ import annotations

from pathlib import Path

import apsw
import trio

from sessionmem.storage.base import CheckpointerStatistics
from sessionmem.storage.sqlite.values import integer, one_row

INTERVAL_S = 1.0
THRESHOLD_PAGES = 1000  # SQLite's own default auto-checkpoint size
PAGE_BYTES = 4096
IDLE_S = 10.0  # no commit for this long: truncate the WAL


def _checkpoint(connection: apsw.Connection) -> tuple[int, int]:
    """(pages in the WAL, pages checkpointed)."""
    return connection.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)


def _checkpoint_all(connection: apsw.Connection, mode: int) -> bool:
    """Checkpoint everything (RESTART: the next write starts the WAL over; TRUNCATE: the WAL is also
    cut to nothing); False if a reader or the writer was in the way."""
    try:
        connection.wal_checkpoint(mode=mode)
    except apsw.BusyError:
        return False
    return True


def _data_version(connection: apsw.Connection) -> int:
    """Changes whenever another connection commits (SQLite's ``PRAGMA data_version``)."""
    return integer(one_row(connection, "PRAGMA data_version")[0])


def _wal_bytes(path: Path) -> int:
    # The file size is enough (a checkpoint resets the WAL for reuse, it does not
    # shrink it, so this over-counts right after one: harmless, the next is cheap).
    try:
        return Path(str(path) + "-wal").stat().st_size
    except OSError:
        return 0


class Checkpointer:
    def __init__(self, path: Path, *, idle_s: float = IDLE_S) -> None:
        self._path = path
        self._idle_s = idle_s
        self._truncations = self._restarts = 0
        self._checkpoints = 0
        self._wal_bytes = 0
        self._last_pages = 0
        self._failures = 0
        self._last_error = ""

    def statistics(self) -> CheckpointerStatistics:
        return CheckpointerStatistics(checkpoints=self._checkpoints, wal_bytes=self._wal_bytes,
                                      last_checkpointed_pages=self._last_pages, failures=self._failures,
                                      last_error=self._last_error, truncations=self._truncations,
                                      restarts=self._restarts)

    async def run(self, *, close_timeout_s: float = 5.0,
                  task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Checkpoint whenever the WAL passes the threshold, until cancelled."""
        task_status.started()
        connection = await self._connect()
        limiter = trio.CapacityLimiter(1)
        try:
            version, changed_at = None, trio.current_time()
            while True:
                await trio.sleep(INTERVAL_S)
                self._wal_bytes = await trio.to_thread.run_sync(_wal_bytes, self._path, limiter=limiter)
                try:
                    now_version = await trio.to_thread.run_sync(_data_version, connection, limiter=limiter)
                    if now_version != version:
                        version, changed_at = now_version, trio.current_time()
                    idle = trio.current_time() - changed_at >= self._idle_s
                    # Each time what can be copied without the write lock first (module docstring).
                    if self._wal_bytes and idle:
                        await self._checkpoint(connection, limiter)
                        if await trio.to_thread.run_sync(_checkpoint_all, connection, apsw.SQLITE_CHECKPOINT_TRUNCATE,
                                                         limiter=limiter):
                            self._truncations += 1
                            self._wal_bytes = 0
                    elif self._wal_bytes >= THRESHOLD_PAGES * PAGE_BYTES:
                        frames = await self._checkpoint(connection, limiter)
                        if frames >= THRESHOLD_PAGES and await trio.to_thread.run_sync(
                                _checkpoint_all, connection, apsw.SQLITE_CHECKPOINT_RESTART, limiter=limiter):
                            self._restarts += 1
                except apsw.Error as exc:  # a full disk, say: the WAL just grows until the next try
                    self._failed(exc)
        finally:
            with trio.move_on_after(close_timeout_s, shield=True):
                try:
                    await self._checkpoint(connection, limiter)
                except apsw.Error:
                    pass  # the next start checkpoints
                await trio.to_thread.run_sync(connection.close)

    async def _connect(self) -> apsw.Connection:
        """Its own connection; while the database cannot be opened (a full disk), it tries again later."""
        def connect() -> apsw.Connection:
            connection = apsw.Connection(str(self._path))
            connection.set_busy_timeout(0)
            connection.execute("PRAGMA fullfsync = ON")  # macOS: as the writer's commits (connection_setup.py)
            return connection

        while True:
            try:
                return await trio.to_thread.run_sync(connect)
            except apsw.Error as exc:
                self._failed(exc)
            await trio.sleep(INTERVAL_S)

    def _failed(self, exc: apsw.Error) -> None:
        self._failures += 1
        self._last_error = f"{type(exc).__name__}: {exc}"[:300]

    async def _checkpoint(self, connection: apsw.Connection, limiter: trio.CapacityLimiter) -> int:
        """A PASSIVE checkpoint; the frames in the WAL."""
        frames, self._last_pages = await trio.to_thread.run_sync(_checkpoint, connection, limiter=limiter)
        self._checkpoints += 1
        return frames
