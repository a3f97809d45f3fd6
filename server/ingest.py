"""From validated request bodies to journaled events: privacy, secrets, size caps, project names.

Everything that reaches the journal passes through here first, so nothing private,
no secret and nothing unbounded is ever written to disk, logged, compressed or indexed. The
HTTP routes and the spool import (events hooks saved while the worker was down) both
go through :class:`Ingestor`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import msgspec

from sessionmem.events import CompleteEvent, InitEvent, ObservationEvent, SummarizeEvent
from sessionmem.protocol import routes
from sessionmem.protocol.fields import clean_text, clean_value
from sessionmem.protocol.git_remote import checked_key
from sessionmem.protocol.limits import MAX_REASON
from sessionmem.protocol.project import resolve_project
from sessionmem.protocol.requests import is_internal_prompt
from sessionmem.redaction import Redactor
from sessionmem.search.told import ToldLedger
from sessionmem.server.payloads import (
    BadRequest,
    CompleteRequest,
    EventAccepted,
    IngestReply,
    InitRequest,
    ObservationRequest,
    PromptAccepted,
    SummarizeRequest,
    ToolSkipped,
    decode,
)
from sessionmem.storage.base import KeyReused

if TYPE_CHECKING:
    from sessionmem.actors.router import SessionRouter
    from sessionmem.search.recall import Recall
    from sessionmem.settings import Settings
    from sessionmem.storage.base import Store

FUTURE_SLACK_S = 300  # clocks differ a little; a time further ahead is not believed
_encode = msgspec.json.Encoder().encode  # the same compact JSON, and size, as clients measure


class EdgeCleaner:
    """What every field goes through at the edge: privacy, then secrets, then the size cap.

    The contract's rules (:mod:`sessionmem.protocol.fields`, the same as the hooks'),
    with msgspec's encoder on the hot path and the worker's :class:`Redactor`.
    """

    def __init__(self, cap: int, redactor: Redactor) -> None:
        self.cap = cap
        self.redactor = redactor

    def text(self, text: str, cap: int | None = None) -> str:
        return clean_text(text, self.cap if cap is None else cap, self.redactor.text)

    def value(self, value: Any) -> Any:
        return clean_value(value, self.cap, _encode, redact=self.redactor.value, redact_text=self.redactor.text)


@contextmanager
def _key_reused_is_a_bad_request() -> Iterator[None]:
    """A key that names another event is the client's mistake (a 400), not a duplicate to answer."""
    try:
        yield
    except KeyReused as exc:
        raise BadRequest(str(exc), f"$.{routes.IDEMPOTENCY_KEY}") from None


def occurred_at(request: InitRequest | ObservationRequest | SummarizeRequest | CompleteRequest) -> float:
    """When the client says the event happened; 0 (on arrival) for none, or for a time still to come."""
    return request.occurredAt if request.occurredAt <= time.time() + FUTURE_SLACK_S else 0.0


def init_event(request: InitRequest, clean: EdgeCleaner) -> InitEvent:
    if is_internal_prompt(request.prompt):
        prompt, skip_reason = "", "internal <task-notification>, not a user prompt"
    else:  # private spans out, then secrets, then the cap; only private spans can leave nothing
        prompt = clean.text(request.prompt)
        skip_reason = "prompt is entirely private" if request.prompt.strip() and not prompt else ""
    return InitEvent(
        claude_session_id=request.claudeSessionId,
        project=resolve_project(request.project, request.cwd),
        cwd=request.cwd,
        prompt=prompt,
        skip_reason=skip_reason,
        key=request.idempotencyKey,
        occurred_at=occurred_at(request),
        project_key=checked_key(request.projectKey) if request.projectKey else "",
        share_file=request.shareFile,
        agent=request.agent,
    )


def observation_event(request: ObservationRequest, clean: EdgeCleaner) -> ObservationEvent:
    failed = request.failed or request.hook_event_name == "PostToolUseFailure" or bool(request.error)
    return ObservationEvent(
        claude_session_id=request.claudeSessionId,
        project=resolve_project(request.project, request.cwd),
        tool_name=request.tool_name,
        tool_use_id=request.tool_use_id,
        tool_input=clean.value(request.tool_input),
        tool_response=clean.value(request.tool_response),
        cwd=request.cwd,
        agent_id=request.agent_id,
        agent_type=request.agent_type,
        failed=failed,
        error=clean.text(request.error),
        key=request.idempotencyKey,
        occurred_at=occurred_at(request),
        agent=request.agent,
    )


def summarize_event(request: SummarizeRequest, clean: EdgeCleaner) -> SummarizeEvent:
    return SummarizeEvent(
        claude_session_id=request.claudeSessionId,
        project=resolve_project(request.project, request.cwd),
        last_user_message=clean.text(request.last_user_message),
        last_assistant_message=clean.text(request.last_assistant_message),
        key=request.idempotencyKey,
        occurred_at=occurred_at(request),
        agent=request.agent,
    )


def complete_event(request: CompleteRequest, clean: EdgeCleaner) -> CompleteEvent:
    project = resolve_project(request.project, request.cwd) if (request.project or request.cwd) else ""
    return CompleteEvent(claude_session_id=request.claudeSessionId, project=project,
                         reason=clean.text(request.reason, MAX_REASON)[:MAX_REASON], key=request.idempotencyKey,
                         occurred_at=occurred_at(request), agent=request.agent)


