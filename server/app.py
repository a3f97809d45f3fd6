"""The HTTP API (Quart-Trio): hooks post events here, readers and operators query it.

Ingest validates with msgspec, strips private content, journals the event (group
commit) and answers as soon as it is durable; the actors do the rest. The four hot
ingest paths are served by :mod:`sessionmem.server.fast_ingest` in front of Quart.
Paths are the contract's (:mod:`sessionmem.protocol.routes`); every JSON answer is a
typed record written by :mod:`sessionmem.server.jsonapi`.

Error handling:
    Bad input is a 400 naming the JSON path at fault; an oversized body is a 413; a
    full session mailbox is a 503 with ``Retry-After``; an unknown id is a 404.
    Internal faults are answered as 500 JSON, counted in ``/debug`` and logged with the
    session the request names: an ingest body's ``claudeSessionId``, a route's session,
    or the ``session`` query argument. None of these affects any other request or session.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote, unquote_to_bytes, urlencode

import msgspec
import trio
from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from sessionmem.actors.child import MailboxFull
from sessionmem.broadcast import live_event_name
from sessionmem.protocol import routes
from sessionmem.protocol.agents import DEFAULT_AGENT
from sessionmem.protocol.git_remote import MAX_KEY, checked_key
from sessionmem.protocol.limits import HOOK_CONTEXT_MAX_CHARS, MAX_PATH, MAX_QUERY_CHARS, MAX_SESSION_ID
from sessionmem.protocol.routes import CONTEXT_COUNT_HEADER, NOTICE_HEADER, READY, SHARE_REQUEST_HEADER, STARTING
from sessionmem.runtime.logs import log_exception
from sessionmem.search.context import ContextPlan, left_untold
from sessionmem.search.told import Handover
from sessionmem.server.context_markdown import CHARS_PER_TOKEN, RenderedContext, render_handover
from sessionmem.server.debug import processing_status
from sessionmem.server.debug_routes import add_debug_routes
from sessionmem.server.fast_ingest import (
    RETRY_AFTER_S,
    STORAGE_RETRY_AFTER_S,
    FastIngest,
    busy_message,
    fault_message,
    storage_message,
    too_large_message,
)
from sessionmem.server.guard import ACCESS_SCOPE_KEY, LOGIN_CODE_TTL_S, AccessGuard
from sessionmem.server.jsonapi import encode
from sessionmem.server.maintenance_api import add_maintenance_routes
from sessionmem.server.pages import add_page_routes
from sessionmem.server.payloads import BadRequest, InitRequest, LegacyInitRequest, ProcessingRequest, decode
from sessionmem.server.routing import (
    ROW_ID,
    agent_arg,
    error_response,
    flag_arg,
    int_arg,
    json_response,
    origin_arg,
    project_arg,
    rule,
    sse_message,
    sse_response,
    text_arg,
)
from sessionmem.server.search_api import add_search_routes, marked
from sessionmem.server.services import Services
from sessionmem.server.session_locks import SessionLocks
from sessionmem.server.team_api import add_team_routes
from sessionmem.storage.base import StorageUnavailable
from sessionmem.web.assets import PageAssets

log = logging.getLogger(__name__)

# SessionStart sources that continue earlier work: its latest prompt is the focus the
# injected memories are ranked against (a fresh start has none: the most recent).
FOCUSED_SOURCES = ("clear", "compact", "resume")
KEEP_ALIVE_S = 15  # an SSE comment this often keeps idle streams (and their proxies) open
# After a compaction, how long the context waits for the session's actor to store what it has in hand
# (the checkpoint PreCompact sent a moment before): the offline compressor's flush and summary take
# milliseconds; a quarter of the hook's 2 s leaves a loaded machine the rest for the answer (a hook
# out of time prints nothing). An LLM compressor takes longer: the session's own work is then handed
# back as stored so far.
COMPACT_SETTLE_S = 0.5
SETTLE_POLL_S = 0.05  # between commits, how often the actor's finished work is looked at again


class PublicHealth(msgspec.Struct, frozen=True):
    """What the health route tells a caller without the token: any local user can ask."""

    status: str
    version: str


class Health(msgspec.Struct, frozen=True):
    status: str
    pid: int
    version: str
    uptime_seconds: float
    compressor: str
    data_dir: str
    team: bool = False  # team memory is on (database_url): GET /api/team answers


class Replayed(msgspec.Struct, frozen=True):
    claude_session_id: str
    replayed: int


class LoginCode(msgspec.Struct, frozen=True):
    code: str
    url: str  # open it in a browser: the worker sets its cookie and shows the page
    expires_in_seconds: float


def create_app(services: Services) -> AccessGuard:
    """The worker's ASGI app: the access guard (:mod:`.guard`), then the hot ingest routes
    (:mod:`.fast_ingest`), then Quart."""
    # Quart types its ASGI messages as TypedDicts, the layers in front of it as plain dicts.
    quart_app = create_quart_app(services)
    ingest = FastIngest(quart_app, services.ingestor,  # type: ignore[arg-type]
                        max_body_bytes=services.settings.max_body_bytes, on_error=services.status.count_error)
    return services.guard.protect(ingest)


def create_quart_app(services: Services) -> QuartTrio:
    """The Quart app behind the fast ingest path: its error handlers, then each group of routes."""
    app = QuartTrio("sessionmem")
    app.config["MAX_CONTENT_LENGTH"] = services.settings.max_body_bytes
    app.config["BODY_TIMEOUT"] = 30
    add_error_handlers(app, services)
    add_worker_routes(app, services)
    add_session_routes(app, services)
    add_context_route(app, services)
    add_read_routes(app, services)
    add_live_routes(app, services)
    pages = PageAssets()
    add_page_routes(app, pages)
    add_debug_routes(app, services, pages)
    add_search_routes(app, services)
    add_maintenance_routes(app, services)
    add_team_routes(app, services)
    return app


def add_error_handlers(app: QuartTrio, services: Services) -> None:
    """What a request that fails becomes: the module docstring's "Error handling", and a query string that
    is not UTF-8 refused before any route reads it."""
    settings, status = services.settings, services.status

    @app.errorhandler(BadRequest)
    async def bad_request(exc: BadRequest) -> Response:
        return error_response(400, exc.message, path=exc.path)

    @app.before_request
    async def query_string_is_utf8() -> None:
        # Werkzeug keeps an escape that is not UTF-8 as its text: /api/search?q=%FF%FE would search for
        # "%FF%FE". Bodies that are not UTF-8 are 400s too.
        raw = request.query_string
        if raw:
            try:
                unquote_to_bytes(raw).decode()
            except UnicodeDecodeError:
                raise BadRequest("the query string is not valid UTF-8 once percent-decoded", "?") from None

    @app.errorhandler(MailboxFull)
    async def mailbox_full(exc: MailboxFull) -> Response:
        return error_response(503, busy_message(exc), retry_after=RETRY_AFTER_S)

    @app.errorhandler(StorageUnavailable)
    async def storage_unavailable(exc: StorageUnavailable) -> Response:
        return error_response(503, storage_message(exc), retry_after=STORAGE_RETRY_AFTER_S)

    @app.errorhandler(HTTPException)
    async def http_error(exc: HTTPException) -> Response:
        message = exc.description or exc.name
        if exc.code == 413:
            message = too_large_message(settings.max_body_bytes)
        return error_response(exc.code or 500, message)

    @app.errorhandler(Exception)
    async def internal_error(exc: Exception) -> Response:
        session = (request.view_args or {}).get("claude_session_id") or request.args.get("session", "")
        log_exception(log, fault_message(request.method, request.path, str(session)[:MAX_SESSION_ID]), exc)
        status.count_error(exc)
        return error_response(500, f"internal error: {type(exc).__name__}")


def add_worker_routes(app: QuartTrio, services: Services) -> None:
    """The worker itself: its health (less without the token), its readiness, a one-time login code."""
    settings, status = services.settings, services.status

    @app.get(routes.HEALTH)
    async def health() -> Response:
        if request.scope.get(ACCESS_SCOPE_KEY) is None:  # no token: where the data lives is not theirs to know
            return json_response(PublicHealth("ok", status.version))
        return json_response(Health("ok", status.pid, status.version, status.uptime_seconds(),
                                    services.compressor.name, str(settings.data_dir), services.team is not None))

    @app.get(routes.READINESS)
    async def readiness() -> Response:
        if status.ready.is_set():
            return json_response({"status": READY})
        return error_response(503, f"{STARTING}: replaying the journal", retry_after=RETRY_AFTER_S)

    @app.post(routes.LOGIN_CODE)
    async def login_code() -> Response:
        code = services.guard.login_codes.issue()
        target = request.args.get("next") or "/"
        query = urlencode({"code": code, "next": target})
        return json_response(LoginCode(code, f"{status.base_url}{routes.LOGIN}?{query}", LOGIN_CODE_TTL_S))


async def _body(kind: type) -> Any:
    """The request's body decoded as ``kind`` (a 400 naming the JSON path at fault)."""
    return decode(await request.get_data(cache=False, as_text=False, parse_form_data=False), kind)


