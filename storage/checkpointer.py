"""WAL checkpoints off the commit path.

SQLite's automatic checkpoint runs inside whichever commit crosses the threshold,
so one unlucky request pays for copying the WAL into the database (and an fsync).
The writer connection has auto-checkpoint turned off; this task checkpoints from a
connection of its own, on a worker thread, whenever the WAL has grown past a
threshold. PASSIVE mode never waits for readers or the writer: it copies what it
can and tries again next time.

Resource handling:
    The checkpoint connection belongs to :func:`run_checkpointer` and is closed when
    it is cancelled (after one last attempt, bounded in time).
"""

from __future__ import annotations

from pathlib import Path

import apsw
import trio

INTERVAL_S = 1.0
THRESHOLD_PAGES = 1000  # SQLite's own default auto-checkpoint size


def _checkpoint(connection: apsw.Connection) -> tuple[int, int]:
    """(pages in the WAL, pages checkpointed)."""
    return connection.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)


async def run_checkpointer(path: Path, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    connection = await trio.to_thread.run_sync(apsw.Connection, str(path))
    limiter = trio.CapacityLimiter(1)
    try:
        await trio.to_thread.run_sync(connection.set_busy_timeout, 0)
        task_status.started()
        while True:
            await trio.sleep(INTERVAL_S)
            if await trio.to_thread.run_sync(_wal_pages, connection, limiter=limiter) >= THRESHOLD_PAGES:
                await trio.to_thread.run_sync(_checkpoint, connection, limiter=limiter)
    finally:
        with trio.move_on_after(5, shield=True):
            await trio.to_thread.run_sync(_checkpoint, connection, limiter=limiter)
            await trio.to_thread.run_sync(connection.close)


def _wal_pages(connection: apsw.Connection) -> int:
    # The file size is enough (a checkpoint resets the WAL for reuse, it does not
    # shrink it, so this over-counts right after one: harmless, the next is cheap).
    try:
        return Path(connection.filename + "-wal").stat().st_size // 4096
    except OSError:
        return 0
