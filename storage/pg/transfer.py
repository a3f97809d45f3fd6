"""Shared rows into the team database and out of it: the upserts of a push and the reads of a pull.

Each function runs on a connection of :class:`~sessionmem.storage.pg.connections.TeamConnections`
(the writer for :func:`push_rows`, a reader for :func:`pull_rows`) in a worker thread,
and makes its own transactions. The conflict rule the upserts follow and the pull order
are stated in :mod:`sessionmem.storage.pg.store`.

A pull reads in two steps: where the next rows are and how many bytes of text each holds,
then the rows a batch can hold (:data:`PULL_BATCH_BYTES`); each is decoded as an import
decodes a record of an export file, and a row that does not decode is refused, by which
row it is and the rule it broke.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Collection, Sequence
from typing import Any

import msgspec
import numpy as np
from psycopg.types.json import Jsonb

from sessionmem.storage.export_records import ObservationRecord, PromptRecord, Record, SessionRecord, SummaryRecord
from sessionmem.storage.pg.connections import Connection
from sessionmem.storage.pg.schema import VECTOR_DIMENSIONS
from sessionmem.storage.team_records import NAME_KEY_PREFIX, PullCursor, SharedRow


class PushCounts(msgspec.Struct, frozen=True, kw_only=True):
    """What a push did to the team database."""

    inserted: int = 0  # rows it did not hold
    merged: int = 0  # sessions it held that the merge rule changed
    vectors: int = 0  # vectors given to rows it held without one
    unchanged: int = 0  # rows it held as they were (a push repeated)


def display_name(project_key: str) -> str:
    """The name a project is shown by: a remote's repository name, or the name of a project without one."""
    if project_key.startswith(NAME_KEY_PREFIX):
        return project_key[len(NAME_KEY_PREFIX):]
    return project_key.rstrip("/").rsplit("/", 1)[-1]


# -- push ---------------------------------------------------------------------------------

_ORIGIN_COLUMNS = "project_key, project, origin_machine_id, origin_machine, origin_user"

# The session merge (the conflict rule of :mod:`~sessionmem.storage.pg.store`), each column from the stored row ``s`` and the
# pushed one, EXCLUDED.
_MERGED = {
    "status": ("CASE WHEN 'completed' IN (s.status, EXCLUDED.status) THEN 'completed'"
               " WHEN 'failed' IN (s.status, EXCLUDED.status) THEN 'failed'"
               " WHEN 'active' IN (s.status, EXCLUDED.status) THEN 'active' ELSE 'initialized' END"),
    "created_at": "LEAST(s.created_at, EXCLUDED.created_at)",
    "updated_at": "GREATEST(s.updated_at, EXCLUDED.updated_at)",
    "completed_at": "GREATEST(s.completed_at, EXCLUDED.completed_at)",  # GREATEST skips NULLs
    "first_prompt": "COALESCE(NULLIF(s.first_prompt, ''), NULLIF(EXCLUDED.first_prompt, ''), s.first_prompt)",
}
# A session's agent is the one it was first pushed with (as a session here keeps its first event's): not merged.
_PUSH_SESSION = (
    "INSERT INTO sessions AS s (claude_session_id, first_prompt, status, created_at, updated_at, completed_at,"
    f" changed_by, agent, {_ORIGIN_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (claude_session_id) DO UPDATE SET "
    + ", ".join(f"{column} = {merged}" for column, merged in _MERGED.items())
    # A change is a new version of the row: pullers see it again, after it.
    + ", changed_by = EXCLUDED.changed_by, xid = pg_current_xact_id(), seq = nextval('row_seq')"
    f" WHERE ({', '.join('s.' + column for column in _MERGED)}) IS DISTINCT FROM ({', '.join(_MERGED.values())})"
    " RETURNING xmax = 0")
_PUSH_PROMPT = (
    f"INSERT INTO prompts (claude_session_id, prompt_number, text, created_at, {_ORIGIN_COLUMNS})"
    " VALUES (%s, %s, %s, %s, %s,"
    " COALESCE((SELECT project FROM sessions WHERE claude_session_id = %s), %s), %s, %s, %s)"
    " ON CONFLICT DO NOTHING RETURNING true")
# A vector is the one thing a row stored first may lack and a later push fill in (it is
# pushed without one when the local index was behind); it does not change what pullers read.
_FILL_VECTOR = ("DO UPDATE SET vector = EXCLUDED.vector, model = EXCLUDED.model"
                " WHERE {table}.vector IS NULL AND EXCLUDED.vector IS NOT NULL RETURNING xmax = 0")
