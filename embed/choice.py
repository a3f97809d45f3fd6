"""Which embedder the worker runs, by name (the ``embedder`` setting)."""

from __future__ import annotations

import logging

from sessionmem.embed.availability import missing_runtime
from sessionmem.embed.base import Embedder
from sessionmem.embed.isolated import IsolatedEmbedder
from sessionmem.embed.minilm import MiniLMEmbedder
from sessionmem.embed.none import NoEmbedder
from sessionmem.settings import EMBEDDERS

log = logging.getLogger(__name__)


def choose_embedder(name: str) -> Embedder:
    """A new, not yet loaded embedder: ``"minilm"`` (the default) or ``"none"`` (vectors off).

    ``"minilm"`` where its runtime is not installed (no onnxruntime wheel for this platform/Python)
    gives the ``none`` embedder, saying why (:mod:`sessionmem.embed.availability`; logged once here).
    Raises ``ValueError`` naming the choices for any other name.
    """
    match name:
        case "minilm":
            unavailable = missing_runtime()
            if unavailable:
                log.warning("embedder: %s", unavailable)
                return NoEmbedder(unavailable=unavailable)
            return MiniLMEmbedder()
        case "none":
            return NoEmbedder()
        case _:
            raise ValueError(f"unknown embedder {name!r}: choose one of {', '.join(map(repr, EMBEDDERS))}")


def background_embedder(embedder: Embedder) -> Embedder | None:
    """``embedder``'s model for background work, run by a child process at the lowest CPU priority
    (:class:`~sessionmem.embed.isolated.IsolatedEmbedder`); ``None`` when vectors are off."""
    return IsolatedEmbedder(embedder) if embedder.dimensions else None
