"""Routing of journaled events to their session's actor, by Claude session id.

The router owns the :class:`~.child.SessionChild` of every session it has seen: it
reserves a mailbox slot before an event is journaled (:meth:`SessionRouter.reservation`),
delivers the event once it is committed (:meth:`deliver`), queues replayed journal
events (:meth:`replay`), and asks the supervisor to run the child's actor. Restarts
and their policy are the supervisor's (:mod:`.supervisor`).

Delivery is synchronous and never blocks: it is called by the journal writer right
after each commit, in journal order, which is how every actor sees its events in
arrival order.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import msgspec

from sessionmem.actors.child import ActorHistory, ActorStatistics, MailboxFull, SessionChild
from sessionmem.actors.restart import RestartPolicy
from sessionmem.actors.state import ActorState
from sessionmem.actors.supervisor import ActorSupervisor
from sessionmem.events import Envelope

log = logging.getLogger(__name__)

MAX_STOPPED_CHILDREN = 1000  # stopped, empty children kept for /debug; older ones are forgotten


class RouterStatistics(msgspec.Struct, frozen=True):
    known: int  # sessions with a child (running, stopped or failed)
    alive: int
    failed: int
    mailbox_depth: int
    backlog: int
    queued: int  # everything the actors still have to do
    peak_depth: int
    delivered: int
    replayed: int
    rejected_full: int  # 503s: a mailbox had no room
    parked_on_arrival: int  # events for a failed session, kept parked in the journal
    overflowed: int  # delivered without a reservation into a full mailbox (a bug if not 0)


class SessionRouter:
    def __init__(self, supervisor: ActorSupervisor, *, mailbox_size: int, restart_policy: RestartPolicy) -> None:
        self._supervisor = supervisor
        self._mailbox_size = mailbox_size
        self._restart_policy = restart_policy
        self._children: dict[str, SessionChild] = {}
        self._delivered = self._replayed = self._rejected_full = self._parked_on_arrival = self._overflowed = 0

    def _child(self, claude_session_id: str) -> SessionChild:
        child = self._children.get(claude_session_id)
        if child is None:
            child = SessionChild(claude_session_id, self._mailbox_size, self._restart_policy)
            self._children[claude_session_id] = child
            self._forget_stopped()
        elif not child.has_mailbox:
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
            self._rejected_full += 1
            raise
        try:
            yield
        finally:
            child.release()

    def deliver(self, envelope: Envelope) -> None:
        """Route a committed event to its session's actor. Never blocks."""
        child = self._child(envelope.event.claude_session_id)
        if child.state is ActorState.FAILED:
            self._parked_on_arrival += 1  # the store parked it in the journal
            return
        if not child.put(envelope):
            self._overflowed += 1
            log.warning("mailbox of %s full: event %s queued in the backlog", child.claude_session_id,
                        envelope.event_id)
        self._delivered += 1
        self._supervisor.start(child)

    def replay(self, envelopes: list[Envelope]) -> None:
        """Queue journal events (older than anything in a mailbox) for processing."""
        children: dict[str, SessionChild] = {}
        for envelope in envelopes:
            child = children.setdefault(envelope.event.claude_session_id,
                                        self._child(envelope.event.claude_session_id))
            child.replay(envelope)
            self._replayed += 1
        for child in children.values():
            self._supervisor.start(child)

    def unparked(self, claude_session_id: str, envelopes: list[Envelope]) -> None:
        """A failed session's parked events are pending again: reset it and process them."""
        child = self._child(claude_session_id)
        if child.state is ActorState.FAILED:
            child.transition(ActorState.STOPPED)
        child.intensity.reset()
        child.clear_error()
        self.replay(envelopes)

    def _forget_stopped(self) -> None:
        stopped = [c for c in self._children.values() if c.state is ActorState.STOPPED and not c.has_work()]
        for child in sorted(stopped, key=lambda c: c.last_active)[: max(0, len(stopped) - MAX_STOPPED_CHILDREN)]:
            del self._children[child.claude_session_id]

    # -- what operators and the processing route read ----------------------------------

    def queued(self, claude_session_id: str | None = None) -> int:
        """Events the actors of one session (or all) still have to finish."""
        return sum(child.depth() for child in self._select(claude_session_id))

    def working(self, claude_session_id: str | None = None) -> bool:
        """Whether an actor of one session (or any) is busy with a message."""
        return any(child.state.working for child in self._select(claude_session_id))

    def _select(self, claude_session_id: str | None) -> list[SessionChild]:
        if claude_session_id is None:
            return list(self._children.values())
        child = self._children.get(claude_session_id)
        return [child] if child is not None else []

    def actors(self) -> list[ActorStatistics]:
        return [child.statistics() for child in self._children.values()]

    def history(self, claude_session_id: str) -> ActorHistory | None:
        """The actor's statistics with its recent messages and errors; ``None`` for a session without one."""
        child = self._children.get(claude_session_id)
        return child.history() if child is not None else None

    def statistics(self) -> RouterStatistics:
        children = list(self._children.values())
        mailbox = sum(c.mailbox_depth() for c in children)
        backlog = sum(len(c.backlog) for c in children)
        return RouterStatistics(
            known=len(children),
            alive=sum(1 for c in children if c.state.alive),
            failed=sum(1 for c in children if c.state is ActorState.FAILED),
            mailbox_depth=mailbox,
            backlog=backlog,
            queued=sum(c.depth() for c in children),
            peak_depth=max((c.peak_depth for c in children), default=0),
            delivered=self._delivered,
            replayed=self._replayed,
            rejected_full=self._rejected_full,
            parked_on_arrival=self._parked_on_arrival,
            overflowed=self._overflowed,
        )
