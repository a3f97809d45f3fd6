"""The offline compressor: useful observations and summaries from the tool data alone.

Deterministic and network-free, it is the embedded default and the anthropic backend's
fallback per batch. An observation is a tool's rule (:mod:`.offline_rules`, one small function
per tool) made into a record: its title and what it found or changed, in the words a search for
it would use. A summary says what the turn was about -- the request, the files changed, how its
checks ended, the assistant's last message -- and never offers a failed command as something
learned. The text helpers both use: :mod:`.offline_text`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import msgspec

from sessionmem.compress.base import CompressorStatistics, SessionContext
from sessionmem.compress.offline_rules import TITLE_MAX, describe
from sessionmem.compress.offline_text import clip, relative
from sessionmem.compress.promotion import guarded_observation, guarded_summary
from sessionmem.events import ObservationEvent, SummarizeEvent
from sessionmem.records import (
    ROUTINE_CONCEPT,
    CompressedObservation,
    CompressedSummary,
    ObservationRow,
    Provenance,
    SummaryInputs,
)
from sessionmem.settings import Backend

# Facts that only repeat the command or give a count: not what a narrative or a summary should say.
_PLAIN_FACT = re.compile(r"^(?:command: |exit status \d+$|command failed$|done by |\S+ has \d+ lines$|\d+ lines read$"
                         r"|\d+ match)")


class OfflineCompressor:
    """See the module docstring. Stateless apart from counters."""

    name = Backend.OFFLINE

    def __init__(self, *, reason: str = "") -> None:
        self._reason = reason  # why the worker runs offline (``/debug``)
        self._observations = 0
        self._summaries = 0

    async def compress(self, context: SessionContext, events: Sequence[ObservationEvent]) -> list[CompressedObservation]:
        self._observations += len(events)
        return [build_offline_observation(context, event) for event in events]

    async def summarize(self, context: SessionContext, request: SummarizeEvent, inputs: SummaryInputs) -> CompressedSummary:
        self._summaries += 1
        return build_offline_summary(context, request, inputs)

    def statistics(self) -> CompressorStatistics:
        return CompressorStatistics(backend=self.name, tool_uses=self._observations, summaries=self._summaries,
                                    reason=self._reason)

    def seed_usage(self, tokens_today: int) -> None:
        return None  # no LLM, no budget

    async def warm_up(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


def build_offline_observation(
    context: SessionContext, event: ObservationEvent, *, compressor: str = Backend.OFFLINE, compressed: bool = True
) -> CompressedObservation:
    """Also used as the fallback when LLM output cannot be used (``compressed=False``). Guarded: no
    instruction-like text in its title or subtitle (:mod:`.promotion`)."""
    draft = describe(event, context)
    # The title and what it found or changed, in the words a search for it would use.
    told = [fact for fact in draft.facts if not _PLAIN_FACT.match(fact)][:2]
    narrative = draft.title + (f": {'; '.join(told)}" if told else "")
    if context.prompt:
        narrative = f"While working on “{clip(context.prompt, 120)}”: {narrative[0].lower()}{narrative[1:]}."
    return guarded_observation(event, CompressedObservation(
        type=draft.type,
        title=clip(draft.title, TITLE_MAX),
        subtitle=draft.subtitle,
        facts=tuple(draft.facts),
        narrative=narrative,
        concepts=tuple(dict.fromkeys(draft.concepts)),
        files_read=tuple(dict.fromkeys(p for p in draft.files_read if p)),
        files_modified=tuple(dict.fromkeys(p for p in draft.files_modified if p)),
        compressed=compressed,
        compressor=compressor,
        provenance=Provenance.TOOL,
    ))


def build_offline_summary(
    context: SessionContext,
    request: SummarizeEvent,
    inputs: SummaryInputs,
    *,
    compressor: str = Backend.OFFLINE,
    compressed: bool = True,
) -> CompressedSummary:
    """What the turn was about: the request, the files changed and how the checks ended (tests, builds),
    the assistant's last message; what was learned only from evidence (a failing check that then passed,
    a refusal of the user's, the reasons the last message gives); next steps only from a check still
    failing or the last message saying what remains. Routine commands count, nothing more. Guarded:
    no instruction-like text in "Learned" or "Next steps" (:mod:`.promotion`)."""
    # This turn's work only (a turn without tool use has none: another turn's is not its); the whole
    # session when the turn is not known (a stop of a session whose prompts were never seen).
    number = request.prompt_number
    turn = [o for o in inputs.observations if o.prompt_number == number] if number else inputs.observations
    cwd = context.cwd
    read = _unique(relative(p, cwd) for o in turn for p in o.files_read)
    modified = _unique(relative(p, cwd) for o in turn for p in o.files_modified)
    routine = sum(ROUTINE_CONCEPT in o.concepts for o in turn)
    failures = sum(o.failed for o in turn)

    # The turn's own prompt as stored, before what the transcript's last user line says (that can be
    # Claude Code's "[Request interrupted by user]", or a later turn's).
    stored = inputs.prompts[number - 1] if 0 < number <= len(inputs.prompts) else ""
    prompt = stored or request.last_user_message or (inputs.prompts[-1] if inputs.prompts else context.prompt)
    message = request.last_assistant_message or ""
    checks = [_check_story(turn, cwd, label) for label in _CHECKS]

    completed = []
    if modified:
        completed.append("Changed " + _listed(modified))
    completed.extend(story.outcome for story in checks if story.outcome)
    completed.extend(_unique(o.title for o in turn if o.type == "change" and o.title.startswith("Committed")))
    if message:
        completed.append(clip(message, 400))

    learned = [story.lesson for story in checks if story.lesson]
    learned.extend(_unique(o.title for o in turn if o.type == "decision" and o.title.startswith("The user declined")))
    # The reasons the last message gives, when the part of it shown with the outcome leaves them out.
    shown = clip(message, 400)
    prose = _prose(message)
    learned.extend([sentence for sentence in prose
                    if _REASON_WORDS.search(sentence) and sentence not in shown and not sentence.startswith("If ")][:2])

    investigated = []
    if read:
        investigated.append("Read " + _listed(read))
    investigated.extend(_unique(o.title for o in turn if o.tool_name in ("Grep", "Glob", "WebSearch", "WebFetch"))[:4])
    investigated.extend(_unique(o.title for o in turn if o.tool_name == "Bash" and o.title.startswith("Ran "))[:4])

    next_steps = [story.pending for story in checks if story.pending]
    next_steps.extend(_next_steps(prose)[:2])
    notes = (f"{len(turn)} tool uses ({failures} failed{f', {routine} routine' if routine else ''})"
             f" in prompt {request.prompt_number} of {len(inputs.prompts)}.")
    return guarded_summary(request, inputs.observations, CompressedSummary(
        request=clip(prompt, 300),
        investigated="; ".join(investigated),
        learned=clip("; ".join(learned), 600),
        completed="; ".join(completed),
        next_steps=clip("; ".join(next_steps), 300),
        notes=notes,
        compressed=compressed,
        compressor=compressor,
        # The rules read the turn's titles: a model's, when a model wrote its observations (and this summary
        # is the rules' only because the model's reply for it was unusable).
        provenance=Provenance.MODEL if any(o.provenance == Provenance.MODEL for o in turn) else Provenance.TOOL,
    ))


# The checks a turn can end with: the label a summary gives them, the titles their observations carry
# when they passed and when they failed (see :mod:`.offline_rules`).
_CHECKS = {"tests": ("Tests passed: ", "Tests failed: "), "build": ("Built: ", "Build failed: ")}
_PASSED_WORD = {"tests": ("pass", "passed"), "build": ("succeeds", "succeeded")}
_REASON_WORDS = re.compile(r"\b(because|root cause|caused by|the (?:issue|problem|bug|cause|error) (?:was|is)"
                           r"|turns? out|the reason)\b", re.I)
# A line that leads with what is left ("Next, add a test.", "Remaining: the CUDA backend", "TODO: …")
# or a sentence that says something is not done yet.
_NEXT_LEAD = re.compile(r"^(?:next steps?|next up|next|todo|remaining(?: work| tasks| issues)?|still to do|left to do"
                        r"|follow[- ]ups?)\b\s*[:,-]?\s*(.*)$", re.I)
_NOT_DONE = re.compile(r"\b(still needs? to|remains? to be|not yet (?:implemented|done|working|fixed|supported)"
                       r"|is still (?:failing|broken|missing))\b", re.I)
_CODE_BLOCK = re.compile(r"```.*?(?:```|$)", re.S)
_SENTENCE_END = re.compile(r"(?<=[^\d\s][.!?])\s+|\n+")  # not after "1." of a list
_INTENTION = re.compile(r"^(?:I'll|I will|Let me|Now let me|Now I'll)\b", re.I)


class _CheckStory(msgspec.Struct, frozen=True):
    outcome: str = ""  # how it ended: "tests pass: `pytest`"
    lesson: str = ""  # a failure that later passed, and what was edited in between
    pending: str = ""  # a failure that never passed


def _check_story(turn: Sequence[ObservationRow], cwd: str, label: str) -> _CheckStory:
    """How one kind of check (tests, a build) went through a turn, from the titles of its observations."""
    passed_prefix, failed_prefix = _CHECKS[label]
    present, past = _PASSED_WORD[label]
    first_failure: ObservationRow | None = None
    edited: list[str] = []
    lesson = ""
    last: ObservationRow | None = None
    for row in turn:
        if row.files_modified and first_failure is not None:
            edited.extend(relative(p, cwd) for p in row.files_modified)
        if row.title.startswith(failed_prefix):
            first_failure = first_failure or row
            last = row
        elif row.title.startswith(passed_prefix):
            if first_failure is not None:
                after = f" after editing {_listed(_unique(edited), 3)}" if edited else ""
                lesson = f"{label} failed ({_failure_detail(first_failure)}), then {past}{after}"
                first_failure, edited = None, []
            last = row
    if last is None:
        return _CheckStory()
    if last.title.startswith(failed_prefix):
        still = "still fail" if label == "tests" else "still fails"
        return _CheckStory(lesson=lesson, pending=clip(f"{label.capitalize()} {still}: {_failure_detail(last)}", 200))
    return _CheckStory(outcome=f"{label} {present}: {last.title[len(passed_prefix):]}", lesson=lesson)


def _failure_detail(row: ObservationRow) -> str:
    """What a failed check's facts say went wrong: the failing tests, else the error, else its result line."""
    facts = [fact for fact in row.facts if not _PLAIN_FACT.match(fact)]
    for prefix in ("failing: ", "error: ", "result: "):
        if (fact := next((f for f in facts if f.startswith(prefix)), "")):
            return clip(fact, 160)
    return row.title.split(": ", 1)[-1]  # the command


