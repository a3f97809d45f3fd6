"""The hot ingest routes as a thin ASGI layer in front of the Quart-Trio app.

Every hook event is one ``POST`` to one of four paths. Quart's per-request machinery
(request and app contexts, routing, response objects) costs about as much CPU as the
whole journaled accept, so these four paths are served here directly: read the body
(bounded), decode with msgspec, ingest (:class:`~sessionmem.server.ingest.Ingestor`,
the same code the spool import uses), answer JSON. Everything else goes to Quart.

Error handling:
    The same answers as the Quart routes give: 400 with the JSON path at fault, 413
    over the body limit (without reading the rest), 503 with ``Retry-After`` when the
    session's mailbox is full, 500 JSON for an internal fault (logged with the session the
    body names, and counted in ``/debug``). A client that disconnects mid-body is simply
    dropped; nothing was journaled.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sessionmem.actors.child import MailboxFull
from sessionmem.protocol.routes import RETRY_AFTER
from sessionmem.runtime.logs import log_exception
from sessionmem.server.asgi_reply import ASGIApp, Receive, Scope, Send, respond
from sessionmem.server.ingest import Ingestor
from sessionmem.server.payloads import BadRequest, ErrorReply, session_named
from sessionmem.storage.base import StorageUnavailable

log = logging.getLogger(__name__)

RETRY_AFTER_S = 1  # what a 503 asks a client to wait (a mailbox drains in well under a second)
STORAGE_RETRY_AFTER_S = 5  # the database cannot write (disk full?): clients spool meanwhile


def too_large_message(limit: int) -> str:
    return f"request body is larger than the {limit} byte limit"


def busy_message(exc: MailboxFull) -> str:
    return f"session {exc} is busy; retry shortly"


def storage_message(exc: StorageUnavailable) -> str:
    return f"{exc} (is the disk full?); nothing was stored; retry later"


def fault_message(method: str, path: str, session: str) -> str:
    """The log line of an internal fault: the request, and the session it names (if any)."""
    line = f"internal error on {method} {path[:200]}"
    return f"{line} (session {session!r})" if session else line


class FastIngest:
    def __init__(self, app: ASGIApp, ingestor: Ingestor, *, max_body_bytes: int,
                 on_error: Callable[[BaseException], None]) -> None:
        self._app = app
        self._ingestor = ingestor
        self._max_body = max_body_bytes
        self._on_error = on_error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in Ingestor.PATHS:
            await self._app(scope, receive, send)
            return
        if scope["method"] != "POST":
            await respond(send, 405, ErrorReply(f"{scope['path']} takes POST only"), headers=[(b"allow", b"POST")])
            return
        body = await self._read_body(scope, receive, send)
        if body is None:
            return
        try:
            status, data = await self._ingestor.by_path(scope["path"], body)
        except BadRequest as exc:
            await respond(send, 400, ErrorReply(exc.message, exc.path))
        except MailboxFull as exc:
            await respond(send, 503, ErrorReply(busy_message(exc)), headers=_retry_after(RETRY_AFTER_S))
        except StorageUnavailable as exc:
            await respond(send, 503, ErrorReply(storage_message(exc)), headers=_retry_after(STORAGE_RETRY_AFTER_S))
        except Exception as exc:
            log_exception(log, fault_message("POST", scope["path"], session_named(body)), exc)
            self._on_error(exc)
            await respond(send, 500, ErrorReply(f"internal error: {type(exc).__name__}"))
        else:
            await respond(send, status, data)

    async def _read_body(self, scope: Scope, receive: Receive, send: Send) -> bytes | None:
        """The whole body, or None once a 413 was sent (or the client went away)."""
        too_large = ErrorReply(too_large_message(self._max_body))
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > self._max_body:
                await respond(send, 413, too_large)
                return None
        chunks = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunks += message.get("body", b"")
            if len(chunks) > self._max_body:
                await respond(send, 413, too_large)
                return None
            if not message.get("more_body", False):
                return bytes(chunks)


def _retry_after(seconds: int) -> list[tuple[bytes, bytes]]:
    return [(RETRY_AFTER.encode(), str(seconds).encode())]
