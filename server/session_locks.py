"""One lock per session, for work that must not run twice at once for the same session.

Two SessionStarts of one session may reach the worker together (Codex fires two after a resumed
session's compaction); the second's handover leaves out what the first told, so it must start
after the first has recorded it (:mod:`sessionmem.search.told`).

Resource handling:
    A session's lock exists only while a task holds it or waits for it: memory is bounded by the
    requests in flight.

Error handling:
    Cancellation while waiting leaves the lock as it was; the holder's errors propagate.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio


class SessionLocks:
    def __init__(self) -> None:
        self._locks: dict[str, trio.Lock] = {}

    @asynccontextmanager
    async def hold(self, claude_session_id: str) -> AsyncIterator[None]:
        """Hold ``claude_session_id``'s lock for the ``async with`` block."""
        lock = self._locks.setdefault(claude_session_id, trio.Lock())
        try:
            async with lock:
                yield
        finally:
            # Trio hands a released lock straight to its next waiter: free and unwaited-for, nobody needs it.
            if not lock.locked() and not lock.statistics().tasks_waiting:
                del self._locks[claude_session_id]

    def held(self) -> int:
        """How many sessions have a lock now (held or waited for)."""
        return len(self._locks)
