"""What only a real ``sessionmem serve`` process can show: the HTTP edge on a real socket, the
environment choosing the compressor, and the operator commands against a running worker."""

from __future__ import annotations

import gc
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sessionmem.runtime.gcwatch import YOUNG_GENERATION_OBJECTS
from sessionmem.testing.messages_api import ScriptedMessagesAPI
from sessionmem.testing.worker_process import WorkerClient, WorkerProcess

pytestmark = pytest.mark.slow

OBS = "/api/sessions/observations"


def raw_exchange(worker: WorkerClient, head: bytes, body: bytes, done: Callable[[bytes], bool]) -> bytes:
    """Send bytes the server may refuse before reading them all (it answers, then closes)."""
    with socket.create_connection(("127.0.0.1", worker.port), timeout=10) as sock:
        try:
            sock.sendall(head + body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused early: the answer is already on its way
        reply = b""
        while not done(reply):
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
    return reply


def answered(reply: bytes) -> bool:
    return b"\r\n\r\n" in reply and reply.rstrip().endswith(b"}")


def test_oversized_and_chunked_bodies_on_a_real_socket(worker: WorkerClient) -> None:
    huge = b'{"claudeSessionId": "s", "tool_name": "Bash", "tool_response": "' + b"x" * (6 * 1024 * 1024) + b'"}'
    auth = f"Host: 127.0.0.1:{worker.port}\r\nAuthorization: Bearer {worker.token}\r\n"
    head = (f"POST {OBS} HTTP/1.1\r\n{auth}Content-Type: application/json\r\n"
            f"Content-Length: {len(huge)}\r\n\r\n").encode()
    reply = raw_exchange(worker, head, huge, answered)
    assert reply.startswith(b"HTTP/1.1 413") and b"byte limit" in reply  # refused on its Content-Length

    def chunked(body: bytes, chunk: int = 64 * 1024) -> bytes:
        parts = [b"%x\r\n%s\r\n" % (len(body[i:i + chunk]), body[i:i + chunk]) for i in range(0, len(body), chunk)]
        return b"".join(parts) + b"0\r\n\r\n"

    head = f"POST {OBS} HTTP/1.1\r\n{auth}Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    small = raw_exchange(worker, head.encode(),
                         chunked(b'{"claudeSessionId": "chunky", "tool_name": "Read", "tool_use_id": "c1"}'), answered)
    assert small.startswith(b"HTTP/1.1 202")
    big = raw_exchange(worker, head.encode(), chunked(huge.replace(b'"s"', b'"chunky"')), answered)
    assert big.startswith(b"HTTP/1.1 413") and b"byte limit" in big  # counted while read, not buffered
    worker.wait_idle()
    assert [o["toolUseId"] for o in worker.get("/api/observations")["observations"]] == ["c1"]


def test_auto_picks_anthropic_when_a_key_is_configured(worker_factory: Callable[..., WorkerProcess],
                                                       messages_api: ScriptedMessagesAPI) -> None:
    worker = worker_factory(SESSIONMEM_ANTHROPIC_API_KEY="sk-test-dummy", SESSIONMEM_ANTHROPIC_BASE_URL=messages_api.url,
                            SESSIONMEM_COMPRESSOR="auto", SESSIONMEM_BATCH_QUIET=0.05)
    assert worker.get("/api/health")["compressor"] == "anthropic"
    worker.request("POST", OBS, {"claudeSessionId": "env", "tool_name": "Read", "tool_use_id": "e1"})
    worker.wait_idle()
    assert messages_api.statuses() == [200]
    assert worker.get("/api/observations")["observations"][0]["compressor"] == "anthropic"


