"""Find the running worker, or start one detached, within a bounded wait. Standard library only.

Used by the SessionStart hook and by ``sessionmem backfill``.

Resource handling:
    The worker is started in a new session (it outlives the hook and Claude Code's
    process group), with the allow-listed environment (:mod:`.environment`) and the
    data dir as working directory, with its output sent to ``<data dir>/worker.stderr`` -- never to
    the hook's stdout, which Claude Code reads until it closes. A lock on ``worker.lock``
    makes sure two hooks starting at once start one worker; the worker itself refuses to
    start twice for one data dir. (:mod:`.oskit` says what a new session and a lock are on
    each OS.)

Error handling:
    Returns the port of a ready worker, or ``None`` (never raises for an expected
    failure: port taken by another program, start too slow, a worker too busy to answer
    within the wait, spawn failed); the reason goes to the hook log.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from sessionmem.protocol.client import WorkerUnavailable, request
from sessionmem.protocol.environment import LOOPBACK, hook_started_environment, unfit_data_dir
from sessionmem.protocol.oskit import new_group_options, try_lock_file
from sessionmem.protocol.routes import READINESS, READY, STARTING

TYPE_CHECKING = False  # typing costs a hook ~4 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from collections.abc import Callable

    from sessionmem.protocol.client_settings import ClientConfig

POLL_S = 0.025


def probe(config: ClientConfig, port: int | None, timeout: float) -> str:
    """``ready``, ``starting``, ``down`` (no worker of ours: ``port`` None, or nothing listening), ``busy``
    (something listens and did not answer in time: a loaded machine's worker, most likely) or ``foreign``
    (an answer, not sessionmem's)."""
    if port is None:  # the token goes to no port a worker of ours does not hold (ClientConfig.live_port)
        return "down"
    try:
        reply = request(config.host, port, "GET", READINESS, timeout=timeout, token=config.token())
    except WorkerUnavailable as exc:
        return "down" if exc.refused else "busy" if exc.timed_out else "foreign"
    if reply.status == 200 and f'"{READY}"'.encode() in reply.body:
        return "ready"
    if reply.status == 503 and STARTING.encode() in reply.body:
        return "starting"
    return "foreign"


def ensure_worker(config: ClientConfig, log: Callable[[str], None]) -> int | None:
    """Return the port of a ready worker, starting one if needed, waiting at most ``start_timeout_s``."""
    deadline = time.monotonic() + config.start_timeout_s
    port = config.live_port()
    state = probe(config, port, min(0.5, config.start_timeout_s))
    if state == "ready":
        return port
    if state == "foreign":
        log(f"port {port} is in use by something that is not a ready sessionmem worker")
        return None
    if state == "down" and (why := unfit_data_dir(config.data_dir)):
        log(f"not starting a worker: {why}; a session's environment may choose it (SESSIONMEM_DATA_DIR, HOME). "
            "Set SESSIONMEM_DATA_DIR to an absolute folder outside any repository, or run `sessionmem serve` there")
        return None
    # Busy or starting: wait for it, within the same deadline. Down: start it; the lock is held until the
    # worker is ready, so a second hook waits instead of starting another.
    lock_fd, process = _start_once(config, log) if state == "down" else (None, None)
    try:
        while time.monotonic() < deadline:
            time.sleep(POLL_S)
            port = config.live_port()
            if probe(config, port, max(0.05, deadline - time.monotonic())) == "ready":
                return port
            if process is not None and process.poll() is not None:  # it will not become ready: stop waiting
                log(f"the worker exited at start (status {process.returncode}); see "
                    f"{os.path.join(config.data_dir, 'worker.stderr')}")
                return None
    finally:
        if lock_fd is not None:
            os.close(lock_fd)
    log(f"worker not ready within {config.start_timeout_s}s{' (it did not answer)' if state == 'busy' else ''};"
        " continuing without memory")
    return None


def _start_once(config: ClientConfig, log: Callable[[str], None]) -> tuple[int | None, subprocess.Popen[bytes] | None]:
    """Start the worker unless another hook is doing so; returns the held lock, if taken, and the process started."""
    os.makedirs(config.data_dir, exist_ok=True)
    lock_fd = os.open(os.path.join(config.data_dir, "worker.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    if not try_lock_file(lock_fd):
        os.close(lock_fd)
        return None, None  # another hook is starting it: just wait for readiness
    process = None
    try:
        if probe(config, config.live_port(), 0.2) != "down":
            return lock_fd, None  # started meanwhile
        with open(os.path.join(config.data_dir, "worker.stderr"), "ab") as out:
            process = subprocess.Popen(
                # -P: the hook runs in the user's project, whose own `sessionmem` folder (this
                # repository's, say) must not shadow the installed package.
                [sys.executable, "-P", "-m", "sessionmem", "serve"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                close_fds=True, **new_group_options(),
                # The port this client was told (a command's --port included), not only the
                # data dir: otherwise the worker binds the default and the client waits in vain.
                # Only the allow-listed environment: this session's project must not choose the
                # model's address, key or proxy, nor the team database, for every later session
                # (protocol/environment.py: those come from settings.json).
                # Its address only when it is this machine's loopback: another comes from settings.json.
                env={**hook_started_environment(os.environ), "SESSIONMEM_DATA_DIR": config.data_dir,
                     "SESSIONMEM_PORT": str(config.port),
                     **({"SESSIONMEM_HOST": config.host} if config.host in LOOPBACK else {})},
                cwd=config.data_dir,
            )
        log(f"started worker pid {process.pid}")
    except OSError as exc:
        log(f"could not start the worker: {exc}")
    return lock_fd, process
