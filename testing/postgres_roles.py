"""A role that must give its password, on a test PostgreSQL (:mod:`.postgres`), as a team database's
role does on a real server.

The test server trusts every local connection (``initdb --auth=trust``): a wrong password
would pass. :func:`add_password_role` creates a role with a password and a database it
owns, and puts a ``pg_hba.conf`` line first that makes that role, and only it, authenticate
with SCRAM-SHA-256 (or another method) over the unix socket (which the TLS front,
:mod:`.tls_front`, also reaches). Other roles, the superuser of the fixtures included, keep their trust.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from sessionmem.testing.postgres import PostgresServer


def socket_path(url: str) -> Path:
    """The unix socket file of the server at ``url`` (a unix-socket URL)."""
    parameters = conninfo_to_dict(url)
    return Path(str(parameters["host"])) / f".s.PGSQL.{parameters.get('port') or 5432}"


def add_password_role(server: PostgresServer, *, role: str, password: str, database: str,
                      vector: bool = True, method: str = "scram-sha-256") -> str:
    """Create ``role`` (login, ``password``) and ``database`` owned by it, with the pgvector extension
    (``vector``); return the database's URL for ``role`` over the unix socket, without the password.
    ``method``: how the server asks for the password (``password``: in clear, as an old server might)."""
    with psycopg.connect(server.url, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(role),
                                                                             sql.Literal(password)))
        connection.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(database),
                                                                         sql.Identifier(role)))
        # pgvector is not a trusted extension: a superuser creates it, as on a managed server.
        if vector:
            with psycopg.connect(make_conninfo(server.url, dbname=database), autocommit=True) as owned:
                owned.execute("CREATE EXTENSION IF NOT EXISTS vector")
        hba = server.directory / "pg_hba.conf"
        hba.write_text(f"local all {role} {method}\n" + hba.read_text())
        connection.execute("SELECT pg_reload_conf()")
    host = conninfo_to_dict(server.url)["host"]
    url = f"postgresql://{role}@/{database}?host={host}"
    _wait_until_a_password_is_asked(url)
    return url


def _wait_until_a_password_is_asked(url: str, *, timeout: float = 10.0) -> None:
    """The postmaster reads ``pg_hba.conf`` again on the signal ``pg_reload_conf`` sends, a moment later."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            # No password, and a password file that is not there (libpq ignores it in silence).
            psycopg.connect(url, password="", passfile=os.path.join(os.sep, "nonexistent", "pgpass"),
                            connect_timeout=5).close()
        except psycopg.OperationalError:
            return  # "no password supplied": the line is in force
        if time.monotonic() > deadline:
            raise TimeoutError("pg_hba.conf was not reloaded")
        time.sleep(0.02)
