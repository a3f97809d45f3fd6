"""Recorded Claude Code transcripts -> the hook events Claude Code would have fired.

Reads JSONL transcripts and ``chat.json`` arrays (any Claude Code version in the
corpus: 1.0.x inline sidechains, 2.0.x ``agent-*.jsonl`` beside the session, 2.1.x
``<session>/subagents/agent-*.jsonl``). Entries are grouped by their ``sessionId``
(agent files carry their parent's), de-duplicated by ``uuid`` (chat.json snapshots
overlap), ordered by timestamp, and turned into hook payloads shaped exactly like
Claude Code's stdin:

- SessionStart, then UserPromptSubmit for each real user prompt (not tool results,
  meta entries, sidechains, ``<task-notification>`` or the summary Claude Code writes
  itself when it compacts a conversation, ``isCompactSummary``);
- PostToolUse for each ``tool_use`` paired with its ``tool_result`` (``toolUseResult``
  as ``tool_response`` where present), PostToolUseFailure when the result is an error;
  tool uses inside a subagent carry its ``agent_id``;
- Stop at the end of each turn with the turn's last assistant text; SessionEnd;
- at a compaction (the ``compact_boundary`` entry Claude Code writes), PreCompact, then the
  SessionStart with ``source=compact`` that follows it live.

Error handling:
    Lines and files that cannot be parsed are counted in :class:`ConversionStats`,
    never fatal. Tool uses without a result (interrupted sessions) are counted too.
    A field of another type than Claude Code writes (a ``message`` that is not an object,
    say) is read as absent: the line costs what it holds, never the backfill
    (``tests/test_transcript_fuzz.py``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sessionmem.protocol.prompts import typed_prompt
from sessionmem.protocol.requests import is_internal_prompt

# Lines Claude Code writes itself in the user's place: nobody typed them, and no hook saw them.
# Claude Code's built-in commands that it handles itself, without the model: the transcript
# records them, but no UserPromptSubmit hook fires for them live, so a backfill does not
# make prompts (and summaries: "Request: /exit") of them either. Commands that send the
# model a prompt (/init, /review, /compact's summary...) stay prompts.
_LOCAL_COMMANDS = frozenset(f"/{name}" for name in (
    "add-dir", "agents", "allowed-tools", "bashes", "bug", "clear", "config", "context", "cost", "doctor", "exit",
    "export", "feedback", "help", "hooks", "ide", "login", "logout", "mcp", "memory", "migrate-installer", "model",
    "output-style", "permissions", "privacy-settings", "quit", "release-notes", "resume", "rewind", "status",
    "statusline", "terminal-setup", "theme", "todos", "upgrade", "usage", "vim"))
_NOT_PROMPTS = ("<local-command-stdout>", "<local-command-stderr>", "Caveat: The messages below were generated",
                "[Request interrupted by user")


@dataclass
class ConversionStats:
    files: int = 0
    lines: int = 0
    broken_lines: int = 0
    broken_files: int = 0
    entries: int = 0
    duplicate_entries: int = 0
    sessions: int = 0
    prompts: int = 0
    tool_uses: int = 0
    failed_tool_uses: int = 0
    subagent_tool_uses: int = 0
    unpaired_tool_uses: int = 0
    stops: int = 0
    compactions: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class HookEvent:
    at: float  # seconds since the epoch, from the transcript
    stage: str
    payload: dict[str, Any]
    key: str  # stable across runs: idempotency key for backfill


@dataclass
class ReplaySession:
    session_id: str
    cwd: str
    events: list[HookEvent] = field(default_factory=list)

    @property
    def tool_uses(self) -> int:
        return sum(1 for e in self.events if e.stage in ("PostToolUse", "PostToolUseFailure"))


def transcript_files(root: Path) -> list[Path]:
    """Every transcript under ``root`` (or ``root`` itself), in a stable order."""
    if root.is_file():
        return [root]
    found = []
    for dirpath, _, names in os.walk(root):
        for name in names:
            if name.endswith(".jsonl") or name.endswith("chat.json") or (name.startswith("logs__chat") and name.endswith(".json")):
                found.append(Path(dirpath) / name)
    return sorted(found)


def _agent_id_from_name(path: Path) -> str:
    stem = path.stem
    marker = stem.rfind("agent-")
    return stem[marker + len("agent-") :] if marker >= 0 else ""


def read_entries(path: Path, stats: ConversionStats) -> Iterator[dict[str, Any]]:
    stats.files += 1
    file_agent = _agent_id_from_name(path)
    try:
        if path.suffix == ".json":
            try:
                data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
            except ValueError:
                stats.broken_files += 1
                return
            entries: Iterable[Any] = data if isinstance(data, list) else []
            if not isinstance(data, list):
                stats.broken_files += 1
        else:
            entries = _jsonl(path, stats)
        for entry in entries:
            if isinstance(entry, dict):
                if file_agent and not entry.get("agentId"):
                    entry["agentId"] = file_agent
                yield entry
    except OSError:
        stats.broken_files += 1


def _jsonl(path: Path, stats: ConversionStats) -> Iterator[Any]:
    with open(path, "rb") as f:
        for raw in f:
            if not raw.strip():
                continue
            stats.lines += 1
            try:
                yield json.loads(raw)
            except ValueError:
                stats.broken_lines += 1


def timestamp_of(entry: dict[str, Any]) -> float:
    """Seconds since the epoch of a transcript line's ISO ``timestamp``; 0.0 when it has none."""
    raw = entry.get("timestamp")
    if isinstance(raw, str):
        try:
            return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    return 0.0


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def _tool_results(content: Any) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


