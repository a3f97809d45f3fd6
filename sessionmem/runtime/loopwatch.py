"""The Trio thread's responsiveness, watched: how late a sleeping task wakes up.

Every hook's answer waits for the Trio thread. When something keeps it from running -- a
synchronous step that takes long, another thread holding the GIL, a garbage
collection, the process not being scheduled at all -- every request in flight waits,
and nothing on the request path can see why. :class:`LoopWatch` sleeps for a fixed
interval, again and again, and records how much later than asked it woke: any task
ready to run at that moment waited at least that long. ``/debug`` shows it (``loop``),
and a stall of a second or more is logged.

Lateness is the loop's, not a request's: a request can still wait for other things
(its transaction, a reader thread) while the loop is on time. Read together with the
writer's ``requestWaitMs`` and the ``gc`` pauses, it tells where a slow answer waited.
"""

from __future__ import annotations

import collections
import logging
import sys
import time

import msgspec
import trio

log = logging.getLogger(__name__)

INTERVAL_S = 0.1  # ten wake-ups a second: nothing next to a hook's request
WINDOW_S = 60.0  # the percentiles cover the last minute
STALL_MS = 100.0  # a wake-up this late counts as a stall
LOG_STALL_S = 1.0  # a stall this long is logged


class LoopStatistics(msgspec.Struct, frozen=True, kw_only=True):
    interval_ms: float  # how long the watch asks to sleep each time
    samples: int  # wake-ups measured since the worker started
    lag_p50_ms: float  # how late they were, over the last minute
    lag_p99_ms: float
    lag_max_ms: float  # the latest wake-up since the worker started
    lag_max_at: float | None  # when it woke (Unix time; None: none measured yet)
    stalls: int  # wake-ups late by STALL_MS or more, since the worker started
    gil_switch_interval_ms: float  # how long a thread waiting for the GIL lets the Trio thread run first


class LoopWatch:
    """Wake-up lateness of one Trio run (one per worker).

    Resource handling:
        :meth:`run` is a task of the worker's nursery for the life of the worker; it
        holds nothing but a bounded window of recent samples.

    Error handling:
        Nothing to fail: it only sleeps and reads clocks. Cancellation ends it.
    """

    def __init__(self, *, interval_s: float = INTERVAL_S, window_s: float = WINDOW_S,
                 stall_ms: float = STALL_MS, log_stall_s: float = LOG_STALL_S) -> None:
        self.interval_s = interval_s
        self._stall_s = stall_ms / 1000
        self._log_stall_s = log_stall_s
        self._recent: collections.deque[float] = collections.deque(maxlen=max(1, round(window_s / interval_s)))
        self._samples = 0
        self._stalls = 0
        self._max = 0.0
        self._max_at: float | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        deadline = trio.current_time() + self.interval_s
        while True:
            await trio.sleep_until(deadline)
            now = trio.current_time()
            self._record(now - deadline)
            deadline = now + self.interval_s

    def _record(self, late_s: float) -> None:
        self._samples += 1
        self._recent.append(late_s)
        if late_s >= self._stall_s:
            self._stalls += 1
        if late_s > self._max:
            self._max, self._max_at = late_s, time.time()
        if late_s >= self._log_stall_s:
            log.warning("the worker's Trio thread could not run for %.2f s: every request in flight waited "
                        "(a long synchronous step, a thread holding the GIL, or the process not scheduled)", late_s)

    def statistics(self) -> LoopStatistics:
        recent = sorted(self._recent)

        def at(fraction: float) -> float:
            return round(recent[min(len(recent) - 1, int(len(recent) * fraction))] * 1000, 3) if recent else 0.0

        return LoopStatistics(interval_ms=self.interval_s * 1000, samples=self._samples, lag_p50_ms=at(0.5),
                              lag_p99_ms=at(0.99), lag_max_ms=round(self._max * 1000, 3), lag_max_at=self._max_at,
                              stalls=self._stalls, gil_switch_interval_ms=round(sys.getswitchinterval() * 1000, 3))
