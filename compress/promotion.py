"""Never promoted: instruction-like text from a tool's output stays quoted, out of the fields read as conclusions.

Every compressor's observations and summaries pass through here before they leave it
(:mod:`.offline`, and :mod:`.llm` for the model-backed ones), so no compressor, and no
model steered by what it read, puts text that reads as orders to an AI
(:mod:`sessionmem.protocol.instructions`) into an observation's title or subtitle, or a
summary's "Learned" or "Next steps". Such text is kept as quoted text (in the facts, the
narrative, the notes), and the memory is flagged, as is one whose tool output held such
text, whatever the compressor kept of it: a memory is as trusted as its least trusted
source. Provenance is the compressor's to say (rules: ``tool``; a model: ``model``).

The tool's output is read once per tool use, bounded (:func:`tool_output_text`).
"""

from __future__ import annotations

import functools
import json
import posixpath
from collections.abc import Callable, Sequence
from typing import Any

import ahocorasick_rs
import msgspec

from sessionmem.events import ObservationEvent, SummarizeEvent
from sessionmem.protocol.instructions import guard_observation, guard_summary, instruction_like, needles
from sessionmem.records import CompressedObservation, CompressedSummary, ObservationRow, Provenance

# What is read of one tool use's output, all its strings together: its first OUTPUT_HEAD and last
# OUTPUT_TAIL characters. More than any compressor reads of it (the offline one its first and last
# 3,000 characters, a model 4,000 characters of it, start and end): a memory is flagged for what it
# could have been made from. Reading all of a 64 KiB output would cost three times the offline
# compressor's own work (bench/instruction_rate.py).
OUTPUT_HEAD = 12 * 1024
OUTPUT_TAIL = 4 * 1024
SOURCE = "tool output"


def tool_output_text(response: Any, error: str = "") -> str:
    """The text of a tool's output as the detector reads it: the error of a failed use, then every string
    of its response (nested values too), in order; a long one by its start and its end. Bounded in size
    and work whatever the response holds."""
    found: list[str] = [error] if error else []
    size = len(error)
    stack = [response]
    while stack and size < 4 * (OUTPUT_HEAD + OUTPUT_TAIL):  # enough for the start and the end
        value = stack.pop()
        if isinstance(value, str):
            if len(value) > OUTPUT_HEAD + OUTPUT_TAIL:
                value = f"{value[:OUTPUT_HEAD]}\n{value[-OUTPUT_TAIL:]}"
            found.append(value)
            size += len(value)
        elif isinstance(value, dict):
            stack.extend(reversed(list(value.values())))
        elif isinstance(value, list):
            stack.extend(reversed(value))
    text = "\n".join(found)
    return text if len(text) <= OUTPUT_HEAD + OUTPUT_TAIL else f"{text[:OUTPUT_HEAD]}\n{text[-OUTPUT_TAIL:]}"


@functools.cache
def needle_finder() -> Callable[[str], set[str]]:
    """The detector's needles found in one pass (an Aho-Corasick automaton, as the redactor's
    triggers are): a tool output is read once, not once a needle (bench/instruction_rate.py
    measures both). A needle of one character is looked for by ``in`` (memchr speed; it is in
    nearly every text, and the automaton would list each place)."""
    many = [needle for needle in needles() if len(needle) > 1]
    single = [needle for needle in needles() if len(needle) == 1]
    automaton = ahocorasick_rs.AhoCorasick(many, implementation=ahocorasick_rs.Implementation.DFA)

    def held(text: str) -> set[str]:
        found = {many[index] for index, _, _ in automaton.find_matches_as_indexes(text, overlapping=True)}
        found.update(needle for needle in single if needle in text)
        return found

    return held


def withheld_title(event: ObservationEvent) -> str:
    """The title of an observation whose own title was withheld: the tool, and that it failed."""
    return f"{'Failed: ' if event.failed else ''}{event.tool_name}: instruction-like text withheld (quoted in the facts)"


def guarded_observation(event: ObservationEvent, observation: CompressedObservation, *,
                        fallback_title: Callable[[], str] | None = None) -> CompressedObservation:
    """``observation`` with no instruction-like text in its title or subtitle, and flagged when it or the
    tool's output held some (see the module docstring). ``fallback_title``: a title to use instead of a
    withheld one (the offline compressor's, for a model's); else :func:`withheld_title`."""
    output = tool_output_text(event.tool_response, event.error)  # read once: for orders, and for files it names
    # A model's files: those its tool use names, none that reads as an order. The rules' are the tool's own.
    files_read, files_modified, ordering = observation.files_read, observation.files_modified, []
    if observation.provenance == Provenance.MODEL:
        named = f"{json.dumps(event.tool_input, ensure_ascii=False)}\n{output}"
        files_read, files_modified = grounded_files(files_read, named), grounded_files(files_modified, named)
        ordering = [name for name in (*files_read, *files_modified) if instruction_like(name, needle_finder())]
        files_read = tuple(name for name in files_read if name not in ordering)
        files_modified = tuple(name for name in files_modified if name not in ordering)
    guarded = guard_observation(
        title=observation.title, subtitle=observation.subtitle, facts=observation.facts,
        narrative=observation.narrative, concepts=observation.concepts, source=SOURCE,
        fallback_title=fallback_title if fallback_title is not None else withheld_title(event),
        tainted=observation.flagged or bool(ordering) or instruction_like(output, needle_finder()))
    if not guarded.flagged:
        unchanged = (files_read, files_modified) == (observation.files_read, observation.files_modified)
        return observation if unchanged else msgspec.structs.replace(observation, files_read=files_read,
                                                                      files_modified=files_modified)
    return msgspec.structs.replace(
        observation, title=guarded.title, subtitle=guarded.subtitle, facts=guarded.facts, narrative=guarded.narrative,
        concepts=guarded.concepts, files_read=files_read, files_modified=files_modified, flagged=True)


def grounded_files(files: tuple[str, ...], named: str) -> tuple[str, ...]:
    """Of the files a model named, those its tool use names too (``named``: its input, and its output as
    :func:`tool_output_text` reads it), by path or by name. File recall hands a memory over whenever a later
    session touches one of its files: a model steered by what it read must not attach its memory to
    ``~/.bashrc``."""
    return tuple(name for name in files if name in named or (
        (base := posixpath.basename(name.rstrip("/"))) and len(base) > 2 and base in named))


def guarded_summary(request: SummarizeEvent, inputs: Sequence[ObservationRow],
                    summary: CompressedSummary) -> CompressedSummary:
    """``summary`` with no instruction-like text in "Learned" or "Next steps" (moved, quoted, to its notes),
    and flagged when it, a flagged observation of its turn (of the session, when the turn is not known), or
    the assistant's last message held some."""
    number = request.prompt_number
    inputs = [row for row in inputs if row.prompt_number == number] if number else inputs
    fields = {"request": summary.request, "investigated": summary.investigated, "learned": summary.learned,
              "completed": summary.completed, "next_steps": summary.next_steps, "notes": summary.notes}
    from_flagged = (summary.flagged or any(row.flagged for row in inputs)
                    or instruction_like(request.last_assistant_message, needle_finder()))
    guarded, flagged = guard_summary(fields, source=SOURCE, tainted=from_flagged)
    if not flagged:
        return summary
    return msgspec.structs.replace(summary, **guarded, flagged=True)
