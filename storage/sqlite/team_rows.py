"""This machine's side of team memory in SQLite: what to push, how far pushing and pulling have got, and
importing what other machines pushed.

**The outbox** is not a table: it is this machine's own rows (``origin_machine = ''``) of
shared projects above a cursor per table, those an export file brought excepted (provenance
``import``: another machine's or a backup's, and teammates would take them for this machine's
own; the machine that recorded them shares them), kept in ``team_cursors``. Prompts, observations
and summaries are read by row id (ids only grow, and the one writer commits them in
order: a reader that sees an id sees every smaller one); sessions by the order this
machine changed them (``team_session_changes``, schema version 8). A batch holds the
session record of each of its rows' sessions, ahead of them, so the team database always
knows a row's session. Rows are turned into :mod:`~sessionmem.storage.export_records` records,
and :class:`~sessionmem.storage.team_records.SharedRow` s by the caller: a session's
``cwd`` (a path of this machine) never leaves it, and the paths of this machine in the
records' texts are rewritten (:mod:`~sessionmem.storage.local_paths`). Whether a project is shared is the
caller's rule (``shared(project, project_key)``, :mod:`sessionmem.team.sharing`), asked again at each
read; rows of projects that are not are passed over, and the cursor with them: what was stored
while a project was not shared is not pushed later behind the user's back.

The cursor moves only once the team database has committed the batch
(:func:`advance`): a crash in between pushes the batch again, which the team database
takes as a no-op (its upserts are idempotent). The first start with team memory on
(:func:`start_outbox`) puts the cursors at the rows already stored: what was remembered
before is copied by ``sessionmem share push`` (a cursor per project, ``share:<project>``),
not pushed behind the user's back.

**Pulled rows** are imported (:func:`import_pulled`) with their origin and their
project's key, idempotently (the identity rules of :mod:`~sessionmem.storage.export_records`),
and the pull cursor moves in the same transaction: a crash either keeps both or neither.
A pulled row goes only into a project the pull asked for (:func:`lands_where_asked`).

Every function takes a connection: the writer's (in its transaction) for those that
write, a reader's for the others.

Error handling:
    SQL errors propagate as ``apsw`` exceptions.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Sequence
from typing import Literal

import apsw
import msgspec

from sessionmem.records import Provenance
from sessionmem.storage.export_records import ImportCounts, Record
from sessionmem.storage.local_paths import without_local_paths
from sessionmem.storage.sqlite import export_import
from sessionmem.storage.sqlite.export_import import PulledFrom
from sessionmem.storage.sqlite.values import all_rows, flag, integer, one_row, optional_row, text
from sessionmem.storage.team_records import NAME_KEY_PREFIX, PullCursor, SharedRow, shared_key

MACHINE_ID = "machine_id"  # this data dir's identity in the team database, made once
OUTBOX = "push"  # the outbox's cursor (an OutboxCursor)
VECTORS = "push.vectors"  # rows below it were pushed with their vectors (or the index has none to give)
PULL = "pull"  # the pull cursor (a PullCursor)
PULL_KEYS = "pull.keys"  # the project keys pulled so far (a list; null: every project)
SHARE_PREFIX = "share:"  # + a project's name: how far `sessionmem share push` has copied it

Shared = Callable[[str, str], bool]  # (project, project_key) -> whether its memory may leave this machine
Kind = Literal["session", "prompt", "observation", "summary"]


class OutboxCursor(msgspec.Struct, frozen=True, kw_only=True):
    """How far a push has got, by table: the largest row id pushed (sessions: the largest change seq of the
    outbox, the largest session id of a share push)."""

    session: int = 0
    prompt: int = 0
    observation: int = 0
    summary: int = 0


class OutboxRow(msgspec.Struct, frozen=True):
    record: Record  # a session's cwd is None
    project_key: str  # shared_key(): the project's identity between machines
    document: tuple[str, int] | None = None  # the row's key in the vector index (observations, summaries)


class OutboxBatch(msgspec.Struct, frozen=True):
    rows: list[OutboxRow]  # sessions first, then their rows
    after: OutboxCursor  # the cursor once ``rows`` are in the team database
    scanned: int  # rows read, shared or not: ``limit`` of them means there may be more

    @property
    def moved(self) -> bool:
        return self.scanned > 0


def encode(value: msgspec.Struct | list[str] | None) -> str:
    return msgspec.json.encode(value).decode()


def read_value(connection: apsw.Connection, name: str) -> str | None:
    row = optional_row(connection, "SELECT value FROM team_cursors WHERE name = ?", (name,))
    return None if row is None else text(row[0])


def read_outbox_cursor(connection: apsw.Connection, name: str) -> OutboxCursor:
    value = read_value(connection, name)
    return OutboxCursor() if value is None else msgspec.json.decode(value, type=OutboxCursor)


def read_pull_cursor(connection: apsw.Connection) -> PullCursor:
    value = read_value(connection, PULL)
    return PullCursor() if value is None else msgspec.json.decode(value, type=PullCursor)


def read_pull_keys(connection: apsw.Connection) -> list[str] | None:
    """The project keys pulled so far; ``None``: every project (``[]`` before the first pull)."""
    value = read_value(connection, PULL_KEYS)
    return [] if value is None else msgspec.json.decode(value, type=list[str] | None)


def _write(connection: apsw.Connection, name: str, value: str) -> None:
    connection.execute("INSERT INTO team_cursors (name, value) VALUES (?, ?)"
                       " ON CONFLICT (name) DO UPDATE SET value = excluded.value", (name, value))


def advance(connection: apsw.Connection, values: dict[str, str]) -> None:
    """Set cursors (by name, their encoded values); in the writer's transaction."""
    for name, value in values.items():
        _write(connection, name, value)


