"""The consolidation pass's reads and writes (the rules are :mod:`sessionmem.storage.consolidation_rules`).

:func:`consolidate` takes the next observations after the pass's cursor, in the order they were stored,
and for each one: merges the previous near-duplicate of it into it, marks the earlier decisions about
the same thing superseded by it, and counts as used the memories its session had been handed that name
a file it read or changed; then moves the cursor past them. It runs on the writer's thread inside a
group commit, so a batch is consolidated whole or not at all, and a pass stopped anywhere (a crash, a
restart) resumes after the last batch committed. It reads what it compares from the database only, so
running it twice over the same rows (the writer retries a failed batch) writes the same.

Nothing here changes a memory's text: links and counts sit beside the observations, and search still
finds every row.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import apsw

from sessionmem.records import ObservationRow
from sessionmem.storage.consolidation_rules import (
    ConsolidationStep,
    Marks,
    Use,
    decision_may_supersede,
    duplicate_key,
    near_duplicate,
    same_subject,
)
from sessionmem.storage.sqlite.row_reads import observation_rows
from sessionmem.storage.sqlite.values import all_rows, integer, one_row, optional_integer, optional_row, to_json

CURSOR = "observations"
DECISIONS_COMPARED = 20  # a new decision is compared with its project's newest this many


def cursor(connection: apsw.Connection) -> int:
    found = optional_row(connection, "SELECT value FROM consolidation_cursor WHERE name = ?", (CURSOR,))
    return integer(found[0]) if found is not None else 0


def behind(connection: apsw.Connection, *, limit: int) -> tuple[int, list[str]]:
    """How many observations wait to be consolidated, and the sessions of the next ``limit`` of them
    (whose handed-over memories :func:`consolidate` is given). Observations are never deleted, so those
    after the cursor are the ids up to the largest."""
    after = cursor(connection)
    (newest,) = one_row(connection, "SELECT coalesce(max(id), 0) FROM observations")
    # CROSS JOIN: the next rows first, each one's session by its key (left to itself, SQLite may walk the
    # sessions and index the rows on the way).
    sessions = all_rows(
        connection, "SELECT DISTINCT s.claude_session_id FROM (SELECT session_db_id FROM observations WHERE id > ?"
        " ORDER BY id LIMIT ?) o CROSS JOIN sessions s ON s.id = o.session_db_id", (after, limit))
    return max(0, integer(newest) - after), [str(session) for (session,) in sessions]


def consolidate(connection: apsw.Connection, *, told: Mapping[str, Collection[int]], now: float,
                limit: int) -> ConsolidationStep:
    """Consolidate the next ``limit`` observations after the cursor; ``told``: for their sessions, the
    memories (observation ids) each was handed over in this worker's life."""
    after = cursor(connection)
    rows = observation_rows(connection, "o.id > :after ORDER BY o.id LIMIT :limit", {"after": after, "limit": limit})
    hidden: list[int] = []
    changed: set[int] = set()
    for row in rows:
        hidden += _merge_duplicate(connection, row, now)
        hidden += _supersede_decisions(connection, row, now)
    for claude_session_id, memories in told.items():
        mine = [row for row in rows if row.claude_session_id == claude_session_id and not row.origin]
        changed.update(_count_use(connection, claude_session_id, list(memories), mine))
    if rows:
        connection.execute("INSERT OR REPLACE INTO consolidation_cursor (name, value) VALUES (?, ?)",
                           (CURSOR, rows[-1].id))
    waiting, next_sessions = behind(connection, limit=limit)  # what the next batch's caller snapshots: no read of its own
    return ConsolidationStep(len(rows), hidden, uses(connection, changed), waiting, next_sessions)


def mark_fetched(connection: apsw.Connection, *, ids: Sequence[int], key: str) -> dict[int, Use]:
    """Memories fetched whole (MCP's ``get_observations``) were used: once each a ``key`` (a day)."""
    changed = [row_id for row_id in dict.fromkeys(ids) if _note(connection, "memory_used", key, row_id, "used")]
    return uses(connection, set(changed))


def hidden_ids(connection: apsw.Connection) -> set[int]:
    """Every observation merged into another or superseded: not handed over."""
    return {integer(row_id) for (row_id,) in all_rows(connection, "SELECT observation_id FROM observation_links")}


def uses(connection: apsw.Connection, ids: Collection[int] | None = None) -> dict[int, Use]:
    """The use counts of ``ids`` that have some (of every memory that has some: ``None``)."""
    if ids is None:
        found = all_rows(connection, "SELECT observation_id, told, used FROM observation_use")
    elif not ids:
        return {}
    else:
        found = all_rows(connection, "SELECT observation_id, told, used FROM observation_use"
                         " WHERE observation_id IN (SELECT value FROM json_each(?))", (to_json(sorted(ids)),))
    return {integer(row_id): Use(integer(told), integer(used)) for row_id, told, used in found}


