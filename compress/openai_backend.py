"""Compression with a local model through an OpenAI-compatible chat completions endpoint.

One implementation serves Ollama, LM Studio, vLLM and llama.cpp's server: each answers
``POST <openai_base_url>/chat/completions``. The batching, the prompts, the XML reply
parsing, the circuit breaker, the token budgets, the fallbacks per batch, the retries and
the shared client are those of every HTTP backend (:class:`.llm.HTTPCompressor`); only the
call and its client are this module's.

Why plain HTTP through ``httpx2`` rather than the official ``openai`` SDK (3.57.0),
measured on this project's 2-core machine:
    - install: ``httpx2`` is already installed (the ``anthropic`` SDK's HTTP client);
      ``openai`` would add a 2.4 MB wheel, 30 MB installed;
    - import: ``httpx2`` ~0.1 s, ``openai`` ~0.8 s (``anthropic``: ~1.4 s);
    - behaviour: the SDK reads ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` from the
      environment on its own (a key meant for OpenAI would go to whatever server the
      base URL names) and insists on a key that local servers do not need; of its reply
      we read one string and the usage, and its retries would be turned off for ours.
      The SDK's transport is ``httpx2`` too, so the wire behaviour is the same.

Resource handling:
    One ``httpx2.AsyncClient`` shared by all actors (through ``llm_proxy``, trusting
    ``llm_ca_bundle`` besides the system's CAs: :mod:`.transport`), made on a worker thread the first
    time it is needed (its TLS context loads the certificates) -- or early, in
    the background, by :meth:`OpenAICompatibleCompressor.warm_up` -- and closed by
    :meth:`OpenAICompatibleCompressor.aclose`. Neither the ``anthropic`` SDK nor this
    module is imported unless this backend is chosen (:mod:`.choice`).

Error handling:
    As the anthropic compressor: 429, 5xx, timeouts and connection errors are retried
    with backoff (honouring ``Retry-After``) up to ``llm_max_attempts`` calls; other
    statuses (a 404 for a model the server does not have), 2xx replies that are not a
    chat completion, and replies that do not parse fall back to raw observations per
    batch; calls that keep failing open the circuit breaker (offline compressor
    meanwhile). The API key is sent only in the ``Authorization`` header and is
    scrubbed from every message this module logs (a server's error body may quote it).

Token use:
    Read from the reply's ``usage`` (``prompt_tokens``, ``completion_tokens``). Local
    servers may leave it out: the call's use is then unknown and counted as 0 -- never an
    estimate stored as if reported -- and the log says so once. Such calls are not
    bounded by the token budgets (the work is the user's own machine's; ``llm_concurrency``
    bounds it).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sessionmem.compress.llm import GaveUp, HTTPCompressor, reported_tokens
from sessionmem.compress.transport import http_transport
from sessionmem.settings import Backend, Settings

if TYPE_CHECKING:
    import httpx2

_ERROR_BODY_CHARS = 300  # of an error reply, in the log: the server's reason ("model not found")


def default_client(settings: Settings) -> httpx2.AsyncClient:
    import httpx2  # ~0.1 s; on a worker thread, once

    headers = {"Authorization": f"Bearer {settings.openai_api_key}"} if settings.openai_api_key else {}
    # The base URL with a trailing slash, so that "chat/completions" is resolved below it.
    # The proxy and the extra CAs from sessionmem's settings (.transport); nothing from the environment
    # (trust_env off: no HTTPS_PROXY, SSL_CERT_FILE or ~/.netrc of whichever session started the worker).
    return httpx2.AsyncClient(base_url=settings.openai_base_url.rstrip("/") + "/", headers=headers,
                              timeout=settings.llm_timeout_s, transport=http_transport(settings), trust_env=False)


class OpenAICompatibleCompressor(HTTPCompressor["httpx2.AsyncClient"]):
    """The LLM backend whose calls go to ``openai_base_url``'s chat completions, for ``openai_model``;
    ``http_client`` builds the HTTP client from the settings."""

    name = Backend.OPENAI_COMPATIBLE

    def __init__(self, settings: Settings, *,
                 http_client: Callable[[Settings], httpx2.AsyncClient] = default_client, reason: str = "") -> None:
        # What is shared names the model `settings.model` (in requests, records and /debug).
        super().__init__(dataclasses.replace(settings, model=settings.model_of(self.name)), client=http_client,
                         reason=reason)
        self._secret = settings.openai_api_key

    async def _close(self, client: httpx2.AsyncClient) -> None:
        await client.aclose()

    def _failure(self, message: str, *, tokens: int = 0, trip: bool = False) -> GaveUp:
        if self._secret:
            message = message.replace(self._secret, "[api key]")
        return super()._failure(message, tokens=tokens, trip=trip)

    async def _request(self, system: str, content: str) -> tuple[str, int, int]:
        import httpx2  # loaded by the client's making, before any call

        settings = self._settings
        client = await self._client.get()
        request = {
            "model": settings.model,
            "max_tokens": settings.llm_max_tokens,
            "stream": False,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": content}],
        }

        async def send() -> httpx2.Response:
            response = await client.post("chat/completions", json=request)
            response.raise_for_status()
            return response

        def retryable(exc: BaseException) -> bool:
            status = exc.response.status_code if isinstance(exc, httpx2.HTTPStatusError) else None
            return status is None or status == 429 or status >= 500

        response = await self._with_retries(send, transient=(httpx2.HTTPStatusError, httpx2.TransportError),
                                            retryable=retryable, described=_described)
        return self._completion_parts(response)

    def _completion_parts(self, response: httpx2.Response) -> tuple[str, int, int]:
        """(text, input tokens, output tokens) of a chat completion; :class:`GaveUp` for a reply
        that is not one (a proxy's page, broken JSON, no message)."""
        try:
            payload = json.loads(response.content)
        except ValueError as exc:
            raise self._failure(f"unreadable LLM reply: {exc}") from exc
        tokens_in, tokens_out = _usage(payload)
        if tokens_in is None or tokens_out is None:
            tokens_in = tokens_out = 0
            self._say_once("usage", "the openai-compatible server reports no token usage: "
                                    "its calls are counted as 0 tokens (unknown)")
        self._count_tokens(tokens_in, tokens_out)
        text = _message_text(payload)
        if text is None:
            raise self._failure("unusable LLM reply: not a chat completion with a message",
                                tokens=tokens_in + tokens_out)
        return _without_thinking(text), tokens_in, tokens_out


def _described(exc: BaseException) -> str:
    """What went wrong, for the log: an error status with the start of the server's reason."""
    response = getattr(exc, "response", None)
    if response is not None:
        body = " ".join(response.text[:_ERROR_BODY_CHARS].split())
        return f"HTTP {response.status_code}: {body}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _without_thinking(text: str) -> str:
    """``text`` without a leading ``<think>`` block: reasoning models (Qwen3, DeepSeek-R1 on Ollama)
    may write one before the answer, and a draft ``<summary>`` in it must not be read as the answer."""
    if text.lstrip().startswith("<think>"):
        end = text.find("</think>")
        if end >= 0:
            return text[end + len("</think>"):]
    return text


def _usage(payload: Any) -> tuple[int | None, int | None]:
    usage = payload.get("usage") if isinstance(payload, dict) else None
    if not isinstance(usage, dict):
        return None, None
    tokens_in, tokens_out = reported_tokens(usage.get("prompt_tokens")), reported_tokens(usage.get("completion_tokens"))
    return (tokens_in, tokens_out) if tokens_in is not None and tokens_out is not None else (None, None)


def _message_text(payload: Any) -> str | None:
    """The first choice's message text; its content may also be a list of text parts."""
    choices = payload.get("choices") if isinstance(payload, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part["text"] for part in content
                       if isinstance(part, dict) and isinstance(part.get("text"), str))
    return None
