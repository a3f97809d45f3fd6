"""A circuit breaker for the LLM: stop calling an API that keeps failing, try again later.

``closed`` (calls go through) -> after ``threshold`` calls in a row that failed for
good (their retries exhausted), or at once on a failure that retrying soon cannot fix
(:meth:`CircuitBreaker.trip`) -> ``open`` for ``open_s`` seconds: no calls, the
caller uses the offline compressor -> ``half-open``: one trial call; success closes
the breaker, failure opens it again for twice as long (up to ``max_open_s``); a trial
that ends without an outcome (:meth:`CircuitBreaker.abandoned`) lets the next one through.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable

import msgspec


class BreakerState(enum.StrEnum):
    CLOSED = "closed"  # calls go through
    OPEN = "open"  # calls are refused until the breaker's pause is over
    HALF_OPEN = "half-open"  # one trial call at a time decides: closed again, or open for longer


class BreakerStatistics(msgspec.Struct, frozen=True):
    state: BreakerState
    consecutive_failures: int
    opened: int  # times it opened
    open_for_seconds: float  # until it lets a trial call through (0 unless open)


class CircuitBreaker:
    def __init__(self, *, threshold: int, open_s: float, max_open_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._threshold = threshold
        self._base_open_s = open_s
        self._max_open_s = max_open_s
        self._clock = clock
        self._failures = 0
        self._open_s = open_s
        self._open_until: float | None = None
        self._trial_running = False
        self._opened = 0

    @property
    def state(self) -> BreakerState:
        if self._open_until is None:
            return BreakerState.CLOSED
        return BreakerState.OPEN if self._clock() < self._open_until else BreakerState.HALF_OPEN

    def allow(self) -> bool:
        """Whether a call may be made now (in half-open state, one trial at a time)."""
        state = self.state
        if state is BreakerState.CLOSED:
            return True
        if state is BreakerState.HALF_OPEN and not self._trial_running:
            self._trial_running = True
            return True
        return False

    def succeeded(self) -> None:
        self._failures = 0
        self._open_until = None
        self._open_s = self._base_open_s
        self._trial_running = False

    def failed(self) -> None:
        """A call failed for good (after its retries)."""
        self._count_failure(self._threshold)

    def trip(self) -> None:
        """A failure that retrying soon cannot fix (a quota, a rate limit, a login): open now, or again for longer."""
        self._count_failure(1)

    def _count_failure(self, threshold: int) -> None:
        self._failures += 1
        if self._trial_running:  # the trial failed: open again, for longer
            self._trial_running = False
            self._open_s = min(self._open_s * 2, self._max_open_s)
            self._open()
        # Already open: a call that was in flight when it opened changes nothing.
        elif self._open_until is None and self._failures >= threshold:
            self._open()

    def abandoned(self) -> None:
        """A call allowed by :meth:`allow` ended without an outcome (cancelled): a trial may run again."""
        self._trial_running = False

    def _open(self) -> None:
        self._open_until = self._clock() + self._open_s
        self._opened += 1

    def statistics(self) -> BreakerStatistics:
        remaining = max(0.0, self._open_until - self._clock()) if self._open_until is not None else 0.0
        return BreakerStatistics(self.state, self._failures, self._opened, round(remaining, 3))
