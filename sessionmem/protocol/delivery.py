"""The one back-pressure and failure policy every client follows (hooks, backfill, commands).

What the worker's answer means, and what a client does about it:

=====================================  ==========================================================
the worker answers                     the client
=====================================  ==========================================================
2xx                                    done (a duplicate of an accepted event is a 2xx too)
503 with ``Retry-After``               waits that long and sends again while its patience lasts,
(a session's mailbox is full)          then spools
any other 5xx (a 503 without           a patient client retries with backoff while its patience
``Retry-After``: something the worker  lasts; then every client spools (a read is unavailable,
needs is away), a timeout, a reset,    with the worker's last answer, if it answered)
nothing listening
401 (no token, or a stale one)         spooled: only the data dir's owner can write the spool, and
                                       the worker imports it itself
any other 4xx                          refused: the worker judged the request, sending it again
                                       cannot help; reported, not spooled
=====================================  ==========================================================

Patience is the main difference between clients: a hook has its hook budget
(``hook_timeout_s``, 2 s by default) because Claude Code waits for it; backfill and the
``sessionmem`` commands have minutes.

Order: a hook's event goes to the spool, not the worker, while the spool still holds
events (``keep_order``). A session's events must arrive in order (``init`` before its
observations, ``complete`` last), and the worker imports the spool only every few
seconds: an event posted straight past its session's spooled ``init`` would reach the
worker first. Backfill and the commands send past sessions, which live events cannot
overtake, so they do not wait behind the spool. Only ingest requests are spooled (:mod:`.spool`);
they carry an idempotency key, so a request that reached a slow worker *and* was
spooled is stored once. A read (a GET) that cannot be answered is simply unavailable.

Error handling:
    :func:`deliver` never raises for an expected failure: the :class:`Outcome` says
    what happened (``delivered``, ``refused``, ``spooled``, ``unavailable``, ``lost``).
"""

from __future__ import annotations

import time

from sessionmem.protocol.client import WorkerUnavailable, request
from sessionmem.protocol.routes import INGEST, RETRY_AFTER
from sessionmem.protocol.spool import spool_pending, write_spool_file

TYPE_CHECKING = False  # typing costs a hook ~4 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from collections.abc import Callable

    from sessionmem.protocol.client import Reply
    from sessionmem.protocol.client_settings import ClientConfig

DEFAULT_RETRY_AFTER_S = 1.0
NO_LIVE_WORKER = "no worker of this data dir is running (worker.json names none alive)"
BACKOFF_FIRST_S = 0.25
BACKOFF_CAP_S = 5.0


class Patience:
    """How long a client keeps trying: ``total_s`` in all, ``request_timeout_s`` per attempt.

    ``retry_failures``: whether 5xx answers and unreachable workers are retried (with
    backoff) or spooled at once. A 503's ``Retry-After`` is always honoured while
    ``total_s`` lasts. ``keep_order``: whether an ingest request queues behind the
    spooled ones (see the module's docstring).
    """

    __slots__ = ("total_s", "request_timeout_s", "retry_failures", "keep_order")

    def __init__(self, total_s: float, request_timeout_s: float, *, retry_failures: bool,
                 keep_order: bool = False) -> None:
        self.total_s = total_s
        self.request_timeout_s = request_timeout_s
        self.retry_failures = retry_failures
        self.keep_order = keep_order

    @classmethod
    def hook(cls, config: ClientConfig) -> Patience:
        """A hook's: its HTTP budget, no retry of failures (the spool is faster than a broken worker)."""
        budget = config.hook_timeout_s
        return cls(budget, budget, retry_failures=False, keep_order=True)

    @classmethod
    def patient(cls, total_s: float = 300.0) -> Patience:
        """Backfill's and the commands': minutes, retrying failures, 30 s per attempt."""
        return cls(total_s, 30.0, retry_failures=True)


class Outcome:
    """What became of one request.

    ``status``: ``delivered`` (``reply`` holds the 2xx answer), ``refused`` (a 4xx, in
    ``reply``), ``spooled`` (saved for the worker to import), ``unavailable`` (a read
    that could not be answered; ``reply`` holds the worker's 5xx answer, if it gave one),
    ``lost`` (could not even be spooled). ``detail`` says why it was not delivered.
    """

    __slots__ = ("status", "reply", "detail", "attempts")

    def __init__(self, status: str, reply: Reply | None = None, detail: str = "", attempts: int = 0) -> None:
        self.status = status
        self.reply = reply
        self.detail = detail
        self.attempts = attempts

    @property
    def delivered(self) -> bool:
        return self.status == "delivered"


def retry_after_seconds(reply: Reply) -> float:
    try:
        return max(0.0, float(reply.headers.get(RETRY_AFTER, "") or DEFAULT_RETRY_AFTER_S))
    except ValueError:
        return DEFAULT_RETRY_AFTER_S


def deliver(config: ClientConfig, method: str, path: str, body: bytes | None, *, patience: Patience,
            sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> Outcome:
    """Send one request to the worker of ``config`` under the policy of this module."""
    deadline = clock() + patience.total_s
    spoolable = body if method == "POST" and path in INGEST else None  # what is spooled if not delivered
    if spoolable is not None and patience.keep_order and spool_pending(config.data_dir):
        return _spool(config, path, spoolable, "behind spooled events", 0)
    attempts = 0
    backoff = BACKOFF_FIRST_S
    while True:
        attempts += 1
        remaining = deadline - clock()
        backing_off = False
        failed: Reply | None = None  # a 5xx answer, kept for a read that ends unavailable
        try:
            port = config.live_port()
            if port is None:  # nothing is sent to a port no worker of ours holds (ClientConfig.live_port)
                raise WorkerUnavailable(NO_LIVE_WORKER, refused=True)
            reply = request(config.host, port, method, path, body,
                            timeout=max(0.05, min(patience.request_timeout_s, remaining)), token=config.token())
        except WorkerUnavailable as exc:
            wait, backing_off, detail = None, patience.retry_failures, str(exc)
        else:
            if reply.status < 300:
                return Outcome("delivered", reply, attempts=attempts)
            detail = f"HTTP {reply.status}: {reply.body[:300].decode('utf-8', 'replace')}"
            failed = reply if reply.status >= 500 else None
            if reply.status == 503 and RETRY_AFTER in reply.headers:  # back-pressure: as long as it says
                wait = retry_after_seconds(reply)
            elif reply.status == 401:
                wait = None
            elif reply.status >= 500:
                wait, backing_off = None, patience.retry_failures
            else:
                return Outcome("refused", reply, detail, attempts)
        if backing_off:
            wait, backoff = backoff, min(backoff * 2, BACKOFF_CAP_S)
        if wait is not None and clock() + wait < deadline:
            sleep(wait)
            continue
        if spoolable is None:
            return Outcome("unavailable", failed, detail, attempts)
        return _spool(config, path, spoolable, detail, attempts)


def _spool(config: ClientConfig, path: str, body: bytes, detail: str, attempts: int) -> Outcome:
    saved, reason = write_spool_file(config.data_dir, path, body)
    if saved:
        return Outcome("spooled", None, detail, attempts)
    return Outcome("lost", None, f"{detail}; not spooled: {reason}", attempts)