def add_session_routes(app: QuartTrio, services: Services) -> None:
    """Sessions' ingest besides the four hot routes (:mod:`.fast_ingest`): the legacy init, what is still
    processing, the replay of a parked session."""
    store = services.store

    @app.post(rule(routes.LEGACY_INIT, session_db_id=ROW_ID))
    async def legacy_session_init(session_db_id: int) -> Response:
        payload = await _body(LegacyInitRequest)
        row = await store.session_by_db_id(session_db_id)
        if row is None:
            return error_response(404, f"no session with sessionDbId {session_db_id}")
        code, reply = await services.ingestor.prompt(InitRequest(
            claudeSessionId=row.claude_session_id, cwd=row.cwd or "",
            project=payload.project or row.project, prompt=payload.userPrompt))
        return json_response(reply, code)

    @app.route(routes.PROCESSING, methods=["GET", "POST"])
    async def processing() -> Response:
        wanted = None
        if request.method == "POST":
            raw = await request.get_data(cache=False, as_text=False, parse_form_data=False)
            wanted = (decode(raw, ProcessingRequest).claudeSessionId or None) if raw.strip() else None
        return json_response(await processing_status(services, wanted))

    @app.post(rule(routes.REPLAY))
    async def replay_parked(claude_session_id: str) -> Response:
        router = services.router
        if await store.session_info(claude_session_id) is None:
            return error_response(404, f"no session {claude_session_id!r} is stored")
        envelopes = await store.unpark_session(
            claude_session_id, lambda unparked: router.unparked(claude_session_id, unparked))
        return json_response(Replayed(claude_session_id, len(envelopes)))