_PUSH_OBSERVATION = (
    "INSERT INTO observations (claude_session_id, prompt_number, tool_name, tool_use_id, agent_id, agent_type, failed,"
    " type, title, subtitle, facts, narrative, concepts, files_read, files_modified, compressed, compressor,"
    f" compressor_model, created_at, vector, model, {_ORIGIN_COLUMNS}) VALUES ("
    + ", ".join(["%s"] * 26) + ") ON CONFLICT (claude_session_id, tool_use_id) "
    + _FILL_VECTOR.format(table="observations"))
_PUSH_SUMMARY = (
    "INSERT INTO summaries (claude_session_id, prompt_number, created_at, request, investigated, learned, completed,"
    f" next_steps, notes, compressed, compressor, compressor_model, vector, model, {_ORIGIN_COLUMNS}) VALUES ("
    + ", ".join(["%s"] * 19) + ") ON CONFLICT (claude_session_id, prompt_number, created_at) "
    + _FILL_VECTOR.format(table="summaries"))


def _vector(row: SharedRow) -> tuple[np.ndarray | None, str]:
    """The row's vector as pgvector takes it, and its model; none when it has another dimension
    than the column's (an embedder of another size: the row is shared without its vector)."""
    if row.vector is None or len(row.vector) != VECTOR_DIMENSIONS * 4:
        return None, ""
    return np.frombuffer(row.vector, dtype=np.float32), row.model


def _origin(row: SharedRow, project: str) -> tuple[str, str, str, str, str]:
    return row.project_key, project, row.origin.machine_id, row.origin.machine, row.origin.user


def _parameters(row: SharedRow, machine_id: str) -> tuple[str, tuple[Any, ...]]:
    """The statement pushing ``row`` and its parameters."""
    record = row.record
    if isinstance(record, SessionRecord):
        return _PUSH_SESSION, (
            record.claude_session_id, record.first_prompt, record.status, record.created_at, record.updated_at,
            record.completed_at, machine_id, record.agent, *_origin(row, record.project))
    if isinstance(record, PromptRecord):
        return _PUSH_PROMPT, (
            record.claude_session_id, record.prompt_number, record.text, record.created_at, row.project_key,
            record.claude_session_id, display_name(row.project_key), row.origin.machine_id, row.origin.machine,
            row.origin.user)
    vector, model = _vector(row)
    if isinstance(record, ObservationRecord):
        return _PUSH_OBSERVATION, (
            record.claude_session_id, record.prompt_number, record.tool_name, record.tool_use_id, record.agent_id,
            record.agent_type, record.failed, record.type, record.title, record.subtitle, Jsonb(record.facts),
            record.narrative, Jsonb(record.concepts), Jsonb(record.files_read), Jsonb(record.files_modified),
            record.compressed, record.compressor, record.model, record.created_at, vector, model,
            *_origin(row, record.project))
    return _PUSH_SUMMARY, (
        record.claude_session_id, record.prompt_number, record.created_at, record.request, record.investigated,
        record.learned, record.completed, record.next_steps, record.notes, record.compressed, record.compressor,
        record.model, vector, model, *_origin(row, record.project))


# The order a push writes its rows in: sessions before their rows.
_PUSH_ORDER = (_PUSH_SESSION, _PUSH_PROMPT, _PUSH_OBSERVATION, _PUSH_SUMMARY)


def _identity(row: SharedRow) -> tuple[Any, ...]:
    """The row's place in a push: its kind's (sessions first), then its identity."""
    record = row.record
    if isinstance(record, SessionRecord):
        return (0, record.claude_session_id)
    if isinstance(record, PromptRecord):
        return (1, record.claude_session_id, record.prompt_number)
    if isinstance(record, ObservationRecord):
        return (2, record.claude_session_id, record.tool_use_id)
    return (3, record.claude_session_id, record.prompt_number, record.created_at)


def push_rows(connection: Connection, rows: Sequence[SharedRow]) -> PushCounts:
    """Upsert ``rows`` in one transaction, sessions first, then prompts, observations and summaries (each
    kind in the order of its identity); see the conflict rule of :mod:`~sessionmem.storage.pg.store`."""
    by_statement: dict[str, list[tuple[Any, ...]]] = {statement: [] for statement in _PUSH_ORDER}
    # Each kind in the order of its identity: concurrent pushes of the same rows (one session
    # resumed on two machines) take their row locks in one order, and never deadlock.
    for row in sorted(rows, key=_identity):
        statement, parameters = _parameters(row, row.origin.machine_id)
        by_statement[statement].append(parameters)
    inserted = merged = vectors = unchanged = 0
    with connection.transaction(), connection.cursor() as cursor:
        for statement, batch in by_statement.items():
            if not batch:
                continue
            # One round trip for the batch (psycopg pipelines executemany), an answer per row.
            cursor.executemany(statement, batch, returning=True)
            while True:
                answer = cursor.fetchone()
                if answer is None:
                    unchanged += 1
                elif answer[0]:
                    inserted += 1
                elif statement is _PUSH_SESSION:
                    merged += 1
                else:
                    vectors += 1
                if not cursor.nextset():
                    break
    return PushCounts(inserted=inserted, merged=merged, vectors=vectors, unchanged=unchanged)


