"""The operator's routes: ``/debug`` (the page or the JSON snapshot), ``/debug.json``, the live
snapshot stream, and one session actor's detail.

``GET /debug`` answers what the client prefers: a browser (whose ``Accept`` ranks
``text/html`` first) gets the page, anyone else -- ``curl``, ``sessionmem status``,
tests, the bench, a client sending ``Accept: application/json`` or no ``Accept`` at
all -- gets the JSON snapshot, so scripts that ask ``/debug`` keep their JSON. ``/debug.json`` is always
JSON.

``GET /debug/stream`` is Server-Sent Events: one ``snapshot`` event (the JSON
snapshot) at once and then every :data:`SNAPSHOT_INTERVAL_S`. It ends when the worker
shuts down (it is a subscriber of the broadcaster, which closes its subscribers first).
"""

from __future__ import annotations

from typing import Any

import trio
from quart import Response
from quart_trio import QuartTrio

from sessionmem.protocol import routes
from sessionmem.server.debug import debug_snapshot
from sessionmem.server.jsonapi import encode
from sessionmem.server.pages import asset_response, prefers_html
from sessionmem.server.routing import error_response, json_response, rule, sse_message, sse_response
from sessionmem.server.services import Services
from sessionmem.web.assets import PageAssets

SNAPSHOT_INTERVAL_S = 1.0


def add_debug_routes(app: QuartTrio, services: Services, pages: PageAssets) -> None:
    @app.get(routes.DEBUG)
    async def debug() -> Response:
        if prefers_html():
            return await asset_response(pages, "pages/debug.html")
        return json_response(await debug_snapshot(services))

    @app.get(routes.DEBUG_JSON)
    async def debug_json() -> Response:
        return json_response(await debug_snapshot(services))

    @app.get(routes.DEBUG_STREAM)
    async def debug_stream() -> Response:
        async def snapshots() -> Any:
            with services.broadcaster.subscribe() as receive:
                while True:
                    yield sse_message("snapshot", encode(await debug_snapshot(services)))
                    # Live events in between only say that something changed: drain them until
                    # the next tick. Never yield inside a cancel scope from an async generator.
                    with trio.move_on_after(SNAPSHOT_INTERVAL_S) as tick:
                        async for _ in receive:
                            pass
                    if not tick.cancelled_caught:
                        return  # the broadcaster closed: the worker is shutting down

        return sse_response(snapshots())

    @app.get(rule(routes.DEBUG_ACTOR))
    async def debug_actor(claude_session_id: str) -> Response:
        history = services.router.history(claude_session_id)
        if history is None:
            return error_response(404, f"no session actor {claude_session_id[:200]!r} (it may have stopped)")
        return json_response(history)