def _is_prompt(entry: dict[str, Any]) -> str:
    """The prompt text if ``entry`` is a real user prompt, else ''."""
    if entry.get("type") != "user" or entry.get("isSidechain") or entry.get("isMeta") or entry.get("agentId"):
        return ""
    if entry.get("isCompactSummary"):  # Claude Code's own summary after a compaction: no UserPromptSubmit fires
        return ""
    message = entry.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if _tool_results(content):
        return ""
    text = _text(content).strip()
    if not text or is_internal_prompt(text) or text.startswith(_NOT_PROMPTS):
        return ""
    typed = typed_prompt(text)  # a slash command as the user typed it, not its tags
    if typed.split(" ", 1)[0] in _LOCAL_COMMANDS:
        return ""
    return typed


def _is_compaction(entry: dict[str, Any]) -> bool:
    """Whether ``entry`` marks where Claude Code compacted the main conversation (not a subagent's)."""
    return (entry.get("type") == "system" and entry.get("subtype") == "compact_boundary"
            and not entry.get("isSidechain") and not entry.get("agentId"))


def _agent_fields(entry: dict[str, Any]) -> dict[str, str]:
    """Attribution for a subagent's entries; 1.0.x inline sidechains carry no agent id. An agent
    type the transcript does not name is left out (not invented): the subagent is known, not which."""
    if entry.get("agentId"):
        fields = {"agent_id": str(entry["agentId"])}
        return {**fields, "agent_type": str(entry["agentType"])} if entry.get("agentType") else fields
    if entry.get("isSidechain"):
        return {"agent_id": "sidechain"}
    return {}


def convert(paths: Iterable[Path], stats: ConversionStats | None = None) -> list[ReplaySession]:
    """Turn transcript files into replayable sessions (see the module docstring)."""
    stats = stats or ConversionStats()
    by_session: dict[str, list[tuple[float, int, dict[str, Any]]]] = {}
    seen: set[str] = set()
    order = 0
    for path in paths:
        for entry in read_entries(path, stats):
            session_id = entry.get("sessionId")
            if not isinstance(session_id, str) or not session_id:
                continue
            uuid = entry.get("uuid")
            if isinstance(uuid, str):
                if uuid in seen:
                    stats.duplicate_entries += 1
                    continue
                seen.add(uuid)
            stats.entries += 1
            order += 1
            by_session.setdefault(session_id, []).append((timestamp_of(entry), order, entry))
    sessions = []
    for session_id, entries in by_session.items():
        entries.sort(key=lambda item: (item[0], item[1]))
        session = _session_events(session_id, [e for _, _, e in entries], stats)
        if session.events:
            sessions.append(session)
    stats.sessions = len(sessions)
    return sessions


