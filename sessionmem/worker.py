"""The long-running worker: start-up ladder, serving, and graceful shut-down.

Start: open storage (migrate) -> start the supervisor -> queue every pending journal
event for its actor -> serve HTTP -> record pid and port in ``worker.json``.
Shut down (SIGTERM/SIGINT): stop accepting (Hypercorn's graceful close) -> close the
mailboxes and let actors drain within a deadline -> commit what is queued and close
the database. Whatever did not finish is still pending in the journal and is
replayed by the next start.

Resource handling:
    Every task runs inside :func:`run_worker`'s nurseries; nothing outlives it.
    ``worker.json`` is removed on the way out.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import signal
import sys
import time
from functools import partial
from typing import Any

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve

from sessionmem import __version__
from sessionmem.actors.session import ActorDeps
from sessionmem.actors.supervisor import SessionSupervisor
from sessionmem.broadcast import Broadcaster
from sessionmem.compress.base import Compressor, choose_compressor
from sessionmem.config import Settings
from sessionmem.protocol.state import WorkerState, remove_state, write_state
from sessionmem.server.app import create_app
from sessionmem.server.ingest import Ingestor
from sessionmem.server.spool import SpoolImporter
from sessionmem.storage.base import Store
from sessionmem.storage.sqlite import open_sqlite_store

log = logging.getLogger("sessionmem")


class Worker:
    """The components the HTTP routes use, and the cross-cutting views over them."""

    def __init__(self, settings: Settings, store: Store, compressor: Compressor,
                 supervisor: SessionSupervisor, broadcaster: Broadcaster) -> None:
        self.settings = settings
        self.store = store
        self.compressor = compressor
        self.supervisor = supervisor
        self.broadcaster = broadcaster
        self.version = __version__
        self.started_at = time.time()
        self.ready = trio.Event()
        self.ingestor = Ingestor(settings, store, supervisor)
        self.spool = SpoolImporter(self.ingestor, settings.data_dir)
        self.base_url = f"http://{settings.host}:{settings.port}"
        self._errors = 0
        self._last_error = ""

    def count_error(self, exc: BaseException) -> None:
        self._errors += 1
        self._last_error = f"{type(exc).__name__}: {exc}"

    async def processing_status(self, claude_session_id: str = "") -> dict[str, Any]:
        counts = await self.store.journal_counts()
        actors = self.supervisor.actors()
        if claude_session_id:
            actors = [a for a in actors if a["claudeSessionId"] == claude_session_id]
        queued = sum(a["mailbox_depth"] + a["backlog"] + a["inflight"] for a in actors)
        working = any(a["state"] in ("compressing", "summarizing", "storing") for a in actors)
        return {
            "isProcessing": bool(queued) or working or (not claude_session_id and counts.pending > 0),
            "queueDepth": queued,
            "pendingEvents": counts.pending,
            "parkedEvents": counts.parked,
        }

    async def replay_parked(self, claude_session_id: str) -> int:
        envelopes = await self.store.unpark_session(
            claude_session_id, lambda unparked: self.supervisor.unparked(claude_session_id, unparked)
        )
        return len(envelopes)

    async def debug_snapshot(self) -> dict[str, Any]:
        counts = await self.store.journal_counts()
        return {
            "worker": {
                "pid": os.getpid(),
                "version": self.version,
                "uptime_s": round(time.time() - self.started_at, 3),
                "ready": self.ready.is_set(),
                "dataDir": str(self.settings.data_dir),
                "errors": self._errors,
                "last_error": self._last_error,
            },
            "supervisor": self.supervisor.statistics(),
            "actors": self.supervisor.actors(),
            "journal": {
                "pending": counts.pending,
                "parked": counts.parked,
                "done": counts.done,
                **self.store.statistics(),
            },
            "compressor": self.compressor.statistics(),
            "stream": self.broadcaster.statistics(),
        }


def configure_logging(settings: Settings, *, to_stderr: bool) -> None:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    handlers: list[logging.Handler] = [
        logging.handlers.RotatingFileHandler(settings.log_path, maxBytes=10 * 1024 * 1024, backupCount=3)
    ]
    if to_stderr:
        handlers.append(logging.StreamHandler(sys.stderr))
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        handlers=handlers,
        force=True,
    )
    # The SDK's HTTP client logs every request at INFO; keep the log about sessionmem.
    logging.getLogger("httpx").setLevel(logging.WARNING)


async def run_worker(settings: Settings, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Run the worker until SIGTERM or SIGINT; reports the bound port via ``task_status``."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    compressor = choose_compressor(settings)
    log.info("starting sessionmem %s: data dir %s, compressor %s", __version__, settings.data_dir, compressor.name)
    try:
        async with open_sqlite_store(settings.db_path) as store:
            broadcaster = Broadcaster()
            supervisor = SessionSupervisor(ActorDeps(settings, store, compressor, broadcaster))
            async with trio.open_nursery() as nursery:
                await nursery.start(supervisor.run)
                pending = await store.pending_events()
                supervisor.replay(pending)
                if pending:
                    log.info("replaying %d pending journal event(s)", len(pending))
                worker = Worker(settings, store, compressor, supervisor, broadcaster)
                importing = trio.CancelScope()

                async def import_spool(*, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
                    with importing:
                        await worker.spool.run(task_status=task_status)

                # Events hooks spooled while the worker was down are older than anything
                # they send from now on: import them before reporting ready.
                if await nursery.start(import_spool):
                    log.info("imported events that hooks spooled while the worker was down")
                worker.ready.set()
                await _serve_http(worker, task_status)
                importing.cancel(reason="shutting down")
                supervisor.shutdown()
    finally:
        with trio.CancelScope(shield=True):
            await compressor.aclose()
        remove_state(str(settings.data_dir), os.getpid())
        log.info("sessionmem worker stopped")


async def _serve_http(worker: Worker, task_status: trio.TaskStatus[int]) -> None:
    settings = worker.settings
    config = HypercornConfig()
    config.bind = [f"{settings.host}:{settings.port}"]
    config.accesslog = logging.getLogger("hypercorn.access") if settings.access_log else None
    config.errorlog = logging.getLogger("hypercorn.error")
    config.graceful_timeout = 5.0
    app = create_app(worker)
    stop_http = trio.Event()
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(partial(hypercorn_serve, app, config, shutdown_trigger=stop_http.wait))
            port = int(binds[0].rsplit(":", 1)[1])
            worker.base_url = f"http://{settings.host}:{port}"
            write_state(str(settings.data_dir),
                        WorkerState(os.getpid(), settings.host, port, worker.started_at, __version__))
            log.info("listening on %s", worker.base_url)
            task_status.started(port)
            async for received in signals:
                log.info("signal %s: shutting down", signal.Signals(received).name)
                break
            # Live streams end first, or the graceful close would wait for them.
            worker.broadcaster.close()
            stop_http.set()
