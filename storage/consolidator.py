"""The worker's consolidation pass: every stored observation consolidated once, in the background.

The rules are :mod:`sessionmem.storage.consolidation_rules`'s, the writes
:func:`sessionmem.storage.sqlite.consolidation.consolidate`'s. The pass wakes when observations are
stored (the commit signal), consolidates them a batch a transaction on the writer's background lane, and
sleeps again once it has caught up. A worker started on a store it has not consolidated (an upgrade, an
import) works through it from the first row the same way, :data:`PAUSE_S` between batches, so hook
requests and the actors' stores have the writer between them.

It keeps, for the handover's paths (SessionStart, prompt and file recall), what they ask on the Trio
thread without a read: :meth:`Consolidator.is_hidden` (merged or superseded) and :meth:`Consolidator.use`.

Resource handling:
    One task, started by the worker beside the pruner, cancelled at shutdown: a batch it was writing
    commits or rolls back whole, and the next start resumes after the last batch committed. Its memory is
    the ids of the hidden observations and the counts of the memories handed over (a few MB at 100,000
    observations).

Error handling:
    A failed batch (a full disk, say) is logged and counted, shown at ``/debug``; the pass tries again
    after :data:`RETRY_S`. A store that cannot be read at the start leaves it waiting to try again.
    Nothing on a hook's path waits for it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Sequence

import msgspec
import trio

from sessionmem.records import ObservationRow
from sessionmem.runtime.logs import log_exception
from sessionmem.storage.base import Store
from sessionmem.storage.commits import Stored
from sessionmem.storage.consolidation_rules import Marks, Use

log = logging.getLogger(__name__)

BATCH = 50  # observations a transaction: 2-3 ms of the writer (a lookup and a near-duplicate's read for each)
PAUSE_S = 0.02  # between batches while catching up: the writer is free for other transactions
RETRY_S = 30.0
FETCHED_PENDING = 1000  # memories fetched whole, waiting to be counted as used, at most


class ConsolidatorStatistics(msgspec.Struct, frozen=True, kw_only=True):
    enabled: bool
    ready: bool  # its state is loaded: the handover leaves out what is merged or superseded
    caught_up: bool  # every observation stored so far is consolidated
    behind: int  # observations stored and not yet consolidated, as of its last look
    consolidated: int  # observations consolidated since the start
    hidden: int  # observations merged into another or superseded, in all
    counted: int  # memories with use counts, in all
    batches: int
    failures: int
    last_error: str


class Consolidator:
    """``told``: the observations a session (by Claude's id) was handed over in this worker's life (the
    handover's :class:`~sessionmem.search.told.ToldLedger`)."""

    def __init__(self, store: Store, told: Callable[[str], Collection[int]], *, enabled: bool = True,
                 batch: int = BATCH, pause_s: float = PAUSE_S) -> None:
        self._store = store
        self._told = told
        self.enabled = enabled
        self._batch = batch
        self._pause_s = pause_s
        self._hidden: set[int] = set()
        self._uses: dict[int, Use] = {}
        self._ready = False
        self._behind = 0
        self._consolidated = self._batches = self._failures = 0
        self._last_error = ""
        self._fetched: list[int] = []
        self._fetched_waiting = trio.Event()
        self._seen = -1  # the number of the last commit of observations the pass has consolidated through

    def statistics(self) -> ConsolidatorStatistics:
        return ConsolidatorStatistics(
            enabled=self.enabled, ready=self._ready, caught_up=self.caught_up(), behind=self._behind, consolidated=self._consolidated,
            hidden=len(self._hidden), counted=len(self._uses), batches=self._batches, failures=self._failures,
            last_error=self._last_error)

    def is_hidden(self, observation_id: int) -> bool:
        """Merged into a near-duplicate, or superseded by a later decision: not handed over."""
        return observation_id in self._hidden

    def use(self, observation_id: int) -> Use | None:
        return self._uses.get(observation_id)

    def fetched(self, ids: list[int]) -> None:
        """Memories fetched whole (MCP): counted as used by the pass, soon (at most :data:`FETCHED_PENDING`
        waiting: past that, a fetch is not counted rather than remembered without bound)."""
        if self.enabled:
            self._fetched.extend(ids[: max(0, FETCHED_PENDING - len(self._fetched))])
            self._fetched_waiting.set()

    async def marks(self, rows: Sequence[ObservationRow]) -> dict[int, Marks]:
        """What consolidation says of each of ``rows`` it says something of (none while it is off)."""
        if not self.enabled or not rows:
            return {}
        return await self._store.consolidation_marks([row.id for row in rows])

    def caught_up(self) -> bool:
        """Every observation stored so far is consolidated (or the pass is off)."""
        return not self.enabled or (self._ready and self._seen >= self._store.commits.committed(Stored.OBSERVATIONS))

    async def run(self) -> None:
        if not self.enabled:
            return
        while not self._ready:
            try:
                self._hidden, self._uses = await self._store.consolidation_state()
                self._ready = True
            except Exception as exc:
                self._failed("consolidation: its state could not be read; trying again", exc)
                await trio.sleep(RETRY_S)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._count_fetched)
            await self._follow()

    async def _follow(self) -> None:
        commits = self._store.commits
        while True:
            seen = commits.committed(Stored.OBSERVATIONS)
            try:
                await self._catch_up()
            except Exception as exc:
                self._failed("consolidation: a batch failed; trying again", exc)
                await trio.sleep(RETRY_S)
                continue
            self._seen = seen
            await commits.wait_committed(seen, Stored.OBSERVATIONS)

    async def _catch_up(self) -> None:
        """Consolidate every observation stored so far, a batch at a time; each batch says how many wait after
        it and whose they are, so only the first costs a read of its own. What those sessions were told is
        taken here, on the Trio thread (the ledger's one owner)."""
        self._behind, sessions = await self._store.consolidation_behind(limit=self._batch)
        while self._behind:
            told = {session: list(self._told(session)) for session in sessions}
            step = await self._store.consolidate({session: ids for session, ids in told.items() if ids},
                                                 limit=min(self._batch, self._behind))
            self._hidden.update(step.hidden)
            self._uses.update(step.uses)
            self._consolidated += step.consolidated
            self._batches += 1
            self._behind, sessions = step.behind, step.next_sessions
            if self._behind:
                await trio.sleep(self._pause_s)

    async def _count_fetched(self) -> None:
        while True:
            await self._fetched_waiting.wait()
            self._fetched_waiting = trio.Event()
            ids, self._fetched = self._fetched, []
            try:
                self._uses.update(await self._store.mark_fetched(ids, key=f"fetched:{int(time.time() // 86400)}"))
            except Exception as exc:
                self._failed("consolidation: fetched memories could not be counted", exc)

    def _failed(self, message: str, exc: Exception) -> None:
        self._failures += 1
        self._last_error = f"{type(exc).__name__}: {exc}"[:300]
        log_exception(log, message, exc)
