"""Whether the default embedder can run here, and if not, why: the words a user reads in ``doctor``.

The minilm embedder runs on onnxruntime and tokenizers. onnxruntime has no wheel for some
platforms sessionmem supports (an Intel Mac on Python 3.14: ``pyproject.toml``'s markers
install none there), so the package is simply absent. :func:`missing_runtime` finds that
out without importing anything (``importlib.util.find_spec``: a millisecond, nothing
loaded), and :func:`~sessionmem.embed.choice.choose_embedder` then runs the worker with
vectors off: searches by words alone, the index off, and this reason in ``/debug``
(``embedder.embedder.unavailable``), ``sessionmem status`` and ``sessionmem doctor``.

A package that is installed but cannot be imported (a broken install, a missing system
library) is found only when the model loads: :func:`cannot_load` words that case, and the
embedder raises :class:`~sessionmem.embed.base.EmbedderUnavailableError` with it.

Standard library only: ``doctor`` asks it without starting a worker.
"""

from __future__ import annotations

import importlib.util
import platform
import sys

# What the minilm embedder imports when it loads (embed/minilm.py), in the order it imports them.
RUNTIME = ("onnxruntime", "tokenizers")


def here() -> str:
    """This platform and Python, as a user would name them: ``macOS x86_64, Python 3.14``."""
    system = {"darwin": "macOS", "win32": "Windows", "linux": "Linux"}.get(sys.platform, sys.platform)
    return f"{system} {platform.machine()}, Python {sys.version_info.major}.{sys.version_info.minor}"


def missing_runtime(modules: tuple[str, ...] = RUNTIME) -> str:
    """``""`` when every module of ``modules`` is installed; else why semantic search is off (the first missing)."""
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent that fails to import; a module set to None in sys.modules
            found = False
        if not found:
            return (f"semantic search is off: {module} is not installed: it has no wheel for this platform/Python "
                    f"({here()}); words-only search")
    return ""


def cannot_load(module: str, error: BaseException) -> str:
    """Why semantic search is off when ``module`` is installed but importing it raised ``error``."""
    return (f"semantic search is off: {module} cannot be loaded on this platform/Python ({here()}): "
            f"{type(error).__name__}: {error}; words-only search")
