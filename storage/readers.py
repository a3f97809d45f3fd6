"""A small pool of read-only SQLite connections used off the Trio thread.

WAL mode lets readers run beside the writer without blocking it. Each connection is
lent to one thread at a time: a read takes a connection from the pool, runs on a
worker thread, and gives it back.

Resource handling:
    :meth:`ReaderPool.aclose` waits for lent connections to come back, then closes all.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import apsw
import trio

T = TypeVar("T")


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