def test_status_replay_and_stop_commands(worker_factory: Callable[..., WorkerProcess]) -> None:
    worker = worker_factory(SESSIONMEM_FAULT_INJECTION=1, SESSIONMEM_MAX_RESTARTS=0, SESSIONMEM_BATCH_QUIET=0.05)
    env = {**os.environ, "SESSIONMEM_DATA_DIR": str(worker.data_dir)}

    def command(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "sessionmem", *args], env=env, capture_output=True, text=True,
                              timeout=60)

    # One crash fails the session (max_restarts 0): its events are parked.
    worker.request("POST", OBS, {"claudeSessionId": "once", "tool_name": "SessionmemCrash", "tool_use_id": "p1",
                                 "tool_input": {"times": 1}})
    worker.wait_until(lambda: worker.get("/debug")["journal"]["parked"] == 1)
    status = command("status")
    assert status.returncode == 0, status.stderr
    assert f"running, pid {worker.pid}, port {worker.port}" in status.stdout
    assert "1 failed" in status.stdout and "1 parked" in status.stdout

    replay = command("replay", "once")  # the crash was injected once: this time it is stored
    assert replay.returncode == 0 and "1 parked event(s) of once queued again" in replay.stdout
    worker.wait_idle()
    assert [o["toolUseId"] for o in worker.get("/api/observations")["observations"]] == ["p1"]

    second = command("serve")
    assert second.returncode == 1 and "already running" in second.stderr
    stop = command("stop")
    assert stop.returncode == 0, stop.stderr
    assert f"worker {worker.pid} stopped in" in stop.stdout and "0 event(s) left pending" in stop.stdout
    assert worker.process is not None and worker.process.wait(10) == 0
    assert not (worker.data_dir / "worker.json").exists()
    report = json.loads((worker.data_dir / "worker.shutdown.json").read_text())
    assert [stage["name"] for stage in report["stages"]] == ["http", "actors", "index", "compressor", "store"]
    assert report["took_seconds"] <= report["budget_seconds"] == 15
    down = command("status")
    assert down.returncode == 1 and "not running" in down.stdout
    # The log of a fresh data dir holds what happened, not SQLite re-preparing statements.
    log = (worker.data_dir / "worker.log").read_text()
    assert "stopped in" in log and "SQLITE_SCHEMA" not in log


def test_the_embedding_process_ends_with_the_worker(worker_factory: Callable[..., WorkerProcess]) -> None:
    worker = worker_factory(SESSIONMEM_BATCH_QUIET=0.05)
    worker.request("POST", OBS, {"claudeSessionId": "embedded", "tool_name": "Read", "tool_use_id": "r1",
                                 "tool_input": {"file_path": "/repo/src/app.py"}, "tool_response": "print('hi')"})
    worker.wait_idle()
    # The stored observation is embedded by the niced child process, not by the worker.
    worker.wait_until(lambda: (worker.get("/debug")["embedder"]["background"] or {}).get("texts", 0) >= 1)
    embedder = worker.get("/debug")["embedder"]
    child = embedder["backgroundPid"]
    assert child is not None and child != worker.pid and embedder["embedder"]["texts"] <= 1  # at most the warm-up
    assert os.getpriority(os.PRIO_PROCESS, child) == 19
    assert worker.process is not None
    worker.process.terminate()
    assert worker.process.wait(30) == 0
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)  # stopped and reaped by the worker, not left behind


def test_the_worker_keeps_what_it_loaded_out_of_garbage_collections(worker_factory: Callable[..., WorkerProcess]) -> None:
    """Once warm, the worker freezes its startup objects and collects young ones less often; /debug shows
    the collector's thresholds and pauses."""
    worker = worker_factory()
    # Warm once the young generation is widened, right after the freeze (Python 3.12 starts with a few hundred
    # objects frozen already, so a count above 0 is not the sign).
    collector = worker.wait_until(
        lambda: (found := worker.get("/debug")["gc"])["thresholds"][0] == YOUNG_GENERATION_OBJECTS and found)
    assert collector["frozenObjects"] > 10_000  # the web stack, the detectors, the embedder's Python side
    assert collector["thresholds"] == [YOUNG_GENERATION_OBJECTS, *gc.get_threshold()[1:]]
    assert [sorted(generation) for generation in collector["generations"]] == [["collections", "maxMs", "totalMs"]] * 3
    full = collector["generations"][2]
    assert full["collections"] >= 1 and 0 < full["maxMs"] <= full["totalMs"]  # the collection before the freeze


STOPPED_S = 1.5  # how long the worker process is kept stopped (SIGSTOP ... SIGCONT)