def newest(connection: apsw.Connection) -> OutboxCursor:
    """The cursor above every row stored so far."""
    (session,) = one_row(connection, "SELECT coalesce(max(seq), 0) FROM team_session_changes")
    maxima = [integer(one_row(connection, f"SELECT coalesce(max(id), 0) FROM {table}")[0])
              for table in ("user_prompts", "observations", "session_summaries")]
    return OutboxCursor(session=integer(session), prompt=maxima[0], observation=maxima[1], summary=maxima[2])


def start_outbox(connection: apsw.Connection) -> str:
    """This data dir's machine id, made at the first call; the outbox cursors too, above what is stored.

    In the writer's transaction. Idempotent: later calls change nothing.
    """
    machine_id = read_value(connection, MACHINE_ID)
    if machine_id is None:
        machine_id = str(uuid.uuid4())
        _write(connection, MACHINE_ID, machine_id)
    if read_value(connection, OUTBOX) is None:
        above = encode(newest(connection))
        _write(connection, OUTBOX, above)
        _write(connection, VECTORS, above)
    return machine_id


# -- reading the outbox -----------------------------------------------------------------------

_SESSION_COLUMNS = ("s.claude_session_id, s.project, NULL, s.first_prompt, s.status, s.created_at, s.updated_at,"
                    " s.completed_at, s.agent")