# -- pull ---------------------------------------------------------------------------------

# A pull batch holds at most this many bytes of text (and ``limit`` rows): at least one row, and a row
# larger than this is refused without being read (one 20 MB title is neither pulled nor kept).
PULL_BATCH_BYTES = 16 * 1024 * 1024
_SHOWN = 200  # characters of a refused row's session id and machine name kept to say which it was

# Each table's columns as (column, the record field it fills), in the record's own names.
_FIELDS: dict[str, tuple[type[Record], tuple[tuple[str, str], ...]]] = {
    "sessions": (SessionRecord, tuple((c, c) for c in (
        "claude_session_id", "project", "first_prompt", "status", "created_at", "updated_at", "completed_at",
        "agent"))),
    "prompts": (PromptRecord, tuple((c, c) for c in ("claude_session_id", "prompt_number", "text", "created_at"))),
    "observations": (ObservationRecord, (*((c, c) for c in (
        "claude_session_id", "project", "prompt_number", "tool_name", "tool_use_id", "type", "title", "created_at",
        "agent_id", "agent_type", "failed", "subtitle", "facts", "narrative", "concepts", "files_read",
        "files_modified", "compressed", "compressor")), ("compressor_model", "model"))),
    "summaries": (SummaryRecord, (*((c, c) for c in (
        "claude_session_id", "project", "prompt_number", "created_at", "request", "investigated", "learned",
        "completed", "next_steps", "notes", "compressed", "compressor")), ("compressor_model", "model"))),
}
_ORIGIN_READ = ("project_key", "project", "origin_machine_id", "origin_machine", "origin_user")
_JSON_COLUMNS = frozenset({"facts", "concepts", "files_read", "files_modified"})
_NOT_TEXT = frozenset({"prompt_number", "created_at", "updated_at", "completed_at", "failed", "compressed"})
# Who a puller leaves out: its own rows, and sessions it changed last.
_MINE = {"sessions": "changed_by", "prompts": "origin_machine_id", "observations": "origin_machine_id",
         "summaries": "origin_machine_id"}


def _size(table: str) -> str:
    """SQL: the bytes of a row's texts as a pull reads them."""
    columns = dict.fromkeys([*(column for column, _ in _FIELDS[table][1] if column not in _NOT_TEXT), *_ORIGIN_READ])
    return " + ".join(f"coalesce(octet_length({column}{'::text' if column in _JSON_COLUMNS else ''}), 0)"
                      for column in columns)


class RefusedRow(msgspec.Struct, frozen=True, kw_only=True):
    """A row of the team database a pull passed over, and why: which row it is, never what it holds."""

    table: str  # sessions, prompts, observations, summaries
    claude_session_id: str  # cut to a few hundred characters
    origin_machine: str  # cut, as well
    xid: int
    seq: int
    reason: str  # what broke a rule (msgspec's message, its path: the values left out)


class PullBatch(msgspec.Struct, frozen=True):
    """A pull's rows in pull order, the rows it refused, and the cursor after both."""

    rows: list[SharedRow]
    after: PullCursor
    refused: list[RefusedRow] = []


_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")  # a value a message quotes (an enum's, a tag's): not logged


def _reason(error: msgspec.ValidationError) -> str:
    return _QUOTED.sub("…", str(error))[:300]


# Each table's record tag and, in column order, the names its record's fields are encoded by.
_ENCODED: dict[str, tuple[Any, tuple[str, ...]]] = {
    table: (kind.__struct_config__.tag,
            tuple({f.name: f.encode_name for f in msgspec.structs.fields(kind)}[field] for _, field in fields))
    for table, (kind, fields) in _FIELDS.items()}


def _record_dict(table: str, values: Sequence[Any]) -> dict[str, Any]:
    tag, names = _ENCODED[table]
    return {**dict(zip(names, values, strict=True)), "kind": tag}


def _shared_row(table: str, found: Sequence[Any]) -> SharedRow:
    """A pulled row, decoded by the rules of an import (storage/record_rules.py); raises ValidationError."""
    project_key, project, machine_id, machine, user, *values = found
    return msgspec.convert({"record": _record_dict(table, values), "project_key": project_key, "project": project,
                            "origin": [machine_id, machine, user]}, SharedRow)


