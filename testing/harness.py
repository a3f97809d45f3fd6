"""The worker in-process, for tests: real store on a temporary directory, real actors, real app.

:func:`open_worker` starts exactly what ``sessionmem serve`` runs
(:func:`sessionmem.worker.open_services`: SQLite store, supervisor and router, the
compressor, spool import) and drives its ASGI app directly (:mod:`.asgi`), with no
process and no socket. :func:`serve_in_thread` serves the same worker over real HTTP
from a thread of the test process, for clients that are processes (hooks, commands)
without the cost of starting a worker process. Tests that need the worker to be a
process of its own -- ``kill -9``, signals, ``sessionmem stop`` -- use
:mod:`.worker_process`.

Settings come from the keyword arguments only (the developer's environment is not
read). The supervisor's clock can be given (``clock=``): with
``trio.testing.MockClock(autojump_threshold=0)`` as the run's clock, batch quiet
periods, idle stops and restart windows take no wall time. Note that a task waiting
for SQLite on a worker thread counts as blocked to an autojump clock; assert on
outcomes, not on exact virtual times, when the real store is involved.

Resource handling:
    Leaving the block shuts the worker down as SIGTERM would.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import trio

from sessionmem.compress.base import Compressor
from sessionmem.protocol import routes
from sessionmem.protocol.auth import bearer, read_token
from sessionmem.server.app import create_app
from sessionmem.server.debug import debug_snapshot
from sessionmem.server.jsonapi import to_api
from sessionmem.server.services import Services
from sessionmem.settings import Settings, load_settings
from sessionmem.testing.asgi import ASGIReply, asgi_request, open_asgi_stream
from sessionmem.testing.worker_process import WorkerClient
from sessionmem.worker import ShutdownBudget, open_services, serve_http


class InProcessWorker:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.settings: Settings = services.settings
        self.data_dir = services.settings.data_dir
        self.app = create_app(services)

    @property
    def token(self) -> str:
        return read_token(str(self.data_dir)) or ""

    def client_headers(self, **extra: str) -> dict[str, str]:
        """What a well-behaved local client sends: this worker's Host, and its token."""
        return {"host": f"127.0.0.1:{self.settings.port}", "authorization": bearer(self.token), **extra}

    async def request(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
                      headers: dict[str, str] | None = None) -> ASGIReply:
        """One request as a local client sends it (``headers`` replace or add to :meth:`client_headers`)."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        sent = {**self.client_headers(), **(headers or {})}
        return await asgi_request(self.app, method, path, data, headers={k: v for k, v in sent.items() if v is not None})

    async def post(self, path: str, body: Any) -> Any:
        """POST JSON; returns the decoded answer (any status: check it with :meth:`request` if it matters)."""
        return (await self.request("POST", path, body)).json()

    async def get(self, path: str) -> Any:
        reply = await self.request("GET", path)
        if reply.status != 200:
            raise AssertionError(f"GET {path} -> {reply.status}: {reply.body[:500]!r}")
        return reply.json() if reply.headers.get("content-type") == "application/json" else reply.body.decode()

    def stream(self, path: str = routes.STREAM) -> Any:
        return open_asgi_stream(self.app, path, headers=self.client_headers())

    async def debug(self) -> dict[str, Any]:
        """The ``/debug`` document, as JSON would have it."""
        return to_api(await debug_snapshot(self.services))

    async def wait_idle(self, *, timeout: float = 30.0, poll: float = 0.01) -> None:
        """Wait until the journal has nothing pending and no actor holds work."""
        with trio.fail_after(timeout):
            while True:
                counts = await self.services.store.journal_counts()
                if counts.pending == 0 and self.services.router.queued() == 0 \
                        and not self.services.router.working():
                    return
                await trio.sleep(poll)


@asynccontextmanager
async def open_worker(data_dir: Path, *, compressor: Callable[[Settings], Compressor] | None = None,
                      clock: Callable[[], float] = trio.current_time, **settings: Any) -> AsyncIterator[InProcessWorker]:
    """The worker on ``data_dir`` with these settings, for the block.

    ``compressor`` builds the compressor from the settings (default: the offline one,
    whatever the environment says).
    """
    settings.setdefault("compressor", "offline")
    loaded = load_settings({}, data_dir=str(data_dir), **settings)
    built = compressor(loaded) if compressor is not None else None
    async with open_services(loaded, compressor=built, clock=clock) as services:
        yield InProcessWorker(services)


class ThreadedWorker(WorkerClient):
    """A worker served over HTTP from a thread of this process; :meth:`stop` shuts it down gracefully."""

    def __init__(self, data_dir: Path, settings: dict[str, Any], timeout: float = 30.0) -> None:
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._port = 0
        self._thread = threading.Thread(target=self._run, args=(data_dir, settings), name="threaded-worker",
                                        daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout) or self._failure is not None:
            raise RuntimeError(f"the threaded worker did not start: {self._failure!r}")
        super().__init__(data_dir, self._port)

    def _run(self, data_dir: Path, settings: dict[str, Any]) -> None:
        try:
            trio.run(self._serve, data_dir, settings)
        except BaseException as exc:  # reported to the starting thread, or by stop()
            self._failure = exc
            self._ready.set()

    async def _serve(self, data_dir: Path, settings: dict[str, Any]) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        loaded = load_settings({}, data_dir=str(data_dir), **{"compressor": "offline", "port": 0, **settings})
        budget = ShutdownBudget(loaded.shutdown_timeout_s)
        async with open_services(loaded, budget=budget) as services, trio.open_nursery() as nursery:
            self._port = await nursery.start(partial(serve_http, services, budget, shutdown_trigger=self._stop.wait))
            self._ready.set()

    def stop(self, timeout: float = 30.0) -> None:
        if self._token is not None and self._stop is not None and self._thread.is_alive():
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise RuntimeError("the threaded worker did not stop")
        if self._failure is not None:
            raise RuntimeError("the threaded worker failed") from self._failure

    def __enter__(self) -> ThreadedWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_in_thread(data_dir: Path, **settings: Any) -> ThreadedWorker:
    """The worker on ``data_dir`` (offline compressor, a free port), served over HTTP from a thread."""
    return ThreadedWorker(data_dir, settings)
