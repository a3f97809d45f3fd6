"""A dynamic one-for-one supervisor of session actors (Erlang's simple_one_for_one).

Each Claude session gets a transient child: started on its first event, restarted
after a crash with its mailbox and unfinished messages intact, stopped when idle and
started again on demand. More than ``max_restarts`` crashes within
``restart_window_s`` seconds marks that session ``failed`` and parks its remaining
journal events; other sessions and the worker carry on.

Routing is synchronous (:meth:`SessionSupervisor.deliver` never blocks): it is called
by the journal writer right after each commit, in journal order, which is how every
actor sees its events in arrival order.

Resource handling:
    :meth:`run` owns the nursery every actor runs in. :meth:`shutdown` closes all
    mailboxes; actors finish what they hold, and whatever is still running after the
    drain deadline is cancelled -- its events are still pending in the journal and
    are replayed at the next start.

Error handling:
    ``Exception`` from an actor counts as a crash; ``Cancelled`` and other
    ``BaseException`` propagate untouched.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import trio

from sessionmem.actors.child import MailboxFull, SessionChild
from sessionmem.actors.session import ActorDeps, SessionActor
from sessionmem.events import Envelope

log = logging.getLogger(__name__)

MAX_STOPPED_CHILDREN = 1000


class SessionSupervisor:
    def __init__(self, deps: ActorDeps, *, clock: Callable[[], float] = trio.current_time) -> None:
        self._deps = deps
        self._settings = deps.settings
        self._clock = clock
        self._children: dict[str, SessionChild] = {}
        self._nursery: trio.Nursery | None = None
        self._closing = False
        self._shutdown_requested = trio.Event()
        self._totals = {
            "delivered": 0,
            "replayed": 0,
            "actor_starts": 0,
            "restarts": 0,
            "crashes": 0,
            "failed_sessions": 0,
            "parked_events": 0,
            "idle_stops": 0,
            "rejected_full": 0,
            "dropped_for_failed": 0,
        }

    # -- lifecycle -------------------------------------------------------------------

    async def run(self, *, drain_seconds: float = 10.0, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await self._shutdown_requested.wait()
            self._closing = True
            for child in self._children.values():
                child.close_mailbox()
            # Actors drain what they hold; past the deadline the rest stays in the journal.
            nursery.cancel_scope.deadline = trio.current_time() + drain_seconds

    def shutdown(self) -> None:
        self._shutdown_requested.set()

    # -- routing ---------------------------------------------------------------------

    def _child(self, claude_session_id: str) -> SessionChild:
        child = self._children.get(claude_session_id)
        if child is None:
            child = SessionChild(claude_session_id, self._settings.mailbox_size)
            self._children[claude_session_id] = child
            self._prune_stopped()
        elif child.send is None:
            child.open_mailbox()
        return child

    @contextmanager
    def reservation(self, claude_session_id: str) -> Iterator[None]:
        """Hold a mailbox slot while an event is being journaled.

        Raises :class:`MailboxFull` (answered as 503) when the session cannot take
        more; nothing has been written then.
        """
        child = self._child(claude_session_id)
        try:
            child.reserve()
        except MailboxFull:
            self._totals["rejected_full"] += 1
            raise
        try:
            yield
        finally:
            child.reserved -= 1

    def deliver(self, envelope: Envelope) -> None:
        """Route a committed event to its session's actor. Never blocks."""
        child = self._child(envelope.event.session_id)
        if child.failed:
            # Parked in the journal by the store; nothing to do in memory.
            self._totals["dropped_for_failed"] += 1
            return
        assert child.send is not None
        try:
            child.send.send_nowait(envelope)
        except trio.WouldBlock:
            # Only possible if a caller skipped reservation(): keep order by queueing
            # behind everything the actor already has.
            log.warning("mailbox of %s full: event %s queued in backlog", child.claude_session_id, envelope.event_id)
            child.backlog.append(envelope)
        self._totals["delivered"] += 1
        child.note_depth()
        self._ensure_running(child)

    def replay(self, envelopes: list[Envelope]) -> None:
        """Queue journal events (older than anything in a mailbox) for processing."""
        for envelope in envelopes:
            child = self._child(envelope.event.session_id)
            child.backlog.append(envelope)
            self._totals["replayed"] += 1
        for child in {self._children[e.event.session_id] for e in envelopes}:
            child.note_depth()
            self._ensure_running(child)

    def unparked(self, claude_session_id: str, envelopes: list[Envelope]) -> None:
        """The session's parked events are pending again: reset it and process them."""
        child = self._child(claude_session_id)
        child.failed = False
        child.crash_times.clear()
        child.last_error = ""
        child.state = "stopped"  # until replay (below) starts it, if there is anything to do
        self.replay(envelopes)

    def _ensure_running(self, child: SessionChild) -> None:
        if child.running or child.failed or self._closing:
            return
        if self._nursery is None:
            raise RuntimeError("supervisor is not running")
        child.running = True
        child.state = "starting"
        self._nursery.start_soon(self._supervise, child, name=f"session-actor:{child.claude_session_id}")

    # -- supervision -----------------------------------------------------------------

    async def _supervise(self, child: SessionChild) -> None:
        try:
            while True:
                child.starts += 1
                self._totals["actor_starts"] += 1
                try:
                    await SessionActor(child, self._deps).run()
                except Exception as exc:
                    if await self._crashed(child, exc):
                        continue
                    return
                # Normal return: idle or shutting down. Decide atomically (no await
                # between this check and leaving) whether work arrived meanwhile.
                if child.has_work() and not self._closing:
                    continue
                child.state = "stopped"
                if not self._closing:  # idle: let go of the mailbox until work comes
                    self._totals["idle_stops"] += 1
                    child.drop_mailbox()
                return
        finally:
            child.running = False

    async def _crashed(self, child: SessionChild, exc: Exception) -> bool:
        """Record a crash; True means restart, False means the session was given up."""
        now = self._clock()
        self._totals["crashes"] += 1
        child.last_error = f"{type(exc).__name__}: {exc}"
        child.last_error_at = time.time()
        child.crash_times.append(now)
        while child.crash_times and child.crash_times[0] < now - self._settings.restart_window_s:
            child.crash_times.popleft()
        log.error("session actor %s crashed: %s", child.claude_session_id, child.last_error, exc_info=exc)
        if len(child.crash_times) <= self._settings.max_restarts and not self._closing:
            child.restarts += 1
            self._totals["restarts"] += 1
            return True
        await self._give_up(child)
        return False

    async def _give_up(self, child: SessionChild) -> None:
        child.failed = True
        child.state = "failed"
        self._totals["failed_sessions"] += 1
        # Their events stay in the journal (parked below); memory lets go of them.
        child.inflight.clear()
        child.backlog.clear()
        if child.receive is not None:
            while True:
                try:
                    child.receive.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
        try:
            parked = await self._deps.store.park_session(
                child.claude_session_id, f"gave up after {len(child.crash_times)} crashes: {child.last_error}"
            )
        except Exception:
            log.exception("could not park events of %s; they stay pending", child.claude_session_id)
            return
        self._totals["parked_events"] += parked
        log.error("session %s failed; %d event(s) parked", child.claude_session_id, parked)
        self._deps.broadcaster.publish(
            "session", {"claudeSessionId": child.claude_session_id, "project": child.project, "status": "failed"}
        )

    def _prune_stopped(self) -> None:
        stopped = [c for c in self._children.values() if not c.running and c.state == "stopped" and not c.has_work()]
        for child in sorted(stopped, key=lambda c: c.last_active)[: max(0, len(stopped) - MAX_STOPPED_CHILDREN)]:
            del self._children[child.claude_session_id]

    # -- introspection -----------------------------------------------------------------

    def statistics(self) -> dict[str, Any]:
        children = list(self._children.values())
        return {
            **self._totals,
            "actors": len(children),
            "running": sum(1 for c in children if c.running),
            "failed": sum(1 for c in children if c.failed),
            "mailbox_depth": sum(c.mailbox_depth() for c in children),
            "backlog": sum(len(c.backlog) for c in children),
            "peak_depth": max((c.peak_depth for c in children), default=0),
            "max_restarts": self._settings.max_restarts,
            "restart_window_s": self._settings.restart_window_s,
        }

    def actors(self) -> list[dict[str, Any]]:
        return [child.snapshot() for child in self._children.values()]