def _session_events(session_id: str, entries: list[dict[str, Any]], stats: ConversionStats) -> ReplaySession:
    cwd = next((e["cwd"] for e in entries if isinstance(e.get("cwd"), str) and e["cwd"]), "")
    session = ReplaySession(session_id, cwd)
    pending: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}  # tool_use_id -> (block, entry)
    done: set[str] = set()
    first_at = next((t for t in map(timestamp_of, entries) if t), 0.0)
    base = {"session_id": session_id, "cwd": cwd, "transcript_path": ""}

    def emit(at: float, stage: str, key: str, **fields: Any) -> None:
        session.events.append(HookEvent(at, stage, {**base, "hook_event_name": stage, **fields}, key))

    emit(first_at, "SessionStart", f"{session_id}:start", source="startup")
    turn_open, last_text, last_at, turn_key = False, "", first_at, ""
    for entry in entries:
        at = timestamp_of(entry) or last_at
        last_at = at
        message = entry.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if _is_compaction(entry):
            stats.compactions += 1
            point = f"{session_id}:{entry.get('uuid') or len(session.events)}"
            metadata = entry.get("compactMetadata")
            trigger = metadata.get("trigger") if isinstance(metadata, dict) else None
            emit(at, "PreCompact", f"{point}:precompact", trigger=trigger if trigger in ("manual", "auto") else "auto",
                 last_assistant_message=last_text)
            emit(at, "SessionStart", f"{point}:compact", source="compact")
            continue
        prompt = _is_prompt(entry)
        if prompt:
            if turn_open:
                stats.stops += 1
                emit(at, "Stop", f"{turn_key}:stop", last_assistant_message=last_text)
            turn_key = f"{session_id}:{entry.get('uuid') or len(session.events)}"
            stats.prompts += 1
            emit(at, "UserPromptSubmit", f"{turn_key}:prompt", prompt=prompt)
            turn_open, last_text = True, ""
            continue
        agent = _agent_fields(entry)
        if entry.get("type") == "assistant" and isinstance(content, list):
            for block in content:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                    if block["id"] not in done:
                        pending[block["id"]] = (block, agent)
                elif block.get("type") == "text" and block.get("text") and not entry.get("isSidechain"):
                    last_text = block["text"]
            continue
        results = _tool_results(content)
        for result in results:
            tool_use_id = result.get("tool_use_id")
            if not isinstance(tool_use_id, str) or tool_use_id not in pending:
                continue
            block, agent_fields = pending.pop(tool_use_id)
            done.add(tool_use_id)
            response = entry.get("toolUseResult") if len(results) == 1 and "toolUseResult" in entry else result.get("content")
            failed = bool(result.get("is_error"))
            stats.tool_uses += 1
            stats.failed_tool_uses += failed
            stats.subagent_tool_uses += bool(agent_fields)
            fields: dict[str, Any] = {"tool_name": str(block.get("name") or "unknown"), "tool_input": block.get("input"),
                                      "tool_use_id": tool_use_id, **agent_fields}
            if failed:
                emit(at, "PostToolUseFailure", f"{session_id}:{tool_use_id}", error=_text(response) or str(response), **fields)
            else:
                emit(at, "PostToolUse", f"{session_id}:{tool_use_id}", tool_response=response, **fields)
    stats.unpaired_tool_uses += len(pending)
    if turn_open:
        stats.stops += 1
        emit(last_at, "Stop", f"{turn_key}:stop", last_assistant_message=last_text)
    emit(last_at, "SessionEnd", f"{session_id}:end", reason="other")
    return session
