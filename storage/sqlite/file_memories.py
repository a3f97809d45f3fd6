"""File memories of the SQLite store: what the memory holds about a file a session is using, answered
on PostToolUse of that file, and :func:`recalled_as`, the same rule in Python for the rows kept in
memory (:mod:`sessionmem.storage.sqlite.file_memory_cache`).

Each reading function takes a read connection and runs on a reader thread (file recall's
are gathered: :class:`~sessionmem.storage.sqlite.readers.ReadGatherer`); the SQLite store's async
methods wrap them.

Error handling:
    A file nothing is known about has no memories; SQL errors propagate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import apsw
import msgspec

from sessionmem.records import CompressedObservation, FileMemory
from sessionmem.settings import Backend
from sessionmem.storage.search_terms import file_params
from sessionmem.storage.sqlite.fulltext import basename_collation, file_matches
from sessionmem.storage.sqlite.origins import label_sql
from sessionmem.storage.sqlite.values import one_row, text

# How many of a file's newest uses (by whole path, and again by path end) file recall
# looks at: its cost is bounded by this, not by how much the project has stored.
FILE_LOOKBACK = 200


def recallable_files(observation: CompressedObservation) -> tuple[str, ...]:
    """The files whose :func:`file_memories` can answer with ``observation`` (the rule of its ``HAVING``):
    an offline compressor's mere read of a file is never recalled for that file."""
    if observation.type == "discovery" and observation.compressor == Backend.OFFLINE:
        return observation.files_modified
    return (*observation.files_read, *observation.files_modified)


def recalled_as(asked: str, observation: CompressedObservation, *, fold_case: bool = False) -> bool | None:
    """What :func:`file_memory_rows` says of a stored ``observation`` for a lookup of ``asked``: ``None``
    when it is not among the rows, else whether it modified the file (its ``modified``)."""
    if not file_matches(asked, recallable_files(observation), fold_case=fold_case):
        return None
    return file_matches(asked, observation.files_modified, fold_case=fold_case)


def file_memories(connection: apsw.Connection, project: str, path: str, *, exclude_session: str,
                  limit: int, lookback: int = FILE_LOOKBACK, fold_case: bool = False) -> list[FileMemory]:
    """The newest observations of ``project`` about ``path`` from other sessions than ``exclude_session``,
    one per title, those that modified it first, among the file's newest ``lookback`` uses.

    An observation the offline compressor made of a mere read ("Read src/app.py",
    its line count) says nothing worth recalling and is left out; an LLM's
    observation of a read (what was learned) is kept.

    :func:`file_memory_rows` reads, :func:`choose_file_memories` chooses; the worker keeps
    the rows of every session and chooses for each asking session
    (:class:`~sessionmem.storage.sqlite.file_memory_cache.FileRecallCache`).
    """
    rows = file_memory_rows(connection, project, path, exclude_session=exclude_session, most=limit * 4,
                            lookback=lookback, fold_case=fold_case)
    return choose_file_memories(rows, exclude_session, limit)


_file_rows = msgspec.json.Decoder(
    list[tuple[int, str, float, str, str, str, list[str] | None, int, str, str, int, str]])


def file_memory_rows(connection: apsw.Connection, project: str, path: str, *, exclude_session: str | None,
                     most: int, lookback: int = FILE_LOOKBACK, fold_case: bool = False) -> list[FileMemory]:
    """The newest ``most`` observations of ``project`` that :func:`file_memories` may answer with for
    ``path``, newest first: of every session but ``exclude_session`` (of every session when ``None``).

    It runs on PostToolUse of a file, before the hook's answer, so its cost must not
    grow with the memory: the file's rows in ``observation_files`` drive it (newest first,
    at most ``lookback`` by each index), and only their observations are read. CROSS JOIN
    keeps that order: left to itself SQLite would walk every observation of the project
    (``observations_project``) and look each one up in ``observation_files``, a cost that
    grows with the project.

    ``fold_case`` (a disk that ignores case): the file's name matches in any ASCII case too, so
    ``/users/me/proj/readme.md`` finds what was stored of ``/Users/me/Proj/README.md``, whichever
    spelling each was stored under, through the store's ``NOCASE`` index of names
    (:data:`~sessionmem.storage.sqlite.fulltext.BASENAME_NOCASE_INDEX`).
    """
    params: dict[str, Any] = {**file_params(path), "project": project, "session": exclude_session,
                              "most": most, "lookback": lookback}
    # The rows as one JSON value, one step: every row SQLite hands back gives up the GIL and
    # waits to take it back from a busy Trio thread.
    (found,) = one_row(
        connection,
        "SELECT json_group_array(json_array(id, session, created_at, type, title, subtitle, json(facts), modified,"
        " origin, provenance, flagged, agent))"
        " FROM (WITH touches (observation_id, modified) AS ("
        "  SELECT * FROM (SELECT observation_id, modified FROM observation_files WHERE path = :file"
        "                 ORDER BY observation_id DESC LIMIT :lookback)"
        "  UNION ALL"
        "  SELECT * FROM (SELECT observation_id, modified FROM observation_files"
        f"                 WHERE basename = :file_base{basename_collation(fold_case)}"
        "                 AND path LIKE :file_suffix ESCAPE '\\'"
        "                 ORDER BY observation_id DESC LIMIT :lookback))"
        " SELECT o.id, s.claude_session_id AS session, o.created_at, o.type, o.title, o.subtitle, o.facts,"
        f"        max(t.modified) AS modified, {label_sql('o')} AS origin, o.provenance, o.flagged, s.agent"
        " FROM touches t CROSS JOIN observations o ON o.id = t.observation_id"
        " CROSS JOIN sessions s ON s.id = o.session_db_id"
        " WHERE o.project = :project AND (:session IS NULL OR s.claude_session_id != :session)"
        # (recallable_files says which stores can change an answer: keep the two alike)
        " GROUP BY o.id HAVING max(t.modified) = 1 OR o.type != 'discovery' OR o.compressor != 'offline'"
        " ORDER BY o.id DESC LIMIT :most)", params)
    memories = [FileMemory(id=row_id, claude_session_id=session, created_at=at, type=type_, title=title,
                           subtitle=subtitle, facts=facts or [], modified=bool(modified), origin=origin,
                           provenance=provenance, flagged=bool(flagged), agent=agent)
                for row_id, session, at, type_, title, subtitle, facts, modified, origin, provenance, flagged, agent
                in _file_rows.decode(text(found))]
    memories.sort(key=lambda memory: -memory.id)  # (an aggregate's order is SQLite's to choose)
    return memories


def choose_file_memories(rows: Sequence[FileMemory], exclude_session: str, limit: int) -> list[FileMemory]:
    """What :func:`file_memories` answers, from :func:`file_memory_rows` (newest first): the newest
    ``limit * 4`` of other sessions, one per title, those that modified the file first."""
    seen: set[str] = set()
    memories: list[FileMemory] = []
    for memory in [row for row in rows if row.claude_session_id != exclude_session][: limit * 4]:
        if memory.title not in seen:
            seen.add(memory.title)
            memories.append(memory)
    memories.sort(key=lambda memory: (not memory.modified, -memory.id))
    return memories[:limit]
