"""The worker's read API as the MCP server calls it: over HTTP, off the event loop.

Every call is one request through :mod:`sessionmem.protocol` -- its HTTP client, its
token, ``worker.json`` for the port, and the one delivery policy every client follows
(:func:`~sessionmem.protocol.delivery.deliver`: a 503 is retried after its
``Retry-After``; a read that cannot be answered is simply unavailable).

**A worker that is not running is started**, the way the SessionStart hook starts it
(:func:`~sessionmem.protocol.launch.ensure_worker`: detached, one start for concurrent
callers, bounded wait). Claude Code starts MCP servers at the same moment it runs the
SessionStart hook, so the worker is usually up by the first tool call; when it is not
(the hooks are not installed, or the worker was stopped), a search should still work
rather than tell the model to ask the user to start something.

Resource handling:
    The protocol client is blocking sockets, so each call runs on a worker thread
    (``anyio.to_thread``) under a :class:`anyio.CapacityLimiter` of
    :data:`CONCURRENT_CALLS`: the event loop keeps answering pings and cancellations
    while a search runs. Reads only: a call abandoned by a cancelled tool call finishes
    on its thread and its answer is dropped, which harms nothing.

Error handling:
    :class:`MemoryRefused` when the worker judged the request bad (a 4xx, with the
    worker's own message and the parameter at fault); :class:`MemoryUnavailable` when
    the worker cannot be reached or started, answers a failure (a 5xx, with its own
    message: the team database cannot be reached), or answers something that is not its
    JSON. Both carry a message written for the model; the tools turn them into tool
    errors.
"""

from __future__ import annotations

import json
import logging
from functools import partial
from typing import Any
from urllib.parse import urlencode

import anyio
import anyio.to_thread

from sessionmem.protocol import routes
from sessionmem.protocol.client_settings import ClientConfig
from sessionmem.protocol.delivery import Patience, deliver
from sessionmem.protocol.launch import ensure_worker

log = logging.getLogger(__name__)

CONCURRENT_CALLS = 4  # a model rarely runs more than a few tools at once; the rest wait their turn
# Reads wait for a busy worker (503 Retry-After) but do not retry a failure: a failing
# search is answered as such at once, and the model can decide what to do about it.
READ_PATIENCE = Patience(20.0, 15.0, retry_failures=False)
START_TIMEOUT_S = 15.0  # a worker started by a tool call: a cold start on a loaded machine


class MemoryUnavailable(Exception):
    """The worker could not be reached or started, or did not answer properly."""


class MemoryRefused(Exception):
    """The worker refused the request (a 4xx): ``str()`` is its message, naming the parameter at fault."""


class MemoryClient:
    """Search, timeline and observations by id, asked of the worker of ``config``."""

    def __init__(self, config: ClientConfig, *, start_worker: bool = True) -> None:
        self._config = config
        self._start_worker = start_worker
        self._limiter = anyio.CapacityLimiter(CONCURRENT_CALLS)
        # A tool call can wait longer than a hook for a worker it starts (as backfill does).
        if config.start_timeout_s < START_TIMEOUT_S:
            config.start_timeout_s = START_TIMEOUT_S

    async def search(self, params: dict[str, str | int]) -> dict[str, Any]:
        """``GET /api/search`` with these query parameters (``q`` and filters)."""
        return await self._call("GET", f"{routes.SEARCH}?{urlencode(params)}")

    async def timeline(self, params: dict[str, str | int]) -> dict[str, Any]:
        """``GET /api/timeline`` with ``anchor`` or ``q``, ``before``, ``after`` (and filters with ``q``)."""
        return await self._call("GET", f"{routes.TIMELINE}?{urlencode(params)}")

    async def observations(self, ids: list[int]) -> dict[str, Any]:
        """``POST /api/observations/batch``: ``{"observations": [...], "missing": [...]}``."""
        return await self._call("POST", routes.OBSERVATION_BATCH, json.dumps({"ids": ids}).encode())

    async def _call(self, method: str, path: str, body: bytes | None = None) -> dict[str, Any]:
        # abandon_on_cancel: a read left running on its thread harms nothing (see the module docstring).
        return await anyio.to_thread.run_sync(partial(self._call_blocking, method, path, body),
                                              limiter=self._limiter, abandon_on_cancel=True)

    def _call_blocking(self, method: str, path: str, body: bytes | None) -> dict[str, Any]:
        if self._start_worker:
            problems: list[str] = []

            def note(message: str) -> None:  # to stderr, which Claude Code keeps in its MCP logs
                problems.append(message)
                log.warning("%s", message)

            if ensure_worker(self._config, note) is None:
                raise MemoryUnavailable(
                    f"the sessionmem worker is not running and could not be started "
                    f"({'; '.join(problems) or 'no reason given'}); `sessionmem doctor` says why")
        outcome = deliver(self._config, method, path, body, patience=READ_PATIENCE)
        reply = outcome.reply
        if outcome.status == "refused" and reply is not None:
            raise MemoryRefused(_error_message(reply.body, reply.status))
        if not outcome.delivered and reply is not None:  # it answered, with a failure (the team database away)
            raise MemoryUnavailable(_error_message(reply.body, reply.status))
        if not outcome.delivered or reply is None:
            raise MemoryUnavailable(f"the sessionmem worker did not answer: {outcome.detail}")
        try:
            answer = reply.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise MemoryUnavailable(f"not a sessionmem worker answer: {reply.body[:200]!r}")
        return answer


def _error_message(body: bytes, status: int) -> str:
    """The worker's ``{"error", "path"}`` as one line; a body that is not one, as it is."""
    try:
        error = json.loads(body)
        message, where = str(error["error"]), str(error.get("path") or "")
    except (ValueError, KeyError, TypeError):
        return f"HTTP {status}: {body[:300].decode('utf-8', 'replace')}"
    return f"{message} ({where})" if where else message
