"""Serving the app over HTTP/1.1: Hypercorn speaks the protocol, this module owns the connections.

Hypercorn's trio ``serve`` accepts every connection it can and holds each as long
as the client likes: a few hundred idle or trickling connections use up the process's
file descriptors, after which nothing is accepted (and trio logs a traceback every
100 ms). :func:`serve` is Hypercorn's own ladder (``hypercorn.trio.run.worker_serve``:
lifespan start-up, serve until the trigger, a graceful close) around a
:class:`ConnectionPool` of our own:

- at most ``max_connections`` at once (kept below the file-descriptor limit);
- a newcomer at the cap is let in by closing another connection: the quietest of
  those with no request in progress (a connection that never sent anything, a
  keep-alive connection between requests, a live stream), else the oldest request
  still being sent after :data:`SLOW_REQUEST_S` (a client dripping bytes); a request
  being answered is never cut. With nothing to close, the newcomer is closed at once;
- a request that has begun but not been answered within ``request_timeout_s``
  (headers or a body sent a byte at a time) is cut off;
- idle keep-alive connections are closed after ``keep_alive_timeout_s``, by one timer task
  per connection whose deadline moves (:class:`_IdleTimer`), not by a task started and
  cancelled for every request as Hypercorn's ``TrioSingleTask`` does.

Pinned: ``hypercorn==0.18.0``, whose trio ``TCPServer`` (its ``idle_task``,
``_read_data`` and ``_initiate_server_close``), ``WorkerContext`` and ``Lifespan`` this
module uses (tests/test_connections.py holds it to them).

Resource handling:
    Every connection runs in the server nursery and is closed when it ends, is
    evicted, or at the graceful-close deadline.

Error handling:
    Running out of file descriptors (``accept`` failing with ``EMFILE``) is counted
    and waited out quietly; other accept errors propagate.
"""

from __future__ import annotations

import errno
import logging
import math
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import msgspec
import trio
from hypercorn.config import Config
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.utils import raise_shutdown, repr_socket_addr, wrap_app

from sessionmem.protocol.oskit import open_files_limit

log = logging.getLogger(__name__)

SLOW_REQUEST_S = 2.0  # a local request arrives in milliseconds: one still arriving after this is hostile
SWEEP_INTERVAL_S = 1.0
ACCEPT_RETRY_S = 0.1
CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
RESERVED_FILES = 64  # descriptors kept for the database, logs and the spool, below the process limit


class ConnectionStatistics(msgspec.Struct, frozen=True, kw_only=True):
    max_connections: int
    open: int
    peak: int
    accepted: int
    evicted: int  # closed to make room for a newcomer
    refused: int  # closed at once: at the cap, nobody quiet enough to evict
    timed_out: int  # a request not answered within request_timeout_s
    accept_errors: int  # accept failed for lack of file descriptors (waited out)


EOF_WAIT_S = 1.0  # how long a close waits for a send in progress before it closes without an EOF


