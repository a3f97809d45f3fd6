"""What the supervisor keeps for each session actor: everything that survives a restart.

The mailbox, the messages taken but not yet finished (``inflight``), the journal
backlog being replayed, the actor's state (:mod:`.state`), its restart intensity
(:mod:`.restart`) and its counters all live here, owned by the supervisor, so a
crashed actor's replacement picks up exactly where its predecessor stopped, in the
same order. :meth:`SessionChild.statistics` is the typed snapshot ``/debug`` shows;
:meth:`SessionChild.history` adds the last few messages and errors (bounded:
:data:`HISTORY_MESSAGES`, :data:`HISTORY_ERRORS`) for the ``/debug`` page's actor detail.
"""

from __future__ import annotations

import collections
import time

import msgspec
import trio

from sessionmem.actors.restart import RestartIntensity, RestartPolicy
from sessionmem.actors.state import TRANSITIONS, ActorState, IllegalTransition
from sessionmem.events import Envelope, ObservationEvent, event_kind

HISTORY_MESSAGES = 20  # finished messages kept per session for /debug (a few KB at most)
HISTORY_ERRORS = 10
HISTORY_TEXT_CHARS = 500  # an error's text is cut to this


class MailboxFull(Exception):
    """The session's mailbox has no room; the HTTP edge answers 503 with Retry-After."""


class ActorStatistics(msgspec.Struct, frozen=True):
    claude_session_id: str
    project: str
    state: ActorState
    mailbox_depth: int
    mailbox_capacity: int
    reserved: int  # slots held by events being journaled right now
    backlog: int  # journal events being replayed
    inflight: int  # taken by the actor, not finished
    queued: int  # mailbox + backlog + inflight: what the session still has to do
    peak_depth: int
    batch_size: int  # tool uses waiting for compression
    processed: int
    processed_by_kind: dict[str, int]
    starts: int
    restarts: int
    recent_crashes: int
    last_error: str
    last_error_at: float | None
    idle_seconds: float  # since the last finished message


class ActorMessage(msgspec.Struct, frozen=True):
    """A message the actor finished (its result is durable)."""

    event_id: int
    kind: str  # init | observation | summarize | complete
    tool_name: str  # observations only
    finished_at: float


class ActorError(msgspec.Struct, frozen=True):
    at: float
    error: str  # "ExceptionType: message", cut to HISTORY_TEXT_CHARS


class ActorHistory(msgspec.Struct, frozen=True):
    """One actor's statistics with its recent past, newest first."""

    statistics: ActorStatistics
    recent_messages: list[ActorMessage]
    recent_errors: list[ActorError]


