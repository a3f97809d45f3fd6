"""The worker's team sync: push this machine's memory of shared projects, pull the others', and copy a
project's past memory on request; with a status for ``/debug``, ``GET /api/team`` and ``sessionmem status``.

Three loops in :meth:`TeamSync.run`, each on its own:

- **push**: whenever rows it shares are stored (sessions, prompts, observations, summaries: the
  store's commit signal, :data:`~sessionmem.storage.commits.SHAREABLE`; a journal accept does not
  wake it, and several commits during a pass wake it once) and every :data:`PUSH_INTERVAL_S` in any case, batches
  until the outbox is empty (:mod:`sessionmem.team.push`), then vectors sent late;
- **pull**: every ``team_pull_interval_s`` (:mod:`sessionmem.team.pull`);
- **share push**: ``sessionmem share push --project NAME`` (:meth:`TeamSync.start_share_push`),
  one project at a time, resumable (its cursor is kept), progress in :meth:`statistics`.

Which projects are shared is :mod:`sessionmem.team.sharing`'s rule, with the user's answers
(:mod:`sessionmem.team.consent`) looked at (a stat) before every push and pull pass and read
again when the file changed: ``sessionmem share allow`` and ``share deny`` take effect within a
pull interval, the worker running or not, and a project whose approval is taken back is neither
pushed nor pulled from then on. A consent file that cannot be trusted shares nothing by approval
(fails closed), and says why in the status. SessionStart asks :meth:`TeamSync.share_request`
whether to tell the user, once, that a repository asks to share.

PostgreSQL is never on a hook's or a read's path: when it cannot be reached each loop
waits (:data:`BACKOFF_MIN_S`, doubling to :data:`BACKOFF_MAX_S`) and tries again, while
the worker accepts, compresses and answers from SQLite as ever. The outbox is the local
store itself: nothing is lost, however long the database stays away.

Resource handling:
    :meth:`run` opens the team store (lazily: a database down at start is fine), lends it to
    searches of the team database (:meth:`TeamSync.store`) and holds the loops' nursery; it
    reports started once this data dir's machine id exists (one local write; should the
    local store refuse it, a full disk, at once, and it tries again after), never waiting
    for PostgreSQL. Cancelling it ends the loops; a push whose
    team transaction committed but whose local cursor did not move is pushed again next
    time, which changes nothing there.

Error handling:
    :class:`~sessionmem.storage.pg.store.TeamUnavailable` is the database away: counted,
    shown (without any password), retried. Any other error is logged, counted and retried
    after the same pauses: the sync never stops the worker. Cancellation propagates.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import msgspec
import trio

from sessionmem.broadcast import Broadcaster
from sessionmem.index.actor import VectorIndex
from sessionmem.protocol.credentials import sanitized
from sessionmem.protocol.oskit import kill_process
from sessionmem.runtime.logs import log_exception
from sessionmem.settings import Settings, machine_origin
from sessionmem.storage.commits import SHAREABLE
from sessionmem.storage.pg.connections import Transport, transport
from sessionmem.storage.pg.store import TeamStore, TeamUnavailable, open_team_store
from sessionmem.storage.sqlite.store import SQLiteStore
from sessionmem.storage.sqlite.team_rows import OUTBOX, SHARE_PREFIX
from sessionmem.storage.team_records import Origin, shared_key
from sessionmem.team.consent import (
    NO_CONSENT,
    Consent,
    ConsentUnreadable,
    Stamp,
    consent_path,
    consent_stamp,
    database_label,
    mark_asked,
    read_consent,
)
from sessionmem.team.pull import Puller
from sessionmem.team.push import Pusher
from sessionmem.team.sharing import ProjectSharing, is_shared, sharing_list
from sessionmem.team.sync_status import SharePushState, SharePushStatus, ShareRefused, TeamStatistics

log = logging.getLogger(__name__)

T = TypeVar("T")

BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 30.0
PUSH_INTERVAL_S = 5.0  # a push pass at least this often, stored signal or not
# After a "stored" signal, what else is stored this long after it goes in the same pass: one team
# transaction and one local cursor write for a burst of observations, not one each.
PUSH_GATHER_S = 0.2
ERROR_LENGTH = 500
# With fault_injection on, this file in the data dir makes the worker kill itself with SIGKILL right after
# a push committed in the team database, before its local cursor moves (the file is removed first): the
# crash the outbox must survive without a duplicate (tests/test_team_sync.py).
KILL_AFTER_PUSH_FILE = "fault-kill-after-team-push"


_UNREAD: Stamp = ()  # no stamp: the consent file is read whole next time


class Backoff:
    """Pauses between failed attempts: :data:`BACKOFF_MIN_S`, doubling up to :data:`BACKOFF_MAX_S`."""

    def __init__(self) -> None:
        self.pause = BACKOFF_MIN_S

    def reset(self) -> None:
        self.pause = BACKOFF_MIN_S

    async def wait(self) -> None:
        await trio.sleep(self.pause)
        self.pause = min(self.pause * 2, BACKOFF_MAX_S)


class TeamSync:
    """See the module docstring. Build it, then run :meth:`run` in a nursery."""

    def __init__(self, settings: Settings, store: SQLiteStore, index: VectorIndex, broadcaster: Broadcaster) -> None:
        self._settings = settings
        self._store = store
        self._index = index
        self._broadcaster = broadcaster
        self._url = settings.database_url
        try:
            self._transport: Transport | None = transport(self._url)
        except TeamUnavailable:  # not a URL: every call says so
            self._transport = None
        self._machine, self._user = machine_origin(settings)
        self._machine_id = ""
        self._share_requests, self._share_receive = trio.open_memory_channel[str](1)
        self._share: SharePushStatus | None = None
        self._share_starting = trio.Lock()  # two requests at once start one push
        self._team: TeamStore | None = None  # open while run() runs
        # statistics
        self._connected = False
        self._pushed = self._pulled = self._failures = self._backlog = self._refused = self._pull_refused = 0
        self._last_pull_refused = ""
        self._last_push_at: float | None = None
        self._last_pull_at: float | None = None
        self._last_error = ""
        # the user's answers to repositories that ask to share (team/consent.py), read again when they change
        self._database = database_label(self._url)
        self._consent_path = consent_path(settings.data_dir)
        self._consent: Consent = NO_CONSENT
        self._approved: frozenset[str] = frozenset()
        self._consent_error = ""
        self._consent_stamp: Stamp | None = _UNREAD  # the consent file's when it was last read whole
        self._consent_files = trio.CapacityLimiter(1)
        self._sharing: list[ProjectSharing] = []

    # -- what others call -------------------------------------------------------------------

    def shared(self, project: str, project_key: str) -> bool:
        """The sharing rule with this worker's settings and the user's answers as last read
        (:func:`sessionmem.team.sharing.is_shared`)."""
        return is_shared(project, project_key, share_projects=self._settings.share_projects, approved=self._approved)

    def approved(self) -> frozenset[str]:
        """The project keys the user approved for this team database, as last read."""
        return self._approved

    async def refresh_consent(self) -> None:
        """Read the user's answers again if the file changed since they were read (a stat, and then the small
        file, in a thread); a file that cannot be trusted approves nothing, and its message is shown (logged
        once), and is read again each time until it can be."""
        try:
            consent = await trio.to_thread.run_sync(self._read_changed_consent, limiter=self._consent_files)
        except ConsentUnreadable as exc:
            if str(exc) != self._consent_error:
                log.warning("team sync: %s", exc)
            self._consent, self._approved, self._consent_error = NO_CONSENT, frozenset(), str(exc)
            return
        if consent is None:  # unchanged since it was read
            return
        if self._consent_error:
            log.info("team sync: the consent file is readable again")
        self._consent, self._consent_error = consent, ""
        self._approved = consent.allowed(self._database) if self._database else frozenset()

    def _read_changed_consent(self) -> Consent | None:
        """The answers, read whole unless the file is as it was when they were last read (None, then)."""
        try:
            stamp = consent_stamp(self._consent_path)
        except OSError:
            stamp = _UNREAD  # cannot tell: read it (read_consent says why it cannot be)
        if stamp != _UNREAD and stamp == self._consent_stamp:
            return None
        self._consent_stamp = _UNREAD  # until a read succeeds: a file that could not be trusted is read again
        consent = read_consent(self._consent_path)
        self._consent_stamp = stamp
        return consent

    async def refresh_sharing(self) -> list[ProjectSharing]:
        """What is shared and why, anew (the answers, and the repositories that asked: a local read)."""
        await self.refresh_consent()
        requests = await self._store.team_share_requests()
        self._sharing = sharing_list(self._settings.share_projects, self._consent.answers(self._database), requests)
        return self._sharing

    async def share_request(self, project: str, project_key: str) -> str:
        """At SessionStart in a repository that commits the share file: the team database to name in the
        request shown to the user, the first time only (per repository and database, on this machine); ``""``
        when there is nothing to say (shared already, answered, asked before, or the answers unreadable)."""
        try:  # never the SessionStart context's failure: at worst the request is not shown this time
            await self.refresh_consent()
            if not self._database or self._consent_error or self.shared(project, project_key):
                return ""
            asked = await trio.to_thread.run_sync(
                lambda: mark_asked(self._consent_path, database=self._database,
                                   project_key=shared_key(project_key, project), project=project),
                limiter=self._consent_files)
        except Exception as exc:  # a full disk, an unreadable file: logged; nothing is shared either way
            log_exception(log, f"team sync: cannot record that {project!r} asked to share", exc)
            return ""
        return self._database if asked else ""

    def store(self) -> TeamStore | None:
        """The team store this sync holds open, for reads of the team database itself (``GET
        /api/search?source=team``); ``None`` before :meth:`run` opened it or after it ended. Opening
        it does no I/O: a call on it raises TeamUnavailable while the database is away."""
        return self._team

    def statistics(self) -> TeamStatistics:
        return TeamStatistics(
            connected=self._connected, machine_id=self._machine_id, machine=self._machine, user=self._user,
            share_projects=list(self._settings.share_projects), pushed=self._pushed, pulled=self._pulled,
            backlog=self._backlog, last_push_at=self._last_push_at, last_pull_at=self._last_pull_at,
            failures=self._failures, refused=self._refused, last_error=self._last_error, share_push=self._share,
            pull_refused=self._pull_refused, last_pull_refused=self._last_pull_refused,
            transport=self._transport.describe() if self._transport else "",
            transport_warnings=self._transport.weaker if self._transport else [],
            database=self._database, sharing=self._sharing, consent_error=self._consent_error)

    async def refresh_backlog(self) -> int:
        """Count the rows not pushed yet anew (a read of the local store), and return it."""
        cursor = await self._store.team_outbox_cursor(OUTBOX)
        self._backlog = await self._store.team_backlog(cursor=cursor, shared=self.shared)
        return self._backlog

    async def start_share_push(self, project: str) -> SharePushStatus:
        """Start copying ``project``'s memory of this machine into the team database (resumable: it goes on
        from where an earlier push stopped); its status. The same project again while it runs: its status.

        Raises :class:`ShareRefused` when the project is not shared (``share_projects``, or approved
        on this machine), has no sessions here, or another project's push is under way.
        """
        async with self._share_starting:
            return await self._start_share_push(project)

    async def _start_share_push(self, project: str) -> SharePushStatus:
        running = self._share
        if running is not None and running.state in (SharePushState.RUNNING, SharePushState.WAITING):
            if running.project == project:
                return running
            raise ShareRefused(f"a share push of {running.project!r} is under way; try again once it is done")
        keys = await self._store.team_project_keys(project)
        if not keys:
            raise ShareRefused(f"no project {project!r} here")
        await self.refresh_consent()
        if not any(self.shared(project, key) for key in keys):
            raise ShareRefused(f"project {project!r} is not shared: name it in share_projects "
                               "(SESSIONMEM_SHARE_PROJECTS), or run `sessionmem share allow` in its repository")
        cursor = await self._store.team_outbox_cursor(SHARE_PREFIX + project)
        total = await self._store.team_rows_above(project=project, cursor=cursor)
        self._share = SharePushStatus(project=project, state=SharePushState.RUNNING, done=0, total=total, pushed=0,
                                      started_at=time.time())
        self._share_requests.send_nowait(project)  # never full: one push at a time, and the loop takes it at once
        return self._share

    # -- the task -----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Sync until cancelled; see the module docstring."""
        for weaker in self._transport.weaker if self._transport else []:
            log.warning("team sync: database_url weakens how the team database is reached: %s", weaker)
        # Open (no I/O) before reporting started: searches of the team database have it from then on.
        async with open_team_store(self._url) as team:
            self._team = team
            try:
                await self._sync(team, task_status)
            finally:
                self._team = None

    async def _sync(self, team: TeamStore, task_status: trio.TaskStatus[None]) -> None:
        try:
            self._machine_id = await self._store.team_start()
        except Exception as exc:  # the local store cannot take the write now (a full disk): not the worker's end
            self._count_failure(exc)
            log_exception(log, "team sync: cannot record this machine's id yet; trying again", exc)
        task_status.started()
        backoff = Backoff()
        while not self._machine_id:
            await backoff.wait()
            if await self._attempt(self._start, None):
                break
        origin = Origin(self._machine_id, self._machine, self._user)
        batch = self._settings.team_push_batch
        after_push = self._kill_if_asked if self._settings.fault_injection else None
        pusher = Pusher(self._store, team, self._index, origin=origin, batch=batch, after_push=after_push)
        puller = Puller(self._store, team, self._broadcaster, machine_id=self._machine_id,
                        share_projects=self._settings.share_projects, batch=batch, approved=self.approved)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._push_forever, pusher)
            nursery.start_soon(self._pull_forever, puller)
            nursery.start_soon(self._share_forever, pusher)

    async def _start(self, _: None) -> None:
        self._machine_id = await self._store.team_start()

    def _kill_if_asked(self) -> None:
        marker = self._settings.data_dir / KILL_AFTER_PUSH_FILE
        if marker.exists():
            marker.unlink()
            kill_process(os.getpid())

    async def _push_forever(self, pusher: Pusher) -> None:
        backoff = Backoff()
        while True:
            # Before reading: what is stored from now on wakes the next pass.
            seen = self._store.commits.committed(SHAREABLE)
            if await self._attempt(self._push_all, pusher):
                backoff.reset()
                with trio.move_on_after(PUSH_INTERVAL_S):
                    await self._store.commits.wait_committed(seen, SHAREABLE)
                    await trio.sleep(PUSH_GATHER_S)
            else:
                await self._refresh_backlog_quietly()
                await backoff.wait()

    async def _push_all(self, pusher: Pusher) -> None:
        await self.refresh_consent()
        while True:
            outcome = await pusher.push_batch(OUTBOX, self.shared)
            self._refused += outcome.refused
            if outcome.pushed:
                self._pushed += outcome.pushed
                self._last_push_at = time.time()
                self._ok()
            if outcome.scanned < self._settings.team_push_batch:
                break
        if await pusher.fill_vectors(self.shared):
            self._ok()
        await self.refresh_backlog()
        await self.refresh_sharing()

    async def _pull_forever(self, puller: Puller) -> None:
        backoff = Backoff()
        while True:
            if await self._attempt(self._pull_all, puller):
                backoff.reset()
                await trio.sleep(self._settings.team_pull_interval_s)
            else:
                await backoff.wait()

    async def _pull_all(self, puller: Puller) -> None:
        await self.refresh_consent()
        try:
            outcome = await puller.pull()
        finally:  # what was refused before a failure counts as well
            self._pull_refused, self._last_pull_refused = puller.refused, puller.last_refused
        self._pulled += outcome.pulled
        self._last_pull_at = time.time()
        self._ok()

    async def _share_forever(self, pusher: Pusher) -> None:
        async for project in self._share_receive:
            await self._share_push(pusher, project)

    async def _share_push(self, pusher: Pusher, project: str) -> None:
        backoff = Backoff()
        name = SHARE_PREFIX + project
        while True:
            status = self._share
            assert status is not None
            try:
                await self.refresh_consent()
                outcome = await pusher.push_batch(name, self.shared, project=project, wait_for_vectors=False)
            except TeamUnavailable as exc:
                self._unavailable(exc)
                self._share = msgspec.structs.replace(status, state=SharePushState.WAITING, error=self._last_error)
                await backoff.wait()
                continue
            except Exception as exc:
                self._count_failure(exc)
                log_exception(log, f"team sync: the share push of {project!r} failed", exc)
                self._share = msgspec.structs.replace(status, state=SharePushState.FAILED, error=self._last_error,
                                                      finished_at=time.time())
                return
            backoff.reset()
            self._refused += outcome.refused
            if outcome.pushed:
                self._ok()
                self._pushed += outcome.pushed
                self._last_push_at = time.time()
            done = outcome.scanned == 0
            self._share = msgspec.structs.replace(
                status, state=SharePushState.DONE if done else SharePushState.RUNNING, error="",
                done=status.done + outcome.scanned, total=max(status.total, status.done + outcome.scanned),
                pushed=status.pushed + outcome.pushed, finished_at=time.time() if done else None)
            if done:
                log.info("team sync: share push of %r done: %d row(s) pushed", project, self._share.pushed)
                return

    # -- outcomes -----------------------------------------------------------------------------

    async def _attempt(self, step: Callable[[T], Awaitable[None]], argument: T) -> bool:
        """``step(argument)``; False when it failed (counted, shown, logged unless it is the database away)."""
        try:
            await step(argument)
        except TeamUnavailable as exc:
            self._unavailable(exc)
            return False
        except Exception as exc:  # never the worker's end: counted, logged, tried again
            self._count_failure(exc)
            log_exception(log, "team sync: a sync step failed; trying again", exc)
            return False
        return True

    async def _refresh_backlog_quietly(self) -> None:
        try:
            await self.refresh_backlog()
        except Exception as exc:
            log_exception(log, "team sync: cannot count the rows waiting to be pushed", exc)

    def _ok(self) -> None:
        self._connected = True

    def _unavailable(self, exc: TeamUnavailable) -> None:
        if self._connected or not self._failures:
            log.warning("team sync: the team database cannot be reached (%s); trying again",
                        sanitized(str(exc), self._url)[:ERROR_LENGTH])
        self._connected = False
        self._count_failure(exc)

    def _count_failure(self, exc: Exception) -> None:
        self._failures += 1
        self._last_error = sanitized(f"{type(exc).__name__}: {exc}", self._url)[:ERROR_LENGTH]

