"""Compression with Claude through the official ``anthropic`` SDK.

One Messages API call covers a whole batch of tool uses; the reply is XML
(:mod:`sessionmem.compress.xml_reply`).

Resource handling:
    One ``AsyncAnthropic`` client (it honours ``ANTHROPIC_BASE_URL``) shared by all
    actors, made on a worker thread the first time it is needed -- the SDK takes
    over a second to import, which the worker's start must not wait for
    (:meth:`AnthropicCompressor.warm_up` makes it early, in the background) -- and
    closed by :meth:`AnthropicCompressor.aclose`. A ``CapacityLimiter`` bounds
    concurrent calls across the whole worker; a daily token budget and a cap per
    session (:mod:`.budget`) bound what they cost.

Error handling:
    429, 5xx, timeouts and connection errors (a refused connection, a reply cut off
    mid-way) are retried with exponential backoff and jitter (honouring
    ``Retry-After``) up to ``llm_max_attempts`` calls, each under its own timeout.
    Other API errors, exhausted retries, 2xx replies the SDK cannot read (a proxy's
    page) or that are not a message, and replies that do not parse are not retried:
    each tool use is stored as a raw observation built from its own data and marked
    ``compressed=False`` -- never dropped, never retried forever. Calls
    that keep failing open a circuit breaker (:mod:`.breaker`): while it is open, and
    while the budget is spent, batches go to the offline compressor (their
    observations say ``compressor: offline``). Cancellation always propagates.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from sessionmem.compress.base import CompressorStatistics, SessionContext
from sessionmem.compress.breaker import CircuitBreaker
from sessionmem.compress.budget import TokenBudget
from sessionmem.compress.offline import OfflineCompressor, build_offline_observation, build_offline_summary
from sessionmem.compress.xml_reply import SUMMARY_FIELDS, parse_observations, parse_summary
from sessionmem.events import ObservationEvent, SummarizeEvent
from sessionmem.records import OBSERVATION_TYPES, CompressedObservation, CompressedSummary, SummaryInputs
from sessionmem.settings import Settings

if TYPE_CHECKING:
    import anthropic

log = logging.getLogger(__name__)

_FIELD_LIMIT = 4000  # characters of each tool input/response, and of the prompt, shown to the model
# Characters of a session's prompts in a summary request: the first (what was asked) and the
# latest that fit. Every prompt in full would make the request grow with the session (+4 KB a
# prompt of that size, up to the model's context window).
_PROMPTS_LIMIT = 3 * _FIELD_LIMIT

OBSERVATION_SYSTEM = f"""You compress a coding agent's tool uses into observations for its long-term memory.
For each numbered tool use, write exactly one block, in order:
<observation index="N">
  <type>one of: {", ".join(OBSERVATION_TYPES)}</type>
  <title>short, specific: the file and what changed, or what was learned</title>
  <subtitle>one line of context</subtitle>
  <facts><fact>a concrete, self-contained fact</fact></facts>
  <narrative>two or three sentences: what was done and why it matters</narrative>
  <concepts><concept>how-it-works | why-it-exists | what-changed | problem-solution | gotcha | pattern | trade-off</concept></concepts>
  <files_read><file>path</file></files_read>
  <files_modified><file>path</file></files_modified>
</observation>
Reply with the blocks only."""

SUMMARY_SYSTEM = """You summarize a coding agent's session for its long-term memory. Reply with exactly:
<summary>
  <request>what the user asked for</request>
  <investigated>what was looked at</investigated>
  <learned>what was learned about the code</learned>
  <completed>what was done</completed>
  <next_steps>what remains</next_steps>
  <notes>anything else worth remembering</notes>