class SessionChild:
    def __init__(self, claude_session_id: str, mailbox_size: int, restart_policy: RestartPolicy) -> None:
        self.claude_session_id = claude_session_id
        self.project = ""
        self.intensity = RestartIntensity(restart_policy)
        self._mailbox_size = mailbox_size
        self._send: trio.MemorySendChannel[Envelope] | None = None
        self._receive: trio.MemoryReceiveChannel[Envelope] | None = None
        self.open_mailbox()
        # Oldest first: what a fresh actor must process before its mailbox.
        self.inflight: collections.deque[Envelope] = collections.deque()
        self.backlog: collections.deque[Envelope] = collections.deque()
        self._state = ActorState.STOPPED
        self._reserved = 0
        self._starts = 0
        self._processed = 0
        self._processed_by_kind: collections.Counter[str] = collections.Counter()
        self._peak_depth = 0
        self._batch_size = 0
        self._last_error = ""
        self._last_error_at: float | None = None
        self._last_active = time.time()
        self._recent_messages: collections.deque[ActorMessage] = collections.deque(maxlen=HISTORY_MESSAGES)
        self._recent_errors: collections.deque[ActorError] = collections.deque(maxlen=HISTORY_ERRORS)

    # -- state ------------------------------------------------------------------------

    @property
    def state(self) -> ActorState:
        return self._state

    def transition(self, new: ActorState) -> None:
        """Move to ``new``; raises :class:`IllegalTransition` for a move :mod:`.state` does not allow."""
        if new is not self._state and new not in TRANSITIONS[self._state]:
            raise IllegalTransition(f"session actor {self.claude_session_id}: {self._state.value} -> {new.value}")
        self._state = new

    # -- mailbox ----------------------------------------------------------------------

    @property
    def receive(self) -> trio.MemoryReceiveChannel[Envelope]:
        if self._receive is None:
            raise RuntimeError(f"session {self.claude_session_id} has no mailbox")
        return self._receive

    @property
    def has_mailbox(self) -> bool:
        return self._send is not None

    def open_mailbox(self) -> None:
        self._send, self._receive = trio.open_memory_channel[Envelope](self._mailbox_size)

    def close_mailbox(self) -> None:
        """No more messages; the actor drains what is there."""
        if self._send is not None:
            self._send.close()

    def drop_mailbox(self) -> None:
        """For a stopped, empty child: the next delivery opens a new mailbox."""
        self.close_mailbox()
        self._send = self._receive = None

    def empty_mailbox(self) -> None:
        """Let go of everything queued in memory (the journal still has it)."""
        self.inflight.clear()
        self.backlog.clear()
        if self._receive is not None:
            while True:
                try:
                    self._receive.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel):
                    break

    def mailbox_depth(self) -> int:
        return self._send.statistics().current_buffer_used if self._send is not None else 0

    def depth(self) -> int:
        return self.mailbox_depth() + len(self.backlog) + len(self.inflight)

    def has_work(self) -> bool:
        return bool(self.backlog or self.inflight or self.mailbox_depth() or self._reserved)

    def reserve(self) -> None:
        """Hold a mailbox slot for an event about to be journaled; raises :class:`MailboxFull`."""
        if self.mailbox_depth() + self._reserved >= self._mailbox_size:
            raise MailboxFull(self.claude_session_id)
        self._reserved += 1

    def release(self) -> None:
        self._reserved -= 1

    def put(self, envelope: Envelope) -> bool:
        """Queue a committed event in the mailbox (the backlog, always older, goes first). Never blocks.

        The slot was reserved before the event was journaled (:meth:`reserve`), so the
        mailbox has room; for a caller that skipped the reservation the event goes to
        the backlog instead and this returns False.
        """
        if self._send is None:
            self.open_mailbox()
        assert self._send is not None
        try:
            self._send.send_nowait(envelope)
            queued = True
        except trio.WouldBlock:
            self.backlog.append(envelope)
            queued = False
        self._peak_depth = max(self._peak_depth, self.depth())
        return queued

    def replay(self, envelope: Envelope) -> None:
        """Queue a journal event that is older than anything in the mailbox."""
        self.backlog.append(envelope)
        self._peak_depth = max(self._peak_depth, self.depth())

    # -- what the actor and the supervisor report -------------------------------------

    def started(self) -> None:
        self._starts += 1

    def crashed(self, exc: BaseException) -> None:
        self._last_error = f"{type(exc).__name__}: {exc}"
        self._last_error_at = time.time()
        self._recent_errors.append(ActorError(self._last_error_at, self._last_error[:HISTORY_TEXT_CHARS]))

    def clear_error(self) -> None:
        self._last_error = ""
        self._last_error_at = None

    @property
    def last_error(self) -> str:
        return self._last_error

    def batching(self, size: int) -> None:
        self._batch_size = size

    def finished(self, envelope: Envelope) -> None:
        """``envelope`` is fully processed (its result is durable)."""
        try:
            self.inflight.remove(envelope)
        except ValueError:
            pass
        self._processed += 1
        kind = event_kind(envelope.event)
        self._processed_by_kind[kind] += 1
        self._last_active = time.time()
        tool_name = envelope.event.tool_name if isinstance(envelope.event, ObservationEvent) else ""
        self._recent_messages.append(ActorMessage(envelope.event_id, kind, tool_name[:100], self._last_active))

    @property
    def peak_depth(self) -> int:
        return self._peak_depth

    @property
    def last_active(self) -> float:
        return self._last_active

    def statistics(self) -> ActorStatistics:
        mailbox = self.mailbox_depth()
        return ActorStatistics(
            claude_session_id=self.claude_session_id,
            project=self.project,
            state=self._state,
            mailbox_depth=mailbox,
            mailbox_capacity=self._mailbox_size,
            reserved=self._reserved,
            backlog=len(self.backlog),
            inflight=len(self.inflight),
            queued=mailbox + len(self.backlog) + len(self.inflight),
            peak_depth=self._peak_depth,
            batch_size=self._batch_size,
            processed=self._processed,
            processed_by_kind=dict(self._processed_by_kind),
            starts=self._starts,
            restarts=self.intensity.restarts,
            recent_crashes=self.intensity.recent(),
            last_error=self._last_error,
            last_error_at=self._last_error_at,
            idle_seconds=round(time.time() - self._last_active, 3),
        )

    def history(self) -> ActorHistory:
        return ActorHistory(self.statistics(), list(reversed(self._recent_messages)),
                            list(reversed(self._recent_errors)))
