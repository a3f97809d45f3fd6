"""Team memory over HTTP: the sync's status (``GET /api/team``: with what is shared and why) and a share push
(``POST /api/team/push``).

Both answer 409 while team memory is off (no ``database_url``): nothing here ever waits for
PostgreSQL (the status is the sync's own, the push runs in the sync's task).
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from quart import Response, request
from quart_trio import QuartTrio

from sessionmem.protocol.routes import TEAM, TEAM_PUSH
from sessionmem.server.payloads import decode
from sessionmem.server.routing import error_response, json_response
from sessionmem.server.services import Services
from sessionmem.team.sync_status import ShareRefused

TEAM_OFF = "team memory is off: set database_url (SESSIONMEM_DATABASE_URL) to a PostgreSQL database"


class SharePushRequest(msgspec.Struct, frozen=True):
    project: Annotated[str, msgspec.Meta(min_length=1, max_length=1000)]


def add_team_routes(app: QuartTrio, services: Services) -> None:
    @app.get(TEAM)
    async def team_status() -> Response:
        team = services.team
        if team is None:
            return error_response(409, TEAM_OFF)
        await team.refresh_backlog()
        await team.refresh_sharing()  # the user's answers as they are now, whether the worker read them yet
        return json_response(team.statistics())

    @app.post(TEAM_PUSH)
    async def share_push() -> Response:
        team = services.team
        if team is None:
            return error_response(409, TEAM_OFF)
        wanted = decode(await request.get_data(cache=False, as_text=False, parse_form_data=False), SharePushRequest)
        try:
            status = await team.start_share_push(wanted.project)
        except ShareRefused as exc:
            return error_response(409, str(exc), path="$.project")
        return json_response(status)
