"""Operator-facing behaviour on a real worker: live stream, processing status, idle actors,
backpressure, and the status/stop commands."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from sessionmem.testing.messages_api import ScriptedMessagesAPI
from sessionmem.testing.worker_process import WorkerProcess

pytestmark = pytest.mark.slow


def observation(session: str, tool_use_id: str) -> dict[str, object]:
    return {"claudeSessionId": session, "cwd": "/work/ops", "tool_name": "Read", "tool_use_id": tool_use_id,
            "tool_input": {"file_path": f"/work/ops/{tool_use_id}.py"}, "tool_response": "x = 1\n"}


def test_stream_sends_live_events(worker: WorkerProcess) -> None:
    with socket.create_connection(("127.0.0.1", worker.port), timeout=10) as sock:
        sock.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
        received = b""
        while b": connected" not in received:
            received += sock.recv(4096)
        assert b"text/event-stream" in received
        worker.request("POST", "/api/sessions/init", {"claudeSessionId": "live", "cwd": "/work/ops",
                                                      "prompt": "watch this"})
        worker.request("POST", "/api/sessions/observations", observation("live", "t1"))
        deadline = time.monotonic() + 10
        while b"event: observation" not in received and time.monotonic() < deadline:
            received += sock.recv(4096)
    text = received.decode()
    assert "event: prompt" in text and '"prompt":"watch this"' in text
    assert "event: observation" in text and '"title":"Read t1.py"' in text


def test_processing_status(worker: WorkerProcess) -> None:
    worker.request("POST", "/api/sessions/observations", observation("proc", "t1"))
    worker.wait_idle()
    status, body = worker.request("POST", "/api/processing", {"claudeSessionId": "proc"})
    assert status == 200
    assert body == {"isProcessing": False, "queueDepth": 0, "pendingEvents": 0, "parkedEvents": 0}
    assert worker.request("GET", "/api/processing")[1]["isProcessing"] is False


def test_idle_actors_stop_and_come_back(worker_factory: Callable[..., WorkerProcess]) -> None:
    worker = worker_factory(SESSIONMEM_IDLE_TIMEOUT=0.3, SESSIONMEM_BATCH_QUIET=0.05)
    worker.request("POST", "/api/sessions/observations", observation("idle", "t1"))

    def stopped() -> dict[str, object] | None:
        actors = worker.get("/debug")["actors"]
        return actors[0] if actors and actors[0]["state"] == "stopped" else None

    first = worker.wait_until(stopped, timeout=10)
    assert first["running"] is False and first["starts"] == 1
    worker.request("POST", "/api/sessions/observations", observation("idle", "t2"))
    again = worker.wait_until(stopped, timeout=10)
    assert again["starts"] == 2 and again["processed"] == 2
    assert worker.get("/debug")["supervisor"]["idle_stops"] == 2
    assert {o["tool_use_id"] for o in worker.get("/api/observations")["observations"]} == {"t1", "t2"}


def test_full_mailbox_is_503_with_retry_after(worker_factory: Callable[..., WorkerProcess],
                                              messages_api: ScriptedMessagesAPI) -> None:
    # A slow model and a tiny mailbox: the session's actor cannot keep up.
    messages_api.delay = 1.5
    worker = worker_factory(ANTHROPIC_API_KEY="sk-dummy", ANTHROPIC_BASE_URL=messages_api.url,
                            SESSIONMEM_COMPRESSOR="anthropic", SESSIONMEM_MAILBOX_SIZE=2, SESSIONMEM_BATCH_SIZE=1)
    statuses = [worker.request("POST", "/api/sessions/observations", observation("busy", f"t{n}"))[0]
                for n in range(8)]
    assert 503 in statuses and statuses.count(202) >= 2
    with socket.create_connection(("127.0.0.1", worker.port), timeout=10) as sock:
        body = b'{"claudeSessionId": "busy", "tool_name": "Read", "tool_use_id": "late"}'
        sock.sendall(b"POST /api/sessions/observations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        reply = sock.recv(4096).decode()
    if reply.startswith("HTTP/1.1 503"):
        assert "retry-after: 1" in reply.lower()
    accepted = statuses.count(202) + reply.startswith("HTTP/1.1 202")
    worker.wait_idle(timeout=60)
    # Everything that was accepted is stored; what was refused was never half-written.
    assert len(worker.get("/api/observations")["observations"]) == accepted
    assert worker.get("/debug")["supervisor"]["rejected_full"] >= statuses.count(503)


def test_status_and_stop_commands(worker: WorkerProcess) -> None:
    env = {**os.environ, "SESSIONMEM_DATA_DIR": str(worker.data_dir)}
    status = subprocess.run([sys.executable, "-m", "sessionmem", "status"], env=env, capture_output=True, text=True)
    assert status.returncode == 0
    assert f"running, pid {worker.pid}, port {worker.port}" in status.stdout and "journal: 0 pending" in status.stdout
    second = subprocess.run([sys.executable, "-m", "sessionmem", "serve"], env=env, capture_output=True, text=True,
                            timeout=30)
    assert second.returncode == 1 and "already running" in second.stderr
    stop = subprocess.run([sys.executable, "-m", "sessionmem", "stop"], env=env, capture_output=True, text=True,
                          timeout=30)
    assert stop.returncode == 0 and "stopped" in stop.stdout
    assert worker.process.wait(10) == 0
    assert not (worker.data_dir / "worker.json").exists()
    down = subprocess.run([sys.executable, "-m", "sessionmem", "status"], env=env, capture_output=True, text=True)
    assert down.returncode == 1 and "not running" in down.stdout
