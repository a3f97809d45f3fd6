"""Searching the evaluation's queries: the first results of each ranking for each query.

Every search goes through the worker's own path (``SearchService.search``, what
``GET /api/search`` calls), observations only, in the query's project, among what its
scope makes eligible. Beside the three modes, two baselines for prompt-derived queries:
the newest eligible observations whatever the query (``recency``), and SessionStart's
ranking (nearest by meaning plus a recency bonus, ``search/context.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eval_metrics import DEPTH
from eval_queries import PROMPT, Query

from sessionmem.records import OBSERVATION, RankedKey, SearchFilters
from sessionmem.search import context
from sessionmem.search.hybrid import SearchMode, SearchService

MODES = (SearchMode.HYBRID, SearchMode.FTS, SearchMode.VECTOR)
MODE_NAMES = tuple(mode.value for mode in MODES)
RECENCY = "recency (baseline)"
MEANING_AND_RECENCY = "meaning + recency (SessionStart's ranking)"
BASELINES = (RECENCY, MEANING_AND_RECENCY)

Rankings = dict[str, dict[str, list[int]]]  # query id -> ranking name -> observation ids, best first


def filters_of(query: Query) -> SearchFilters:
    return SearchFilters(project=query.project, until=query.until, kinds=(OBSERVATION,))


async def rank(search: SearchService, queries: Sequence[Query], modes: Sequence[SearchMode] = MODES, *,
               baselines: bool = True, vectors_used: dict[str, int] | None = None) -> Rankings:
    """The first :data:`DEPTH` results of each query in each mode (and the baselines, for prompt-derived
    queries when ``baselines``). ``vectors_used`` counts what the vector side said (``used``, ``off``...)."""
    rankings: Rankings = {}
    for query in queries:
        filters = filters_of(query)
        found: dict[str, list[int]] = {}
        for mode in modes:
            results = await search.search(query.text, filters, mode=mode, limit=DEPTH)
            if mode is not SearchMode.FTS and vectors_used is not None:
                vectors_used[results.vectors] = vectors_used.get(results.vectors, 0) + 1
            found[mode.value] = [result.id for result in results.results]
        if baselines and query.source == PROMPT:
            found[RECENCY] = query.recent[:DEPTH]
            # SessionStart's own ranking: closeness to the prompt plus a recency bonus, over as many
            # nearest and recent candidates as it reads.
            nearest = await search.search(query.text, filters, mode=SearchMode.VECTOR, limit=context.CANDIDATES)
            close = [RankedKey(OBSERVATION, r.id, r.score) for r in nearest.results]
            found[MEANING_AND_RECENCY] = context.ranked(close, query.recent)[:DEPTH]
        rankings[query.id] = found
    return rankings


class RememberingEmbedder:
    """An embedder that embeds each text once (the same vector every time): a sweep asks for each query's
    vector once per setting."""

    def __init__(self, embedder: Any) -> None:
        self._embedder = embedder
        self._vectors: dict[str, Any] = {}

    async def embed(self, texts: list[str], *, urgent: bool = False) -> list[Any]:
        missing = [text for text in texts if text not in self._vectors]
        if missing:
            self._vectors.update(zip(missing, await self._embedder.embed(missing, urgent=urgent)))
        return [self._vectors[text] for text in texts]