</summary>"""


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if len(text) <= _FIELD_LIMIT:
        return text
    half = _FIELD_LIMIT // 2
    return f"{text[:half]}\n…[{len(text) - _FIELD_LIMIT} characters elided]…\n{text[-half:]}"


def observation_request(context: SessionContext, events: Sequence[ObservationEvent]) -> str:
    # The prompt is cut like a tool's data: in full, a long one goes with every batch (a 67,000-character
    # prompt made a 66 KB call of a one-line `echo`, and spent the session's token cap in 13 tool uses).
    prompt = _shown(context.prompt) if context.prompt else "(unknown)"
    parts = [f"Project: {context.project}", f"User prompt: {prompt}", ""]
    for number, event in enumerate(events, 1):
        failed = ' failed="true"' if event.failed else ""
        parts.append(f'<tool_use index="{number}" name="{event.tool_name}"{failed}>')
        parts.append(f"<input>{_shown(event.tool_input)}</input>")
        parts.append(f"<output>{_shown(event.error if event.failed else event.tool_response)}</output>")
        parts.append("</tool_use>")
    return "\n".join(parts)


def summary_request(context: SessionContext, request: SummarizeEvent, inputs: SummaryInputs) -> str:
    lines = [f"Project: {context.project}", "Prompts:", *_prompts_shown(inputs.prompts)]
    lines.append("Observations:")
    lines += [f"- [{o.type}] {o.title}" for o in inputs.observations[-60:]]
    if request.last_assistant_message:
        lines.append(f"Last assistant message: {_shown(request.last_assistant_message)}")
    return "\n".join(lines)


def _prompts_shown(prompts: Sequence[str]) -> list[str]:
    """Numbered lines of ``prompts`` within :data:`_PROMPTS_LIMIT`: the first, then the latest that fit,
    a line saying how many were left out between them."""
    shown = [_shown(prompt) for prompt in prompts]
    if not shown:
        return []
    budget = _PROMPTS_LIMIT - len(shown[0])
    latest: list[int] = []
    for number in range(len(shown), 1, -1):
        if len(shown[number - 1]) > budget:
            break
        budget -= len(shown[number - 1])
        latest.append(number)
    lines = [f"1. {shown[0]}"]
    elided = len(shown) - 1 - len(latest)
    if elided:
        lines.append(f"…[{elided} prompt(s) elided]…")
    lines += [f"{number}. {shown[number - 1]}" for number in reversed(latest)]
    return lines


class _GaveUp(Exception):
    """The call could not be made to succeed; the caller falls back to raw observations.

    ``tokens``: what the failed call cost anyway (a reply that came but was unusable).
    """

    def __init__(self, message: str, tokens: int = 0) -> None:
        super().__init__(message)
        self.tokens = tokens


class _NotNow(Exception):
    """No call is made (breaker open, budget spent); the caller uses the offline compressor."""


def default_client(settings: Settings) -> anthropic.AsyncAnthropic:
    import anthropic  # ~1.6 s: on a worker thread, once

    # SDK retries off: ours count retries and honour Retry-After with a cap.
    return anthropic.AsyncAnthropic(max_retries=0, timeout=settings.llm_timeout_s)


@dataclasses.dataclass
class _Counters:
    """What :meth:`AnthropicCompressor.statistics` reports, counted as it happens (see there)."""

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


class AnthropicCompressor:
    name = "anthropic"

    def __init__(self, settings: Settings, *,
                 client: Callable[[Settings], anthropic.AsyncAnthropic] = default_client) -> None:
        self._settings = settings
        self._make_client = client
        self._client: anthropic.AsyncAnthropic | None = None
        self._client_lock = trio.Lock()
        self._limiter = trio.CapacityLimiter(settings.llm_concurrency)
        self._offline = OfflineCompressor()
        self._breaker = CircuitBreaker(threshold=settings.llm_breaker_failures, open_s=settings.llm_breaker_open_s,
                                       max_open_s=settings.llm_breaker_open_s * 16)
        self._budget = TokenBudget(daily_limit=settings.llm_daily_token_budget,
                                   session_cap=settings.llm_session_token_cap)
        self._said: set[str] = set()  # reasons already logged (once each)
        self._counters = _Counters()

    def statistics(self) -> CompressorStatistics:
        counted = self._counters
        return CompressorStatistics(
            backend=self.name, model=self._settings.model, tool_uses=counted.tool_uses, summaries=counted.summaries,
            calls=counted.calls, in_flight=counted.in_flight, retries=counted.retries, failures=counted.failures,
            unparsed_replies=counted.unparsed_replies, raw_fallbacks=counted.raw_fallbacks,
            offline_fallbacks=counted.offline_fallbacks, input_tokens=counted.input_tokens,
            output_tokens=counted.output_tokens, client_ready=self._client is not None,
            breaker=self._breaker.statistics(), budget=self._budget.statistics())

    def seed_usage(self, tokens_today: int) -> None:
        self._budget.seed(tokens_today)

    async def warm_up(self) -> None:
        await self._api()

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()

    async def _api(self) -> anthropic.AsyncAnthropic:
        async with self._client_lock:
            if self._client is None:
                self._client = await trio.to_thread.run_sync(self._make_client, self._settings)
            return self._client

    async def _call(self, context: SessionContext, system: str, content: str) -> tuple[str, int, int]:
        """One Messages API call with retries; returns (text, input tokens, output tokens).

        Raises :class:`_NotNow` without calling when the breaker is open or the budget
        spent, and :class:`_GaveUp` when the call failed for good.
        """
        refusal = self._budget.refusal(context.claude_session_id, context.tokens_used)
        if refusal:
            self._say_once(refusal, f"{refusal}: using the offline compressor")
            raise _NotNow(refusal)
        if not self._breaker.allow():
            self._say_once("breaker", "the LLM keeps failing: offline compressor for "
                                      f"{self._breaker.statistics().open_for_seconds:.0f} s")
            raise _NotNow("circuit breaker open")
        try:
            text, tokens_in, tokens_out = await self._call_with_retries(system, content)
        except _GaveUp as failure:
            self._breaker.failed()
            self._budget.spend(context.claude_session_id, failure.tokens)
            raise
        except BaseException:
            # Cancelled (the actor or the worker stopping) or a bug: neither a success nor a
            # failure, but a half-open breaker's trial must end, or no call is let through again.
            self._breaker.abandoned()
            raise
        self._breaker.succeeded()
        self._said.discard("breaker")
        self._budget.spend(context.claude_session_id, tokens_in + tokens_out)
        return text, tokens_in, tokens_out

    def _say_once(self, key: str, message: str) -> None:
        if key not in self._said:
            self._said.add(key)
            log.warning("%s", message)

    async def _call_with_retries(self, system: str, content: str) -> tuple[str, int, int]:
        import anthropic  # loaded by _api() before any call

        settings = self._settings
        client = await self._api()
        attempt = 0
        while True:
            attempt += 1
            try:
                async with self._limiter:
                    self._counters.in_flight += 1
                    self._counters.calls += 1
                    try:
                        with trio.fail_after(settings.llm_timeout_s + 5):
                            message = await client.messages.create(
                                model=settings.model,
                                max_tokens=settings.llm_max_tokens,
                                system=system,
                                messages=[{"role": "user", "content": content}],
                            )
                    finally:
                        self._counters.in_flight -= 1
            except (anthropic.RateLimitError, anthropic.InternalServerError, anthropic.APIConnectionError,
                    anthropic.APIStatusError, trio.TooSlowError) as exc:
                retryable = not isinstance(exc, anthropic.APIStatusError) or exc.status_code == 429 or exc.status_code >= 500
                if not retryable or attempt >= settings.llm_max_attempts:
                    raise self._failure(f"LLM call failed after {attempt} attempt(s): {exc}") from exc
                self._counters.retries += 1
                await trio.sleep(self._backoff(exc, attempt))
                continue
            except Exception as exc:
                # The SDK could not read a 2xx reply (not JSON: a proxy's or a captive portal's
                # page). Not retried: what answered will answer the same. A failure like any
                # other, so the breaker counts it -- once, it crashed the session's actor.
                raise self._failure(f"unreadable LLM reply: {type(exc).__name__}: {exc}") from exc
            return self._reply_parts(message, len(system) + len(content))

    def _failure(self, message: str, *, tokens: int = 0) -> _GaveUp:
        self._counters.failures += 1
        log.warning("%s", message[:500])
        return _GaveUp(message, tokens)

    def _reply_parts(self, message: Any, request_chars: int) -> tuple[str, int, int]:
        """(text, input tokens, output tokens) of a reply; :class:`_GaveUp` for one that is not a Message.

        A reply without its usage is counted at an estimate (four characters a token of
        the request), so a provider that hides it still spends the budget.
        """
        usage = getattr(message, "usage", None)
        tokens_in, tokens_out = getattr(usage, "input_tokens", None), getattr(usage, "output_tokens", None)
        if not (isinstance(tokens_in, int) and isinstance(tokens_out, int)):
            tokens_in, tokens_out = request_chars // 4, 0
        self._counters.input_tokens += tokens_in
        self._counters.output_tokens += tokens_out
        content = getattr(message, "content", None)
        if not isinstance(content, list) or usage is None:
            missing = "content" if not isinstance(content, list) else "usage"
            raise self._failure(f"unusable LLM reply: {type(message).__name__} without {missing}",
                                tokens=tokens_in + tokens_out)
        texts = (getattr(block, "text", None) for block in content if getattr(block, "type", "") == "text")
        return "".join(text for text in texts if isinstance(text, str)), tokens_in, tokens_out

    def _backoff(self, exc: BaseException, attempt: int) -> float:
        cap = self._settings.llm_backoff_cap_s
        response = getattr(exc, "response", None)
        if response is not None:
            retry_after = response.headers.get("retry-after")
            try:
                if retry_after is not None:  # a minimum: a little jitter spreads the callers out
                    return min(cap, max(0.0, float(retry_after)) * random.uniform(1.0, 1.2))
            except ValueError:
                pass
        return min(cap, 0.5 * 2 ** (attempt - 1)) * random.uniform(0.8, 1.2)

    async def compress(self, context: SessionContext, events: Sequence[ObservationEvent]) -> list[CompressedObservation]:
        self._counters.tool_uses += len(events)
        try:
            text, tokens_in, tokens_out = await self._call(context, OBSERVATION_SYSTEM,
                                                           observation_request(context, events))
        except _NotNow:
            self._counters.offline_fallbacks += len(events)
            return await self._offline.compress(context, events)
        except _GaveUp:
            return self._raw(context, events)
        parsed = parse_observations(text)
        by_index = {p.index: p for p in parsed if p.index is not None}
        if not by_index and len(parsed) == len(events):
            by_index = {n: p for n, p in enumerate(parsed, 1)}
        if not by_index:
            self._counters.unparsed_replies += 1
            log.warning("unusable LLM reply for %d tool use(s) of session %s", len(events), context.claude_session_id)
        # Tokens are spread over the batch so per-session totals add up.
        shares_in = _spread(tokens_in, len(events))
        shares_out = _spread(tokens_out, len(events))
        results = []
        for number, event in enumerate(events, 1):
            block = by_index.get(number)
            if block is None:
                self._counters.raw_fallbacks += 1
                raw = build_offline_observation(context, event, compressor=self.name, compressed=False)
                results.append(_with_tokens(raw, self._settings.model, shares_in[number - 1], shares_out[number - 1]))
                continue
            results.append(
                CompressedObservation(
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
                )
            )
        return results

    def _raw(self, context: SessionContext, events: Sequence[ObservationEvent]) -> list[CompressedObservation]:
        self._counters.raw_fallbacks += len(events)
        return [build_offline_observation(context, event, compressor=self.name, compressed=False) for event in events]

    async def summarize(self, context: SessionContext, request: SummarizeEvent, inputs: SummaryInputs) -> CompressedSummary:
        self._counters.summaries += 1
        try:
            text, tokens_in, tokens_out = await self._call(context, SUMMARY_SYSTEM,
                                                           summary_request(context, request, inputs))
        except _NotNow:
            self._counters.offline_fallbacks += 1
            return await self._offline.summarize(context, request, inputs)
        except _GaveUp:
            self._counters.raw_fallbacks += 1
            return build_offline_summary(context, request, inputs, compressor=self.name, compressed=False)
        fields = parse_summary(text)
        if fields is None:
            self._counters.unparsed_replies += 1
            self._counters.raw_fallbacks += 1
            fallback = build_offline_summary(context, request, inputs, compressor=self.name, compressed=False)
            return _with_tokens(fallback, self._settings.model, tokens_in, tokens_out)
        return CompressedSummary(
            **{name: fields[name] for name in SUMMARY_FIELDS},
            compressed=True,
            compressor=self.name,
            model=self._settings.model,
            input_tokens=tokens_in,
            output_tokens=tokens_out,
        )


def _spread(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, max(parts, 1))
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _with_tokens(record: Any, model: str, tokens_in: int, tokens_out: int) -> Any:
    return msgspec.structs.replace(record, model=model, input_tokens=tokens_in, output_tokens=tokens_out)
