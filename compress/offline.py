"""The offline compressor: useful observations and summaries from the tool data alone.

Deterministic and network-free, it is the embedded default. It reads what each tool
did (the file and the change, the command and its exit status, the search and its
hit count) and infers the observation type from the tool, the outcome and the words
of the prompt the tool use answers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from sessionmem.compress.base import CompressorStatistics, SessionContext
from sessionmem.events import ObservationEvent, SummarizeEvent
from sessionmem.protocol.limits import printable_line
from sessionmem.records import CompressedObservation, CompressedSummary, SummaryInputs

_TITLE_MAX = 100
_FACT_MAX = 200

_BUGFIX_WORDS = re.compile(r"\b(fix|bug|broken|error|crash|fail|issue|wrong|regression)", re.I)
_FEATURE_WORDS = re.compile(r"\b(add|implement|create|build|support|introduce|new)\b", re.I)
_REFACTOR_WORDS = re.compile(r"\b(refactor|rename|clean ?up|simplify|extract|restructure|move)\b", re.I)
_TEST_COMMAND = re.compile(r"\b(pytest|unittest|jest|vitest|mocha|go test|cargo test|npm (run )?test|make test|tox)\b")
_EXIT_CODE = re.compile(r"Exit code (\d+)")


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
        command = str(data.get("command", ""))
        description = str(data.get("description", ""))
        draft = _Draft("discovery", _clip(f"Ran {_code(_first_line(command))}", _TITLE_MAX))
        draft.subtitle = _clip(description, 120)
        draft.facts.append(_clip(f"command: {command}", _FACT_MAX))
        if event.failed:
            code = _EXIT_CODE.search(event.error or response_text)
            draft.facts.append(f"exit status {code.group(1)}" if code else "command failed")
            if (detail := _last_meaningful_line(event.error or response_text)):
                draft.facts.append(_clip(f"error: {detail}", _FACT_MAX))
        else:
            draft.facts.append("exit status 0")
            if isinstance(event.tool_response, dict) and event.tool_response.get("interrupted"):
                draft.facts.append("interrupted")
            if (last := _last_meaningful_line(response_text)):
                draft.facts.append(_clip(f"output: {last}", _FACT_MAX))
        if _TEST_COMMAND.search(command):
            draft.concepts.append("testing")
        draft.concepts.append("how-it-works")
    elif tool in ("Grep", "Glob"):
        pattern = str(data.get("pattern", ""))
        where = _relative(str(data.get("path", "")), cwd)
        draft = _Draft("discovery", _clip(f"Searched for {_code(pattern)}" + (f" in {where}" if where else ""), _TITLE_MAX))
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

    if event.failed:
        draft.type = "failure"
        draft.title = _clip(f"Failed: {draft.title}", _TITLE_MAX)
        draft.concepts.append("gotcha")
        if tool != "Bash" and (detail := _last_meaningful_line(event.error)):
            draft.facts.append(_clip(f"error: {detail}", _FACT_MAX))
    if event.agent_type:
        draft.facts.append(f"done by the {event.agent_type} subagent")
    elif event.agent_id:  # a transcript that does not say which (Claude Code 1.0's sidechains)
        draft.facts.append("done by a subagent")
    return draft


def _last_meaningful_line(text: str) -> str:
    for line in reversed(str(text or "").splitlines()):
        if line.strip():
            return line.strip()
    return ""


def _hit_count(response: Any, text: str) -> int | None:
    if isinstance(response, dict):
        for key in ("numFiles", "numMatches", "numLines"):
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
    """Also used as the fallback when LLM output cannot be used (``compressed=False``)."""
    draft = _describe(event, context)
    narrative = draft.title
    if context.prompt:
        narrative = f"While working on “{_clip(context.prompt, 120)}”: {draft.title[0].lower()}{draft.title[1:]}."
    return CompressedObservation(
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
    )


def build_offline_summary(
    context: SessionContext,
    request: SummarizeEvent,
    inputs: SummaryInputs,
    *,
    compressor: str = "offline",
    compressed: bool = True,
) -> CompressedSummary:
    # This turn's work only (a turn without tool use has none: another turn's is not its); the whole
    # session when the turn is not known (a stop of a session whose prompts were never seen).
    number = request.prompt_number
    turn = [o for o in inputs.observations if o.prompt_number == number] if number else inputs.observations
    cwd = context.cwd
    read = _unique(_relative(p, cwd) for o in turn for p in o.files_read)
    modified = _unique(_relative(p, cwd) for o in turn for p in o.files_modified)
    searches = [o.title for o in turn if o.tool_name in ("Grep", "Glob", "WebSearch", "WebFetch")]
    commands = [o.title for o in turn if o.tool_name == "Bash" and not o.failed]
    failures = [o.title for o in turn if o.failed]

    # The turn's own prompt as stored, before what the transcript's last user line says (that can be
    # Claude Code's "[Request interrupted by user]", or a later turn's).
    stored = inputs.prompts[number - 1] if 0 < number <= len(inputs.prompts) else ""
    prompt = stored or request.last_user_message or (inputs.prompts[-1] if inputs.prompts else context.prompt)
    investigated = []
    if read:
        investigated.append("Read " + ", ".join(read[:8]) + ("…" if len(read) > 8 else ""))
    investigated.extend(searches[:4])
    investigated.extend(commands[:4])
    learned = [f"{title}" for title in failures[:4]]
    learned.extend(fact for o in turn if not o.failed for fact in o.facts[:1] if "output:" in fact)
    completed = []
    if modified:
        completed.append("Modified " + ", ".join(modified[:8]) + ("…" if len(modified) > 8 else ""))
    if request.last_assistant_message:
        completed.append(_clip(request.last_assistant_message, 400))
    notes = f"{len(turn)} tool uses ({len(failures)} failed) in prompt {request.prompt_number} of {len(inputs.prompts)}."
    return CompressedSummary(
        request=_clip(prompt, 300),
        investigated="; ".join(investigated),
        learned="; ".join(learned[:6]),
        completed="; ".join(completed),
        next_steps=_next_steps(request.last_assistant_message, failures),
        notes=notes,
        compressed=compressed,
        compressor=compressor,
    )


def _next_steps(last_assistant_message: str, failures: list[str]) -> str:
    for sentence in re.split(r"(?<=[.!?])\s+", last_assistant_message or ""):
        if re.search(r"\b(next|todo|remaining|still need|should|follow[- ]up)\b", sentence, re.I):
            return _clip(sentence, 300)
    if failures:
        return _clip(f"Check the failure: {failures[-1]}", 300)
    return ""


def _unique(items: Any) -> list[str]:
    return list(dict.fromkeys(item for item in items if item))
