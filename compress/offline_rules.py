"""The offline compressor's rules, one per tool: what a tool use did, as a draft observation.

:data:`RULES` maps a tool's name to the small function that reads that tool's input and response (the
file and the change, the search and its hit count, the command and what it was for); a tool it does not
name gets :func:`other_tool`. :func:`describe` runs the rule, then says what every tool use shares: a
failure (or the user declining it) and the subagent that did it. The observation type comes from the
tool, the outcome and the words of the prompt the tool use answers.

A shell command goes by what it was for (:mod:`sessionmem.compress.commands`): a routine look under the
one title of its sort and the ``routine`` concept, so the injected context folds it away; a test run or
a build by whether it passed and what failed; a commit by its message; a command the user refused is
their decision, not a failure.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sessionmem.compress.base import SessionContext
from sessionmem.compress.commands import CommandKind, Kind, Routine, classify
from sessionmem.compress.offline_text import (
    article,
    clip,
    code_span,
    crashed,
    edit_fact,
    error_line,
    first_line,
    last_match,
    last_meaningful_line,
    line_count,
    mentions,
    relative,
    text_of,
    window,
)
from sessionmem.events import ObservationEvent
from sessionmem.records import ROUTINE_CONCEPT

TITLE_MAX = 100
FACT_MAX = 200

_BUGFIX_WORDS = re.compile(r"\b(fix|bug|broken|error|crash|fail|issue|wrong|regression)", re.I)
_FEATURE_WORDS = re.compile(r"\b(add|implement|create|build|support|introduce|new)\b", re.I)
_REFACTOR_WORDS = re.compile(r"\b(refactor|rename|clean ?up|simplify|extract|restructure|move)\b", re.I)
_EXIT_CODE = re.compile(r"Exit code (\d+)")
# Claude Code's answer when the user rejects a tool use: a decision of the user's, not a failure.
_DECLINED = "The user doesn't want to proceed with this tool use"
# A test run that failed although its exit status is hidden (`pytest | tail -20` exits 0).
_TEST_FAILURE = re.compile(r"\b[1-9]\d* (?:failed|failures?|errors?)\b|^FAILED\b|^--- FAIL|^FAIL\b"
                           r"|test result: FAILED|^Tests?:.*\bfailed", re.M)
# A build that failed although its exit status is hidden (`make 2>&1 | head -50`).
_BUILD_FAILURE = re.compile(r"\berror(?:\[\w+\])?:|\*\*\* .*Error \d+|^!\s", re.M)
# The line a test runner ends with: "3 failed, 10 passed in 0.52s", "test result: ok. 5 passed", "OK (4 tests)".
_TEST_COUNTS = re.compile(r"\b\d+ (?:passed|failed|failures?|errors?|tests?|examples?)\b|^test result:|^OK\b", re.I)
_FAILING_TEST = re.compile(r"^(?:FAILED |--- FAIL: |✕ |✗ |× )(.+)|^(?:test )?(\S+) \.\.\. (?:FAILED|FAIL|ERROR)$", re.M)
_DEFINITION = re.compile(r"^\s*(?:async\s+def|def|class|function|export\s+function)\s+(\w+)", re.M)
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+")
# Which count a Grep result's mode fills in: the others are 0 whatever was found (a "content" search
# reports numFiles 0 beside the seven lines it matched).
_GREP_COUNT = {"content": "numLines", "count": "numMatches", "files_with_matches": "numFiles"}


@dataclass
class Draft:
    """Mutable scratch space for one observation while it is being built."""

    type: str
    title: str
    subtitle: str = ""
    facts: list[str] = field(default_factory=list)
    concepts: list[str] = field(default_factory=list)
    files_read: list[str] = field(default_factory=list)
    files_modified: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ToolUse:
    """What a rule reads of one tool use, worked out once: its input as a dict, the file it names
    (as given and relative to the working directory) and the text of its response."""

    event: ObservationEvent
    prompt: str  # the words of the turn the tool use answers
    cwd: str
    data: dict[str, Any]
    path: str
    rel: str
    text: str

    @classmethod
    def of(cls, event: ObservationEvent, context: SessionContext) -> ToolUse:
        data = event.tool_input if isinstance(event.tool_input, dict) else {}
        cwd = event.cwd or context.cwd
        path = str(data.get("file_path") or data.get("notebook_path") or data.get("path") or "")
        return cls(event=event, prompt=context.prompt, cwd=cwd, data=data, path=path,
                   rel=relative(path, cwd) if path else "", text=text_of(event.tool_response))


Rule = Callable[[ToolUse], Draft]


def describe(event: ObservationEvent, context: SessionContext) -> Draft:
    """The draft observation of one tool use: its tool's rule, then its failure and its subagent."""
    use = ToolUse.of(event, context)
    draft = RULES.get(event.tool_name, other_tool)(use)
    if event.failed and event.tool_name != "Bash":  # a command's rule reads its own failure
        _failed(draft, event.error)
    if event.agent_type:
        draft.facts.append(f"done by the {event.agent_type} subagent")
    elif event.agent_id:  # a transcript that does not say which (Claude Code 1.0's sidechains)
        draft.facts.append("done by a subagent")
    return draft


