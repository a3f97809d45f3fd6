"""What a session was already told: each memory is handed over once in what its model sees.

SessionStart's context, the prompt recall and the file recall all tell the agent about past
memories; :class:`ToldLedger` remembers, per session, which ones (an observation or a
summary, by kind and row id), so that none of the three hands over again what another (or
itself) already said in the same session.

A compaction replaces the session's context with a summary: what it was told before is gone
from it. The ledger learns of one two ways: the checkpoint the agent's PreCompact sends
(:meth:`ToldLedger.compacting`, said at once, before the compaction) and the SessionStart after
it (``source=compact``). Each SessionStart asks :meth:`ToldLedger.begin_handover` which
:class:`Handover` it makes:

- :attr:`Handover.AFTER_COMPACTION`, the first handover since a compaction: the session's own
  work first, and what it was told before may be told again. Claude Code compacts, then fires
  SessionStart ``compact``; Codex 0.169.0, compacting a resumed session before its turn, fires
  PreCompact and PostCompact, then SessionStart ``resume``, then SessionStart ``compact``: the
  ``resume`` one is the first handover into the compacted context, so it is this one.
- :attr:`Handover.AGAIN`, a SessionStart ``compact`` or ``resume`` after that first handover with
  no prompt between (Codex's second one): both texts reach the same model request, so this one
  hands over only what the first did not.
- :attr:`Handover.ORDINARY` otherwise: the memories the session was not told. A ``startup`` or
  ``clear`` begins a new conversation: it is always this one, and ends a compaction's wait for its
  handover.

A PreCompact not seen live (spooled, or sent by a hook that does not say it compacts) leaves the
SessionStart ``compact`` to say it: that handover is :attr:`Handover.AFTER_COMPACTION` too, and
in Codex's case memory may then be told twice, never missed. A prompt starts a new model
request: it ends what a later SessionStart could share a request with, and a compaction whose
SessionStart never came is taken as not made. A handover is recorded once made
(:meth:`ToldLedger.handed`): one cancelled on the way (its hook out of time) leaves the next
SessionStart to be the first after the compaction.

Resource handling:
    Bounded memory: the newest :data:`SESSIONS_TRACKED` sessions are remembered, each up to
    :data:`TOLD_PER_SESSION` memories (past that, more is handed over rather than remembered:
    a repeat is cheaper than an unbounded set). Nothing is stored: a restarted worker has
    forgotten, and at worst tells a memory twice.

Error handling:
    Nothing raises: an unknown session is one that was told nothing.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from sessionmem.records import OBSERVATION

SESSIONS_TRACKED = 1000
TOLD_PER_SESSION = 500
# A SessionStart this long after the session's first handover since its compaction, with no prompt between,
# is not taken as Codex's second one into the same request (a ``compact`` one is then after another compaction
# whose PreCompact the worker did not see): Codex runs its two hooks one after the other, each within its 10 s
# timeout. A bound for when a prompt was missed too, never the rule itself.
SAME_REQUEST_S = 60.0
COMPACT_SOURCE = "compact"
# The SessionStart sources that go on with the session's conversation as it is (``startup`` and ``clear``
# begin a new one): after a compaction, the compacted one.
CONTINUING_SOURCES = (COMPACT_SOURCE, "resume")

# A memory told: (kind, row id), kind "observation" or "summary" (sessionmem.records).
Told = tuple[str, int]


class Handover(enum.Enum):
    """What a SessionStart hands over (see the module docstring)."""

    ORDINARY = "ordinary"
    AFTER_COMPACTION = "after_compaction"
    AGAIN = "again"


@dataclass
class _Context:
    """What the worker knows of one session's context."""

    told: set[Told] = field(default_factory=set)
    compacted: bool = False  # a PreCompact came, and no handover since
    # When the first handover since its latest compaction was made (None: none since its latest prompt).
    handed_after_compaction: float | None = None


class ToldLedger:
    def __init__(self) -> None:
        self._sessions: OrderedDict[str, _Context] = OrderedDict()

    def _of(self, claude_session_id: str) -> _Context:
        context = self._sessions.get(claude_session_id)
        if context is None:
            context = self._sessions[claude_session_id] = _Context()
            while len(self._sessions) > SESSIONS_TRACKED:
                self._sessions.popitem(last=False)
        self._sessions.move_to_end(claude_session_id)
        return context

    def told(self, claude_session_id: str) -> frozenset[Told]:
        """What ``claude_session_id`` was already told (empty for a session not known)."""
        context = self._sessions.get(claude_session_id)
        return frozenset(context.told) if context is not None else frozenset()

    def observations(self, claude_session_id: str) -> list[int]:
        """The observations ``claude_session_id`` was already told (what consolidation counts as handed over)."""
        return [row_id for kind, row_id in self.told(claude_session_id) if kind == OBSERVATION]

    def tell(self, claude_session_id: str, memories: Iterable[Told]) -> list[Told]:
        """Of ``memories``, those not yet told in ``claude_session_id`` (in their order), now counted as told."""
        if not claude_session_id:
            return list(memories)
        told = self._of(claude_session_id).told
        fresh = list(dict.fromkeys(memory for memory in memories if memory not in told))
        if len(told) + len(fresh) <= TOLD_PER_SESSION:
            told.update(fresh)
        return fresh

    def compacting(self, claude_session_id: str) -> None:
        """``claude_session_id``'s agent is about to compact its context (its PreCompact, seen live): what it
        was told is gone from it, and the next SessionStart is the first handover into the new one."""
        if not claude_session_id:
            return
        context = self._of(claude_session_id)
        context.told.clear()
        context.compacted = True
        context.handed_after_compaction = None

    def prompted(self, claude_session_id: str) -> None:
        """A prompt of ``claude_session_id`` arrived: a new model request, after any handover before it."""
        context = self._sessions.get(claude_session_id)
        if context is not None:
            context.compacted = False
            context.handed_after_compaction = None

    def begin_handover(self, claude_session_id: str, source: str, now: float) -> Handover:
        """Which handover a SessionStart of ``claude_session_id`` with ``source`` makes at ``now`` (a monotonic
        time in seconds). Only forgetting happens here (what was told before a compaction): a handover that
        never completes (its hook gave up, the worker stopped) leaves the next one to be the first;
        :meth:`handed` records it once made. Two of one session must not run at once (the caller's lock)."""
        context = self._sessions.get(claude_session_id) if claude_session_id else None
        if context is None or source not in CONTINUING_SOURCES:
            if source == COMPACT_SOURCE and claude_session_id:  # a compaction the worker did not see coming
                return Handover.AFTER_COMPACTION
            return Handover.ORDINARY
        if context.compacted:
            return Handover.AFTER_COMPACTION
        begun = context.handed_after_compaction
        if begun is not None and now - begun <= SAME_REQUEST_S:
            return Handover.AGAIN
        if source != COMPACT_SOURCE:
            return Handover.ORDINARY
        context.told.clear()  # a compaction its PreCompact did not announce: told again in full
        return Handover.AFTER_COMPACTION

    def handed(self, claude_session_id: str, handover: Handover, source: str, memories: Iterable[Told],
               now: float) -> None:
        """The SessionStart's ``handover`` (of :meth:`begin_handover`, with ``source``) was made at ``now``,
        telling ``memories``."""
        if not claude_session_id:
            return
        context = self._of(claude_session_id)
        if handover is Handover.AFTER_COMPACTION:
            context.compacted = False
            context.handed_after_compaction = now
        elif source not in CONTINUING_SOURCES:
            context.compacted = False  # a new conversation: not the compacted one
        self.tell(claude_session_id, memories)