def _prose(text: str) -> list[str]:
    """The sentences of ``text``'s prose (code blocks left out, a line break ends one, markdown marks stripped),
    without the assistant announcing its own next move ("Let me…", "I'll…")."""
    found = []
    for sentence in _SENTENCE_END.split(_CODE_BLOCK.sub("\n", text)):
        sentence = " ".join(sentence.replace("**", "").strip(" #*-•>").split())
        if sentence and not _INTENTION.match(sentence):
            found.append(clip(sentence, 200))
    return found


def _next_steps(sentences: list[str]) -> list[str]:
    """What the last message (its :func:`_prose`) says is left: a line leading with it (a heading such as
    "Next steps:" gives the line after it), or a sentence saying something is not done yet."""
    found = []
    for position, sentence in enumerate(sentences):
        if (lead := _NEXT_LEAD.match(sentence)) is not None:
            if sentence.endswith(":"):
                if position + 1 < len(sentences):
                    found.append(sentences[position + 1])
            elif len(lead.group(1)) >= 8:
                found.append(sentence)
        elif _NOT_DONE.search(sentence):
            found.append(sentence)
    return _unique(found)


def _listed(items: list[str], most: int = 8) -> str:
    return ", ".join(items[:most]) + ("…" if len(items) > most else "")


def _unique(items: Any) -> list[str]:
    return list(dict.fromkeys(item for item in items if item))
