"""What the HTTP app is given: the worker's long-lived components, and the worker's own status.

The worker's start-up ladder (``sessionmem.worker``) builds :class:`Services` and
hands it to :func:`sessionmem.server.app.create_app`; the server never imports the
worker, so the layers stay one-way.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec
import trio

from sessionmem import __version__
from sessionmem.actors.router import SessionRouter
from sessionmem.actors.supervisor import ActorSupervisor
from sessionmem.broadcast import Broadcaster
from sessionmem.compress.base import Compressor
from sessionmem.embed.service import EmbedderService
from sessionmem.index.actor import VectorIndex
from sessionmem.runtime.codewatch import DataDirIdentity
from sessionmem.runtime.loopwatch import LoopWatch
from sessionmem.search.context import ContextPlanner
from sessionmem.search.hybrid import SearchService
from sessionmem.server.guard import AccessGuard
from sessionmem.server.http_server import ConnectionPool
from sessionmem.server.ingest import Ingestor
from sessionmem.server.spool import SpoolImporter
from sessionmem.settings import Settings
from sessionmem.storage.base import Store
from sessionmem.storage.consolidator import Consolidator
from sessionmem.storage.pruner import Pruner

if TYPE_CHECKING:  # loaded by the worker only where database_url is set (it brings the database driver)
    from sessionmem.team.sync import TeamSync


class WorkerStatistics(msgspec.Struct, frozen=True, kw_only=True):
    pid: int
    version: str
    uptime_seconds: float
    ready: bool
    data_dir: str
    base_url: str
    errors: int  # internal errors answered as 500
    last_error: str


class WorkerStatus:
    """The worker process itself: identity, readiness, address, internal errors."""

    def __init__(self, settings: Settings) -> None:
        self.pid = os.getpid()
        self.version = __version__
        self.started_at = time.time()
        self.ready = trio.Event()
        self.base_url = f"http://{settings.host}:{settings.port}"  # the bound port once serving
        self._data_dir = str(settings.data_dir)
        self.pending_at_exit = -1  # journal events left pending at shut-down (-1: not known)
        self._errors = 0
        self._last_error = ""

    def count_error(self, exc: BaseException) -> None:
        self._errors += 1
        self._last_error = f"{type(exc).__name__}: {exc}"

    def uptime_seconds(self) -> float:
        return round(time.time() - self.started_at, 3)

    def statistics(self) -> WorkerStatistics:
        return WorkerStatistics(pid=self.pid, version=self.version, uptime_seconds=self.uptime_seconds(),
                                ready=self.ready.is_set(), data_dir=self._data_dir, base_url=self.base_url,
                                errors=self._errors, last_error=self._last_error)


@dataclass(frozen=True, kw_only=True)
class Services:
    settings: Settings
    status: WorkerStatus
    store: Store
    router: SessionRouter
    supervisor: ActorSupervisor
    compressor: Compressor
    broadcaster: Broadcaster
    ingestor: Ingestor
    spool: SpoolImporter
    guard: AccessGuard
    connections: ConnectionPool
    embedder: EmbedderService
    index: VectorIndex
    search: SearchService
    context: ContextPlanner
    pruner: Pruner
    consolidator: Consolidator
    loop: LoopWatch
    home: DataDirIdentity  # the data dir and database opened: the spool importer and the worker's watch ask it
    team: TeamSync | None = None  # team memory's sync, when database_url is set