def read_outbox(connection: apsw.Connection, *, cursor: OutboxCursor, shared: Shared, limit: int,
                project: str | None = None, kinds: Sequence[Kind] = ("session", "prompt", "observation", "summary"),
                upto: OutboxCursor | None = None) -> OutboxBatch:
    """This machine's own rows of shared projects above ``cursor``, at most ``limit`` rows read in all.

    ``project``: only that project's (a share push: sessions by id, not by change);
    ``kinds``: only those tables; ``upto``: no row above it (a second pass over rows pushed
    before). Tables are read in the order of ``kinds``, each with what the earlier left of
    ``limit``. Rows passed over (another machine's, a project not shared) count as read:
    the cursor moves past them.
    """
    rows: list[OutboxRow] = []
    sessions: dict[int, bool] = {}  # the sessions the rows need, and whether one is in ``rows`` already
    after = msgspec.structs.asdict(cursor)
    ceiling = msgspec.structs.asdict(upto) if upto is not None else {}
    scanned = 0
    for kind in kinds:
        budget = limit - scanned
        if budget <= 0:
            break
        bindings = (after[kind], budget, project, ceiling.get(kind, 2**62))
        read = _read_sessions if kind == "session" else _read_rows
        found, last = read(connection, kind, bindings, shared, rows, sessions)
        scanned += found
        after[kind] = last or after[kind]
    missing = [session_db_id for session_db_id, present in sessions.items() if not present]
    if missing:
        rows[:0] = _sessions(connection, missing)
    return OutboxBatch(rows, OutboxCursor(**after), scanned)


_Bindings = tuple[int, int, str | None, int]  # (above, limit, project, at most)


def _read_sessions(connection: apsw.Connection, _kind: Kind, bindings: _Bindings, shared: Shared,
                   rows: list[OutboxRow], sessions: dict[int, bool]) -> tuple[int, int]:
    """Sessions changed (the outbox) or of a project by id (a share push) into ``rows``; (rows read, last)."""
    if bindings[2] is None:
        found = all_rows(connection, f"SELECT c.seq, s.id, s.cwd, s.share_file, s.project_key,"
                         f" {_SESSION_COLUMNS} FROM team_session_changes c JOIN sessions s ON s.id = c.session_db_id"
                         " WHERE c.seq > ?1 AND c.seq <= ?4 ORDER BY c.seq LIMIT ?2", bindings)
    else:
        found = all_rows(connection, f"SELECT s.id, s.id, s.cwd, s.share_file, s.project_key,"
                         f" {_SESSION_COLUMNS} FROM sessions s WHERE s.id > ?1 AND s.id <= ?4 AND s.project = ?3"
                         " ORDER BY s.id LIMIT ?2", bindings)
    for row in found:
        session = export_import.session_record(row[5:])
        # A session some other machine began (pulled: its cwd stays unknown here) goes along
        # with this machine's rows of it only.
        if row[2] is not None and shared(session.project, text(row[4])) and integer(row[1]) not in sessions:
            sessions[integer(row[1])] = True
            rows.append(OutboxRow(without_local_paths(session, cwd=text(row[2])),
                                  shared_key(text(row[4]), session.project)))
    return len(found), integer(found[-1][0]) if found else 0


# A row this machine may push: recorded here (no origin), not brought by an export file.
_OWN = f"(o.origin_machine = '' AND o.origin_user = '' AND o.provenance != '{Provenance.IMPORT.value}')"

_ROWS = {  # kind: (table, its columns as its record reads them)
    "prompt": ("user_prompts", "o.prompt_number, o.text, o.created_at, o.provenance, o.flagged"),
    "observation": ("observations", ", ".join(f"o.{c.strip()}" for c in export_import.OBSERVATION_COLUMNS.split(","))),
    "summary": ("session_summaries", ", ".join(f"o.{c.strip()}" for c in export_import.SUMMARY_COLUMNS.split(","))),
}


