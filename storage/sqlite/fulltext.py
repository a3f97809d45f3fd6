"""Full-text search of the SQLite store: a query's terms, FTS5 matching and ranking, and the
filters a search or a vector candidate must pass (project, time, session, origin, agent, type, file,
concept).

Each function takes a read connection and runs on a reader thread
(:class:`~sessionmem.storage.sqlite.readers.ReaderPool`); the SQLite store's async methods
wrap them. Three kinds of document are searchable (``sessionmem.records.DOCUMENT_KINDS``),
each from its own table and full-text table (:data:`TABLES`).

User text never reaches FTS5's query language: :func:`~sessionmem.storage.search_terms.query_terms` keeps the words
of a query (letters and digits, any script) and drops the rest (quotes, ``*``,
``NEAR(``, ``AND``/``OR``, ``col:``), each as a quoted string. A search someone typed
asks first for documents holding all of them; any search asks for documents holding
any of them, so bm25 ranks documents with more and rarer words first -- the rarer
ones only, when common words would make it slow (:func:`affordable_match`).

Error handling:
    Nothing a user can type raises here: a query without words finds nothing. SQL
    errors (a broken database) propagate.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import apsw
import numpy as np

from sessionmem.records import (
    OBSERVATION,
    PROMPT,
    SUMMARY,
    RankedKey,
    SearchFilters,
)
from sessionmem.storage.base import RowIds
from sessionmem.storage.search_terms import file_name, file_params
from sessionmem.storage.sqlite.agents import agent_condition
from sessionmem.storage.sqlite.origins import origin_condition
from sessionmem.storage.sqlite.values import all_rows, integer, one_row, real, to_json

# Full-text search costs what the rows its terms match cost: FTS5 scores and sorts every
# one, and in a large store a query of common words matches a good part of it.
# A query keeps its rarer terms while their rows together stay within this budget
# (affordable_match), and those rows are ranked in the full-text table alone: the best
# RANK_FIRST x limit of them are checked against the filters. When too few pass, the
# matches are ranked again joined to their rows, filters in SQL: bm25 then scores only
# the rows that pass.
MATCH_BUDGET = 4000
RANK_FIRST = 2
# A project holding less than this share of a kind's rows is ranked joined to its rows
# from the start: fewer than ``limit`` of the best RANK_FIRST x limit matches would be
# its own, on average, so ranking every match first would mostly be followed by the
# joined ranking anyway (and the join scores only the project's rows: at 100,000
# observations, 2x less CPU for a project of 7.5 % or 1 %; bench/search_latency.py).
RANK_FIRST_SHARE = 1 / RANK_FIRST
# A project with at most this many rows of a kind, searched by its project alone, has its
# matches checked against the list of its rows (built once per query) rather than each
# looked up in the project's index: at 100,000 observations, 1,000 rows listed take 0.6
# of the CPU of the lookups, 7,500 twice as much (bench/search_latency.py).
LISTED_ROWS = 2000

# Per kind: its table, full-text table and bm25 column weights, and the SQL naming its
# project, creation time and Claude session. Observation titles weigh most.
TABLES = {
    OBSERVATION: ("observations", "observations_fts", "4.0, 2.0, 1.0, 1.0, 0.5"),
    SUMMARY: ("session_summaries", "summaries_fts", "2.0, 1.0, 1.5, 1.5, 1.0, 0.5"),
    PROMPT: ("user_prompts", "prompts_fts", "1.0"),
}
ALIASES = {OBSERVATION: "o", SUMMARY: "m", PROMPT: "p"}
PROJECT_COLUMNS = {OBSERVATION: "o.project", SUMMARY: "m.project", PROMPT: "p.project"}


def _filter_sql(kind: str, filters: SearchFilters, params: dict[str, Any]) -> tuple[str, str]:
    """(joins, conditions) restricting rows of ``kind`` (aliased as in ``ALIASES``) to ``filters``."""
    alias = ALIASES[kind]
    # A row is joined to its session only when a filter needs it, and never the other way
    # (CROSS JOIN: left to choose, the planner may walk every session of a project first).
    needs_session = filters.claude_session_id is not None
    joins = f" CROSS JOIN sessions s ON s.id = {alias}.session_db_id" if needs_session else ""
    conditions: list[str] = []
    if filters.project is not None:
        params["project"] = filters.project
        conditions.append(f"{PROJECT_COLUMNS[kind]} = :project")
    if filters.since is not None:
        params["since"] = filters.since
        conditions.append(f"{alias}.created_at >= :since")
    if filters.until is not None:
        params["until"] = filters.until
        conditions.append(f"{alias}.created_at < :until")
    if filters.claude_session_id is not None:
        params["session"] = filters.claude_session_id
        conditions.append("s.claude_session_id = :session")
    if filters.origin is not None:
        conditions.append(origin_condition(alias, filters.origin, params))
    if filters.flagged:
        conditions.append(f"{alias}.flagged = 1")
    if filters.agent is not None:
        conditions.append(agent_condition(alias, filters.agent, params))
    if kind == OBSERVATION:
        if filters.types:
            names = []
            for index, type_ in enumerate(filters.types):
                params[f"type{index}"] = type_
                names.append(f":type{index}")
            conditions.append(f"o.type IN ({', '.join(names)})")
        if filters.file:
            params.update(file_params(filters.file))
            conditions.append("o.id IN (SELECT observation_id FROM observation_files WHERE " + file_match() + ")")
        if filters.concept:
            params["concept"] = filters.concept
            conditions.append("EXISTS (SELECT 1 FROM json_each(o.concepts) WHERE value = :concept)")
    return joins, " AND ".join(conditions) or "1"


def file_match(alias: str = "", *, fold_case: bool = False) -> str:
    """SQL finding a file in ``observation_files`` (aliased ``alias``) by its whole path, or by the
    end of one (``src/app.py``); parameters from :func:`file_params`. The end's directories match in
    any ASCII case (``LIKE``); its name does too with ``fold_case`` (a disk that ignores case:
    :data:`~sessionmem.protocol.path_case.FOLDS_FILE_CASE`), through :data:`BASENAME_NOCASE_INDEX`."""
    prefix = f"{alias}." if alias else ""
    return (f"({prefix}path = :file OR ({prefix}basename = :file_base{basename_collation(fold_case)}"
            f" AND {prefix}path LIKE :file_suffix ESCAPE '\\'))")


# Where file names match in any case, the lookup by name needs an index in that collation (the schema's
# `observation_files_basename` is BINARY): made by the store that folds (SQLiteStore), where it folds only.
BASENAME_NOCASE_INDEX = ("CREATE INDEX IF NOT EXISTS observation_files_basename_nocase"
                         " ON observation_files (basename COLLATE NOCASE, observation_id)")


def basename_collation(fold_case: bool) -> str:
    """What follows ``basename = :file_base`` in SQL: nothing, or ``COLLATE NOCASE`` to match in any ASCII case."""
    return " COLLATE NOCASE" if fold_case else ""


_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)  # what LIKE and NOCASE fold, no more


def ascii_folded(text: str) -> str:
    """``text`` with its ASCII letters in lower case, as SQLite's ``LIKE`` and ``NOCASE`` compare it."""
    return text.translate(_ASCII_LOWER)


