"""The offline compressor: useful observations and summaries from the tool data alone.

Deterministic and network-free, it is the embedded default and the anthropic backend's
fallback per batch. It reads what each tool did (the file and the change, the search
and its hit count, the command and what it was for) and infers the observation type
from the tool, the outcome and the words of the prompt the tool use answers.

Written for a reader, not as an activity log: a routine command (``git status``, ``ls``,
a version check, a formatter) gets the one title of its sort and the ``routine`` concept,
so the injected context folds it away; a test run or a build says whether it passed and
what failed; a command the user refused is their decision, not a failure. A summary says
what the turn was about -- the request, the files changed, how its checks ended, the
assistant's last message -- and never offers a failed command as something learned.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

import msgspec

from sessionmem.compress.base import CompressorStatistics, SessionContext
from sessionmem.compress.commands import Kind, classify
from sessionmem.compress.promotion import guarded_observation, guarded_summary
from sessionmem.events import ObservationEvent, SummarizeEvent
from sessionmem.protocol.limits import printable_line
from sessionmem.records import (
    ROUTINE_CONCEPT,
    CompressedObservation,
    CompressedSummary,
    ObservationRow,
    Provenance,
    SummaryInputs,
)

_TITLE_MAX = 100
_FACT_MAX = 200

_BUGFIX_WORDS = re.compile(r"\b(fix|bug|broken|error|crash|fail|issue|wrong|regression)", re.I)
_FEATURE_WORDS = re.compile(r"\b(add|implement|create|build|support|introduce|new)\b", re.I)
_REFACTOR_WORDS = re.compile(r"\b(refactor|rename|clean ?up|simplify|extract|restructure|move)\b", re.I)
_EXIT_CODE = re.compile(r"Exit code (\d+)")
_WINDOW = 3000  # characters of an output's start, and of its end, read for errors and test results
# Claude Code's answer when the user rejects a tool use: a decision of the user's, not a failure.
_DECLINED = "The user doesn't want to proceed with this tool use"
# The line of an output that says what went wrong (a compiler's "error:", a refusal, a missing file).
# Both are matched against the lower-cased text: without re.IGNORECASE the scan of a long output
# with no match is ten times faster (about 0.3 ms instead of 2.5 ms for 10 kB).
_ERROR_LINE = re.compile(r"\b(?:error|fatal|exception|failed|failure|denied|not found|no such file|cannot|can't"
                         r"|segmentation fault|undefined|refused|timed out|invalid)\b|^[ \t]*e\s", re.M)
_ERROR_WORD = re.compile(r"\b(?:error|fatal)\b|^[ \t]*!\s", re.M)
# What each must find somewhere before it is worth running (a substring test runs at C speed).
_ERROR_WORD_NEEDLES = ("error", "fatal", "!")
_ERROR_LINE_NEEDLES = ("fa", "exception", "denied", "not found", "no such file", "can", "segmentation", "undefined",
                       "refused", "timed out", "invalid", "e ", "e\t")
# A test run that failed although its exit status is hidden (`pytest | tail -20` exits 0).
_TEST_FAILURE = re.compile(r"\b[1-9]\d* (?:failed|failures?|errors?)\b|^FAILED\b|^--- FAIL|^FAIL\b"
                           r"|test result: FAILED|^Tests?:.*\bfailed", re.M)
# A program that crashed (C's allocator, a signal, a Rust panic, a sanitizer), whatever its exit status
# says: a test binary piped through grep exits 0 after aborting on "malloc(): invalid size".
_CRASH = re.compile(r"segmentation fault|core dumped|\bmalloc\(\)|double free|free\(\): invalid|stack smashing"
                    r"|\bsigsegv\b|\bsigabrt\b|panicked at|addresssanitizer|^aborted\b", re.M)
_CRASH_NEEDLES = ("segmentation", "core dumped", "malloc()", "free", "stack smashing", "sigsegv", "sigabrt",
                  "panicked", "sanitizer", "aborted")
# A build that failed although its exit status is hidden (`make 2>&1 | head -50`).
_BUILD_FAILURE = re.compile(r"\berror(?:\[\w+\])?:|\*\*\* .*Error \d+|^!\s", re.M)
# The line a test runner ends with: "3 failed, 10 passed in 0.52s", "test result: ok. 5 passed", "OK (4 tests)".
_TEST_COUNTS = re.compile(r"\b\d+ (?:passed|failed|failures?|errors?|tests?|examples?)\b|^test result:|^OK\b", re.I)
_FAILING_TEST = re.compile(r"^(?:FAILED |--- FAIL: |✕ |✗ |× )(.+)|^(?:test )?(\S+) \.\.\. (?:FAILED|FAIL|ERROR)$", re.M)
# Facts that only repeat the command or give a count: not what a narrative or a summary should say.
_PLAIN_FACT = re.compile(r"^(?:command: |exit status \d+$|command failed$|done by |\S+ has \d+ lines$|\d+ lines read$"
                         r"|\d+ match)")


def _clip(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _code(text: str) -> str:
    """``text`` as one markdown code span: fenced by one backtick more than its longest run of them,
    padded where it starts or ends with one (CommonMark's rule), so a stored backtick cannot end the
    span and let the rest read as markdown."""
    if "`" not in text:
        return f"`{text}`"
    fence = "`" * (max(len(run) for run in re.findall("`+", text)) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _first_line(text: str) -> str:
    for line in str(text).splitlines():
        if line.strip():
            return line.strip()
    return ""


def _edit_fact(old: str, new: str) -> str:
    """What an edit changed, by its first differing line: ``replaced `a` with `b```, ``added `b```,
    ``removed `a```; "" for no text at all.

    Lines the two sides share at the start and at the end (indentation aside) are skipped,
    so an edit whose ``old_string`` is context kept around one new line says what is new,
    not that a line was replaced by itself.
    """
    before = [line.strip() for line in old.splitlines()]
    after = [line.strip() for line in new.splitlines()]
    start = 0
    while start < min(len(before), len(after)) and before[start] == after[start]:
        start += 1
    end = 0
    while end < min(len(before), len(after)) - start and before[-1 - end] == after[-1 - end]:
        end += 1
    removed = _first_line("\n".join(before[start:len(before) - end]))
    added = _first_line("\n".join(after[start:len(after) - end]))
    if removed and added:
        return f"replaced {_code(removed)} with {_code(added)}"
    if added:
        return f"added {_code(added)}"
    if removed:
        return f"removed {_code(removed)}"
    return "changed whitespace only" if old != new else ""


def _a(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def _relative(path: str, cwd: str) -> str:
    """``path`` as the text names it: under ``cwd``, relative to it; on one line (a break in a
    name must not pass for a line of the narrative)."""
    if cwd and path.startswith(cwd.rstrip("/") + "/"):
        path = path[len(cwd.rstrip("/")) + 1 :]
    return printable_line(path)


def _text_of(value: Any) -> str:
    """The human-readable text inside a tool response of any shape."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_text_of(item) for item in value)
    if isinstance(value, dict):
        for key in ("stdout", "content", "text", "output", "result", "message"):
            if key in value and value[key]:
                return _text_of(value[key])
        if isinstance(value.get("file"), dict):
            return _text_of(value["file"].get("content"))
    return ""


@functools.lru_cache(maxsize=64)  # one prompt for every tool use of its turn; a pasted one can be long
def _change_type(prompt: str) -> str:
    if _BUGFIX_WORDS.search(prompt):
        return "bugfix"
    if _REFACTOR_WORDS.search(prompt):
        return "refactor"
    if _FEATURE_WORDS.search(prompt):
        return "feature"
    return "change"


def _line_count(text: str) -> int:
    return len(text.splitlines()) if text else 0


class _Draft:
    """Mutable scratch space for one observation while it is being built."""

    def __init__(self, type_: str, title: str) -> None:
        self.type = type_
        self.title = title
        self.subtitle = ""
        self.facts: list[str] = []
        self.concepts: list[str] = []
        self.files_read: list[str] = []
        self.files_modified: list[str] = []


def _describe(event: ObservationEvent, context: SessionContext) -> _Draft:
    tool = event.tool_name
    data = event.tool_input if isinstance(event.tool_input, dict) else {}
    cwd = event.cwd or context.cwd
    path = str(data.get("file_path") or data.get("notebook_path") or data.get("path") or "")
    rel = _relative(path, cwd) if path else ""
    response_text = _text_of(event.tool_response)

    if tool == "Read":
        draft = _Draft("discovery", f"Read {rel or 'a file'}")
        lines = _line_count(response_text)
        if lines:
            draft.facts.append(f"{rel} has {lines} lines" if rel else f"{lines} lines read")
        if (first := _first_line(response_text)):
            draft.subtitle = _clip(first, 120)
        draft.files_read.append(path)
        draft.concepts.append("how-it-works")
    elif tool in ("Edit", "MultiEdit", "NotebookEdit"):
        listed = data.get("edits")
        edits = listed if isinstance(listed, list) else [data]
        removed = sum(_line_count(str(e.get("old_string", ""))) for e in edits if isinstance(e, dict))
        added = sum(_line_count(str(e.get("new_string", e.get("new_source", "")))) for e in edits if isinstance(e, dict))
        draft = _Draft(_change_type(context.prompt), f"Edited {rel or 'a file'} (-{removed} +{added} lines)")
        for edit in edits[:3]:
            if isinstance(edit, dict) and (fact := _edit_fact(str(edit.get("old_string", "")),
                                                              str(edit.get("new_string", edit.get("new_source", ""))))):
                draft.facts.append(_clip(fact, _FACT_MAX))
        draft.subtitle = _clip(context.prompt, 120) if context.prompt else ""
        draft.files_modified.append(path)
        draft.concepts.append("what-changed")
    elif tool == "Write":
        content = str(data.get("content", ""))
        draft = _Draft(_change_type(context.prompt) if context.prompt else "feature", f"Wrote {rel or 'a file'} ({_line_count(content)} lines)")
        if (first := _first_line(content)):
            draft.facts.append(_clip(f"starts with {_code(first)}", _FACT_MAX))
        defs = re.findall(r"^\s*(?:async\s+def|def|class|function|export\s+function)\s+(\w+)", content, re.M)
        if defs:
            draft.facts.append(_clip("defines " + ", ".join(dict.fromkeys(defs)), _FACT_MAX))
        draft.files_modified.append(path)
        draft.concepts.append("what-changed")
    elif tool == "Bash":
        draft = _describe_command(event, data, response_text)
    elif tool in ("Grep", "Glob"):
        # Titled by where, the pattern a fact: a hunt through one place with ten patterns is one line of context.
        pattern = str(data.get("pattern", ""))
        place = str(data.get("path", ""))
        where = _relative(place, cwd) if place.rstrip("/") != cwd.rstrip("/") else ""
        draft = _Draft("discovery", _clip(f"{'Searched' if tool == 'Grep' else 'Looked for files in'} "
                                          f"{where or 'the project'}", _TITLE_MAX))
        draft.facts.append(_clip(f"looked for {_code(pattern)}", _FACT_MAX))
        hits = _hit_count(event.tool_response, response_text)
        if hits is not None:
            draft.facts.append(f"{hits} match{'es' if hits != 1 else ''}")
        draft.concepts.append("how-it-works")
    elif tool in ("WebFetch", "WebSearch"):
        target = str(data.get("url") or data.get("query") or "")
        draft = _Draft("discovery", _clip(f"{'Fetched' if tool == 'WebFetch' else 'Searched the web for'} {target}", _TITLE_MAX))
        if data.get("prompt"):
            draft.facts.append(_clip(f"looked for: {data['prompt']}", _FACT_MAX))
    elif tool in ("TaskOutput", "BashOutput"):  # the output of a command Claude ran in the background
        response = event.tool_response if isinstance(event.tool_response, dict) else {}
        task = response["task"] if isinstance(response.get("task"), dict) else response
        label = str(task.get("description") or data.get("task_id") or data.get("bash_id") or "")
        status = str(task.get("status") or "")
        draft = _Draft("failure" if status == "failed" else "discovery",
                       _clip(f"{'Background task failed' if status == 'failed' else 'Checked background task'}: {label}",
                             _TITLE_MAX))
        if (last := _last_meaningful_line(_text_of(task.get("output") or task.get("stdout")) or response_text)):
            draft.facts.append(_clip(f"output: {last}", _FACT_MAX))
        code = task.get("exitCode", task.get("exit_code"))
        if status:
            draft.facts.append(f"task {status}" + (f", exit status {code}" if code is not None else ""))
        draft.concepts.append("how-it-works")
    elif tool in ("Task", "Agent"):
        description = str(data.get("description") or data.get("prompt") or "")
        agent = str(data.get("subagent_type") or "sub")
        draft = _Draft("discovery", _clip(f"Delegated to {_a(agent)} {agent} agent: {description}", _TITLE_MAX))
        if data.get("prompt"):
            draft.facts.append(_clip(f"asked: {data['prompt']}", _FACT_MAX))
    elif tool == "SubagentStop":
        report = response_text.strip()
        agent = str(data.get("agent_type") or event.agent_type or "sub")
        draft = _Draft("discovery", _clip(f"The {agent} agent reported: {_first_line(report)}", _TITLE_MAX))
        sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", report) if s.strip()]
        draft.facts.extend(_clip(sentence, _FACT_MAX) for sentence in sentences[:4])
    else:
        argument = next((str(v) for v in data.values() if isinstance(v, str) and v), "")
        label = tool.replace("mcp__", "").replace("__", " ")
        draft = _Draft("discovery", _clip(f"Used {label}" + (f": {argument}" if argument else ""), _TITLE_MAX))

    if event.failed and tool != "Bash":
        if _DECLINED in event.error:
            draft.type, draft.title = "decision", _clip(f"The user declined: {draft.title}", _TITLE_MAX)
            draft.facts.append("the user rejected this tool use")
        else:
            draft.type = "failure"
            draft.title = _clip(f"Failed: {draft.title}", _TITLE_MAX)
            draft.concepts.append("gotcha")
            if (detail := _error_line(_window(event.error))):
                draft.facts.append(_clip(f"error: {detail}", _FACT_MAX))
    if event.agent_type:
        draft.facts.append(f"done by the {event.agent_type} subagent")
    elif event.agent_id:  # a transcript that does not say which (Claude Code 1.0's sidechains)
        draft.facts.append("done by a subagent")
    return draft


def _describe_command(event: ObservationEvent, data: dict[str, Any], response_text: str) -> _Draft:
    """A shell command by what it was for (:mod:`sessionmem.compress.commands`): a routine look under the
    one title of its sort, a test run or a build by whether it passed and why not, a commit by its message."""
    command = str(data.get("command", ""))
    shown = _code(_first_line(command))
    output = _window(event.error or response_text if event.failed else response_text)
    kind = classify(command)
    if event.failed and _DECLINED in output:
        draft = _Draft("decision", _clip(f"The user declined to run {shown}", _TITLE_MAX))
        draft.facts += [_clip(f"command: {command}", _FACT_MAX), "the user rejected this command"]
        return draft
    exit_code = _EXIT_CODE.search(output) if event.failed else None
    status = f"exit status {exit_code.group(1)}" if exit_code else "command failed" if event.failed else "exit status 0"
    if kind.kind is Kind.ROUTINE and kind.routine is not None:
        draft = _Draft("discovery", kind.routine.value)
        draft.subtitle = _clip(command, 120)
        draft.facts += [_clip(f"command: {command}", _FACT_MAX), status]
        draft.concepts.append(ROUTINE_CONCEPT)
        return draft
    if kind.kind is Kind.TEST:
        failed = (event.failed or _mentions(output, "fail", "error") and bool(_TEST_FAILURE.search(output))
                  or _crashed(output))
        draft = _Draft("failure" if failed else "discovery",
                       _clip(f"Tests {'failed' if failed else 'passed'}: {shown}", _TITLE_MAX))
        draft.facts.append(_clip(f"command: {command}", _FACT_MAX))
        if (counts := _last_match(_TEST_COUNTS, output)):
            draft.facts.append(_clip(f"result: {counts}", _FACT_MAX))
        failing = [next(g for g in match.groups() if g) for match in _FAILING_TEST.finditer(output)]
        if failing:
            draft.facts.append(_clip("failing: " + ", ".join(dict.fromkeys(failing)), _FACT_MAX))
        if failed and (detail := _error_line(output)) and detail not in (counts, *failing):
            draft.facts.append(_clip(f"error: {detail}", _FACT_MAX))
        draft.concepts += ["testing", "problem-solution" if failed else "how-it-works"]
        return draft
    if kind.kind is Kind.BUILD:
        # Through a pipe the exit status is the last command's (`make 2>&1 | head`): the output tells.
        failed = event.failed or "|" in command and _mentions(output, "error", "!") \
            and bool(_BUILD_FAILURE.search(output))
        draft = _Draft("failure" if failed else "discovery",
                       _clip(f"{'Build failed' if failed else 'Built'}: {shown}", _TITLE_MAX))
        draft.facts += [_clip(f"command: {command}", _FACT_MAX), status if event.failed or not failed else "command failed"]
        if failed and (detail := _error_line(output)):
            draft.facts.append(_clip(f"error: {detail}", _FACT_MAX))
        draft.concepts.append("gotcha" if failed else "how-it-works")
        return draft
    if kind.kind is Kind.COMMIT and not event.failed:
        draft = _Draft("change", _clip(f"Committed: {kind.message}" if kind.message else f"Committed with {shown}",
                                       _TITLE_MAX))
        draft.facts.append(_clip(f"command: {command}", _FACT_MAX))
        if (first := _first_line(response_text)):
            draft.facts.append(_clip(f"output: {first}", _FACT_MAX))
        draft.concepts.append("what-changed")
        return draft
    failed = event.failed or _crashed(output)
    draft = _Draft("failure" if failed else "discovery",
                   _clip(f"{'Failed: Ran' if failed else 'Ran'} {shown}", _TITLE_MAX))
    draft.subtitle = _clip(str(data.get("description", "")), 120)
    draft.facts += [_clip(f"command: {command}", _FACT_MAX), status]
    if failed:
        if (detail := _error_line(output)):
            draft.facts.append(_clip(f"error: {detail}", _FACT_MAX))
        draft.concepts.append("gotcha")
    else:
        if isinstance(event.tool_response, dict) and event.tool_response.get("interrupted"):
            draft.facts.append("interrupted")
        if (last := _last_meaningful_line(response_text)):
            draft.facts.append(_clip(f"output: {last}", _FACT_MAX))
        draft.concepts.append("how-it-works")
    return draft


def _crashed(output: str) -> bool:
    lowered = output.lower()  # once, for the substring test and the pattern alike
    return any(needle in lowered for needle in _CRASH_NEEDLES) and bool(_CRASH.search(lowered))


def _window(text: str) -> str:
    """The start and the end of a long output: where a compiler's first error and a test runner's summary
    are. Regular expressions scan a few kilobytes, not the whole capped response (Python's re scans a
    pattern with no literal prefix at about 0.1 ms a kilobyte)."""
    return text if len(text) <= 2 * _WINDOW else f"{text[:_WINDOW]}\n{text[-_WINDOW:]}"


def _mentions(text: str, *needles: str) -> bool:
    """Whether ``text`` holds one of ``needles`` (lower case), at C speed: the regular expression after it is
    skipped for the usual output that has nothing to find."""
    lowered = text.lower()
    return any(needle in lowered for needle in needles)


def _error_line(text: str) -> str:
    """The line of a failed tool's output that says what went wrong: a Python traceback's last line, else
    the first line naming an error (a compiler's first error, not make's last progress line), else the
    first naming a failure of another kind, else the last line. One regular-expression scan per kind."""
    text = _strip_error_prefix(str(text or ""))
    if "Traceback (most recent call last)" in text:
        return _strip_error_prefix(_last_meaningful_line(text))
    lowered = text.lower()
    if len(lowered) != len(text):  # a character whose lower case is longer: positions would not match
        lowered = "".join(ch if len(ch.lower()) != 1 else ch.lower() for ch in text)
    for pattern, needles in ((_ERROR_WORD, _ERROR_WORD_NEEDLES), (_ERROR_LINE, _ERROR_LINE_NEEDLES)):
        if not any(needle in lowered for needle in needles):
            continue
        for match in pattern.finditer(lowered):
            start = text.rfind("\n", 0, match.start()) + 1
            end = text.find("\n", match.end())
            line = _strip_error_prefix(text[start:end if end >= 0 else len(text)].strip())
            if line.lower() not in ("error", "failed") and not line.startswith("hint:"):
                return line
    last = _strip_error_prefix(_last_meaningful_line(text))
    return "" if last.lower() in ("error", "failed") else last  # Claude Code 1.0's bare "Error" says nothing


def _strip_error_prefix(line: str) -> str:
    """Without the ``Error: `` Claude Code puts before a failed command's output (``Error: Error`` is none)."""
    while line.startswith("Error: ") and len(line) > len("Error: "):
        line = line[len("Error: "):]
    return line


def _last_match(pattern: re.Pattern[str], text: str) -> str:
    for line in reversed(str(text or "").splitlines()):
        if pattern.search(line.strip()):
            return line.strip().strip("=").strip()
    return ""


def _last_meaningful_line(text: str) -> str:
    for line in reversed(str(text or "").splitlines()):
        if line.strip():
            return line.strip()
    return ""


# Which count a Grep result's mode fills in: the others are 0 whatever was found (a "content" search
# reports numFiles 0 beside the seven lines it matched).
_GREP_COUNT = {"content": "numLines", "count": "numMatches", "files_with_matches": "numFiles"}


def _hit_count(response: Any, text: str) -> int | None:
    if isinstance(response, dict):
        keys = (_GREP_COUNT[mode],) if (mode := response.get("mode")) in _GREP_COUNT else ()
        for key in (*keys, "numFiles", "numMatches", "numLines"):
            if isinstance(response.get(key), int):
                return response[key]
        if isinstance(response.get("filenames"), list):
            return len(response["filenames"])
    return _line_count(text) if text else None


class OfflineCompressor:
    """See the module docstring. Stateless apart from counters."""

    name = "offline"

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
    context: SessionContext, event: ObservationEvent, *, compressor: str = "offline", compressed: bool = True
) -> CompressedObservation:
    """Also used as the fallback when LLM output cannot be used (``compressed=False``). Guarded: no
    instruction-like text in its title or subtitle (:mod:`.promotion`)."""
    draft = _describe(event, context)
    # The title and what it found or changed, in the words a search for it would use.
    told = [fact for fact in draft.facts if not _PLAIN_FACT.match(fact)][:2]
    narrative = draft.title + (f": {'; '.join(told)}" if told else "")
    if context.prompt:
        narrative = f"While working on “{_clip(context.prompt, 120)}”: {narrative[0].lower()}{narrative[1:]}."
    return guarded_observation(event, CompressedObservation(
        type=draft.type,
        title=_clip(draft.title, _TITLE_MAX),
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
    compressor: str = "offline",
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
    read = _unique(_relative(p, cwd) for o in turn for p in o.files_read)
    modified = _unique(_relative(p, cwd) for o in turn for p in o.files_modified)
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
        completed.append(_clip(message, 400))

    learned = [story.lesson for story in checks if story.lesson]
    learned.extend(_unique(o.title for o in turn if o.type == "decision" and o.title.startswith("The user declined")))
    # The reasons the last message gives, when the part of it shown with the outcome leaves them out.
    shown = _clip(message, 400)
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
        request=_clip(prompt, 300),
        investigated="; ".join(investigated),
        learned=_clip("; ".join(learned), 600),
        completed="; ".join(completed),
        next_steps=_clip("; ".join(next_steps), 300),
        notes=notes,
        compressed=compressed,
        compressor=compressor,
        provenance=Provenance.TOOL,
    ))


