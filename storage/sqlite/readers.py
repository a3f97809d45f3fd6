"""Read-only SQLite connections used off the Trio thread: a pool, and a gatherer of short reads.

WAL mode lets readers run beside the writer without blocking it.

- :class:`ReaderPool`: each connection is lent to one thread at a time: a read takes a
  connection from the pool, runs on a worker thread, and gives it back.
- :class:`ReadGatherer`: short reads that arrive together share one trip to a worker
  thread, the way the writer's group commit shares a transaction.

Resource handling:
    :meth:`ReaderPool.aclose` waits for lent connections to come back, then closes all.
    :meth:`ReadGatherer.run` owns its connection: it opens it, and closes it when it
    returns.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

import apsw
import trio

from sessionmem.storage.base import GatheredReadStatistics

T = TypeVar("T")
GATHERED_BATCH = 32  # reads of one trip at most: ~4 ms of file recall, the wait of the last one


def open_reader(path: Path) -> apsw.Connection:
    connection = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    connection.set_busy_timeout(5000)
    connection.execute("PRAGMA query_only = 1")
    return connection


class ReaderPool:
    def __init__(self, path: Path, size: int = 4) -> None:
        self._path = path
        self._size = size
        self._free_send, self._free_receive = trio.open_memory_channel[apsw.Connection](size)
        self._limiter = trio.CapacityLimiter(size)
        self._all: list[apsw.Connection] = []

    async def open(self) -> None:
        for _ in range(self._size):
            connection = await trio.to_thread.run_sync(open_reader, self._path)
            self._all.append(connection)
            self._free_send.send_nowait(connection)

    async def run(self, fn: Callable[[apsw.Connection], T]) -> T:
        """Run ``fn(connection)`` on a worker thread with a pooled read connection."""
        connection = await self._free_receive.receive()
        try:
            return await trio.to_thread.run_sync(fn, connection, limiter=self._limiter)
        finally:
            self._free_send.send_nowait(connection)

    async def aclose(self, *, timeout_s: float = 5.0) -> None:
        """Wait (at most ``timeout_s``) for lent connections to come back, then close all."""
        with trio.move_on_after(timeout_s, shield=True):
            for _ in range(len(self._all)):
                await self._free_receive.receive()
        for connection in self._all:
            connection.close()
        self._all.clear()


class _Read(Generic[T]):
    __slots__ = ("fn", "done", "result", "error")
    # Set when ``fn`` returns, and read only then: once ``done``, if ``error`` is None.
    result: T

    def __init__(self, fn: Callable[[apsw.Connection], T]) -> None:
        self.fn = fn
        self.done = trio.Event()
        self.error: BaseException | None = None


def _run_reads(connection: apsw.Connection, batch: list[_Read[Any]]) -> None:
    for read in batch:
        try:
            read.result = read.fn(connection)
        except Exception as exc:  # its caller's alone
            read.error = exc


class ReadGatherer:
    """Short reads submitted while a batch runs go together in the next one: one thread trip.

    A trip to a worker thread and back costs the worker more CPU than a short indexed
    read: the thread's wake-up, Trio's wake-up socket, the GIL changing hands. In
    process, 500 file-recall reads (each ~0.13 ms of SQLite) took 336 us of CPU a read
    one to a trip, 168 us five to a trip, 133 us 25 to a trip. Under load the reads of
    concurrent hook requests queue while a batch runs and share the next trip; a lone
    read makes a trip of its own at once, as before.

    For short reads only: a batch runs its reads one after another, so a slow read would
    delay every read behind it (searches use the :class:`ReaderPool`).

    Resource handling:
        One connection, opened and closed by :meth:`run`, used only by the thread of the
        current batch (one batch at a time). :meth:`close` stops taking reads; those
        queued still run before ``run`` returns. A read submitted after that raises
        ``trio.ClosedResourceError``.

    Error handling:
        A read's exception is raised to its own caller only. If ``run`` ends early
        (cancelled), reads still queued get ``trio.ClosedResourceError``.
    """

    def __init__(self, path: Path, *, max_batch: int = GATHERED_BATCH) -> None:
        self._path = path
        self._max_batch = max_batch
        self._send, self._receive = trio.open_memory_channel[_Read[Any]](max_batch * 8)
        self._reads = self._trips = self._largest_batch = 0

    def statistics(self) -> GatheredReadStatistics:
        return GatheredReadStatistics(self._reads, self._trips, self._largest_batch,
                                      self._send.statistics().current_buffer_used)

    async def read(self, fn: Callable[[apsw.Connection], T]) -> T:
        """``fn(connection)`` in the next batch, on a worker thread; its result.

        A caller cancelled while waiting does not withdraw its read: it runs, unread.
        """
        read: _Read[T] = _Read(fn)
        try:
            self._send.send_nowait(read)  # the common case: no extra scheduling round
        except trio.WouldBlock:
            await self._send.send(read)
        await read.done.wait()
        if read.error is not None:
            raise read.error
        return read.result

    def close(self) -> None:
        self._send.close()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve reads until :meth:`close` (then finish those queued) or cancellation."""
        connection = await trio.to_thread.run_sync(open_reader, self._path)
        try:
            task_status.started()
            async for first in self._receive:
                batch = [first]
                while len(batch) < self._max_batch:
                    try:
                        batch.append(self._receive.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                try:
                    # Not abandoned on cancellation: the thread has the connection.
                    await trio.to_thread.run_sync(_run_reads, connection, batch)
                finally:
                    self._trips += 1
                    self._reads += len(batch)
                    self._largest_batch = max(self._largest_batch, len(batch))
                    for read in batch:
                        read.done.set()
        finally:
            self._fail_queued()
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(connection.close)

    def _fail_queued(self) -> None:
        """Answer every read still queued (``run`` is ending) with ClosedResourceError."""
        self._send.close()
        with self._receive:
            while True:
                try:
                    read = self._receive.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel):
                    return
                read.error = trio.ClosedResourceError("the store is closed")
                read.done.set()
