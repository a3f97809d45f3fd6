"""Search: by words (FTS5 bm25), by meaning (vector kNN), or both, fused (:func:`fuse`).

``hybrid`` (the default) asks both retrievers for their best candidates under the same
filters and fuses them by score: each document gets its standing in each list, 1 for
the list's best down to 0 at rank :data:`STANDING_REFERENCE`, and its fused score is
``WORDS_WEIGHT x words standing x share of the query's words it holds + (1 -
WORDS_WEIGHT) x meaning standing``, from 0 to 1. A list whose best stands far above the
rest (a confident retriever) gives its runners-up little; a flat one gives them almost
as much as its best; a document both find adds both. The share of words held (read for
the first :data:`WORDS_HELD_DEPTH` full-text candidates) keeps a document that shares one
rare word with a long question from outranking what meaning finds; when no document
holds most of the words, meaning leads. When one side finds nothing, the other's order
is kept. ``fts`` and ``vector`` use one retriever alone; in ``hybrid`` the two run at
once. Words rank documents holding every word of the query first (as a search box
does), then those holding some (where a search that demands every word finds nothing).

The vector side: the query is embedded in the embedder's urgent lane (a few ms), the
index returns the nearest vectors, and SQLite keeps those that pass the filters; when
filters leave too few, the index is asked again for more (up to ``MAX_NEAREST``). With
a project filter, the index is handed the project's documents (their row ids, read
while the query is embedded) and returns the nearest of those alone (``index/hnsw.py``
says how): in a large store the graph's nearest vectors are mostly other projects', and
asking it for more and more of them made a search of a project of 7.5 % of 100,000
observations take two to three times as long as one of every project.
When the vector index cannot answer (vectors off, loading, busy with a save) the search
goes on with words alone and says so in ``vectors``.

Error handling:
    Any query string is safe (no FTS5 syntax reaches SQLite). A failing embedder is
    logged and the search degrades to words (``vectors: "failed"``); storage errors
    propagate.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from enum import Enum

import msgspec
import numpy as np
import trio

from sessionmem.embed.base import EmbedderUnavailableError
from sessionmem.embed.service import EmbedderService
from sessionmem.index.actor import VectorIndex
from sessionmem.protocol.agents import DEFAULT_AGENT
from sessionmem.records import DocumentCard, RankedKey, SearchFilters
from sessionmem.runtime.logs import log_exception
from sessionmem.search.snippets import snippet
from sessionmem.storage.base import Store
from sessionmem.storage.search_terms import query_terms

log = logging.getLogger(__name__)

# The fusion (fuse), chosen on the tune half of the corpus evaluation (bench/retrieval.py --sweep;
# the sweep and the held-out figures in bench/README.md). Words weigh more than meaning, as far
# as a match holds the question's words: one holding half of them counts half.
WORDS_WEIGHT = 0.7
# Standing 0 at this rank of each list: a fixed rank, not the list's end, so a deeper page (more
# candidates) leaves the first results' scores alone.
STANDING_REFERENCE = 50
# The share of the query's words held is read for this many full-text candidates (a few tenths of a
# ms); those after them count as holding as little as the least of these (measured: reading it for
# all 50 candidates ranks the same).
WORDS_HELD_DEPTH = 20
# Meaning's standing: None, between its list's best and its score at STANDING_REFERENCE; a number,
# the cosine similarity above it, scaled to 0..1 (absolute, not relative to the list).
MEANING_FLOOR: float | None = None
# A vector this far (cosine distance) from the query is not a match, only the least
# unlike document: beyond it, vector candidates are dropped. MiniLM puts a relevant
# memory of a terse or chatty prompt as far as 0.8-1.0, so only vectors pointing away
# from the query are dropped: on the same evaluation, 0.8 loses two thirds of what
# vectors find for queries sharing no word with their answers (recall@10 0.06 against
# 0.19 at 1.0).
MAX_VECTOR_DISTANCE = 1.0
MIN_DEPTH = 50  # candidates asked of each retriever, at least
# When filters leave too few of the nearest vectors, more are asked for, up to this many
# (hnswlib's ef is at least k, and its cost grows with it); what filters leave beyond
# them, words find.
MAX_NEAREST = 4096


class SearchMode(str, Enum):
    HYBRID = "hybrid"
    FTS = "fts"
    VECTOR = "vector"


class SearchSource(str, Enum):
    """What a search read, and so whose ids its results carry."""

    LOCAL = "local"  # this machine's memory: `sessionmem show`, the timeline, the observations batch read its ids
    TEAM = "team"  # the team database itself (search/team_search.py): its own ids, never this machine's


class SearchResult(msgspec.Struct, frozen=True, kw_only=True):
    kind: str  # observation | summary | prompt
    id: int
    score: float  # hybrid: fused, 0 to 1 (fuse); fts: bm25 (negated); vector: cosine similarity
    matched_by: list[str]  # "words", "meaning"
    claude_session_id: str
    project: str
    prompt_number: int
    created_at: float
    type: str
    title: str
    snippet: str
    files: list[str]
    origin: str = ""  # "" this machine's own; else "user@machine"
    source: SearchSource = SearchSource.LOCAL  # whose id `id` is
    provenance: str = "tool"  # where its text came from (a records.Provenance value)
    flagged: bool = False  # it holds (quoted) instruction-like text, or was made from some
    agent: str = DEFAULT_AGENT  # the agent whose session made it (protocol/agents.py)
    # Its cosine similarity to the query, when meaning found it (None: words alone did): an absolute
    # measure of relevance where `score` is relative to the other results (the recall's floor reads it).
    similarity: float | None = None


class SearchResults(msgspec.Struct, frozen=True):
    query: str
    mode: SearchMode
    vectors: str  # used | off | loading | busy | failed | not asked
    results: list[SearchResult]
    offset: int
    limit: int
    more: bool  # more results past this page
    unembedded: int = 0  # with meaning asked: stored documents the vector index does not hold yet (catching up)
    source: SearchSource = SearchSource.LOCAL  # what was searched, and whose ids the results carry


class SearchService:
    def __init__(self, store: Store, index: VectorIndex, embedder: EmbedderService) -> None:
        self._store = store
        self._index = index
        self._embedder = embedder
        self.searches = 0

    async def search(self, query: str, filters: SearchFilters, *, mode: SearchMode = SearchMode.HYBRID,
                     limit: int = 20, offset: int = 0) -> SearchResults:
        self.searches += 1
        depth = candidate_depth(mode, limit, offset)
        words: list[RankedKey] = []
        meaning: list[RankedKey] = []
        held: dict[tuple[str, int], float] = {}
        vectors = "not asked"

        async def by_words() -> None:
            nonlocal words, held
            if mode is SearchMode.HYBRID and WORDS_HELD_DEPTH:
                words, held = await self._store.search_text_held(query, filters, depth,
                                                                 held_of_first=WORDS_HELD_DEPTH)
            else:
                words = await self._store.search_text(query, filters, depth, every_word_first=True)

        async def by_meaning() -> None:
            nonlocal meaning, vectors
            meaning, vectors = await self._by_meaning(query, filters, depth)

        # Both at once: full-text search runs on a reader thread while the query is
        # embedded on the embedder's, so hybrid waits for the slower of the two, not both.
        async with trio.open_nursery() as nursery:
            if mode is not SearchMode.VECTOR:
                nursery.start_soon(by_words)
            if mode is not SearchMode.FTS:
                nursery.start_soon(by_meaning)
        ranked = ranking(mode, words, meaning, held)
        page = ranked[offset : offset + limit]
        cards = await self._store.cards([(kind, row_id) for kind, row_id, _ in page])
        results = page_results(page, cards, query, words, meaning)
        return SearchResults(query, mode, vectors, results, offset, limit, more=len(ranked) > offset + limit,
                             unembedded=self._index.pending if vectors == "used" else 0)

    async def _by_meaning(self, query: str, filters: SearchFilters, depth: int) -> tuple[list[RankedKey], str]:
        if not self._index.enabled:
            return [], "off"
        vector: np.ndarray | None = None

        async def embed() -> None:
            nonlocal vector
            vector = await embed_query(self._embedder, query)

        async with trio.open_nursery() as nursery:  # the embedding beside the read, not after it
            nursery.start_soon(embed)
            rows = await self._project_rows(filters)
        if vector is None:
            return [], "failed"
        narrowing = bool(filters.types or filters.file or filters.concept or filters.claude_session_id
                         or filters.origin is not None or filters.since is not None or filters.until is not None
                         or filters.flagged or filters.agent is not None
                         or filters.kinds != SearchFilters().kinds)
        # The project's own documents are asked for exactly: only other filters call for more.
        k = depth * (4 if narrowing else 1 if rows is not None else 2)
        while True:
            if rows is not None:
                nearest = await self._index.nearest_of_rows(vector, rows, k)
            else:
                nearest = await self._index.nearest(vector, k)
            if nearest is None:
                return [], self._index.unavailable_reason()
            close = [(kind, row_id, distance) for kind, row_id, distance in nearest
                     if distance <= MAX_VECTOR_DISTANCE]
            kept = await self._store.keep_matching([(kind, row_id) for kind, row_id, _ in close], filters)
            found = [RankedKey(kind, row_id, 1.0 - distance) for kind, row_id, distance in close
                     if (kind, row_id) in kept]
            exhausted = len(nearest) < k or len(close) < len(nearest) or k >= MAX_NEAREST
            if len(found) >= depth or exhausted:
                return found[:depth], "used"
            k = min(k * 4, MAX_NEAREST)

    async def _project_rows(self, filters: SearchFilters) -> dict[str, np.ndarray] | None:
        """The row ids of the documents of the project ``filters`` name, by wanted kind; ``None`` without a
        project filter."""
        if filters.project is None:
            return None
        return await self._store.project_rows(filters.project, filters.wanted_kinds())


def candidate_depth(mode: SearchMode, limit: int, offset: int) -> int:
    """How many candidates each retriever is asked for, to rank the page ``offset``, ``limit``."""
    # Fusion needs candidates past the page from both retrievers; words alone, only the
    # page and one more (to know there is more): fewer to rank, and the same ranking.
    return offset + limit + 1 if mode is SearchMode.FTS else max(MIN_DEPTH, (offset + limit) * 3)


def ranking(mode: SearchMode, words: list[RankedKey], meaning: list[RankedKey],
            held: Mapping[tuple[str, int], float]) -> list[tuple[str, int, float]]:
    """The candidates as one ranking (kind, row id, score), best first: fused in ``hybrid``, else the one
    retriever's as it is."""
    if mode is SearchMode.HYBRID:
        return fuse(words, meaning, held)
    return [(key.kind, key.row_id, key.score) for key in (words or meaning)]


