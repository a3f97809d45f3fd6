"""Pulling: the other machines' rows of the projects this machine shares, into the local store.

The team database hands rows out in the order of (transaction id, sequence) above a
cursor, leaving out this machine's own and any transaction still in flight
(:meth:`~sessionmem.storage.pg_store.TeamStore.pull`). Each batch is imported and the
cursor moved in one local transaction
(:func:`~sessionmem.storage.team_sync.import_pulled`): a crash keeps both or neither,
and importing is idempotent anyway. Imported rows are searchable by words at once; the
local index is told and embeds them itself; the viewer's live stream hears of them.

Which projects: those this machine shares (``share_projects`` by name, and by the key its
sessions know them by; those the user approved on this machine, asked again at each pull:
:mod:`sessionmem.team.sharing`; ``*``: all). A project no longer shared is no longer asked
for from the next pull on. When that set grows, the new projects' rows already behind the cursor are fetched first, from the
start (:meth:`Puller.catch_up`), then the set is saved beside the cursor.

Error handling:
    :class:`~sessionmem.storage.pg_store.TeamUnavailable` propagates (the caller waits and
    tries again); nothing local moved for the batch that failed.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import msgspec

from sessionmem.broadcast import Broadcaster, LiveObservation, LiveSummary
from sessionmem.index.actor import VectorIndex
from sessionmem.storage.pg_store import TeamStore
from sessionmem.storage.sqlite import SQLiteStore
from sessionmem.storage.team_records import PullCursor, SharedRow
from sessionmem.storage.team_sync import PULL, PULL_KEYS, encode
from sessionmem.storage.transfer import ObservationRecord, SummaryRecord
from sessionmem.team.sharing import shares_everything

LIVE_EVENTS_A_BATCH = 8  # the viewer refreshes on any of them: a few say "something arrived"


class PullOutcome(msgspec.Struct, frozen=True):
    pulled: int  # rows imported (stored now or already here)
    stored: int  # of those, new here


class Puller:
    """Pull steps for one machine; see the module docstring."""

    def __init__(self, store: SQLiteStore, team: TeamStore, index: VectorIndex, broadcaster: Broadcaster, *,
                 machine_id: str, share_projects: Collection[str], batch: int,
                 approved: Callable[[], Collection[str]] = frozenset) -> None:
        self._store = store
        self._team = team
        self._index = index
        self._broadcaster = broadcaster
        self._machine_id = machine_id
        self._share_projects = tuple(share_projects)
        self._approved = approved  # the project keys the user approved on this machine, now
        self._batch = batch

    async def pull(self) -> PullOutcome:
        """Pull until the team database has nothing newer for this machine."""
        # The keys to pull (None: every project), read with the cursor: one local read a pull.
        every = shares_everything(self._share_projects)
        cursor, pulled_keys, keys = await self._store.team_pull_state(None if every else self._share_projects,
                                                                      self._approved())
        if keys != pulled_keys:
            new = _new_keys(keys, pulled_keys)
            if new != [] and cursor != PullCursor():
                await self.catch_up(new)
            await self._store.team_advance({PULL_KEYS: encode(keys)})
        if keys == []:
            return PullOutcome(0, 0)
        pulled = stored = 0
        while True:
            rows, after = await self._team.pull(cursor, keys=keys, exclude_machine_id=self._machine_id,
                                                limit=self._batch)
            if not rows and after == cursor:
                return PullOutcome(pulled, stored)
            stored += await self._import(rows, encode(after))
            pulled += len(rows)
            cursor = after

    async def catch_up(self, keys: list[str] | None) -> None:
        """The rows of projects newly pulled (``None``: of every project) from the start: the cursor is past them.

        What this fetches beyond the cursor the regular pull fetches again: harmless, importing
        is idempotent. Its own progress is not kept: a crash starts it over.
        """
        cursor = PullCursor()
        while True:
            rows, after = await self._team.pull(cursor, keys=keys, exclude_machine_id=self._machine_id,
                                                limit=self._batch)
            if not rows and after == cursor:
                return
            await self._import(rows, None)
            cursor = after

    async def _import(self, rows: Sequence[SharedRow], cursor: str | None) -> int:
        """Import ``rows``, setting the pull cursor to ``cursor`` (encoded) in the same transaction if given."""
        counts = await self._store.team_import(rows, None if cursor is None else (PULL, cursor))
        stored = counts.sessions + counts.prompts + counts.observations + counts.summaries
        if stored:
            self._index.notify()
            self._tell_the_viewer(rows)
        return stored

    def _tell_the_viewer(self, rows: Sequence[SharedRow]) -> None:
        for row in list(rows)[-LIVE_EVENTS_A_BATCH:]:
            record = row.record
            if isinstance(record, ObservationRecord):
                self._broadcaster.publish(LiveObservation(record.claude_session_id, record.project, record.tool_name,
                                                          record.type, record.title))
            elif isinstance(record, SummaryRecord):
                self._broadcaster.publish(LiveSummary(record.claude_session_id, record.project, record.request,
                                                      record.completed))


def _new_keys(wanted: list[str] | None, pulled: list[str] | None) -> list[str] | None:
    """The keys wanted and not pulled so far (``None``: every project, when not all were pulled)."""
    if pulled is None:
        return []
    if wanted is None:
        return None
    return sorted(set(wanted) - set(pulled))
