"""Storage over HTTP: what is on disk (``GET /api/storage``), a prune now (``POST /api/maintenance/prune``),
export (``GET /api/export``, a page at a time) and import (``POST /api/import``).

Imported rows are searchable at once by words; the vector index is told, and embeds them.
"""

from __future__ import annotations

import time
from typing import Annotated

import msgspec
import trio
from quart import Response, request
from quart_trio import QuartTrio

from sessionmem.protocol import routes
from sessionmem.server.payloads import decode
from sessionmem.server.routing import int_arg, json_response, project_arg, text_arg
from sessionmem.server.search_api import parse_moment
from sessionmem.server.services import Services
from sessionmem.storage.base import StorageReport
from sessionmem.storage.boundary import record_texts_with
from sessionmem.storage.export_records import FORMAT, VERSION, Header, Record

MAX_IMPORT = 2000  # records a request (the body limit bounds their size too)


class PruneRequest(msgspec.Struct, frozen=True):
    olderThanDays: Annotated[float, msgspec.Meta(ge=0, le=36500)] = 30.0
    vacuum: bool = False  # a full VACUUM: the file shrinks (and an older database gets incremental vacuum)


class ExportPage(msgspec.Struct, frozen=True):
    header: Header
    records: list[Record]
    next: int  # the `after` of the next page; 0: this was the last


class ImportRequest(msgspec.Struct, frozen=True):
    records: Annotated[list[Record], msgspec.Meta(max_length=MAX_IMPORT)]


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
        raw = await request.get_data(cache=False, as_text=False, parse_form_data=False)
        wanted = decode(raw, PruneRequest) if raw.strip() else PruneRequest()
        started = time.perf_counter()
        before = await store.storage_report()
        pruned = await services.pruner.prune(wanted.olderThanDays, full_vacuum=wanted.vacuum)
        after = await store.storage_report()
        return json_response(PruneReport(pruned, before, after, round(time.perf_counter() - started, 3)))

    @app.get(routes.EXPORT)
    async def export() -> Response:
        project = project_arg()
        since_raw = text_arg("since", limit=100)
        since = parse_moment(since_raw, "since") if since_raw else None
        after = int_arg("after", 0, low=0, high=2**63 - 1)
        records, following = await store.export_page(project=project, since=since, after_session=after)
        # The records are written as they are (their own camelCase names), not through jsonapi.
        page = ExportPage(Header(FORMAT, VERSION, time.time(), project, since), records, following)
        return Response(msgspec.json.encode(page), content_type="application/json")

    @app.post(routes.IMPORT)
    async def import_() -> Response:
        wanted = decode(await request.get_data(cache=False, as_text=False, parse_form_data=False), ImportRequest)
        # An import is ingest like any other: this machine's rules and caps here (off the Trio thread: a batch
        # holds up to MAX_IMPORT records of any length), and the store's boundary takes private spans and
        # secrets out by the default rules whatever the settings (storage/boundary.py).
        clean = services.ingestor.clean_text
        records = await trio.to_thread.run_sync(
            lambda: [record_texts_with(record, clean) for record in wanted.records])
        counts = await store.import_records(records)  # its commit wakes the vector index (the commit signal)
        return json_response(counts)
