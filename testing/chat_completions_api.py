"""A local, scripted stand-in for an OpenAI-compatible chat completions server
(``POST /v1/chat/completions``, as Ollama, LM Studio, vLLM and llama.cpp's server answer it).

Tests point the openai-compatible compressor's real HTTP client at :attr:`ScriptedChatCompletionsAPI.url`.
By default it answers every request with valid sessionmem XML (one ``<observation>`` per
``<tool_use>``, or a ``<summary>``: :func:`sessionmem.testing.messages_api.default_reply`) and
reports the tokens in ``usage`` -- or, with ``usage=False``, leaves ``usage`` out, as some local
servers do. One-off behaviours are queued with the Messages API server's own script vocabulary
(:class:`~sessionmem.testing.messages_api.Action`): an error status (with ``Retry-After``), a delay,
a reply text, a reply cut off mid-way, a raw body (with the action's status: a 401 that quotes the
request), keys dropped from the reply (``choices``,
``usage``), or the request echoed back. :meth:`ScriptedChatCompletionsAPI.stall` holds every
reply until :meth:`ScriptedChatCompletionsAPI.resume`. Every request is recorded with its headers.

Resource handling:
    Runs a ``ThreadingHTTPServer`` on 127.0.0.1 in a daemon thread; use it as a context
    manager (or call :meth:`~ScriptedChatCompletionsAPI.close`) to shut it down.
"""

from __future__ import annotations

import collections
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sessionmem.testing.messages_api import STALL_LIMIT_S, Action, default_reply

COMPLETIONS_PATH = "/v1/chat/completions"


@dataclass
class RecordedRequest:
    body: dict[str, Any]
    status: int
    headers: dict[str, str]  # names in lower case
    at: float = field(default_factory=time.time)
    chars: int = 0  # of the body as it arrived (UTF-8 decoded): what a cost count measures


def completion_text(body: dict[str, Any]) -> str:
    """:func:`default_reply` for a chat completions request (its system prompt is the first message)."""
    messages = body["messages"]
    system = " ".join(str(m.get("content", "")) for m in messages if m.get("role") == "system")
    return default_reply({"system": system, "messages": [messages[-1]]})


class ScriptedChatCompletionsAPI:
    """See the module docstring; :attr:`url` is the base URL a client is given (ending in ``/v1``)."""

    def __init__(self, *, delay: float = 0.0, usage: bool = True) -> None:
        self.delay = delay
        self.usage = usage
        self.script: collections.deque[Action] = collections.deque()
        self.requests: list[RecordedRequest] = []
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
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})
                else:
                    self._send(404, _error("not found", "not_found_error"))

            def do_POST(self) -> None:  # noqa: N802 (stdlib name)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if self.path != COMPLETIONS_PATH:
                    self._send(404, _error(f"no route {self.path}", "not_found_error"))
                    return
                try:
                    body = json.loads(raw)
                except ValueError:
                    self._send(400, _error("bad json", "invalid_request_error"))
                    return
                with api._lock:
                    action = api.script.popleft() if api.script else Action()
                    headers = {name.lower(): value for name, value in self.headers.items()}
                    api.requests.append(RecordedRequest(body, action.status, headers,
                                                        chars=len(raw.decode("utf-8", "replace"))))
                api._open.wait(STALL_LIMIT_S)
                time.sleep(action.delay or api.delay)
                if action.body is not None:  # as it is, with the action's status
                    self._send(action.status, action.body, content_type=action.content_type)
                    return
                if action.status != 200:
                    extra = {"retry-after": str(action.retry_after)} if action.retry_after is not None else {}
                    kind = "rate_limit_exceeded" if action.status == 429 else "server_error"
                    self._send(action.status, _error("scripted", kind), extra)
                    return
                if action.echo:
                    text = json.dumps(body["messages"])
                elif action.text is not None:
                    text = action.text
                else:
                    text = completion_text(body)
                tokens_in = max(1, len(raw) // 4)
                tokens_out = max(1, len(text) // 4)
                completion: dict[str, Any] = {
                    "id": f"chatcmpl-{uuid.uuid4().hex}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", "scripted"),
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": "stop"}],
                }
                if api.usage and "usage" not in action.drop:
                    completion["usage"] = {"prompt_tokens": tokens_in, "completion_tokens": tokens_out,
                                           "total_tokens": tokens_in + tokens_out}
                    with api._lock:
                        api.input_tokens += tokens_in
                        api.output_tokens += tokens_out
                for key in action.drop:
                    completion.pop(key, None)
                if action.cut:
                    self._send_cut(completion)
                else:
                    self._send(200, completion)

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
        self._thread = threading.Thread(target=self._server.serve_forever, name="scripted-chat-completions",
                                        daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}/v1"

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
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> ScriptedChatCompletionsAPI:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _error(message: str, kind: str) -> dict[str, Any]:
    """An error body as OpenAI-compatible servers write it."""
    return {"error": {"message": message, "type": kind, "code": None}}