class _Connection(trio.abc.HalfCloseableStream):
    """A socket stream that notes when it last moved bytes, and whether a request awaits its answer.

    Sends and the EOF take turns. Hypercorn's close (``TCPServer._close``) sends the EOF
    without its send lock, so under load it could run while a response's last write was
    under way (after ``keep_alive_max_requests``, or a client gone): trio refused one of
    them with ``BusyResourceError`` and a traceback was logged as "Error in ASGI Framework".
    """

    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        self._turn = trio.Lock()
        self._head = b""  # a response head waiting for its body (see send_all)
        self.socket = stream.socket
        self.quiet_since = trio.current_time()
        self.request_since: float | None = None

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Send ``data``; a response head with a body to come waits for it, to go out in one write.

        Hypercorn writes a response as three sends: the head, the body, and the end of
        the message (empty with a content-length). One ``send`` call instead of two, and
        none for nothing, is ~0.1 ms less of the Trio thread per hook event. Hypercorn's next write
        after a head is always that response's body or its (empty) end, so a head waits
        no longer than that; a head without a body to come (no content-length, or 0:
        informational answers, streams, empty answers) goes at once.
        """
        self.request_since = None  # the answer has begun
        if not data and not self._head:
            await trio.lowlevel.checkpoint()
            return
        if not self._head and _has_body_to_come(data):
            self._head = bytes(data)
            await trio.lowlevel.checkpoint()
            return
        async with self._turn:
            if self._head:
                data, self._head = self._head + bytes(data), b""
            await self._stream.send_all(data)
        self.quiet_since = trio.current_time()

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await self._stream.receive_some(max_bytes)
        now = trio.current_time()
        self.quiet_since = now
        if data and self.request_since is None:
            self.request_since = now
        return data

    async def send_eof(self) -> None:
        # A send stuck on a client that does not read must not hold the close: the
        # ``aclose`` that follows ends the connection all the same.
        with trio.move_on_after(EOF_WAIT_S):
            async with self._turn:
                if self._head:  # never the case with Hypercorn; a head is not dropped all the same
                    head, self._head = self._head, b""
                    await self._stream.send_all(head)
                await self._stream.send_eof()

    async def aclose(self) -> None:
        await self._stream.aclose()


def _has_body_to_come(data: bytes | bytearray | memoryview) -> bool:
    """Whether ``data`` is a whole HTTP/1.1 response head announcing a body of one byte or more."""
    if len(data) > 8192:
        return False
    head = bytes(data)
    if not head.startswith(b"HTTP/1.1 ") or not head.endswith(b"\r\n\r\n"):
        return False
    head = head.lower()
    at = head.find(b"\r\ncontent-length:")
    if at < 0:
        return False
    value = head[at + 17 : head.find(b"\r\n", at + 17)].strip()
    return value.isdigit() and int(value) > 0


class _IdleTimer:
    """Closes a keep-alive connection that stays idle for ``timeout``: Hypercorn's ``idle_task``, cheaper.

    Hypercorn calls ``restart`` when a connection turns idle (it was answered) and
    ``stop`` when a request begins. Its own ``TrioSingleTask`` takes a lock and starts a
    new task for each ``restart``, and cancels it at ``stop``: under load that was ~10 %
    of the Trio thread's samples (py-spy, ``bench/run.py throughput``). Here one task per
    connection waits in a cancel scope whose deadline ``restart`` and ``stop`` move
    (infinite while a request is in progress), which costs no task switch at all.

    As with Hypercorn's: an idle connection is closed at the deadline, or at once when the
    worker shuts down (``terminated``); a busy one is left to finish its answer (Hypercorn
    closes it then, seeing the shutdown).

    Resource handling:
        The task runs in the connection's task group and ends when the connection's
        reading does (:meth:`close`), at the latest.
    """

    def __init__(self, timeout: float, terminated: Any, close_connection: Callable[[], Awaitable[None]]) -> None:
        self._timeout = timeout
        self._terminated = terminated  # hypercorn's EventWrapper: async wait()
        self._close_connection = close_connection
        self._idle = False
        # Made before its task enters it: a scope's deadline can be moved, and the scope
        # cancelled, before it is entered.
        self._wait = trio.CancelScope()
        self._started = False

    async def restart(self, task_group: Any, action: Callable[[], Awaitable[None]]) -> None:
        self._idle = True
        self._wait.deadline = trio.current_time() + self._timeout
        if not self._started:
            self._started = True
            task_group.spawn(self._watch)

    async def stop(self) -> None:
        self._idle = False
        self._wait.deadline = math.inf

    def close(self) -> None:
        """The connection's reading ended: nothing is left to time out."""
        self._idle = False
        self._wait.cancel()

    async def _watch(self) -> None:
        with self._wait:
            await self._terminated.wait()
        if self._idle:  # the deadline passed while idle, or the worker is shutting down
            with trio.CancelScope(shield=True):
                await self._close_connection()


