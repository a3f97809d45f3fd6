"""Start and drive a real ``sessionmem serve`` process, as tests and benchmarks need.

The worker binds port 0 and records the real port in ``<data dir>/worker.json``;
:func:`start_worker` waits for that file and for ``/api/readiness``.

Resource handling:
    :class:`WorkerProcess` is a context manager; leaving it stops the worker with
    SIGTERM (SIGKILL after a timeout: :mod:`sessionmem.protocol.oskit`), so no test leaks a process.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from sessionmem.actors.state import ActorState
from sessionmem.protocol import routes
from sessionmem.protocol.auth import bearer, read_token
from sessionmem.protocol.oskit import kill_process, limit_open_files, process_alive, terminate_process
from sessionmem.protocol.state import STATE_FILE, read_state

WORKING_STATES = tuple(state.value for state in ActorState if state.working)  # as /debug writes them


class WorkerClient:
    """Blocking HTTP calls to a worker listening on ``port`` (in a process of its own, or in a thread)."""

    def __init__(self, data_dir: Path, port: int) -> None:
        self.data_dir = data_dir
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    @property
    def token(self) -> str | None:
        """The worker's auth token (it creates it at its first start)."""
        return read_token(str(self.data_dir))

    def request(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
                timeout: float = 10.0) -> tuple[int, Any]:
        """One HTTP call; returns (status, decoded JSON or text)."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        headers = {"Content-Type": "application/json"}
        if self.token is not None:
            headers["Authorization"] = bearer(self.token)
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as response:
                return response.status, _decode(response.read(), response.headers.get_content_type())
        except urllib.error.HTTPError as exc:
            return exc.code, _decode(exc.read(), exc.headers.get_content_type())

    def post(self, path: str, body: Any) -> Any:
        """POST JSON; the decoded answer, which must be a success."""
        status, answer = self.request("POST", path, body)
        if status >= 300:
            raise AssertionError(f"POST {path} -> {status}: {answer}")
        return answer

    def get(self, path: str, *, timeout: float = 10.0) -> Any:
        status, body = self.request("GET", path, timeout=timeout)
        if status != 200:
            raise AssertionError(f"GET {path} -> {status}: {body}")
        return body

    def wait_until(self, predicate: Any, *, timeout: float = 30.0, interval: float = 0.05) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            result = predicate()
            if result:
                return result
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met within {timeout}s")
            time.sleep(interval)

    def _debug_within(self, deadline: float) -> dict[str, Any]:
        """``/debug``, given the rest of a wait's budget: on a busy machine a worker that is loading its model
        may take longer than one request's usual timeout to answer, and the wait promises only its own end."""
        return self.get(routes.DEBUG, timeout=max(10.0, deadline - time.monotonic()))

    def wait_indexed(self, *, timeout: float = 60.0) -> dict[str, Any]:
        """Wait until every stored document has its vector (or vectors are off); returns ``/debug``."""
        deadline = time.monotonic() + timeout

        def indexed() -> dict[str, Any] | None:
            debug = self._debug_within(deadline)
            index = debug["index"]
            return debug if index["state"] in ("ready", "off") and index["pending"] == 0 else None
        return self.wait_until(indexed, timeout=timeout)

    def wait_consolidated(self, *, timeout: float = 60.0) -> dict[str, Any]:
        """Wait until the consolidation pass has gone through every stored observation; returns ``/debug``."""
        deadline = time.monotonic() + timeout

        def consolidated() -> dict[str, Any] | None:
            debug = self._debug_within(deadline)
            return debug if debug["consolidation"]["caughtUp"] else None
        return self.wait_until(consolidated, timeout=timeout)

    def wait_idle(self, *, timeout: float = 30.0) -> dict[str, Any]:
        """Wait until nothing is pending: no spooled request left on disk, nothing in the journal, no actor
        at work. A hook whose POST timed out on a busy machine spooled its event; the worker imports it
        at its next spool round (seconds later), so idle without the spool would be idle too soon."""
        deadline = time.monotonic() + timeout

        def idle() -> dict[str, Any] | None:
            # Asked of /api/processing (spooled requests count) while busy, a third of /debug's CPU; /debug once
            # it says idle.
            if self.get(routes.PROCESSING, timeout=max(10.0, deadline - time.monotonic()))["isProcessing"]:
                return None
            debug = self._debug_within(deadline)
            busy = debug["sessions"]["queued"] or any(a["state"] in WORKING_STATES for a in debug["actors"])
            return debug if debug["journal"]["pending"] == 0 and not busy else None
        return self.wait_until(idle, timeout=timeout)



