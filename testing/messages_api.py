"""A local, scripted stand-in for the Anthropic Messages API (``POST /v1/messages``).

Tests and benchmarks point the real ``anthropic`` client at it through
``ANTHROPIC_BASE_URL``. By default it answers every request with valid sessionmem
XML (one ``<observation>`` per ``<tool_use>`` in the request, or a ``<summary>``)
after an optional delay, and counts tokens. A script of one-off behaviours can be
queued: an HTTP error status (with ``Retry-After``), a delay longer than the
client's timeout, or a malformed reply.

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
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_TOOL_USE = re.compile(r'<tool_use index="(\d+)" name="([^"]*)"')


@dataclass
class Action:
    """One scripted behaviour for the next request (consumed in order)."""

    status: int = 200
    retry_after: float | None = None
    delay: float = 0.0
    text: str | None = None  # a reply body text instead of the generated XML


@dataclass
class RecordedRequest:
    body: dict[str, Any]
    status: int
    at: float = field(default_factory=time.time)


def default_reply(body: dict[str, Any]) -> str:
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


class ScriptedMessagesAPI:
    def __init__(self, *, delay: float = 0.0) -> None:
        self.delay = delay
        self.script: collections.deque[Action] = collections.deque()
        self.requests: list[RecordedRequest] = []
        self.input_tokens = 0
        self.output_tokens = 0
        self._lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def do_POST(self) -> None:  # noqa: N802 (stdlib name)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    self._send(400, {"type": "error", "error": {"type": "invalid_request_error", "message": "bad json"}})
                    return
                with api._lock:
                    action = api.script.popleft() if api.script else Action()
                    api.requests.append(RecordedRequest(body, action.status))
                time.sleep(action.delay or api.delay)
                if action.status != 200:
                    headers = {"retry-after": str(action.retry_after)} if action.retry_after is not None else {}
                    kind = "rate_limit_error" if action.status == 429 else "api_error"
                    self._send(action.status, {"type": "error", "error": {"type": kind, "message": "scripted"}}, headers)
                    return
                text = action.text if action.text is not None else default_reply(body)
                tokens_in = max(1, len(raw) // 4)
                tokens_out = max(1, len(text) // 4)
                with api._lock:
                    api.input_tokens += tokens_in
                    api.output_tokens += tokens_out
                self._send(200, {
                    "id": f"msg_{uuid.uuid4().hex}",
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model", "scripted"),
                    "content": [{"type": "text", "text": text}],
                    "stop_reason": "end_turn",
                    "stop_sequence": None,
                    "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out},
                })

            def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
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
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def queue(self, *actions: Action) -> None:
        with self._lock:
            self.script.extend(actions)

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
