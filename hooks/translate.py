"""Claude Code hook payloads -> worker API calls. Standard library only (hook hot path).

One function, :func:`api_call`, maps the JSON Claude Code writes on a hook's stdin
to the request the worker expects, or ``None`` for stages that carry nothing to
store (PreToolUse, SubagentStart). SessionStart maps to a context request;
SubagentStop to an observation of the subagent's final report.
Unknown fields are ignored and missing optional fields are fine.
"""

from __future__ import annotations

import os

from sessionmem.hooks import fastjson
from sessionmem.limits import head_tail, shorten_strings
from sessionmem.privacy import strip_private_deep

TYPE_CHECKING = False  # typing costs a hook ~4 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

TASK_NOTIFICATION = "<task-notification>"
BODY_LIMIT = 4 * 1024 * 1024  # below the worker's default 5 MB limit
STRING_CAP = 256 * 1024


def is_internal_prompt(prompt: str) -> bool:
    """Background subagent results arrive as prompts; they are protocol, not the user."""
    return prompt.lstrip().startswith(TASK_NOTIFICATION)


def api_call(payload: dict[str, Any], *, project: str | None = None) -> tuple[str, str, dict[str, Any] | None] | None:
    """``(method, path, body)`` for a hook payload, or ``None`` when nothing is sent."""
    event = payload.get("hook_event_name") or payload.get("event") or ""
    session_id = payload.get("session_id") or ""
    cwd = payload.get("cwd") or ""
    project = project or (os.path.basename(cwd.rstrip("/")) if cwd else "")
    base = {"claudeSessionId": session_id, "cwd": cwd, "project": project}

    if event == "SessionStart":
        import urllib.parse  # only this stage needs it

        return "GET", "/api/context/inject?" + urllib.parse.urlencode({"project": project}), None
    if event == "UserPromptSubmit":
        return "POST", "/api/sessions/init", {**base, "prompt": payload.get("prompt") or ""}
    if event in ("PostToolUse", "PostToolUseFailure"):
        body = {
            **base,
            "tool_name": payload.get("tool_name") or "",
            "tool_input": payload.get("tool_input"),
            "tool_response": payload.get("tool_response"),
            "tool_use_id": payload.get("tool_use_id") or "",
            "agent_id": payload.get("agent_id") or "",
            "agent_type": payload.get("agent_type") or "",
            "hook_event_name": event,
        }
        if event == "PostToolUseFailure":
            body["failed"] = True
            body["error"] = str(payload.get("error") or "")
        return "POST", "/api/sessions/observations", body
    if event == "SubagentStop":
        # A background subagent's findings reach the main agent only as a
        # <task-notification>, which is not a user prompt: keep them as an observation.
        report = str(payload.get("last_assistant_message") or "")
        agent_id = str(payload.get("agent_id") or "")
        if not report:
            return None
        return "POST", "/api/sessions/observations", {
            **base,
            "tool_name": "SubagentStop",
            "tool_use_id": f"subagent-{agent_id}" if agent_id else "",
            "tool_input": {"agent_type": payload.get("agent_type") or ""},
            "tool_response": report,
            "agent_id": agent_id,
            "agent_type": payload.get("agent_type") or "",
            "hook_event_name": event,
        }
    if event == "Stop":
        return "POST", "/api/sessions/summarize", {
            **base,
            "last_user_message": payload.get("last_user_message") or "",
            "last_assistant_message": payload.get("last_assistant_message") or "",
        }
    if event == "SessionEnd":
        return "POST", "/api/sessions/complete", {**base, "reason": payload.get("reason") or ""}
    return None


def bounded_tool_body(body: dict[str, Any]) -> dict[str, Any]:
    """Strip private spans from a tool-use body and bound its size (head + tail of long strings).

    Bodies without tool data pass through unchanged.
    """
    if not any(key in body for key in ("tool_input", "tool_response", "error")):
        return body
    body = dict(body)
    encoded = fastjson.dumps(body)
    if "<private>" in encoded or "<sessionmem-context>" in encoded:  # rare: walk only then
        for key in ("tool_input", "tool_response", "error"):
            if key in body:
                body[key] = strip_private_deep(body[key])
        encoded = fastjson.dumps(body)
    if len(encoded) <= STRING_CAP:
        return body  # no string inside can be over the cap: the common case ends here
    for key in ("tool_input", "tool_response", "error"):
        if key in body:
            body[key] = shorten_strings(body[key], STRING_CAP)
    size = len(fastjson.dumps(body).encode("utf-8"))
    if size > BODY_LIMIT:
        # Many long strings: keep head and tail of the whole response as one string.
        response = fastjson.dumps(body.get("tool_response"))
        body["tool_response"] = head_tail(response, max(BODY_LIMIT - (size - len(response)) - 1024, 4096))
    return body


def encoded_call(payload: dict[str, Any], *, project: str, key: str = "") -> tuple[str, str, bytes | None] | None:
    """:func:`api_call` ready to send: tool bodies bounded, an idempotency key if given, JSON bytes.

    The one way hooks, backfill and the benchmark turn a hook payload into a request.
    """
    call = api_call(payload, project=project)
    if call is None:
        return None
    method, path, body = call
    if body is None:
        return method, path, None
    body = bounded_tool_body(body)
    if key:
        body = {**body, "idempotencyKey": key}
    return method, path, fastjson.dumps(body).encode("utf-8")
