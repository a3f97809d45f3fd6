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

import json
import re
import uuid
from collections.abc import Callable
from typing import Any

from sessionmem.testing.scripted_http import STALL_LIMIT_S, Action, RecordedRequest, ScriptedHandler, ScriptedServer

__all__ = ["STALL_LIMIT_S", "Action", "RecordedRequest", "ScriptedMessagesAPI", "default_reply"]

_TOOL_USE = re.compile(r'<tool_use index="(\d+)" name="([^"]*)"')


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


class ScriptedMessagesAPI(ScriptedServer):
    """See the module docstring. ``responder`` maps a request body to the reply's content
    blocks (default: :func:`default_reply` as one text block); streaming requests
    (``"stream": true``, as the Claude Code CLI sends) are answered as Server-Sent Events."""

    def __init__(self, *, delay: float = 0.0, responder: Callable[[dict[str, Any]], list[Block]] | None = None) -> None:
        super().__init__(delay=delay)
        self.responder = responder or (lambda body: [{"type": "text", "text": default_reply(body)}])
        # Requests that are not a message (GET, HEAD, count_tokens): (method, path, characters of the body).
        self.side_requests: list[tuple[str, str, int]] = []
        handler = type("Handler", (_MessagesHandler,), {"api": self})
        self._serve(handler, "scripted-messages-api")

    def _message(self, body: dict[str, Any], raw: bytes, blocks: list[Block]) -> dict[str, Any]:
        """The reply to a message request: ``blocks``, with usage counted as the API would (and recorded)."""
        tokens_in = max(1, len(raw) // 4)
        tokens_out = max(1, len(json.dumps(blocks)) // 4)
        self._count_tokens(tokens_in, tokens_out)
        return {
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

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class _MessagesHandler(ScriptedHandler):
    """The Messages API's requests, answered as ``api`` (the :class:`ScriptedMessagesAPI` serving it) says."""

    api: ScriptedMessagesAPI

    def do_GET(self) -> None:  # noqa: N802 (stdlib name)
        self.api.side_requests.append(("GET", self.path, 0))
        self.send_json(404, {"type": "error", "error": {"type": "not_found_error", "message": self.path}})

    def do_HEAD(self) -> None:  # noqa: N802 (stdlib name)
        self.api.side_requests.append(("HEAD", self.path, 0))
        self.send_json(200, {})

    def do_POST(self) -> None:  # noqa: N802 (stdlib name)
        raw = self.read_body()
        if "count_tokens" in self.path:
            self.api.side_requests.append(("POST", self.path, len(raw.decode("utf-8", "replace"))))
            self.send_json(200, {"input_tokens": max(1, len(raw) // 4)})
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self.send_json(400, {"type": "error", "error": {"type": "invalid_request_error", "message": "bad json"}})
            return
        action = self.api._next_action(body, raw, {name.lower(): value for name, value in self.headers.items()})
        if action.status != 200:
            headers = {"retry-after": str(action.retry_after)} if action.retry_after is not None else {}
            kind = "rate_limit_error" if action.status == 429 else "api_error"
            self.send_json(action.status, {"type": "error", "error": {"type": kind, "message": "scripted"}}, headers)
            return
        if action.body is not None:
            self.send_json(200, action.body, content_type=action.content_type)
            return
        if action.echo:
            blocks = [{"type": "text", "text": json.dumps(body.get("system")) + str(body["messages"])}]
        elif action.text is not None:
            blocks = [{"type": "text", "text": action.text}]
        else:
            blocks = self.api.responder(body)
        message = self.api._message(body, raw, blocks)
        for key in action.drop:
            message.pop(key, None)
        if action.cut:
            self.send_cut(message)
        elif body.get("stream"):
            self._stream(message)
        else:
            self.send_json(200, message)

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
        self.send_event_stream(b"".join(f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode()
                                        for name, payload in events))
