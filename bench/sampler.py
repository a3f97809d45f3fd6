"""Samples a process's resident memory and CPU use from /proc while a scenario runs."""

from __future__ import annotations

import os
import threading
import time

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


class ProcessSampler:
    """Use as a context manager; ``samples`` holds (seconds since start, RSS MiB, CPU %)."""

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        self.pid = pid
        self.interval = interval
        self.samples: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
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

    def __enter__(self) -> ProcessSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