class Ingestor:
    """Accepts one event: journal it (group commit), then its actor gets it in order.

    Each method returns ``(HTTP status, reply record)``.

    Error handling:
        :class:`~sessionmem.actors.child.MailboxFull` propagates (a 503 at the edge);
        :class:`~sessionmem.server.payloads.BadRequest` from :meth:`by_path` means the
        body does not decode, or the path is not an ingest route.
    """

    PATHS: dict[str, type[InitRequest | ObservationRequest | SummarizeRequest | CompleteRequest]] = {
        routes.INIT: InitRequest,
        routes.OBSERVATIONS: ObservationRequest,
        routes.SUMMARIZE: SummarizeRequest,
        routes.COMPLETE: CompleteRequest,
    }

    def __init__(self, settings: Settings, store: Store, router: SessionRouter, redactor: Redactor, *,
                 recall: Recall | None = None, told: ToldLedger | None = None) -> None:
        self._settings = settings
        self._store = store
        self._router = router
        self._recall = recall
        self._told = told if told is not None else ToldLedger()
        self._clean = EdgeCleaner(settings.tool_response_cap, redactor)

    @property
    def redactor(self) -> Redactor:
        return self._clean.redactor

    def clean_text(self, text: str) -> str:
        """``text`` as any text is stored: private spans out, secrets out, cut to the cap (imports use it)."""
        return self._clean.text(text)

    async def prompt(self, payload: InitRequest, *, recall: bool = True) -> tuple[int, IngestReply]:
        event = init_event(payload, self._clean)
        self._told.prompted(event.claude_session_id)  # a new model request: see search/told.py
        with self._router.reservation(event.claude_session_id), _key_reused_is_a_bad_request():
            accepted = await self._store.accept_init(event, self._router.deliver)
        recalled = ""
        if recall and self._recall is not None and self._settings.prompt_recall and not accepted.skipped \
                and not accepted.duplicate:
            recalled = await self._recall.for_prompt(event.project, event.claude_session_id, event.prompt,
                                                     cwd=event.cwd, agent=event.agent)
        return 200, PromptAccepted(accepted.session_db_id, accepted.prompt_number, accepted.skipped,
                                   accepted.reason or None, accepted.duplicate, recalled)

    async def observation(self, payload: ObservationRequest, *, recall: bool = True) -> tuple[int, IngestReply]:
        if payload.tool_name in self._settings.skip_tools:
            return 200, ToolSkipped(f"{payload.tool_name} is on the skip list")
        if payload.tool_name.startswith(routes.OWN_TOOL_PREFIXES):
            return 200, ToolSkipped(f"{payload.tool_name} reads sessionmem's own memory")
        event = observation_event(payload, self._clean)
        status, reply = await self._accept(event)
        if recall and self._recall is not None and self._settings.file_recall and reply.status == "accepted" \
                and not event.failed:
            recalled = await self._recall.for_file(event.project, event.claude_session_id, event.tool_name,
                                                   event.tool_input, agent=event.agent)
            if recalled:
                reply = msgspec.structs.replace(reply, additional_context=recalled)
        return status, reply

    async def summarize(self, payload: SummarizeRequest, *, live: bool = True) -> tuple[int, IngestReply]:
        """A checkpoint; a ``live`` PreCompact's (not a spool import's, which is late) also tells the told-once
        ledger the session compacts now, whether or not the checkpoint is stored (a 503 is retried)."""
        if payload.compacting and live:
            self._told.compacting(payload.claudeSessionId)
        return await self._accept(summarize_event(payload, self._clean))

    async def complete(self, payload: CompleteRequest) -> tuple[int, IngestReply]:
        return await self._accept(complete_event(payload, self._clean))

    async def by_path(self, path: str, body: bytes, *, recall: bool = True) -> tuple[int, IngestReply]:
        """The same as POSTing ``body`` to ``path`` (the fast path and the spool import use it).

        ``recall``: whether the request comes from a hook now, not from the spool (late): then its reply may
        carry recalled memory (nobody reads a spool import's), and a PreCompact's says the session compacts now.
        """
        kind = self.PATHS.get(path)
        if kind is None:
            raise BadRequest(f"not an ingest route: {path}")
        payload = decode(body, kind)
        if isinstance(payload, InitRequest):
            return await self.prompt(payload, recall=recall)
        if isinstance(payload, ObservationRequest):
            return await self.observation(payload, recall=recall)
        if isinstance(payload, SummarizeRequest):
            return await self.summarize(payload, live=recall)
        return await self.complete(payload)

    async def _accept(self, event: ObservationEvent | SummarizeEvent | CompleteEvent) -> tuple[int, EventAccepted]:
        with self._router.reservation(event.claude_session_id), _key_reused_is_a_bad_request():
            accepted = await self._store.accept_event(event, self._router.deliver)
        status = "duplicate" if accepted.duplicate else "parked" if accepted.parked else "accepted"
        return 202, EventAccepted(status, accepted.envelope.event_id, accepted.session_db_id, accepted.prompt_number)
