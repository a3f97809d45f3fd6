"""What the LLM backends share: batching into one request, the reply parsed, fallbacks, breaker, budget.

A backend (``anthropic``, ``claude-code``) only says how one request reaches the model
and what came back: :meth:`LLMCompressor._request` returns the reply's text and the
tokens the model reported, or raises :class:`GaveUp`. Everything else is here, the same
for every backend: one request per batch of tool uses (:mod:`.prompts`), the XML reply
parsed (:mod:`.xml_reply`) and guarded (:mod:`.promotion`: a model steered by the tool output
does not promote an order into a title or "Next steps"), a raw observation for each tool use the reply does not cover,
the circuit breaker (:mod:`.breaker`) and the token budgets (:mod:`.budget`), and the
offline compressor while either says no.

Error handling:
    A request that failed for good (:class:`GaveUp`) stores each tool use as a raw
    observation built from its own data, marked ``compressed=False`` -- never dropped,
    never retried forever -- and counts as a failure for the breaker. While the breaker
    is open or the budget spent (:class:`NotNow`), batches go to the offline compressor
    (their observations say ``compressor: offline``). Cancellation always propagates.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, Generic, TypeVar

import msgspec
import trio

from sessionmem.compress.announce import SwitchNotice
from sessionmem.compress.base import CompressorStatistics, SessionContext
from sessionmem.compress.breaker import CircuitBreaker
from sessionmem.compress.budget import TokenBudget
from sessionmem.compress.offline import OfflineCompressor, build_offline_observation, build_offline_summary
from sessionmem.compress.promotion import guarded_observation, guarded_summary
from sessionmem.compress.prompts import OBSERVATION_SYSTEM, SUMMARY_SYSTEM, observation_request, summary_request
from sessionmem.compress.provider import provider_of
from sessionmem.compress.xml_reply import parse_observations, parse_summary
from sessionmem.events import ObservationEvent, SummarizeEvent
from sessionmem.records import CompressedObservation, CompressedSummary, Provenance, SummaryInputs
from sessionmem.settings import Backend, Settings

log = logging.getLogger(__name__)

ClientT = TypeVar("ClientT")
ReplyT = TypeVar("ReplyT")


class LazyClient(Generic[ClientT]):
    """A backend's client, made once, on a worker thread, the first time it is needed.

    Making one imports an SDK or loads the system's certificates (up to seconds): never on
    the Trio thread, and never before the worker is up (``warm_up`` makes it early, in the
    background). Callers that ask while it is being made wait for that one.
    """

    def __init__(self, make: Callable[[Settings], ClientT], settings: Settings) -> None:
        self._make = make
        self._settings = settings
        self._lock = trio.Lock()
        self.current: ClientT | None = None

    async def get(self) -> ClientT:
        async with self._lock:
            if self.current is None:
                self.current = await trio.to_thread.run_sync(self._make, self._settings)
            return self.current


MAX_REPORTED_TOKENS = 10_000_000  # of one call: past any model's window, so a larger count is no count


def reported_tokens(value: object) -> int | None:
    """A token count as a provider reported it, if it is one: a whole number from 0 to
    :data:`MAX_REPORTED_TOKENS`. Whatever answers at the model's address says it: a negative count
    would give the budget back, a huge one overflow the session's row."""
    return value if type(value) is int and 0 <= value <= MAX_REPORTED_TOKENS else None


class GaveUp(Exception):
    """The request could not be made to succeed; the caller falls back to raw observations.

    ``tokens``: what the failed request cost anyway (a reply that came but was unusable).
    ``trip``: open the breaker now rather than count one failure (a quota, a rate limit or a
    login that a retry within minutes cannot fix).
    """

    def __init__(self, message: str, tokens: int = 0, *, trip: bool = False) -> None:
        super().__init__(message)
        self.tokens = tokens
        self.trip = trip


class NotNow(Exception):
    """No request is made (breaker open, budget spent, no login); the caller uses the offline compressor."""


@dataclasses.dataclass
class Counters:
    """What :meth:`LLMCompressor.statistics` reports, counted as it happens (see there)."""

    tool_uses: int = 0
    summaries: int = 0
    calls: int = 0
    in_flight: int = 0
    retries: int = 0
    failures: int = 0
    unparsed_replies: int = 0
    raw_fallbacks: int = 0
    offline_fallbacks: int = 0
    input_tokens: int = 0
    output_tokens: int = 0


