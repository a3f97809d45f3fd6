"""What operators read: the ``/debug`` snapshot and the processing status, from typed statistics.

Every long-lived component has a cheap ``statistics()`` that returns a frozen record;
this module only puts them together. Logic reads their fields; the HTTP edge writes
them as camelCase JSON (the shape is documented in docs/http-api.md).
"""

from __future__ import annotations

import msgspec

from sessionmem.actors.child import ActorStatistics
from sessionmem.actors.router import RouterStatistics
from sessionmem.actors.supervisor import SupervisorStatistics
from sessionmem.broadcast import BroadcasterStatistics
from sessionmem.compress.base import CompressorStatistics
from sessionmem.embed.service import EmbedderServiceStatistics
from sessionmem.index.actor import IndexStatistics
from sessionmem.records import JournalCounts
from sessionmem.runtime.gcwatch import WATCH, GcStatistics
from sessionmem.runtime.loopwatch import LoopStatistics
from sessionmem.server.guard import GuardStatistics
from sessionmem.server.http_server import ConnectionStatistics
from sessionmem.server.services import Services, WorkerStatistics
from sessionmem.server.spool import SpoolStatistics
from sessionmem.storage.base import StoreStatistics
from sessionmem.storage.consolidator import ConsolidatorStatistics
from sessionmem.storage.pruner import PrunerStatistics
from sessionmem.team.sync_status import TeamStatistics


class DebugSnapshot(msgspec.Struct, frozen=True, omit_defaults=True):  # `team` only when it is on
    worker: WorkerStatistics
    sessions: RouterStatistics
    supervisor: SupervisorStatistics
    actors: list[ActorStatistics]
    journal: JournalCounts
    store: StoreStatistics
    compressor: CompressorStatistics
    stream: BroadcasterStatistics
    spool: SpoolStatistics
    access: GuardStatistics
    connections: ConnectionStatistics
    index: IndexStatistics
    embedder: EmbedderServiceStatistics
    retention: PrunerStatistics
    consolidation: ConsolidatorStatistics
    gc: GcStatistics
    loop: LoopStatistics
    team: TeamStatistics | None = None  # team memory's sync; absent while database_url is not set


class ProcessingStatus(msgspec.Struct, frozen=True):
    is_processing: bool
    queue_depth: int  # events the actors still have to finish
    pending_events: int  # journal events not processed yet (all sessions)
    parked_events: int  # journal events of failed sessions, waiting for `sessionmem replay`
    spooled: bool = False  # requests hooks spooled wait for the worker's next spool round (the whole worker)


async def debug_snapshot(services: Services) -> DebugSnapshot:
    return DebugSnapshot(
        worker=services.status.statistics(),
        sessions=services.router.statistics(),
        supervisor=services.supervisor.statistics(),
        actors=services.router.actors(),
        journal=await services.store.journal_counts(),
        store=services.store.statistics(),
        compressor=services.compressor.statistics(),
        stream=services.broadcaster.statistics(),
        spool=services.spool.statistics(),
        access=services.guard.statistics(),
        connections=services.connections.statistics(),
        index=services.index.statistics(),
        embedder=services.embedder.statistics(),
        retention=services.pruner.statistics(),
        consolidation=services.consolidator.statistics(),
        gc=WATCH.statistics(),
        loop=services.loop.statistics(),
        team=services.team.statistics() if services.team is not None else None,
    )


async def processing_status(services: Services, claude_session_id: str | None = None) -> ProcessingStatus:
    """Whether one session (or the worker as a whole) still has work in hand: for the whole worker, events a
    hook spooled (its POST timed out) count too, until the spool import takes them."""
    counts = await services.store.journal_counts()
    queued = services.router.queued(claude_session_id)
    working = services.router.working(claude_session_id)
    whole = claude_session_id is None
    pending = whole and counts.pending > 0
    spooled = whole and await services.spool.pending()
    return ProcessingStatus(bool(queued) or working or pending or spooled, queued, counts.pending, counts.parked,
                            spooled)
