"""Request bodies and ingest replies of the HTTP API, decoded and validated by msgspec.

Field names are the contract's (:data:`sessionmem.protocol.routes.BODY_FIELDS`, which
a test holds these structs to): the claude-mem hook lifecycle reference's camelCase
ids and Claude Code's own snake_case tool fields. Unknown fields are ignored (never
``forbid_unknown_fields`` on input from outside), optional fields have defaults, and a
validation error names the offending path, which the route returns as the 400 body.
Replies are records like any other, written in camelCase at the edge
(:mod:`sessionmem.server.jsonapi`).
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

import msgspec

from sessionmem.protocol.agents import AGENTS, DEFAULT_AGENT, known_agent
from sessionmem.protocol.limits import MAX_PATH, MAX_SESSION_ID
from sessionmem.records import Identifier, PathText, SessionId, ToolName


class _SessionBody(msgspec.Struct, frozen=True, kw_only=True):
    """Fields every ingest body shares."""

    claudeSessionId: SessionId
    cwd: PathText = ""
    project: PathText = ""
    idempotencyKey: Identifier = ""  # an event with a key seen before is not stored again
    occurredAt: Annotated[float, msgspec.Meta(ge=0, le=1e11)] = 0.0  # when it happened (Unix s); 0: on arrival
    # The agent whose hook sent it (protocol/agents.py); absent: Claude Code. Its session keeps the first one named.
    agent: Identifier = DEFAULT_AGENT

    def __post_init__(self) -> None:
        if not known_agent(self.agent):  # a label from outside: one of ours, or nothing is stored
            raise ValueError(f"unknown agent {self.agent[:100]!r} in `agent`: expected one of {', '.join(AGENTS)}")


class InitRequest(_SessionBody, frozen=True, kw_only=True):
    prompt: str = ""
    # The repository's identity between machines and its opt-in file (protocol/git_remote.py);
    # the worker re-normalizes the key, so one with credentials or a path is never stored.
    projectKey: Annotated[str, msgspec.Meta(max_length=MAX_PATH)] = ""
    shareFile: bool = False


class LegacyInitRequest(msgspec.Struct, frozen=True):
    """``POST /sessions/{sessionDbId}/init`` of the reference."""

    project: str = ""
    userPrompt: str = ""
    promptNumber: int | None = None


class ObservationRequest(_SessionBody, frozen=True, kw_only=True):
    tool_name: ToolName
    tool_input: Any = None
    tool_response: Any = None
    tool_use_id: Identifier = ""
    agent_id: Identifier = ""
    agent_type: Identifier = ""
    hook_event_name: Identifier = ""
    error: str = ""
    failed: bool = False


class SummarizeRequest(_SessionBody, frozen=True, kw_only=True):
    last_user_message: str = ""
    last_assistant_message: str = ""
    compacting: bool = False  # a PreCompact's checkpoint: the agent compacts the session's context next


class CompleteRequest(_SessionBody, frozen=True, kw_only=True):
    reason: str = ""


class ProcessingRequest(msgspec.Struct, frozen=True):
    claudeSessionId: str = ""


T = TypeVar("T")


# -- replies ------------------------------------------------------------------------------


class PromptAccepted(msgspec.Struct, frozen=True, omit_defaults=True):
    """``POST /api/sessions/init``: the prompt is stored (or why it was not)."""

    session_db_id: int
    prompt_number: int
    skipped: bool
    reason: str | None
    duplicate: bool  # an event with the same idempotency key was accepted before
    additional_context: str = ""  # past work relevant to the prompt (prompt recall, opt-in), for Claude


class EventAccepted(msgspec.Struct, frozen=True, omit_defaults=True):
    """The other ingest routes: the event is journaled (202)."""

    status: str  # accepted | duplicate | parked (its session failed: kept, not processed)
    event_id: int
    session_db_id: int
    prompt_number: int
    additional_context: str = ""  # past work on the file the tool touched (file recall), for Claude

    @property
    def duplicate(self) -> bool:
        return self.status == "duplicate"


class ToolSkipped(msgspec.Struct, frozen=True):
    """An observation of a tool on the skip list: not stored (200)."""

    reason: str
    status: str = "skipped"
    duplicate: bool = False


class ErrorReply(msgspec.Struct, frozen=True, omit_defaults=True):
    error: str
    path: str = ""  # the JSON path at fault, for a 400


IngestReply = PromptAccepted | EventAccepted | ToolSkipped


class BadRequest(Exception):
    def __init__(self, message: str, path: str = "$") -> None:
        super().__init__(message)
        self.message = message
        self.path = path


_decoders: dict[type, msgspec.json.Decoder[Any]] = {}


def decode(body: bytes, kind: type[T]) -> T:
    """Decode ``body`` as ``kind``; raises :class:`BadRequest` with the JSON path at fault."""
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.json.Decoder(kind)
    if not body.strip():
        raise BadRequest("request body is empty; expected a JSON object")
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        message = str(exc)
        path = "$"
        if " - at `" in message:
            message, _, rest = message.partition(" - at `")
            path = rest.rstrip("`")
        raise BadRequest(message, path) from None
    except msgspec.DecodeError as exc:
        raise BadRequest(f"malformed JSON: {exc}") from None
    except UnicodeDecodeError as exc:  # inside a JSON string
        raise BadRequest(f"malformed JSON: a string is not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    except RecursionError:
        raise BadRequest("malformed JSON: nested too deeply") from None


class _SessionNamed(msgspec.Struct, frozen=True):
    claudeSessionId: str = ""


_session_named = msgspec.json.Decoder(_SessionNamed)


def session_named(body: bytes) -> str:
    """The ``claudeSessionId`` an ingest body names, for the log line of a fault (``""`` when it names
    none or is not a JSON object). Read only once a request failed: an accept decodes its body once."""
    try:
        return _session_named.decode(body).claudeSessionId[:MAX_SESSION_ID]
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return ""