def file_matches(asked: str, paths: Iterable[str], *, fold_case: bool = False) -> bool:
    """Whether :func:`file_match` finds one of ``paths`` (as ``observation_files`` holds them) for a
    lookup of ``asked``: the same path, or a path of the same ``basename`` ending in it, its ASCII
    letters in any case, as ``LIKE`` has it (``fold_case``: the ``basename`` too, as ``NOCASE`` has it)."""
    path = asked.strip()
    name = ascii_folded(file_name(path)) if fold_case else file_name(path)
    end = ascii_folded("/" + path.lstrip("/"))

    def named_alike(candidate: str) -> bool:
        base = candidate.rsplit("/", 1)[-1]
        return (ascii_folded(base) if fold_case else base) == name

    return any(candidate == path or (named_alike(candidate) and ascii_folded(candidate).endswith(end))
               for candidate in paths if candidate)


def _quoted(terms: Iterable[str]) -> list[str]:
    return [f'"{term}"' for term in terms]


def affordable_match(connection: apsw.Connection, kind: str, terms: Sequence[str]) -> tuple[str, int] | None:
    """The MATCH expression for ``terms`` in the full-text table of ``kind`` that stays within
    :data:`MATCH_BUDGET`, and an upper bound of the rows it matches (-1: not known); ``None`` when no term
    is in any row.

    Any of the rarer terms, rarest first, while their rows together stay within the
    budget; a term too common to fit is left out (bm25 would rank it low anyway). When
    even the rarest term is that common, the rows holding every term (AND).
    """
    fts = TABLES[kind][1]
    every = " OR ".join(_quoted(terms))
    highest = _highest_id(connection, kind)
    if highest <= MATCH_BUDGET:  # a small table: every term is affordable
        return every, highest
    count = f"SELECT count(*) FROM (SELECT 1 FROM {fts} WHERE {fts} MATCH ? LIMIT {MATCH_BUDGET + 1})"
    matched = integer(one_row(connection, count, (every,))[0])
    if matched <= MATCH_BUDGET:
        return every, matched
    counted = sorted((integer(one_row(connection, count, (f'"{term}"',))[0]), term) for term in terms)
    present = [(rows, term) for rows, term in counted if rows]
    if not present:
        return None
    kept: list[str] = []
    total = 0
    for rows, term in present:
        if total + rows > MATCH_BUDGET:
            break
        kept.append(term)
        total += rows
    if kept:
        return " OR ".join(_quoted(kept)), total
    return " AND ".join(_quoted(term for _, term in present)), -1


