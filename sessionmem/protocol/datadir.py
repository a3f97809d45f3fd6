"""The data dir is private: the directory 0700, every file in it 0600. Standard library only.

Memory holds what a user's agent saw and did: other local users must not read it,
nor plant spool files or read the token. Every process of ours that creates files
there (the worker, hooks, commands) runs with umask 077 (:func:`private_umask`), and
the worker corrects what older versions or other tools left behind when it starts
(:func:`make_private`).

Error handling:
    :func:`make_private` corrects what it can and returns what it could not; it
    never raises for one file (a file owned by someone else, say).
"""

from __future__ import annotations

import os
import stat

from sessionmem.protocol import oskit

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def private_umask() -> None:
    """Files and directories this process creates from now on are its owner's only."""
    os.umask(0o077)


def write_private(path: str, data: bytes, *, append: bool = False, durable: bool = False) -> None:
    """Write (or append) ``data`` to ``path``, a file only its owner can read, whatever the umask.

    ``durable``: on the disk before this returns, not only in the page cache (:func:`.oskit.sync_file`)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(path, flags, PRIVATE_FILE)
    try:
        view = memoryview(data)
        while view:  # a nearly full disk writes part of it: the rest, or an error, never a short file
            written = os.write(fd, view)
            if written <= 0:
                raise OSError(28, "no space left on the device")
            view = view[written:]
        if durable:
            oskit.sync_file(fd)
    finally:
        os.close(fd)


def make_private(data_dir: str) -> list[str]:
    """Create ``data_dir`` (0700) if needed, and tighten what is in it; returns the paths it could not fix."""
    os.makedirs(data_dir, mode=PRIVATE_DIR, exist_ok=True)
    problems = []
    for root, dirs, files in os.walk(data_dir):
        for name, mode in [(root, PRIVATE_DIR)] + [(os.path.join(root, f), PRIVATE_FILE) for f in files]:
            try:
                current = os.lstat(name)
                if stat.S_ISLNK(current.st_mode):
                    continue  # not ours to change through a link
                if stat.S_IMODE(current.st_mode) & 0o077:
                    os.chmod(name, stat.S_IMODE(current.st_mode) & mode)
            except OSError as exc:
                problems.append(f"{name}: {exc}")
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
    return problems
