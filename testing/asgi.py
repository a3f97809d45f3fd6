"""Drive an ASGI app in-process, without a server or a socket (tests).

:func:`asgi_request` sends one HTTP request straight into the app's ``__call__``
(every layer the worker has: the ingest fast path, then Quart) and returns the whole
answer; :func:`open_asgi_stream` yields the body chunks of a streaming answer (SSE)
as they are sent.

Resource handling:
    Each request runs in a nursery of its own; a stream's request is cancelled when
    its block is left.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import trio

from sessionmem.protocol.client import Reply

ASGIApp = Callable[..., Any]


# An answer as the clients' own HTTP client gives it: ``status``, ``headers`` (lower-case names), ``body``, ``json()``.
ASGIReply = Reply


def _scope(method: str, target: str, headers: dict[str, str] | None, body: bytes | None) -> dict[str, Any]:
    url = urlsplit(target)
    given = {k.lower(): v for k, v in (headers or {}).items()}
    defaults = {"host": "127.0.0.1"}
    if body is not None:
        defaults.update({"content-type": "application/json", "content-length": str(len(body))})
    raw_headers = [(k.encode(), v.encode("latin-1")) for k, v in {**defaults, **given}.items()]
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
        "path": url.path, "raw_path": url.path.encode(), "query_string": url.query.encode(), "root_path": "",
        "headers": raw_headers, "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 37777),
        "extensions": {},
    }


class _Exchange:
    """The two ASGI callables of one request, and what the app sent back."""

    def __init__(self, body: bytes | None) -> None:
        self._body = body or b""
        self._sent_body = False
        self._finished = trio.Event()
        self.status = 0
        self.headers: dict[str, str] = {}
        self.started = trio.Event()
        self.chunks_send, self.chunks_receive = trio.open_memory_channel[bytes](256)

    async def receive(self) -> dict[str, Any]:
        if not self._sent_body:
            self._sent_body = True
            return {"type": "http.request", "body": self._body, "more_body": False}
        await self._finished.wait()  # a client stays connected until the answer is complete
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = {k.decode().lower(): v.decode() for k, v in message.get("headers", [])}
            self.started.set()
        elif message["type"] == "http.response.body":
            if message.get("body"):
                await self.chunks_send.send(message["body"])
            if not message.get("more_body", False):
                self._finish()

    def _finish(self) -> None:
        self._finished.set()
        self.chunks_send.close()


async def asgi_request(app: ASGIApp, method: str, target: str, body: bytes | None = None, *,
                       headers: dict[str, str] | None = None) -> ASGIReply:
    """One request to ``app``; returns the whole answer."""
    exchange = _Exchange(body)
    chunks: list[bytes] = []

    async def collect() -> None:
        async for chunk in exchange.chunks_receive:
            chunks.append(chunk)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(collect)
        await app(_scope(method, target, headers, body), exchange.receive, exchange.send)
        exchange._finish()
    return ASGIReply(exchange.status, exchange.headers, b"".join(chunks))


@asynccontextmanager
async def open_asgi_stream(app: ASGIApp, target: str, *,
                           headers: dict[str, str] | None = None) -> AsyncIterator[trio.MemoryReceiveChannel[bytes]]:
    """``GET target`` on ``app``; yields the channel of body chunks as the app sends them."""
    exchange = _Exchange(None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(app, _scope("GET", target, headers, None), exchange.receive, exchange.send)
        await exchange.started.wait()
        try:
            yield exchange.chunks_receive
        finally:
            nursery.cancel_scope.cancel()
