"""Python's garbage collector, watched and kept off the long-lived objects.

A collection holds the GIL while it walks the objects of its generations: every thread
of the worker, the Trio thread serving hooks included, waits for it. A full collection
walks every tracked object in the process -- with the web stack, the secret detectors
and the embedder's Python side loaded, tens of milliseconds with every request in flight
waiting. :func:`freeze_startup_objects` moves what the worker loaded at start into the
collector's permanent generation, which no collection walks again: a full collection
then walks only what was made since. :func:`widen_young_generation` then
lets the youngest generation grow to :data:`YOUNG_GENERATION_OBJECTS` before it is
collected: a request's objects are nearly all freed by their reference counts before
that, so the collector walks far fewer of them.

:data:`WATCH` counts the collections of each generation and how long they paused the
process; ``/debug`` shows them (``gc``).
"""

from __future__ import annotations

import gc
import time
from typing import Any

import msgspec

GENERATIONS = 3


class GenerationStatistics(msgspec.Struct, frozen=True):
    collections: int
    total_ms: float  # time spent in them since the watch was installed
    max_ms: float  # the longest pause


class GcStatistics(msgspec.Struct, frozen=True):
    frozen_objects: int  # in the permanent generation: never walked
    thresholds: list[int]  # gc.get_threshold(): when each generation is collected
    generations: list[GenerationStatistics]  # youngest first; a full collection is the last


class GcWatch:
    """Collection counts and pauses, from ``gc.callbacks`` (one per process: so is the collector).

    Resource handling:
        Installed once (:meth:`install` is idempotent) and left for the life of the
        process: it costs a clock read at the start and end of each collection.
        ``gc.get_freeze_count()`` walks the whole permanent generation (about 12 ms a call in a
        warm worker on a 2-core machine, holding the GIL), so the count is read when the
        permanent generation changes (:meth:`install`, :func:`freeze_startup_objects`), not by
        every ``/debug``.
    """

    def __init__(self) -> None:
        self._frozen = 0
        self._started = 0.0
        self._collections = [0] * GENERATIONS
        self._total = [0.0] * GENERATIONS
        self._longest = [0.0] * GENERATIONS

    def install(self) -> None:
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)
        self.count_frozen()

    def count_frozen(self) -> None:
        """Read how many objects the permanent generation holds: after anything froze objects."""
        self._frozen = gc.get_freeze_count()

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        # Runs in whichever thread triggered the collection, holding the GIL: plain updates are safe.
        if phase == "start":
            self._started = time.perf_counter()
            return
        generation = min(int(info.get("generation", 0)), GENERATIONS - 1)
        paused = time.perf_counter() - self._started
        self._collections[generation] += 1
        self._total[generation] += paused
        self._longest[generation] = max(self._longest[generation], paused)

    def statistics(self) -> GcStatistics:
        return GcStatistics(self._frozen, list(gc.get_threshold()), [
            GenerationStatistics(count, round(total * 1000, 3), round(longest * 1000, 3))
            for count, total, longest in zip(self._collections, self._total, self._longest)])


WATCH = GcWatch()


def freeze_startup_objects() -> None:
    """Collect once, so that startup's garbage is freed rather than kept, then leave every object alive now
    out of later collections (see the module docstring). For a process that has finished loading."""
    gc.collect()
    gc.freeze()
    WATCH.count_frozen()


# The youngest generation is collected once this many more container objects were made than freed
# (Python's default is 700, at which a serving worker pauses for it many times a second). At 10,000
# it pauses a small fraction as often, and the older generations, collected after so many of the
# youngest's collections, pause less with it; ``/debug`` (``gc``) shows the pauses.
YOUNG_GENERATION_OBJECTS = 10_000


def widen_young_generation() -> None:
    """Collect the youngest generation at :data:`YOUNG_GENERATION_OBJECTS`, the older ones as before.

    A worker serving requests makes and frees objects by the thousand: collected at
    Python's 700, its youngest generation was collected more than once per request
    batch, each time walking objects that their reference counts were about to free.
    """
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION_OBJECTS, middle, old)
