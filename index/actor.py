"""The vector index actor: the one owner of the HNSW index (index/hnsw.py), kept in step with SQLite.

What it does, in its own nursery (:meth:`VectorIndex.run`):

- **Load or rebuild.** The saved index is loaded (off the Trio thread) if it is of the
  embedder's model and dimensions, of this format and whole (:meth:`HnswIndex.load`);
  otherwise a new, empty one is made and the reason counted as a rebuild. SQLite holds
  every document's text (not its vector): the reconcile below queues them all, and they
  are embedded again, nothing lost, the old files removed by the first save.
- **Reconcile, then follow.** It compares the index's labels with the documents in
  SQLite: vectors of rows that are gone are removed, rows without a vector are queued.
  From then on, each commit that stored documents (prompts, observations, summaries) wakes it:
  the store's commit signal (:mod:`~sessionmem.storage.commits`, :data:`DOCUMENTS`), where
  several commits while it was busy wake it once and a journal accept does not wake it at all.
  It reads the rows above the newest it knows, *after* their commit, and queues them
  ahead of any older backlog, so fresh memory is searchable first. Queued documents are
  embedded a chunk at a time (:class:`~sessionmem.embed.service.EmbedderService`, its
  background lane) and added.
- **Yield to accepting.** A chunk starts only once a window of ``quiet_s`` saw no commit of
  any kind, journal accepts included (the same signal's number, looked at once a window), and at
  least every ``max_yield_s``: while hooks arrive, the model does
  not compete with their accepts for the CPU -- or for the GIL, which a low-priority
  thread may hold while it waits for a core. Between bursts, and once a backfill is
  done, it catches up at full speed. (Run beside the accept path, catching up took a
  core and cost the bench's later rounds a tenth of their throughput.)
- **Both cores when idle.** A chunk runs ``idle_threads`` texts at once (2, each on a
  thread) once nothing was written and nothing searched for ``idle_s``; one otherwise. The
  embedding process runs at the lowest CPU priority either way, so hooks keep priority
  even over a chunk under way; the second thread only takes a core no one wants.
- **Save.** Every ``save_interval_s`` while something changed, and once on the way
  out, atomically (:meth:`HnswIndex.save`). What a crash loses since the last save is
  re-embedded by the next start's reconcile.

Every call on the index (add, remove, query, save) runs on a worker thread while
holding the actor's lane (a FIFO ``trio.Lock``): never two at once, never on the Trio
thread. A query that cannot get the lane within ``query_wait_s`` (a save of a large
index holds it for a second) is answered ``None``, and the search goes on with
full-text results only, saying so.

Resource handling:
    Everything runs inside :meth:`run`; cancelling it stops catch-up between chunks (a
    call already on a thread finishes) and saves within :attr:`close_timeout_s`
    (shielded). Nothing else holds the index.

Error handling:
    Nothing here stops the worker. A saved index that cannot be used is a rebuild; an
    index directory that cannot be created leaves the worker searching by words. A
    storage, embedding or index error while catching up is logged and counted
    (``failures``, ``lastError``, state ``failed``) and tried again after a growing
    pause (up to a minute): documents are never dropped. A failed save is logged; the
    previous files stay. With vectors off (the ``none`` embedder) the actor does
    nothing and every query answers ``None``.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import TypeVar

import msgspec
import numpy as np
import trio

from sessionmem.embed.service import EmbedderService
from sessionmem.index.hnsw import HnswIndex, key_of, label_of
from sessionmem.records import DOCUMENT_KINDS
from sessionmem.runtime.logs import log_exception
from sessionmem.storage.base import Store
from sessionmem.storage.commits import DOCUMENTS

log = logging.getLogger(__name__)

T = TypeVar("T")

CHUNK = 16  # documents per embedding run and per add
QUIET_S = 0.25  # a chunk waits until the database has taken no write for this long...
# ...but no longer than this: a steady stream of writes does not stop catching up. Each chunk run
# beside accepts shows in their tail (even at nice 19, in a process of its own): measured with a
# 500 events/s open loop (bench/run.py openloop), p99 27.7-80.6 ms with a 5 s limit against
# 25.5-37.8 ms with 30 s. Hooks of a real session leave quiet gaps every few seconds; only a
# backfill or a bench writes without pause.
MAX_YIELD_S = 30.0
QUERY_WAIT_S = 0.25
# While a chunk waits for quiet, what is stored is read (and counts as pending) at most this often: under
# ingest, documents commit many times a second, and a read for each is a reader trip the accepts pay for.
NEW_READ_GAP_S = 0.05
# Two texts at once (two threads) once the worker has taken no write and answered no search for
# this long: both cores, while no hook wants one.
IDLE_S = 2.0
IDLE_THREADS = 2
ERROR_PAUSE_MAX_S = 60.0


class IndexState(str, Enum):
    OFF = "off"  # vectors are off (the none embedder)
    LOADING = "loading"
    CATCHING_UP = "catching-up"  # documents are waiting for their vectors
    READY = "ready"  # every stored document has its vector
    FAILED = "failed"  # the last catch-up attempt failed; retried after a pause


class IndexStatistics(msgspec.Struct, frozen=True, kw_only=True):
    state: IndexState
    model_id: str
    dimensions: int
    vectors: int
    capacity: int
    pending: int  # stored documents waiting for their vectors
    added: int  # vectors added since the worker started
    removed: int
    queries: int
    busy_queries: int  # queries answered without vectors: the index was busy (a save) or loading
    rebuilds: int
    last_rebuild_reason: str
    load_seconds: float
    embed_seconds: float  # time spent embedding documents
    catch_up_per_second: float  # documents embedded and added per second, over the last 30 s of work
    saves: int
    last_save_at: float | None
    last_save_seconds: float
    last_save_bytes: int
    failures: int
    last_error: str
    yields: int = 0  # chunks that first waited for the database to be quiet (hooks were arriving)
    idle_chunks: int = 0  # chunks embedded idle_threads texts at once (the worker was idle)
    vectors_by_kind: dict[str, int] = msgspec.field(default_factory=dict)  # each kind has its own graph


class VectorIndex:
    """See the module docstring."""

    def __init__(self, store: Store, embedder: EmbedderService, directory: Path, *,
                 save_interval_s: float = 120.0, query_wait_s: float = QUERY_WAIT_S, chunk: int = CHUNK,
                 quiet_s: float = QUIET_S, max_yield_s: float = MAX_YIELD_S, idle_s: float = IDLE_S,
                 idle_threads: int = IDLE_THREADS) -> None:
        self._store = store
        self._idle_s = idle_s
        self._idle_threads = idle_threads
        self._activity: tuple[int, int] = (-1, -1)  # (commit number, queries) when a chunk last started
        self._active_at = 0.0  # when a chunk start last saw them change
        self._quiet_s = quiet_s
        self._max_yield_s = max_yield_s
        self._quiet_seen = -1  # the store's commit number when a chunk last started
        self._embedder = embedder
        self._directory = directory
        self._save_interval_s = save_interval_s
        self._query_wait_s = query_wait_s
        self._chunk = chunk
        self.close_timeout_s = 10.0  # the owner lowers it to its share of a shutdown budget
        self._index: HnswIndex | None = None
        self._lane = trio.Lock()
        self._commit_seen = 0  # the store's latest commit of documents when the index last read what is new
        self._backlog: deque[tuple[str, int]] = deque()
        self._newest: dict[str, int] = {}
        self._state = IndexState.OFF if embedder.dimensions == 0 else IndexState.LOADING
        self._dirty = False
        self._fresh_because = ""  # why the index was started empty (no file, a bad file)
        # statistics
        self._added = self._removed = self._queries = self._busy_queries = 0
        self._yields = 0  # chunks that waited for the database to be quiet
        self._idle_chunks = 0
        self._rebuilds = self._saves = self._failures = 0
        self._last_rebuild_reason = self._last_error = ""
        self._load_seconds = self._embed_seconds = self._last_save_seconds = 0.0
        self._last_save_at: float | None = None
        self._last_save_bytes = 0
        self._recent: deque[tuple[float, int]] = deque()  # (when, documents) of recent chunks

    # -- what others call ---------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        return self._state is not IndexState.OFF

    @property
    def pending(self) -> int:
        """Stored documents known to have no vector yet (a search by meaning cannot find them)."""
        return len(self._backlog)

    def unavailable_reason(self) -> str:
        """Why a query got no vectors: ``off``, ``loading``, ``failed`` (no index could be loaded) or ``busy``."""
        if not self.enabled:
            return "off"
        if self._index is None:
            return "failed" if self._state is IndexState.FAILED else "loading"
        return "busy"

    async def caught_up(self, *, poll_s: float = 0.02) -> None:
        """Wait until every document stored so far has its vector (tests, the bench)."""
        while self.enabled and (self._backlog or self._woken() or self._state is not IndexState.READY):
            await trio.sleep(poll_s)

    async def nearest(self, vector: np.ndarray, k: int, *, of_kind: str | None = None
                      ) -> list[tuple[str, int, float]] | None:
        """The ``k`` nearest documents (kind, row id, cosine distance), nearest first; ``of_kind``: only
        documents of that kind (see :meth:`HnswIndex.nearest`).

        ``None`` when there are no vectors to ask: vectors off, the index loading, or busy
        past ``query_wait_s``.
        """
        return await self._ask(lambda index: index.nearest(vector, k, kind=of_kind))

    async def nearest_to(self, kind: str, row_id: int, k: int, *, of_kind: str | None = None,
                         among: Sequence[tuple[str, int]] | None = None) -> list[tuple[str, int, float]] | None:
        """The ``k`` documents nearest to a stored document's own vector, as :meth:`nearest` (it among them);
        ``among``: the ``k`` nearest of those documents, as :meth:`nearest_among`.

        ``None`` when that document has no vector yet, or as :meth:`nearest`. One call on the
        index: no embedding, one thread hop.
        """
        labels = None if among is None else [label_of(key_kind, key_id) for key_kind, key_id in among]

        def query(index: HnswIndex) -> list[tuple[int, float]] | None:
            vector = index.vector_of(label_of(kind, row_id))
            if vector is None:
                return None
            return index.nearest(vector, k, kind=of_kind) if labels is None else index.nearest_among(vector, labels, k)

        return await self._ask(query)

    async def nearest_among(self, vector: np.ndarray, keys: Sequence[tuple[str, int]], k: int
                            ) -> list[tuple[str, int, float]] | None:
        """The ``k`` of the documents ``keys`` nearest to ``vector``, as :meth:`nearest`, every one
        compared (:meth:`HnswIndex.nearest_among`): a small project's documents among many."""
        labels = [label_of(kind, row_id) for kind, row_id in keys]
        return await self._ask(lambda index: index.nearest_among(vector, labels, k))

    async def nearest_of_rows(self, vector: np.ndarray, rows: Mapping[str, np.ndarray], k: int
                              ) -> list[tuple[str, int, float]] | None:
        """The ``k`` nearest of the documents ``rows`` names (row ids by kind, ascending), as :meth:`nearest`:
        a project's documents (:meth:`HnswIndex.nearest_of_rows`)."""
        return await self._ask(lambda index: index.nearest_of_rows(vector, rows, k))

    @property
    def model_id(self) -> str:
        """The embedder's model id: what the index's vectors are vectors of."""
        return self._embedder.model_id

    async def vectors_of(self, keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], bytes]:
        """The vectors the index holds of ``keys`` (float32 bytes), by key; those it has not embedded yet are
        absent, and all of them while it loads or stays busy past ``query_wait_s`` (the team push sends
        them later then)."""
        def read(index: HnswIndex) -> dict[tuple[str, int], bytes]:
            found = {}
            for key in keys:
                vector = index.vector_of(label_of(*key))
                if vector is not None:
                    found[key] = np.asarray(vector, dtype=np.float32).tobytes()  # a copy: the index's rows move
            return found

        return await self._call_briefly(read) or {}

    async def _ask(self, query: Callable[[HnswIndex], list[tuple[int, float]] | None]
                   ) -> list[tuple[str, int, float]] | None:
        """A query on the index, briefly (see :meth:`_call_briefly`), its labels named as documents."""
        self._queries += 1
        found = await self._call_briefly(query)
        if found is None:
            return None
        return [(*key_of(label), distance) for label, distance in found]

    def statistics(self) -> IndexStatistics:
        index = self._index
        now = time.monotonic()
        while self._recent and self._recent[0][0] < now - 30:
            self._recent.popleft()
        rate = 0.0
        if len(self._recent) >= 2:
            span = self._recent[-1][0] - self._recent[0][0]
            rate = round(sum(n for _, n in list(self._recent)[1:]) / span, 1) if span > 0 else 0.0
        return IndexStatistics(
            state=self._state, model_id=self._embedder.model_id, dimensions=self._embedder.dimensions,
            vectors=index.vectors if index else 0, capacity=index.capacity if index else 0,
            pending=len(self._backlog), added=self._added, removed=self._removed, queries=self._queries,
            busy_queries=self._busy_queries, rebuilds=self._rebuilds, last_rebuild_reason=self._last_rebuild_reason,
            load_seconds=round(self._load_seconds, 3), embed_seconds=round(self._embed_seconds, 3),
            catch_up_per_second=rate, saves=self._saves, last_save_at=self._last_save_at,
            last_save_seconds=round(self._last_save_seconds, 3), last_save_bytes=self._last_save_bytes,
            failures=self._failures, last_error=self._last_error, yields=self._yields, idle_chunks=self._idle_chunks,
            vectors_by_kind=index.vectors_by_kind() if index else {})

    # -- the actor ---------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Load, reconcile, follow and save until cancelled; started at once (loading goes on in the background).

        Never raises but for cancellation: without a usable index directory the worker
        runs on, searching by words (state ``failed``, the reason in ``lastError``).
        """
        task_status.started()
        if not self.enabled:
            return
        try:
            await self._load()
        except Exception as exc:
            self._failed(exc)
            log_exception(log, f"vector index: cannot load or create it in {self._directory}; "
                               "searching by words only", exc)
            return
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._save_periodically)
                await self._follow()
        finally:
            if self._index is not None and self._dirty:
                with trio.move_on_after(self.close_timeout_s, shield=True):
                    await self._save()
            # Freed here rather than at interpreter exit, where voyager's bindings (nanobind) report every
            # graph still alive as a leak on stderr.
            self._index = None

    def _failed(self, exc: Exception) -> None:
        self._failures += 1
        self._last_error = f"{type(exc).__name__}: {exc}"[:500]
        self._state = IndexState.FAILED

    async def _load(self) -> None:
        started = time.perf_counter()
        self._directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        dimensions, model_id = self._embedder.dimensions, self._embedder.model_id
        index, reason = await trio.to_thread.run_sync(HnswIndex.load, self._directory, dimensions, model_id)
        if index is None:
            # Counted as a rebuild by the reconcile, if there is anything to embed again.
            self._fresh_because = reason
            index = HnswIndex(dimensions, model_id)
            self._dirty = True
        self._index = index
        self._load_seconds = time.perf_counter() - started
        log.info("vector index: %d vectors loaded in %.2f s", index.vectors, self._load_seconds)

    async def _follow(self) -> None:
        pause = 1.0
        reconciled = False
        while True:
            chunk: list[tuple[str, int]] = []
            try:
                if not reconciled:
                    await self._reconcile()
                    reconciled = True
                await self._queue_new_if_woken()
                if not self._backlog:
                    self._state = IndexState.READY
                    await self._store.commits.wait_committed(self._commit_seen, DOCUMENTS)
                    continue
                self._state = IndexState.CATCHING_UP
                await self._wait_quiet()
                # What was stored while we waited (a backfill writes for minutes) goes first and
                # counts as pending now, not after this chunk.
                await self._queue_new_if_woken()
                chunk = [self._backlog.popleft() for _ in range(min(self._chunk, len(self._backlog)))]
                await self._embed_and_add(chunk)
                pause = 1.0
            except Exception as exc:  # the store, the embedder or the index failed: wait, then again
                self._backlog.extendleft(reversed(chunk))  # never dropped
                self._failed(exc)
                log_exception(log, f"vector index: catching up failed; trying again in {pause:.0f} s", exc)
                await trio.sleep(pause)
                pause = min(pause * 2, ERROR_PAUSE_MAX_S)

    def _woken(self) -> bool:
        """Whether a commit that stored documents came after the index last read what is new."""
        return self._store.commits.committed(DOCUMENTS) > self._commit_seen

    async def _wait_quiet(self) -> None:
        """Return once a window of ``quiet_s`` saw no commit of any kind -- at once if nothing was committed
        since the last chunk started -- or after ``max_yield_s`` in any case. Documents stored meanwhile are
        queued as their commits come, read at most every :data:`NEW_READ_GAP_S` (a journal accept wakes
        nothing): they count as pending at once, and go first."""
        commits = self._store.commits
        if commits.committed() != self._quiet_seen:
            self._yields += 1
            with trio.move_on_after(self._max_yield_s):
                while True:
                    before = commits.committed()
                    with trio.move_on_after(self._quiet_s):
                        while True:
                            await commits.wait_committed(self._commit_seen, DOCUMENTS)
                            await self._queue_new_if_woken()
                            await trio.sleep(NEW_READ_GAP_S)  # what commits meanwhile: one read
                    if commits.committed() == before:
                        break
        self._quiet_seen = commits.committed()

    async def _reconcile(self) -> None:
        """Queue every stored document without a vector; remove vectors of rows that are gone."""
        self._commit_seen = self._store.commits.committed(DOCUMENTS)  # before reading: a later one wakes us
        stored = await self._store.document_ids()
        live = await self._call(lambda index: index.labels())
        wanted = {label_of(kind, row_id) for kind, ids in stored.items() for row_id in ids}
        stale = sorted(live - wanted)
        if stale:
            await self._call(lambda index: index.remove(stale))
            self._removed += len(stale)
            self._dirty = True
            log.info("vector index: removed %d vector(s) of rows that are gone", len(stale))
        missing = sorted((key_of(label) for label in wanted - live), key=lambda key: key[1], reverse=True)
        self._backlog.extend(missing)  # newest first
        self._newest = {kind: max(stored.get(kind) or [0]) for kind in DOCUMENT_KINDS}
        if missing and self._fresh_because:
            self._rebuilds += 1
            self._last_rebuild_reason = self._fresh_because
            log.warning("vector index: rebuilding, %d document(s) to embed (%s)", len(missing), self._fresh_because)
        elif missing:
            log.info("vector index: %d stored document(s) to embed", len(missing))

    async def _queue_new_if_woken(self) -> None:
        if self._woken():
            commit = self._store.commits.committed(DOCUMENTS)  # taken before reading: a later one wakes us
            if self._state is IndexState.READY:
                self._state = IndexState.CATCHING_UP  # until the new rows are read and embedded
            await self._queue_new()
            self._commit_seen = commit  # only once read: a read cancelled (by a deadline) is done again

    async def _queue_new(self) -> None:
        new = await self._store.document_ids(after=self._newest)
        keys = [(kind, row_id) for kind, ids in new.items() for row_id in ids]
        for kind, ids in new.items():
            if ids:
                self._newest[kind] = ids[-1]
        # Ahead of the older backlog, newest first.
        self._backlog.extendleft(sorted(keys, key=lambda key: key[1]))

    def _threads_now(self) -> int:
        """``idle_threads`` if nothing was written or searched since the last chunk started, nor for ``idle_s``."""
        activity, now = (self._store.commits.committed(), self._queries), trio.current_time()
        if activity != self._activity:
            self._activity, self._active_at = activity, now
        return self._idle_threads if now - self._active_at >= self._idle_s else 1

    async def _embed_and_add(self, chunk: list[tuple[str, int]]) -> None:
        documents = await self._store.documents(chunk)  # rows deleted meanwhile are simply absent
        if not documents:
            return
        threads = self._threads_now()
        self._idle_chunks += threads > 1
        started = time.perf_counter()
        vectors = await self._embedder.embed([document.text for document in documents], threads=threads)
        self._embed_seconds += time.perf_counter() - started
        labels = np.array([label_of(document.kind, document.row_id) for document in documents], dtype=np.uint64)
        await self._call(lambda index: index.add(labels, vectors))
        self._added += len(documents)
        self._dirty = True
        self._recent.append((time.monotonic(), len(documents)))

    async def _save_periodically(self) -> None:
        while True:
            await trio.sleep(self._save_interval_s)
            if self._dirty:
                await self._save()

    async def _save(self) -> None:
        started = time.perf_counter()
        self._dirty = False  # changes during the save make it dirty again
        try:
            size = await self._call(lambda index: index.save(self._directory))
        except Exception as exc:
            self._dirty = True
            self._failures += 1
            self._last_error = f"save: {type(exc).__name__}: {exc}"[:500]
            log_exception(log, "vector index: save failed; the previous files stay", exc)
            return
        self._saves += 1
        self._last_save_at = time.time()
        self._last_save_seconds = time.perf_counter() - started
        self._last_save_bytes = size

    # -- the lane -------------------------------------------------------------------------

    async def _call(self, fn: Callable[[HnswIndex], T]) -> T:
        index = self._index
        assert index is not None
        async with self._lane:
            return await trio.to_thread.run_sync(fn, index)

    async def _call_briefly(self, fn: Callable[[HnswIndex], T]) -> T | None:
        """``fn`` on the index if the lane is free within ``query_wait_s``; ``None`` if not (or no index)."""
        index = self._index
        if self._state is IndexState.OFF:
            return None
        if index is None:  # still loading
            self._busy_queries += 1
            return None
        acquired = False
        with trio.move_on_after(self._query_wait_s):
            await self._lane.acquire()
            acquired = True
        if not acquired:
            self._busy_queries += 1
            return None
        try:
            return await trio.to_thread.run_sync(fn, index)
        finally:
            self._lane.release()
