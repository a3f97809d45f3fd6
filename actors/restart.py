"""The restart policy: OTP's supervisor intensity and period, kept apart from routing.

A supervisor restarts a crashed child while it has crashed at most ``max_restarts``
times within the last ``period_s`` seconds; one more crash in that window and the
child is given up (Erlang/OTP's ``intensity`` and ``period``; triotp's
``max_restarts`` within ``max_seconds``). Each child keeps its own
:class:`RestartIntensity`; the policy is the same for all.
"""

from __future__ import annotations

import collections

import msgspec


class RestartPolicy(msgspec.Struct, frozen=True):
    max_restarts: int
    period_s: float


class RestartIntensity:
    """One child's recent crashes, judged against the policy."""

    def __init__(self, policy: RestartPolicy) -> None:
        self._policy = policy
        self._crashes: collections.deque[float] = collections.deque()
        self.restarts = 0  # restarts granted over the child's whole life

    def crashed(self, now: float) -> bool:
        """Record a crash at ``now``; True means restart, False means give up."""
        self._crashes.append(now)
        while self._crashes and self._crashes[0] < now - self._policy.period_s:
            self._crashes.popleft()
        if len(self._crashes) <= self._policy.max_restarts:
            self.restarts += 1
            return True
        return False

    def recent(self) -> int:
        """Crashes inside the current window (as of the last crash)."""
        return len(self._crashes)

    def reset(self) -> None:
        """Forget recent crashes (a failed child was replayed by hand)."""
        self._crashes.clear()