def marks(connection: apsw.Connection, ids: Sequence[int]) -> dict[int, Marks]:
    """What consolidation says of each of ``ids`` that it says anything of."""
    wanted = to_json(list(ids))
    found: dict[int, dict[str, int]] = {}
    for row_id, kind, by_id in all_rows(
            connection, "SELECT l.observation_id, l.kind, coalesce(g.survivor, l.by_id) FROM observation_links l"
            " LEFT JOIN duplicate_groups g ON g.id = l.group_id"
            " WHERE l.observation_id IN (SELECT value FROM json_each(?))", (wanted,)):
        found.setdefault(integer(row_id), {})["duplicate_of" if kind == "duplicate" else "superseded_by"] = \
            integer(by_id)
    for survivor, merged in all_rows(
            connection, "SELECT survivor, sum(merged) FROM duplicate_groups"
            " WHERE survivor IN (SELECT value FROM json_each(?)) GROUP BY survivor", (wanted,)):
        found.setdefault(integer(survivor), {})["merged"] = integer(merged)
    for by_id, count in all_rows(
            connection, "SELECT by_id, count(*) FROM observation_links"
            " WHERE by_id IN (SELECT value FROM json_each(?)) GROUP BY by_id", (wanted,)):
        found.setdefault(integer(by_id), {})["supersedes"] = integer(count)
    for row_id, told, used in all_rows(
            connection, "SELECT observation_id, told, used FROM observation_use"
            " WHERE observation_id IN (SELECT value FROM json_each(?))", (wanted,)):
        found.setdefault(integer(row_id), {}).update(told=integer(told), used=integer(used))
    return {row_id: Marks(**fields) for row_id, fields in found.items()}


def _merge_duplicate(connection: apsw.Connection, row: ObservationRow, now: float) -> list[int]:
    """``row`` becomes the head of its key: when it is a near-duplicate of the head before it, that head is
    merged into their group, of which ``row`` is now the survivor (one row's update, however large the
    group); otherwise ``row`` starts afresh (the earlier group keeps its survivor)."""
    key = duplicate_key(row)
    if key is None:
        return []
    found = optional_row(connection, "SELECT observation_id, group_id FROM consolidation_heads"
                         " WHERE project = ? AND rule_key = ?", (row.project, key))
    group_id: int | None = None
    merged: list[int] = []
    head = observation_rows(connection, "o.id = :id", {"id": integer(found[0])}) if found is not None else []
    # (a head superseded meanwhile stays so, and row starts afresh)
    if found is not None and head and head[0].id != row.id and near_duplicate(row, head[0]) and optional_row(
            connection, "SELECT 1 FROM observation_links WHERE observation_id = ?", (head[0].id,)) is None:
        group_id = optional_integer(found[1])
        if group_id is None:
            connection.execute("INSERT INTO duplicate_groups (survivor, merged) VALUES (?, 1)", (row.id,))
            group_id = connection.last_insert_rowid()
        else:
            connection.execute("UPDATE duplicate_groups SET survivor = ?, merged = merged + 1 WHERE id = ?",
                               (row.id, group_id))
        connection.execute("INSERT INTO observation_links (observation_id, kind, group_id, linked_at)"
                           " VALUES (?, 'duplicate', ?, ?)", (head[0].id, group_id, now))
        merged = [head[0].id]
    connection.execute("INSERT OR REPLACE INTO consolidation_heads (project, rule_key, observation_id, group_id)"
                       " VALUES (?, ?, ?, ?)", (row.project, key, row.id, group_id))
    return merged


def _supersede_decisions(connection: apsw.Connection, row: ObservationRow, now: float) -> list[int]:
    """The earlier decisions of ``row``'s project about the same thing, superseded by it (a decision)."""
    if not decision_may_supersede(row):
        return []
    earlier = observation_rows(
        connection, "o.project = :project AND o.type = 'decision' AND o.id < :id AND o.flagged = 0"
        " AND NOT EXISTS (SELECT 1 FROM observation_links l WHERE l.observation_id = o.id)"
        " ORDER BY o.id DESC LIMIT :limit", {"project": row.project, "id": row.id, "limit": DECISIONS_COMPARED})
    superseded = []
    for decision in earlier:
        if decision_may_supersede(decision) and same_subject(row, decision):
            connection.execute("INSERT OR IGNORE INTO observation_links (observation_id, kind, by_id, linked_at)"
                               " VALUES (?, 'superseded', ?, ?)", (decision.id, row.id, now))
            if connection.changes():
                superseded.append(decision.id)
    return superseded


def _count_use(connection: apsw.Connection, claude_session_id: str, memories: list[int],
               rows: list[ObservationRow]) -> set[int]:
    """Count ``memories`` as told to ``claude_session_id`` (once a session), and as used by it when one of its
    ``rows`` read or changed a file they name; the memories whose counts changed."""
    if not rows or not memories:
        return set()
    changed = {row_id for row_id in memories if _note(connection, "memory_told", claude_session_id, row_id, "told")}
    touched = {path for row in rows for path in (*row.files_read, *row.files_modified)}
    if touched:
        for (row_id,) in all_rows(
                connection, "SELECT DISTINCT observation_id FROM observation_files"
                " WHERE observation_id IN (SELECT value FROM json_each(?)) AND path IN (SELECT value FROM json_each(?))",
                (to_json(memories), to_json(sorted(touched)))):
            if _note(connection, "memory_used", claude_session_id, integer(row_id), "used"):
                changed.add(integer(row_id))
    return changed


def _note(connection: apsw.Connection, table: str, key: str, row_id: int, column: str) -> bool:
    """Record that ``row_id`` was told or used (``table``) by ``key``, once; whether it is new."""
    connection.execute(f"INSERT OR IGNORE INTO {table} (claude_session_id, observation_id) VALUES (?, ?)",
                       (key, row_id))
    if not connection.changes():
        return False
    connection.execute(f"INSERT INTO observation_use (observation_id, {column}) VALUES (?, 1)"
                       f" ON CONFLICT (observation_id) DO UPDATE SET {column} = {column} + 1", (row_id,))
    return True
