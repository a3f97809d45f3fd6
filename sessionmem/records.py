"""What compression produces and storage keeps: observations and session summaries."""

from __future__ import annotations

import msgspec

OBSERVATION_TYPES = ("bugfix", "feature", "refactor", "change", "discovery", "decision", "failure")


class CompressedObservation(msgspec.Struct, frozen=True):
    """The structured, searchable form of one tool use."""

    type: str
    title: str
    subtitle: str = ""
    facts: tuple[str, ...] = ()
    narrative: str = ""
    concepts: tuple[str, ...] = ()
    files_read: tuple[str, ...] = ()
    files_modified: tuple[str, ...] = ()
    compressed: bool = True  # False: LLM output unusable, fields built from the raw tool data
    compressor: str = "offline"
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0


class CompressedSummary(msgspec.Struct, frozen=True):
    request: str = ""
    investigated: str = ""
    learned: str = ""
    completed: str = ""
    next_steps: str = ""
    notes: str = ""
    compressed: bool = True
    compressor: str = "offline"
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
