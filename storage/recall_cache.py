"""File recall's answers, kept until an observation about the file is stored.

Every PostToolUse of a file asks for the file's past (:func:`~sessionmem.storage.recall.file_memories`),
and a session reads and edits the same files again and again: in the corpus, 750 of
1,344 file tool uses were of a file the session had already used. The answer for a
(project, path, session) changes only when an observation touching a file of the same
name is stored by *another* session (the asking session's own observations are left out
of its answers; an offline compressor's bare read is never an answer:
:func:`~sessionmem.storage.recall.recallable_files`) or memories are imported. So answers
are kept, and dropped when that happens. (An answer kept may hold an observation that a
fresh lookup would no longer reach, among the file's newest uses, because another
session's reads of the file came after it: an older memory of the file, not a wrong one.)

Freshness: a lookup takes a :meth:`FileRecallCache.ticket` before it reads, and its
answer is kept only if no store touching the file's name came in between
(:meth:`FileRecallCache.put`): an answer read before a commit and finished after it
is never kept. The stores are known by name for the newest ``capacity`` names; a ticket
older than the names forgotten is refused.

Resource handling:
    In memory, at most ``capacity`` answers (least recently used dropped first). Used
    from the Trio thread only: no locks.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

import msgspec

from sessionmem.records import FileMemory
from sessionmem.storage.recall import file_name

CAPACITY = 4096

Key = tuple[str, str, str, int]  # project, path as asked, the asking session, how many


class FileRecallCacheStatistics(msgspec.Struct, frozen=True):
    entries: int
    hits: int
    misses: int
    dropped: int  # answers dropped: an observation about their file was stored, or memories imported


def _names_of_stored(path: str) -> set[str]:
    """The names of the lookups a stored path can answer: its ``basename`` column (what follows the
    last ``/``) and, for a path ending in ``/``, what a lookup of that same path goes by."""
    return {path.rsplit("/", 1)[-1], file_name(path)}


class FileRecallCache:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self._capacity = capacity
        self._answers: OrderedDict[Key, list[FileMemory]] = OrderedDict()
        self._by_name: dict[str, set[Key]] = {}
        # When each file name was last touched by a store (a sequence number), for the newest
        # ``capacity`` names; a ticket older than what was forgotten (``_floor``) is refused.
        self._sequence = self._floor = 0
        self._touched: OrderedDict[str, int] = OrderedDict()
        self._hits = self._misses = self._dropped = 0

    def statistics(self) -> FileRecallCacheStatistics:
        return FileRecallCacheStatistics(len(self._answers), self._hits, self._misses, self._dropped)

    def get(self, key: Key) -> list[FileMemory] | None:
        answer = self._answers.get(key)
        if answer is None:
            self._misses += 1
            return None
        self._answers.move_to_end(key)
        self._hits += 1
        return answer

    def ticket(self) -> int:
        """Taken before a lookup's read; :meth:`put` keeps its answer only if still valid."""
        return self._sequence

    def put(self, key: Key, ticket: int, answer: list[FileMemory]) -> None:
        name = file_name(key[1])
        if ticket < self._floor or self._touched.get(name, -1) > ticket:
            return  # a store about this file (or a clear) may have come in between: the answer may be stale
        self._answers[key] = answer
        self._answers.move_to_end(key)
        self._by_name.setdefault(name, set()).add(key)
        while len(self._answers) > self._capacity:
            oldest, _ = self._answers.popitem(last=False)
            self._forget(oldest)

    def stored(self, claude_session_id: str, paths: Iterable[str]) -> None:
        """Observations of ``claude_session_id`` touching ``paths`` were committed."""
        for name in {name for path in paths for name in _names_of_stored(path)}:
            self._sequence += 1
            self._touched[name] = self._sequence
            self._touched.move_to_end(name)
            while len(self._touched) > self._capacity:
                _, sequence = self._touched.popitem(last=False)
                self._floor = max(self._floor, sequence)
            for key in list(self._by_name.get(name, ())):
                if key[2] != claude_session_id:  # the storing session's own answers leave its observations out
                    del self._answers[key]
                    self._forget(key)
                    self._dropped += 1

    def clear(self) -> None:
        """Forget every answer (memories were imported)."""
        self._dropped += len(self._answers)
        self._answers.clear()
        self._by_name.clear()
        self._sequence += 1
        self._floor = self._sequence  # every ticket taken before now is void

    def _forget(self, key: Key) -> None:
        name = file_name(key[1])
        keys = self._by_name.get(name)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_name[name]
