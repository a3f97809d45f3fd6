"""The rules of consolidation -- which memories are near-duplicates, which decision replaces another, how use
moves a memory in the ranking -- and the records the store answers the pass with.

The background pass (:mod:`~sessionmem.storage.consolidator`, writing through
:mod:`sessionmem.storage.sqlite.consolidation`) applies them, by rules alone, to every
observation once, whatever compressor wrote it:

- **Near-duplicates are merged.** Two observations are near-duplicates when they did the same thing
  (:func:`duplicate_key`: the same kind, tool, title without its line counts, files and command) and say
  about the same (:func:`near_duplicate`: 4 in 5 of their words, numbers aside, shared). The older joins
  the newer's group: the handover names the group's newest once, the viewer shows it "merged ×N".
  Failures are never merged: a failure repeated is news.
- **A later decision supersedes an earlier one about the same thing** (:func:`same_subject`: a file they
  both name, or most of the meaningful words of the shorter title). The handover shows the later; the
  earlier is marked superseded.
- **Use counts** (:func:`standing`): a memory handed over to a session that then read or changed one of
  its files (or fetched it through MCP) was used and ranks a little higher; one handed over again and again
  and never used decays.

Trust: a memory is only ever merged into, or superseded by, one of the same source (:func:`_source`: this
machine's own, the same teammate's, or imported from a file) that is not flagged (instruction-like text):
another machine's row, an imported one or a poisoned one cannot hide a memory from the handover.
"""

from __future__ import annotations

import hashlib
import re
from typing import Protocol

import msgspec

from sessionmem.records import ObservationRow, Provenance
from sessionmem.storage.search_terms import query_terms

NEAR_DUPLICATE = 0.8  # the share of their words (Jaccard) two observations of one key have in common
SAME_SUBJECT = 0.5  # the share of the shorter decision title's meaningful words the other has
SUBJECT_WORDS = 2  # ...and at least this many of them
USED_WEIGHT = 0.05  # added to the score of a memory used (at most, from USED_FULL uses)
USED_FULL = 3
UNUSED_WEIGHT = 0.05  # taken from one handed over and never used (at most, from UNUSED_FULL tellings)
UNUSED_FULL = 4

# A title's line counts ("Edited app.py (-2 +5 lines)", "Read app.py (120 lines)"): not what it did.
LINE_COUNTS = re.compile(r"\s*\((?:-\d+ \+\d+|\d+) lines?\)$")
_WORD = re.compile(r"\w+")
_NUMBER = re.compile(r"^\d+$")


class Use(msgspec.Struct, frozen=True):
    """How often a memory was handed over (to a session, once each) and then used."""

    told: int
    used: int


class ConsolidationStep(msgspec.Struct, frozen=True):
    consolidated: int  # observations consolidated in this step
    hidden: list[int]  # observations newly merged into another or superseded: no longer handed over
    uses: dict[int, Use]  # the new counts of the memories whose use changed
    behind: int  # observations waiting after these
    next_sessions: list[str]  # the sessions of the next batch (of as many observations as this one asked)


class Marks(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What consolidation says of one observation, for the viewer."""

    merged: int = 0  # near-duplicates merged into it
    supersedes: int = 0  # earlier decisions it replaced
    duplicate_of: int | None = None  # it was merged into the group handed over as this one (its newest)
    superseded_by: int | None = None  # a later decision about the same thing
    told: int = 0
    used: int = 0


class Consolidated(Protocol):
    """What the handover asks of consolidation, on the Trio thread, without a read
    (:class:`~sessionmem.storage.consolidator.Consolidator`)."""

    def is_hidden(self, observation_id: int) -> bool:
        """Merged into a near-duplicate, or superseded: not handed over."""

    def use(self, observation_id: int) -> Use | None: ...


class _NotConsolidated:
    def is_hidden(self, observation_id: int) -> bool:
        return False

    def use(self, observation_id: int) -> Use | None:
        return None


NOT_CONSOLIDATED: Consolidated = _NotConsolidated()  # consolidation off: everything handed over as stored


def duplicate_key(row: ObservationRow) -> str | None:
    """What near-duplicates of ``row`` share (a short hash), or ``None``: never merged (a failure, a flagged
    memory)."""
    if row.failed or row.type == "failure" or row.flagged:
        return None
    command = next((fact for fact in row.facts if fact.startswith("command: ")), "")
    return _digest("duplicate", _source(row), row.type, row.tool_name, LINE_COUNTS.sub("", row.title).casefold(),
                   *sorted(row.files_read), "|", *sorted(row.files_modified), "|", command)


def decision_may_supersede(row: ObservationRow) -> bool:
    """Whether ``row`` is a decision that may supersede an earlier one, or be superseded (not a flagged one)."""
    return row.type == "decision" and not row.failed and not row.flagged


def near_duplicate(newer: ObservationRow, older: ObservationRow) -> bool:
    """Whether two observations of one :func:`duplicate_key` say about the same: at least
    :data:`NEAR_DUPLICATE` of their words shared, every number one word."""
    first, second = _words(newer), _words(older)
    if not first and not second:
        return True
    return len(first & second) / len(first | second) >= NEAR_DUPLICATE


def same_subject(later: ObservationRow, earlier: ObservationRow) -> bool:
    """Whether two decisions are about the same thing: a file both name, or :data:`SAME_SUBJECT` of the
    shorter title's meaningful words (at least :data:`SUBJECT_WORDS`) in the other's."""
    if _source(later) != _source(earlier):
        return False
    if set(later.files_read + later.files_modified) & set(earlier.files_read + earlier.files_modified):
        return True
    first, second = set(query_terms(later.title.casefold())), set(query_terms(earlier.title.casefold()))
    shared = len(first & second)
    return shared >= SUBJECT_WORDS and shared >= SAME_SUBJECT * min(len(first), len(second))


def standing(use: Use | None) -> float:
    """What use adds to (or takes from) a memory's score: up to :data:`USED_WEIGHT` when it was used, down to
    minus :data:`UNUSED_WEIGHT` when it was handed over and never used."""
    if use is None:
        return 0.0
    if use.used:
        return USED_WEIGHT * min(use.used, USED_FULL) / USED_FULL
    return -UNUSED_WEIGHT * min(use.told, UNUSED_FULL) / UNUSED_FULL


def _source(row: ObservationRow) -> str:
    """Whose a memory is, for consolidation: its origin (this machine's, or one teammate's), and whether it was
    imported from a file. Only memories of one source merge or supersede: an import (whatever it claims) or
    another machine's row cannot hide what this machine's sessions learned."""
    return f"{row.origin}\x1f{'import' if row.provenance == Provenance.IMPORT else ''}"


def _words(row: ObservationRow) -> set[str]:
    found: set[str] = set()
    for part in (row.title, row.subtitle, row.narrative, *row.facts):
        found.update("#" if _NUMBER.match(word) else word for word in _WORD.findall(part.casefold()))
    return found


def _digest(*parts: str) -> str:
    return hashlib.blake2b("\x1f".join(parts).encode(), digest_size=12).hexdigest()
