"""A local, scripted stand-in for the Anthropic Messages API (``POST /v1/messages``).

Tests and benchmarks point the real ``anthropic`` client at it through
``ANTHROPIC_BASE_URL``. By default it answers every request with valid sessionmem
XML (one ``<observation>`` per ``<tool_use>`` in the request, or a ``<summary>``)
after an optional delay, and counts tokens. A script of one-off behaviours can be
queued: an HTTP error status (with ``Retry-After``), a delay longer than the
client's timeout, or a malformed reply. Every request is recorded with the characters
of its body as it arrived (what a cost count measures); those that are not a message
(``GET``, ``HEAD``, ``count_tokens``) go to ``side_requests``. :meth:`ScriptedMessagesAPI.stall` holds every
reply until :meth:`ScriptedMessagesAPI.resume`: a model that stops answering for a while.

Resource handling:
    Runs a ``ThreadingHTTPServer`` on 127.0.0.1 in a daemon thread; use it as a
    context manager (or call :meth:`close`) to shut it down.
"""

from __future__ import annotations

import collections
import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_TOOL_USE = re.compile(r'<tool_use index="(\d+)" name="([^"]*)"')
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
    body: bytes | None = None  # a 200 with this body as it is (a proxy's page, broken JSON)
    content_type: str = "application/json"  # of ``body``
    drop: tuple[str, ...] = ()  # keys left out of the message (``content``, ``usage``)


@dataclass
class RecordedRequest:
    body: dict[str, Any]
    status: int
    at: float = field(default_factory=time.time)
    chars: int = 0  # of the body as it arrived (UTF-8 decoded): what a cost count measures


def default_reply(body: dict[str, Any]) -> str:
    """Valid sessionmem XML for a compression request (observations or a summary)."""
    system = body.get("system") or ""
    if isinstance(system, list):
        system = " ".join(part.get("text", "") for part in system if isinstance(part, dict))
    content = body["messages"][-1]["content"]
    if isinstance(content, list):
        content = " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    if "<summary>" in system:
        return ("<summary><request>scripted request</request><investigated>scripted investigation</investigated>"
                "<learned>scripted learning</learned><completed>scripted completion</completed>"
                "<next_steps>scripted next steps</next_steps><notes>scripted notes</notes></summary>")
    blocks = []
    for index, tool in _TOOL_USE.findall(content):
        blocks.append(
            f'<observation index="{index}"><type>discovery</type><title>Scripted: {tool} #{index}</title>'
            f"<subtitle>from the scripted API</subtitle><facts><fact>tool {tool} ran</fact></facts>"
            f"<narrative>The scripted model looked at {tool}.</narrative>"
            f"<concepts><concept>how-it-works</concept></concepts><files_read></files_read>"
            f"<files_modified></files_modified></observation>"
        )
    return "\n".join(blocks)


Block = dict[str, Any]  # a Messages API content block: {"type": "text", ...} or {"type": "tool_use", ...}


class ScriptedMessagesAPI:
    """See the module docstring. ``responder`` maps a request body to the reply's content
    blocks (default: :func:`default_reply` as one text block); streaming requests
    (``"stream": true``, as the Claude Code CLI sends) are answered as Server-Sent Events."""

    def __init__(self, *, delay: float = 0.0, responder: Callable[[dict[str, Any]], list[Block]] | None = None) -> None:
        self.delay = delay
        self.responder = responder or (lambda body: [{"type": "text", "text": default_reply(body)}])
        self.script: collections.deque[Action] = collections.deque()
        self.requests: list[RecordedRequest] = []
        # Requests that are not a message (GET, HEAD, count_tokens): (method, path, characters of the body).
        self.side_requests: list[tuple[str, str, int]] = []
        self.input_tokens = 0
        self.output_tokens = 0
        self._lock = threading.Lock()
        self._open = threading.Event()
        self._open.set()
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def do_GET(self) -> None:  # noqa: N802 (stdlib name)
                api.side_requests.append(("GET", self.path, 0))
                self._send(404, {"type": "error", "error": {"type": "not_found_error", "message": self.path}})

            def do_HEAD(self) -> None:  # noqa: N802 (stdlib name)
                api.side_requests.append(("HEAD", self.path, 0))
                self._send(200, {})

            def do_POST(self) -> None:  # noqa: N802 (stdlib name)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if "count_tokens" in self.path:
                    api.side_requests.append(("POST", self.path, len(raw.decode("utf-8", "replace"))))
                    self._send(200, {"input_tokens": max(1, len(raw) // 4)})
                    return
                try:
                    body = json.loads(raw)
                except ValueError:
                    self._send(400, {"type": "error", "error": {"type": "invalid_request_error", "message": "bad json"}})
                    return
                with api._lock:
                    action = api.script.popleft() if api.script else Action()
                    chars = len(raw.decode("utf-8", "replace"))
                    api.requests.append(RecordedRequest(body, action.status, chars=chars))
                api._open.wait(STALL_LIMIT_S)
                time.sleep(action.delay or api.delay)
                if action.status != 200:
                    headers = {"retry-after": str(action.retry_after)} if action.retry_after is not None else {}
                    kind = "rate_limit_error" if action.status == 429 else "api_error"
                    self._send(action.status, {"type": "error", "error": {"type": kind, "message": "scripted"}}, headers)
                    return
                if action.body is not None:
                    self._send(200, action.body, content_type=action.content_type)
                    return
                if action.echo:
                    blocks = [{"type": "text", "text": json.dumps(body.get("system")) + str(body["messages"])}]
                elif action.text is not None:
                    blocks = [{"type": "text", "text": action.text}]
                else:
                    blocks = api.responder(body)
                tokens_in = max(1, len(raw) // 4)
                tokens_out = max(1, len(json.dumps(blocks)) // 4)
                with api._lock:
                    api.input_tokens += tokens_in
                    api.output_tokens += tokens_out
                message = {
                    # Unique per reply: the Claude Code CLI merges turns that share an id.
                    "id": f"msg_{uuid.uuid4().hex}",
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model", "scripted"),
                    "content": blocks,
                    "stop_reason": "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn",
                    "stop_sequence": None,
                    "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out},
                }
                for key in action.drop:
                    message.pop(key, None)
                if action.cut:
                    self._send_cut(message)
                elif body.get("stream"):
                    self._stream(message)
                else:
                    self._send(200, message)

            def _send_cut(self, payload: dict[str, Any]) -> None:
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

            def _stream(self, message: dict[str, Any]) -> None:
                events: list[tuple[str, dict[str, Any]]] = [
                    ("message_start", {"type": "message_start", "message": {
                        **message, "content": [], "stop_reason": None,
                        "usage": {"input_tokens": message["usage"]["input_tokens"], "output_tokens": 1}}}),
                ]
                for index, block in enumerate(message["content"]):
                    if block["type"] == "text":
                        events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                               "content_block": {"type": "text", "text": ""}}))
                        delta = {"type": "text_delta", "text": block["text"]}
                    else:
                        events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                               "content_block": {**block, "input": {}}}))
                        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
                    events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))
                    events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
                events.append(("message_delta", {"type": "message_delta",
                                                 "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                                                 "usage": {"output_tokens": message["usage"]["output_tokens"]}}))
                events.append(("message_stop", {"type": "message_stop"}))
                data = b"".join(f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode() for name, payload in events)
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _send(self, status: int, payload: dict[str, Any] | bytes, headers: dict[str, str] | None = None,
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

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="scripted-messages-api", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

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
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> ScriptedMessagesAPI:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