def _read_rows(connection: apsw.Connection, kind: Kind, bindings: _Bindings, shared: Shared,
               rows: list[OutboxRow], sessions: dict[int, bool]) -> tuple[int, int]:
    """Own prompts, observations or summaries of shared projects into ``rows``; (rows read, last id read)."""
    table, columns = _ROWS[kind]
    of_project = "" if bindings[2] is None else " AND o.project = ?3"  # then on the (project, id) index
    found = all_rows(
        connection,
        f"SELECT o.id, {_OWN}, s.id, s.claude_session_id, s.project,"
        f" s.share_file, s.project_key, s.cwd, {columns} FROM {table} o JOIN sessions s ON s.id = o.session_db_id"
        f" WHERE o.id > ?1 AND o.id <= ?4{of_project} ORDER BY o.id LIMIT ?2", bindings)
    for row in found:
        row_id, own, session_db_id, claude_id, project = (integer(row[0]), flag(row[1]), integer(row[2]),
                                                         text(row[3]), text(row[4]))
        if not own or not shared(project, text(row[6])):
            continue
        sessions.setdefault(session_db_id, False)
        key = shared_key(text(row[6]), project)
        cwd = text(row[7]) if row[7] is not None else None  # this machine's paths are rewritten out of the texts
        if kind == "prompt":
            rows.append(OutboxRow(without_local_paths(export_import.prompt_record(claude_id, row[8:]), cwd=cwd), key))
        elif kind == "observation":
            record = without_local_paths(export_import.observation_record(claude_id, row[8:]), cwd=cwd)
            rows.append(OutboxRow(record, key, ("observation", row_id)))
        else:
            record = without_local_paths(export_import.summary_record(claude_id, row[8:]), cwd=cwd)
            rows.append(OutboxRow(record, key, ("summary", row_id)))
    return len(found), integer(found[-1][0]) if found else 0


def _sessions(connection: apsw.Connection, session_db_ids: list[int]) -> list[OutboxRow]:
    """The session records of these sessions (their rows go in the same batch)."""
    found = all_rows(connection, f"SELECT s.project_key, s.cwd, {_SESSION_COLUMNS} FROM sessions s"
                     " WHERE s.id IN (SELECT value FROM json_each(?)) ORDER BY s.id",
                     (msgspec.json.encode(session_db_ids).decode(),))
    return [OutboxRow(without_local_paths(record := export_import.session_record(row[2:]),
                                          cwd=text(row[1]) if row[1] is not None else None),
                      shared_key(text(row[0]), record.project))
            for row in found]


def backlog(connection: apsw.Connection, *, cursor: OutboxCursor, shared: Shared) -> int:
    """Own rows of shared projects above ``cursor`` (prompts, observations, summaries): not pushed yet."""
    waiting = 0
    for table, after in (("user_prompts", cursor.prompt), ("observations", cursor.observation),
                         ("session_summaries", cursor.summary)):
        for project, project_key, count in all_rows(
                connection,
                f"SELECT s.project, s.project_key, count(*) FROM {table} o JOIN sessions s ON s.id = o.session_db_id"
                f" WHERE o.id > ? AND {_OWN} GROUP BY s.project, s.project_key",
                (after,)):
            if shared(text(project), text(project_key)):
                waiting += integer(count)
    return waiting


def project_keys(connection: apsw.Connection, project: str) -> list[str]:
    """The project keys the sessions of ``project`` here know it by (``""``: no remote); none: no such project."""
    return sorted(text(key) for (key,) in all_rows(
        connection, "SELECT DISTINCT project_key FROM sessions WHERE project = ?", (project,)))


def share_requests(connection: apsw.Connection) -> list[tuple[str, str]]:
    """``(project_key, project)`` of the sessions whose repository asks to share (the share file at its root)."""
    return [(text(key), text(project)) for key, project in all_rows(
        connection, "SELECT DISTINCT project_key, project FROM sessions WHERE share_file = 1"
        " ORDER BY project, project_key")]


# -- pulling ------------------------------------------------------------------------------------


def pull_keys(connection: apsw.Connection, share_projects: Sequence[str], approved: Collection[str] = ()) -> list[str]:
    """The project keys this machine pulls: of each project it names (by name, and by the key its sessions
    know it by), and those the user approved (keys already). A repository's share file adds none."""
    keys = {NAME_KEY_PREFIX + name for name in share_projects} | set(approved)
    for project_key, project in all_rows(
            connection, "SELECT project_key, project FROM sessions WHERE project IN (SELECT value FROM json_each(?))",
            (msgspec.json.encode(list(share_projects)).decode(),)):
        keys.add(shared_key(text(project_key), text(project)))
    return sorted(keys)


