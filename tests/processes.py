"""What the tests ask of other processes, asked through psutil: the same on Linux and macOS, and no test
reads ``/proc`` itself."""

from __future__ import annotations

import psutil


def running(pid: int | None) -> bool:
    """Whether ``pid`` runs: a zombie (exited, not yet reaped by its parent) does not."""
    if pid is None:
        return False
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
