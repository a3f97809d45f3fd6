"""The session actor: one per Claude session, processing its events strictly in order.

It takes messages from its :class:`~sessionmem.actors.child.SessionChild` -- first what
a crashed predecessor left unfinished, then the replayed journal backlog, then the
mailbox -- and handles them with ``match``:

- ``init``: a new prompt. Pending tool uses are flushed first, so a batch never
  mixes two prompts.
- ``observation``: a tool use, added to the batch. The batch is compressed in one
  call when it reaches ``batch_size``, after ``batch_quiet_s`` without new
  messages, or before a ``summarize``/``complete``/``init``.
- ``summarize``: flush, then summarize the session so far and store the summary.
- ``complete``: flush, then mark the session completed.

Resource handling:
    The actor owns nothing that outlives it: mailbox and unfinished messages belong
    to the child record, results go to the store. It returns normally after
    ``idle_timeout_s`` without work, or when its mailbox is closed and drained.

Error handling:
    Any exception escapes to the supervisor, which restarts the actor or gives up on
    the session. A message is marked finished only after its result is committed, so
    a crash re-delivers it to the next actor (at-least-once), and idempotent writes
    make that exactly-once in the database.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from sessionmem.actors.child import SessionChild
from sessionmem.actors.state import ActorState
from sessionmem.broadcast import Broadcaster, LiveObservation, LivePrompt, LiveSession, LiveSummary
from sessionmem.compress.base import Compressor, SessionContext
from sessionmem.compress.model_redaction import redacted_observation, redacted_summary
from sessionmem.events import CompleteEvent, Envelope, InitEvent, ObservationEvent, SummarizeEvent
from sessionmem.records import SessionInfo
from sessionmem.settings import Settings
from sessionmem.storage.base import Store

log = logging.getLogger(__name__)

FAULT_TOOL_NAME = "SessionmemCrash"


class InjectedCrash(RuntimeError):
    """Raised on purpose by fault injection (tests only)."""


@dataclass
class ActorDeps:
    settings: Settings
    store: Store
    compressor: Compressor
    broadcaster: Broadcaster
    redact: Callable[[str], str] = str  # the ingest redactor's ``text``: a model's text is redacted before it is stored
    # event id -> how many times fault injection crashed on it
    fault_counts: dict[int, int] = field(default_factory=dict)


async def park_failed_session(deps: ActorDeps, child: SessionChild) -> int:
    """The supervisor gave up on ``child``: park its pending journal events; returns how many."""
    parked = await deps.store.park_session(
        child.claude_session_id, f"gave up after {child.intensity.recent()} crashes: {child.last_error}")
    deps.broadcaster.publish(LiveSession(child.claude_session_id, child.project, "failed"))
    return parked


class SessionActor:
    def __init__(self, child: SessionChild, deps: ActorDeps) -> None:
        self._child = child
        self._deps = deps
        self._settings = deps.settings
        self._session: SessionInfo | None = None
        self._cwd = ""
        self._prompt = ""
        self._batch: list[tuple[Envelope, ObservationEvent]] = []

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        child = self._child
        self._session = await self._deps.store.session_info(child.claude_session_id)
        if self._session is not None:
            self._prompt = self._session.last_prompt
            child.project = self._session.project
        task_status.started()
        child.transition(ActorState.RUNNING)

        # What a crashed predecessor had taken but not finished goes first, in order.
        for taken in list(child.inflight):
            await self._handle(taken)

        while True:
            envelope = await self._next()
            if envelope is None:
                await self._flush()
                return
            child.inflight.append(envelope)
            await self._handle(envelope)

    async def _next(self) -> Envelope | None:
        """The next message, flushing the batch when quiet; ``None`` means stop."""
        child = self._child
        if child.backlog:
            return child.backlog.popleft()
        receive = child.receive
        while True:
            timeout = self._settings.batch_quiet_s if self._batch else self._settings.idle_timeout_s
            child.transition(ActorState.BATCHING if self._batch else ActorState.IDLE)
            with trio.move_on_after(timeout):
                try:
                    envelope = await receive.receive()
                except trio.EndOfChannel:  # shutting down: mailbox closed and drained
                    return None
                child.transition(ActorState.RUNNING)
                return envelope
            if self._batch:
                await self._flush()
                continue
            return None  # idle: the supervisor decides whether to stop for good

    async def _handle(self, envelope: Envelope) -> None:
        child = self._child
        event = envelope.event
        match event:
            case InitEvent():
                await self._flush()
                if event.prompt:
                    self._prompt = event.prompt
                    self._deps.broadcaster.publish(LivePrompt(
                        event.claude_session_id, event.project, event.prompt_number, event.prompt))
                self._cwd = event.cwd or self._cwd
                child.finished(envelope)  # stored when accepted
            case ObservationEvent():
                self._maybe_inject_fault(envelope, event)
                self._cwd = event.cwd or self._cwd
                self._batch.append((envelope, event))
                child.batching(len(self._batch))
                if len(self._batch) >= self._settings.batch_size:
                    await self._flush()
            case SummarizeEvent():
                await self._flush()
                await self._summarize(envelope, event)
            case CompleteEvent():
                await self._flush()
                await self._complete(envelope)

    def _maybe_inject_fault(self, envelope: Envelope, event: ObservationEvent) -> None:
        if not self._settings.fault_injection or event.tool_name != FAULT_TOOL_NAME:
            return
        times = event.tool_input.get("times", 1) if isinstance(event.tool_input, dict) else 1
        crashed = self._deps.fault_counts.get(envelope.event_id, 0)
        if crashed < times:
            self._deps.fault_counts[envelope.event_id] = crashed + 1
            raise InjectedCrash(f"injected crash {crashed + 1}/{times} on event {envelope.event_id}")

    async def _require_session(self) -> SessionInfo:
        if self._session is None:
            self._session = await self._deps.store.session_info(self._child.claude_session_id)
            if self._session is None:
                raise LookupError(f"session {self._child.claude_session_id} has no row")
        return self._session

    def _context(self, session: SessionInfo) -> SessionContext:
        return SessionContext(session.claude_session_id, session.project, self._cwd, self._prompt,
                              session.tokens_used)

    async def _flush(self) -> None:
        if not self._batch:
            return
        batch, child = self._batch, self._child
        session = await self._require_session()
        child.transition(ActorState.COMPRESSING)
        events = [event for _, event in batch]
        observations = [redacted_observation(observation, self._deps.redact)
                        for observation in await self._deps.compressor.compress(self._context(session), events)]
        child.transition(ActorState.STORING)
        await self._deps.store.store_observations(
            session, [(envelope, event, observation) for (envelope, event), observation in zip(batch, observations)])
        self._batch = []
        child.batching(0)
        for (envelope, event), observation in zip(batch, observations):
            child.finished(envelope)
            self._deps.broadcaster.publish(LiveObservation(
                session.claude_session_id, session.project, event.tool_name, observation.type, observation.title))
        child.transition(ActorState.RUNNING)

    async def _summarize(self, envelope: Envelope, event: SummarizeEvent) -> None:
        session = await self._require_session()
        self._child.transition(ActorState.SUMMARIZING)
        inputs = await self._deps.store.summary_inputs(session)
        summary = redacted_summary(await self._deps.compressor.summarize(self._context(session), event, inputs),
                                   self._deps.redact)
        await self._deps.store.store_summary(session, envelope, summary)
        self._child.finished(envelope)
        self._deps.broadcaster.publish(LiveSummary(
            session.claude_session_id, session.project, summary.request, summary.completed))
        self._child.transition(ActorState.RUNNING)

    async def _complete(self, envelope: Envelope) -> None:
        session = await self._require_session()
        await self._deps.store.complete_session(session, envelope)
        self._child.finished(envelope)
        self._deps.broadcaster.publish(LiveSession(session.claude_session_id, session.project, "completed"))