def local_project(connection: apsw.Connection, row: SharedRow, known: dict[str, str]) -> str:
    """The name this machine knows ``row``'s project by: the project of a session here with the same key
    (a repository cloned under another directory name), else the name it came with."""
    key = row.project_key
    if key not in known:
        if key.startswith(NAME_KEY_PREFIX):
            known[key] = key[len(NAME_KEY_PREFIX):]
        else:
            here = optional_row(connection, "SELECT project FROM sessions WHERE project_key = ? ORDER BY id LIMIT 1",
                                (key,))
            known[key] = text(here[0]) if here is not None else row.project or _project_of(row.record)
    return known[key]


def _project_of(record: Record) -> str:
    return getattr(record, "project", None) or "unknown"


class PulledImport(msgspec.Struct, frozen=True):
    counts: ImportCounts
    misplaced: list[SharedRow]  # rows that would land in a project this machine did not ask for: not stored


def import_pulled(connection: apsw.Connection, rows: Sequence[SharedRow], *, cursor: tuple[str, str] | None,
                  now: float, keys: Sequence[str] | None) -> PulledImport:
    """Store rows pulled from the team database (with their origin and project key) and set the cursor
    ``(name, encoded value)`` if given: one transaction, the writer's. Idempotent.

    ``keys``: the project keys the pull asked for (``None``: every project). A row is stored only
    in a project asked for (:func:`lands_where_asked`); the others are returned, not stored.
    """
    known: dict[str, str] = {}
    asked = None if keys is None else frozenset(keys)
    destinations: dict[str, bool] = {}
    kept: list[SharedRow] = []
    pulled_from: list[PulledFrom] = []
    misplaced: list[SharedRow] = []
    for row in rows:
        session = optional_row(connection, "SELECT project FROM sessions WHERE claude_session_id = ?",
                               (row.record.claude_session_id,))
        # A session already here keeps its project (resumed here, or pulled before).
        project = text(session[0]) if session is not None else local_project(connection, row, known)
        if asked is not None and not lands_where_asked(connection, row, project, asked, destinations):
            misplaced.append(row)
            continue
        key = "" if row.project_key.startswith(NAME_KEY_PREFIX) else row.project_key
        kept.append(row)
        pulled_from.append(PulledFrom(machine=row.origin.machine_shown(),
                                      user=row.origin.user, project_key=key, project=project))
    counts = export_import.import_records(connection, [row.record for row in kept], now, pulled_from)
    if cursor is not None:
        _write(connection, *cursor)
    return PulledImport(counts, misplaced)


def lands_where_asked(connection: apsw.Connection, row: SharedRow, project: str, asked: frozenset[str],
                      destinations: dict[str, bool]) -> bool:
    """Whether ``row``, pulled for ``asked`` (project keys), is stored in a project asked for: its key or its
    name is one asked for, and so is ``project``, the local project it would be stored in (by its session
    here, else by its key, else by its name). A row naming a shared project with the key, or the session,
    of a project this machine does not share goes nowhere. ``destinations``: a cache, by local project."""
    name = row.project or _project_of(row.record)
    if row.project_key not in asked and NAME_KEY_PREFIX + name not in asked:
        return False
    if project not in destinations:
        destinations[project] = NAME_KEY_PREFIX + project in asked or any(
            shared_key(project_key, project) in asked for project_key in project_keys(connection, project))
    return destinations[project]


def rows_above(connection: apsw.Connection, *, project: str, cursor: OutboxCursor) -> int:
    """The rows of ``project`` a share push has still to read above ``cursor`` (sessions by id)."""
    total = integer(one_row(connection, "SELECT count(*) FROM sessions WHERE project = ? AND id > ?",
                            (project, cursor.session))[0])
    for table, after in (("user_prompts", cursor.prompt), ("observations", cursor.observation),
                         ("session_summaries", cursor.summary)):
        total += integer(one_row(connection, f"SELECT count(*) FROM {table} WHERE project = ? AND id > ?",
                                 (project, after))[0])
    return total