class LLMCompressor:
    """The shared part of an LLM backend; a subclass sets ``name`` and implements :meth:`_request`."""

    name: Backend  # set by each backend

    def __init__(self, settings: Settings, *, reason: str = "",
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``clock``: the circuit breaker's (a test gives a clock it moves by hand)."""
        self._settings = settings
        self._reason = reason
        self._offline = OfflineCompressor()
        self._breaker = CircuitBreaker(threshold=settings.llm_breaker_failures, open_s=settings.llm_breaker_open_s,
                                       max_open_s=settings.llm_breaker_open_s * 16, clock=clock)
        self._budget = TokenBudget(daily_limit=settings.llm_daily_token_budget,
                                   session_cap=settings.llm_session_token_cap)
        self._said: set[str] = set()  # reasons already logged (once each)
        self.notice = SwitchNotice(settings.data_dir)  # `auto` moving the user onto a paid model, said once
        self._last_failure = ""  # why the latest request failed for good ("" once one succeeds)
        self._counters = Counters()

    # -- what a backend provides -------------------------------------------------------------

    async def _request(self, system: str, content: str) -> tuple[str, int, int]:
        """One request with the backend's retries: (reply text, input tokens, output tokens), or :class:`GaveUp`."""
        raise NotImplementedError

    async def _refusal(self) -> str:
        """Why the backend cannot make a request now ("" when it can); the offline compressor meanwhile."""
        return ""

    def _client_ready(self) -> bool:
        return True

    def reason(self) -> str:
        """Why this backend runs, and what it does meanwhile if it cannot call its model."""
        return self._reason

    # -- the Compressor protocol -------------------------------------------------------------

    def statistics(self) -> CompressorStatistics:
        counted = self._counters
        return CompressorStatistics(
            backend=self.name, model=self._settings.model, tool_uses=counted.tool_uses, summaries=counted.summaries,
            calls=counted.calls, in_flight=counted.in_flight, retries=counted.retries, failures=counted.failures,
            unparsed_replies=counted.unparsed_replies, raw_fallbacks=counted.raw_fallbacks,
            offline_fallbacks=counted.offline_fallbacks, input_tokens=counted.input_tokens,
            output_tokens=counted.output_tokens, client_ready=self._client_ready(),
            breaker=self._breaker.statistics(), budget=self._budget.statistics(), reason=self.reason(),
            last_failure=self._last_failure, provider=provider_of(self._settings, self.name))

    def seed_usage(self, tokens_today: int) -> None:
        self._budget.seed(tokens_today)

    async def warm_up(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    async def _call(self, context: SessionContext, system: str, content: str) -> tuple[str, int, int]:
        """One request, within the budget and the breaker; returns (text, input tokens, output tokens).

        Raises :class:`NotNow` without calling when the backend cannot, the breaker is open
        or the budget spent, and :class:`GaveUp` when the request failed for good.
        """
        refusal = self._budget.refusal(context.claude_session_id, context.tokens_used)
        if refusal:
            self._say_once(refusal, f"{refusal}: using the offline compressor")
            raise NotNow(refusal)
        unable = await self._refusal()
        if unable:
            self._say_once(unable, f"{unable}: using the offline compressor")
            raise NotNow(unable)
        if not self._breaker.allow():
            self._say_once("breaker", "the LLM keeps failing: offline compressor for "
                                      f"{self._breaker.statistics().open_for_seconds:.0f} s")
            raise NotNow("circuit breaker open")
        try:
            text, tokens_in, tokens_out = await self._request(system, content)
        except GaveUp as failure:
            self._last_failure = str(failure)[:500]
            if failure.trip:
                self._breaker.trip()
            else:
                self._breaker.failed()
            self._budget.spend(context.claude_session_id, failure.tokens)
            raise
        except BaseException:
            # Cancelled (the actor or the worker stopping) or a bug: neither a success nor a
            # failure, but a half-open breaker's trial must end, or no call is let through again.
            self._breaker.abandoned()
            raise
        self._breaker.succeeded()
        self._last_failure = ""
        self._said.discard("breaker")
        self._budget.spend(context.claude_session_id, tokens_in + tokens_out)
        # As UTF-8 can hold it: a lone surrogate (a JSON reply's "\ud800") in a stored text fails the write,
        # and the session's actor with it.
        return text.encode("utf-8", "replace").decode("utf-8"), tokens_in, tokens_out

    def _say_once(self, key: str, message: str) -> None:
        if key not in self._said:
            self._said.add(key)
            log.warning("%s", message)

    def _failure(self, message: str, *, tokens: int = 0, trip: bool = False) -> GaveUp:
        self._counters.failures += 1
        log.warning("%s", message[:500])
        return GaveUp(message, tokens, trip=trip)

    def _count_tokens(self, tokens_in: int, tokens_out: int) -> None:
        self._counters.input_tokens += tokens_in
        self._counters.output_tokens += tokens_out

    async def compress(self, context: SessionContext, events: Sequence[ObservationEvent]) -> list[CompressedObservation]:
        self._counters.tool_uses += len(events)
        try:
            text, tokens_in, tokens_out = await self._call(context, OBSERVATION_SYSTEM,
                                                           observation_request(context, events))
        except NotNow:
            self._counters.offline_fallbacks += len(events)
            return await self._offline.compress(context, events)
        except GaveUp:
            return self._raw(context, events)
        parsed = parse_observations(text)
        by_index = {p.index: p for p in parsed if p.index is not None}
        if not by_index and len(parsed) == len(events):
            by_index = {n: p for n, p in enumerate(parsed, 1)}
        if not by_index:
            self._counters.unparsed_replies += 1
            log.warning("unusable LLM reply for %d tool use(s) of session %s", len(events), context.claude_session_id)
        # Tokens are spread over the batch so per-session totals add up.
        shares_in = spread(tokens_in, len(events))
        shares_out = spread(tokens_out, len(events))
        results = []
        for number, event in enumerate(events, 1):
            block = by_index.get(number)
            if block is None:
                self._counters.raw_fallbacks += 1
                raw = build_offline_observation(context, event, compressor=self.name, compressed=False)
                results.append(with_tokens(raw, self._settings.model, shares_in[number - 1], shares_out[number - 1]))
                continue
            written = CompressedObservation(
                type=block.type,
                title=block.title[:200],
                subtitle=block.subtitle,
                facts=block.facts,
                narrative=block.narrative,
                concepts=block.concepts,
                files_read=block.files_read,
                files_modified=block.files_modified,
                compressed=True,
                compressor=self.name,
                model=self._settings.model,
                input_tokens=shares_in[number - 1],
                output_tokens=shares_out[number - 1],
                provenance=Provenance.MODEL,
            )
            # A model steered by the tool output may echo an order into the title: the rules' title then.
            results.append(guarded_observation(event, written, fallback_title=partial(_rules_title, context, event)))
        return results

    def _raw(self, context: SessionContext, events: Sequence[ObservationEvent]) -> list[CompressedObservation]:
        self._counters.raw_fallbacks += len(events)
        return [build_offline_observation(context, event, compressor=self.name, compressed=False) for event in events]

    async def summarize(self, context: SessionContext, request: SummarizeEvent, inputs: SummaryInputs) -> CompressedSummary:
        self._counters.summaries += 1
        if not inputs.observations:
            # A session of talk alone: its request and the answer are stored as they are, and a
            # model would only say them again -- not worth a request of the user's quota.
            return await self._offline.summarize(context, request, inputs)
        try:
            text, tokens_in, tokens_out = await self._call(context, SUMMARY_SYSTEM,
                                                           summary_request(context, request, inputs))
        except NotNow:
            self._counters.offline_fallbacks += 1
            return await self._offline.summarize(context, request, inputs)
        except GaveUp:
            self._counters.raw_fallbacks += 1
            return build_offline_summary(context, request, inputs, compressor=self.name, compressed=False)
        fields = parse_summary(text)
        if fields is None:
            self._counters.unparsed_replies += 1
            self._counters.raw_fallbacks += 1
            fallback = build_offline_summary(context, request, inputs, compressor=self.name, compressed=False)
            return with_tokens(fallback, self._settings.model, tokens_in, tokens_out)
        return guarded_summary(request, inputs.observations, CompressedSummary(
            request=fields["request"], investigated=fields["investigated"], learned=fields["learned"],
            completed=fields["completed"], next_steps=fields["next_steps"], notes=fields["notes"],
            compressed=True,
            compressor=self.name,
            model=self._settings.model,
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            provenance=Provenance.MODEL,
        ))


def _rules_title(context: SessionContext, event: ObservationEvent) -> str:
    """The offline compressor's title of ``event`` (guarded): what replaces a model's title withheld."""
    return build_offline_observation(context, event).title


def spread(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, max(parts, 1))
    return [base + (1 if i < extra else 0) for i in range(parts)]


def with_tokens(record: Any, model: str, tokens_in: int, tokens_out: int) -> Any:
    return msgspec.structs.replace(record, model=model, input_tokens=tokens_in, output_tokens=tokens_out)


def backoff_s(settings: Settings, attempt: int, retry_after: str | None = None) -> float:
    """How long to wait before attempt ``attempt + 1``: exponential with jitter, or the server's
    ``Retry-After`` (a minimum: a little jitter spreads the callers out), capped by ``llm_backoff_cap_s``."""
    cap = settings.llm_backoff_cap_s
    if retry_after is not None:
        try:
            return min(cap, max(0.0, float(retry_after)) * random.uniform(1.0, 1.2))
        except ValueError:
            pass
    return min(cap, 0.5 * 2 ** (attempt - 1)) * random.uniform(0.8, 1.2)


class HTTPCompressor(LLMCompressor, Generic[ClientT]):
    """An LLM backend that reaches its model over HTTP through one client shared by all actors.

    Resource handling:
        The client is made lazily on a worker thread (:class:`LazyClient`), early by
        :meth:`warm_up`, and closed by :meth:`aclose` (a subclass says how: :meth:`_close`).
        A ``CapacityLimiter`` of ``llm_concurrency`` bounds calls across the whole worker.
    """

    def __init__(self, settings: Settings, *, client: Callable[[Settings], ClientT], reason: str = "",
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(settings, reason=reason, clock=clock)
        self._client = LazyClient(client, settings)
        self._limiter = trio.CapacityLimiter(settings.llm_concurrency)

    def _client_ready(self) -> bool:
        return self._client.current is not None

    async def warm_up(self) -> None:
        await self._client.get()

    async def aclose(self) -> None:
        if self._client.current is not None:
            await self._close(self._client.current)

    async def _close(self, client: ClientT) -> None:
        raise NotImplementedError

    async def _with_retries(self, send: Callable[[], Awaitable[ReplyT]], *,
                            transient: tuple[type[BaseException], ...], retryable: Callable[[BaseException], bool],
                            described: Callable[[BaseException], str]) -> ReplyT:
        """``send()`` within the concurrency limit and the call timeout, retried with backoff.

        Errors of ``transient`` types (and a call past its timeout) are tried again while
        ``retryable`` says so and attempts remain (``llm_max_attempts``), honouring
        ``Retry-After``; then, or for any other error (the client could not read a 2xx
        reply: a proxy's or a captive portal's page), :class:`GaveUp` -- not retried, since
        what answered will answer the same, and a failure the breaker counts rather than a
        crash of the session's actor.
        """
        settings = self._settings
        transient_or_late: tuple[type[BaseException], ...] = (*transient, trio.TooSlowError)
        attempt = 0
        while True:
            attempt += 1
            try:
                async with self._limiter:
                    self._counters.in_flight += 1
                    self._counters.calls += 1
                    try:
                        with trio.fail_after(settings.llm_timeout_s + 5):
                            return await send()
                    finally:
                        self._counters.in_flight -= 1
            except transient_or_late as exc:
                if not retryable(exc) or attempt >= settings.llm_max_attempts:
                    raise self._failure(f"LLM call failed after {attempt} attempt(s): {described(exc)}") from exc
                self._counters.retries += 1
                response = getattr(exc, "response", None)
                await trio.sleep(backoff_s(settings, attempt,
                                           response.headers.get("retry-after") if response is not None else None))
            except Exception as exc:
                raise self._failure(f"unreadable LLM reply: {type(exc).__name__}: {described(exc)}") from exc