def _failed(draft: Draft, error: str) -> None:
    if _DECLINED in error:
        draft.type, draft.title = "decision", clip(f"The user declined: {draft.title}", TITLE_MAX)
        draft.facts.append("the user rejected this tool use")
        return
    draft.type = "failure"
    draft.title = clip(f"Failed: {draft.title}", TITLE_MAX)
    draft.concepts.append("gotcha")
    if (detail := error_line(window(error))):
        draft.facts.append(clip(f"error: {detail}", FACT_MAX))


@functools.lru_cache(maxsize=64)  # one prompt for every tool use of its turn; a pasted one can be long
def change_type(prompt: str) -> str:
    """The type of a change made for ``prompt``: bugfix, refactor, feature, or change."""
    if _BUGFIX_WORDS.search(prompt):
        return "bugfix"
    if _REFACTOR_WORDS.search(prompt):
        return "refactor"
    if _FEATURE_WORDS.search(prompt):
        return "feature"
    return "change"


def read_file(use: ToolUse) -> Draft:
    draft = Draft("discovery", f"Read {use.rel or 'a file'}")
    lines = line_count(use.text)
    if lines:
        draft.facts.append(f"{use.rel} has {lines} lines" if use.rel else f"{lines} lines read")
    if (first := first_line(use.text)):
        draft.subtitle = clip(first, 120)
    draft.files_read.append(use.path)
    draft.concepts.append("how-it-works")
    return draft


def edit_file(use: ToolUse) -> Draft:
    """Edit, MultiEdit, NotebookEdit: the lines removed and added, and what the first three edits changed."""
    listed = use.data.get("edits")
    edits = listed if isinstance(listed, list) else [use.data]
    removed = sum(line_count(str(e.get("old_string", ""))) for e in edits if isinstance(e, dict))
    added = sum(line_count(str(e.get("new_string", e.get("new_source", "")))) for e in edits if isinstance(e, dict))
    draft = Draft(change_type(use.prompt), f"Edited {use.rel or 'a file'} (-{removed} +{added} lines)")
    for edit in edits[:3]:
        if isinstance(edit, dict) and (fact := edit_fact(str(edit.get("old_string", "")),
                                                         str(edit.get("new_string", edit.get("new_source", ""))))):
            draft.facts.append(clip(fact, FACT_MAX))
    draft.subtitle = clip(use.prompt, 120) if use.prompt else ""
    draft.files_modified.append(use.path)
    draft.concepts.append("what-changed")
    return draft


def write_file(use: ToolUse) -> Draft:
    """Write: how long the file is, how it starts, what it defines."""
    content = str(use.data.get("content", ""))
    draft = Draft(change_type(use.prompt) if use.prompt else "feature",
                  f"Wrote {use.rel or 'a file'} ({line_count(content)} lines)")
    if (first := first_line(content)):
        draft.facts.append(clip(f"starts with {code_span(first)}", FACT_MAX))
    if (defs := _DEFINITION.findall(content)):
        draft.facts.append(clip("defines " + ", ".join(dict.fromkeys(defs)), FACT_MAX))
    draft.files_modified.append(use.path)
    draft.concepts.append("what-changed")
    return draft


def search_files(use: ToolUse) -> Draft:
    """Grep, Glob: titled by where, the pattern a fact: a hunt through one place with ten patterns is one
    line of context."""
    pattern = str(use.data.get("pattern", ""))
    place = str(use.data.get("path", ""))
    where = relative(place, use.cwd) if place.rstrip("/") != use.cwd.rstrip("/") else ""
    verb = "Searched" if use.event.tool_name == "Grep" else "Looked for files in"
    draft = Draft("discovery", clip(f"{verb} {where or 'the project'}", TITLE_MAX))
    draft.facts.append(clip(f"looked for {code_span(pattern)}", FACT_MAX))
    hits = _hit_count(use.event.tool_response, use.text)
    if hits is not None:
        draft.facts.append(f"{hits} match{'es' if hits != 1 else ''}")
    draft.concepts.append("how-it-works")
    return draft


