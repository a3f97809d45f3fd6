"""Connections to the team database: one writer and a few readers, off the Trio thread.

- The writer: one psycopg connection, owned by whichever worker thread holds its
  ``CapacityLimiter(1)`` (:meth:`TeamConnections.write`): a transaction begins and ends
  inside one synchronous function, never across an ``await``. It is opened lazily, at the
  first write (or the first read), which also applies the schema migrations
  (:mod:`sessionmem.storage.pg.schema`); a connection found lost is dropped and the next
  call opens another.
- The readers: at most ``readers`` connections, each lent to one worker thread at a
  time (:meth:`TeamConnections.read`), made when a read finds none idle and kept idle
  for the next. Not ``psycopg_pool``: its connections are made by background workers
  that retry with a growing backoff, so a read after a server restart waited out its
  timeout instead of connecting at once, and the error it got named no cause.

Nothing here fails because the database is down at start: :func:`TeamConnections` does
no I/O until a call needs it.

Over TCP a connection is secured unless its URL says otherwise (:data:`SECURE_DEFAULTS`:
``sslmode=verify-full`` against the system's root certificates, SCRAM required); a unix
socket needs none of it. :func:`transport` says how a URL is secured and how it weakens
the defaults, for the worker's log, ``GET /api/team`` and ``sessionmem doctor``.

Resource handling:
    :meth:`TeamConnections.aclose` closes the writer connection (waiting for a write in
    progress to finish: a write is never abandoned) and the idle read connections; a read
    abandoned by its cancelled caller closes its connection when it ends.

Error handling:
    A database that cannot be reached (within ``connect_timeout_s``), a connection lost
    or refused, a database of a newer schema, and one whose schema cannot be made (the
    user may not create the vector extension) all raise :class:`TeamUnavailable`. Its message never holds the password, nor the URL
    (:func:`~sessionmem.protocol.credentials.sanitized`), and it is raised ``from None`` so that no chained psycopg error
    carries them into a log. A write that finds its (older) connection lost is tried once
    more on a new one before giving up (every write of the team store is idempotent), and
    so is a read that finds its idle connection lost; a write the server rolled back (a
    deadlock, a serialization failure) is tried again on the same connection. Other
    SQL errors (a bug, a constraint) propagate unchanged.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import psycopg
import trio
from pgvector.psycopg import register_vector
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import TransactionStatus

from sessionmem.protocol.credentials import sanitized
from sessionmem.storage.pg.errors import TeamUnavailable
from sessionmem.storage.pg.schema import TeamSchemaTooNew, migrate

T = TypeVar("T")
Connection = psycopg.Connection[tuple[Any, ...]]

# What says the database is out of reach (OperationalError: refused, lost, shut down, timed
# out), or that a connection closed under us (InterfaceError).
CONNECTION_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError)
# Found dead in at most ~25 s over TCP when the network goes away mid-query (unless the URL
# says otherwise); libpq counts connect_timeout in whole seconds, at least 2.
_KEEPALIVES = {"keepalives": "1", "keepalives_idle": "10", "keepalives_interval": "5", "keepalives_count": "3"}
_ROLLBACK_ATTEMPTS = 5  # a write the server rolls back (deadlock, serialization) is tried this often


class ConnectionStatistics(msgspec.Struct, frozen=True, kw_only=True):
    connected: bool  # the writer connection is open
    connects: int  # writer connections opened
    failures: int  # calls that ended in TeamUnavailable
    last_error: str | None  # sanitized


class Transport(msgspec.Struct, frozen=True, kw_only=True):
    """How a team connection is secured: what the URL says, with :data:`SECURE_DEFAULTS` where it says nothing."""

    socket: bool  # a unix socket: no network between the two ends, nothing to encrypt or check
    sslmode: str  # libpq's, as used ("" over a socket)
    sslrootcert: str  # the authorities the server's certificate is checked against ("": libpq's default file)
    require_auth: str  # the authentication the server must ask for ("" over a socket)
    weaker: list[str]  # how the URL weakens the defaults, each in a sentence ([]: it does not)

    def describe(self) -> str:
        """``TLS (sslmode=verify-full, system root certificates), SCRAM required``, or ``unix socket``."""
        if self.socket:
            return "unix socket"
        roots = "system root certificates" if self.sslrootcert == "system" else (self.sslrootcert or "root.crt")
        checked = f", {roots}" if self.sslmode in ("verify-ca", "verify-full") else ""
        auth = "SCRAM required" if self.require_auth == "scram-sha-256" else f"require_auth={self.require_auth}"
        tls = {"disable": "no TLS", "allow": "TLS if the server insists", "prefer": "TLS if offered"}.get(
            self.sslmode, "TLS")
        return f"{tls} (sslmode={self.sslmode}{checked}), {auth}"


# A team connection to a TCP host, unless its URL says otherwise: TLS, the server's certificate checked
# against the system's root certificates and its host name (a machine in the middle cannot strip TLS or
# pose as the server: libpq's own default, ``prefer``, lets it), and SCRAM (the password never sent in
# clear or as an md5 hash a listener can replay). A URL that names any of these keeps its own, and is
# warned about (:func:`transport`) when it is weaker.
SECURE_DEFAULTS = {"sslmode": "verify-full", "sslrootcert": "system", "require_auth": "scram-sha-256"}
_WEAK_SSLMODES = {
    "disable": "sslmode=disable: nothing is encrypted; a machine in the middle reads and changes every row",
    "allow": "sslmode=allow: TLS only if the server insists; a machine in the middle can strip it",
    "prefer": "sslmode=prefer: a machine in the middle can strip TLS, and pose as the server",
    "require": "sslmode=require: encrypted, but the server's certificate is not checked: a machine in the middle "
               "can pose as the server",
    "verify-ca": "sslmode=verify-ca: the server's certificate is checked, not the host name it is issued to",
}


def _socket_only(parameters: dict[str, Any]) -> bool:
    """Whether libpq reaches the server by unix socket only: no ``hostaddr``, and every host a directory (or
    none: libpq's default socket). ``PGHOST`` and ``PGHOSTADDR`` count when the URL names no host."""
    hostaddr = parameters.get("hostaddr") or os.environ.get("PGHOSTADDR", "")
    hosts = str(parameters.get("host") or os.environ.get("PGHOST", ""))
    return not hostaddr and all(not host or host.startswith(("/", "@")) for host in hosts.split(","))


def _parameters(url: str) -> dict[str, Any]:
    try:
        return conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise TeamUnavailable(f"not a PostgreSQL URL: {sanitized(str(exc), url)}") from None


def _secured(given: dict[str, Any]) -> dict[str, str]:
    """The transport parameters :data:`SECURE_DEFAULTS` add to a TCP connection whose URL ``given`` lacks."""
    if _socket_only(given):
        return {}
    added = {"sslmode": SECURE_DEFAULTS["sslmode"], "require_auth": SECURE_DEFAULTS["require_auth"]}
    added = {name: value for name, value in added.items() if not given.get(name)}
    # The system's root certificates, unless a root certificate is named (the URL, PGSSLROOTCERT, or libpq's
    # own ~/.postgresql/root.crt); libpq takes "system" with verify-full only.
    named = given.get("sslrootcert") or os.environ.get("PGSSLROOTCERT") or (
        Path.home() / ".postgresql" / "root.crt").exists()
    if not named and (given.get("sslmode") or added.get("sslmode")) == "verify-full":
        added["sslrootcert"] = SECURE_DEFAULTS["sslrootcert"]
    return added


def transport(url: str) -> Transport:
    """How a team connection to ``url`` is secured, and how its URL weakens the defaults."""
    given = _parameters(url)
    if _socket_only(given):
        return Transport(socket=True, sslmode="", sslrootcert="", require_auth="", weaker=[])
    used = {**given, **_secured(given)}
    sslmode, require_auth = str(used["sslmode"]), str(used["require_auth"])
    weaker = [_WEAK_SSLMODES[sslmode]] if sslmode in _WEAK_SSLMODES else []
    if require_auth != SECURE_DEFAULTS["require_auth"]:
        weaker.append(f"require_auth={require_auth}: the server may be let to ask for less than SCRAM (the password "
                      "in clear or as an md5 hash, or nothing)")
    return Transport(socket=False, sslmode=sslmode, sslrootcert=str(used.get("sslrootcert") or ""),
                     require_auth=require_auth, weaker=weaker)


def connection_url(url: str, *, connect_timeout_s: float) -> str:
    """``url`` with a connect timeout and TCP keepalives, and over TCP the secure transport of
    :data:`SECURE_DEFAULTS`, each unless it sets its own."""
    parameters: dict[str, Any] = {**_KEEPALIVES, "connect_timeout": str(max(2, math.ceil(connect_timeout_s))),
                                  "application_name": "sessionmem"}
    given = _parameters(url)
    return make_conninfo(url, **{name: value for name, value in parameters.items() if name not in given},
                         **_secured(given))


class TeamConnections:
    """The writer connection and the read connections of one team database; see the module docstring."""

    def __init__(self, url: str, *, connect_timeout_s: float = 5.0, readers: int = 2) -> None:
        self._url = url
        self._conninfo = connection_url(url, connect_timeout_s=connect_timeout_s)
        self._writer: Connection | None = None  # touched only by the thread holding _write_limiter
        self._write_limiter = trio.CapacityLimiter(1)
        self._read_limiter = trio.CapacityLimiter(readers)
        self._readers = readers
        self._idle_readers: list[Connection] = []  # each lent to one thread at a time
        self._readers_lock = threading.Lock()
        self._closed = False  # no read connection is kept once set
        self._migrated = False
        self._connects = 0
        self._failures = 0
        self._last_error: str | None = None

    def statistics(self) -> ConnectionStatistics:
        writer = self._writer
        return ConnectionStatistics(connected=writer is not None and not writer.closed, connects=self._connects,
                                    failures=self._failures, last_error=self._last_error)

    async def write(self, fn: Callable[[Connection], T]) -> T:
        """``fn(connection)`` on the writer connection (autocommit), in a worker thread; ``fn`` makes its
        own transaction, and must be safe to run again (see the module docstring)."""
        return await trio.to_thread.run_sync(self._write_sync, fn, limiter=self._write_limiter)

    async def read(self, fn: Callable[[Connection], T]) -> T:
        """``fn(connection)`` on a read connection (autocommit), in a worker thread."""
        if not self._migrated:
            # Connects, and migrates an empty database. A caller under a deadline (a search) may
            # abandon it: its thread goes on holding the writer's limiter until it ends, so no
            # write overlaps it, and the connection it makes is kept for the next call.
            await trio.to_thread.run_sync(self._write_sync, _nothing, limiter=self._write_limiter,
                                          abandon_on_cancel=True)
        # A read may be abandoned when its caller is cancelled: its thread finishes it and
        # gives the connection back; nothing is written.
        return await trio.to_thread.run_sync(self._read_sync, fn, limiter=self._read_limiter, abandon_on_cancel=True)

    async def aclose(self) -> None:
        await trio.to_thread.run_sync(self._drop_writer, limiter=self._write_limiter)
        await trio.to_thread.run_sync(self._close_readers, limiter=self._read_limiter)

    # -- in worker threads ---------------------------------------------------------------

    def _write_sync(self, fn: Callable[[Connection], T]) -> T:
        rolled_back = 0
        renewed = False
        while True:
            fresh = self._writer is None or self._writer.closed
            try:
                return fn(self._writer_connection())
            except psycopg.errors.TransactionRollback as exc:
                # A deadlock or a serialization failure: the server rolled the transaction back,
                # the connection is sound; the same write again (a few times) will pass.
                rolled_back += 1
                if rolled_back >= _ROLLBACK_ATTEMPTS:
                    raise self._unavailable(str(exc)) from None
            except CONNECTION_ERRORS as exc:
                self._drop_writer()
                if fresh or renewed:
                    raise self._unavailable(str(exc)) from None
                # The connection was an old one, maybe broken by a server restart since: once
                # more, on a new one.
                renewed = True

    def _writer_connection(self) -> Connection:
        if self._writer is not None and not self._writer.closed:
            return self._writer
        connection = self._connect()
        try:
            try:
                migrate(connection)
            except TeamSchemaTooNew as exc:
                raise self._unavailable(str(exc)) from None
            except CONNECTION_ERRORS:
                raise
            except psycopg.Error as exc:
                # Not a fault of this call but of the database's set-up (no right to create the
                # vector extension or the tables): unusable until an administrator acts.
                raise self._unavailable(f"the team database cannot be set up: {exc}") from None
            register_vector(connection)
        except BaseException:
            connection.close()
            raise
        self._writer = connection
        self._migrated = True
        self._connects += 1
        self._last_error = None
        return connection

    def _connect(self) -> Connection:
        return psycopg.connect(self._conninfo, autocommit=True)

    def _drop_writer(self) -> None:
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.close()

    def _read_sync(self, fn: Callable[[Connection], T]) -> T:
        # Read connections are made when a read finds none idle, in the reading thread: an
        # error is the one of that attempt, at once (a pool growing in the background would
        # make a caller wait out its timeout, and retry with a backoff after a restart).
        with self._readers_lock:
            connection = self._idle_readers.pop() if self._idle_readers else None
        try:
            if connection is not None:
                try:
                    return self._lent(connection, fn)
                except CONNECTION_ERRORS:
                    pass  # an idle connection a restart broke: once more, anew
            connection = self._connect()
            # Every search is planned with its own words: a prepared statement's generic plan
            # knows neither how many rows a word matches nor which plan that calls for (a rare
            # word's bitmap, or a walk of the newest rows for a common one).
            connection.prepare_threshold = None
            register_vector(connection)
            return self._lent(connection, fn)
        except CONNECTION_ERRORS as exc:
            raise self._unavailable(str(exc)) from None

    def _lent(self, connection: Connection, fn: Callable[[Connection], T]) -> T:
        """``fn(connection)``, then the connection kept for the next read if it is sound, else closed."""
        try:
            return fn(connection)
        finally:
            sound = not connection.closed and connection.info.transaction_status == TransactionStatus.IDLE
            with self._readers_lock:
                keep = sound and not self._closed and len(self._idle_readers) < self._readers
                if keep:
                    self._idle_readers.append(connection)
            if not keep:
                connection.close()

    def _close_readers(self) -> None:
        with self._readers_lock:
            self._closed = True
            idle, self._idle_readers = self._idle_readers, []
        for connection in idle:
            connection.close()

    def _unavailable(self, message: str) -> TeamUnavailable:
        text = sanitized(sanitized(message.strip(), self._url), self._conninfo)
        self._failures += 1
        self._last_error = text
        return TeamUnavailable(text)


def _nothing(connection: Connection) -> None:
    """A write that only connects (and migrates)."""
