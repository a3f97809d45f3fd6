"""The scripted Gemini API (:mod:`sessionmem.testing.gemini_api`) answers as the Gemini API does, over real HTTP.

That the real Gemini CLI works against it is tests/test_e2e_gemini.py's proof."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from sessionmem.testing.gemini_api import Action, ScriptedGeminiAPI, turn_parts


def _post(url: str, body: dict[str, Any] | bytes) -> tuple[int, str, bytes]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, reply.headers.get("Content-Type", ""), reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read()


TURN = {"contents": [{"role": "user", "parts": [{"text": "<session_context>x</session_context>"},
                                                {"text": "<hook_context>memory</hook_context>\n\nFix it"}]},
                     {"role": "model", "parts": [{"functionCall": {"name": "read_file", "args": {}}}]},
                     {"role": "user", "parts": [{"functionResponse": {"name": "read_file", "response": {}}}]}],
        "tools": [{"functionDeclarations": [{"name": "read_file"}]}]}


def test_a_turn_is_streamed_as_the_responder_says_and_recorded() -> None:
    seen: list[tuple[str, int]] = []

    def responder(body: dict[str, Any]) -> list[dict[str, Any]]:
        seen.append(turn_parts(body))
        return [{"functionCall": {"name": "write_file", "args": {"file_path": "a"}}}]

    with ScriptedGeminiAPI(responder=responder) as api:
        status, kind, data = _post(f"{api.url}/v1beta/models/m:streamGenerateContent?alt=sse", TURN)
        assert (status, kind) == (200, "text/event-stream")
        event = json.loads(data.decode().removeprefix("data: ").strip())
        assert event["candidates"][0]["content"]["parts"][0]["functionCall"]["name"] == "write_file"
        assert seen == [("Fix it", 1)]  # the prompt without what the CLI adds, one tool result after it
        assert api.turn_requests() == [TURN]

        status, _, data = _post(f"{api.url}/v1beta/models/m:generateContent",
                                {"contents": [], "generationConfig": {"responseMimeType": "application/json"}})
        assert status == 200 and json.loads(data)["candidates"][0]["content"]["parts"] == [
            {"functionCall": {"name": "write_file", "args": {"file_path": "a"}}}]
        status, _, data = _post(f"{api.url}/v1beta/models/m:countTokens", {"contents": []})
        assert status == 200 and json.loads(data)["totalTokens"] >= 1
        assert [r[1] for r in api.side_requests] == ["/v1beta/models/m:countTokens"]


@pytest.mark.parametrize(("action", "status"), [(Action(status=429, retry_after=1), 429), (Action(status=500), 500)])
def test_a_scripted_error_is_the_api_s_error_body(action: Action, status: int) -> None:
    with ScriptedGeminiAPI() as api:
        api.queue(action)
        got, _, data = _post(f"{api.url}/v1beta/models/m:generateContent", {"contents": []})
        assert got == status and json.loads(data)["error"]["code"] == status
        assert api.statuses() == [status]
        got, _, data = _post(f"{api.url}/v1beta/models/m:generateContent", {"contents": []})
        assert got == 200 and json.loads(data)["candidates"][0]["content"]["parts"] == [{"text": "Scripted reply"}]


def test_an_unknown_route_or_a_body_that_is_not_json_is_refused() -> None:
    with ScriptedGeminiAPI() as api:
        assert _post(f"{api.url}/v1/chat/completions", {})[0] == 404
        assert _post(f"{api.url}/v1beta/models/m:generateContent", b"{ nope")[0] == 400
        assert api.requests == []
