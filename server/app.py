"""The HTTP API (Quart-Trio): hooks post events here, readers and operators query it.

Ingest validates with msgspec, strips private content, journals the event (group
commit) and answers as soon as it is durable; the actors do the rest. The four hot
ingest paths are served by :mod:`sessionmem.server.fast_ingest` in front of Quart.

Error handling:
    Bad input is a 400 naming the JSON path at fault; an oversized body is a 413; a
    full session mailbox is a 503 with ``Retry-After``; an unknown id is a 404.
    Internal faults are logged with the session id and answered as 500 JSON. None of
    these affects any other request or session.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any

import msgspec
import trio
from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from sessionmem.actors.child import MailboxFull
from sessionmem.server.context import render_context
from sessionmem.server.fast_ingest import FastIngest, busy_message, too_large_message
from sessionmem.server.payloads import BadRequest, InitRequest, LegacyInitRequest, ProcessingRequest, decode

if TYPE_CHECKING:
    from sessionmem.worker import Worker

log = logging.getLogger(__name__)

_json = msgspec.json.Encoder()
MAX_PAGE = 500


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(_json.encode(data), status=status, headers=headers, content_type="application/json")


def _error(status: int, message: str, **extra: Any) -> Response:
    headers = {"Retry-After": str(extra.pop("retry_after"))} if "retry_after" in extra else None
    return json_response({"error": message, **extra}, status, headers)


def _int_arg(name: str, default: int, *, low: int = 0, high: int = MAX_PAGE) -> int:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"query parameter {name!r} must be an integer, got {raw!r}", f"?{name}") from None
    if not low <= value <= high:
        raise BadRequest(f"query parameter {name!r} must be between {low} and {high}", f"?{name}")
    return value


def create_app(worker: Worker) -> FastIngest:
    """The worker's ASGI app: the hot ingest routes (:mod:`.fast_ingest`) in front of Quart."""
    return FastIngest(create_quart_app(worker), worker.ingestor, max_body_bytes=worker.settings.max_body_bytes,
                      on_error=worker.count_error)


def create_quart_app(worker: Worker) -> QuartTrio:
    settings = worker.settings
    app = QuartTrio("sessionmem")
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    app.config["BODY_TIMEOUT"] = 30

    @app.errorhandler(BadRequest)
    async def bad_request(exc: BadRequest) -> Response:
        return _error(400, exc.message, path=exc.path)

    @app.errorhandler(MailboxFull)
    async def mailbox_full(exc: MailboxFull) -> Response:
        return _error(503, busy_message(exc), retry_after=1)

    @app.errorhandler(HTTPException)
    async def http_error(exc: HTTPException) -> Response:
        message = exc.description or exc.name
        if exc.code == 413:
            message = too_large_message(settings.max_body_bytes)
        return _error(exc.code or 500, message)

    @app.errorhandler(Exception)
    async def internal_error(exc: Exception) -> Response:
        log.error("internal error on %s %s", request.method, request.path, exc_info=exc)
        worker.count_error(exc)
        return _error(500, f"internal error: {type(exc).__name__}")

    async def body(kind: type) -> Any:
        return decode(await request.get_data(cache=False), kind)

    # -- health --------------------------------------------------------------------------

    @app.get("/api/health")
    async def health() -> Response:
        return json_response({
            "status": "ok",
            "pid": os.getpid(),
            "version": worker.version,
            "uptime_s": round(time.time() - worker.started_at, 3),
            "compressor": worker.compressor.name,
            "dataDir": str(settings.data_dir),
        })

    @app.get("/api/readiness")
    async def readiness() -> Response:
        if worker.ready.is_set():
            return json_response({"status": "ready"})
        return _error(503, "starting: replaying the journal", retry_after=1)

    # -- ingest --------------------------------------------------------------------------

    @app.post("/sessions/<int:session_db_id>/init")
    async def legacy_session_init(session_db_id: int) -> Response:
        payload = await body(LegacyInitRequest)
        row = await worker.store.session_by_db_id(session_db_id)
        if row is None:
            return _error(404, f"no session with sessionDbId {session_db_id}")
        status, data = await worker.ingestor.prompt(InitRequest(
            claudeSessionId=row["claudeSessionId"], cwd=row["cwd"] or "",
            project=payload.project or row["project"], prompt=payload.userPrompt))
        return json_response(data, status)

    @app.route("/api/processing", methods=["GET", "POST"])
    async def processing() -> Response:
        wanted = ""
        if request.method == "POST":
            raw = await request.get_data(cache=False)
            wanted = decode(raw, ProcessingRequest).claudeSessionId if raw.strip() else ""
        return json_response(await worker.processing_status(wanted))

    @app.post("/api/sessions/<claude_session_id>/replay")
    async def replay_parked(claude_session_id: str) -> Response:
        replayed = await worker.replay_parked(claude_session_id)
        return json_response({"claudeSessionId": claude_session_id, "replayed": replayed})

    # -- reads ---------------------------------------------------------------------------

    @app.get("/api/context/inject")
    async def context_inject() -> Response:
        project = request.args.get("project", "").strip()
        if not project:
            raise BadRequest("query parameter 'project' is required", "?project")
        budget = _int_arg("tokens", settings.context_token_budget, low=100, high=100_000)
        observations = await worker.store.list_observations(
            project=project, limit=settings.context_observations, offset=0
        )
        summaries = await worker.store.list_summaries(project=project, limit=1, offset=0)
        text = render_context(project, observations, summaries[0] if summaries else None,
                              token_budget=budget, base_url=worker.base_url)
        return Response(text, content_type="text/markdown; charset=utf-8", headers={
            "X-Sessionmem-Observations": str(text.count("\n| #")),
            "X-Sessionmem-Summary": "1" if summaries else "0",
        })

    def page() -> dict[str, Any]:
        """``project``, ``limit`` and ``offset`` from the query string, validated."""
        return {"project": request.args.get("project") or None,
                "limit": _int_arg("limit", 50, low=1), "offset": _int_arg("offset", 0, high=10**9)}

    @app.get("/api/sessions")
    async def sessions() -> Response:
        return json_response({"sessions": await worker.store.list_sessions(**page())})

    @app.get("/api/observations")
    async def list_observations() -> Response:
        return json_response({"observations": await worker.store.list_observations(**page())})

    @app.get("/api/observations/<int:observation_id>")
    async def get_observation(observation_id: int) -> Response:
        row = await worker.store.get_observation(observation_id)
        if row is None:
            return _error(404, f"no observation with id {observation_id}")
        return json_response(row)

    @app.get("/api/summaries")
    async def summaries() -> Response:
        return json_response({"summaries": await worker.store.list_summaries(**page())})

    # -- live ----------------------------------------------------------------------------

    @app.get("/stream")
    async def stream() -> Response:
        async def events() -> Any:
            yield b": connected\n\n"
            with worker.broadcaster.subscribe() as receive:
                while True:
                    item = None
                    # Never yield inside a cancel scope from an async generator.
                    with trio.move_on_after(15):
                        try:
                            item = await receive.receive()
                        except trio.EndOfChannel:
                            return
                    if item is None:
                        yield b": keep-alive\n\n"
                        continue
                    kind, data = item
                    yield b"event: " + kind.encode() + b"\ndata: " + _json.encode(data) + b"\n\n"

        response = Response(events(), content_type="text/event-stream")
        response.headers["Cache-Control"] = "no-cache"
        response.timeout = None
        return response

    @app.get("/debug")
    async def debug() -> Response:
        return json_response(await worker.debug_snapshot())

    return app
