"""The ``none`` embedder: vectors turned off.

Its ``dimensions`` is 0, which is how callers know to skip vector work (no index, keyword
search only). If something calls :meth:`NoEmbedder.embed` anyway, it gets what the
contract promises for zero dimensions, an empty ``(n, 0)`` float32 array, rather than an
exception: a pipeline that embeds unconditionally keeps working and simply stores nothing
to compare. The calls are counted in the statistics, so such a caller shows up in
``/debug``.

The worker also runs it when the setting asks for ``minilm`` but its runtime is not
installed on this platform (:mod:`sessionmem.embed.availability`): ``unavailable`` then
says why, in the statistics.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from sessionmem.embed.base import EmbedderClosedError, EmbedderStatistics


class NoEmbedder:
    name = "none"
    model_id = "none"
    dimensions = 0

    def __init__(self, *, unavailable: str = "") -> None:
        """``unavailable``: why vectors are off although a model was asked for ("" when ``none`` was chosen)."""
        self.unavailable = unavailable
        self._texts = 0
        self._batches = 0
        self._seconds = 0.0
        self._closed = False

    def embed(self, texts: Sequence[str], *, threads: int | None = None) -> np.ndarray:
        if self._closed:
            raise EmbedderClosedError("the none embedder is closed")
        started = time.perf_counter()
        vectors = np.zeros((len(texts), 0), dtype=np.float32)
        self._texts += len(texts)
        self._batches += 1 if texts else 0
        self._seconds += time.perf_counter() - started
        return vectors

    def statistics(self) -> EmbedderStatistics:
        return EmbedderStatistics(self.name, self.model_id, self.dimensions, loaded=False,
                                  texts=self._texts, batches=self._batches, seconds=self._seconds,
                                  unavailable=self.unavailable)

    def close(self) -> None:
        self._closed = True
