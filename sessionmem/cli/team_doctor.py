"""``sessionmem doctor``'s checks of the team database, when ``database_url`` is set.

It connects as the worker does (:func:`sessionmem.storage.pg.store.open_team_store`) and
reports, each on one line that says what to fix: the connection (the server, its version
and the round trip, TLS, and a problem for each way database_url weakens the secure
transport of :mod:`sessionmem.storage.pg.connections`), the pgvector extension, the schema version against this code's,
the password file libpq would read, which projects are shared, and the running worker's
sync state (from its ``/debug`` JSON).

The database URL may hold a password: no line names the server but by
:func:`server_label` (``user@host:port/database``), and every message from the driver is
passed through :func:`~sessionmem.protocol.credentials.sanitized` before it is printed.

Error handling:
    Nothing here raises for a problem of the database: each one is a line reported as a
    problem, and doctor exits with status 1. psycopg is imported only here, only when
    ``database_url`` is set, so that doctor still runs when the driver is broken (that is a
    problem it reports).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sessionmem.protocol.credentials import sanitized
from sessionmem.settings import Settings

Report = Callable[[bool, str], None]
CONNECT_TIMEOUT_S = 5.0


def url_parameters(url: str) -> dict[str, str]:
    """libpq's reading of ``url`` (``{}`` if it cannot read it)."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        return {key: str(value) for key, value in conninfo_to_dict(url).items() if value is not None}
    except Exception:  # psycopg.ProgrammingError: the URL is reported as unreadable, without its text
        return {}


def server_label(url: str) -> str:
    """The server of ``url`` as a person names it, without the password: ``user@host:port/database``
    (a unix socket's directory stands for the host)."""
    parameters = url_parameters(url)
    if not parameters:
        return "the database_url (which libpq cannot read)"
    user = parameters.get("user", "")
    host = parameters.get("host") or parameters.get("hostaddr") or "localhost"
    port = parameters.get("port", "")
    database = parameters.get("dbname", "")
    return f"{user + '@' if user else ''}{host}{':' + port if port else ''}/{database}"


def password_file(url: str, environ: Mapping[str, str]) -> Path | None:
    """The password file libpq would read for ``url``: its ``passfile`` parameter, else ``PGPASSFILE``, else
    ``~/.pgpass``; None when libpq needs none (the password is in the URL or in ``PGPASSWORD``)."""
    parameters = url_parameters(url)
    if parameters.get("password") or environ.get("PGPASSWORD"):
        return None
    named = parameters.get("passfile") or environ.get("PGPASSFILE")
    if named:
        return Path(named).expanduser()
    home = environ.get("HOME")
    return Path(home) / ".pgpass" if home else None


def password_file_problem(url: str, environ: Mapping[str, str]) -> tuple[bool, str] | None:
    """Whether libpq can use the password file it would read (None: no password file is involved).

    libpq ignores a password file that its group or others may read or write (it prints a warning
    on stderr, which the worker's log does not show), and one that is not a regular file: the
    connection then fails with "no password supplied", which does not say why.
    """
    path = password_file(url, environ)
    if path is None:
        return None
    named = bool(url_parameters(url).get("passfile") or environ.get("PGPASSFILE"))
    try:
        mode = path.stat().st_mode
    except OSError:
        return (False, f"password file {path} (PGPASSFILE) does not exist") if named else None
    if not stat.S_ISREG(mode):
        return False, f"password file {path} is not a regular file: libpq ignores it"
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        return False, (f"password file {path} can be read by other users (mode {stat.S_IMODE(mode):04o}): libpq "
                       f"ignores it, so no password is sent (`chmod 600 {path}`)")
    return True, f"password file {path} (private to its owner)"


def check_team(settings: Settings, report: Report, debug: Callable[[], Any]) -> None:
    """Report on the team database of ``settings``; ``debug`` fetches the running worker's ``/debug`` JSON
    (or None)."""
    if not settings.database_url:
        report(True, "team memory off (database_url is not set)")
        return
    try:
        import psycopg  # noqa: F401  (the driver the worker needs: its absence is the problem to report)
    except ImportError as exc:
        report(False, f"team database: the PostgreSQL client cannot be loaded ({exc}); reinstall sessionmem")
        return
    url = settings.database_url
    label = server_label(url)
    passfile = password_file_problem(url, os.environ)
    if passfile is not None:
        report(*passfile)
    _check_connection(url, label, report)
    snapshot = debug()
    _report_sharing(settings, report, snapshot)
    _report_sync(snapshot, url, report)


def _check_connection(url: str, label: str, report: Report) -> None:
    """Connect as the worker would, read-only: no migration (the next worker does that), nothing written."""
    import psycopg

    from sessionmem.storage.pg.connections import connection_url, transport
    from sessionmem.storage.pg.errors import TeamUnavailable

    try:
        conninfo = connection_url(url, connect_timeout_s=CONNECT_TIMEOUT_S)
        secured = transport(url)
    except TeamUnavailable as exc:
        report(False, f"team database: {exc}")
        return
    for weaker in secured.weaker:
        report(False, f"team database {label}: database_url weakens the default transport (sslmode=verify-full "
                      f"against the system's root certificates, SCRAM required): {weaker}")
    try:
        with psycopg.connect(conninfo, autocommit=True) as connection:
            _check_server(connection, label, secured.sslmode, report)
    except psycopg.Error as exc:
        message = sanitized(sanitized(str(exc).strip(), url), conninfo).removeprefix("connection failed: ")
        report(False, f"team database {label}: cannot connect: {' '.join(message.split())}{_hint(message)}")


