"""The worker state file (``<data dir>/worker.json``), and whether the process it names is our worker.

A running worker records its pid and the port it bound (it may have bound port 0)
so clients can find it; it removes the file on the way out. Clients trust the file
only while its process is alive. The file is written to a temporary name and
renamed into place, so a reader never sees half of it.

Error handling:
    :func:`read_state` never raises: a missing, unreadable or stale file is ``None``.
"""

from __future__ import annotations

import os

from sessionmem.protocol import fastjson
from sessionmem.protocol.oskit import process_alive, process_command_line, try_lock_file

STATE_FILE = "worker.json"
SHUTDOWN_REPORT_FILE = "worker.shutdown.json"  # what the last graceful stop did (``sessionmem stop`` prints it)
INSTANCE_LOCK_FILE = "worker.instance.lock"  # flock'ed by the running worker for its whole life


class WorkerState:
    """What a running worker says about itself."""

    __slots__ = ("pid", "host", "port", "started_at", "version")

    def __init__(self, pid: int, host: str, port: int, started_at: float, version: str) -> None:
        self.pid = pid
        self.host = host
        self.port = port
        self.started_at = started_at
        self.version = version

    def as_json(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.__slots__}


def holds_instance_lock(data_dir: str) -> bool:
    """Whether some process holds the worker's instance lock of ``data_dir`` (a worker runs)."""
    try:
        fd = os.open(os.path.join(data_dir, INSTANCE_LOCK_FILE), os.O_RDONLY)
    except OSError:
        return False
    try:
        return not try_lock_file(fd, shared=True)
    except OSError:
        return False  # a file system that cannot lock: the worker could not have locked it either
    finally:
        os.close(fd)


def is_sessionmem_process(pid: int) -> bool:
    """Whether ``pid`` runs sessionmem, by its command line (:func:`.oskit.process_command_line`: ``/proc``
    on Linux, ``ps`` on macOS). On Windows, where no way to read it is built, this assumes so: the
    instance lock, which callers check first, is then all that tells a worker from a reused pid."""
    try:
        command_line = process_command_line(pid)
    except NotImplementedError:
        return True
    return command_line is not None and "sessionmem" in command_line


def starting_worker(data_dir: str) -> int | None:
    """The pid of this data dir's worker while it starts, else ``None``.

    A starting worker holds the instance lock, and has written its pid into it, but has
    not written ``worker.json`` yet (it replays its journal, imports a spool first).
    """
    if read_state(data_dir) is not None or not holds_instance_lock(data_dir):
        return None
    try:
        with open(os.path.join(data_dir, INSTANCE_LOCK_FILE), encoding="ascii") as f:
            pid = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return pid if process_alive(pid) and is_sessionmem_process(pid) else None


def verified_worker(data_dir: str) -> WorkerState | None:
    """:func:`read_state`, and the process it names really is this data dir's worker.

    What a command checks before it signals a pid: a stale ``worker.json`` whose pid
    was reused by another program names a live process that is not ours.
    """
    state = read_state(data_dir)
    if state is None or not holds_instance_lock(data_dir) or not is_sessionmem_process(state.pid):
        return None
    return state


def state_path(data_dir: str) -> str:
    return os.path.join(data_dir, STATE_FILE)


def read_state(data_dir: str) -> WorkerState | None:
    """The state of the live worker of ``data_dir``, or ``None`` (no file, unreadable, or its process is gone)."""
    try:
        with open(state_path(data_dir), encoding="utf-8") as f:
            raw = fastjson.loads(f.read())
        state = WorkerState(int(raw["pid"]), str(raw.get("host") or ""), int(raw["port"]),
                            float(raw.get("started_at") or 0), str(raw.get("version") or ""))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return state if process_alive(state.pid) else None


def write_json_atomically(path: str, data: object) -> None:
    """Write ``data`` as JSON to ``path`` through a temporary file and a rename."""
    from sessionmem.protocol.datadir import write_private

    temporary = f"{path}.{os.getpid()}.tmp"
    write_private(temporary, fastjson.dumps(data).encode("utf-8"))
    os.replace(temporary, path)


def write_state(data_dir: str, state: WorkerState) -> None:
    write_json_atomically(state_path(data_dir), state.as_json())


def remove_state(data_dir: str, pid: int) -> None:
    """Remove the state file if it is ``pid``'s (a newer worker's file stays)."""
    try:
        with open(state_path(data_dir), encoding="utf-8") as f:
            if int(fastjson.loads(f.read()).get("pid", -1)) == pid:
                os.unlink(state_path(data_dir))
    except (OSError, ValueError, TypeError, AttributeError):
        pass