async def settled(services: Services, claude_session_id: str, timeout: float) -> None:
    """Wait, at most ``timeout`` seconds, until ``claude_session_id``'s actor has nothing left in hand. Each
    commit wakes the wait; an actor marks its message finished just after the commit that stored it, so the
    wait looks again every :data:`SETTLE_POLL_S` too."""
    router, commits = services.router, services.store.commits
    with trio.move_on_after(timeout):
        while router.queued(claude_session_id) or router.working(claude_session_id):
            with trio.move_on_after(SETTLE_POLL_S):
                await commits.wait_committed(commits.committed())


async def hand_over(services: Services, project: str, session: str, source: str, budget: int, *, focus: str,
                    cwd: str, agent: str) -> tuple[ContextPlan, RenderedContext]:
    """A SessionStart's handover to ``session``, as the told-once ledger rules it (:class:`~sessionmem.search.told.Handover`):
    after a compaction, the session's own work first; a second SessionStart into the same model request,
    only what the first did not tell. What it tells is recorded once made (a handover cancelled with its request,
    the hook having given up, is not): the recalls of the session will not repeat it."""
    told = services.context.told
    handover = told.begin_handover(session, source, trio.current_time())  # within the session's lock
    own = handover is not Handover.ORDINARY
    if handover is Handover.AFTER_COMPACTION:
        await settled(services, session, COMPACT_SETTLE_S)  # its PreCompact checkpoint, stored first
    plan = await services.context.plan(project, focus=focus, focus_latest_prompt=source in FOCUSED_SOURCES,
                                       session=session, origin=origin_arg(), own=own, cwd=cwd)
    if handover is Handover.AGAIN:
        plan = left_untold(plan, told.told(session))
    # The asking session's agent: what another agent made says which (a missing one: Claude Code's hook).
    rendered = render_handover(plan, token_budget=budget, agent=agent)
    told.handed(session, handover, source, rendered.told, trio.current_time())
    return plan, rendered


