"""Storage over HTTP: what is on disk (``GET /api/storage``), and a prune now (``POST /api/maintenance/prune``)."""

from __future__ import annotations

import time
from typing import Annotated

import msgspec
from quart import Response, request
from quart_trio import QuartTrio

from sessionmem.protocol import routes
from sessionmem.server.payloads import decode
from sessionmem.server.routing import json_response
from sessionmem.server.services import Services
from sessionmem.storage.retention import StorageReport


class PruneRequest(msgspec.Struct, frozen=True):
    olderThanDays: Annotated[float, msgspec.Meta(ge=0, le=36500)] = 30.0
    vacuum: bool = False  # a full VACUUM: the file shrinks (and an older database gets incremental vacuum)


class PruneReport(msgspec.Struct, frozen=True):
    pruned: int  # observations whose raw tool data was stripped
    before: StorageReport
    after: StorageReport
    seconds: float


def add_maintenance_routes(app: QuartTrio, services: Services) -> None:
    store = services.store

    @app.get(routes.STORAGE)
    async def storage() -> Response:
        return json_response(await store.storage_report())

    @app.post(routes.PRUNE)
    async def prune() -> Response:
        raw = await request.get_data(cache=False)
        wanted = decode(raw, PruneRequest) if raw.strip() else PruneRequest()
        started = time.perf_counter()
        before = await store.storage_report()
        pruned = await services.pruner.prune(wanted.olderThanDays, full_vacuum=wanted.vacuum)
        after = await store.storage_report()
        return json_response(PruneReport(pruned, before, after, round(time.perf_counter() - started, 3)))
