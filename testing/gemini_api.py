"""A local, scripted stand-in for the Gemini API (``POST /v1beta/models/<model>:<method>``), as the Gemini CLI calls it.

The real Gemini CLI is pointed at it with ``GOOGLE_GEMINI_BASE_URL`` (and any ``GEMINI_API_KEY``).
It answers what the CLI sends:

- ``:streamGenerateContent?alt=sse``: the model's turn as Server-Sent Events (one ``data:`` event
  holding the whole candidate), as the CLI asks for every turn of its agent loop;
- ``:generateContent``: the same turn as one JSON reply (the CLI's side calls: its model router's
  classifier, its next-speaker check, chat compression);
- ``:countTokens``: a count of about a token per four bytes.

``responder`` chooses the model's turn from the request body: a list of Gemini content parts,
``{"text": ...}`` or ``{"functionCall": {"name": ..., "args": {...}}}`` (a call to one of the CLI's
tools: ``run_shell_command``, ``write_file``, ``replace``...). The default says one line of text,
or, for a request that asks for JSON (``generationConfig.responseMimeType``), an empty JSON object.
One-off behaviours are queued with the scripted servers' :class:`~sessionmem.testing.scripted_http.Action`
(an error status, a delay, a reply text, a raw body, a reply cut off mid-way). Every turn request is
recorded (:attr:`~ScriptedGeminiAPI.requests`), so a test sees what context reached the model;
``countTokens`` and ``GET`` go to :attr:`~ScriptedGeminiAPI.side_requests`.

Resource handling:
    Runs a ``ThreadingHTTPServer`` on 127.0.0.1 in a daemon thread; use it as a context manager
    (or call :meth:`~ScriptedGeminiAPI.close`) to shut it down.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from sessionmem.testing.scripted_http import Action, RecordedRequest, ScriptedHandler, ScriptedServer

__all__ = ["Action", "Part", "RecordedRequest", "ScriptedGeminiAPI", "default_parts", "request_text",
           "turn_parts"]

Part = dict[str, Any]  # a Gemini content part: {"text": ...} or {"functionCall": {...}}
_ADDED = re.compile(r"<(session_context|hook_context)>.*?</\1>", re.DOTALL)  # what the CLI adds to a prompt
_ROUTE = re.compile(r"^/v1(?:beta|alpha)?/models/(?P<model>[^:/?]+):(?P<method>[A-Za-z]+)")


def request_text(body: dict[str, Any]) -> str:
    """Every text of a request: its system instruction and the text parts of its contents, one per line."""
    texts: list[str] = []
    system = body.get("systemInstruction")
    for content in ([system] if isinstance(system, dict) else []) + list(body.get("contents") or []):
        for part in content.get("parts") or [] if isinstance(content, dict) else []:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
    return "\n".join(texts)


def turn_parts(body: dict[str, Any]) -> tuple[str, int]:
    """The user's prompt of the turn the request continues, and how many tool results followed it: the
    prompt is the last user content with a text part and no ``functionResponse``, without what the CLI
    puts around it (``<session_context>``, and hooks' ``<hook_context>``)."""
    contents = [c for c in body.get("contents") or [] if isinstance(c, dict)]
    results = 0
    for content in reversed(contents):
        parts = [p for p in content.get("parts") or [] if isinstance(p, dict)]
        if content.get("role") != "user":
            continue
        if any("functionResponse" in p for p in parts):
            results += 1
            continue
        text = "\n".join(p["text"] for p in parts if isinstance(p.get("text"), str))
        return _ADDED.sub("", text).strip(), results
    return "", results


def default_parts(body: dict[str, Any]) -> list[Part]:
    config = body.get("generationConfig") or {}
    if config.get("responseMimeType") == "application/json":
        return [{"text": "{}"}]
    return [{"text": "Scripted reply"}]


class ScriptedGeminiAPI(ScriptedServer):
    """See the module docstring; :attr:`url` is the base URL the CLI is given."""

    def __init__(self, *, delay: float = 0.0, responder: Callable[[dict[str, Any]], list[Part]] | None = None) -> None:
        super().__init__(delay=delay)
        self.responder = responder or default_parts
        # Requests that are not a turn (GET, countTokens): (method, path, characters of the body).
        self.side_requests: list[tuple[str, str, int]] = []
        self.paths: list[str] = []  # the path of each recorded request, in order (model and method)
        handler = type("Handler", (_GeminiHandler,), {"api": self})
        self._serve(handler, "scripted-gemini-api")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def turn_requests(self) -> list[dict[str, Any]]:
        """The bodies of the agent loop's turns (those that offer the model the CLI's tools)."""
        return [r.body for r in self.requests if r.body.get("tools")]

    def _response(self, body: dict[str, Any], raw: bytes, parts: list[Part]) -> dict[str, Any]:
        tokens_in = max(1, len(raw) // 4)
        tokens_out = max(1, len(json.dumps(parts)) // 4)
        self._count_tokens(tokens_in, tokens_out)
        return {
            "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": tokens_in, "candidatesTokenCount": tokens_out,
                              "totalTokenCount": tokens_in + tokens_out},
            "modelVersion": "scripted",
        }


class _GeminiHandler(ScriptedHandler):
    """The Gemini API's requests, answered as ``api`` (the :class:`ScriptedGeminiAPI` serving it) says."""

    api: ScriptedGeminiAPI

    def do_GET(self) -> None:  # noqa: N802 (stdlib name)
        self.api.side_requests.append(("GET", self.path, 0))
        self.send_json(404, _error(404, f"no route {self.path}", "NOT_FOUND"))

    def do_POST(self) -> None:  # noqa: N802 (stdlib name)
        raw = self.read_body()
        route = _ROUTE.match(self.path)
        body = _json_object(raw)
        if route is None or body is None:
            problem = (404, f"no route {self.path}", "NOT_FOUND") if route is None else (400, "bad json",
                                                                                        "INVALID_ARGUMENT")
            self.send_json(problem[0], _error(*problem))
            return
        if route["method"] == "countTokens":  # a side request: not a turn, not recorded as one
            self.api.side_requests.append(("POST", self.path, len(raw.decode("utf-8", "replace"))))
            self.send_json(200, {"totalTokens": max(1, len(raw) // 4)})
            return
        action = self.api._next_action(body, raw, {name.lower(): value for name, value in self.headers.items()})
        self.api.paths.append(self.path)
        status = "RESOURCE_EXHAUSTED" if action.status == 429 else "INTERNAL"
        if self.send_scripted(action, _error(action.status, "scripted", status)):
            return
        parts = ([{"text": request_text(body)}] if action.echo
                 else [{"text": action.text}] if action.text is not None
                 else self.api.responder(body))
        response = {key: value for key, value in self.api._response(body, raw, parts).items()
                    if key not in action.drop}
        if action.cut:
            self.send_cut(response)
        elif route["method"] == "streamGenerateContent":
            data = f"data: {json.dumps(response)}\r\n\r\n".encode()
            self.send_json(200, data, content_type="text/event-stream")
        else:
            self.send_json(200, response)


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _error(code: int, message: str, status: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}
