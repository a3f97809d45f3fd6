"""What the team benches know of the team database's tables: how rows are copied in, and counted.

The columns are read from the catalog and filled by name (:func:`value_of`), converted to the
column's own type, so a column the bench does not know keeps its default; one it must fill and
cannot is an error naming it.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import psycopg
from psycopg.types.json import Jsonb

OBSERVATIONS = "observations"
SESSIONS = "sessions"
PROMPTS = "prompts"
SUMMARIES = "summaries"
# (Claude session id, tool use id) -> rows, over the team database's observations.
OBSERVATION_KEYS_SQL = "SELECT claude_session_id, tool_use_id, count(*) FROM observations GROUP BY 1, 2"
OBSERVATION_COUNT_SQL = "SELECT count(*) FROM observations"

MACHINE_ID = "00000000-0000-4000-8000-0000000bench"
ORIGIN = {"origin_machine_id": MACHINE_ID, "origin_machine": "bench", "origin_user": "bench",
          "changed_by": MACHINE_ID}


def columns(connection: psycopg.Connection[Any], table: str) -> list[tuple[str, str, bool]]:
    """(name, type, must be given) of ``table``'s columns that are not generated, in order."""
    return [(name, kind, required) for name, kind, required in connection.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod),"
        " a.attnotnull AND NOT a.atthasdef AND a.attidentity = ''"
        " FROM pg_attribute a WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped"
        " AND a.attgenerated = '' ORDER BY a.attnum", (table,)).fetchall()]


def _convert(value: Any, kind: str) -> Any:
    if value is None:
        return None
    if kind.startswith("timestamp"):
        return datetime.datetime.fromtimestamp(float(value), tz=datetime.timezone.utc)
    if kind == "jsonb" or kind == "json":
        return Jsonb(_as_list(value))
    if kind.endswith("[]"):
        return _as_list(value)
    if kind == "text" and isinstance(value, (list, tuple)):
        return json.dumps(list(value))
    return value


def _as_list(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return [value]
    return value


def _copy(connection: psycopg.Connection[Any], table: str, fields: Sequence[dict[str, Any]],
          vectors: np.ndarray | None, skip: Sequence[str] = ("id", "xid", "seq")) -> int:
    found = columns(connection, table)
    used = [(name, kind) for name, kind, _ in found if name not in skip and (
        name in fields[0] or name in ORIGIN or (kind.startswith("vector") and vectors is not None))]
    missing = [name for name, _, required in found if required and name not in dict(used) and name not in skip]
    if missing:
        raise SystemExit(f"team_schema: {table} needs {missing}, which the bench does not make")
    names = ", ".join(f'"{name}"' for name, _ in used)
    with connection.cursor() as cursor:
        with cursor.copy(f'COPY "{table}" ({names}) FROM STDIN (FORMAT BINARY)') as copy:
            copy.set_types([kind.split("(")[0] for _, kind in used])
            for n, row in enumerate(fields):
                values = []
                for name, kind in used:
                    if kind.startswith("vector"):
                        values.append(vectors[n] if vectors is not None else None)
                    elif name in row:
                        values.append(_convert(row[name], kind))
                    else:
                        values.append(ORIGIN[name])
                copy.write_row(values)
    return len(fields)


def load(connection: psycopg.Connection[Any], pool: Any, sessions: Sequence[tuple[str, int]], model: str,
         observation_rows: Callable[..., Iterator[tuple[list[dict[str, Any]], np.ndarray]]],
         turn_rows: Callable[..., tuple[list[dict[str, Any]], list[dict[str, Any]], np.ndarray]]) -> dict[str, int]:
    """Sessions, prompts, summaries (with vectors) and observations (with vectors) copied in; the counts."""
    from pgvector.psycopg import register_vector

    register_vector(connection)
    total = sum(size for _, size in sessions)
    session_rows = [{"claude_session_id": f"synthetic-{s}", "project": project, "project_key": f"name:{project}",
                     "status": "completed", "created_at": float(s), "updated_at": float(s),
                     "first_prompt": pool.prompts[s % len(pool.prompts)]} for s, (project, _) in enumerate(sessions)]
    _copy(connection, SESSIONS, session_rows, None)
    prompts, summaries, summary_vectors = turn_rows(pool, sessions)
    for row in prompts + summaries:
        row["project_key"] = f"name:{row['project']}"
    for row in summaries:
        row.update(compressed=True, compressor="offline", model=model)
    _copy(connection, PROMPTS, prompts, None)
    _copy(connection, SUMMARIES, summaries, summary_vectors)
    observations = 0
    for rows, vectors in observation_rows(pool, sessions):
        for row in rows:
            row.update(project_key=f"name:{row['project']}", model=model, failed=False, compressed=True,
                       compressor="offline")
        observations += _copy(connection, OBSERVATIONS, rows, vectors)
    assert observations == total
    return {"sessions": len(session_rows), "prompts": len(prompts), "summaries": len(summaries),
            "observations": observations}
