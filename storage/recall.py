"""The read half's SQL: full-text search, filters, cards, documents to embed, timelines, files.

Each function takes a read connection and runs on a reader thread
(:class:`~sessionmem.storage.readers.ReaderPool`); the SQLite store's async methods
wrap them. Three kinds of document are searchable (``sessionmem.records.DOCUMENT_KINDS``),
each from its own table and full-text table.

User text never reaches FTS5's query language: :func:`query_terms` keeps the words
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

import re
import string
from collections.abc import Iterable, Sequence
from typing import Any

import apsw
import msgspec

from sessionmem.records import (
    DOCUMENT_KINDS,
    OBSERVATION,
    PROMPT,
    SUMMARY,
    CompressedObservation,
    Document,
    DocumentCard,
    FileMemory,
    RankedKey,
    SearchFilters,
)

MAX_QUERY_TERMS = 32
# Words that almost every document holds: asking for them costs a scan of their long
# posting lists and ranks nothing. Kept when a query has nothing else.
_STOPWORDS = frozenset(
    "a an and are as at be but by do does for from has have how i in is it its me my of on or so that the "
    "then there this to was we what when where which who why will with you your".split())
_WORD = re.compile(r"\w+")
# Full-text search costs what the rows its terms match cost: FTS5 scores and sorts every
# one (at 100,000 observations a four-word query matched ~20,000 rows and took 35 ms).
# A query keeps its rarer terms while their rows together stay within this budget
# (affordable_match), and those rows are ranked in the full-text table alone: the best
# RANK_FIRST x limit of them are checked against the filters. When too few pass, the
# matches are ranked again joined to their rows, filters in SQL: bm25 then scores only
# the rows that pass.
MATCH_BUDGET = 4000
RANK_FIRST = 2
# A project with at most this many rows of a kind is searched joined from the start: in
# a large store its rows are few among the matches, and ranking every match first was
# wasted (a 600-observation project beside 100,000 others: 10.6 ms, 3 rounds).
SMALL_PROJECT = 2000

# Per kind: its table, full-text table and bm25 column weights, and the SQL naming its
# project, creation time and Claude session. Observation titles weigh most.
_TABLES = {
    OBSERVATION: ("observations", "observations_fts", "4.0, 2.0, 1.0, 1.0, 0.5"),
    SUMMARY: ("session_summaries", "summaries_fts", "2.0, 1.0, 1.5, 1.5, 1.0, 0.5"),
    PROMPT: ("user_prompts", "prompts_fts", "1.0"),
}
_ALIAS = {OBSERVATION: "o", SUMMARY: "m", PROMPT: "p"}
_PROJECT = {OBSERVATION: "o.project", SUMMARY: "m.project", PROMPT: "p.project"}
_json_list = msgspec.json.Decoder(list[str])


def query_terms(query: str) -> list[str]:
    """The words of ``query`` that a search looks for (lowercase, unique, stopwords dropped if others remain)."""
    words = list(dict.fromkeys(word.lower() for word in _WORD.findall(query)))
    meaningful = [word for word in words if word not in _STOPWORDS]
    return (meaningful or words)[:MAX_QUERY_TERMS]


def _like_escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _filter_sql(kind: str, filters: SearchFilters, params: dict[str, Any]) -> tuple[str, str]:
    """(joins, conditions) restricting rows of ``kind`` (aliased as in ``_ALIAS``) to ``filters``."""
    alias = _ALIAS[kind]
    # A row is joined to its session only when a filter needs it, and never the other way
    # (the planner once chose to walk every session of a project first).
    needs_session = filters.claude_session_id is not None
    joins = f" CROSS JOIN sessions s ON s.id = {alias}.session_db_id" if needs_session else ""
    conditions: list[str] = []
    if filters.project is not None:
        params["project"] = filters.project
        conditions.append(f"{_PROJECT[kind]} = :project")
    if filters.since is not None:
        params["since"] = filters.since
        conditions.append(f"{alias}.created_at >= :since")
    if filters.until is not None:
        params["until"] = filters.until
        conditions.append(f"{alias}.created_at < :until")
    if filters.claude_session_id is not None:
        params["session"] = filters.claude_session_id
        conditions.append("s.claude_session_id = :session")
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


def file_match(alias: str = "") -> str:
    """SQL finding a file in ``observation_files`` (aliased ``alias``) by its whole path, or by the
    end of one (``src/app.py``); parameters from :func:`file_params`."""
    prefix = f"{alias}." if alias else ""
    return (f"({prefix}path = :file OR ({prefix}basename = :file_base"
            f" AND {prefix}path LIKE :file_suffix ESCAPE '\\'))")


def file_name(path: str) -> str:
    """The name a lookup of ``path`` goes by: the ``basename`` it is matched on."""
    return path.strip().rstrip("/").rsplit("/", 1)[-1]


def file_params(path: str) -> dict[str, str]:
    path = path.strip()
    return {"file": path, "file_base": file_name(path), "file_suffix": "%/" + _like_escaped(path.lstrip("/"))}


_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)  # what LIKE folds, no more


def file_matches(asked: str, paths: Iterable[str]) -> bool:
    """Whether :func:`file_match` finds one of ``paths`` (as ``observation_files`` holds them) for a
    lookup of ``asked``: the same path, or a path of the same ``basename`` ending in it, its ASCII
    letters in any case, as ``LIKE`` has it."""
    path = asked.strip()
    name = file_name(path)
    end = ("/" + path.lstrip("/")).translate(_ASCII_LOWER)
    return any(candidate == path or (candidate.rsplit("/", 1)[-1] == name
                                     and candidate.translate(_ASCII_LOWER).endswith(end))
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
    table, fts, _ = _TABLES[kind]
    every = " OR ".join(_quoted(terms))
    (highest,) = connection.execute(f"SELECT coalesce(max(id), 0) FROM {table}").fetchone()
    if highest <= MATCH_BUDGET:  # a small table: every term is affordable
        return every, highest
    count = f"SELECT count(*) FROM (SELECT 1 FROM {fts} WHERE {fts} MATCH ? LIMIT {MATCH_BUDGET + 1})"
    (matched,) = connection.execute(count, (every,)).fetchone()
    if matched <= MATCH_BUDGET:
        return every, matched
    counted = sorted((connection.execute(count, (f'"{term}"',)).fetchone()[0], term) for term in terms)
    present = [(rows, term) for rows, term in counted if rows]
    if not present:
        return None
    kept, total = [], 0
    for rows, term in present:
        if total + rows > MATCH_BUDGET:
            break
        kept.append(term)
        total += rows
    if kept:
        return " OR ".join(_quoted(kept)), total
    return " AND ".join(_quoted(term for _, term in present)), -1


def search_text(connection: apsw.Connection, terms: Sequence[str], filters: SearchFilters,
                limit: int, *, every_word_first: bool = False) -> list[RankedKey]:
    """The best ``limit`` documents of the wanted kinds matching ``terms`` (see :func:`affordable_match`),
    best first.

    Scores are bm25's, negated (higher is better); kinds are merged by score. With
    ``every_word_first`` (a search someone typed), documents holding every term come
    first, best first, then those holding only some: when at least ``limit`` hold every
    term, the others are not ranked at all (bm25 scores every row a query matches, and a
    query's any-word matches are many times its every-word ones). Either way a longer
    ``limit`` extends the same ranking, so pages never repeat or skip a document.
    """
    if not terms:
        return []
    # Kinds of which the project holds nothing are not matched at all.
    kinds = {kind: rows for kind in filters.wanted_kinds() if (rows := _project_rows(connection, kind, filters)) != 0}
    every: list[RankedKey] = []
    if every_word_first and len(terms) > 1:
        expression = " AND ".join(_quoted(terms))
        for kind, project_rows in kinds.items():
            every.extend(_ranked_kind(connection, kind, (expression, -1), project_rows, filters, limit))
        every.sort(key=lambda key: key.score, reverse=True)
        if len(every) >= limit:
            return every[:limit]
    held = {(key.kind, key.row_id) for key in every}
    some: list[RankedKey] = []
    for kind, project_rows in kinds.items():
        match = affordable_match(connection, kind, terms)
        if match is not None:
            found = _ranked_kind(connection, kind, match, project_rows, filters, limit)
            some.extend(key for key in found if (key.kind, key.row_id) not in held)
    some.sort(key=lambda key: key.score, reverse=True)
    return (every + some)[:limit]


def _ranked_kind(connection: apsw.Connection, kind: str, match: tuple[str, int], project_rows: int | None,
                 filters: SearchFilters, limit: int) -> list[RankedKey]:
    """The best ``limit`` rows of ``kind`` matching ``match`` (an expression, and an upper bound of the rows
    it matches or -1) that pass ``filters``, best first; ``project_rows`` as :func:`_project_rows` counts them.

    Ranked in the full-text table alone, and only the best checked against ``filters``;
    when too few pass, or the filters name a small project (:data:`SMALL_PROJECT`),
    ranked joined to their rows, filters in SQL.
    """
    _, fts, weights = _TABLES[kind]
    expression, at_most = match
    ranked = limit * RANK_FIRST
    if project_rows is None or project_rows > SMALL_PROJECT:
        best = connection.execute(
            f"SELECT rowid, bm25({fts}, {weights}) AS score FROM {fts} WHERE {fts} MATCH ?"
            " ORDER BY score LIMIT ?", (expression, ranked)).fetchall()
        kept = _passing(connection, kind, [row_id for row_id, _ in best], filters)
        passed = [RankedKey(kind, row_id, -score) for row_id, score in best if row_id in kept]
        if len(passed) >= limit or len(best) < ranked or 0 <= at_most <= ranked:
            return passed[:limit]
    return _ranked_passing(connection, kind, expression, filters, limit)


def _project_rows(connection: apsw.Connection, kind: str, filters: SearchFilters) -> int | None:
    """How many rows of ``kind`` the project of ``filters`` holds, counted up to :data:`SMALL_PROJECT` + 1
    on its index; ``None`` without a project filter."""
    if filters.project is None:
        return None
    table, alias = _TABLES[kind][0], _ALIAS[kind]
    (rows,) = connection.execute(
        f"SELECT count(*) FROM (SELECT 1 FROM {table} {alias} WHERE {_PROJECT[kind]} = ? LIMIT {SMALL_PROJECT + 1})",
        (filters.project,)).fetchone()
    return int(rows)


def small_project_keys(connection: apsw.Connection, filters: SearchFilters, most: int) -> list[tuple[str, int]] | None:
    """Every row of the wanted kinds of the project of ``filters``, when it holds at most ``most`` of each
    (read on the project's index); ``None`` for a larger project, or without a project filter."""
    if filters.project is None:
        return None
    keys: list[tuple[str, int]] = []
    for kind in filters.wanted_kinds():
        table, alias = _TABLES[kind][0], _ALIAS[kind]
        ids = [row_id for (row_id,) in connection.execute(
            f"SELECT {alias}.id FROM {table} {alias} WHERE {_PROJECT[kind]} = ? LIMIT ?", (filters.project, most + 1))]
        if len(ids) > most:
            return None
        keys.extend((kind, row_id) for row_id in ids)
    return keys


def _ranked_passing(connection: apsw.Connection, kind: str, expression: str, filters: SearchFilters,
                    limit: int) -> list[RankedKey]:
    """The best ``limit`` rows of ``kind`` matching ``expression`` that pass ``filters``, ranked joined to
    their rows: every match is looked up, only those passing are scored."""
    table, fts, weights = _TABLES[kind]
    alias = _ALIAS[kind]
    params: dict[str, Any] = {"match": expression, "limit": limit}
    joins, where = _filter_sql(kind, filters, params)
    # CROSS JOIN: the full-text table drives (a filter's index must not), so bm25 can score its rows.
    rows = connection.execute(
        f"SELECT {fts}.rowid, bm25({fts}, {weights}) AS score FROM {fts}"
        f" CROSS JOIN {table} {alias} ON {alias}.id = {fts}.rowid{joins}"
        f" WHERE {fts} MATCH :match AND {where} ORDER BY score LIMIT :limit", params)
    return [RankedKey(kind, row_id, -score) for row_id, score in rows]


def _passing(connection: apsw.Connection, kind: str, ids: Sequence[int], filters: SearchFilters) -> set[int]:
    """Those of ``ids`` (rows of ``kind``) that exist and pass ``filters``."""
    if not ids:
        return set()
    table = _TABLES[kind][0]
    alias = _ALIAS[kind]
    params: dict[str, Any] = {"ids": msgspec.json.encode(ids).decode()}
    joins, where = _filter_sql(kind, filters, params)
    rows = connection.execute(
        f"SELECT {alias}.id FROM json_each(:ids) j CROSS JOIN {table} {alias} ON {alias}.id = j.value{joins}"
        f" WHERE {where}", params)
    return {row_id for (row_id,) in rows}


def keep_matching(connection: apsw.Connection, keys: Sequence[tuple[str, int]],
                  filters: SearchFilters) -> set[tuple[str, int]]:
    """Those of ``keys`` whose rows exist and pass ``filters`` (vector candidates are checked here)."""
    kept: set[tuple[str, int]] = set()
    for kind in filters.wanted_kinds():
        ids = [row_id for key_kind, row_id in keys if key_kind == kind]
        kept.update((kind, row_id) for row_id in _passing(connection, kind, ids, filters))
    return kept


def _ids_json(keys: Iterable[tuple[str, int]], kind: str) -> str:
    return msgspec.json.encode([row_id for key_kind, row_id in keys if key_kind == kind]).decode()


_CARD_SQL = {
    OBSERVATION: (
        "SELECT o.id, s.claude_session_id, o.project, o.prompt_number, o.created_at, o.type, o.title,"
        " o.subtitle, o.narrative, o.facts, o.files_read, o.files_modified"
        " FROM observations o JOIN sessions s ON s.id = o.session_db_id"
        " WHERE o.id IN (SELECT value FROM json_each(?))"),
    SUMMARY: (
        "SELECT m.id, s.claude_session_id, m.project, m.prompt_number, m.created_at, m.request, m.investigated,"
        " m.learned, m.completed, m.next_steps"
        " FROM session_summaries m JOIN sessions s ON s.id = m.session_db_id"
        " WHERE m.id IN (SELECT value FROM json_each(?))"),
    PROMPT: (
        "SELECT p.id, s.claude_session_id, p.project, p.prompt_number, p.created_at, p.text"
        " FROM user_prompts p JOIN sessions s ON s.id = p.session_db_id"
        " WHERE p.id IN (SELECT value FROM json_each(?))"),
}


def _card(kind: str, row: tuple[Any, ...]) -> DocumentCard:
    row_id, session, project, prompt_number, created_at = row[:5]
    if kind == OBSERVATION:
        type_, title, subtitle, narrative, facts, files_read, files_modified = row[5:]
        # The offline compressor's narrative repeats the prompt its subtitle holds: say it once.
        lead = (subtitle,) if subtitle and subtitle not in narrative else ()
        body = " ".join(part for part in (*lead, narrative, *_json_list.decode(facts)) if part)
        files = list(dict.fromkeys(_json_list.decode(files_modified) + _json_list.decode(files_read)))
        return DocumentCard(kind, row_id, session, project, prompt_number, created_at, type_, title, body, files)
    if kind == SUMMARY:
        request, investigated, learned, completed, next_steps = row[5:]
        body = " ".join(f"{label}: {text}" for label, text in (
            ("Completed", completed), ("Learned", learned), ("Investigated", investigated),
            ("Next", next_steps)) if text)
        return DocumentCard(kind, row_id, session, project, prompt_number, created_at, SUMMARY,
                            request or "(session summary)", body, [])
    (text,) = row[5:]
    return DocumentCard(kind, row_id, session, project, prompt_number, created_at, PROMPT, text, text, [])


def cards(connection: apsw.Connection, keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], DocumentCard]:
    """The cards of ``keys`` that exist, by key."""
    found: dict[tuple[str, int], DocumentCard] = {}
    for kind in DOCUMENT_KINDS:
        if any(key_kind == kind for key_kind, _ in keys):
            for row in connection.execute(_CARD_SQL[kind], (_ids_json(keys, kind),)):
                found[(kind, row[0])] = _card(kind, row)
    return found


# -- documents to embed -----------------------------------------------------------------

# A document's text is cut here before tokenizing: the embedder reads ~256 tokens.
DOCUMENT_CHARS = 1200


def document_text(card: DocumentCard) -> str:
    """What a document's vector is made from: its title, then its body (once, not twice)."""
    title, body = card.title.strip(), card.text.strip()
    if card.kind == PROMPT:
        return title[:DOCUMENT_CHARS]
    text = body if title and title.lower() in body.lower() else f"{title}. {body}" if body else title
    return text[:DOCUMENT_CHARS]


def documents(connection: apsw.Connection, keys: Sequence[tuple[str, int]]) -> list[Document]:
    """The documents of ``keys`` that exist, in the order of ``keys``."""
    found = cards(connection, keys)
    return [Document(kind, row_id, document_text(found[(kind, row_id)]))
            for kind, row_id in keys if (kind, row_id) in found]


def document_ids(connection: apsw.Connection, *, after: dict[str, int] | None = None,
                 limit: int | None = None) -> dict[str, list[int]]:
    """Row ids of every kind, ascending; those above ``after[kind]`` only, at most ``limit`` of each."""
    found: dict[str, list[int]] = {}
    for kind in DOCUMENT_KINDS:
        table = _TABLES[kind][0]
        rows = connection.execute(f"SELECT id FROM {table} WHERE id > ? ORDER BY id LIMIT ?",
                                  ((after or {}).get(kind, 0), -1 if limit is None else limit))
        found[kind] = [row_id for (row_id,) in rows]
    return found


# -- timeline -----------------------------------------------------------------------------


def created_at(connection: apsw.Connection, kind: str, row_id: int) -> tuple[float, str] | None:
    """When the row was created, and its project; ``None`` if it does not exist."""
    table, alias = _TABLES[kind][0], _ALIAS[kind]
    row = connection.execute(f"SELECT {alias}.created_at, {_PROJECT[kind]} FROM {table} {alias} WHERE {alias}.id = ?",
                             (row_id,)).fetchone()
    return (row[0], row[1]) if row else None


def around(connection: apsw.Connection, project: str, moment: float, anchor: tuple[str, int], *,
           before: int, after: int) -> list[tuple[str, int]]:
    """Keys of the ``before`` documents of ``project`` created before ``anchor`` and the ``after``
    ones after it, with the anchor between them, oldest first (ties ordered by kind and id)."""
    earlier: list[tuple[float, str, int]] = []
    later: list[tuple[float, str, int]] = []
    for kind in DOCUMENT_KINDS:
        table, alias = _TABLES[kind][0], _ALIAS[kind]
        base = f"SELECT {alias}.created_at, {alias}.id FROM {table} {alias} WHERE {_PROJECT[kind]} = :project"
        params = {"project": project, "moment": moment, "id": anchor[1] if kind == anchor[0] else -1,
                  "before": before, "after": after}
        earlier += [(at, kind, row_id) for at, row_id in connection.execute(
            base + f" AND ({alias}.created_at < :moment OR ({alias}.created_at = :moment AND {alias}.id < :id))"
            f" ORDER BY {alias}.created_at DESC, {alias}.id DESC LIMIT :before", params)]
        later += [(at, kind, row_id) for at, row_id in connection.execute(
            base + f" AND ({alias}.created_at > :moment OR ({alias}.created_at = :moment AND {alias}.id > :id"
            f" AND :id >= 0)) ORDER BY {alias}.created_at, {alias}.id LIMIT :after", params)]
    earlier = sorted(earlier)[-before:] if before else []
    later = sorted(later)[:after]
    return [(kind, row_id) for _, kind, row_id in earlier] + [anchor] + [(kind, row_id) for _, kind, row_id in later]


# -- files ----------------------------------------------------------------------------------


# How many of a file's newest uses (by whole path, and again by path end) file recall
# looks at: its cost is bounded by this, not by how much the project has stored.
FILE_LOOKBACK = 200


def recallable_files(observation: CompressedObservation) -> tuple[str, ...]:
    """The files whose :func:`file_memories` can answer with ``observation`` (the rule of its ``HAVING``):
    an offline compressor's mere read of a file is never recalled for that file."""
    if observation.type == "discovery" and observation.compressor == "offline":
        return observation.files_modified
    return (*observation.files_read, *observation.files_modified)


def recalled_as(asked: str, observation: CompressedObservation) -> bool | None:
    """What :func:`file_memory_rows` says of a stored ``observation`` for a lookup of ``asked``: ``None``
    when it is not among the rows, else whether it modified the file (its ``modified``)."""
    if not file_matches(asked, recallable_files(observation)):
        return None
    return file_matches(asked, observation.files_modified)


def file_memories(connection: apsw.Connection, project: str, path: str, *, exclude_session: str,
                  limit: int, lookback: int = FILE_LOOKBACK) -> list[FileMemory]:
    """The newest observations of ``project`` about ``path`` from other sessions than ``exclude_session``,
    one per title, those that modified it first, among the file's newest ``lookback`` uses.

    An observation the offline compressor made of a mere read ("Read src/app.py",
    its line count) says nothing worth recalling and is left out; an LLM's
    observation of a read (what was learned) is kept.

    :func:`file_memory_rows` reads, :func:`choose_file_memories` chooses; the worker keeps
    the rows of every session and chooses for each asking session
    (:class:`~sessionmem.storage.recall_cache.FileRecallCache`).
    """
    rows = file_memory_rows(connection, project, path, exclude_session=exclude_session, most=limit * 4,
                            lookback=lookback)
    return choose_file_memories(rows, exclude_session, limit)


_file_rows = msgspec.json.Decoder(list[tuple[int, str, float, str, str, str, list[str] | None, int]])


def file_memory_rows(connection: apsw.Connection, project: str, path: str, *, exclude_session: str | None,
                     most: int, lookback: int = FILE_LOOKBACK) -> list[FileMemory]:
    """The newest ``most`` observations of ``project`` that :func:`file_memories` may answer with for
    ``path``, newest first: of every session but ``exclude_session`` (of every session when ``None``).

    It runs on PostToolUse of a file, before the hook's answer, so its cost must not
    grow with the memory: the file's rows in ``observation_files`` drive it (newest first,
    at most ``lookback`` by each index), and only their observations are read. (Left to
    itself SQLite walked every observation of the project, ``observations_project``,
    and looked each one up in ``observation_files``: a few milliseconds at 8,000
    observations, growing without end -- the throughput that sagged from one bench round
    to the next. CROSS JOIN keeps the order.)
    """
    params: dict[str, Any] = {**file_params(path), "project": project, "session": exclude_session,
                              "most": most, "lookback": lookback}
    # The rows as one JSON value, one step: every row SQLite hands back gives up the GIL and
    # waits to take it back from a busy Trio thread (bench/README, "Fewer trips through the GIL").
    (found,) = connection.execute(
        "SELECT json_group_array(json_array(id, session, created_at, type, title, subtitle, json(facts), modified))"
        " FROM (WITH touches (observation_id, modified) AS ("
        "  SELECT * FROM (SELECT observation_id, modified FROM observation_files WHERE path = :file"
        "                 ORDER BY observation_id DESC LIMIT :lookback)"
        "  UNION ALL"
        "  SELECT * FROM (SELECT observation_id, modified FROM observation_files"
        "                 WHERE basename = :file_base AND path LIKE :file_suffix ESCAPE '\\'"
        "                 ORDER BY observation_id DESC LIMIT :lookback))"
        " SELECT o.id, s.claude_session_id AS session, o.created_at, o.type, o.title, o.subtitle, o.facts,"
        "        max(t.modified) AS modified"
        " FROM touches t CROSS JOIN observations o ON o.id = t.observation_id"
        " CROSS JOIN sessions s ON s.id = o.session_db_id"
        " WHERE o.project = :project AND (:session IS NULL OR s.claude_session_id != :session)"
        # (recallable_files says which stores can change an answer: keep the two alike)
        " GROUP BY o.id HAVING max(t.modified) = 1 OR o.type != 'discovery' OR o.compressor != 'offline'"
        " ORDER BY o.id DESC LIMIT :most)", params).fetchone()
    memories = [FileMemory(row_id, session, at, type_, title, subtitle, facts or [], bool(modified))
                for row_id, session, at, type_, title, subtitle, facts, modified in _file_rows.decode(found)]
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