def search_text(connection: apsw.Connection, terms: Sequence[str], filters: SearchFilters,
                limit: int, *, every_word_first: bool = False,
                project_rows: Mapping[str, RowIds] | None = None) -> list[RankedKey]:
    """The best ``limit`` documents of the wanted kinds matching ``terms`` (see :func:`affordable_match`),
    best first; ``project_rows``: the row ids of each kind the project of ``filters`` holds, if the
    caller knows them (``storage/sqlite/project_rows.py``; else they are counted).

    Scores are bm25's, negated (higher is better); kinds are merged by score. With
    ``every_word_first`` (a search someone typed), documents holding every term come
    first, best first, then those holding only some: when at least ``limit`` hold every
    term, the others are not ranked at all (bm25 scores every row a query matches, and a
    query's any-word matches are many times its every-word ones). Either way a longer
    ``limit`` extends the same ranking, so pages never repeat or skip a document.
    """
    if not terms:
        return []
    # Per kind, how its matches are ranked: first in the full-text table (no project filter, or
    # a project of at least RANK_FIRST_SHARE of its rows), or joined, against the list of the
    # project's rows when it is short (LISTED_ROWS). Kinds of which the project holds nothing
    # are not matched at all.
    plans: dict[str, _Plan] = {}
    only_project = filters == SearchFilters(project=filters.project, kinds=filters.kinds)
    for kind in filters.wanted_kinds():
        if filters.project is None:
            plans[kind] = _Plan(rank_first=True)
            continue
        ids = None if project_rows is None else project_rows.get(kind, np.empty(0, dtype=np.int64))
        rows = _project_rows(connection, kind, filters) if ids is None else len(ids)
        if rows:
            listed = ids if ids is not None and only_project and rows <= LISTED_ROWS else None
            plans[kind] = _Plan(rank_first=rows >= RANK_FIRST_SHARE * _highest_id(connection, kind), listed=listed)
    every: list[RankedKey] = []
    if every_word_first and len(terms) > 1:
        expression = " AND ".join(_quoted(terms))
        for kind, plan in plans.items():
            every.extend(_ranked_kind(connection, kind, (expression, -1), plan, filters, limit))
        every.sort(key=lambda key: key.score, reverse=True)
        if len(every) >= limit:
            return every[:limit]
    held = {(key.kind, key.row_id) for key in every}
    some: list[RankedKey] = []
    for kind, plan in plans.items():
        match = affordable_match(connection, kind, terms)
        if match is not None:
            found = _ranked_kind(connection, kind, match, plan, filters, limit)
            some.extend(key for key in found if (key.kind, key.row_id) not in held)
    some.sort(key=lambda key: key.score, reverse=True)
    return (every + some)[:limit]


class _Plan:
    """How one kind's matches are ranked (see :func:`search_text`)."""

    __slots__ = ("rank_first", "listed")

    def __init__(self, *, rank_first: bool, listed: RowIds | None = None) -> None:
        self.rank_first = rank_first
        self.listed = listed  # every row of the project, when that is all the filter asks and they are few


