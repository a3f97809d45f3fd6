"""What the scripted model servers share: the script, the record of requests, the stall, the HTTP plumbing.

:class:`ScriptedServer` is the life of one server -- a script of one-off behaviours
(:class:`Action`, consumed in order), every request recorded (:class:`RecordedRequest`),
:meth:`~ScriptedServer.stall` and :meth:`~ScriptedServer.resume`, and the threads that
serve it; :class:`ScriptedHandler` sends a JSON reply whole or cut off mid-way. The
Messages API (:mod:`.messages_api`) and the chat completions API
(:mod:`.chat_completions_api`) each add what their wire format says.

Resource handling:
    A ``ThreadingHTTPServer`` on 127.0.0.1 in a daemon thread, shut down by
    :meth:`ScriptedServer.close` (or leaving the ``with`` block); a stalled handler is let
    go by it, and lets itself go after :data:`STALL_LIMIT_S` so a forgotten resume cannot
    hang a test.
"""

from __future__ import annotations

import collections
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from sessionmem.testing.loopback_http import LoopbackServer, QuietHandler

STALL_LIMIT_S = 300.0  # a stall ends on its own after this, so a forgotten resume() cannot hang a test


@dataclass
class Action:
    """One scripted behaviour for the next request (consumed in order)."""

    status: int = 200
    retry_after: float | None = None
    delay: float = 0.0
    text: str | None = None  # a reply body text instead of the generated XML
    echo: bool = False  # reply with the request's own text (system prompt and content)
    cut: bool = False  # announce the whole reply, send half of it, and close the connection
    body: bytes | None = None  # this body as it is (a proxy's page, broken JSON)
    content_type: str = "application/json"  # of ``body``
    drop: tuple[str, ...] = ()  # keys left out of the reply (``content``, ``usage``, ``choices``)


@dataclass
class RecordedRequest:
    body: dict[str, Any]
    status: int
    headers: dict[str, str] = field(default_factory=dict)  # names in lower case
    at: float = field(default_factory=time.time)
    chars: int = 0  # of the body as it arrived (UTF-8 decoded): what a cost count measures


class ScriptedHandler(QuietHandler):
    """The two ways a scripted server answers: whole, or cut off."""

    def read_body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def send_json(self, status: int, payload: dict[str, Any] | bytes, headers: dict[str, str] | None = None,
                  content_type: str = "application/json") -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client timed out and went away: that is the point of a delay

    def send_scripted(self, action: Action, error: dict[str, Any]) -> bool:
        """Send what ``action`` scripts instead of the API's own reply, if anything: its raw body as it is (with
        its status), or its error status with ``error`` as the body (and its ``Retry-After``); returns whether
        it did (else the caller replies)."""
        if action.body is not None:
            self.send_json(action.status, action.body, content_type=action.content_type)
            return True
        if action.status != 200:
            headers = {"retry-after": str(action.retry_after)} if action.retry_after is not None else {}
            self.send_json(action.status, error, headers)
            return True
        return False

    def send_event_stream(self, data: bytes) -> None:
        """``data`` (Server-Sent Events, whole) as a streamed reply."""
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def openai_json(self, raw: bytes) -> dict[str, Any] | None:
        """``raw`` decoded as a JSON object, or None once a 400 has answered it (OpenAI's error body)."""
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self.send_json(400, openai_error("bad json", "invalid_request_error"))
            return None
        return body

    def send_openai_failure(self, action: Action) -> bool:
        """:meth:`send_scripted` with the error body an OpenAI-compatible server answers."""
        kind = "rate_limit_exceeded" if action.status == 429 else "server_error"
        return self.send_scripted(action, openai_error("scripted", kind))

    def send_cut(self, payload: dict[str, Any]) -> None:
        """Announce the whole reply, send half of it, and close the connection."""
        data = json.dumps(payload).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True
        self.connection.shutdown(2)  # the reply ends mid-way


def openai_error(message: str, kind: str) -> dict[str, Any]:
    """An error body as OpenAI-compatible servers write it."""
    return {"error": {"message": message, "type": kind, "code": None}}


class ScriptedServer(LoopbackServer):
    """A scripted server's state and life; a subclass passes its handler class to :meth:`_serve`."""

    def __init__(self, *, delay: float = 0.0) -> None:
        self.delay = delay
        self.script: collections.deque[Action] = collections.deque()
        self.requests: list[RecordedRequest] = []
        self.input_tokens = 0
        self.output_tokens = 0
        self._lock = threading.Lock()
        self._open = threading.Event()
        self._open.set()

    def _next_action(self, body: dict[str, Any], raw: bytes, headers: dict[str, str] | None = None) -> Action:
        """The scripted action for this request (``raw``, its body as it arrived), recorded; returns
        once the server is not stalled and the action's delay (or the server's) has passed."""
        chars = len(raw.decode("utf-8", "replace"))
        with self._lock:
            action = self.script.popleft() if self.script else Action()
            self.requests.append(RecordedRequest(body, action.status, headers or {}, chars=chars))
        self._open.wait(STALL_LIMIT_S)
        time.sleep(action.delay or self.delay)
        return action

    def _count_tokens(self, tokens_in: int, tokens_out: int) -> None:
        with self._lock:
            self.input_tokens += tokens_in
            self.output_tokens += tokens_out

    def queue(self, *actions: Action) -> None:
        with self._lock:
            self.script.extend(actions)

    def stall(self) -> None:
        """Hold every reply (those in progress and new ones) until :meth:`resume`."""
        self._open.clear()

    def resume(self) -> None:
        self._open.set()

    def statuses(self) -> list[int]:
        with self._lock:
            return [r.status for r in self.requests]

    def close(self) -> None:
        self._open.set()  # a stalled handler thread is let go
        super().close()
