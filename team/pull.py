"""Pulling: the other machines' rows of the projects this machine shares, into the local store.

The team database hands rows out in the order of (transaction id, sequence) above a
cursor, leaving out this machine's own and any transaction still in flight
(:meth:`~sessionmem.storage.pg.store.TeamStore.pull`). Each batch is imported and the
cursor moved in one local transaction
(:func:`~sessionmem.storage.sqlite.team_rows.import_pulled`): a crash keeps both or neither,
and importing is idempotent anyway. Imported rows are searchable by words at once; the
import's commit wakes the local index (the store's commit signal), which embeds them itself; the viewer's
live stream hears of them.

Which projects: those this machine shares (``share_projects`` by name, and by the key its
sessions know them by; those the user approved on this machine, asked again at each pull:
:mod:`sessionmem.team.sharing`; ``*``: all). A project no longer shared is no longer asked
for from the next pull on. When that set grows, the new projects' rows already behind the cursor are fetched first, from the
start (:meth:`Puller.catch_up`), then the set is saved beside the cursor.

A pulled row is held to the rules of an import (decoded into the export records: types,
list shapes, caps; times from the future clamped as it is stored), and stored only in a
project this machine asked for: its key or name must be one the pull asked for, and so
must the local project it would land in (by its session here, else its key, else its
name). A row that breaks either rule is passed over: counted (``refused``), logged by
which row it is (never its content), and the cursor moves past it, so that one bad row
neither stops the pull nor reaches a page.

Error handling:
    :class:`~sessionmem.storage.pg.store.TeamUnavailable` propagates (the caller waits and
    tries again); nothing local moved for the batch that failed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence

import msgspec

from sessionmem.broadcast import Broadcaster, LiveObservation, LiveSummary
from sessionmem.protocol.limits import printable_line
from sessionmem.storage.export_records import ObservationRecord, SummaryRecord
from sessionmem.storage.pg.store import RefusedRow, TeamStore
from sessionmem.storage.sqlite.store import SQLiteStore
from sessionmem.storage.sqlite.team_rows import PULL, PULL_KEYS, encode
from sessionmem.storage.team_records import PullCursor, SharedRow
from sessionmem.team.sharing import shares_everything

log = logging.getLogger(__name__)

LIVE_EVENTS_A_BATCH = 8  # the viewer refreshes on any of them: a few say "something arrived"
SHOWN_CHARS = 80  # of a session id, a machine or project name in a log line about a refused row


class PullOutcome(msgspec.Struct, frozen=True):
    pulled: int  # rows imported (stored now or already here)
    stored: int  # of those, new here
    refused: int = 0  # rows passed over: they broke the rules of an import, or belong to a project not asked for


class Puller:
    """Pull steps for one machine; see the module docstring."""

    def __init__(self, store: SQLiteStore, team: TeamStore, broadcaster: Broadcaster, *,
                 machine_id: str, share_projects: Collection[str], batch: int,
                 approved: Callable[[], Collection[str]] = frozenset) -> None:
        self._store = store
        self._team = team
        self._broadcaster = broadcaster
        self._machine_id = machine_id
        self._share_projects = tuple(share_projects)
        self._approved = approved  # the project keys the user approved on this machine, now
        self._batch = batch
        self.refused = 0  # rows passed over since the start
        self.last_refused = ""  # which row was refused last, and why (never its content)

    async def pull(self) -> PullOutcome:
        """Pull until the team database has nothing newer for this machine."""
        # The keys to pull (None: every project), read with the cursor: one local read a pull.
        every = shares_everything(self._share_projects)
        cursor, pulled_keys, keys = await self._store.team_pull_state(None if every else self._share_projects,
                                                                      self._approved())
        refused = 0
        if keys != pulled_keys:
            new = _new_keys(keys, pulled_keys)
            if new != [] and cursor != PullCursor():
                refused += await self.catch_up(new, keys)
            await self._store.team_advance({PULL_KEYS: encode(keys)})
        if keys == []:
            return PullOutcome(0, 0, refused)
        pulled = stored = 0
        while True:
            batch = await self._team.pull(cursor, keys=keys, exclude_machine_id=self._machine_id, limit=self._batch)
            if batch.after == cursor:
                return PullOutcome(pulled, stored, refused)
            imported, misplaced = await self._import(batch.rows, encode(batch.after), keys)
            stored += imported
            pulled += len(batch.rows) - misplaced
            refused += misplaced + self._refused(batch.refused)
            cursor = batch.after

    async def catch_up(self, keys: list[str] | None, asked: list[str] | None) -> int:
        """The rows of projects newly pulled (``keys``; ``None``: of every project) from the start: the cursor
        is past them. ``asked``: every project key pulled now. Returns the rows refused.

        What this fetches beyond the cursor the regular pull fetches again: harmless, importing
        is idempotent. Its own progress is not kept: a crash starts it over.
        """
        cursor = PullCursor()
        refused = 0
        while True:
            batch = await self._team.pull(cursor, keys=keys, exclude_machine_id=self._machine_id, limit=self._batch)
            if batch.after == cursor:
                return refused
            _, misplaced = await self._import(batch.rows, None, asked)
            refused += misplaced + self._refused(batch.refused)
            cursor = batch.after

    async def _import(self, rows: Sequence[SharedRow], cursor: str | None, keys: list[str] | None
                      ) -> tuple[int, int]:
        """Import ``rows`` into the projects of ``keys``, setting the pull cursor to ``cursor`` (encoded) in the
        same transaction if given; (rows stored anew, rows refused for landing in a project not asked for)."""
        result = await self._store.team_import(rows, None if cursor is None else (PULL, cursor), keys=keys)
        counts = result.counts
        stored = counts.sessions + counts.prompts + counts.observations + counts.summaries
        for row in result.misplaced:
            self.last_refused = (f"{_kind(row)} of session {_cut(row.record.claude_session_id)} from "
                                 f"{_cut(row.origin.machine)}: project {_cut(row.project or '?')} "
                                 f"({_cut(row.project_key)}) is not one this machine pulls")
            log.warning("team pull: passed over the %s", self.last_refused)
        self.refused += len(result.misplaced)
        if stored:  # the index follows the store's commit signal; the viewer is told here
            # The store imports a cleaned copy of each row (secrets out): a row passed over is known by its identity.
            passed_over = {_identity(row) for row in result.misplaced}
            self._tell_the_viewer([row for row in rows if _identity(row) not in passed_over])
        return stored, len(result.misplaced)

    def _refused(self, refused: Sequence[RefusedRow]) -> int:
        for row in refused:
            self.last_refused = (f"row of {row.table} (xid {row.xid}, seq {row.seq}) of session "
                                 f"{_cut(row.claude_session_id)} from {_cut(row.origin_machine)}: {row.reason}")
            log.warning("team pull: passed over the %s", self.last_refused)
        self.refused += len(refused)
        return len(refused)

    def _tell_the_viewer(self, rows: Sequence[SharedRow]) -> None:
        for row in list(rows)[-LIVE_EVENTS_A_BATCH:]:
            record = row.record
            if isinstance(record, ObservationRecord):
                self._broadcaster.publish(LiveObservation(record.claude_session_id, record.project, record.tool_name,
                                                          record.type, record.title))
            elif isinstance(record, SummaryRecord):
                self._broadcaster.publish(LiveSummary(record.claude_session_id, record.project, record.request,
                                                      record.completed))


def _identity(row: SharedRow) -> tuple[str, str, object]:
    """What tells one pulled row from another: its kind, its session, and its place in the session."""
    record = row.record
    return (_kind(row), record.claude_session_id,
            getattr(record, "tool_use_id", None) or getattr(record, "prompt_number", None))


def _kind(row: SharedRow) -> str:
    return str(type(row.record).__struct_config__.tag or "row")


def _cut(text: str) -> str:
    """A name from another machine as a log line shows it: one printable line, a few dozen characters."""
    line = printable_line(text)
    return line if len(line) <= SHOWN_CHARS else line[:SHOWN_CHARS] + "…"


def _new_keys(wanted: list[str] | None, pulled: list[str] | None) -> list[str] | None:
    """The keys wanted and not pulled so far (``None``: every project, when not all were pulled)."""
    if pulled is None:
        return []
    if wanted is None:
        return None
    return sorted(set(wanted) - set(pulled))
