"""Claude Code hook payloads -> worker requests. Standard library only (hook hot path).

One function, :func:`api_call`, maps the JSON Claude Code writes on a hook's stdin
to the request the worker expects, or ``None`` for stages that carry nothing to
store (PreToolUse, SubagentStart). SessionStart maps to a context request;
SubagentStop to an observation of the subagent's final report; Stop and PreCompact to a
summary of the session so far. Unknown fields are
ignored and missing optional fields are fine. Hooks, backfill and the benchmark all
build their requests with :func:`encoded_call`, so they send the same thing.
"""

from __future__ import annotations

from sessionmem.protocol import fastjson
from sessionmem.protocol.agents import AGENT_FIELD, DEFAULT_AGENT
from sessionmem.protocol.fields import clean_text, clean_value
from sessionmem.protocol.limits import FIELD_CAP
from sessionmem.protocol.project import project_of
from sessionmem.protocol.routes import (
    COMPLETE,
    CONTEXT,
    IDEMPOTENCY_KEY,
    INIT,
    OBSERVATIONS,
    OCCURRED_AT,
    PROJECT_KEY,
    SHARE_FILE_FIELD,
    SUMMARIZE,
)

TYPE_CHECKING = False  # typing costs a hook ~4 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

    from sessionmem.protocol.git_remote import RepositoryIdentity

TASK_NOTIFICATION = "<task-notification>"
TOOL_FIELDS = ("tool_input", "tool_response")
TEXT_FIELDS = ("error", "last_user_message", "last_assistant_message", "reason")
# Stages that summarize the session so far: the end of a turn, and the moment before Claude Code
# compacts the conversation (the checkpoint SessionStart ``source=compact`` hands back first).
CHECKPOINT_STAGES = ("Stop", "PreCompact")


def is_internal_prompt(prompt: str) -> bool:
    """Background subagent results arrive as prompts; they are protocol, not the user."""
    return prompt.lstrip().startswith(TASK_NOTIFICATION)


def text_field(payload: dict[str, Any], key: str) -> str:
    """A payload field that must be text: a string as it is, anything else empty or as its JSON."""
    value = payload.get(key)
    if isinstance(value, str):
        return value
    return "" if value is None else fastjson.dumps(value)


def api_call(payload: dict[str, Any], *, project: str | None = None, identity: RepositoryIdentity | None = None,
             agent: str = DEFAULT_AGENT) -> tuple[str, str, dict[str, Any] | None] | None:
    """``(method, path, body)`` for a hook payload, or ``None`` when nothing is sent.

    Claude Code's fields are taken as they come; a text field of another type (from
    a broken or hostile payload) is sent as its JSON text, never an error. A prompt
    carries its repository's identity (:func:`~.git_remote.repository_identity` of
    ``cwd``, unless the caller knows it: ``identity``), which its session keeps.
    ``agent``: the agent whose hook this is (:mod:`.agents`), named in every request
    but Claude Code's (the default, which the worker assumes when none is named).
    """
    event = text_field(payload, "hook_event_name") or text_field(payload, "event")
    session_id = text_field(payload, "session_id")
    cwd = text_field(payload, "cwd")
    project = project or project_of(cwd)
    base = {"claudeSessionId": session_id, "cwd": cwd, "project": project}
    if agent != DEFAULT_AGENT:  # the agent whose hook sent it; none is Claude Code's (hooks from before agents)
        base[AGENT_FIELD] = agent

    if event == "SessionStart":
        return _session_start_call(payload, base, identity)
    if event == "UserPromptSubmit":
        return _prompt_call(payload, base, identity)
    if event in ("PostToolUse", "PostToolUseFailure"):
        return _tool_use_call(payload, base, event)
    if event == "SubagentStop":
        return _subagent_stop_call(payload, base)
    if event in CHECKPOINT_STAGES:
        body: dict[str, Any] = {**base, "last_user_message": text_field(payload, "last_user_message"),
                "last_assistant_message": text_field(payload, "last_assistant_message")}
        if event == "PreCompact":  # the worker then knows that what it told the session is gone from its context
            body["compacting"] = True
        return "POST", SUMMARIZE, body
    if event == "SessionEnd":
        return "POST", COMPLETE, {**base, "reason": text_field(payload, "reason")}
    return None


def _session_start_call(payload: dict[str, Any], base: dict[str, Any],
                        identity: RepositoryIdentity | None) -> tuple[str, str, None]:
    """SessionStart asks for the context to inject (a GET: nothing is stored)."""
    import urllib.parse  # only this stage needs it

    # The working directory: its CLAUDE.md files and auto memory say what the handover need not say again.
    query = {"project": base["project"], "session": base["claudeSessionId"], "source": text_field(payload, "source"),
             "cwd": base["cwd"], AGENT_FIELD: base.get(AGENT_FIELD, "")}
    # A repository that commits the share file asks to share: the worker says whether to tell the user.
    if identity is None:
        from sessionmem.protocol.git_remote import repository_identity

        identity = repository_identity(base["cwd"])
    if identity.share_file:
        query.update({PROJECT_KEY: identity.project_key, SHARE_FILE_FIELD: "1"})
    return "GET", CONTEXT + "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v}), None