class _TCPServer(TCPServer):
    """Hypercorn's connection handler with :class:`_IdleTimer` as its idle timeout."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._idle_timer = _IdleTimer(self.config.keep_alive_timeout, self.context.terminated,
                                      self._initiate_server_close)
        # Not a TrioSingleTask: Hypercorn calls only its restart and stop, which _IdleTimer has.
        self.idle_task = self._idle_timer  # type: ignore[assignment]

    async def _read_data(self) -> None:
        try:
            await super()._read_data()
        finally:
            self._idle_timer.close()


class ConnectionPool:
    """The accept loop and its limits (see the module docstring)."""

    def __init__(self, *, max_connections: int, request_timeout_s: float) -> None:
        self._max = max_connections
        self._request_timeout_s = request_timeout_s
        self._open: set[_Connection] = set()
        self._peak = self._accepted = self._evicted = self._refused = self._timed_out = self._accept_errors = 0

    def statistics(self) -> ConnectionStatistics:
        return ConnectionStatistics(max_connections=self._max, open=len(self._open), peak=self._peak,
                                    accepted=self._accepted, evicted=self._evicted, refused=self._refused,
                                    timed_out=self._timed_out, accept_errors=self._accept_errors)

    async def serve(self, listener: trio.SocketListener, handler: Callable[[_Connection], Awaitable[None]],
                    handler_nursery: trio.Nursery) -> None:
        async with listener, trio.open_nursery() as sweeper:
            sweeper.start_soon(self._sweep, handler_nursery)
            while True:
                try:
                    stream = await listener.accept()
                except OSError as exc:
                    if exc.errno not in CAPACITY_ERRNOS:
                        raise
                    self._accept_errors += 1
                    await trio.sleep(ACCEPT_RETRY_S)
                    continue
                self._accepted += 1
                if len(self._open) >= self._max and not self._evict(handler_nursery):
                    self._refused += 1
                    handler_nursery.start_soon(stream.aclose)
                    continue
                connection = _Connection(stream)
                self._open.add(connection)
                self._peak = max(self._peak, len(self._open))
                handler_nursery.start_soon(self._run, connection, handler)

    async def _run(self, connection: _Connection, handler: Callable[[_Connection], Awaitable[None]]) -> None:
        try:
            await handler(connection)
        finally:
            self._open.discard(connection)
            with trio.CancelScope(shield=True):
                await connection.aclose()

    def _evict(self, nursery: trio.Nursery) -> bool:
        """Close one connection to make room (see the module docstring); True if one was."""
        idle = [c for c in self._open if c.request_since is None]
        if idle:
            victim = min(idle, key=lambda c: c.quiet_since)
        else:
            oldest = min(self._open, key=lambda c: c.request_since or 0.0, default=None)
            if oldest is None or trio.current_time() - (oldest.request_since or 0.0) < SLOW_REQUEST_S:
                return False
            victim = oldest
        self._open.discard(victim)
        self._evicted += 1
        nursery.start_soon(victim.aclose)  # its reader sees the stream closed and ends
        return True

    async def _sweep(self, nursery: trio.Nursery) -> None:
        """Cut off requests that have waited for their answer too long (slow-drip headers and bodies)."""
        while True:
            await trio.sleep(SWEEP_INTERVAL_S)
            deadline = trio.current_time() - self._request_timeout_s
            for connection in [c for c in self._open if c.request_since is not None and c.request_since < deadline]:
                self._open.discard(connection)
                self._timed_out += 1
                nursery.start_soon(connection.aclose)


def connection_limit(max_connections: int) -> int:
    """``max_connections``, kept below this process's open-files limit (where the OS has one)."""
    limit = open_files_limit()
    return max_connections if limit is None else max(1, min(max_connections, limit - RESERVED_FILES))


async def serve(app: Any, config: Config, pool: ConnectionPool, *, shutdown_trigger: Callable[[], Awaitable[None]],
                task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``app`` (ASGI) on ``config.bind`` until ``shutdown_trigger`` returns, then close gracefully.

    Reports the bound addresses (``http://host:port``) through ``task_status``.
    """
    wrapped = wrap_app(app, config.wsgi_max_body_size, "asgi")
    lifespan_state: dict[str, Any] = {}
    lifespan = Lifespan(wrapped, config, lifespan_state)
    context = WorkerContext(None)
    async with trio.open_nursery() as lifespan_nursery:
        await lifespan_nursery.start(lifespan.handle_lifespan)
        await lifespan.wait_for_startup()
        async with trio.open_nursery() as server_nursery:
            sockets = config.create_sockets()
            listeners, binds = [], []
            for sock in sockets.insecure_sockets:
                sock.listen(config.backlog)
                listeners.append(trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
                binds.append(f"http://{repr_socket_addr(sock.family, sock.getsockname())}")
            handler = partial(_TCPServer, wrapped, config, context, lifespan_state)
            task_status.started(binds)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(raise_shutdown, shutdown_trigger)
                    for listener in listeners:
                        nursery.start_soon(pool.serve, listener, handler, server_nursery)
            except BaseExceptionGroup as error:
                _, others = error.split(_is_shutdown)
                if others is not None:
                    raise others from None
            finally:
                await context.terminated.set()
                server_nursery.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()


def _is_shutdown(exc: BaseException) -> bool:
    from hypercorn.utils import ShutdownError

    return isinstance(exc, ShutdownError)
