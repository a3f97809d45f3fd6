"""The embedder interface and its statistics.

An embedder turns texts into vectors for similarity search. The contract, for every
implementation:

- ``embed(texts)`` is synchronous and CPU-bound (milliseconds per text): call it on a
  worker thread, never on the Trio thread (:class:`~sessionmem.embed.service.EmbedderService`
  does that). It returns a float32 array of shape ``(len(texts), dimensions)``, row *i*
  for ``texts[i]``, each row of unit L2 norm, so a dot product is the cosine. An empty
  sequence gives ``(0, dimensions)``.
- ``embed(texts, threads=n)`` lets the call use ``n`` threads (the index's catch-up,
  while the worker is idle); an embedder may ignore it. It never changes the vectors.
- Any string is accepted: the empty string, and texts longer than the model's window,
  which are truncated (only their beginning counts), never an error.
- ``model_id`` names the model *and* its weights. Vectors of two different model ids
  are not comparable: an index stores the id it was built with and is rebuilt when it
  changes.
- Nothing heavy happens at construction: a model loads on first use (or when the
  service warms it up), and never downloads anything.
- ``dimensions == 0`` means vectors are off (the ``none`` embedder): callers skip
  vector work instead of calling ``embed``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import msgspec

if TYPE_CHECKING:
    import numpy


class EmbedderClosedError(RuntimeError):
    """``embed`` was called after ``close``."""


class EmbedderUnavailableError(RuntimeError):
    """The model's runtime cannot be imported on this platform; the message says why (for ``doctor``)."""


class EmbedderStatistics(msgspec.Struct, frozen=True):
    """Counters of one embedder since it was created."""

    name: str  # "minilm" | "none"
    model_id: str
    dimensions: int
    loaded: bool = False  # the model is in memory
    load_seconds: float = 0.0  # how long loading took (0 until loaded)
    texts: int = 0  # texts embedded
    batches: int = 0  # model runs (a call of ``embed`` may make several)
    seconds: float = 0.0  # total time inside ``embed``: tokenizing, the model, pooling (not loading)
    # Why vectors are off although the setting asks for a model ("" if they are not, or by the setting):
    # its runtime has no wheel for this platform/Python (embed/availability.py).
    unavailable: str = ""


class Embedder(Protocol):
    name: str
    model_id: str
    dimensions: int

    def embed(self, texts: Sequence[str], *, threads: int | None = None) -> numpy.ndarray: ...

    def statistics(self) -> EmbedderStatistics: ...

    def close(self) -> None: ...
