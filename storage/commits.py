"""The store's one signal that something was stored, and what: a commit number, and the latest of each kind of row.

The group-commit writer (:mod:`~sessionmem.storage.writer`) calls :meth:`CommitSignal.publish`
on the Trio thread after each successful commit that changed rows -- once per transaction,
however many writes it carried -- with the kinds of rows its writes store (:class:`Stored`,
declared by each write of :class:`~sessionmem.storage.sqlite.SQLiteStore`). A consumer that must
not miss a row keeps the last number it acted on and waits for a larger one of the kinds it
follows::

    seen = store.commits.committed(DOCUMENTS)
    while True:
        ...  # read what is new
        seen = await store.commits.wait_committed(seen, DOCUMENTS)

Taking the number *before* reading means a commit during the read wakes the next wait;
several commits while the consumer was busy wake it once, with the latest number. A commit
of other kinds does not wake it at all: the vector index follows :data:`DOCUMENTS`, the team
push :data:`SHAREABLE`, and a journal accept (the ingest hot path) is neither.

Resource handling:
    Nothing to close. A publish costs a few integer stores and a walk of the waiters (one
    per consumer); a wait registers one :class:`trio.Event` until it returns or is
    cancelled. Used from the Trio thread only (the writer hands results back to it before
    publishing).

Error handling:
    :meth:`CommitSignal.publish` never blocks and never raises; the waits raise nothing but
    cancellation, which always goes through.
"""

from __future__ import annotations

import enum

import msgspec
import trio


class Stored(enum.IntFlag):
    """Kinds of rows a commit stored (one commit may store several)."""

    NOTHING = 0  # rows consumers do not follow (the team cursors, say)
    JOURNAL = 1  # accepted events, their payloads and done marks
    SESSIONS = 2
    PROMPTS = 4
    OBSERVATIONS = 8
    SUMMARIES = 16


DOCUMENTS = Stored.PROMPTS | Stored.OBSERVATIONS | Stored.SUMMARIES  # what the vector index embeds
SHAREABLE = Stored.SESSIONS | DOCUMENTS  # what the team push sends
_KINDS = tuple((int(kind), position) for position, kind in enumerate(
    (Stored.JOURNAL, Stored.SESSIONS, Stored.PROMPTS, Stored.OBSERVATIONS, Stored.SUMMARIES)))
_ANY = 1 << len(_KINDS)  # a waiter for any commit at all


class CommitStatistics(msgspec.Struct, frozen=True, kw_only=True):
    commits: int  # commits that changed rows
    waiting: int  # consumers waiting for a commit now
    woken: int  # waits a commit ended (a consumer woken once counts once)


class CommitSignal:
    """A commit number, the latest of each kind, and waits for them to pass a given one."""

    def __init__(self) -> None:
        self._number = 0
        self._latest = [0] * len(_KINDS)  # by kind: the number of the latest commit that stored it
        self._waiters: dict[trio.Event, int] = {}  # each wait: the kinds that end it
        self._woken = 0

    def committed(self, kinds: Stored | None = None) -> int:
        """The number of the latest commit that stored one of ``kinds`` (``None``: any commit); 0 before one."""
        if kinds is None:
            return self._number
        return max([self._latest[position] for bit, position in _KINDS if kinds & bit], default=0)

    def publish(self, stored: int) -> int:
        """A commit that changed rows has happened, storing ``stored`` (:class:`Stored` bits): wake the
        waiters for any of those kinds; returns its number."""
        self._number += 1
        number, latest = self._number, self._latest
        for bit, position in _KINDS:
            if stored & bit:
                latest[position] = number
        ends = stored | _ANY
        for event, kinds in self._waiters.items():  # set() leaves the dict alone: each waiter leaves it itself
            if kinds & ends and not event.is_set():
                event.set()
                self._woken += 1
        return number

    async def wait_committed(self, after: int, kinds: Stored | None = None) -> int:
        """Wait until a commit numbered above ``after`` has stored one of ``kinds`` (``None``: any commit);
        return :meth:`committed` of them (at once if one has)."""
        mask = _ANY if kinds is None else int(kinds)
        if self.committed(kinds) > after:
            await trio.lowlevel.checkpoint()  # a checkpoint either way, as every Trio wait
        while (number := self.committed(kinds)) <= after:
            event = trio.Event()
            self._waiters[event] = mask
            try:
                await event.wait()
            finally:
                del self._waiters[event]
        return number

    def statistics(self) -> CommitStatistics:
        return CommitStatistics(commits=self._number, waiting=len(self._waiters), woken=self._woken)