def _hit_count(response: Any, text: str) -> int | None:
    if isinstance(response, dict):
        keys = (_GREP_COUNT[mode],) if (mode := response.get("mode")) in _GREP_COUNT else ()
        for key in (*keys, "numFiles", "numMatches", "numLines"):
            if isinstance(response.get(key), int):
                return response[key]
        if isinstance(response.get("filenames"), list):
            return len(response["filenames"])
    return line_count(text) if text else None


def web(use: ToolUse) -> Draft:
    """WebFetch, WebSearch: the address or the query, and what was looked for in it."""
    target = str(use.data.get("url") or use.data.get("query") or "")
    verb = "Fetched" if use.event.tool_name == "WebFetch" else "Searched the web for"
    draft = Draft("discovery", clip(f"{verb} {target}", TITLE_MAX))
    if use.data.get("prompt"):
        draft.facts.append(clip(f"looked for: {use.data['prompt']}", FACT_MAX))
    return draft


def background_task(use: ToolUse) -> Draft:
    """TaskOutput, BashOutput: the output of a command Claude ran in the background, and how it ended."""
    response = use.event.tool_response if isinstance(use.event.tool_response, dict) else {}
    task = response["task"] if isinstance(response.get("task"), dict) else response
    label = str(task.get("description") or use.data.get("task_id") or use.data.get("bash_id") or "")
    status = str(task.get("status") or "")
    draft = Draft("failure" if status == "failed" else "discovery",
                  clip(f"{'Background task failed' if status == 'failed' else 'Checked background task'}: {label}",
                       TITLE_MAX))
    if (last := last_meaningful_line(text_of(task.get("output") or task.get("stdout")) or use.text)):
        draft.facts.append(clip(f"output: {last}", FACT_MAX))
    code = task.get("exitCode", task.get("exit_code"))
    if status:
        draft.facts.append(f"task {status}" + (f", exit status {code}" if code is not None else ""))
    draft.concepts.append("how-it-works")
    return draft


def delegated(use: ToolUse) -> Draft:
    """Task, Agent: which agent was asked, and what."""
    description = str(use.data.get("description") or use.data.get("prompt") or "")
    agent = str(use.data.get("subagent_type") or "sub")
    draft = Draft("discovery", clip(f"Delegated to {article(agent)} {agent} agent: {description}", TITLE_MAX))
    if use.data.get("prompt"):
        draft.facts.append(clip(f"asked: {use.data['prompt']}", FACT_MAX))
    return draft


def subagent_report(use: ToolUse) -> Draft:
    """SubagentStop: what the agent reported, its first four sentences as facts."""
    report = use.text.strip()
    agent = str(use.data.get("agent_type") or use.event.agent_type or "sub")
    draft = Draft("discovery", clip(f"The {agent} agent reported: {first_line(report)}", TITLE_MAX))
    sentences = [s.strip() for s in _SENTENCE_BREAK.split(report) if s.strip()]
    draft.facts.extend(clip(sentence, FACT_MAX) for sentence in sentences[:4])
    return draft


def other_tool(use: ToolUse) -> Draft:
    """Any other tool (an MCP server's): its name and its first text argument."""
    argument = next((str(v) for v in use.data.values() if isinstance(v, str) and v), "")
    label = use.event.tool_name.replace("mcp__", "").replace("__", " ")
    return Draft("discovery", clip(f"Used {label}" + (f": {argument}" if argument else ""), TITLE_MAX))


@dataclass(frozen=True)
class _Command:
    """What the command rules read of a shell command."""

    use: ToolUse
    command: str
    shown: str  # its first line as a code span
    output: str  # the window of its output (of its error, when it failed)
    status: str  # "exit status N", or "command failed"
    kind: CommandKind


def shell_command(use: ToolUse) -> Draft:
    """Bash: a shell command by what it was for (:mod:`sessionmem.compress.commands`)."""
    event = use.event
    command = str(use.data.get("command", ""))
    output = window(event.error or use.text if event.failed else use.text)
    if event.failed and _DECLINED in output:
        draft = Draft("decision", clip(f"The user declined to run {code_span(first_line(command))}", TITLE_MAX))
        draft.facts += [clip(f"command: {command}", FACT_MAX), "the user rejected this command"]
        return draft
    exit_code = _EXIT_CODE.search(output) if event.failed else None
    status = f"exit status {exit_code.group(1)}" if exit_code else "command failed" if event.failed else "exit status 0"
    run = _Command(use, command, code_span(first_line(command)), output, status, classify(command))
    if run.kind.kind is Kind.ROUTINE and (routine := run.kind.routine) is not None:
        return _routine_command(run, routine)
    if run.kind.kind is Kind.TEST:
        return _test_run(run)
    if run.kind.kind is Kind.BUILD:
        return _build(run)
    if run.kind.kind is Kind.COMMIT and not event.failed:
        return _commit(run)
    return _any_command(run)


