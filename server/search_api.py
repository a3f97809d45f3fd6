"""The read half over HTTP: search, timeline, and observations by id.

``GET /api/search``, ``GET /api/timeline`` and ``POST /api/observations/batch``
(paths in :mod:`sessionmem.protocol.routes`). Query parameters are checked here and
a bad one is a 400 naming it (``?since``); the answers are typed records. Search reads
this machine's memory, or with ``source=team`` the team database itself; the timeline
and the batch read this machine's memory only.

Dates (``since``, ``until``) are ISO 8601 (``2026-11-01``, ``2026-11-01T14:30``,
with or without an offset; local time without one), Unix seconds, or an age:
``30m``, ``12h``, ``7d``, ``2w`` ago.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any

import msgspec
from quart import Response, request
from quart_trio import QuartTrio

from sessionmem.protocol import routes
from sessionmem.protocol.agents import DEFAULT_AGENT
from sessionmem.protocol.limits import (
    MAX_BATCH_IDS,
    MAX_QUERY_CHARS,
    MAX_SEARCH_OFFSET,
    MAX_SEARCH_RESULTS,
    MAX_TIMELINE_SIDE,
)
from sessionmem.records import (
    DOCUMENT_KINDS,
    OBSERVATION,
    OBSERVATION_TYPES,
    DocumentCard,
    ObservationRow,
    SearchFilters,
)
from sessionmem.search.hybrid import SearchMode, SearchSource
from sessionmem.search.snippets import snippet
from sessionmem.search.team_search import TeamSearch
from sessionmem.server.jsonapi import to_api
from sessionmem.server.payloads import BadRequest, decode
from sessionmem.server.routing import (
    agent_arg,
    error_response,
    flag_arg,
    int_arg,
    json_response,
    list_arg,
    origin_arg,
    project_arg,
    text_arg,
)
from sessionmem.server.services import Services
from sessionmem.storage.pg.errors import TeamUnavailable

_AGE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_AGE_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class BatchRequest(msgspec.Struct, frozen=True):
    ids: Annotated[list[Annotated[int, msgspec.Meta(ge=1, le=2**63 - 1)]], msgspec.Meta(max_length=MAX_BATCH_IDS)]


async def marked(services: Services, rows: Sequence[ObservationRow]) -> list[Any]:
    """``rows`` as the API writes them, each that consolidation says something of with its ``consolidation``
    (:class:`~sessionmem.storage.consolidation_rules.Marks`: merged into or superseded by, what it merged or
    superseded, how often it was handed over and used)."""
    marks = await services.consolidator.marks(rows)
    return [{**to_api(row), "consolidation": to_api(marks[row.id])} if row.id in marks else row for row in rows]


class BatchReply(msgspec.Struct, frozen=True):
    observations: list[Any]  # ObservationRow, in the order asked (marked)
    missing: list[int]


class TimelineEntry(msgspec.Struct, frozen=True, kw_only=True):
    kind: str
    id: int
    anchor: bool
    claude_session_id: str
    prompt_number: int
    created_at: float
    type: str
    title: str
    snippet: str
    files: list[str]
    origin: str  # "" this machine's own; else "user@machine"
    provenance: str = "tool"  # where its text came from (a records.Provenance value)
    flagged: bool = False  # it holds (quoted) instruction-like text, or was made from some
    agent: str = DEFAULT_AGENT  # the agent whose session made it (protocol/agents.py)


class Timeline(msgspec.Struct, frozen=True):
    anchor_kind: str
    anchor_id: int
    project: str
    entries: list[TimelineEntry]  # oldest first


def parse_moment(raw: str, name: str, *, now: float | None = None) -> float:
    """A date parameter (see the module docstring) as Unix seconds; :class:`BadRequest` if it is none."""
    text = raw.strip()
    age = _AGE.match(text.lower())
    if age:
        return (time.time() if now is None else now) - float(age[1]) * _AGE_SECONDS[age[2]]
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if math.isfinite(seconds):
            return seconds
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise BadRequest(f"query parameter {name!r} must be a date (2026-11-01, 2026-11-01T14:30), Unix seconds "
                         f"or an age (12h, 7d), got {raw[:100]!r}", f"?{name}") from None
    try:
        return moment.timestamp()  # naive: local time
    except (ValueError, OverflowError, OSError):  # a year the platform's clock cannot hold (0001, say)
        if moment.year < 1970:
            return 0.0  # before anything was stored
        raise BadRequest(f"query parameter {name!r} is out of range: {raw[:100]!r}", f"?{name}") from None


def filters_from_query() -> SearchFilters:
    """``project``, ``kind``, ``type``, ``since``, ``until``, ``file``, ``concept``, ``session``, ``origin``,
    ``flagged``, ``agent``."""
    since, until = request.args.get("since"), request.args.get("until")
    return SearchFilters(
        project=project_arg(),
        kinds=list_arg("kind", DOCUMENT_KINDS) or DOCUMENT_KINDS,
        types=list_arg("type", OBSERVATION_TYPES),
        since=parse_moment(since, "since") if since and since.strip() else None,
        until=parse_moment(until, "until") if until and until.strip() else None,
        file=text_arg("file", limit=4096),
        concept=text_arg("concept", limit=200),
        claude_session_id=text_arg("session", limit=256),
        origin=origin_arg(),
        flagged=flag_arg("flagged"),
        agent=agent_arg(),
    )


def query_text(*, required: bool) -> str:
    raw = request.args.get("q", "")
    if len(raw) > MAX_QUERY_CHARS:
        raise BadRequest(f"query parameter 'q' is longer than {MAX_QUERY_CHARS} characters", "?q")
    if required and not raw.strip():
        raise BadRequest("query parameter 'q' is required: the words or the meaning to look for", "?q")
    return raw.strip()


def _entry(card: DocumentCard, anchor: tuple[str, int]) -> TimelineEntry:
    return TimelineEntry(kind=card.kind, id=card.id, anchor=(card.kind, card.id) == anchor,
                         claude_session_id=card.claude_session_id, prompt_number=card.prompt_number,
                         created_at=card.created_at, type=card.type, title=card.title,
                         snippet=snippet(card.text, []), files=card.files, origin=card.origin,
                         provenance=card.provenance, flagged=card.flagged, agent=card.agent)


def _anchor(raw: str) -> tuple[str, int]:
    """``123`` (an observation) or ``summary:12`` / ``prompt:7`` / ``observation:123``."""
    kind, _, number = raw.strip().rpartition(":")
    kind = kind.lower() or OBSERVATION
    if kind not in DOCUMENT_KINDS or not number.isdigit() or not 0 < int(number) < 2**63:
        raise BadRequest(f"query parameter 'anchor' must be an observation id, or kind:id with a kind of "
                         f"{', '.join(DOCUMENT_KINDS)}; got {raw[:100]!r}", "?anchor")
    return kind, int(number)


async def team_search_reply(services: Services, team_search: TeamSearch, query: str, filters: SearchFilters, *,
                            mode: SearchMode, limit: int, offset: int) -> Response:
    """``?source=team``: the team database searched itself (:mod:`sessionmem.search.team_search`); a 400 when
    this worker has none, a 503 (without Retry-After: asking again at once will not help) when it cannot
    be reached."""
    if services.team is None:
        raise BadRequest("no team database is configured: set database_url (SESSIONMEM_DATABASE_URL) to search "
                         "it (source=team)", "?source")
    if filters.flagged:  # its rows are checked as they are shown, not stored with a flag to filter on
        raise BadRequest("flagged filters this machine's memory, not the team database (source=team)", "?flagged")
    if filters.agent is not None:  # the team database does not hold which agent made a row
        raise BadRequest("agent filters this machine's memory, not the team database (source=team)", "?agent")
    team = services.team.store()
    if team is None:
        return error_response(503, "the team database is not open yet: the worker is starting or stopping")
    try:
        results = await team_search.search(team, query, filters, mode=mode, limit=limit, offset=offset)
    except TeamUnavailable as exc:  # its message never holds the password
        return error_response(503, f"the team database cannot be searched: {exc}")
    return json_response(results)


def add_search_routes(app: QuartTrio, services: Services) -> None:
    search = services.search
    team_search = TeamSearch(services.index, services.embedder)

    def mode_arg() -> SearchMode:
        mode_raw = (request.args.get("mode") or SearchMode.HYBRID.value).lower()
        try:
            return SearchMode(mode_raw)
        except ValueError:
            raise BadRequest(f"query parameter 'mode' must be one of {', '.join(m.value for m in SearchMode)}",
                             "?mode") from None

    def source_arg() -> SearchSource:
        source = (request.args.get("source") or routes.SEARCH_SOURCES[0]).lower()
        try:
            return SearchSource(source)
        except ValueError:
            raise BadRequest(f"query parameter 'source' must be one of {', '.join(routes.SEARCH_SOURCES)}",
                             "?source") from None

    @app.get(routes.SEARCH)
    async def search_route() -> Response:
        query = query_text(required=True)
        mode = mode_arg()
        source = source_arg()
        filters = filters_from_query()
        limit = int_arg("limit", 20, low=1, high=MAX_SEARCH_RESULTS)
        offset = int_arg("offset", 0, low=0, high=MAX_SEARCH_OFFSET)
        if source is SearchSource.TEAM:
            return await team_search_reply(services, team_search, query, filters, mode=mode, limit=limit,
                                           offset=offset)
        return json_response(await search.search(query, filters, mode=mode, limit=limit, offset=offset))

    @app.get(routes.TIMELINE)
    async def timeline_route() -> Response:
        before = int_arg("before", 5, low=0, high=MAX_TIMELINE_SIDE)
        after = int_arg("after", 5, low=0, high=MAX_TIMELINE_SIDE)
        raw_anchor = request.args.get("anchor", "")
        if raw_anchor.strip():
            anchor = _anchor(raw_anchor)
        else:
            query = query_text(required=False)
            if not query:
                raise BadRequest("give 'anchor' (an observation id, or kind:id) or 'q' (a search whose best "
                                 "result is the anchor)", "?anchor")
            best = await search.search(query, filters_from_query(), mode=mode_arg(), limit=1)
            if not best.results:
                return error_response(404, f"nothing found for {query[:100]!r}", path="?q")
            anchor = (best.results[0].kind, best.results[0].id)
        cards = await services.store.timeline(anchor, before=before, after=after, origin=origin_arg())
        if cards is None:
            return error_response(404, f"no {anchor[0]} with id {anchor[1]}", path="?anchor")
        project = next((card.project for card in cards if (card.kind, card.id) == anchor), "")
        return json_response(Timeline(anchor[0], anchor[1], project, [_entry(card, anchor) for card in cards]))

    @app.post(routes.OBSERVATION_BATCH)
    async def observations_batch() -> Response:
        wanted = decode(await request.get_data(cache=False, as_text=False, parse_form_data=False), BatchRequest).ids
        found = await services.store.observations_by_ids(wanted)
        present = {row.id for row in found}
        services.consolidator.fetched(list(present))  # fetched whole (MCP, the CLI): used
        return json_response(BatchReply(await marked(services, found),
                                        [i for i in dict.fromkeys(wanted) if i not in present]))
