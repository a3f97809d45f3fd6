"""Faults on demand, for tests: a disk that fills up.

:class:`FullDisk` registers an APSW VFS -- the layer SQLite does its file I/O through
-- as the process's default. It passes everything to the real one (``unix``) until
:meth:`FullDisk.fill` is called; from then on every write and every growth of a file
fails with ``SQLITE_FULL``, as on a disk with no space left, until :meth:`FullDisk.free`.
Connections opened while it is registered use it (in this process only).

Resource handling:
    A context manager: leaving it unregisters the VFS. Use it around the worker, so
    that the worker's connections are opened through it.
"""

from __future__ import annotations

import apsw

REAL_VFS = "unix"


class _File(apsw.VFSFile):
    def __init__(self, disk: FullDisk, name: str | None, flags: list[int]) -> None:
        super().__init__(REAL_VFS, name, flags)
        self._disk = disk

    def xWrite(self, data: bytes, offset: int) -> None:  # noqa: N802 (APSW's names)
        if self._disk.full:
            self._disk.refused_writes += 1
            raise apsw.FullError("database or disk is full (simulated)")
        super().xWrite(data, offset)

    def xTruncate(self, size: int) -> None:  # noqa: N802
        if self._disk.full and size > self.xFileSize():
            raise apsw.FullError("database or disk is full (simulated)")
        super().xTruncate(size)


class FullDisk(apsw.VFS):
    def __init__(self, name: str = "sessionmem-full-disk") -> None:
        super().__init__(name, REAL_VFS, makedefault=True)
        self.name = name
        self.full = False
        self.refused_writes = 0

    def xOpen(self, name: str | apsw.URIFilename | None, flags: list[int]) -> _File:  # noqa: N802
        return _File(self, name if isinstance(name, str) or name is None else name.filename(), flags)

    def fill(self) -> None:
        self.full = True

    def free(self) -> None:
        self.full = False

    def __enter__(self) -> FullDisk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.full = False
        self.unregister()
