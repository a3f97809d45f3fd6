"""What the tests ask of other processes, asked through psutil: the same on Linux and macOS, and no test
reads ``/proc`` itself."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import psutil

from sessionmem.protocol.state import WorkerState, write_state


def running(pid: int | None) -> bool:
    """Whether ``pid`` runs: a zombie (exited, not yet reaped by its parent) does not."""
    if pid is None:
        return False
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def started_worker_exited(said: str, timeout: float = 120.0) -> bool:
    """Whether the worker a hook or the MCP server says it started (``started worker pid N`` in ``said``) is gone,
    waited for up to ``timeout``; true when it started none. For a worker started against a taken port: asked
    while the port is still taken, or a busy machine's worker would take it once the test let it go."""
    started = re.search(r"started worker pid (\d+)", said)
    deadline = time.monotonic() + timeout
    while started and running(int(started[1])) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not (started and running(int(started[1])))


def our_worker_on(data_dir: Path, port: int) -> None:
    """``worker.json`` naming ``port`` and a live process of this user (the test's own): what a worker of ours
    that hangs, or answers late or oddly, looks like to a client, which sends nothing to a port no worker of
    its holds."""
    data_dir.mkdir(parents=True, exist_ok=True)
    write_state(str(data_dir), WorkerState(os.getpid(), "127.0.0.1", port, time.time(), "test"))
