"""Samples a process's resident memory and CPU use from /proc, and a data dir's WAL, while a scenario runs."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Self

_TICKS = os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime


class BackgroundThread:
    """A daemon thread running :meth:`_run` while the ``with`` block runs; ``_run`` polls every
    ``interval`` until ``_stop`` is set."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class ProcessSampler(BackgroundThread):
    """Use as a context manager; ``samples`` holds (seconds since start, RSS MiB, CPU %)."""

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        super().__init__(interval)
        self.pid = pid
        self.samples: list[tuple[float, float, float]] = []
        self.cpu_seconds = 0.0

    def _run(self) -> None:
        start = time.monotonic()
        try:
            first_cpu = last_cpu = _cpu_seconds(self.pid)
        except OSError:
            return
        last = start
        while not self._stop.wait(self.interval):
            try:
                now, cpu, rss = time.monotonic(), _cpu_seconds(self.pid), _rss_mb(self.pid)
            except OSError:
                break  # the process is gone
            self.samples.append((now - start, rss, 100 * (cpu - last_cpu) / max(now - last, 1e-9)))
            self.cpu_seconds = cpu - first_cpu
            last, last_cpu = now, cpu

    @property
    def peak_rss_mb(self) -> float:
        return max((s[1] for s in self.samples), default=0.0)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def data_dir_bytes(data_dir: Path) -> dict[str, int]:
    """Bytes on disk of a worker's data dir: the database, its WAL, the vector index, everything."""
    database = data_dir / "sessionmem.db"
    index = sum(_size(p) for p in (data_dir / "index").rglob("*") if p.is_file()) if (data_dir / "index").is_dir() \
        else 0
    total = sum(_size(p) for p in data_dir.rglob("*") if p.is_file())
    return {"db": _size(database), "wal": _size(Path(f"{database}-wal")), "index": index, "total": total}


class WalWatcher(BackgroundThread):
    """Use as a context manager: the largest size the data dir's WAL file reached while it ran."""

    def __init__(self, data_dir: Path, interval: float = 0.25) -> None:
        super().__init__(interval)
        self.wal = data_dir / "sessionmem.db-wal"
        self.peak_bytes = 0

    def _run(self) -> None:
        while True:
            self.peak_bytes = max(self.peak_bytes, _size(self.wal))
            if self._stop.wait(self.interval):
                return

