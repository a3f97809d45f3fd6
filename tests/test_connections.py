"""Connections cannot be used up: a cap below the file limit, eviction of the quietest, request timeouts.

A real worker process, limited to 256 open files as a small system would be, held
by more idle connections than it could ever accept.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

import pytest

from sessionmem.protocol.auth import bearer
from sessionmem.testing.worker_process import WorkerProcess, start_worker

from .test_hooks import assert_silent_success, run_hook

pytestmark = pytest.mark.slow

IDLE = 300


@contextmanager
def idle_connections(port: int, count: int) -> Iterator[list[socket.socket]]:
    with ExitStack() as stack:
        opened = []
        for _ in range(count):
            try:
                opened.append(stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=5)))
            except OSError:
                break  # the kernel's backlog is full: enough
        yield opened


def request_head(worker: WorkerProcess, path: str, content_length: int) -> bytes:
    """The head of a ``POST`` of a JSON body to ``path``, sent by hand (so its body can be held back)."""
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{worker.port}\r\nAuthorization: {bearer(worker.token)}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {content_length}\r\n\r\n").encode()


def closed_by_server(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


@pytest.fixture
def limited_worker(tmp_path: object) -> Iterator[WorkerProcess]:
    worker = start_worker(tmp_path / "data", file_limit=256,
                          env={"SESSIONMEM_COMPRESSOR": "offline", "SESSIONMEM_BATCH_QUIET": "0.05",
                               "SESSIONMEM_KEEP_ALIVE_TIMEOUT": "60", "SESSIONMEM_REQUEST_TIMEOUT": "2"})
    yield worker
    worker.stop()


def test_idle_connections_cannot_lock_out_hooks(limited_worker: WorkerProcess) -> None:
    worker = limited_worker
    with idle_connections(worker.port, IDLE) as held:
        assert len(held) > 200
        time.sleep(1.5)  # they are quiet now: the first to be evicted for a newcomer
        started = time.monotonic()
        assert worker.request("GET", "/api/health", timeout=5)[0] == 200
        result = run_hook("PostToolUse", {"session_id": "s", "cwd": "/w/p", "tool_name": "Read",
                                          "tool_use_id": "under-load", "tool_input": {"file_path": "/w/p/a"}},
                          worker.data_dir)
        assert_silent_success(result)
        # Answered, not spooled: the hook said nothing, within its deadline (3 s) and its start on a
        # busy machine.
        assert not (worker.data_dir / "hooks.log").exists()
        assert time.monotonic() - started < 8
        connections = worker.get("/debug")["connections"]
    assert connections["maxConnections"] == 256 - 64 and connections["peak"] <= 192
    assert connections["evicted"] + connections["refused"] > 0
    worker.wait_idle()
    assert [o["toolUseId"] for o in worker.get("/api/observations")["observations"]] == ["under-load"]
    log = (worker.data_dir / "worker.log").read_text()
    assert "Traceback" not in log and "accept returned" not in log


def test_a_request_sent_a_byte_at_a_time_is_cut_off(limited_worker: WorkerProcess) -> None:
    worker = limited_worker
    with socket.create_connection(("127.0.0.1", worker.port), timeout=5) as slow:
        slow.sendall(request_head(worker, "/api/sessions/observations", 1000) + b"{")
        started = time.monotonic()
        cut = False
        while time.monotonic() - started < 15 and not cut:
            try:
                slow.sendall(b" ")
            except (BrokenPipeError, ConnectionResetError):
                cut = True
                break
            cut = closed_by_server(slow, 0.5)
        elapsed = time.monotonic() - started
    # request_timeout_s (2) and one sweep (1), and slack for a busy machine; uncut, it trickles on for 15 s.
    assert cut and elapsed < 8, elapsed
    assert worker.get("/debug")["connections"]["timedOut"] >= 1


def test_idle_keep_alive_connections_are_closed(worker_factory: Callable[..., WorkerProcess]) -> None:
    worker = worker_factory(SESSIONMEM_KEEP_ALIVE_TIMEOUT=0.5)
    with socket.create_connection(("127.0.0.1", worker.port), timeout=5) as idle:
        assert closed_by_server(idle, 3)


def _health(connection: http.client.HTTPConnection, token: str | None) -> int:
    connection.request("GET", "/api/health", headers={"Authorization": bearer(token)} if token else {})
    response = connection.getresponse()
    response.read()
    return response.status


def test_the_idle_timeout_counts_only_idle_time(worker_factory: Callable[..., WorkerProcess]) -> None:
    """Requests spaced closer than the keep-alive timeout keep one connection for longer than it;
    a request whose body takes longer than the timeout to arrive is not cut off."""
    # Gaps of 0.4 s against a timeout of 1.5 s: inside it even when a busy machine delays one.
    worker = worker_factory(SESSIONMEM_KEEP_ALIVE_TIMEOUT=1.5, SESSIONMEM_REQUEST_TIMEOUT=10)
    connection = http.client.HTTPConnection("127.0.0.1", worker.port, timeout=5)
    try:
        assert _health(connection, worker.token) == 200
        first_socket = connection.sock
        for _ in range(5):  # 2 s in all, longer than the timeout
            time.sleep(0.4)
            assert _health(connection, worker.token) == 200
            assert connection.sock is first_socket  # the same connection: it was never closed
    finally:
        connection.close()

    with socket.create_connection(("127.0.0.1", worker.port), timeout=5) as slow:
        body = b'{"claudeSessionId": "idle-timer", "project": "p", "prompt": "hello"}'
        slow.sendall(request_head(worker, "/api/sessions/init", len(body)))
        time.sleep(2.5)  # busy, not idle: the 1.5 s keep-alive timeout does not apply
        slow.sendall(body)
        assert slow.recv(4096).startswith(b"HTTP/1.1 200")
        assert closed_by_server(slow, 5)  # idle again after its answer: closed at the timeout


def test_a_connection_the_client_closes_is_let_go_at_once(worker_factory: Callable[..., WorkerProcess]) -> None:
    """Nothing waits for the keep-alive timeout once the client has gone (the timer ends with the reading)."""
    worker = worker_factory(SESSIONMEM_KEEP_ALIVE_TIMEOUT=60)
    for _ in range(20):
        connection = http.client.HTTPConnection("127.0.0.1", worker.port, timeout=5)
        assert _health(connection, worker.token) == 200
        connection.close()
    # Only the connection asking is open, long before 60 s.
    assert worker.wait_until(lambda: worker.get("/debug")["connections"]["open"] <= 1 or None, timeout=20)


def test_idle_keep_alive_connections_do_not_hold_the_shutdown(worker_factory: Callable[..., WorkerProcess]) -> None:
    """At shutdown an idle connection is closed at once, not at the end of the graceful deadline (3 s)."""
    worker = worker_factory(SESSIONMEM_KEEP_ALIVE_TIMEOUT=60)
    connections = []
    for _ in range(5):
        connection = http.client.HTTPConnection("127.0.0.1", worker.port, timeout=5)
        assert _health(connection, worker.token) == 200
        connections.append(connection)
    assert worker.stop() == 0
    stages = {stage["name"]: stage["seconds"]
              for stage in json.loads((worker.data_dir / "worker.shutdown.json").read_text())["stages"]}
    assert stages["http"] < 2.5, stages  # held by them, it would take the whole 3 s
    for connection in connections:
        connection.close()