# What to do about libpq's usual failures, by a phrase of its message.
HINTS = (
    ("password authentication failed", "the password is wrong: check PGPASSWORD, the password file or the URL"),
    ("no password supplied", "the server asks for a password: set PGPASSWORD, or write it in a password file "
                             "of mode 0600 (~/.pgpass, PGPASSFILE)"),
    ("certificate verify failed", "the server's certificate is not signed by a root certificate this machine "
                                  "trusts: check sslrootcert (or ~/.postgresql/root.crt)"),
    ("does not match host name", "the server's certificate names another host: connect by the name it names"),
    ("server does not support SSL", "the server does not offer TLS, which team connections require by default: "
                                    "enable TLS on the server, or weaken sslmode in the URL knowingly"),
    ("server requested a cleartext password", "the server asks for the password in clear, and team connections "
                                              "require SCRAM: set password_encryption and pg_hba.conf to "
                                              "scram-sha-256 on the server"),
    ("server requested a hashed password", "the server asks for an md5 hash of the password, and team connections "
                                           "require SCRAM: set pg_hba.conf to scram-sha-256 on the server"),
    ("timeout expired", f"no answer within {CONNECT_TIMEOUT_S:g} s: is the host right, or a firewall in the way?"),
    ("could not translate host name", "the host name does not resolve"),
    ("does not exist", "create it, or correct the URL"),
)


def _hint(message: str) -> str:
    return next((f" ({hint})" for phrase, hint in HINTS if phrase in message), "")


def _check_server(connection: Any, label: str, sslmode: str, report: Report) -> None:
    from sessionmem.storage.pg.schema import LATEST, schema_version

    started = time.perf_counter()
    connection.execute("SELECT 1").fetchone()
    round_trip_ms = (time.perf_counter() - started) * 1000
    version = connection.execute("SHOW server_version").fetchone()[0].split()[0]
    if connection.pgconn.ssl_in_use:
        security = f"TLS, sslmode={sslmode}"
        if sslmode not in ("verify-full", "verify-ca"):
            security += ": the server's certificate is not checked (sslmode=verify-full checks it)"
    elif connection.info.host.startswith("/"):
        security = "unix socket"
    else:
        security = "not encrypted (sslmode=verify-full encrypts, and checks the server)"
    report(True, f"team database {label}: PostgreSQL {version}, {security}, round trip {round_trip_ms:.1f} ms")
    installed = connection.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    if installed is not None:
        report(True, f"pgvector {installed[0]}")
    else:
        available = connection.execute(
            "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'").fetchone()
        superuser = connection.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
        database = connection.info.dbname
        if available is None:
            report(False, "pgvector is not installed on the server: install it (github.com/pgvector/pgvector), "
                          f"then `CREATE EXTENSION vector;` in database {database}")
        elif superuser is not None and superuser[0]:
            report(True, f"pgvector {available[0]} available: the first worker to connect creates it")
        else:
            report(False, f"pgvector {available[0]} is available but not created in database {database}, and only "
                          f"a superuser can create it: have one run `CREATE EXTENSION vector;` there")
    schema = schema_version(connection)
    if schema > LATEST:
        report(False, f"team schema version {schema} is newer than this sessionmem's ({LATEST}): a newer sessionmem "
                      f"upgraded it, and this one neither pushes nor pulls until it is upgraded too")
    elif schema == LATEST:
        report(True, f"team schema version {schema} (this sessionmem's)")
    elif schema == 0:
        report(True, f"team schema not created yet: the first worker to connect creates it (version {LATEST})")
    else:
        report(True, f"team schema version {schema}: the next worker to connect upgrades it to {LATEST}")


def _report_sharing(settings: Settings, report: Report, snapshot: Any) -> None:
    """What is shared and why: ``share_projects``, the user's answers in the data dir, and (from the running
    worker) the repositories that ask to share and are not approved."""
    from sessionmem.team.consent import ConsentUnreadable, consent_path, database_label, read_consent
    from sessionmem.team.sharing import describe, sharing_list

    database = database_label(settings.database_url)
    try:
        answers = read_consent(consent_path(settings.data_dir)).answers(database)
    except ConsentUnreadable as exc:
        report(False, str(exc))
        answers = []
    team = snapshot.get("team") if isinstance(snapshot, dict) else None
    requests = [(str(entry.get("projectKey", "")), str(entry.get("project", "")))
                for entry in (team or {}).get("sharing") or [] if entry.get("reason") == "requested"]
    entries = sharing_list(settings.share_projects, answers, requests)
    if not any(entry.shared for entry in entries):
        report(True, "sharing: nothing (share_projects is empty and no repository is approved on this machine)")
    for entry in entries:
        report(True, f"sharing: {describe(entry)}")


def _report_sync(snapshot: Any, url: str, report: Report) -> None:
    """The running worker's sync state, from its ``/debug`` JSON (nothing when no worker runs)."""
    if not isinstance(snapshot, dict):
        return
    team = snapshot.get("team")
    if not isinstance(team, dict):
        report(False, "the running worker does not sync with the team database: it started before database_url "
                      "was set (`sessionmem stop`; the next session starts it with the setting)")
        return
    where = f"as {team.get('machine')} ({team.get('user')})"
    counts = (f"{team.get('pushed', 0):,} pushed, {team.get('pulled', 0):,} pulled since start, "
              f"{team.get('backlog', 0):,} waiting to be pushed")
    error = sanitized(str(team.get("lastError") or ""), url)
    if team.get("connected"):
        report(True, f"worker's team sync: connected {where}; {counts}")
    elif error:
        report(False, f"worker's team sync: not connected {where} ({error}); {counts}; it tries again, at least "
                      f"every 30 s")
    else:
        report(True, f"worker's team sync: not connected yet {where}; {counts}")
