"""A local, scripted stand-in for the OpenAI Responses API (``POST /v1/responses``), as the Codex CLI speaks it.

The real Codex CLI is pointed at it through a custom model provider (``wire_api = "responses"``,
``base_url`` = :attr:`ScriptedResponsesAPI.url`; :mod:`.codex_cli` writes that configuration).
Each request is answered by ``responder(body)``: the list of output items of the model's turn
(:func:`message`, :func:`shell_command`, :func:`apply_patch`, :func:`mcp_tool_call`,
:func:`tool_search`, :func:`function_call`), streamed as
Server-Sent Events the way Codex parses them -- ``response.created``, per item
``response.output_item.added``, ``response.output_text.delta`` (messages),
``response.output_item.done``, then ``response.completed`` with the response's id and its usage.
A turn ends when the reply holds no tool call; after a tool call Codex runs it and asks again with
its output in the input (:func:`tool_outputs`). The default responder says :data:`DEFAULT_REPLY`.

Every request is recorded with its headers (:attr:`~ScriptedResponsesAPI.requests`): a test reads
what context reached the model (:func:`input_text`). Compaction arrives as an ordinary request whose
last input is Codex's summarisation prompt (:func:`is_compaction`; the default responder answers it
with :data:`DEFAULT_SUMMARY`); ``POST /v1/responses/compact`` (the remote compaction of OpenAI's own
provider) is answered too, with that summary as a compaction item. A ``GET`` (a models listing) is
answered with an empty list and recorded in ``side_requests``. One-off behaviours are queued with
the shared script vocabulary (:class:`~sessionmem.testing.scripted_http.Action`): an error status
(with ``Retry-After``), a delay, a reply text, a raw body, a stream cut off before it completes.

Resource handling:
    Runs a ``ThreadingHTTPServer`` on 127.0.0.1 in a daemon thread; use it as a context manager
    (or call :meth:`~ScriptedResponsesAPI.close`) to shut it down.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable
from typing import Any

from sessionmem.testing.scripted_http import Action, RecordedRequest, ScriptedHandler, ScriptedServer, openai_error

__all__ = [
    "DEFAULT_REPLY", "DEFAULT_SUMMARY", "Action", "Item", "RecordedRequest", "ScriptedResponsesAPI", "apply_patch",
    "function_call", "input_text", "is_compaction", "mcp_tool_call", "message", "shell_command", "tool_outputs",
    "tool_search", "turn_prompt",
]

Item = dict[str, Any]  # one Responses API item: a message, a function_call, a custom_tool_call, ...

DEFAULT_REPLY = "Done."
DEFAULT_SUMMARY = "Scripted summary: the conversation so far, compacted."
# Codex's summarisation prompt for a local compaction begins with these words (codex-rs core's
# templates/compact/prompt.md).
COMPACTION_PROMPT_START = "You are performing a CONTEXT CHECKPOINT COMPACTION"

_call_numbers = itertools.count(1)


def message(text: str) -> Item:
    """The model's reply to the user: the turn ends with it (unless a tool call comes with it)."""
    return {"type": "message", "role": "assistant", "id": f"msg_{uuid.uuid4().hex}",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def function_call(name: str, arguments: dict[str, Any]) -> Item:
    """A call of one of Codex's function tools (or an MCP tool: ``mcp__server__tool`` style names are
    Codex's to choose; read the request's ``tools`` for them)."""
    call_id = f"call_{next(_call_numbers)}_{uuid.uuid4().hex[:8]}"
    return {"type": "function_call", "id": f"fc_{uuid.uuid4().hex}", "name": name,
            "arguments": json.dumps(arguments), "call_id": call_id}


def mcp_tool_call(server: str, tool: str, arguments: dict[str, Any]) -> Item:
    """A call of ``tool`` of the MCP server named ``server`` in Codex's ``config.toml``
    (``[mcp_servers.<server>]``): a ``function_call`` in the namespace ``mcp__<server>``. Codex
    offers MCP tools deferred (found through :func:`tool_search`) but runs such a call without a
    search; hooks see it as tool ``mcp__<server>__<tool>``."""
    item = function_call(tool, arguments)
    item["namespace"] = f"mcp__{server}"
    return item


def tool_search(query: str, *, limit: int = 8) -> Item:
    """A search of Codex's deferred tools (MCP servers' among them), run by Codex: the next request
    holds a ``tool_search_output`` whose ``tools`` are namespaces (``mcp__<server>``) of functions."""
    call_id = f"call_{next(_call_numbers)}_{uuid.uuid4().hex[:8]}"
    return {"type": "tool_search_call", "id": f"tsc_{uuid.uuid4().hex}", "call_id": call_id, "status": "completed",
            "execution": "client", "arguments": {"query": query, "limit": limit}}


def shell_command(cmd: str, *, workdir: str | None = None) -> Item:
    """A shell command through Codex's ``exec_command`` tool (its unified exec shell); hooks see it as
    tool ``Bash`` with ``tool_input.command``."""
    arguments: dict[str, Any] = {"cmd": cmd, "yield_time_ms": 10_000}
    if workdir is not None:
        arguments["workdir"] = workdir
    return function_call("exec_command", arguments)


def apply_patch(patch: str) -> Item:
    """A file edit through Codex's freeform ``apply_patch`` tool: ``patch`` in its own format
    (``*** Begin Patch`` / ``*** Add File: path`` / ``*** Update File: path`` / ``*** End Patch``)."""
    call_id = f"call_{next(_call_numbers)}_{uuid.uuid4().hex[:8]}"
    return {"type": "custom_tool_call", "id": f"ctc_{uuid.uuid4().hex}", "name": "apply_patch", "input": patch,
            "call_id": call_id, "status": "completed"}


def _text_of(item: Item) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _user_messages(body: dict[str, Any]) -> list[tuple[int, str]]:
    """(position, text) of the request's user messages that a person typed: not Codex's own
    ``<environment_context>`` and similar tagged blocks."""
    found = []
    for position, item in enumerate(body.get("input") or []):
        if item.get("type") == "message" and item.get("role") == "user":
            text = _text_of(item)
            if not text.lstrip().startswith("<"):
                found.append((position, text))
    return found


def turn_prompt(body: dict[str, Any]) -> str:
    """The prompt of the turn the request belongs to: its last user message ("" if none)."""
    users = _user_messages(body)
    return users[-1][1] if users else ""


def tool_outputs(body: dict[str, Any]) -> list[Item]:
    """The outputs of the tool calls made since the turn's prompt (``function_call_output``,
    ``custom_tool_call_output`` and ``tool_search_output`` items), in order: how far the turn has gone."""
    users = _user_messages(body)
    start = users[-1][0] if users else 0
    return [item for item in (body.get("input") or [])[start:]
            if item.get("type") in ("function_call_output", "custom_tool_call_output", "tool_search_output")]


def input_text(body: dict[str, Any]) -> str:
    """Every text the request carries to the model (instructions and all input items), as one string:
    what a test searches for injected context."""
    return json.dumps({"instructions": body.get("instructions"), "input": body.get("input")})


def is_compaction(body: dict[str, Any]) -> bool:
    """Whether the request asks for a summary of the conversation (Codex's local compaction)."""
    return any(text.startswith(COMPACTION_PROMPT_START) for _, text in _user_messages(body))


def default_responder(body: dict[str, Any]) -> list[Item]:
    """:data:`DEFAULT_SUMMARY` to a compaction, :data:`DEFAULT_REPLY` to anything else."""
    return [message(DEFAULT_SUMMARY if is_compaction(body) else DEFAULT_REPLY)]


class ScriptedResponsesAPI(ScriptedServer):
    """See the module docstring. ``responder`` maps a request body to the output items of the model's
    turn; ``usage_tokens``, when given, is the input token count every reply reports (a large one
    makes Codex compact once its ``model_auto_compact_token_limit`` is passed); otherwise about a
    quarter of the request's bytes, as the API would count."""

    def __init__(self, *, delay: float = 0.0, responder: Callable[[dict[str, Any]], list[Item]] | None = None,
                 usage_tokens: int | None = None) -> None:
        super().__init__(delay=delay)
        self.responder = responder or default_responder
        self.usage_tokens = usage_tokens
        # Requests that are not a turn (GET, HEAD): (method, path, characters of the body).
        self.side_requests: list[tuple[str, str, int]] = []
        # The paths of self.requests, in the same order (/v1/responses or /v1/responses/compact).
        self.paths: list[str] = []
        handler = type("Handler", (_ResponsesHandler,), {"api": self})
        self._serve(handler, "scripted-responses-api")

    @property
    def url(self) -> str:
        """The provider's ``base_url``: Codex appends ``/responses``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def bodies(self) -> list[dict[str, Any]]:
        """The bodies of the requests so far, in order."""
        with self._lock:
            return [r.body for r in self.requests]

    def _usage(self, raw: bytes, items: list[Item]) -> dict[str, Any]:
        tokens_in = self.usage_tokens if self.usage_tokens is not None else max(1, len(raw) // 4)
        tokens_out = max(1, len(json.dumps(items)) // 4)
        self._count_tokens(tokens_in, tokens_out)
        return {"input_tokens": tokens_in, "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": tokens_out, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": tokens_in + tokens_out}


class _ResponsesHandler(ScriptedHandler):
    """The Responses API's requests, answered as ``api`` (the :class:`ScriptedResponsesAPI` serving it) says."""

    api: ScriptedResponsesAPI

    def do_GET(self) -> None:  # noqa: N802 (stdlib name)
        self.api.side_requests.append(("GET", self.path, 0))
        if self.path.split("?")[0].rstrip("/").endswith("/models"):
            self.send_json(200, {"models": []})
        else:
            self.send_json(404, openai_error(f"no route {self.path}", "not_found"))

    def do_HEAD(self) -> None:  # noqa: N802 (stdlib name)
        self.api.side_requests.append(("HEAD", self.path, 0))
        self.send_json(200, {})

    def do_POST(self) -> None:  # noqa: N802 (stdlib name)
        raw = self.read_body()
        path = self.path.split("?")[0].rstrip("/")
        if not path.endswith(("/responses", "/responses/compact")):
            self.api.side_requests.append(("POST", self.path, len(raw.decode("utf-8", "replace"))))
            self.send_json(404, openai_error(f"no route {self.path}", "not_found"))
            return
        body = self.openai_json(raw)
        if body is None:
            return
        with self.api._lock:
            self.api.paths.append(path)
        action = self.api._next_action(body, raw, {name.lower(): value for name, value in self.headers.items()})
        if self.send_openai_failure(action):
            return
        if path.endswith("/compact"):
            items = [{"type": "compaction", "encrypted_content": action.text or DEFAULT_SUMMARY}]
            self.send_json(200, {"output": items, "usage": self.api._usage(raw, items)})
            return
        if action.echo:
            items = [message(input_text(body))]
        elif action.text is not None:
            items = [message(action.text)]
        else:
            items = self.api.responder(body)
        self._stream(items, self.api._usage(raw, items), cut=action.cut)

    def _stream(self, items: list[Item], usage: dict[str, Any], *, cut: bool) -> None:
        """``items`` as the Responses API streams them; ``cut``: the connection closes before
        ``response.completed``, which Codex reports as a broken stream (and retries)."""
        response_id = f"resp_{uuid.uuid4().hex}"
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": {"id": response_id, "status": "in_progress", "output": []}},
        ]
        for index, item in enumerate(items):
            started = {**item, "content": []} if item["type"] == "message" else item
            events.append({"type": "response.output_item.added", "output_index": index, "item": started})
            if item["type"] == "message":
                for part, content in enumerate(item["content"]):
                    events.append({"type": "response.output_text.delta", "item_id": item["id"], "output_index": index,
                                   "content_index": part, "delta": content["text"]})
            events.append({"type": "response.output_item.done", "output_index": index, "item": item})
        if not cut:
            events.append({"type": "response.completed", "response": {
                "id": response_id, "status": "completed", "output": items, "usage": usage}})
        self.send_event_stream(b"".join(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
                                        for event in events))
