"""File recall's rows, kept for every session and kept up to date as observations are stored.

Every PostToolUse of a file asks for the file's past
(:func:`~sessionmem.storage.sqlite.file_memories.file_memories`), and a session reads and edits the
same files again and again. Sessions of a project work on the same files too, so what is
kept is not one session's answer but the rows every session's answer is chosen from
(:func:`~sessionmem.storage.sqlite.file_memories.file_memory_rows` of every session,
:data:`ROWS_KEPT` at most): a session asking for a file another session asked for reads
nothing. When observations are stored, each joins the front of the rows kept for the files
a lookup would find it for (:func:`~sessionmem.storage.sqlite.file_memories.recalled_as`, the
lookup's SQL rule in Python, tested against it): the rows stay what a fresh read would
give, and nobody reads again. A store by one session therefore never drops the rows
another session reads. (Kept rows may still hold an observation that a fresh lookup would
no longer reach, among the file's newest uses, because reads of the file came after it: an
older memory of the file, not a wrong one.) An import forgets them all.

Freshness: a lookup takes a :meth:`FileRecallCache.ticket` before it reads, and what was
stored after that joins its rows when they are kept (:meth:`FileRecallCache.put`),
whether the read saw it or not: rows are never kept without a store that committed while
they were read. The newest :data:`STORES_KNOWN` stores are known; rows read before the
oldest of them, or before an import, are not kept.

Where file names match in any case (``fold_case``: a disk that ignores case), the rows are kept
for the path in lower case (ASCII, as the lookup folds it): ``README.md`` and ``readme.md`` are one
file, and one entry.

Resource handling:
    In memory, at most ``capacity`` files' rows (least recently used dropped first) and
    the newest ``stores_known`` stores. Used from the Trio thread only: no locks.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass

from sessionmem.protocol.agents import DEFAULT_AGENT
from sessionmem.records import CompressedObservation, FileMemory
from sessionmem.storage.base import FileRecallCacheStatistics
from sessionmem.storage.search_terms import file_name
from sessionmem.storage.sqlite.file_memories import recallable_files, recalled_as
from sessionmem.storage.sqlite.fulltext import ascii_folded

CAPACITY = 4096
# Stores remembered for rows read while they committed: a read takes milliseconds, and under the
# bench's closed loop about 200 stores commit a second. Each holds its observations (a few KB).
STORES_KNOWN = 256
# The rows kept for a file: its newest memories of every session. An asking session whose own
# memories crowd the others out of them is answered by a read of its own (SQLiteStore.file_memories).
ROWS_KEPT = 64

Key = tuple[str, str]  # project, path as asked (in lower case where names match in any case)


def _names_of_stored(path: str, fold_case: bool) -> set[str]:
    """The names of the lookups a stored path can answer: its ``basename`` column (what follows the
    last ``/``) and, for a path ending in ``/``, what a lookup of that same path goes by (in lower
    case with ``fold_case``)."""
    names = {path.rsplit("/", 1)[-1], file_name(path)}
    return {ascii_folded(name) for name in names} if fold_case else names


@dataclass(frozen=True)
class _Store:
    """Observations stored together, and the names of the files they may be recalled for."""

    sequence: int
    claude_session_id: str
    project: str
    observations: Sequence[tuple[int, float, CompressedObservation]]
    names: frozenset[str]
    agent: str  # the session's (protocol/agents.py)


class FileRecallCache:
    def __init__(self, capacity: int = CAPACITY, rows_kept: int | None = None, stores_known: int | None = None,
                 *, fold_case: bool = False) -> None:
        self.fold_case = fold_case  # file names match in any ASCII case (a disk that ignores case)
        self._capacity = capacity  # files' rows kept, at most
        self.rows_kept = rows_kept or ROWS_KEPT  # at most, for a file
        self._stores_known = stores_known or STORES_KNOWN
        self._rows: OrderedDict[Key, list[FileMemory]] = OrderedDict()
        self._by_name: dict[str, set[Key]] = {}
        # The newest stores, numbered, for rows read while they committed (see put); a ticket
        # older than the stores forgotten (``_floor``) is refused.
        self._sequence = self._floor = 0
        self._log: deque[_Store] = deque()
        self._hits = self._misses = self._dropped = 0

    def statistics(self) -> FileRecallCacheStatistics:
        return FileRecallCacheStatistics(len(self._rows), self._hits, self._misses, self._dropped)

    def key(self, project: str, path: str) -> Key:
        """The key of ``path``'s rows in ``project``: the path in lower case where names match in any case."""
        return (project, ascii_folded(path) if self.fold_case else path)

    def get(self, key: Key) -> list[FileMemory] | None:
        """The rows kept for the file, newest first; ``None`` when none are kept."""
        rows = self._rows.get(key)
        if rows is None:
            self._misses += 1
            return None
        self._rows.move_to_end(key)
        self._hits += 1
        return rows

    def ticket(self) -> int:
        """Taken before a lookup's read: :meth:`put` joins to its rows what was stored since."""
        return self._sequence

    def put(self, key: Key, ticket: int, rows: list[FileMemory]) -> None:
        """Keep ``rows``, read for ``key`` after :meth:`ticket` gave ``ticket``. What was stored since
        joins them: the read saw it or not (a row it saw is not joined twice). Rows read before a
        clear, or before the stores still known, are not kept."""
        if ticket < self._floor:
            return
        name = file_name(key[1])
        for store in reversed(self._log):
            if store.sequence <= ticket:
                break
            if store.project == key[0] and name in store.names:
                rows = self._joined(key[1], store.claude_session_id, store.observations, rows, store.agent)
        self._rows[key] = rows
        self._rows.move_to_end(key)
        self._by_name.setdefault(name, set()).add(key)
        while len(self._rows) > self._capacity:
            oldest, _ = self._rows.popitem(last=False)
            self._forget(oldest)

    def stored(self, claude_session_id: str, project: str,
               observations: Sequence[tuple[int, float, CompressedObservation]], *,
               agent: str = DEFAULT_AGENT) -> None:
        """Observations of ``claude_session_id`` (a session of ``agent``) in ``project`` were committed, with
        their ids and times: each joins the front of the rows kept for every file a lookup of which would find it
        (:func:`~sessionmem.storage.sqlite.file_memories.recalled_as`), as a fresh read would have it there."""
        names = frozenset(name for _, _, observation in observations for path in recallable_files(observation)
                          for name in _names_of_stored(path, self.fold_case))
        if not names:
            return
        self._sequence += 1
        self._log.append(_Store(self._sequence, claude_session_id, project, observations, names, agent))
        if len(self._log) > self._stores_known:
            self._floor = self._log.popleft().sequence
        for name in names:
            for key in self._by_name.get(name, ()):
                if key[0] == project:
                    self._rows[key] = self._joined(key[1], claude_session_id, observations, self._rows[key],
                                                   agent)

    def _joined(self, asked: str, claude_session_id: str,
                observations: Sequence[tuple[int, float, CompressedObservation]],
                rows: list[FileMemory], agent: str) -> list[FileMemory]:
        """``rows`` with those of ``observations`` a lookup of ``asked`` finds in front, newest first, at
        most ``rows_kept``. (A row already there was read after its commit, before this call.)"""
        there = {row.id for row in rows}
        new = [FileMemory(id=row_id, claude_session_id=claude_session_id, created_at=created_at,
                          type=observation.type, title=observation.title, subtitle=observation.subtitle,
                          facts=list(observation.facts), modified=modified, provenance=str(observation.provenance),
                          flagged=observation.flagged, agent=agent)
               for row_id, created_at, observation in observations
               if row_id not in there
               and (modified := recalled_as(asked, observation, fold_case=self.fold_case)) is not None]
        if not new:
            return rows
        return sorted(new + rows, key=lambda row: -row.id)[: self.rows_kept]

    def clear(self) -> None:
        """Forget every file's rows (memories were imported)."""
        self._dropped += len(self._rows)
        self._rows.clear()
        self._by_name.clear()
        self._log.clear()
        self._sequence += 1
        self._floor = self._sequence  # every ticket taken before now is void

    def _forget(self, key: Key) -> None:
        name = file_name(key[1])
        keys = self._by_name.get(name)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_name[name]
