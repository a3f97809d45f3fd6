"""File recall's rows, kept for every session until an observation about the file is stored.

Every PostToolUse of a file asks for the file's past (:func:`~sessionmem.storage.recall.file_memories`),
and a session reads and edits the same files again and again: in the corpus, 750 of
1,344 file tool uses were of a file the session had already used. Sessions of a project
work on the same files too, so what is kept is not one session's answer but the rows
every session's answer is chosen from (:func:`~sessionmem.storage.recall.file_memory_rows`
of every session, :data:`ROWS_KEPT` at most): a session asking for a file another
session asked for reads nothing. Kept rows change only when an observation touching a
file of the same name is stored (an offline compressor's bare read is never recalled
and changes nothing: :func:`~sessionmem.storage.recall.recallable_files`) or memories
are imported. A session's own memories are never its answer, so rows stay good for the
session that stored (a session edits, then reads the file again) and go stale for every
other; a store of a second session drops them. (Kept rows may hold an observation that a fresh
lookup would no longer reach, among the file's newest uses, because reads of the file
came after it: an older memory of the file, not a wrong one.)

Before, answers were kept per asking session, and a store by any other session dropped
them: under the bench's 64 sessions of one project almost every lookup read SQLite
(107 hits of 7,016), and file recall cost the closed loop a quarter of its accepts
(bench/README, "File recall's rows kept for every session").

Freshness: a lookup takes a :meth:`FileRecallCache.ticket` before it reads, and its
rows are kept only if no store touching the file's name came in between
(:meth:`FileRecallCache.put`): rows read before a commit and finished after it
are never kept. The stores are known by name for the newest ``capacity`` names; a ticket
older than the names forgotten is refused.

Resource handling:
    In memory, at most ``capacity`` files' rows (least recently used dropped first).
    Used from the Trio thread only: no locks.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

import msgspec

from sessionmem.records import FileMemory
from sessionmem.storage.recall import file_name

CAPACITY = 4096
# The rows kept for a file: its newest memories of every session. An asking session whose own
# memories crowd the others out of them is answered by a read of its own (SQLiteStore.file_memories).
ROWS_KEPT = 64

Key = tuple[str, str]  # project, path as asked


class FileRecallCacheStatistics(msgspec.Struct, frozen=True):
    entries: int
    hits: int
    misses: int
    dropped: int  # rows dropped: two sessions stored observations about their file, or memories were imported


def _names_of_stored(path: str) -> set[str]:
    """The names of the lookups a stored path can answer: its ``basename`` column (what follows the
    last ``/``) and, for a path ending in ``/``, what a lookup of that same path goes by."""
    return {path.rsplit("/", 1)[-1], file_name(path)}


def _may_answer(asked: str, stored: list[str]) -> bool:
    """Whether a lookup of ``asked`` may find one of ``stored``: the same path, or one ending in it
    (the lookup's rule, :func:`~sessionmem.storage.recall.file_params`, folding case more widely
    than SQLite's ``LIKE`` does: rows are dropped when in doubt, never kept). Files of the same
    name elsewhere (``__init__.py``, ``README.md``) leave them alone."""
    path = asked.strip()
    end = "/" + path.lstrip("/").lower()
    return any(candidate == path or candidate.lower().endswith(end) for candidate in stored)


class FileRecallCache:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self._capacity = capacity
        self._rows: OrderedDict[Key, list[FileMemory]] = OrderedDict()
        # Rows one session has stored about since they were read: still its answer (its own
        # memories never are), stale for every other session.
        self._only_for: dict[Key, str] = {}
        self._by_name: dict[str, set[Key]] = {}
        # When each file name was last touched by a store (a sequence number), for the newest
        # ``capacity`` names; a ticket older than what was forgotten (``_floor``) is refused.
        self._sequence = self._floor = 0
        self._touched: OrderedDict[str, int] = OrderedDict()
        self._hits = self._misses = self._dropped = 0

    def statistics(self) -> FileRecallCacheStatistics:
        return FileRecallCacheStatistics(len(self._rows), self._hits, self._misses, self._dropped)

    def get(self, key: Key, claude_session_id: str) -> list[FileMemory] | None:
        """The rows kept for the file, newest first, good for answering ``claude_session_id``; ``None``
        when none are."""
        rows = self._rows.get(key)
        if rows is None or self._only_for.get(key, claude_session_id) != claude_session_id:
            self._misses += 1
            return None
        self._rows.move_to_end(key)
        self._hits += 1
        return rows

    def ticket(self) -> int:
        """Taken before a lookup's read; :meth:`put` keeps its rows only if still valid."""
        return self._sequence

    def put(self, key: Key, ticket: int, rows: list[FileMemory]) -> None:
        name = file_name(key[1])
        if ticket < self._floor or self._touched.get(name, -1) > ticket:
            return  # a store about this file (or a clear) may have come in between: the rows may be stale
        self._rows[key] = rows
        self._rows.move_to_end(key)
        self._only_for.pop(key, None)
        self._by_name.setdefault(name, set()).add(key)
        while len(self._rows) > self._capacity:
            oldest, _ = self._rows.popitem(last=False)
            self._forget(oldest)

    def stored(self, claude_session_id: str, paths: Iterable[str]) -> None:
        """Observations of ``claude_session_id`` touching ``paths`` were committed."""
        paths = list(paths)
        for name in {name for path in paths for name in _names_of_stored(path)}:
            self._sequence += 1
            self._touched[name] = self._sequence
            self._touched.move_to_end(name)
            while len(self._touched) > self._capacity:
                _, sequence = self._touched.popitem(last=False)
                self._floor = max(self._floor, sequence)
            for key in [key for key in self._by_name.get(name, ()) if _may_answer(key[1], paths)]:
                if self._only_for.setdefault(key, claude_session_id) != claude_session_id:
                    del self._rows[key]  # stale for every session now
                    self._forget(key)
                    self._dropped += 1

    def clear(self) -> None:
        """Forget every file's rows (memories were imported)."""
        self._dropped += len(self._rows)
        self._rows.clear()
        self._only_for.clear()
        self._by_name.clear()
        self._sequence += 1
        self._floor = self._sequence  # every ticket taken before now is void

    def _forget(self, key: Key) -> None:
        self._only_for.pop(key, None)
        name = file_name(key[1])
        keys = self._by_name.get(name)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_name[name]
