"""The long-running worker: start-up ladder, serving, and graceful shut-down within one budget.

Start: open storage (migrate) -> start the vector index (it loads in the background) ->
with ``database_url`` set, start the team sync (:mod:`sessionmem.team.sync`: one local
write, PostgreSQL is reached later, in the background) -> start the supervisor -> queue
every pending journal event for its actor -> import the spool -> serve HTTP -> record
pid and port in ``worker.json``; ready from then on.

Shut down (SIGTERM/SIGINT), within ``shutdown_timeout_s`` in all, divided among the
stages by :class:`ShutdownBudget` the way Hypercorn's ``worker_serve`` gives
connections a graceful deadline: stop accepting and let open requests finish
(:data:`HTTP_SHARE`) -> stop the spool import -> close the mailboxes and let actors
drain (:data:`DRAIN_SHARE`) -> stop the team sync (what it has not pushed waits in the
store) -> let the index save -> close the compressor (:data:`COMPRESSOR_SHARE`) ->
commit what is queued and close the database (the rest). Whatever did not finish
is still pending in the journal and is replayed by the next start. What each stage
took is logged and written to ``worker.shutdown.json``, which ``sessionmem stop``
prints.

Resource handling:
    Every task runs inside :func:`run_worker`'s nurseries; nothing outlives it. Every
    clean-up that awaits runs under a deadline. ``worker.json`` is removed on the
    way out.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

import msgspec
import trio
from hypercorn.config import Config as HypercornConfig

from sessionmem import __version__
from sessionmem.actors.restart import RestartPolicy
from sessionmem.actors.router import SessionRouter
from sessionmem.actors.session import ActorDeps, SessionActor, park_failed_session
from sessionmem.actors.supervisor import ActorSupervisor
from sessionmem.broadcast import Broadcaster
from sessionmem.compress.base import Compressor
from sessionmem.compress.budget import SECONDS_PER_DAY, utc_day
from sessionmem.compress.choice import choose_compressor
from sessionmem.embed.base import EmbedderUnavailableError
from sessionmem.embed.choice import background_embedder, choose_embedder
from sessionmem.embed.service import EmbedderService
from sessionmem.index.actor import VectorIndex
from sessionmem.protocol.auth import ensure_token
from sessionmem.protocol.datadir import make_private
from sessionmem.protocol.oskit import raise_open_files_limit, stop_signals
from sessionmem.protocol.spool import pending_spool_files
from sessionmem.protocol.state import (
    SHUTDOWN_REPORT_FILE,
    WorkerState,
    remove_state,
    write_json_atomically,
    write_state,
)
from sessionmem.redaction import Redactor
from sessionmem.runtime import codewatch, gcwatch, logs
from sessionmem.runtime.loopwatch import LoopWatch
from sessionmem.search.already_said import AlreadySaid
from sessionmem.search.context import ContextPlanner
from sessionmem.search.hybrid import SearchService
from sessionmem.search.recall import Recall
from sessionmem.search.told import ToldLedger
from sessionmem.server.app import create_app
from sessionmem.server.guard import AccessGuard, is_loopback
from sessionmem.server.http_server import ConnectionPool, connection_limit
from sessionmem.server.http_server import serve as serve_app
from sessionmem.server.ingest import Ingestor
from sessionmem.server.services import Services, WorkerStatus
from sessionmem.server.spool import SpoolImporter
from sessionmem.settings import Settings
from sessionmem.storage.base import StorageUnavailable, Store
from sessionmem.storage.consolidator import Consolidator
from sessionmem.storage.pruner import Pruner
from sessionmem.storage.sqlite.store import SQLiteStore, open_sqlite_store

if TYPE_CHECKING:  # imported where database_url is set: it brings the database driver
    from sessionmem.team.sync import TeamSync

log = logging.getLogger("sessionmem")

HTTP_SHARE = 0.2  # open requests finish (Hypercorn's graceful close)
DRAIN_SHARE = 0.45  # actors finish what they hold
INDEX_SHARE = 0.15  # the vector index saves what changed since its last save
COMPRESSOR_SHARE = 0.1  # the LLM client and the embedding model close
DATA_DIR_CHECK_S = 2.0  # how often the worker checks that its data dir is still at its path


class ShutdownStage(msgspec.Struct, frozen=True):
    name: str
    seconds: float


class ShutdownReport(msgspec.Struct, frozen=True):
    pid: int
    stopped_at: float
    budget_seconds: float
    took_seconds: float
    stages: list[ShutdownStage]
    pending_events: int  # left in the journal, replayed at the next start


class ShutdownBudget:
    """One deadline for the whole shut-down, shared out among its stages.

    A stage gets its share of the budget, never more than what is left; what a fast
    stage does not use is left for the later ones.
    """

    def __init__(self, total_s: float) -> None:
        self.total_s = total_s
        self._started: float | None = None
        self._stage_started = 0.0
        self.stages: list[ShutdownStage] = []

    def begin(self) -> None:
        self._started = self._stage_started = time.monotonic()

    @property
    def begun(self) -> bool:
        return self._started is not None

    def remaining(self) -> float:
        if self._started is None:
            return self.total_s
        return max(0.0, self._started + self.total_s - time.monotonic())

    def share(self, fraction: float) -> float:
        """Seconds for a stage that may take ``fraction`` of the whole budget."""
        return min(self.total_s * fraction, self.remaining())

    def done(self, name: str) -> None:
        """The stage since the last ``done`` (or ``begin``) is over."""
        now = time.monotonic()
        self.stages.append(ShutdownStage(name, round(now - self._stage_started, 3)))
        self._stage_started = now

    def took(self) -> float:
        return round(time.monotonic() - self._started, 3) if self._started is not None else 0.0


FILE_LIMIT_WANTED = 65536
# How long a thread waiting for the GIL lets the holder run before asking for it (CPython's default: 5 ms).
GIL_SWITCH_INTERVAL_S = 0.0005


def raise_file_limit() -> int | None:
    """Raise this process's open-files limit toward :data:`FILE_LIMIT_WANTED`, to what the OS grants
    (:func:`~sessionmem.protocol.oskit.raise_open_files_limit`); returns the limit now (``None``: none).

    Each connection is a file descriptor: a low default (256, 1024) would let idle
    connections use them all (the connection cap, ``max_connections``, stays below).
    Logged when the OS grants less than asked (macOS: ``kern.maxfilesperproc``).
    """
    limit = raise_open_files_limit(FILE_LIMIT_WANTED)
    if limit is not None and limit < FILE_LIMIT_WANTED:
        log.info("open files: %d allowed (%d asked); connections are capped below it", limit, FILE_LIMIT_WANTED)
    return limit


def shorten_gil_switch_interval() -> None:
    """Let the writer and reader threads take the GIL back from a busy Trio thread sooner.

    Each SQLite statement gives the GIL up and must take it back. While the Trio thread is
    busy, a thread waiting for it gets it only when the interpreter forces a switch, after
    ``sys.getswitchinterval()`` (5 ms by default). Measured beside a busy thread
    (``bench/gil_trips.py``): one accept takes 17-22 ms at 5 ms and about 3 ms at 0.5 ms.
    """
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)


def configure_logging(settings: Settings, *, to_stderr: bool) -> None:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    logs.configure_logging(settings.log_path, to_stderr=to_stderr)


async def run_worker(settings: Settings, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> bool:
    """Run the worker until SIGTERM or SIGINT (:func:`~sessionmem.protocol.oskit.stop_signals`), or until its
    code changes on disk or its data dir is deleted or replaced; reports the bound port via ``task_status``.
    Returns whether it stopped for one of those (:mod:`sessionmem.runtime.codewatch`): the caller then
    starts it again.

    A signal while the worker is still starting (importing a large spool, say) ends the
    start there, rather than being heard once it serves: what was imported is journaled,
    the rest waits in the spool, and journaled events are replayed at the next start.
    """
    budget = ShutdownBudget(settings.shutdown_timeout_s)
    signalled = trio.Event()
    starting = trio.CancelScope()
    serving: Services | None = None
    start_again = False
    with trio.open_signal_receiver(*stop_signals()) as signals:

        async def watch_signals() -> None:
            async for received in signals:
                name = signal.Signals(received).name
                if serving is None:
                    log.info("signal %s while starting: stopping now", name)
                    starting.cancel(reason=f"{name} while starting")
                else:
                    log.info("signal %s: shutting down within %.0f s", name, budget.total_s)
                signalled.set()
                return

        async def watch_code() -> None:
            nonlocal start_again
            try:
                changed = await codewatch.wait_for_code_change(settings.code_watch_s)
            except Exception as exc:  # never the worker's end: it serves on, as before an upgrade
                logs.log_exception(log, "watching the code for an upgrade failed; no longer watching", exc)
                return
            if not signalled.is_set():
                start_again = True
                log.warning("sessionmem's code changed on disk (%s): stopping, to start again with the new code",
                            changed)
                signalled.set()

        async def watch_data_dir() -> None:
            nonlocal start_again
            assert serving is not None  # started once the services are
            await codewatch.wait_for_data_dir_change(serving.home, DATA_DIR_CHECK_S)
            if not signalled.is_set():
                start_again = True
                log.warning("the data dir %s was deleted or replaced under the worker: stopping, to start "
                            "again on what is there now", settings.data_dir)
                signalled.set()

        async with trio.open_nursery() as watching:
            watching.start_soon(watch_signals)
            with starting:
                async with open_services(settings, budget=budget, freeze_when_warm=True) as services:
                    serving = services
                    watching.start_soon(watch_data_dir)
                    if settings.code_watch_s > 0:
                        watching.start_soon(watch_code)
                    await serve_http(services, budget, shutdown_trigger=signalled.wait, task_status=task_status)
            watching.cancel_scope.cancel(reason="the worker stopped")
    if serving is not None:
        _report_shutdown(settings, budget, serving.status.pending_at_exit)
    else:
        log.info("stopped while starting; %d spooled request(s) wait for the next start",
                 len(pending_spool_files(str(settings.data_dir))))
    return start_again


@asynccontextmanager
async def open_services(settings: Settings, *, budget: ShutdownBudget | None = None,
                        compressor: Compressor | None = None,
                        clock: Callable[[], float] = trio.current_time,
                        freeze_when_warm: bool = False) -> AsyncIterator[Services]:
    """The worker's components, started and ready, for the duration of the block (HTTP is the caller's).

    The start-up ladder and the shut-down stages of the module docstring, one part a stage
    (:func:`_index_and_team`, :func:`_actors_serving`): :func:`run_worker` serves these services
    over HTTP, the in-process test harness (``sessionmem.testing.harness``) drives the same app
    directly. ``compressor``: by default the one the settings choose, now (``auto`` resolved once);
    ``clock``: the supervisor's, for its restart window; ``freeze_when_warm``: once everything is
    loaded, leave it out of later garbage collections (a worker process does; a test process,
    starting many workers, does not).

    Resource handling:
        Leaving the block shuts everything down within ``budget`` (begun on the way out if the
        caller has not begun it), each part stopping what it started, in the reverse order of
        the start; ``worker.json`` is removed. A failed or cancelled start still closes the models.
    """
    gcwatch.WATCH.install()
    token = _private_data_dir(settings)
    budget = budget or ShutdownBudget(settings.shutdown_timeout_s)
    # `auto` resolved here, once for the worker's life: the choice travels with the compressor (/debug, health).
    compressor = compressor or choose_compressor(settings)
    status = WorkerStatus(settings)
    compressor_closed = False
    log.info("starting sessionmem %s: data dir %s, compressor %s", __version__, settings.data_dir, compressor.name)
    # Searches embed their query in this process; catching up runs in a niced child process.
    model = choose_embedder(settings.embedder)
    embedder = EmbedderService(model, background=background_embedder(model))
    try:
        async with open_sqlite_store(settings.db_path) as store:
            async with _index_and_team(settings, store, embedder, budget) as (broadcaster, index, team):
                services = _services(settings, status, store, compressor, broadcaster, embedder, index,
                                     token=token, clock=clock, team=team)
                async with _actors_serving(services, budget, freeze_when_warm=freeze_when_warm):
                    yield services
                budget.done("actors")
            budget.done("index")
            compressor_closed = True
            await _close_models(compressor, embedder, timeout_s=budget.share(COMPRESSOR_SHARE))
            budget.done("compressor")
            await _before_closing_store(store, status, budget)
        budget.done("store")
    finally:
        if not compressor_closed:  # the start failed, or was cancelled
            await _close_models(compressor, embedder, timeout_s=1.0)
        remove_state(str(settings.data_dir), os.getpid())


def _private_data_dir(settings: Settings) -> str:
    """The data dir made private to its user (what cannot be is logged), and the token clients present
    (made at the first start); returns the token."""
    for problem in make_private(str(settings.data_dir)):
        log.warning("data dir: could not make private: %s", problem)
    return ensure_token(str(settings.data_dir))


async def _close_models(compressor: Compressor, embedder: EmbedderService, *, timeout_s: float) -> None:
    """Close the LLM client and the embedding model, shielded, within ``timeout_s``."""
    with trio.move_on_after(timeout_s, shield=True):
        await compressor.aclose()
        await embedder.aclose()


async def _before_closing_store(store: SQLiteStore, status: WorkerStatus, budget: ShutdownBudget) -> None:
    """Count the journal events left pending (for the shut-down report), and give the store's close, which
    commits what is queued, the rest of ``budget``."""
    with trio.move_on_after(budget.remaining(), shield=True):
        status.pending_at_exit = (await store.journal_counts()).pending
    store.close_timeout_s = budget.remaining()


async def _start_stoppable(nursery: trio.Nursery,
                           run: Callable[..., Awaitable[object]]) -> tuple[trio.CancelScope, Any]:
    """Start ``run`` in ``nursery`` as :meth:`trio.Nursery.start` does, inside a cancel scope that stops it
    alone; returns that scope, and what ``run`` reported when it started.

    Error handling:
        Cancelling the scope ends ``run`` and nothing else: a cancel scope absorbs only its own
        cancellation, so one from outside, and any error of ``run``'s, propagate into ``nursery``.
    """
    scope = trio.CancelScope()

    async def stoppable(*, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        with scope:
            await run(task_status=task_status)

    return scope, await nursery.start(stoppable)


@asynccontextmanager
async def _index_and_team(settings: Settings, store: SQLiteStore, embedder: EmbedderService,
                          budget: ShutdownBudget) -> AsyncIterator[tuple[Broadcaster, VectorIndex, TeamSync | None]]:
    """The live-event fan-out, the vector index it wakes, and with ``database_url`` the team sync, running
    for the block.

    Resource handling:
        The index and the team sync run in a nursery of their own. Leaving the block stops the team sync
        (what it has not pushed waits in the local store for the next start) and lets the index save what
        it added within its share of ``budget`` (what it could not embed in time is embedded again at the
        next start), and waits for both. An error or a cancellation leaving the block cancels them with
        the nursery.
    """
    async with trio.open_nursery() as outer:
        broadcaster = Broadcaster()
        index = VectorIndex(store, embedder, settings.index_dir, save_interval_s=settings.index_save_interval_s)
        # Loads (or rebuilds) in the background: searches use words alone meanwhile.
        indexing, _ = await _start_stoppable(outer, index.run)
        team = None
        if settings.database_url:
            from sessionmem.team.sync import TeamSync

            team = TeamSync(settings, store, index, broadcaster)
        syncing = trio.CancelScope()
        if team is not None:
            # Started once this data dir's machine id is stored (one local write), before any
            # event is replayed: the outbox begins above what was stored before. PostgreSQL is
            # connected to later, in the background; down at start is fine.
            syncing, _ = await _start_stoppable(outer, team.run)
        yield broadcaster, index, team
        syncing.cancel(reason="shutting down")
        index.close_timeout_s = budget.share(INDEX_SHARE)
        indexing.cancel(reason="shutting down")


@asynccontextmanager
async def _actors_serving(services: Services, budget: ShutdownBudget, *, freeze_when_warm: bool) -> AsyncIterator[None]:
    """The supervisor with every pending journal event queued for its actor, then the spool imported: ready
    (``status.ready``) for the block; then the warm-up and the maintenance tasks in the background.

    Resource handling:
        Leaving the block (normally, on an error or cancelled) begins ``budget`` if the caller has not,
        stops the spool import and the maintenance tasks, and closes the mailboxes so that the actors
        drain within :data:`DRAIN_SHARE`; it returns once every task of its nursery has ended.
    """
    supervisor, router, store, compressor = services.supervisor, services.router, services.store, services.compressor
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        pending = await store.pending_events()
        router.replay(pending)
        if pending:
            log.info("replaying %d pending journal event(s)", len(pending))
        # Events clients spooled while the worker was down are older than anything
        # they send from now on: import them before reporting ready.
        importing, imported = await _start_stoppable(nursery, services.spool.run)
        if imported:
            log.info("imported events that clients spooled while the worker was down")
        services.status.ready.set()
        # What the first requests would otherwise wait for, loaded once the worker is ready.
        compressor.seed_usage(await store.llm_tokens_since(utc_day(time.time()) * SECONDS_PER_DAY))
        nursery.start_soon(partial(_warm_up, compressor, services.ingestor.redactor, services.embedder,
                                   freeze=freeze_when_warm))
        maintenance = trio.CancelScope()
        nursery.start_soon(_maintain, services, maintenance)
        try:
            yield
        finally:
            if not budget.begun:
                budget.begin()
            importing.cancel(reason="shutting down")
            maintenance.cancel(reason="shutting down")
            supervisor.shutdown(drain_s=budget.share(DRAIN_SHARE))


async def _maintain(services: Services, scope: trio.CancelScope) -> None:
    """The event-loop watch, the raw-data pruner and the consolidation pass, until ``scope`` is cancelled."""
    with scope:
        async with trio.open_nursery() as tasks:
            tasks.start_soon(services.loop.run)
            tasks.start_soon(services.pruner.run)
            tasks.start_soon(services.consolidator.run)


def _services(settings: Settings, status: WorkerStatus, store: Store, compressor: Compressor,
              broadcaster: Broadcaster, embedder: EmbedderService, index: VectorIndex, *, token: str,
              clock: Callable[[], float], team: TeamSync | None = None) -> Services:
    """The components that need nothing started: actors, routing, the HTTP edge, search."""
    redactor = Redactor(enabled=settings.redact_secrets, extra_patterns=settings.redact_patterns)
    deps = ActorDeps(settings, store, compressor, broadcaster, redact=redactor.text)
    policy = RestartPolicy(settings.max_restarts, settings.restart_window_s)
    supervisor = ActorSupervisor(lambda child: SessionActor(child, deps).run(), policy,
                                 give_up=partial(park_failed_session, deps),
                                 transient=(StorageUnavailable,), clock=clock)
    router = SessionRouter(supervisor, mailbox_size=settings.mailbox_size, restart_policy=policy)
    search = SearchService(store, index, embedder)
    told = ToldLedger()  # shared: a memory told at SessionStart is not recalled again in the session
    consolidator = Consolidator(store, told.observations, enabled=settings.consolidation)  # what is merged, superseded, used
    already_said = AlreadySaid(claude_config_dir=settings.claude_config_dir)  # shared: one cache of the files
    recall = Recall(store, search, file_max=settings.file_recall_max, prompt_max=settings.prompt_recall_max,
                    prompt_budget_s=settings.prompt_recall_budget_s,
                    other_machines=settings.context_other_machines, min_similarity=settings.recall_min_similarity,
                    told=told, already_said=already_said, consolidated=consolidator)
    ingestor = Ingestor(settings, store, router, redactor, recall=recall, told=told)
    guard = AccessGuard(token=token, port=settings.port,
                        extra_host="" if is_loopback(settings.host) else settings.host)
    pool = ConnectionPool(max_connections=connection_limit(settings.max_connections),
                          request_timeout_s=settings.request_timeout_s)
    home = codewatch.DataDirIdentity(settings.data_dir, settings.db_path)
    return Services(
        settings=settings, status=status, store=store, router=router, supervisor=supervisor, compressor=compressor,
        broadcaster=broadcaster, ingestor=ingestor,
        spool=SpoolImporter(ingestor, settings.data_dir, max_body_bytes=settings.max_body_bytes,
                            still_ours=home.still_ours),
        guard=guard, connections=pool, embedder=embedder, index=index, search=search,
        context=ContextPlanner(store, index, embedder, observations=settings.context_observations,
                               files=settings.context_files,
                               other_machines=settings.context_other_machines,
                               min_similarity=settings.recall_min_similarity, told=told,
                               already_said=already_said, consolidated=consolidator),
        pruner=Pruner(store, retention_days=settings.raw_retention_days), consolidator=consolidator,
        loop=LoopWatch(), home=home, team=team)


async def _warm_up(compressor: Compressor, redactor: Redactor, embedder: EmbedderService, *, freeze: bool) -> None:
    """Load the LLM client, the secret detectors and the embedding model off the Trio thread; a failure
    only costs the first use. ``freeze``: then keep what is loaded out of later garbage collections
    (:func:`~sessionmem.runtime.gcwatch.freeze_startup_objects`), and collect young objects less often
    (:func:`~sessionmem.runtime.gcwatch.widen_young_generation`)."""
    try:
        await trio.to_thread.run_sync(redactor.load)
        await compressor.warm_up()
        await embedder.warm_up()
    except EmbedderUnavailableError as exc:  # an install to repair, which doctor says: one line, no traceback
        log.warning("semantic search is off, words-only: %s", exc)
    except Exception as exc:
        logs.log_exception(log, "warming up failed; the first use will load what it needs", exc)
    if freeze:
        gcwatch.freeze_startup_objects()
        gcwatch.widen_young_generation()


def _report_shutdown(settings: Settings, budget: ShutdownBudget, pending_left: int) -> None:
    if not budget.begun:
        return
    report = ShutdownReport(os.getpid(), time.time(), budget.total_s, budget.took(), budget.stages, pending_left)
    stages = ", ".join(f"{stage.name} {stage.seconds:.2f} s" for stage in report.stages)
    log.info("sessionmem worker stopped in %.2f s of its %.0f s budget (%s); %d event(s) left pending for the next "
             "start", report.took_seconds, report.budget_seconds, stages, report.pending_events)
    try:
        write_json_atomically(str(settings.data_dir / SHUTDOWN_REPORT_FILE), msgspec.to_builtins(report))
    except OSError as exc:
        log.warning("could not write the shutdown report: %s", exc)


async def serve_http(services: Services, budget: ShutdownBudget, *,
                     shutdown_trigger: Callable[[], Awaitable[None]],
                     task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``services`` over HTTP until ``shutdown_trigger`` returns, then close within the budget's share.

    Records pid and port in ``worker.json`` once bound and reports the port via ``task_status``.
    """
    settings, status = services.settings, services.status
    config = HypercornConfig()
    config.bind = [f"{settings.host}:{settings.port}"]
    config.accesslog = logging.getLogger("hypercorn.access") if settings.access_log else None
    config.errorlog = logging.getLogger("hypercorn.error")
    config.keep_alive_timeout = settings.keep_alive_timeout_s
    app = create_app(services)
    stop_http = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(serve_app, app, config, services.connections,
                                            shutdown_trigger=stop_http.wait))
        port = int(binds[0].rsplit(":", 1)[1])
        services.guard.bind(port)
        status.base_url = f"http://{settings.host}:{port}"
        write_state(str(settings.data_dir), WorkerState(os.getpid(), settings.host, port, status.started_at,
                                                       __version__))
        log.info("listening on %s", status.base_url)
        task_status.started(port)
        await shutdown_trigger()
        budget.begin()
        # Live streams end first, or the graceful close would wait for them.
        services.broadcaster.close()
        config.graceful_timeout = budget.share(HTTP_SHARE)  # read by Hypercorn once triggered
        stop_http.set()
    budget.done("http")
