"""The events a session goes through, as journaled and as delivered to its actor.

These are the only messages a session actor receives, strictly in journal order:
``init`` (a prompt), ``observation`` (a tool use), ``summarize`` (a Stop), ``complete``
(a SessionEnd). They are frozen msgspec Structs in one tagged union, so the journal
stores exactly what the actor will later receive and a replay after a crash is
indistinguishable from live delivery.

New fields must always get defaults: journals written by older versions must decode.
``agent`` is the agent whose hook sent it (``sessionmem.protocol.agents``; absent, as in
journals written before it existed: Claude Code); the session keeps its first event's.
``occurred_at`` is when the event happened, when a client knows better than the
arrival (backfill: the transcript's time); 0 means "when it arrived".
Fields are never renamed on the wire: ``claude_session_id`` (Claude Code's session id,
not the integer ``session_db_id`` of its row) is stored as ``session_id``, the name
journals have always used.
"""

from __future__ import annotations

from typing import Any

import msgspec

from sessionmem.protocol.agents import DEFAULT_AGENT


class InitEvent(msgspec.Struct, frozen=True, tag="init", tag_field="kind", omit_defaults=True):
    claude_session_id: str = msgspec.field(name="session_id")
    project: str
    cwd: str = ""
    prompt: str = ""
    prompt_number: int = 0
    skip_reason: str = ""  # why ``prompt`` is empty although the hook sent one
    key: str = ""  # idempotency key: a second event with the same key is not journaled again
    occurred_at: float = 0.0
    agent: str = DEFAULT_AGENT
    project_key: str = ""  # normalized git remote (protocol/git_remote.py): the project between machines
    share_file: bool = False  # the repository root holds the team opt-in file


class ObservationEvent(msgspec.Struct, frozen=True, tag="observation", tag_field="kind", omit_defaults=True):
    claude_session_id: str = msgspec.field(name="session_id")
    project: str
    tool_name: str
    tool_use_id: str = ""
    tool_input: Any = None
    tool_response: Any = None
    cwd: str = ""
    agent_id: str = ""
    agent_type: str = ""
    failed: bool = False
    error: str = ""
    prompt_number: int = 0
    key: str = ""
    occurred_at: float = 0.0
    agent: str = DEFAULT_AGENT


class SummarizeEvent(msgspec.Struct, frozen=True, tag="summarize", tag_field="kind", omit_defaults=True):
    claude_session_id: str = msgspec.field(name="session_id")
    project: str
    last_user_message: str = ""
    last_assistant_message: str = ""
    prompt_number: int = 0
    key: str = ""
    occurred_at: float = 0.0
    agent: str = DEFAULT_AGENT


class CompleteEvent(msgspec.Struct, frozen=True, tag="complete", tag_field="kind", omit_defaults=True):
    claude_session_id: str = msgspec.field(name="session_id")
    project: str = ""
    reason: str = ""
    key: str = ""
    occurred_at: float = 0.0
    agent: str = DEFAULT_AGENT


Event = InitEvent | ObservationEvent | SummarizeEvent | CompleteEvent


class Envelope(msgspec.Struct, frozen=True):
    """A journaled event: ``event_id`` is its journal row, i.e. its arrival order."""

    event_id: int
    event: Event


_encoder = msgspec.json.Encoder()
_decoder: msgspec.json.Decoder[Event] = msgspec.json.Decoder(Event)


def encode_event(event: Event) -> bytes:
    return _encoder.encode(event)


def decode_event(payload: bytes) -> Event:
    return _decoder.decode(payload)


def event_kind(event: Event) -> str:
    return str(type(event).__struct_config__.tag)  # each kind's tag is its name
