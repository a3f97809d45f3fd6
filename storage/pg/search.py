"""Search of the team database: full text (tsvector, GIN), nearest vectors (pgvector, HNSW), and cards.

Each function takes a read connection of :class:`~sessionmem.storage.pg.connections.TeamConnections`
and runs in a worker thread; :class:`~sessionmem.storage.pg.store.TeamStore` wraps them.
Answers are shaped as the SQLite store's: :class:`~sessionmem.records.RankedKey`
(kind, row id, score; higher is better), honouring the same
:class:`~sessionmem.records.SearchFilters` (project, kinds, types, since/until, file,
concept, Claude session, and origin where the filters have one), plus ``keys``: only the projects of those
:func:`~sessionmem.storage.team_records.shared_key`\\ s. Row ids are the team database's own.

Full text: a query is parsed by ``websearch_to_tsquery('english', ...)`` (any text a
user types is a valid query: quotes make phrases, ``-`` excludes, ``or`` alternates).
Documents matching it (every word) come first, ranked by ``ts_rank`` over the weighted
``search`` column (schema version 2 of :mod:`~sessionmem.storage.pg.schema`), at most the newest :data:`CANDIDATES` matches
of each kind; when they are fewer than ``limit``, documents
holding only some of the query's words follow (each word a ``plainto_tsquery``,
never parsed as syntax), as the SQLite store ranks a typed search -- unless the query
uses the syntax (a phrase, an excluded word, ``or``): then it asked for exactly that.

Nearest: per kind with vectors (observations, summaries), the ``k`` nearest by cosine
distance through the HNSW index, with pgvector's iterative scan (``relaxed_order``) so
that a filter leaving few rows still yields ``k`` of them; merged by distance. (Comparing
each row of a small project instead was measured slower here: each row is read from the
heap with its vector, bench/README.md.)

Error handling:
    Nothing a user can type raises here: a query without words finds nothing. SQL and
    connection errors propagate (the connections turn the latter into TeamUnavailable).
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Collection, Sequence
from typing import Any

import msgspec
import numpy as np

from sessionmem.protocol.agents import DEFAULT_AGENT, known_agent
from sessionmem.protocol.instructions import withhold
from sessionmem.records import (
    OBSERVATION,
    OBSERVATION_TYPES,
    PROMPT,
    SUMMARY,
    DocumentCard,
    RankedKey,
    SearchFilters,
    origin_label,
)
from sessionmem.storage.boundary import clean_text
from sessionmem.storage.pg.connections import Connection
from sessionmem.storage.pg.schema import VECTOR_DIMENSIONS
from sessionmem.storage.record_rules import MAX_ITEM_CHARS, MAX_ITEMS, MAX_TITLE_CHARS, latest_moment
from sessionmem.storage.search_terms import file_name, file_params, query_terms
from sessionmem.storage.sqlite.cards import card_of_row
from sessionmem.storage.team_records import Origin

log = logging.getLogger(__name__)

LOCAL_ORIGIN = "local"  # sessionmem.records.LOCAL_ORIGIN: this machine's own rows
TABLES = {OBSERVATION: "observations", SUMMARY: "summaries", PROMPT: "prompts"}
_CARD_TYPES = frozenset((*OBSERVATION_TYPES, SUMMARY, PROMPT))  # what a card's type may say
CARD_TEXT_CHARS = 64 * 1024  # of a team card's body: what a snippet is cut from (the rest is never shown)
_TOKEN_SPAN = 1024  # read past a cut before it is made, so that a token across it is redacted whole
VECTOR_KINDS = (OBSERVATION, SUMMARY)
# Ranking costs what the rows it scores cost (ts_rank reads each one's tsvector), and a
# query of common words matches a good part of a large store: each kind ranks at most its
# newest CANDIDATES matches (the rows holding a rarer word are fewer: all of them, then).
# SQLite keeps a query's rarer words instead (storage/sqlite/fulltext.py MATCH_BUDGET); here recent
# memories win, which is what a memory search of common words wants most. ts_rank's
# normalization 1 divides by 1 + the log of the document's length, as bm25 favours the
# shorter of two documents holding a word as often.
CANDIDATES = 1000
# What makes a query more than words for websearch_to_tsquery: a phrase, an excluded word, "or".
_SYNTAX = re.compile(r'"|(?:^|\s)-\w|\sor\s', re.IGNORECASE)
# HNSW's candidate list: at least pgvector's default, and k.
_EF_SEARCH = 40


class TeamCard(msgspec.Struct, frozen=True, kw_only=True):
    """A document of the team database as a search result shows it, with where it came from."""

    card: DocumentCard  # its id is the team database's
    project_key: str
    origin: Origin


def _filter_sql(kind: str, filters: SearchFilters, keys: Collection[str] | None, params: dict[str, Any]) -> str:
    """The conditions restricting rows of ``kind`` to ``filters`` and ``keys`` (``AND``-joined; ``true``)."""
    conditions: list[str] = []
    if keys is not None:
        params["keys"] = list(keys)
        conditions.append("project_key = ANY(%(keys)s)")
    for name, value, condition in (("project", filters.project, "project = %(project)s"),
                                   ("since", filters.since, "created_at >= %(since)s"),
                                   ("until", filters.until, "created_at < %(until)s"),
                                   ("session", filters.claude_session_id, "claude_session_id = %(session)s")):
        if value is not None:
            params[name] = value
            conditions.append(condition)
    if filters.origin is not None:
        conditions.append(_origin_condition(filters.origin, params))
    if kind == OBSERVATION:
        if filters.types:
            params["types"] = list(filters.types)
            conditions.append("type = ANY(%(types)s)")
        if filters.file:
            # As SQLite's observation_files lookup (fulltext.file_match): the whole path, or a
            # path of the same name ending in it, its letters in any case.
            params.update(file_params(filters.file))
            params["file_base"] = file_name(filters.file)
            conditions.append(
                "EXISTS (SELECT 1 FROM jsonb_array_elements_text(files_read || files_modified) f (path)"
                " WHERE path = %(file)s OR (regexp_replace(path, '^.*/', '') = %(file_base)s"
                " AND path ILIKE %(file_suffix)s))")
        if filters.concept:
            params["concept"] = filters.concept
            conditions.append("concepts ? %(concept)s")
    return " AND ".join(conditions) or "true"


def _origin_condition(origin: str, params: dict[str, Any]) -> str:
    """Rows of ``origin`` as a filter names it: ``user@machine``, or a machine or user name. The
    team database has no "this machine" (every row there has its machine's name): ``local``
    names no row of it."""
    if origin == LOCAL_ORIGIN:
        return "false"
    user, at, machine = origin.rpartition("@")
    if at:
        params["origin_user"], params["origin_machine"] = user, machine
        return "(origin_machine = %(origin_machine)s AND origin_user = %(origin_user)s)"
    params["origin_name"] = origin
    return "(origin_machine = %(origin_name)s OR origin_user = %(origin_name)s)"


def _ranked(connection: Connection, kind: str, tsquery: str, filters: SearchFilters, keys: Collection[str] | None,
            params: dict[str, Any], limit: int) -> list[RankedKey]:
    """The best ``limit`` rows of ``kind`` matching ``tsquery`` (SQL of a tsquery over ``params``) among
    its newest :data:`CANDIDATES` matches."""
    where = _filter_sql(kind, filters, keys, params)
    # The tsquery is written out in both places (not joined from a subquery): with its text
    # known, the planner folds it to a constant and estimates its matches from the column's
    # statistics -- a bitmap of a rare word's rows, or the newest rows walked backwards in a
    # time index (the project's, with a project filter) until enough match for a common one.
    rows = connection.execute(
        f"SELECT id, ts_rank(search, {tsquery}, 1) AS score FROM ("
        f" SELECT id, search FROM {TABLES[kind]} WHERE search @@ {tsquery} AND {where}"
        f" ORDER BY created_at DESC LIMIT {CANDIDATES}) candidates ORDER BY score DESC, id LIMIT %(limit)s",
        {**params, "limit": limit}).fetchall()
    return [RankedKey(kind, int(row_id), float(score)) for row_id, score in rows]


def search_text(connection: Connection, *, query: str, filters: SearchFilters, limit: int,
                keys: Collection[str] | None) -> list[RankedKey]:
    """The best ``limit`` documents of the wanted kinds for ``query``, best first; see the module docstring."""
    terms = query_terms(query)
    if not terms or limit <= 0:
        return []
    kinds = filters.wanted_kinds()
    every: list[RankedKey] = []
    for kind in kinds:
        every += _ranked(connection, kind, "websearch_to_tsquery('english', %(query)s)", filters, keys,
                         {"query": query}, limit)
    every.sort(key=lambda key: key.score, reverse=True)
    if len(every) >= limit or len(terms) < 2 or _SYNTAX.search(query):
        return every[:limit]
    held = {(key.kind, key.row_id) for key in every}
    params = {f"term{index}": term for index, term in enumerate(terms)}
    any_word = "(" + " || ".join(f"plainto_tsquery('english', %(term{index})s)" for index in range(len(terms))) + ")"
    some: list[RankedKey] = []
    for kind in kinds:
        found = _ranked(connection, kind, any_word, filters, keys, dict(params), limit + len(every))
        some += [key for key in found if (key.kind, key.row_id) not in held]
    some.sort(key=lambda key: key.score, reverse=True)
    return (every + some)[:limit]


def nearest(connection: Connection, *, vector: np.ndarray, k: int, filters: SearchFilters, model: str,
            keys: Collection[str] | None) -> list[RankedKey]:
    """The ``k`` documents nearest ``vector`` among those with a vector of ``model``; score: 1 - cosine distance."""
    query = np.asarray(vector, dtype=np.float32).reshape(-1)
    kinds = [kind for kind in filters.wanted_kinds() if kind in VECTOR_KINDS]
    if k <= 0 or query.shape[0] != VECTOR_DIMENSIONS or not kinds:
        return []
    found: list[tuple[float, str, int]] = []
    with connection.transaction():
        # Iterative scan: with a filter, HNSW goes on past its first ef_search candidates until
        # k rows pass (relaxed_order: nearly in order; sorted again below).
        connection.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        connection.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(max(_EF_SEARCH, k)),))
        for kind in kinds:
            params: dict[str, Any] = {"vector": query, "model": model, "k": k}
            where = _filter_sql(kind, filters, keys, params)
            rows = connection.execute(
                f"SELECT id, vector <=> %(vector)s AS distance FROM {TABLES[kind]}"
                f" WHERE vector IS NOT NULL AND model = %(model)s AND {where}"
                " ORDER BY vector <=> %(vector)s LIMIT %(k)s", params).fetchall()
            found += [(float(distance), kind, int(row_id)) for row_id, distance in rows]
    found.sort()
    return [RankedKey(kind, row_id, 1.0 - distance) for distance, kind, row_id in found[:k]]


_CARD_SQL = {
    OBSERVATION: ("SELECT id, claude_session_id, project, prompt_number, created_at, type, title, subtitle, narrative,"
                  " facts::text, files_read::text, files_modified::text"),
    SUMMARY: ("SELECT id, claude_session_id, project, prompt_number, created_at, request, investigated, learned,"
              " completed, next_steps"),
    PROMPT: "SELECT id, claude_session_id, project, prompt_number, created_at, text",
}


def cards(connection: Connection, *, keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], TeamCard]:
    """The cards of ``keys`` whose rows exist, by key; each as the SQLite store's card of such a row."""
    found: dict[tuple[str, int], TeamCard] = {}
    for kind, table in TABLES.items():
        ids = [row_id for key_kind, row_id in keys if key_kind == kind]
        if not ids:
            continue
        # The agent of the row's session (a row may arrive before its session: Claude Code's until it does).
        rows = connection.execute(
            f"{_CARD_SQL[kind]}, project_key, origin_machine_id, origin_machine, origin_user,"
            f" (SELECT s.agent FROM sessions s WHERE s.claude_session_id = {table}.claude_session_id)"
            f" FROM {table} WHERE id = ANY(%s)", (ids,)).fetchall()
        for *values, project_key, machine_id, machine, user, agent in rows:
            origin = Origin(str(machine_id), str(machine), str(user))
            card = team_card(kind, tuple(values), origin_label(origin.machine_shown(), origin.user))
            if card is not None:
                # A name sessionmem does not serve (written around it) is shown as no agent's: Claude Code's.
                card = msgspec.structs.replace(card, agent=agent if known_agent(str(agent)) else DEFAULT_AGENT)
                found[(kind, card.id)] = TeamCard(card=card, project_key=str(project_key), origin=origin)
    return found


def team_card(kind: str, values: tuple[Any, ...], origin: str, *, now: float | None = None) -> DocumentCard | None:
    """A team database row as the card a search shows, held to what a pulled row is held to; ``None`` for a
    row no card can be made of (logged by its id, never its content).

    Whoever can write to the team database can write any row into it, around sessionmem (rows written
    before schema version 3's checks, or by a client that skips them). A search shows rows straight
    from it, not pulled: so each card is made here as a pulled row is stored -- no private span and
    no secret (:func:`~sessionmem.storage.boundary.clean_text`, the default rules), a title within the
    import's cap and a body within :data:`CARD_TEXT_CHARS`, an observation type the pages know, a time clamped to now plus the skew
    (:mod:`~sessionmem.storage.record_rules`) -- and checked for instruction-like text
    (:func:`~sessionmem.storage.sqlite.cards.card_of_row`), which is never shown as its title
    (:func:`~sessionmem.protocol.instructions.withhold`). A row whose lists are not lists of strings has no card.
    """
    try:
        card = card_of_row(kind, values, origin)
    except (msgspec.ValidationError, msgspec.DecodeError, TypeError, ValueError) as exc:
        log.warning("team search: passed over the %s row %s of the team database: %s", kind, values[0], exc)
        return None
    latest = latest_moment(time.time() if now is None else now)
    moment = min(max(card.created_at, 0.0), latest) if math.isfinite(card.created_at) else 0.0
    # Cut a little past the cap before cleaning, then at it: a token across the cut is still whole to the rules.
    title = clean_text(card.title[:MAX_TITLE_CHARS + _TOKEN_SPAN])[:MAX_TITLE_CHARS]
    return msgspec.structs.replace(
        card, title=withhold(title)[0] if card.flagged else title,
        text=clean_text(card.text[:CARD_TEXT_CHARS + _TOKEN_SPAN])[:CARD_TEXT_CHARS],
        type=card.type if card.type in _CARD_TYPES else "discovery", created_at=moment,
        files=[clean_text(path[:MAX_ITEM_CHARS]) for path in card.files[:MAX_ITEMS]])