class WorkerProcess(WorkerClient):
    """A worker this code started (``process``), or one found running by :meth:`attach`."""

    def __init__(self, process: subprocess.Popen[bytes] | None, data_dir: Path, port: int,
                 pid: int | None = None) -> None:
        super().__init__(data_dir, port)
        self.process = process
        self._pid = pid if pid is not None else process.pid if process is not None else 0

    @classmethod
    def attach(cls, data_dir: Path) -> WorkerProcess | None:
        """The live worker recorded in ``data_dir/worker.json`` (started by a hook, say), or None."""
        state = read_state(str(data_dir))
        return cls(None, data_dir, state.port, pid=state.pid) if state is not None else None

    @property
    def pid(self) -> int:
        return self._pid

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, then SIGKILL after ``timeout``; returns the exit status (0 if not our child)."""
        if self.process is None:
            return self._stop_by_pid(timeout)
        if self.process.poll() is None:
            self.process.terminate()  # SIGTERM
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def _stop_by_pid(self, timeout: float) -> int:
        try:
            terminate_process(self._pid)
        except OSError:
            return 0
        deadline = time.monotonic() + timeout
        while process_alive(self._pid):
            if time.monotonic() > deadline:
                kill_process(self._pid)
                return -9
            time.sleep(0.05)
        return 0

    def kill(self) -> None:
        """SIGKILL: the crash that the journal must survive."""
        assert self.process is not None, "only a worker started here can be killed and reaped"
        self.process.kill()  # SIGKILL
        self.process.wait()

    def __enter__(self) -> WorkerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _decode(data: bytes, content_type: str) -> Any:
    if content_type == "application/json":
        return json.loads(data or b"null")
    return data.decode("utf-8", "replace")


def start_worker(data_dir: Path, *, env: dict[str, str] | None = None, timeout: float = 20.0,
                 log_name: str = "worker.stderr", file_limit: int | None = None,
                 python: str = sys.executable) -> WorkerProcess:
    """Start ``python -m sessionmem serve`` on a free port with ``data_dir``; wait until ready.

    ``file_limit`` caps the process's open files (soft and hard), as a small system would. ``python``:
    the interpreter, whose install of sessionmem runs (another tree's, for a side-by-side bench).
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    state = data_dir / STATE_FILE
    state.unlink(missing_ok=True)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONMEM_", "ANTHROPIC_"))}
    # A worker of the checkout under test or bench does not restart when someone edits the code meanwhile
    # (sessionmem.runtime.codewatch): a bench run restarted in the middle would report a broken run as figures.
    full_env.update({"SESSIONMEM_DATA_DIR": str(data_dir), "SESSIONMEM_PORT": "0", "PYTHONUNBUFFERED": "1",
                     "SESSIONMEM_CODE_WATCH": "0"})
    full_env.update(env or {})
    stderr = open(data_dir / log_name, "ab")
    limit = functools.partial(limit_open_files, file_limit) if file_limit is not None else None
    # Another tree's interpreter starts in the data dir: `-m` looks in the working directory first, and a
    # checkout's own sessionmem/ there would shadow that tree's install.
    process = subprocess.Popen([python, "-m", "sessionmem", "serve"], env=full_env,
                               cwd=None if python == sys.executable else data_dir,
                               stdout=stderr, stderr=stderr, stdin=subprocess.DEVNULL,
                               preexec_fn=limit)
    stderr.close()
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"worker exited with {process.returncode}: "
                               f"{(data_dir / log_name).read_text(errors='replace')[-2000:]}")
        try:
            port = json.loads(state.read_text())["port"]
            worker = WorkerProcess(process, data_dir, port)
            if worker.request("GET", routes.READINESS, timeout=2)[0] == 200:
                return worker
        except (OSError, ValueError, KeyError):
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise TimeoutError(f"worker not ready within {timeout}s")
        time.sleep(0.02)