def _prompt_call(payload: dict[str, Any], base: dict[str, Any],
                 identity: RepositoryIdentity | None) -> tuple[str, str, dict[str, Any]]:
    """A prompt starts a turn, with its repository's identity between machines."""
    # The project's identity between machines is known where the directory is: a few small
    # file reads once per prompt (~0.1 ms, project_of ~0.04 ms, on a local disk), and an
    # import (~0.25 ms) that the tool-use stages never pay.
    if identity is None:
        from sessionmem.protocol.git_remote import repository_identity

        identity = repository_identity(base["cwd"])
    body: dict[str, Any] = {**base, "prompt": text_field(payload, "prompt")}
    if identity.project_key:
        body[PROJECT_KEY] = identity.project_key
    if identity.share_file:
        body[SHARE_FILE_FIELD] = True
    return "POST", INIT, body


def _tool_use_call(payload: dict[str, Any], base: dict[str, Any], event: str) -> tuple[str, str, dict[str, Any]]:
    """A tool use, done or failed: an observation."""
    body = {
        **base,
        "tool_name": text_field(payload, "tool_name"),
        "tool_input": payload.get("tool_input"),
        "tool_response": payload.get("tool_response"),
        "tool_use_id": text_field(payload, "tool_use_id"),
        "agent_id": text_field(payload, "agent_id"),
        "agent_type": text_field(payload, "agent_type"),
        "hook_event_name": event,
    }
    if event == "PostToolUseFailure":
        body["failed"] = True
        body["error"] = text_field(payload, "error")
    return "POST", OBSERVATIONS, body


def _subagent_stop_call(payload: dict[str, Any], base: dict[str, Any]) -> tuple[str, str, dict[str, Any]] | None:
    """A background subagent's report, kept as an observation: it reaches the main agent only as a
    <task-notification>, which is not a user prompt."""
    report = text_field(payload, "last_assistant_message")
    agent_id = text_field(payload, "agent_id")
    if not report or not text_field(payload, "agent_type"):
        # Without a type it is Claude Code's own agent, not one the model started: /compact's
        # report is a recap of the whole conversation, which would come back as memory.
        return None
    import zlib  # here: ~0.4 ms of every hook's start for the one stage that needs it

    return "POST", OBSERVATIONS, {
        **base,
        "tool_name": "SubagentStop",
        # One subagent can stop more than once (resumed): each report is its own observation,
        # and the same report sent again (a retry, a backfill run twice) is the same one.
        "tool_use_id": f"subagent-{agent_id}-{zlib.crc32(report.encode('utf-8', 'replace')):08x}"
        if agent_id else "",
        "tool_input": {"agent_type": text_field(payload, "agent_type")},
        "tool_response": report,
        "agent_id": agent_id,
        "agent_type": text_field(payload, "agent_type"),
        "hook_event_name": "SubagentStop",
    }


def clean_body(body: dict[str, Any], cap: int = FIELD_CAP) -> dict[str, Any]:
    """A request body without private spans, its tool and text fields each bounded by ``cap``.

    The worker does the same to whatever reaches it (:mod:`.fields`), with the same
    cap, so its pass over a body cleaned here changes nothing.
    """
    cleaned = dict(body)
    if isinstance(cleaned.get("prompt"), str):
        cleaned["prompt"] = clean_text(cleaned["prompt"], cap)
    for key in TOOL_FIELDS:
        if key in cleaned:
            cleaned[key] = clean_value(cleaned[key], cap)
    for key in TEXT_FIELDS:
        if isinstance(cleaned.get(key), str):
            cleaned[key] = clean_text(cleaned[key], cap)
    return cleaned


def encoded_call(payload: dict[str, Any], *, project: str, key: str = "", cap: int = FIELD_CAP,
                 occurred_at: float = 0.0, identity: RepositoryIdentity | None = None,
                 agent: str = DEFAULT_AGENT) -> tuple[str, str, bytes | None] | None:
    """:func:`api_call` ready to send: fields cleaned and bounded, an idempotency key and the time the
    event happened if given (backfill knows it from the transcript), JSON bytes."""
    call = api_call(payload, project=project, identity=identity, agent=agent)
    if call is None:
        return None
    method, path, body = call
    if body is None:
        return method, path, None
    body = clean_body(body, cap)
    if key:
        body[IDEMPOTENCY_KEY] = key
    if occurred_at > 0:
        body[OCCURRED_AT] = occurred_at
    return method, path, fastjson.dumps(body).encode("utf-8")
