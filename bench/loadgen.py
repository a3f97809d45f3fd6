"""A small, efficient HTTP/1.1 load generator on Trio (keep-alive, pre-encoded requests).

Closed loop: ``concurrency`` connections, each sending its next request as soon as
the previous reply arrived -- the fastest the server goes. Open loop: requests are
sent on a fixed schedule whatever the server does, each on an idle connection (a new
one is opened when none is idle), and latency is measured from the *scheduled* time,
so a stalled server cannot hide its queueing delay (no coordinated omission).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import trio


def encode_post(host: str, port: int, path: str, body: bytes, token: str | None = None) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{auth}Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def encode_get(host: str, port: int, path: str, token: str | None = None) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{auth}\r\n".encode()


@dataclass
class Result:
    latencies_ms: list[float] = field(default_factory=list)
    completed_at: list[float] = field(default_factory=list)  # monotonic seconds
    codes: list[int] = field(default_factory=list)  # the status of each, in the order of latencies_ms
    bodies: list[bytes] = field(default_factory=list)
    errors: int = 0
    started: float = 0.0
    finished: float = 0.0

    def record(self, status: int, latency_s: float, body: bytes, keep_body: bool) -> None:
        self.latencies_ms.append(latency_s * 1000)
        self.completed_at.append(time.monotonic())
        self.codes.append(status)
        if keep_body:
            self.bodies.append(body)

    @property
    def rate(self) -> float:
        elapsed = self.finished - self.started
        return len(self.latencies_ms) / elapsed if elapsed > 0 else 0.0

    @property
    def statuses(self) -> dict[int, int]:
        """How many answers had each status."""
        return dict(Counter(self.codes))

    def latencies_of(self, *statuses: int) -> list[float]:
        return [latency for latency, code in zip(self.latencies_ms, self.codes) if code in statuses]


class Connection:
    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        self._buffer = bytearray()

    @classmethod
    async def open(cls, host: str, port: int) -> Connection:
        return cls(await trio.open_tcp_stream(host, port))

    async def roundtrip(self, request: bytes) -> tuple[int, bytes]:
        await self._stream.send_all(request)
        while True:
            header_end = self._buffer.find(b"\r\n\r\n")
            if header_end >= 0:
                head = bytes(self._buffer[:header_end]).lower()
                marker = head.find(b"content-length:")
                length = int(head[marker + 15: head.find(b"\r\n", marker) if head.find(b"\r\n", marker) > 0 else None])\
                    if marker >= 0 else 0
                total = header_end + 4 + length
                if len(self._buffer) >= total:
                    status = int(head[9:12])
                    body = bytes(self._buffer[header_end + 4: total])
                    del self._buffer[:total]
                    return status, body
            chunk = await self._stream.receive_some(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self._buffer += chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


async def closed_loop(host: str, port: int, requests: Sequence[bytes], *, concurrency: int,
                      duration: float | None = None, keep_bodies: bool = False) -> Result:
    """Send ``requests`` (in order, shared by all connections) as fast as replies come back."""
    result = Result()
    position = 0
    deadline = None if duration is None else time.monotonic() + duration

    async def worker() -> None:
        nonlocal position
        connection = await Connection.open(host, port)
        try:
            while position < len(requests) and (deadline is None or time.monotonic() < deadline):
                request = requests[position]
                position += 1
                started = time.perf_counter()
                try:
                    status, body = await connection.roundtrip(request)
                except (OSError, ConnectionError, trio.BrokenResourceError):
                    # Closed under us (keep-alive timeout): count it, then go on with a new one.
                    result.errors += 1
                    await connection.aclose()
                    connection = await Connection.open(host, port)
                    continue
                result.record(status, time.perf_counter() - started, body, keep_bodies)
        finally:
            await connection.aclose()

    result.started = time.monotonic()
    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(worker)
    result.finished = time.monotonic()
    return result


async def open_loop(host: str, port: int, requests: Sequence[bytes], *, rate: float,
                    keep_bodies: bool = False) -> Result:
    """Send request ``i`` at ``start + i / rate``; latency counts from that scheduled time.

    Each request's task is started at its time by one dispatcher, not all up front:
    10,000 tasks started at once, each then run once to reach its sleep, kept this
    process busy past the first scheduled times, and the first ~80 requests of every run
    -- against the bare endpoint too -- counted 40-290 ms of that as the server's latency.
    """
    result = Result()
    idle: list[Connection] = []
    start = trio.current_time() + 0.2
    result.started = time.monotonic() + 0.2

    async def one(index: int, scheduled: float) -> None:
        # An idle connection first; if the server had closed it (keep-alive timeout), once more on a new one.
        for reused in ([True, False] if idle else [False]):
            try:
                connection = idle.pop() if reused else await Connection.open(host, port)
            except OSError:  # refused, or timed out in a full listen backlog: an overloaded server
                result.errors += 1
                return
            try:
                status, body = await connection.roundtrip(requests[index])
                break
            except (OSError, ConnectionError, trio.BrokenResourceError):
                await connection.aclose()
                if not reused:
                    result.errors += 1
                    return
        result.record(status, trio.current_time() - scheduled, body, keep_bodies)
        idle.append(connection)

    async with trio.open_nursery() as nursery:
        for index in range(len(requests)):
            scheduled = start + index / rate
            await trio.sleep_until(scheduled)
            nursery.start_soon(one, index, scheduled)
    result.finished = time.monotonic()
    for connection in idle:
        await connection.aclose()
    return result
