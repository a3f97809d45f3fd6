"""The store's one signal that something was stored: a number counting the commits that changed rows.

The group-commit writer (:mod:`~sessionmem.storage.writer`) calls :meth:`CommitSignal.publish`
on the Trio thread after each successful commit that changed rows -- once per transaction,
however many writes it carried. A consumer that must not miss a row (the vector index, the
team push) keeps the last number it acted on and waits for a larger one::

    seen = store.committed()
    while True:
        ...  # read what is new
        seen = await store.wait_committed(seen)

Taking the number *before* reading means a commit during the read wakes the next wait;
several commits while the consumer was busy wake it once, with the latest number.

Resource handling:
    Nothing to close: one :class:`trio.Event`, replaced at each publish. Used from the Trio
    thread only (the writer hands results back to it before publishing).

Error handling:
    :meth:`CommitSignal.publish` never blocks and never raises; :meth:`CommitSignal.wait_committed`
    raises nothing but cancellation.
"""

from __future__ import annotations

import trio


class CommitSignal:
    """A monotonically increasing commit number and a wait for it to pass a given one."""

    def __init__(self) -> None:
        self._number = 0
        self._published = trio.Event()

    def committed(self) -> int:
        """The number of the latest commit that changed rows (0 before the first)."""
        return self._number

    def publish(self) -> int:
        """A commit that changed rows has happened: wake every waiter; returns its number."""
        self._number += 1
        published, self._published = self._published, trio.Event()
        published.set()
        return self._number

    async def wait_committed(self, after: int) -> int:
        """Wait until a commit numbered above ``after`` has happened; return the latest number (at once if one has)."""
        if self._number > after:
            await trio.lowlevel.checkpoint()  # a checkpoint either way, as every Trio wait
        while self._number <= after:
            await self._published.wait()
        return self._number