async def embed_query(embedder: EmbedderService, query: str) -> np.ndarray | None:
    """``query``'s vector, from the embedder's urgent lane; ``None`` (logged) when embedding it failed."""
    try:
        return (await embedder.embed([query], urgent=True))[0]
    except EmbedderUnavailableError as exc:  # said once by the worker's warm-up, and by doctor, status and /debug
        log.debug("search: words only: %s", exc)
    except Exception as exc:
        log_exception(log, "search: embedding the query failed; searching by words only", exc)
    return None


def page_results(page: Sequence[tuple[str, int, float]], cards: Mapping[tuple[str, int], DocumentCard], query: str,
                 words: Sequence[RankedKey], meaning: Sequence[RankedKey], *,
                 source: SearchSource = SearchSource.LOCAL) -> list[SearchResult]:
    """The results of ``page`` (kind, row id, score), shown from their ``cards``; a row without a card
    (deleted between the two reads) is left out."""
    terms = query_terms(query)
    found_by_words = {(key.kind, key.row_id) for key in words}
    similarity = {(key.kind, key.row_id): key.score for key in meaning}
    results = []
    for kind, row_id, score in page:
        card = cards.get((kind, row_id))
        if card is None:
            continue
        matched_by = [name for name, found in (("words", found_by_words), ("meaning", similarity.keys()))
                      if (kind, row_id) in found]
        cosine = similarity.get((kind, row_id))
        results.append(SearchResult(
            kind=kind, id=row_id, score=round(score, 6), matched_by=matched_by,
            claude_session_id=card.claude_session_id, project=card.project, prompt_number=card.prompt_number,
            created_at=card.created_at, type=card.type, title=card.title,
            snippet=snippet(card.text if kind != "prompt" else card.title, terms), files=card.files,
            origin=card.origin, source=source, provenance=card.provenance, flagged=card.flagged, agent=card.agent,
            similarity=None if cosine is None else round(cosine, 6)))
    return results


