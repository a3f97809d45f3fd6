"""The worker's retention task: raw tool payloads pruned once they are old enough, space given back.

Every ``interval_s`` (and a minute after the start), the raw tool data of stored
observations older than ``retention_days`` is stripped from the journal
(:func:`sessionmem.storage.sqlite.retention.prune_payloads`, a batch a transaction), then
freed pages go back to the file system. ``retention_days = 0`` keeps everything.

Error handling:
    A failed round (a full disk, say) is logged and counted; the next round tries again.
"""

from __future__ import annotations

import logging
import time

import msgspec
import trio

from sessionmem.runtime.logs import log_exception
from sessionmem.storage.base import Store

log = logging.getLogger(__name__)

SECONDS_PER_DAY = 86400.0
FIRST_ROUND_AFTER_S = 60.0


class PrunerStatistics(msgspec.Struct, frozen=True):
    retention_days: float  # 0: raw payloads are kept
    rounds: int
    pruned: int  # raw payloads stripped since the start
    last_round_at: float | None
    failures: int
    last_error: str


class Pruner:
    def __init__(self, store: Store, *, retention_days: float, interval_s: float = 3600.0) -> None:
        self._store = store
        self.retention_days = retention_days
        self._interval_s = interval_s
        self._rounds = self._pruned = self._failures = 0
        self._last_round_at: float | None = None
        self._last_error = ""

    def statistics(self) -> PrunerStatistics:
        return PrunerStatistics(self.retention_days, self._rounds, self._pruned, self._last_round_at,
                                self._failures, self._last_error)

    async def prune(self, older_than_days: float, *, full_vacuum: bool = False) -> int:
        """One round now: strip raw payloads older than ``older_than_days``, then give space back."""
        pruned = await self._store.prune_payloads(time.time() - older_than_days * SECONDS_PER_DAY)
        await self._store.reclaim_space(full=full_vacuum)
        self._rounds += 1
        self._pruned += pruned
        self._last_round_at = time.time()
        if pruned:
            log.info("retention: raw tool data of %d observation(s) older than %g day(s) pruned", pruned,
                     older_than_days)
        return pruned

    async def run(self) -> None:
        if self.retention_days <= 0:
            return
        await trio.sleep(FIRST_ROUND_AFTER_S)
        while True:
            try:
                await self.prune(self.retention_days)
            except Exception as exc:
                self._failures += 1
                self._last_error = f"{type(exc).__name__}: {exc}"[:300]
                log_exception(log, "retention: pruning failed; the next round tries again", exc)
            await trio.sleep(self._interval_s)
