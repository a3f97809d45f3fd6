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

A coding agent is served too (OpenCode, through its ``@ai-sdk/openai-compatible`` provider):
``responder`` chooses the assistant's message from the request body (``{"content": ...}`` and/or
``"tool_calls"``: :func:`tool_call` builds one; ``"prompt_tokens"``: the count to report, as a context
about to overflow would), and a request with ``"stream": true`` is answered as Server-Sent Events (the message as ``chat.completion.chunk`` deltas, then ``[DONE]``).

Resource handling:
    Runs a ``ThreadingHTTPServer`` on 127.0.0.1 in a daemon thread; use it as a context
    manager (or call :meth:`~ScriptedChatCompletionsAPI.close`) to shut it down.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from sessionmem.testing.messages_api import default_reply
from sessionmem.testing.scripted_http import ScriptedHandler, ScriptedServer, openai_error

COMPLETIONS_PATH = "/v1/chat/completions"

Message = dict[str, Any]  # an assistant message: {"content": str | None, "tool_calls": [...]}


def tool_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One ``tool_calls`` entry of an assistant message: a call of the client's tool ``name``."""
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


def stream_chunks(completion: dict[str, Any]) -> bytes:
    """``completion`` as the Server-Sent Events a streaming request gets: a chunk with the role and text, one a
    tool call, one with ``finish_reason`` (and ``usage``), then ``data: [DONE]``."""
    choice = completion["choices"][0]
    message = choice["message"]
    base = {key: completion[key] for key in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": message.get("content") or ""}]
    for index, call in enumerate(message.get("tool_calls") or []):
        deltas.append({"tool_calls": [{"index": index, **call}]})
    chunks = [{**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]} for delta in deltas]
    last: dict[str, Any] = {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]}
    if "usage" in completion:
        last["usage"] = completion["usage"]
    chunks.append(last)
    return b"".join(f"data: {json.dumps(chunk)}\n\n".encode() for chunk in chunks) + b"data: [DONE]\n\n"


def completion_text(body: dict[str, Any]) -> str:
    """:func:`default_reply` for a chat completions request (its system prompt is the first message)."""
    messages = body["messages"]
    system = " ".join(str(m.get("content", "")) for m in messages if m.get("role") == "system")
    return default_reply({"system": system, "messages": [messages[-1]]})


class ScriptedChatCompletionsAPI(ScriptedServer):
    """See the module docstring; :attr:`url` is the base URL a client is given (ending in ``/v1``)."""

    def __init__(self, *, delay: float = 0.0, usage: bool = True,
                 responder: Callable[[dict[str, Any]], Message] | None = None) -> None:
        super().__init__(delay=delay)
        self.usage = usage
        self.responder = responder
        api = self

        class Handler(ScriptedHandler):
            def do_GET(self) -> None:  # noqa: N802 (stdlib name)
                if self.path.rstrip("/") == "/v1/models":
                    self.send_json(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})
                else:
                    self.send_json(404, openai_error("not found", "not_found_error"))

            def do_POST(self) -> None:  # noqa: N802 (stdlib name)
                raw = self.read_body()
                if self.path != COMPLETIONS_PATH:
                    self.send_json(404, openai_error(f"no route {self.path}", "not_found_error"))
                    return
                body = self.openai_json(raw)
                if body is None:
                    return
                action = api._next_action(body, raw, {name.lower(): value for name, value in self.headers.items()})
                if self.send_openai_failure(action):
                    return
                message: Message
                if action.echo:
                    message = {"content": json.dumps(body["messages"])}
                elif action.text is not None:
                    message = {"content": action.text}
                elif api.responder is not None:
                    message = dict(api.responder(body))
                else:
                    message = {"content": completion_text(body)}
                tokens_in = message.pop("prompt_tokens", None) or max(1, len(raw) // 4)
                tokens_out = max(1, len(message.get("content") or json.dumps(message)) // 4)
                completion: dict[str, Any] = {
                    "id": f"chatcmpl-{uuid.uuid4().hex}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", "scripted"),
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": None, **message},
                                 "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
                }
                if api.usage and "usage" not in action.drop:
                    completion["usage"] = {"prompt_tokens": tokens_in, "completion_tokens": tokens_out,
                                           "total_tokens": tokens_in + tokens_out}
                    api._count_tokens(tokens_in, tokens_out)
                for key in action.drop:
                    completion.pop(key, None)
                if action.cut:
                    self.send_cut(completion)
                elif body.get("stream"):
                    self.send_event_stream(stream_chunks(completion))
                else:
                    self.send_json(200, completion)

        self._serve(Handler, "scripted-chat-completions")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"
