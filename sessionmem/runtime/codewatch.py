"""Notice that the ground moved under a running worker: its own code changed on disk (an
upgrade), or its data dir was deleted or replaced.

A worker runs for days. ``pip install -U sessionmem``, or a ``git pull`` of the checkout
it runs from, replaces its files under it, and it would go on running the old code --
the old redaction rules, say: an upgraded hook may send a secret that only the new rules
redact, and the old worker would store it verbatim -- and import later modules of the new
version beside the old ones.
Nothing else would tell: every version says 0.1.0.

So once the worker serves, :func:`wait_for_code_change` notes the files of the
sessionmem modules it has loaded, and looks at them again every ``interval_s``, with those
of modules loaded since. A file replaced (another inode), rewritten (size, modification
time) or gone is an upgrade. Once the files hold still for :data:`SETTLE_S`, the worker stops as SIGTERM stops it and starts
again from its own command line, with the new code (:mod:`sessionmem.cli.worker_commands`, ``serve``).

The data dir: a user who deletes ``~/.sessionmem`` to start afresh (or moves it) leaves
the worker writing to files that no path reaches any more. The hooks find no token in the
new directory, spool, and the worker would import that spool into its deleted database,
where every later session is lost. :class:`DataDirIdentity` tells the directory and
database the worker opened from what is at their paths now; the spool importer asks it
before each round, and :func:`wait_for_data_dir_change` makes the worker start again, as
for new code, on whatever is at the path now.

Resource handling:
    Each look stats the loaded module files on a worker thread (about ninety files: a fraction of a millisecond); the
    data dir's look is two stats.

Error handling:
    A file that cannot be stat'ed counts as gone, which is a change: a half-done upgrade
    makes the worker restart, and a restart that cannot import its code fails at start
    with its traceback in ``worker.stderr`` (the next SessionStart tries again).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path

import trio

SETTLE_S = 1.0  # a change counts once the files have not changed again for this long
Stamp = tuple[int, int, int] | None  # (inode, size, modification time in ns); None: gone


def loaded_code_files() -> tuple[str, ...]:
    """The source files of every sessionmem module loaded now, sorted."""
    # A copy first, taken at once under the GIL: a worker thread may import a module meanwhile, and
    # iterating the live dict then failed ("changed size during iteration", seen at a start).
    files = {file for name, module in sys.modules.copy().items()
             if (name == "sessionmem" or name.startswith("sessionmem."))
             and isinstance(file := getattr(module, "__file__", None), str) and file}
    return tuple(sorted(files))


def stamps(files: Iterable[str]) -> dict[str, Stamp]:
    """What each of ``files`` is on disk now."""
    found: dict[str, Stamp] = {}
    for path in files:
        try:
            status = os.stat(path)
        except OSError:
            found[path] = None
        else:
            found[path] = (status.st_ino, status.st_size, status.st_mtime_ns)
    return found


async def wait_for_code_change(interval_s: float) -> str:
    """Return (the path of the first file that changed) once a loaded module's file changed on disk."""
    known = await trio.to_thread.run_sync(stamps, loaded_code_files())
    while True:
        await trio.sleep(interval_s)
        now = await trio.to_thread.run_sync(stamps, {*known, *loaded_code_files()})
        changed = [path for path, stamp in known.items() if now[path] != stamp]
        if not changed:
            known = now  # modules loaded since (the warm-up's, a lazy import) are watched from here on
            continue
        # pip removes the old files, then writes the new ones: wait until they hold still, so that
        # the new start does not import half an upgrade.
        while True:
            await trio.sleep(SETTLE_S)
            settled, now = now, await trio.to_thread.run_sync(stamps, now)
            if now == settled:
                return changed[0]


class DataDirIdentity:
    """The data dir and database file a worker opened, told apart from what is at their paths later."""

    def __init__(self, data_dir: Path, database: Path) -> None:
        self._paths = (data_dir, database)
        self._opened = self._look()

    def _look(self) -> tuple[tuple[int, int] | None, ...]:
        found: list[tuple[int, int] | None] = []
        for path in self._paths:
            try:
                status = os.stat(path)
            except OSError:
                found.append(None)
            else:
                found.append((status.st_dev, status.st_ino))
        return tuple(found)

    def still_ours(self) -> bool:
        """Whether the data dir and database at their paths are those opened (not deleted, moved or replaced)."""
        return self._look() == self._opened


async def wait_for_data_dir_change(identity: DataDirIdentity, interval_s: float) -> None:
    """Return once ``identity``'s data dir or database is no longer at its path."""
    while await trio.to_thread.run_sync(identity.still_ours):
        await trio.sleep(interval_s)