def pull_rows(connection: Connection, cursor: PullCursor, *, keys: Collection[str] | None, exclude_machine_id: str,
              limit: int) -> PullBatch:
    """The next rows after ``cursor`` in pull order (at most ``limit``, and :data:`PULL_BATCH_BYTES` of
    text), each decoded as an import decodes a record; see :mod:`~sessionmem.storage.pg.store`.

    A row that does not decode, or is larger than a batch (not read, then), is in ``refused``; the
    cursor moves past it all the same.
    """
    if limit <= 0:
        return PullBatch([], cursor)
    # One horizon for the four reads: every transaction below it has ended, so each read
    # (later, with a newer snapshot) sees all that committed below it.
    (horizon,) = connection.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text").fetchone() or ("0",)
    # A key "name:X" is also every row shown as project X, whatever its key: a project named in
    # share_projects comes to a machine that has no session of it yet (and so knows no key for it).
    key_list = None if keys is None else list(keys)
    # First where the next rows are and how large each is; then what the batch can hold, read.
    found: list[list[tuple[int, int, str, int, int]]] = []
    for table in _FIELDS:
        places = connection.execute(
            # Ordered by the columns (xid8), qualified: a bare "xid" would name the text of the select
            # list, in which '1000' sorts before '999' and a pull past it skips every row between.
            f"SELECT {table}.xid::text AS xid_text, seq, id, {_size(table)} FROM {table}"
            " WHERE (xid, seq) > (%s::xid8, %s) AND xid < %s::xid8 AND " + _MINE[table] + " <> %s"
            " AND (%s::text[] IS NULL OR project_key = ANY(%s::text[]) OR %s || project = ANY(%s::text[]))"
            f" ORDER BY {table}.xid, {table}.seq LIMIT %s",
            (str(cursor.xid), cursor.seq, horizon, exclude_machine_id, key_list, key_list, NAME_KEY_PREFIX, key_list,
             limit)).fetchall()
        found.append([(int(xid), seq, table, row_id, size) for xid, seq, row_id, size in places])
    taken: list[tuple[int, int, str, int, int]] = []
    size = 0
    for place in heapq.merge(*found, key=lambda item: (item[0], item[1])):
        row_size = place[4] if place[4] <= PULL_BATCH_BYTES else 0  # too large: refused, not read
        if len(taken) == limit or (taken and size + row_size > PULL_BATCH_BYTES):
            break
        taken.append(place)
        size += row_size
    if not taken:
        return PullBatch([], cursor)
    contents = _read(connection, taken)
    rows: list[SharedRow] = []
    refused: list[RefusedRow] = []
    for xid, seq, table, row_id, row_size in taken:
        if (table, row_id) not in contents:
            continue  # deleted since (by hand: nothing of sessionmem deletes a row)
        session, machine, content = contents[(table, row_id)]
        if content is None:
            reason = f"{row_size:,} bytes, more than a pull batch holds ({PULL_BATCH_BYTES:,})"
        else:
            try:
                rows.append(_shared_row(table, content))
                continue
            except msgspec.ValidationError as exc:
                reason = _reason(exc)
        refused.append(RefusedRow(table=table, claude_session_id=session, origin_machine=machine, xid=xid, seq=seq,
                                  reason=reason))
    return PullBatch(rows, PullCursor(taken[-1][0], taken[-1][1]), refused)


def _read(connection: Connection, taken: Sequence[tuple[int, int, str, int, int]]
          ) -> dict[tuple[str, int], tuple[str, str, Sequence[Any] | None]]:
    """Each taken row's session id and machine (cut), and its columns unless it is larger than a batch."""
    contents: dict[tuple[str, int], tuple[str, str, Sequence[Any] | None]] = {}
    for table, (_, fields) in _FIELDS.items():
        whole = [row_id for _, _, of, row_id, size in taken if of == table and size <= PULL_BATCH_BYTES]
        too_large = [row_id for _, _, of, row_id, size in taken if of == table and size > PULL_BATCH_BYTES]
        identity = f"id, left(claude_session_id, {_SHOWN}), left(origin_machine, {_SHOWN})"
        if whole:
            columns = ", ".join([*_ORIGIN_READ, *(column for column, _ in fields)])
            for row_id, session, machine, *content in connection.execute(
                    f"SELECT {identity}, {columns} FROM {table} WHERE id = ANY(%s)", (whole,)).fetchall():
                contents[(table, row_id)] = (session, machine, content)
        if too_large:
            for row_id, session, machine in connection.execute(
                    f"SELECT {identity} FROM {table} WHERE id = ANY(%s)", (too_large,)).fetchall():
                contents[(table, row_id)] = (session, machine, None)
    return contents
