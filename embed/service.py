"""The embedder on the Trio side: one model, one worker thread at a time, small batches.

Resource handling:
    :class:`EmbedderService` owns one embedder and two lanes, each a
    ``trio.CapacityLimiter(1)``: background work (the vector index catching up) and
    urgent work (a search query, a few milliseconds). In each lane at most one worker
    thread runs the model (an onnxruntime session may run on several threads at once),
    so a query never waits behind a catch-up chunk, and the two never take more than the
    machine's two cores. A request is cut into
    chunks of at most ``batch_size`` texts, each its own trip to a worker thread, so a
    request of a thousand texts holds the thread one chunk at a time and other callers
    get their turn between chunks. With the default of 16 and the minilm embedder, a
    chunk takes ~0.1 s of short texts, ~0.4 s of 70-token observations, 1.5 s at worst
    (16 texts at the 256-token limit). :meth:`EmbedderService.aclose` closes the embedder
    once the chunk on the thread, if any, is done.

    Background work can have an embedder of its own (``background``): the worker gives
    it an :class:`~sessionmem.embed.isolated.IsolatedEmbedder`, the same model in a
    child process at the lowest CPU priority, so catching up takes only what accepting
    events leaves (the figures are in that module). Catching up is worth nothing to a
    hook waiting for its answer. The background lane's thread then only waits on a pipe:
    the priority is lowered for the process, never for a thread, since a niced thread
    that holds the worker's GIL when the kernel preempts it keeps the Trio thread
    waiting. Without ``background``, both lanes run ``embedder``.

Error handling:
    What the embedder raises (a failed model load, an onnxruntime error,
    :class:`~sessionmem.embed.base.EmbedderClosedError` after ``aclose``) propagates out
    of :meth:`~EmbedderService.embed` and :meth:`~EmbedderService.warm_up`; until
    ``aclose`` the service stays usable, and the next call tries a failed load again. Cancellation takes effect between
    chunks: a chunk already on a thread runs to its end (the thread is never abandoned,
    which would let the next chunk start beside a model still running), the chunks not
    yet started do not run. One exception: an urgent call made before the urgent lane has
    embedded anything is abandoned when cancelled. It may be the one loading the model
    (seconds, more on a busy machine), and a search asks within a budget (prompt recall's
    0.5 s): it goes on by words while the load finishes on its thread, and an embedder
    loads under its own lock, so a next call waits for that load, never runs beside it.
    And the background lane's chunk is abandoned when its embedder can be interrupted
    (the niced child process of :mod:`.isolated`): the child is killed, so the thread
    returns at once and the next chunk starts another child. A child at the lowest
    priority on a busy machine may take many seconds on a chunk: the index, cancelled
    at shut-down, would otherwise spend the worker's whole stop budget waiting for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import msgspec
import numpy as np
import trio

from sessionmem.embed.base import Embedder, EmbedderClosedError, EmbedderStatistics

# Texts per trip to the worker thread: how long a caller may wait behind another
# request, and how long cancelling takes (see the module docstring for the figures).
BATCH_SIZE = 16

class EmbedderServiceStatistics(msgspec.Struct, frozen=True):
    embedder: EmbedderStatistics
    batch_size: int
    requests: int  # calls of embed (and warm_up)
    busy: bool  # a worker thread is running the embedder now (or aclose holds it)
    waiting: int  # tasks waiting for the thread
    background: EmbedderStatistics | None = None  # the background lane's own embedder, if it has one
    background_pid: int | None = None  # the process running it, while one runs (IsolatedEmbedder)


class EmbedderService:
    def __init__(self, embedder: Embedder, *, background: Embedder | None = None,
                 batch_size: int = BATCH_SIZE) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if background is not None and (background.model_id, background.dimensions) != (
                embedder.model_id, embedder.dimensions):
            raise ValueError(f"the background embedder's model {background.model_id!r} is not {embedder.model_id!r}")
        self._embedder = embedder
        self._background_embedder = background
        self._batch_size = batch_size
        self._limiter = trio.CapacityLimiter(1)  # background
        self._urgent = trio.CapacityLimiter(1)
        self._closed = False
        self._requests = 0
        self._urgent_ready = False  # the urgent lane has embedded once: its model is loaded
        # A child process's (embed/isolated.py): a cancelled background chunk kills it rather than waiting.
        self._interrupt_background = getattr(background, "interrupt", None)

    @property
    def embedder(self) -> Embedder:
        return self._embedder

    @property
    def dimensions(self) -> int:
        return self._embedder.dimensions

    @property
    def model_id(self) -> str:
        return self._embedder.model_id

    async def embed(self, texts: Sequence[str], *, urgent: bool = False, threads: int | None = None) -> np.ndarray:
        """Unit vectors of ``texts``, float32 ``(len(texts), dimensions)``, computed off the Trio thread.

        ``urgent``: someone waits for the answer (a search); it runs in its own lane.
        ``threads``: the model threads the embedder may use for it (the index asks for two
        when the worker is idle; see :meth:`Embedder.embed <sessionmem.embed.base.Embedder.embed>`).
        """
        self._requests += 1
        limiter = self._urgent if urgent else self._limiter
        embedder = self._embedder if urgent else self._background_embedder or self._embedder
        vectors = np.zeros((len(texts), self._embedder.dimensions), dtype=np.float32)
        for start in range(0, len(texts), self._batch_size):
            chunk = list(texts[start : start + self._batch_size])
            async with limiter:
                if self._closed:
                    raise EmbedderClosedError("the embedder is closed")
                # Not abandoned on cancel: a cancelled caller waits for its chunk (aclose relies on it);
                # but for the urgent lane's first, which may be loading the model, and for a child process
                # that can be interrupted (module docstring).
                interrupt = None if urgent else self._interrupt_background
                try:
                    rows = await trio.to_thread.run_sync(
                        partial(embedder.embed, chunk, threads=threads),
                        abandon_on_cancel=(urgent and not self._urgent_ready) or interrupt is not None)
                except trio.Cancelled:
                    if interrupt is not None:
                        interrupt()  # the abandoned thread's request ends now, and nothing runs beside the next
                    raise
            vectors[start : start + len(chunk)] = rows
            self._urgent_ready = self._urgent_ready or urgent
        return vectors

    async def warm_up(self) -> None:
        """Load the model searches use and run it once (on one empty text), off the Trio thread; nothing to do
        for ``none``. The background lane's own embedder starts with its first chunk."""
        if self._embedder.dimensions:
            await self.embed([""], urgent=True)

    def statistics(self) -> EmbedderServiceStatistics:
        limiter = self._limiter.statistics()
        background = self._background_embedder
        return EmbedderServiceStatistics(self._embedder.statistics(), self._batch_size, self._requests,
                                         busy=limiter.borrowed_tokens > 0, waiting=limiter.tasks_waiting,
                                         background=background.statistics() if background is not None else None,
                                         background_pid=getattr(background, "pid", None))

    async def aclose(self) -> None:
        """Close the embedder, after the chunks running on threads (if any) have finished."""
        async with self._limiter, self._urgent:
            self._closed = True
            # On a worker thread: an urgent first call abandoned mid-load holds the model's load lock.
            await trio.to_thread.run_sync(self._embedder.close)
            if self._background_embedder is not None:
                # On a worker thread: stopping the child waits for it to exit.
                await trio.to_thread.run_sync(self._background_embedder.close)
