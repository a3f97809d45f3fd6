"""Recorded Gemini CLI sessions (chat files) -> the hook payloads the Gemini CLI would have fired, as the contract's.

The Gemini CLI (0.61.0) writes each session to ``~/.gemini/tmp/<project>/chats/session-<time>-<id>.jsonl``
and the project's working directory to ``~/.gemini/tmp/<project>/.project_root``. A chat file is a log
of records: a header (``sessionId``, ``startTime``, ``kind``), messages (``id``, ``timestamp``, ``type``
``user`` or ``gemini``, ``content``; a ``gemini`` message is written again, same ``id``, once its
``toolCalls`` are done, each with ``name``, ``args``, ``status`` and the ``functionResponse`` the model
got), and ``{"$set": {...}}`` updates (``messages`` replaces the whole list: a resumed session starts
with its history so, its tool calls' records left out). :func:`chat_messages` replays the log into the conversation it ends with;
:func:`chat_payloads` plays that back as the Gemini CLI's hook payloads, in the shapes of
``tests/fixtures/gemini/hooks``:

- SessionStart; BeforeAgent for each prompt the user typed (not the ``<session_context>`` the CLI
  writes first, nor a tool's ``functionResponse``);
- AfterTool per tool call, with ``tool_response`` ``{llmContent, returnDisplay, error?}`` (a call whose
  ``status`` is ``error`` carries its ``error``) and, which the live payload lacks, the call's ``id`` as
  ``tool_use_id``;
- AfterAgent at the end of each turn with ``prompt`` and ``prompt_response`` (the turn's last text);
  SessionEnd.

:func:`convert_chats` passes each through :func:`~sessionmem.protocol.agent_payloads.contract_payloads`
(``gemini-cli``), as the live hook does: Claude Code's tool names, a command that exits non-zero or a
tool that failed as a ``PostToolUseFailure``.

Error handling:
    Lines and files that cannot be parsed are counted in :class:`~sessionmem.replay.convert.ConversionStats`,
    never fatal.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from sessionmem.protocol.agent_payloads import contract_payloads
from sessionmem.protocol.agents import GEMINI_CLI
from sessionmem.replay.convert import ConversionStats, HookEvent, ReplaySession, read_entries, timestamp_of

_CLI_WRITTEN = ("<session_context>",)  # user-role text the CLI writes itself
PROJECT_ROOT_FILE = ".project_root"


def chat_files(root: Path) -> list[Path]:
    """Every ``chats/session-*.jsonl`` under ``root`` (or ``root`` itself), oldest first."""
    if root.is_file():
        return [root]
    found = [Path(dirpath) / name for dirpath, _, names in os.walk(root) if Path(dirpath).name == "chats"
             for name in names if name.startswith("session-") and name.endswith(".jsonl")]
    return sorted(found, key=lambda path: (path.name, str(path)))


def chat_messages(records: Iterable[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """(session id, the conversation's messages in order) of a chat file's records."""
    session_id = ""
    order: dict[str, dict[str, Any]] = {}  # the conversation as it stands, by message id
    seen: dict[str, dict[str, Any]] = {}  # every message written, the fullest version
    for record in records:
        update = record.get("$set")
        if isinstance(update, dict):
            if isinstance(update.get("sessionId"), str):
                session_id = session_id or update["sessionId"]
            if isinstance(update.get("messages"), list):
                # A resumed session's history, rewritten without the tool calls' records: a message already
                # seen with its ``toolCalls`` keeps them.
                order = {m["id"]: _richer(seen.get(m["id"]), m) for m in update["messages"]
                         if isinstance(m, dict) and isinstance(m.get("id"), str)}
        elif isinstance(record.get("sessionId"), str) and "type" not in record:
            session_id = session_id or record["sessionId"]
        elif isinstance(record.get("id"), str) and isinstance(record.get("type"), str):
            seen[record["id"]] = order[record["id"]] = record  # written again: replaces itself, in its place
    return session_id, list(order.values())


def _richer(known: dict[str, Any] | None, rewritten: dict[str, Any]) -> dict[str, Any]:
    return known if known is not None and "toolCalls" in known and "toolCalls" not in rewritten else rewritten


def _prompt(message: dict[str, Any]) -> str:
    content = message.get("content")
    if message.get("type") != "user" or not isinstance(content, list):
        return ""
    if any(isinstance(part, dict) and "functionResponse" in part for part in content):
        return ""
    text = "\n".join(part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str))
    return "" if text.strip().startswith(_CLI_WRITTEN) else text.strip()


def _reply(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)).strip()
    return ""


def _tool_response(call: dict[str, Any]) -> dict[str, Any]:
    """The ``tool_response`` of the live AfterTool: what the model got, the display, and the error of a failed call."""
    response: dict[str, Any] = {}
    results = call.get("result")
    for result in results if isinstance(results, list) else []:
        function = result.get("functionResponse") if isinstance(result, dict) else None
        if isinstance(function, dict) and isinstance(function.get("response"), dict):
            response = function["response"]
            break
    output, error = response.get("output"), response.get("error")
    text = output if isinstance(output, str) else error if isinstance(error, str) else json.dumps(response)
    fields: dict[str, Any] = {"llmContent": text, "returnDisplay": call.get("resultDisplay", "")}
    if call.get("status") == "error":
        fields["error"] = {"message": error if isinstance(error, str) else text}
    return fields


def project_root(chat: Path) -> str:
    """The working directory the Gemini CLI recorded beside the chat (``<project>/.project_root``), or ''."""
    try:
        return (chat.parent.parent / PROJECT_ROOT_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def chat_payloads(session_id: str, messages: list[dict[str, Any]], cwd: str, transcript_path: str,
                  stats: ConversionStats) -> Iterator[tuple[float, str, str, dict[str, Any]]]:
    """``(time, event, key, payload)`` of the hook events of one session's messages (see the module docstring)."""
    base = {"session_id": session_id, "transcript_path": transcript_path, "cwd": cwd}
    at = next((t for t in map(timestamp_of, messages) if t), 0.0)

    def event(name: str, key: str, **fields: Any) -> tuple[float, str, str, dict[str, Any]]:
        return at, name, f"{session_id}:{key}", {**base, "hook_event_name": name, "timestamp": stamp, **fields}

    stamp = next((m["timestamp"] for m in messages if isinstance(m.get("timestamp"), str)), "")
    yield event("SessionStart", "start", source="startup")
    prompt, reply, turn_key = "", "", ""
    for message in messages:
        at = timestamp_of(message) or at
        stamp = message["timestamp"] if isinstance(message.get("timestamp"), str) else stamp
        text = _prompt(message)
        if text:
            if turn_key:
                stats.stops += 1
                yield event("AfterAgent", f"{turn_key}:stop", prompt=prompt, prompt_response=reply, stop_hook_active=False)
            prompt, reply, turn_key = text, "", str(message["id"])
            stats.prompts += 1
            yield event("BeforeAgent", f"{turn_key}:prompt", prompt=text)
            continue
        if message.get("type") != "gemini":
            continue
        reply = _reply(message) or reply
        calls = message.get("toolCalls")
        for call in calls if isinstance(calls, list) else []:
            if not isinstance(call, dict) or not isinstance(call.get("id"), str):
                continue
            stats.tool_uses += 1
            yield event("AfterTool", call["id"], tool_name=call.get("name", ""), tool_input=call.get("args") or {},
                        tool_response=_tool_response(call), tool_use_id=call["id"])
    if turn_key:
        stats.stops += 1
        yield event("AfterAgent", f"{turn_key}:stop", prompt=prompt, prompt_response=reply, stop_hook_active=False)
    yield event("SessionEnd", "end", reason="exit")


def session_chats(paths: Iterable[Path], stats: ConversionStats) -> dict[str, tuple[Path, list[dict[str, Any]]]]:
    """Each session's chat file (``paths`` oldest first) and its conversation. A session found in several files
    is the one whose conversation is the longest, the later on a tie: a resumed session may go on in a later
    file that starts with its whole history, or the CLI, resuming, may start a file of its own (header and
    ``<session_context>`` only, named after the minute it resumed) and go on writing in the first."""
    found: dict[str, tuple[Path, list[dict[str, Any]]]] = {}
    for path in paths:
        records = list(read_entries(path, stats))
        stats.entries += len(records)
        session_id, messages = chat_messages(records)
        known = found.get(session_id)
        if session_id and messages and (known is None or len(messages) >= len(known[1])):
            found[session_id] = (path, messages)
    return found


def convert_chats(paths: Iterable[Path], stats: ConversionStats | None = None) -> list[ReplaySession]:
    """Gemini CLI chat files as replayable sessions of contract events (see the module docstring), a session
    from its fullest file (:func:`session_chats`)."""
    stats = stats or ConversionStats()
    sessions = []
    for session_id, (path, messages) in session_chats(paths, stats).items():
        cwd = project_root(path)
        session = ReplaySession(session_id, cwd)
        for at, name, key, payload in chat_payloads(session_id, messages, cwd, str(path), stats):
            for contract in contract_payloads(GEMINI_CLI, name, payload):
                stats.failed_tool_uses += contract["hook_event_name"] == "PostToolUseFailure"
                session.events.append(HookEvent(at, str(contract["hook_event_name"]), contract, key))
        sessions.append(session)
    stats.sessions = len(sessions)
    return sessions
