"""Recorded Codex CLI sessions (rollout files) -> the hook payloads Codex would have fired, as the contract's.

Codex writes each session to ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<session id>.jsonl``
(its lines: :mod:`sessionmem.protocol.codex_rollout`; a resumed session goes on in the same file).
:func:`rollout_payloads` plays a session's lines back as the payloads Codex's hooks receive, in the
shapes of ``tests/fixtures/codex/hooks`` (``session_id`` = Codex's, ``turn_id``, ``transcript_path``,
``cwd``, ``model``):

- SessionStart (``startup``); UserPromptSubmit for each prompt the user typed (not the
  ``<environment_context>``, instructions or ``AGENTS.md`` messages Codex writes itself);
- PostToolUse per tool call paired with its output: ``exec_command`` (and the older ``shell``) as
  ``Bash`` with ``tool_input.command`` the command and the command's output as ``tool_response``;
  the freeform ``apply_patch`` with ``tool_input.command`` the patch; an MCP tool (``namespace``
  ``mcp__<server>``) as ``mcp__<server>__<tool>`` with its arguments and result. Where the live hook
  cannot tell, the rollout can: a command that exited non-zero (``exit_code``) or a patch Codex did not
  apply is a ``PostToolUseFailure`` with Claude Code's ``error`` (``Exit code N`` and the output; a
  patch, as a failed Write or Edit of each file it names);
  Codex's other tools (``write_stdin``, ``update_plan``, searches...) fire no PostToolUse and make none;
- Stop at the end of each turn (``task_complete``) with ``last_assistant_message``;
- at a compaction (the rollout's ``compacted`` line), PreCompact with the last prompt and reply before
  it (what the live hook reads from the rollout), then SessionStart with ``source=compact``; SessionEnd.

:func:`convert_rollouts` passes each through :func:`~sessionmem.protocol.agent_payloads.contract_payloads`
(``codex``), as the live hook does: a patch becomes a Write or Edit per file, so a backfill and the
live hooks send the same events.

Error handling:
    Lines and files that cannot be parsed are counted in :class:`~sessionmem.replay.convert.ConversionStats`,
    never fatal, and so are tool calls without an output (an interrupted session).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sessionmem.protocol.agent_payloads import APPLY_PATCH, contract_payloads
from sessionmem.protocol.agents import CODEX
from sessionmem.protocol.codex_rollout import (
    assistant_text_of,
    is_compaction,
    payload_of,
    prompt_of,
    turn_id_of,
)
from sessionmem.replay.convert import ConversionStats, HookEvent, ReplaySession, read_entries, timestamp_of

_SHELL_TOOLS = frozenset(("exec_command", "shell", "container.exec", "local_shell"))
_EXIT_CODE = re.compile(r"^(?:Process exited with code|Exit code:) (-?\d+)$", re.MULTILINE)
_OUTPUT_HEADER = "\nOutput:\n"


def rollout_files(root: Path) -> list[Path]:
    """Every ``rollout-*.jsonl`` under ``root`` (or ``root`` itself), oldest first (their names start with the time)."""
    if root.is_file():
        return [root]
    found = [Path(dirpath) / name for dirpath, _, names in os.walk(root)
             for name in names if name.startswith("rollout-") and name.endswith(".jsonl")]
    return sorted(found, key=lambda path: (path.name, str(path)))


@dataclass(frozen=True)
class _Outcome:
    """How a tool call ended, from the ``event_msg`` Codex wrote about it."""

    exit_code: int | None = None
    output: str | None = None
    applied: bool | None = None  # a patch: applied or not
    result: dict[str, Any] | None = None  # an MCP call: the server's result, as the live hook gets it


def _outcomes(entries: list[dict[str, Any]]) -> dict[str, _Outcome]:
    """Each tool call's outcome by call id: ``item_completed`` (``CommandExecution``, ``FileChange``,
    ``McpToolCall``), or the ``exec_command_end``/``patch_apply_end`` events that carry it."""
    found: dict[str, _Outcome] = {}
    for entry in entries:
        event = payload_of(entry, "event_msg")
        if event is None:
            continue
        item = event.get("item") if event.get("type") == "item_completed" else None
        if isinstance(item, dict) and isinstance(item.get("id"), str):
            if item.get("type") == "CommandExecution":
                code = item.get("exit_code")
                found[item["id"]] = _Outcome(exit_code=code if isinstance(code, int) else None,
                                             output=_str(item.get("aggregated_output")))
            elif item.get("type") == "FileChange":
                found[item["id"]] = _Outcome(applied=item.get("status") == "completed")
            elif item.get("type") == "McpToolCall" and isinstance(item.get("result"), dict):
                found[item["id"]] = _Outcome(result=item["result"])
        elif event.get("type") == "exec_command_end" and isinstance(event.get("call_id"), str):
            code = event.get("exit_code")
            found[event["call_id"]] = _Outcome(exit_code=code if isinstance(code, int) else None,
                                               output=_str(event.get("aggregated_output")))
        elif event.get("type") == "patch_apply_end" and isinstance(event.get("call_id"), str):
            found[event["call_id"]] = _Outcome(applied=bool(event.get("success")))
    return found


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def _shell_command(arguments: Any) -> str:
    """The command line of a shell call: ``exec_command``'s ``cmd``, or the older ``shell``'s argv
    (``["bash", "-lc", "<script>"]`` is the script)."""
    if not isinstance(arguments, dict):
        return ""
    command = arguments.get("cmd", arguments.get("command"))
    if isinstance(command, str):
        return command
    if isinstance(command, list) and all(isinstance(part, str) for part in command):
        if len(command) == 3 and command[1] in ("-lc", "-c"):
            return command[2]
        return " ".join(command)
    return ""


def tool_call(payload: dict[str, Any]) -> tuple[str, dict[str, Any] | Any] | None:
    """``(tool_name, tool_input)`` as Codex's hooks name a ``response_item`` tool call; None for a tool whose
    use fires no PostToolUse."""
    kind, name = payload.get("type"), payload.get("name")
    if kind == "custom_tool_call" and name == APPLY_PATCH:
        return APPLY_PATCH, {"command": _str(payload.get("input")) or ""}
    if kind == "local_shell_call":
        action = payload.get("action")
        return "Bash", {"command": _shell_command(action if isinstance(action, dict) else {})}
    if kind != "function_call" or not isinstance(name, str):
        return None
    arguments = _arguments(payload.get("arguments"))
    namespace = payload.get("namespace")
    if isinstance(namespace, str) and namespace.startswith("mcp__"):
        return f"{namespace}__{name}", arguments if isinstance(arguments, dict) else {"arguments": arguments}
    if name in _SHELL_TOOLS:
        return "Bash", {"command": _shell_command(arguments)}
    if name == APPLY_PATCH:  # the JSON apply_patch of models without the freeform tool
        patch = arguments.get("input") if isinstance(arguments, dict) else arguments
        return APPLY_PATCH, {"command": patch if isinstance(patch, str) else ""}
    return None


def _output_text(payload: dict[str, Any]) -> str:
    output = payload.get("output")
    if isinstance(output, str):
        return output
    if isinstance(output, dict):  # {"content": ..., "success": ...}
        content = output.get("content")
        return content if isinstance(content, str) else json.dumps(content)
    return json.dumps(output) if output is not None else ""


def _shell_result(text: str, outcome: _Outcome | None) -> tuple[str, int]:
    """(the command's output, its exit code) from the call's output text, or the outcome Codex recorded."""
    code = outcome.exit_code if outcome is not None else None
    output = outcome.output if outcome is not None else None
    decoded = _arguments(text) if text.startswith("{") else None
    if isinstance(decoded, dict) and isinstance(decoded.get("output"), str):  # {"output", "metadata": {"exit_code"}}
        metadata = decoded.get("metadata")
        if code is None and isinstance(metadata, dict) and isinstance(metadata.get("exit_code"), int):
            code = metadata["exit_code"]
        output = decoded["output"] if output is None else output
    if code is None:
        found = _EXIT_CODE.search(text.split(_OUTPUT_HEADER, 1)[0])
        code = int(found.group(1)) if found else 0
    if output is None:
        output = text.split(_OUTPUT_HEADER, 1)[1] if _OUTPUT_HEADER in text else text
    return output, code


def _tool_event(name: str, tool_input: Any, text: str, outcome: _Outcome | None) -> tuple[str, dict[str, Any]]:
    """(stage, fields) of a paired tool call: PostToolUse with ``tool_response``, or PostToolUseFailure with
    ``error``."""
    fields: dict[str, Any] = {"tool_name": name, "tool_input": tool_input}
    if name == "Bash":
        output, code = _shell_result(text, outcome)
        if code:
            return "PostToolUseFailure", {**fields, "error": f"Exit code {code}\n{output}"}
        return "PostToolUse", {**fields, "tool_response": output}
    if name == APPLY_PATCH:
        applied = outcome.applied if outcome is not None and outcome.applied is not None else (
            text.startswith("Exit code: 0") or "Success. Updated the following files" in text)
        if not applied:
            return "PostToolUseFailure", {**fields, "error": text}
        return "PostToolUse", {**fields, "tool_response": text}
    # An MCP call: the server's result (content, structuredContent, isError), an object as the live hook gets it.
    result = outcome.result if outcome is not None and outcome.result is not None else _arguments(
        text.split(_OUTPUT_HEADER, 1)[-1])
    if isinstance(result, dict) and result.get("isError") is True:
        return "PostToolUseFailure", {**fields, "error": text}
    return "PostToolUse", {**fields, "tool_response": result}


class _ToolCalls:
    """Tool calls waiting for their output, paired as the outputs come (a call seen twice is played once)."""

    def __init__(self, outcomes: dict[str, _Outcome]) -> None:
        self.outcomes = outcomes
        self.pending: dict[str, tuple[str, Any]] = {}
        self.done: set[str] = set()

    def pair(self, entry: dict[str, Any]) -> tuple[str, str, dict[str, Any]] | None:
        """``(stage, call id, fields)`` when ``entry`` is the output of a call waiting for it; a call is kept."""
        item = payload_of(entry, "response_item")
        if item is None or not isinstance(item.get("call_id"), str):
            return None
        call_id = item["call_id"]
        if item.get("type") in ("function_call_output", "custom_tool_call_output"):
            if call_id not in self.pending:
                return None
            name, tool_input = self.pending.pop(call_id)
            self.done.add(call_id)
            stage, fields = _tool_event(name, tool_input, _output_text(item), self.outcomes.get(call_id))
            return stage, call_id, fields
        call = tool_call(item) if call_id not in self.done else None
        if call is not None:
            self.pending[call_id] = call
        return None


@dataclass(frozen=True)
class RolloutPayload:
    """One payload Codex's hooks would have received: its time, its event, a key stable across runs."""

    at: float
    stage: str
    key: str
    payload: dict[str, Any]


def _session_of(entries: list[dict[str, Any]]) -> tuple[str, str]:
    """(session id, cwd) from the rollout's ``session_meta``."""
    for entry in entries:
        meta = payload_of(entry, "session_meta")
        if meta is not None and isinstance(meta.get("id"), str) and meta["id"]:
            return meta["id"], meta["cwd"] if isinstance(meta.get("cwd"), str) else ""
    return "", ""


def rollout_payloads(entries: list[dict[str, Any]], transcript_path: str,
                     stats: ConversionStats) -> Iterator[RolloutPayload]:
    """The hook payloads of one session's rollout lines, in order (see the module docstring)."""
    session_id, cwd = _session_of(entries)
    if not session_id:
        return
    calls = _ToolCalls(_outcomes(entries))
    base = {"session_id": session_id, "transcript_path": transcript_path, "cwd": cwd}
    # The model of the first turn, which SessionStart (fired with that turn) names.
    model = next((c["model"] for c in (payload_of(e, "turn_context") for e in entries)
                  if c is not None and isinstance(c.get("model"), str)), "")
    turn_id, turn_open, prompt, reply = "", False, "", ""
    at = next((t for t in map(timestamp_of, entries) if t), 0.0)

    def event(stage: str, key: str, **fields: Any) -> RolloutPayload:
        turn = {"turn_id": turn_id} if turn_id and stage not in ("SessionStart", "SessionEnd") else {}
        named = {"model": model} if model and stage != "SessionEnd" else {}
        return RolloutPayload(at, stage, f"{session_id}:{key}",
                              {**base, **turn, "hook_event_name": stage, **named, **fields})

    started = False
    for index, entry in enumerate(entries):
        at = timestamp_of(entry) or at
        context = payload_of(entry, "turn_context")
        if context is not None:
            model = context["model"] if isinstance(context.get("model"), str) else model
            turn_id = context["turn_id"] if isinstance(context.get("turn_id"), str) else turn_id
        if not started:
            started = True
            yield event("SessionStart", "start", source="startup")
        if is_compaction(entry):
            stats.compactions += 1
            yield event("PreCompact", f"{index}:precompact", trigger="auto", last_user_message=prompt,
                        last_assistant_message=reply)
            yield event("SessionStart", f"{index}:compact", source="compact")
            continue
        text = prompt_of(entry)
        if text:
            if turn_open:
                stats.stops += 1
                yield event("Stop", f"{turn_id or index}:stop", stop_hook_active=False, last_assistant_message=reply)
            turn_id = turn_id_of(entry) or turn_id
            stats.prompts += 1
            prompt, reply, turn_open = text, "", True
            yield event("UserPromptSubmit", f"{turn_id or index}:prompt", prompt=text)
            continue
        said = assistant_text_of(entry)
        if said:
            reply = said
            continue
        ended = payload_of(entry, "event_msg")
        if ended is not None and ended.get("type") == "task_complete":
            if turn_open:
                last = ended.get("last_agent_message")
                reply = last if isinstance(last, str) and last else reply
                stats.stops += 1
                yield event("Stop", f"{turn_id or index}:stop", stop_hook_active=False, last_assistant_message=reply)
                turn_open = False
            continue
        paired = calls.pair(entry)
        if paired is not None:
            stage, call_id, fields = paired
            stats.tool_uses += 1
            stats.failed_tool_uses += stage == "PostToolUseFailure"
            yield event(stage, call_id, **fields, tool_use_id=call_id)
    stats.unpaired_tool_uses += len(calls.pending)
    if turn_open:
        stats.stops += 1
        yield event("Stop", f"{turn_id or 'end'}:stop", stop_hook_active=False, last_assistant_message=reply)
    yield event("SessionEnd", "end", reason="other")


def _contract_events(played: RolloutPayload) -> list[dict[str, Any]]:
    """The contract's payloads of a played-back one: as the live hook makes them, and a patch Codex did not
    apply (which fires no hook live) as a failed Write or Edit of each file it names."""
    if played.stage == "PostToolUseFailure" and played.payload.get("tool_name") == APPLY_PATCH:
        return [{**edit, "hook_event_name": "PostToolUseFailure"}
                for edit in contract_payloads(CODEX, "PostToolUse", played.payload)]
    return contract_payloads(CODEX, played.stage, played.payload)


def _sessions(paths: Iterable[Path], stats: ConversionStats) -> dict[str, tuple[str, list[dict[str, Any]]]]:
    """Each session's lines (a session resumed into another file goes on there), with its first file."""
    by_session: dict[str, tuple[str, list[dict[str, Any]]]] = {}
    for path in paths:
        entries = list(read_entries(path, stats))
        stats.entries += len(entries)
        session_id, _ = _session_of(entries)
        if not session_id:
            continue
        first, lines = by_session.setdefault(session_id, (str(path), []))
        lines.extend(entries)
    return by_session


def convert_rollouts(paths: Iterable[Path], stats: ConversionStats | None = None) -> list[ReplaySession]:
    """Codex rollout files as replayable sessions of contract events (see the module docstring)."""
    stats = stats or ConversionStats()
    sessions = []
    for session_id, (path, entries) in _sessions(paths, stats).items():
        _, cwd = _session_of(entries)
        session = ReplaySession(session_id, cwd)
        for played in rollout_payloads(entries, path, stats):
            events = _contract_events(played)
            for number, payload in enumerate(events):
                key = played.key if len(events) == 1 else f"{played.key}#{number}"
                session.events.append(HookEvent(played.at, str(payload["hook_event_name"]), payload, key))
        if session.events:
            sessions.append(session)
    stats.sessions = len(sessions)
    return sessions