# The checks a turn can end with: the label a summary gives them, the titles their observations carry
# when they passed and when they failed (see _describe_command).
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
            edited.extend(_relative(p, cwd) for p in row.files_modified)
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
        return _CheckStory(lesson=lesson, pending=_clip(f"{label.capitalize()} {still}: {_failure_detail(last)}", 200))
    return _CheckStory(outcome=f"{label} {present}: {last.title[len(passed_prefix):]}", lesson=lesson)


def _failure_detail(row: ObservationRow) -> str:
    """What a failed check's facts say went wrong: the failing tests, else the error, else its result line."""
    facts = [fact for fact in row.facts if not _PLAIN_FACT.match(fact)]
    for prefix in ("failing: ", "error: ", "result: "):
        if (fact := next((f for f in facts if f.startswith(prefix)), "")):
            return _clip(fact, 160)
    return row.title.split(": ", 1)[-1]  # the command


def _prose(text: str) -> list[str]:
    """The sentences of ``text``'s prose (code blocks left out, a line break ends one, markdown marks stripped),
    without the assistant announcing its own next move ("Let me…", "I'll…")."""
    found = []
    for sentence in _SENTENCE_END.split(_CODE_BLOCK.sub("\n", text)):
        sentence = " ".join(sentence.replace("**", "").strip(" #*-•>").split())
        if sentence and not _INTENTION.match(sentence):
            found.append(_clip(sentence, 200))
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
