"""What a session was already told: each memory is handed over once a session.

SessionStart's context, the prompt recall and the file recall all tell Claude about past
memories; :class:`ToldLedger` remembers, per Claude Code session, which ones (an observation
or a summary, by kind and row id), so that none of the three hands over again what another
(or itself) already said in the same session. A compaction empties the session's own record
(:meth:`ToldLedger.forget`): what it was told before is gone from Claude's context, so the
context after it may say it again.

Resource handling:
    Bounded memory: the newest :data:`SESSIONS_TRACKED` sessions are remembered, each up to
    :data:`TOLD_PER_SESSION` memories (past that, more is handed over rather than remembered:
    a repeat is cheaper than an unbounded set). Nothing is stored: a restarted worker has
    forgotten, and at worst tells a memory twice.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from sessionmem.records import OBSERVATION

SESSIONS_TRACKED = 1000
TOLD_PER_SESSION = 500

# A memory told: (kind, row id), kind "observation" or "summary" (sessionmem.records).
Told = tuple[str, int]


class ToldLedger:
    def __init__(self) -> None:
        self._told: OrderedDict[str, set[Told]] = OrderedDict()

    def _of(self, claude_session_id: str) -> set[Told]:
        told = self._told.setdefault(claude_session_id, set())
        self._told.move_to_end(claude_session_id)
        while len(self._told) > SESSIONS_TRACKED:
            self._told.popitem(last=False)
        return told

    def told(self, claude_session_id: str) -> frozenset[Told]:
        """What ``claude_session_id`` was already told (empty for a session not known)."""
        return frozenset(self._told.get(claude_session_id, ()))

    def observations(self, claude_session_id: str) -> list[int]:
        """The observations ``claude_session_id`` was already told (what consolidation counts as handed over)."""
        return [row_id for kind, row_id in self._told.get(claude_session_id, ()) if kind == OBSERVATION]

    def tell(self, claude_session_id: str, memories: Iterable[Told]) -> list[Told]:
        """Of ``memories``, those not yet told in ``claude_session_id`` (in their order), now counted as told."""
        if not claude_session_id:
            return list(memories)
        told = self._of(claude_session_id)
        fresh = list(dict.fromkeys(memory for memory in memories if memory not in told))
        if len(told) + len(fresh) <= TOLD_PER_SESSION:
            told.update(fresh)
        return fresh

    def forget(self, claude_session_id: str) -> None:
        """``claude_session_id``'s context was compacted: what it was told may be told again."""
        self._told.pop(claude_session_id, None)