def test_a_worker_that_cannot_run_shows_the_stall_in_debug_and_its_log(
        worker_factory: Callable[..., WorkerProcess]) -> None:
    """The process stopped for 1.5 s (as an overloaded machine or a debugger would): /debug's ``loop``
    and the log say how long the Trio thread could not run."""
    worker = worker_factory()
    before = worker.wait_until(lambda: (found := worker.get("/debug")["loop"])["samples"] >= 5 and found)
    assert before["intervalMs"] == 100
    assert before["gilSwitchIntervalMs"] == 0.5  # the worker's, not CPython's 5 ms (bench/gil_trips.py)
    os.kill(worker.pid, signal.SIGSTOP)
    try:
        time.sleep(STOPPED_S)  # the stall itself: the process cannot run while stopped
    finally:
        os.kill(worker.pid, signal.SIGCONT)
    after = worker.wait_until(lambda: (found := worker.get("/debug")["loop"])["stalls"] > before["stalls"] and found)
    # Measured from the last tick before the stop: at least the stop, less one 100 ms sampling interval and slack.
    assert STOPPED_S * 1000 - 200 <= after["lagMaxMs"] < 60_000 and after["lagMaxAt"] is not None
    assert after["lagMaxMs"] >= after["lagP99Ms"] >= after["lagP50Ms"] >= 0
    log = worker.wait_until(lambda: (text := (worker.data_dir / "worker.log").read_text()) and
                            "Trio thread could not run for" in text and text)
    assert "could not run for 1." in log


def test_a_worker_stops_while_it_imports_a_large_spool_and_loses_nothing(tmp_path: Path) -> None:
    """SIGTERM while the worker still imports what clients spooled: `status` and `stop` find it (no
    worker.json yet), it stops there instead of after the whole import, and the next start imports
    the rest."""
    from sessionmem.protocol import routes
    from sessionmem.protocol.spool import pending_spool_files, write_spool_file
    from sessionmem.testing.worker_process import start_worker

    data = tmp_path / "data"
    data.mkdir()
    # Enough that the import is still going when `status` and `stop` have run: a 2-core machine imports
    # about 120 while they do, so 1,500 leaves room for one ten times faster.
    spooled = 1500
    write_spool_file(str(data), routes.INIT, json.dumps(
        {"claudeSessionId": "big", "cwd": "/w/big", "prompt": "go", "idempotencyKey": "i"}).encode())
    for number in range(spooled):
        write_spool_file(str(data), routes.OBSERVATIONS, json.dumps(
            {"claudeSessionId": "big", "cwd": "/w/big", "tool_name": "Bash", "tool_use_id": f"t{number}",
             "tool_input": {"command": f"echo {number}"}, "idempotencyKey": f"k{number}"}).encode())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONMEM_", "ANTHROPIC_"))}
    env.update({"SESSIONMEM_DATA_DIR": str(data), "SESSIONMEM_PORT": "0", "SESSIONMEM_EMBEDDER": "none",
                "SESSIONMEM_COMPRESSOR": "offline"})

    def command(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "sessionmem", *args], env=env, capture_output=True, text=True,
                              timeout=60)

    with open(data / "first.stderr", "wb") as log:
        first = subprocess.Popen([sys.executable, "-m", "sessionmem", "serve"], env=env, stdout=log, stderr=log,
                                 stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while len(pending_spool_files(str(data))) > spooled:  # until its import has begun
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.01)
        status = command("status")
        assert f"worker {first.pid} is starting" in status.stdout
        stopped = command("stop")
        assert stopped.returncode == 0 and f"worker {first.pid} " in stopped.stdout, stopped.stderr
        assert first.wait(10) == 0
    finally:
        if first.poll() is None:
            first.kill()
    left = len(pending_spool_files(str(data)))
    assert 0 < left < spooled  # it stopped during the import, not after it
    assert f"stopped while starting; {left} spooled request(s) wait for the next start" in (
        data / "worker.log").read_text()

    with start_worker(data, env={"SESSIONMEM_EMBEDDER": "none", "SESSIONMEM_COMPRESSOR": "offline"},
                      timeout=120) as second:
        second.wait_idle(timeout=120)
        assert pending_spool_files(str(data)) == []
        stored = second.get("/api/sessions?limit=10")["sessions"]
        assert [(s["claudeSessionId"], s["observations"]) for s in stored] == [("big", spooled)]
