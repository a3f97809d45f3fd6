"""Answering an ASGI request directly, for the layers in front of Quart (access guard, fast ingest)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from sessionmem.server.jsonapi import encode

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


async def respond(send: Send, status: int, data: Any, *, headers: Iterable[tuple[bytes, bytes]] = (),
                  content_type: bytes = b"application/json") -> None:
    """Send a whole answer: ``data`` as JSON (a record, via :mod:`.jsonapi`), or ``bytes`` as they are."""
    payload = data if isinstance(data, bytes) else encode(data)
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", content_type), (b"content-length", str(len(payload)).encode()), *headers]})
    await send({"type": "http.response.body", "body": payload})


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of request header ``name`` (lower case), if any."""
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None