def add_context_route(app: QuartTrio, services: Services) -> None:
    """The memories injected at SessionStart, as markdown, with what the hook tells the user in headers."""
    settings = services.settings
    handovers = SessionLocks()

    @app.get(routes.CONTEXT)
    async def context_inject() -> Response:
        project = request.args.get("project", "").strip()
        if not project:
            raise BadRequest("query parameter 'project' is required", "?project")
        budget = int_arg("tokens", settings.context_token_budget, low=100, high=100_000)
        focus = text_arg("q", limit=MAX_QUERY_CHARS) or ""
        source = request.args.get("source") or ""
        session = text_arg("session", limit=MAX_SESSION_ID) or ""
        asking_agent = agent_arg() or DEFAULT_AGENT
        # The session's working directory: its CLAUDE.md and auto memory say what not to say again. One
        # that cannot be a path is passed over, not refused: the handover goes on without it.
        cwd = request.args.get("cwd", "").strip()
        cwd = cwd if len(cwd) <= MAX_PATH else ""
        if session:  # a hook's: what it prints stays below Claude Code's limit on a hook's output
            budget = min(budget, HOOK_CONTEXT_MAX_CHARS // CHARS_PER_TOKEN)
            async with handovers.hold(session):  # a second SessionStart at once waits for what this one tells
                plan, rendered = await hand_over(services, project, session, source, budget, focus=focus, cwd=cwd,
                                                 agent=asking_agent)
        else:
            plan = await services.context.plan(project, focus=focus, focus_latest_prompt=source in FOCUSED_SOURCES,
                                               origin=origin_arg(), cwd=cwd)
            rendered = render_handover(plan, token_budget=budget, agent=asking_agent)
        text = rendered.text
        headers = {
            CONTEXT_COUNT_HEADER: str(rendered.observations),
            "X-Sessionmem-Summary": "1" if plan.summary is not None else "0",
            "X-Sessionmem-Ranking": plan.ranking,
        }
        if request.args.get(routes.SHARE_FILE_FIELD) == "1" and services.team is not None:
            # The repository asks to share: the hook tells the user once (team/sharing.py).
            key = checked_key(request.args.get(routes.PROJECT_KEY, "")[: 4 * MAX_KEY])  # longer: no key
            database = await services.team.share_request(project, key)
            if database:
                headers[SHARE_REQUEST_HEADER] = quote(database, safe="")
        # A SessionStart (it names its session) takes the LLM backends' one-time notice (compress/announce.py).
        notice = getattr(services.compressor, "notice", None)
        if notice is not None and request.args.get("session") and (said := await notice.take()):
            headers[NOTICE_HEADER] = quote(said)
        return Response(text, content_type="text/markdown; charset=utf-8", headers=headers)


def _page() -> dict[str, Any]:
    """``project``, ``limit`` and ``offset`` from the query string, validated."""
    return {"project": project_arg(),
            "limit": int_arg("limit", 50, low=1), "offset": int_arg("offset", 0, high=10**9)}


def add_read_routes(app: QuartTrio, services: Services) -> None:
    """Pages of what is stored: sessions, projects, observations (one, or a list), summaries."""
    store = services.store

    @app.get(routes.SESSIONS)
    async def sessions() -> Response:
        return json_response({"sessions": await store.list_sessions(**_page(), agent=agent_arg())})

    @app.get(routes.PROJECTS)
    async def projects() -> Response:
        limit = int_arg("limit", 200, low=1)
        rows = await store.list_projects(limit=limit + 1, offset=int_arg("offset", 0, high=10**9),
                                         containing=text_arg("q"))
        return json_response({"projects": rows[:limit], "more": len(rows) > limit})

    @app.get(routes.OBSERVATION_LIST)
    async def list_observations() -> Response:
        rows = await store.list_observations(**_page(), origin=origin_arg(), flagged=flag_arg("flagged"),
                                             agent=agent_arg())
        return json_response({"observations": await marked(services, rows)})

    @app.get(rule(routes.OBSERVATION, observation_id=ROW_ID))
    async def get_observation(observation_id: int) -> Response:
        row = await store.get_observation(observation_id)
        if row is None:
            return error_response(404, f"no observation with id {observation_id}")
        return json_response((await marked(services, [row]))[0])

    @app.get(routes.SUMMARIES)
    async def summaries() -> Response:
        return json_response({"summaries": await store.list_summaries(**_page(), origin=origin_arg(),
                                                                      flagged=flag_arg("flagged"),
                                                                      agent=agent_arg())})


def add_live_routes(app: QuartTrio, services: Services) -> None:
    """The live event stream the web pages follow (server-sent events)."""

    @app.get(routes.STREAM)
    async def stream() -> Response:
        async def events() -> Any:
            yield b": connected\n\n"
            with services.broadcaster.subscribe() as receive:
                while True:
                    item = None
                    # Never yield inside a cancel scope from an async generator.
                    with trio.move_on_after(KEEP_ALIVE_S):
                        try:
                            item = await receive.receive()
                        except trio.EndOfChannel:
                            return
                    if item is None:
                        yield b": keep-alive\n\n"
                        continue
                    yield sse_message(live_event_name(item), encode(item))

        return sse_response(events())