def _ranked_kind(connection: apsw.Connection, kind: str, match: tuple[str, int], plan: _Plan,
                 filters: SearchFilters, limit: int) -> list[RankedKey]:
    """The best ``limit`` rows of ``kind`` matching ``match`` (an expression, and an upper bound of the rows
    it matches or -1) that pass ``filters``, best first.

    With ``plan.rank_first``, ranked in the full-text table alone, and only the best
    checked against ``filters``; when too few pass, or without it (a project holding a
    small share of the rows: :data:`RANK_FIRST_SHARE`), ranked joined to their rows,
    filters in SQL, or only those of ``plan.listed``.
    """
    _, fts, weights = TABLES[kind]
    expression, at_most = match
    ranked = limit * RANK_FIRST
    if plan.rank_first:
        best = [(integer(row_id), real(score)) for row_id, score in all_rows(
            connection, f"SELECT rowid, bm25({fts}, {weights}) AS score FROM {fts} WHERE {fts} MATCH ?"
            " ORDER BY score LIMIT ?", (expression, ranked))]
        kept = _passing(connection, kind, [row_id for row_id, _ in best], filters)
        passed = [RankedKey(kind, row_id, -score) for row_id, score in best if row_id in kept]
        if len(passed) >= limit or len(best) < ranked or 0 <= at_most <= ranked:
            return passed[:limit]
    if plan.listed is not None:
        # "+rowid": the list is checked row by row, not handed to FTS5 as a rowid per lookup.
        rows = all_rows(
            connection, f"SELECT rowid, bm25({fts}, {weights}) AS score FROM {fts} WHERE {fts} MATCH :match"
            " AND +rowid IN (SELECT value FROM json_each(:ids)) ORDER BY score LIMIT :limit",
            {"match": expression, "ids": to_json(plan.listed.tolist()), "limit": limit})
        return [RankedKey(kind, integer(row_id), -real(score)) for row_id, score in rows]
    return _ranked_passing(connection, kind, expression, filters, limit)


def _project_rows(connection: apsw.Connection, kind: str, filters: SearchFilters) -> int:
    """How many rows of ``kind`` the project of ``filters`` holds (0 without a project filter)."""
    if filters.project is None:
        return 0
    table, alias = TABLES[kind][0], ALIASES[kind]
    (rows,) = one_row(connection, f"SELECT count(*) FROM {table} {alias} WHERE {PROJECT_COLUMNS[kind]} = ?",
                      (filters.project,))
    return integer(rows)


def _highest_id(connection: apsw.Connection, kind: str) -> int:
    """The highest row id of ``kind``: as many rows as it has, or a few more (ids never come back)."""
    return integer(one_row(connection, f"SELECT coalesce(max(id), 0) FROM {TABLES[kind][0]}")[0])


def _ranked_passing(connection: apsw.Connection, kind: str, expression: str, filters: SearchFilters,
                    limit: int) -> list[RankedKey]:
    """The best ``limit`` rows of ``kind`` matching ``expression`` that pass ``filters``, ranked joined to
    their rows: every match is looked up, only those passing are scored."""
    table, fts, weights = TABLES[kind]
    alias = ALIASES[kind]
    params: dict[str, Any] = {"match": expression, "limit": limit}
    joins, where = _filter_sql(kind, filters, params)
    # CROSS JOIN: the full-text table drives (a filter's index must not), so bm25 can score its rows.
    rows = all_rows(
        connection, f"SELECT {fts}.rowid, bm25({fts}, {weights}) AS score FROM {fts}"
        f" CROSS JOIN {table} {alias} ON {alias}.id = {fts}.rowid{joins}"
        f" WHERE {fts} MATCH :match AND {where} ORDER BY score LIMIT :limit", params)
    return [RankedKey(kind, integer(row_id), -real(score)) for row_id, score in rows]


def _passing(connection: apsw.Connection, kind: str, ids: Sequence[int], filters: SearchFilters) -> set[int]:
    """Those of ``ids`` (rows of ``kind``) that exist and pass ``filters``."""
    if not ids:
        return set()
    table = TABLES[kind][0]
    alias = ALIASES[kind]
    params: dict[str, Any] = {"ids": to_json(ids)}
    joins, where = _filter_sql(kind, filters, params)
    rows = all_rows(
        connection, f"SELECT {alias}.id FROM json_each(:ids) j CROSS JOIN {table} {alias} ON {alias}.id = j.value{joins}"
        f" WHERE {where}", params)
    return {integer(row_id) for (row_id,) in rows}


def keep_matching(connection: apsw.Connection, keys: Sequence[tuple[str, int]],
                  filters: SearchFilters) -> set[tuple[str, int]]:
    """Those of ``keys`` whose rows exist and pass ``filters`` (vector candidates are checked here)."""
    kept: set[tuple[str, int]] = set()
    for kind in filters.wanted_kinds():
        ids = [row_id for key_kind, row_id in keys if key_kind == kind]
        kept.update((kind, row_id) for row_id in _passing(connection, kind, ids, filters))
    return kept