def fuse(words: list[RankedKey], meaning: list[RankedKey],
         held: Mapping[tuple[str, int], float]) -> list[tuple[str, int, float]]:
    """The two rankings (best first) as one: (kind, row id, score), best first (module docstring).

    ``held``: the share of the query's words each of the first :data:`WORDS_HELD_DEPTH` of ``words``
    holds (empty: not weighed). Promises (tests/test_fusion.py): scores from 0 to 1, never rising down
    the list; one ranking empty, the other's order kept; a document first in both and holding every
    word first; candidates past :data:`STANDING_REFERENCE` change nothing above them. Equal scores
    keep the better of a document's two ranks first.
    """
    if not meaning:
        return [(key.kind, key.row_id, WORDS_WEIGHT * standing)
                for key, standing in zip(words, _standings([key.score for key in words]))]
    if not words:
        return [(key.kind, key.row_id, (1.0 - WORDS_WEIGHT) * standing)
                for key, standing in zip(meaning, _meaning_standings(meaning))]
    # A candidate whose share was not read holds as little as the least of those read (all of them,
    # none read).
    least = min(held.values(), default=1.0)
    scores: dict[tuple[str, int], float] = {}
    best_rank: dict[tuple[str, int], int] = {}
    for rank, (key, standing) in enumerate(zip(words, _standings([key.score for key in words]))):
        name = (key.kind, key.row_id)
        scores[name] = WORDS_WEIGHT * standing * held.get(name, least)
        best_rank[name] = rank
    for rank, (key, standing) in enumerate(zip(meaning, _meaning_standings(meaning))):
        name = (key.kind, key.row_id)
        scores[name] = scores.get(name, 0.0) + (1.0 - WORDS_WEIGHT) * standing
        best_rank[name] = min(rank, best_rank.get(name, rank))
    ordered = sorted(scores, key=lambda name: (-scores[name], best_rank[name]))
    return [(kind, row_id, scores[(kind, row_id)]) for kind, row_id in ordered]


def _standings(scores: Sequence[float]) -> list[float]:
    """Each score's place between the best (1) and the score at rank :data:`STANDING_REFERENCE` (0; or the
    last, in a shorter list), never below 0. Scores are made non-increasing first: words put documents
    holding every word before those holding some, whatever their bm25."""
    falling: list[float] = []
    for score in scores:
        falling.append(min(score, falling[-1]) if falling else score)
    if not falling:
        return []
    best, reference = falling[0], falling[min(STANDING_REFERENCE, len(falling)) - 1]
    if best <= reference:  # as good as each other down to the reference: all best, those below nothing
        return [1.0 if score >= best else 0.0 for score in falling]
    return [max(0.0, (score - reference) / (best - reference)) for score in falling]


def _meaning_standings(meaning: Sequence[RankedKey]) -> list[float]:
    """:func:`_standings` of the similarities, or with :data:`MEANING_FLOOR` set their height above it."""
    if MEANING_FLOOR is None:
        return _standings([key.score for key in meaning])
    return [min(1.0, max(0.0, (key.score - MEANING_FLOOR) / (1.0 - MEANING_FLOOR))) for key in meaning]
