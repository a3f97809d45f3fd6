"""What the Quart routes share: JSON answers, error answers, checked query arguments, rules.

A bad query argument raises :class:`~sessionmem.server.payloads.BadRequest` naming it
(``?limit``), which the app answers as a 400.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

from quart import Response, request

from sessionmem.protocol.agents import AGENT_FIELD, AGENTS, known_agent
from sessionmem.protocol.limits import MAX_PAGE
from sessionmem.protocol.project import ALL_PROJECTS
from sessionmem.server.jsonapi import encode
from sessionmem.server.payloads import BadRequest, ErrorReply

ROW_ID = "int(max=9223372036854775807)"  # SQLite's largest rowid: a larger id is no route (404), not an overflow


def rule(path: str, **converters: str) -> str:
    """A contract path (``/api/observations/{observation_id}``) as a Quart rule (``<int:observation_id>``)."""
    return re.sub(r"\{(\w+)\}", lambda m: f"<{converters[m[1]]}:{m[1]}>" if m[1] in converters else f"<{m[1]}>",
                  path)


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(encode(data), status=status, headers=headers, content_type="application/json")


def sse_message(event: str, data: bytes) -> bytes:
    """One Server-Sent Event: ``data`` is one line of JSON."""
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"


def sse_response(events: AsyncIterator[bytes]) -> Response:
    """An open-ended ``text/event-stream`` answer (no response timeout) of ``events``."""
    response = Response(events, content_type="text/event-stream")
    response.headers["Cache-Control"] = "no-cache"
    response.timeout = None
    return response


def error_response(status: int, message: str, *, path: str = "", retry_after: int | None = None) -> Response:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return json_response(ErrorReply(message, path), status, headers)


def int_arg(name: str, default: int, *, low: int = 0, high: int = MAX_PAGE) -> int:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"query parameter {name!r} must be an integer, got {raw[:100]!r}", f"?{name}") from None
    if not low <= value <= high:
        raise BadRequest(f"query parameter {name!r} must be between {low} and {high}", f"?{name}")
    return value


def project_arg() -> str | None:
    """The ``project`` filter: ``None`` (every project) if absent, blank or ``*``, as the MCP tools and the
    command line say it."""
    project = text_arg("project")
    return None if project == ALL_PROJECTS else project


MAX_ORIGIN = 300  # "user@machine": two names a person chose


def origin_arg() -> str | None:
    """The ``origin`` filter (``SearchFilters.origin``): ``None`` (every origin) if absent, blank or ``*``."""
    origin = text_arg("origin", limit=MAX_ORIGIN)
    return None if origin == ALL_PROJECTS else origin


def agent_arg() -> str | None:
    """The ``agent`` filter (``SearchFilters.agent``): ``None`` (every agent) if absent, blank or ``*``; a name
    not in :data:`~sessionmem.protocol.agents.AGENTS` is a 400 naming the known ones."""
    agent = text_arg(AGENT_FIELD, limit=100)
    if agent is None or agent == ALL_PROJECTS:
        return None
    if not known_agent(agent):
        raise BadRequest(f"query parameter 'agent' must be one of {', '.join(AGENTS)}; got {agent!r}", "?agent")
    return agent


def flag_arg(name: str) -> bool:
    """A yes/no argument: ``1``, ``true``, ``yes`` or ``0``, ``false``, ``no`` (absent or blank: no); else a 400."""
    raw = (request.args.get(name) or "").strip().lower()
    if raw in ("", "0", "false", "no"):
        return False
    if raw in ("1", "true", "yes"):
        return True
    raise BadRequest(f"query parameter {name!r} must be 1 or 0, got {raw[:100]!r}", f"?{name}")


def text_arg(name: str, *, limit: int = 1000) -> str | None:
    """The stripped argument, ``None`` if absent or blank; longer than ``limit`` is a 400."""
    raw = request.args.get(name)
    if raw is None or not raw.strip():
        return None
    if len(raw) > limit:
        raise BadRequest(f"query parameter {name!r} is longer than {limit} characters", f"?{name}")
    return raw.strip()


def list_arg(name: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """A comma-separated argument whose every value is one of ``allowed`` (lowercase)."""
    raw = request.args.get(name, "")
    values = tuple(dict.fromkeys(part.strip().lower() for part in raw.split(",") if part.strip()))
    unknown = [value for value in values if value not in allowed]
    if unknown:
        raise BadRequest(f"query parameter {name!r}: unknown {unknown[0][:100]!r}; one of {', '.join(allowed)}",
                         f"?{name}")
    return values
