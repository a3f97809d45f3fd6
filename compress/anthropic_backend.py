"""Compression with Claude through the official ``anthropic`` SDK.

One Messages API call covers a whole batch of tool uses; the reply is XML
(:mod:`sessionmem.compress.xml_reply`). The requests, the parsing, the fallbacks, the
breaker and the budgets are shared with the other LLM backends (:mod:`.llm`); this module
is how a request reaches the Messages API.

Resource handling:
    One ``AsyncAnthropic`` client (for ``anthropic_api_key`` at ``anthropic_base_url``, through ``llm_proxy``
    trusting ``llm_ca_bundle`` besides the system's CAs: :mod:`.transport`) shared by all
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

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sessionmem.compress.llm import HTTPCompressor, reported_tokens
from sessionmem.compress.transport import http_transport
from sessionmem.settings import AUTO, Backend, Settings

if TYPE_CHECKING:
    import anthropic

DEFAULT_BASE_URL = "https://api.anthropic.com"


def default_client(settings: Settings) -> anthropic.AsyncAnthropic:
    import anthropic  # ~1.6 s: on a worker thread, once

    # SDK retries off: ours count retries and honour Retry-After with a cap. The key and the address are
    # sessionmem's settings, given explicitly: never ANTHROPIC_API_KEY or ANTHROPIC_BASE_URL of whichever
    # session started the worker (the worker does not keep them: sessionmem.protocol.environment). So are
    # the proxy and the extra CAs (llm_proxy, llm_ca_bundle): the SDK's own client would read HTTPS_PROXY
    # from the environment whatever trust_env says; with a transport of ours it reads nothing there.
    from anthropic._constants import DEFAULT_CONNECTION_LIMITS

    http_client = anthropic.DefaultAsyncHttpxClient(
        transport=http_transport(settings, limits=DEFAULT_CONNECTION_LIMITS), trust_env=False,
        timeout=settings.llm_timeout_s)
    return anthropic.AsyncAnthropic(api_key=settings.anthropic_api_key,
                                    base_url=settings.anthropic_base_url or DEFAULT_BASE_URL,
                                    max_retries=0, timeout=settings.llm_timeout_s, http_client=http_client)


class AnthropicCompressor(HTTPCompressor["anthropic.AsyncAnthropic"]):
    name = Backend.ANTHROPIC

    def __init__(self, settings: Settings, *,
                 client: Callable[[Settings], anthropic.AsyncAnthropic] = default_client, reason: str = "",
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``clock``: the circuit breaker's (a test gives a clock it moves by hand)."""
        super().__init__(settings, client=client, reason=reason, clock=clock)

    async def warm_up(self) -> None:
        await super().warm_up()
        if self._settings.compressor == AUTO:
            budget = self._settings.llm_daily_token_budget
            await self.notice.offer(Backend.ANTHROPIC, f"sessionmem: memory is now compressed by {self._settings.model} "
                                                 f"with the API key in anthropic_api_key, billed to it"
                                                 f"{f', up to {budget:,} tokens a day' if budget else ''}; set "
                                                 "compressor to offline in settings.json to stop it")

    async def _close(self, client: anthropic.AsyncAnthropic) -> None:
        await client.close()

    async def _request(self, system: str, content: str) -> tuple[str, int, int]:
        import anthropic  # loaded by the client's making, before any call

        settings = self._settings
        client = await self._client.get()

        def retryable(exc: BaseException) -> bool:
            return not isinstance(exc, anthropic.APIStatusError) or exc.status_code == 429 or exc.status_code >= 500

        message = await self._with_retries(
            lambda: client.messages.create(model=settings.model, max_tokens=settings.llm_max_tokens, system=system,
                                           messages=[{"role": "user", "content": content}]),
            transient=(anthropic.RateLimitError, anthropic.InternalServerError, anthropic.APIConnectionError,
                       anthropic.APIStatusError),
            retryable=retryable, described=str)
        return self._reply_parts(message, len(system) + len(content))

    def _reply_parts(self, message: Any, request_chars: int) -> tuple[str, int, int]:
        """(text, input tokens, output tokens) of a reply; :class:`GaveUp` for one that is not a Message.

        A reply without its usage, or with counts no API gives (:func:`~.llm.reported_tokens`, or no
        input tokens), is counted at an estimate (four characters a token of the request), so a
        provider that hides or forges it still spends the budget.
        """
        usage = getattr(message, "usage", None)
        tokens_in = reported_tokens(getattr(usage, "input_tokens", None))
        tokens_out = reported_tokens(getattr(usage, "output_tokens", None))
        if tokens_in is None or tokens_out is None or tokens_in == 0:  # no request is free: 0 is no count either
            tokens_in, tokens_out = request_chars // 4, 0
        self._count_tokens(tokens_in, tokens_out)
        content = getattr(message, "content", None)
        if not isinstance(content, list) or usage is None:
            missing = "content" if not isinstance(content, list) else "usage"
            raise self._failure(f"unusable LLM reply: {type(message).__name__} without {missing}",
                                tokens=tokens_in + tokens_out)
        texts = (getattr(block, "text", None) for block in content if getattr(block, "type", "") == "text")
        return "".join(text for text in texts if isinstance(text, str)), tokens_in, tokens_out