def _routine_command(run: _Command, routine: Routine) -> Draft:
    """A routine look (``git status``, ``ls``): the one title of its sort, folded away by the context."""
    draft = Draft("discovery", routine.value)
    draft.subtitle = clip(run.command, 120)
    draft.facts += [clip(f"command: {run.command}", FACT_MAX), run.status]
    draft.concepts.append(ROUTINE_CONCEPT)
    return draft


def _test_run(run: _Command) -> Draft:
    """A test run: passed or failed (by its exit status, its output or a crash), its counts, what failed."""
    output = run.output
    failed = (run.use.event.failed or mentions(output, "fail", "error") and bool(_TEST_FAILURE.search(output))
              or crashed(output))
    draft = Draft("failure" if failed else "discovery",
                  clip(f"Tests {'failed' if failed else 'passed'}: {run.shown}", TITLE_MAX))
    draft.facts.append(clip(f"command: {run.command}", FACT_MAX))
    if (counts := last_match(_TEST_COUNTS, output)):
        draft.facts.append(clip(f"result: {counts}", FACT_MAX))
    failing = [next(g for g in match.groups() if g) for match in _FAILING_TEST.finditer(output)]
    if failing:
        draft.facts.append(clip("failing: " + ", ".join(dict.fromkeys(failing)), FACT_MAX))
    if failed and (detail := error_line(output)) and detail not in (counts, *failing):
        draft.facts.append(clip(f"error: {detail}", FACT_MAX))
    draft.concepts += ["testing", "problem-solution" if failed else "how-it-works"]
    return draft


def _build(run: _Command) -> Draft:
    """A build: built, or failed and why."""
    event, output = run.use.event, run.output
    # Through a pipe the exit status is the last command's (`make 2>&1 | head`): the output tells.
    failed = event.failed or "|" in run.command and mentions(output, "error", "!") \
        and bool(_BUILD_FAILURE.search(output))
    draft = Draft("failure" if failed else "discovery",
                  clip(f"{'Build failed' if failed else 'Built'}: {run.shown}", TITLE_MAX))
    draft.facts += [clip(f"command: {run.command}", FACT_MAX),
                    run.status if event.failed or not failed else "command failed"]
    if failed and (detail := error_line(output)):
        draft.facts.append(clip(f"error: {detail}", FACT_MAX))
    draft.concepts.append("gotcha" if failed else "how-it-works")
    return draft


def _commit(run: _Command) -> Draft:
    """A commit that went through: titled by its message."""
    message = run.kind.message
    draft = Draft("change", clip(f"Committed: {message}" if message else f"Committed with {run.shown}", TITLE_MAX))
    draft.facts.append(clip(f"command: {run.command}", FACT_MAX))
    if (first := first_line(run.use.text)):
        draft.facts.append(clip(f"output: {first}", FACT_MAX))
    draft.concepts.append("what-changed")
    return draft


def _any_command(run: _Command) -> Draft:
    """Any other command: ran or failed (a crash counts, whatever the exit status), what it printed last
    or the error."""
    event = run.use.event
    failed = event.failed or crashed(run.output)
    draft = Draft("failure" if failed else "discovery",
                  clip(f"{'Failed: Ran' if failed else 'Ran'} {run.shown}", TITLE_MAX))
    draft.subtitle = clip(str(run.use.data.get("description", "")), 120)
    draft.facts += [clip(f"command: {run.command}", FACT_MAX), run.status]
    if failed:
        if (detail := error_line(run.output)):
            draft.facts.append(clip(f"error: {detail}", FACT_MAX))
        draft.concepts.append("gotcha")
    else:
        if isinstance(event.tool_response, dict) and event.tool_response.get("interrupted"):
            draft.facts.append("interrupted")
        if (last := last_meaningful_line(run.use.text)):
            draft.facts.append(clip(f"output: {last}", FACT_MAX))
        draft.concepts.append("how-it-works")
    return draft


RULES: dict[str, Rule] = {
    "Read": read_file,
    "Edit": edit_file,
    "MultiEdit": edit_file,
    "NotebookEdit": edit_file,
    "Write": write_file,
    "Bash": shell_command,
    "Grep": search_files,
    "Glob": search_files,
    "WebFetch": web,
    "WebSearch": web,
    "TaskOutput": background_task,
    "BashOutput": background_task,
    "Task": delegated,
    "Agent": delegated,
    "SubagentStop": subagent_report,
}
"""The rule of each tool by its name; any other tool: :func:`other_tool`."""
