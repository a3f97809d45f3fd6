"""Bounded LLM cost: a daily token budget for the whole worker and a cap per session.

Usage is counted in tokens (input and output) as the API reports them. The day is
the UTC day; what was spent earlier today survives a restart (the worker seeds the
budget from the tokens of today's stored results). A session's usage starts from
what its row records. Once either limit is reached, the compressor uses the offline
one for that work and says so, once, in the log; ``/debug`` shows what is left.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

SECONDS_PER_DAY = 86_400


def utc_day(timestamp: float) -> int:
    return int(timestamp // SECONDS_PER_DAY)


class BudgetStatistics(msgspec.Struct, frozen=True):
    daily_limit: int  # 0: no limit
    used_today: int
    left_today: int  # -1: no limit
    session_cap: int  # 0: no cap
    sessions_capped: int  # sessions that reached the cap
    refused_calls: int  # calls not made for lack of budget (offline instead)


class TokenBudget:
    def __init__(self, *, daily_limit: int, session_cap: int, clock: Callable[[], float] = time.time) -> None:
        self._daily_limit = daily_limit
        self._session_cap = session_cap
        self._clock = clock
        self._day = utc_day(clock())
        self._used_today = 0
        self._sessions: dict[str, int] = {}
        self._capped: set[str] = set()
        self._refused = 0

    def seed(self, used_today: int) -> None:
        """Tokens already spent today (before this process started)."""
        self._used_today = max(self._used_today, used_today)

    def _roll_day(self) -> None:
        today = utc_day(self._clock())
        if today != self._day:
            self._day, self._used_today = today, 0

    def refusal(self, session: str, session_tokens_at_start: int) -> str:
        """Why a call for ``session`` may not be made now (``""``: it may)."""
        self._roll_day()
        if self._daily_limit and self._used_today >= self._daily_limit:
            self._refused += 1
            return f"the daily token budget ({self._daily_limit}) is spent"
        used = self._sessions.setdefault(session, session_tokens_at_start)
        if self._session_cap and used >= self._session_cap:
            self._refused += 1
            self._capped.add(session)
            return f"session {session} reached its token cap ({self._session_cap})"
        return ""

    def spend(self, session: str, tokens: int) -> None:
        tokens = max(0, tokens)  # nothing spent gives the budget back
        self._roll_day()
        self._used_today += tokens
        self._sessions[session] = self._sessions.get(session, 0) + tokens

    def statistics(self) -> BudgetStatistics:
        self._roll_day()
        left = max(0, self._daily_limit - self._used_today) if self._daily_limit else -1
        return BudgetStatistics(self._daily_limit, self._used_today, left, self._session_cap, len(self._capped),
                                self._refused)
