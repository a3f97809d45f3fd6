"""Search of the team database itself: every shared project of every machine, pulled here or not.

Local search (:mod:`sessionmem.search.hybrid`) reads this machine's SQLite replica, which
holds the shared projects this machine pulls. :class:`TeamSearch` asks the team database
(:class:`~sessionmem.storage.pg.store.TeamStore`) instead, the same way: words from its
full text (``search_text``), meaning from the query embedded in the worker's embedder
(the urgent lane, as a local search) and the nearest vectors of the local index's model
(``nearest``; vectors of another model are not comparable and are not asked), both at
once, fused by :func:`~sessionmem.search.hybrid.fuse`, and shown from the team
database's cards. The answer is a :class:`~sessionmem.search.hybrid.SearchResults`
with ``source: "team"`` on it and on every result: its ids are the team database's,
never this machine's (``sessionmem show``, the timeline and the observations batch read
this machine's memory only). Every origin is shown as ``user@machine``, this machine's
included (the team database names every row's machine).

Fusion weighs each full-text match by the share of the query's words it holds only in
local search (SQLite reads it from its own full-text tables); here words rank documents
holding every word first, which is most of what the share does.

Error handling:
    :class:`~sessionmem.storage.pg.store.TeamUnavailable` when the team database cannot be
    reached, and when it does not answer within :data:`TEAM_SEARCH_TIMEOUT_S` (a host that
    swallows packets makes a connection wait out its own timeout): its message never holds
    the password. A failing embedder degrades to words, as in local search.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from sessionmem.embed.service import EmbedderService
from sessionmem.index.actor import VectorIndex
from sessionmem.records import RankedKey, SearchFilters
from sessionmem.search.hybrid import (
    MAX_VECTOR_DISTANCE,
    SearchMode,
    SearchResults,
    SearchSource,
    candidate_depth,
    embed_query,
    page_results,
    ranking,
)
from sessionmem.storage.pg.errors import TeamUnavailable

if TYPE_CHECKING:  # the driver is loaded by the team sync, only where database_url is set
    from sessionmem.storage.pg.store import TeamStore

# A search of the team database answers within this, or is a TeamUnavailable: a database that
# answers takes milliseconds to tens of them (the target: 25 ms at a million observations),
# one that does not can hold a connection attempt for its whole connect timeout (5 s, the team sync's).
TEAM_SEARCH_TIMEOUT_S = 4.0


class TeamSearch:
    """Searches of the team database with this worker's embedder and its index's model; see the module
    docstring."""

    def __init__(self, index: VectorIndex, embedder: EmbedderService) -> None:
        self._index = index
        self._embedder = embedder

    async def search(self, team: TeamStore, query: str, filters: SearchFilters, *,
                     mode: SearchMode = SearchMode.HYBRID, limit: int = 20, offset: int = 0) -> SearchResults:
        """The page ``offset``, ``limit`` of ``team``'s documents for ``query`` under ``filters``."""
        try:
            with trio.fail_after(TEAM_SEARCH_TIMEOUT_S):
                return await self._search(team, query, filters, mode=mode, limit=limit, offset=offset)
        except trio.TooSlowError:
            raise TeamUnavailable(f"the team database did not answer within {TEAM_SEARCH_TIMEOUT_S:g} s") from None

    async def _search(self, team: TeamStore, query: str, filters: SearchFilters, *, mode: SearchMode, limit: int,
                      offset: int) -> SearchResults:
        depth = candidate_depth(mode, limit, offset)
        words: list[RankedKey] = []
        meaning: list[RankedKey] = []
        vectors = "not asked"
        failures: list[TeamUnavailable] = []  # kept apart: an exception group would hide which one it was

        async def by_words() -> None:
            nonlocal words
            try:
                words = await team.search_text(query, filters, depth)
            except TeamUnavailable as exc:
                failures.append(exc)

        async def by_meaning() -> None:
            nonlocal meaning, vectors
            if not self._index.enabled:
                vectors = "off"
                return
            vector = await embed_query(self._embedder, query)
            if vector is None:
                vectors = "failed"
                return
            try:
                nearest = await team.nearest(vector, depth, filters, model=self._index.model_id)
            except TeamUnavailable as exc:
                failures.append(exc)
                return
            # As in local search: a vector pointing away from the query is no match.
            meaning = [key for key in nearest if key.score >= 1.0 - MAX_VECTOR_DISTANCE]
            vectors = "used"

        # Both at once: the query is embedded while the team database searches its words.
        async with trio.open_nursery() as nursery:
            if mode is not SearchMode.VECTOR:
                nursery.start_soon(by_words)
            if mode is not SearchMode.FTS:
                nursery.start_soon(by_meaning)
        if failures:
            raise failures[0]
        ranked = ranking(mode, words, meaning, {})
        page = ranked[offset : offset + limit]
        found = await team.cards([(kind, row_id) for kind, row_id, _ in page])
        cards = {key: team_card.card for key, team_card in found.items()}
        results = page_results(page, cards, query, words, meaning, source=SearchSource.TEAM)
        return SearchResults(query, mode, vectors, results, offset, limit, more=len(ranked) > offset + limit,
                             source=SearchSource.TEAM)
