"""Stored OpenCode sessions (its SQLite database) -> the hook payloads sessionmem's OpenCode plugin sends, as the
contract's.

OpenCode (1.18.33) keeps every session in one SQLite database, ``opencode.db`` in its data folder
(:func:`data_dir`; a build of another release channel names it ``opencode-<channel>.db``, and
``$OPENCODE_DB`` names another file), in WAL mode. Three of its tables hold a conversation: ``session``
(``id``, ``parent_id`` for a subagent's, ``directory`` the folder it worked in, ``time_created`` in ms),
``message`` (``session_id``, ``data``: a JSON object with ``role`` ``user`` or ``assistant``,
``time.created``; an assistant's compaction summary has ``summary: true``) and ``part`` (``message_id``,
``data``: ``type`` ``text`` -- ``text``, ``synthetic`` for what OpenCode writes itself --, ``tool`` --
``tool``, ``callID``, ``state`` with ``status`` ``completed`` (``input``, ``output``, ``metadata.exit`` of a
command) or ``error`` (``input``, ``error``) --, ``compaction`` -- ``auto`` --, ``step-start``...).
Messages are in ``time_created`` order, parts in id order (OpenCode's ids grow with time).
:func:`session_payloads` plays a session back as the plugin's payloads, in the shapes of
``tests/fixtures/opencode/hooks`` (``session_id``, ``cwd`` the session's ``directory``):

- SessionStart (``startup``; none for a subagent's session, as the plugin); UserPromptSubmit for each
  message the user typed (its text parts, not the ones OpenCode writes itself, such as the request to go
  on after a compaction);
- PostToolUse per tool part that ran: OpenCode's tool name and input, its ``output`` as ``tool_response``,
  ``exit_code`` for a command; a tool that failed (``status`` ``error``) with its ``error`` and an empty
  response, as the plugin sends it from the part's update;
- Stop at the end of each turn (before the next prompt, and at the end) with ``last_user_message`` and
  ``last_assistant_message`` (the turn's last text; a compaction's summary is not a reply);
- at a compaction (a user message with a ``compaction`` part), PreCompact with the turn so far
  (``trigger`` ``auto``, or ``manual`` for ``/compact``), then SessionStart with ``source`` ``compact``;
  SessionEnd (``other``) at the end: a stored session is a past one.

:func:`convert_sessions` passes each through :func:`~sessionmem.protocol.agent_payloads.contract_payloads`
(``opencode``), as the live hook does: Claude Code's tool names and fields, a command that exits non-zero
or a tool that failed as a ``PostToolUseFailure``, a patch as a ``Write`` or ``Edit`` per file.

Resource handling:
    Each database is opened read-only (APSW, as sessionmem's own store), read in one read transaction (one consistent
    snapshot while OpenCode writes on: a WAL reader waits for no writer) and closed before the next.

Error handling:
    A database that cannot be opened or read (not one, busy beyond a short timeout, another schema) counts
    as a broken file; a row whose ``data`` is not a JSON object as a broken line; a tool that never finished
    (an interrupted session) as a tool use without a result. None is fatal.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from sessionmem.protocol.agent_payloads import contract_payloads
from sessionmem.protocol.agents import OPENCODE
from sessionmem.replay.convert import ConversionStats, HookEvent, ReplaySession

DATABASE_GLOB = "opencode*.db"
# A reader of a WAL database waits only while OpenCode checkpoints or recovers it: briefly, or the file is
# counted as unreadable rather than waited on.
_BUSY_TIMEOUT_S = 2.0


def data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """OpenCode's data folder: ``$XDG_DATA_HOME/opencode``, else ``~/.local/share/opencode`` (on macOS too:
    OpenCode follows the XDG layout everywhere)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_DATA_HOME") or str(Path(env.get("HOME") or str(Path.home())) / ".local" / "share")
    return Path(base) / "opencode"


def default_root(environ: Mapping[str, str] | None = None) -> Path:
    """Where OpenCode keeps its sessions: the database ``$OPENCODE_DB`` names (relative to the data folder),
    else the data folder."""
    env = os.environ if environ is None else environ
    named = env.get("OPENCODE_DB")
    if named and named != ":memory:":
        return data_dir(env) / named  # an absolute path stays itself
    return data_dir(env)


def database_files(root: Path) -> list[Path]:
    """``root`` itself when it is a file, else its ``opencode*.db`` databases (every release channel's)."""
    if root.is_file():
        return [root]
    return sorted(path for path in root.glob(DATABASE_GLOB) if path.is_file())


@dataclass
class StoredMessage:
    id: str
    info: dict[str, Any]  # the message's ``data``
    parts: list[dict[str, Any]] = field(default_factory=list)  # each part's ``data``, with its ``id``


@dataclass
class StoredSession:
    id: str
    parent_id: str
    directory: str
    created: float  # seconds since the epoch
    messages: list[StoredMessage] = field(default_factory=list)


def _object(raw: Any) -> dict[str, Any] | None:
    try:
        value = json.loads(raw) if isinstance(raw, (str, bytes)) else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _rows(path: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The session, message and part rows of one database, read in one read transaction."""
    connection = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        connection.set_busy_timeout(int(_BUSY_TIMEOUT_S * 1000))
        connection.execute("BEGIN")
        sessions = connection.execute(
            "SELECT id, parent_id, directory, time_created FROM session ORDER BY time_created, id").fetchall()
        messages = connection.execute(
            "SELECT id, session_id, data FROM message ORDER BY session_id, time_created, id").fetchall()
        parts = connection.execute("SELECT id, message_id, data FROM part ORDER BY message_id, id").fetchall()
        connection.execute("COMMIT")
    finally:
        connection.close()
    return sessions, messages, parts


def read_database(path: Path, stats: ConversionStats) -> list[StoredSession]:
    """The sessions of one OpenCode database, each with its messages and their parts in order; an unreadable
    database is counted and gives none."""
    stats.files += 1
    try:
        session_rows, message_rows, part_rows = _rows(path)
    except apsw.Error:
        stats.broken_files += 1
        return []
    stats.lines += len(message_rows) + len(part_rows)
    sessions: dict[str, StoredSession] = {}
    for session_id, parent_id, directory, created in session_rows:
        if isinstance(session_id, str) and session_id:
            sessions[session_id] = StoredSession(
                session_id, parent_id if isinstance(parent_id, str) else "",
                directory if isinstance(directory, str) else "",
                created / 1000 if isinstance(created, (int, float)) else 0.0)
    messages: dict[str, StoredMessage] = {}
    broken: set[Any] = set()  # messages counted already: their parts are not counted again
    for message_id, session_id, data in message_rows:
        info = _object(data)
        session = sessions.get(session_id) if isinstance(session_id, str) else None
        if info is None or session is None or not isinstance(message_id, str):
            stats.broken_lines += 1
            broken.add(message_id)
            continue
        messages[message_id] = StoredMessage(message_id, info)
        session.messages.append(messages[message_id])
    for part_id, message_id, data in part_rows:
        part = _object(data)
        message = messages.get(message_id) if isinstance(message_id, str) else None
        if part is None or message is None:
            stats.broken_lines += message_id not in broken
            continue
        message.parts.append({**part, "id": part_id})
    stats.entries += len(messages) + sum(len(m.parts) for m in messages.values())
    return list(sessions.values())


def _millis(value: Any) -> float:
    return value / 1000 if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _time_of(data: dict[str, Any], *keys: str) -> float:
    """Seconds since the epoch of the first of ``data["time"][key]`` there is; 0.0 when none."""
    times = data.get("time")
    if not isinstance(times, dict):
        return 0.0
    return next((t for t in (_millis(times.get(key)) for key in keys) if t), 0.0)


def typed_text(parts: list[dict[str, Any]]) -> str:
    """What the user typed: the text parts of a message that OpenCode did not write itself, as the plugin
    reads them (``chat.message``)."""
    return "\n".join(part["text"] for part in parts
                     if part.get("type") == "text" and not part.get("synthetic") and isinstance(part.get("text"), str))


def tool_fields(part: dict[str, Any]) -> dict[str, Any] | None:
    """A tool part as the plugin's PostToolUse fields: from ``tool.execute.after`` for a tool that returned
    (with ``exit_code`` when its metadata has one), from the part's update for one that failed; None for a tool
    still pending or running."""
    state = part.get("state")
    if not isinstance(state, dict) or state.get("status") not in ("completed", "error"):
        return None
    tool_input = state.get("input")
    fields: dict[str, Any] = {"tool_name": part.get("tool") if isinstance(part.get("tool"), str) else "",
                              "tool_input": tool_input if isinstance(tool_input, dict) else {}}
    call_id = part.get("callID") if isinstance(part.get("callID"), str) else ""
    if state["status"] == "error":
        error = state.get("error")
        return {**fields, "tool_response": "", "tool_use_id": call_id,
                "error": error if isinstance(error, str) else "failed"}
    output = state.get("output")
    metadata = state.get("metadata")
    code = metadata.get("exit") if isinstance(metadata, dict) else None
    exit_code = {"exit_code": code} if isinstance(code, int) and not isinstance(code, bool) else {}
    return {**fields, "tool_response": output if isinstance(output, str) else "", "tool_use_id": call_id, **exit_code}


def session_payloads(session: StoredSession, stats: ConversionStats) -> Iterator[tuple[float, str, str, dict[str, Any]]]:
    """``(time, stage, key, payload)`` of the plugin's payloads for one stored session (see the module docstring)."""
    base = {"session_id": session.id, "cwd": session.directory}
    at = session.created

    def event(stage: str, key: str, *, when: float = 0.0, **fields: Any) -> tuple[float, str, str, dict[str, Any]]:
        return when or at, stage, f"{session.id}:{key}", {**base, **fields, "hook_event_name": stage}

    if not session.parent_id:  # the plugin asks for no memory for a subagent's session
        yield event("SessionStart", "start", source="startup")
    prompt, reply, turn_key = "", "", ""
    for message in session.messages:
        created = _time_of(message.info, "created") or at
        role = message.info.get("role")
        if role == "user":
            compaction = next((p for p in message.parts if p.get("type") == "compaction"), None)
            if compaction is not None:
                stats.compactions += 1
                at = created
                trigger = "auto" if compaction.get("auto") is not False else "manual"
                yield event("PreCompact", f"{compaction['id']}:precompact", trigger=trigger,
                            last_user_message=prompt, last_assistant_message=reply)
                yield event("SessionStart", f"{compaction['id']}:compact", source="compact")
                continue
            text = typed_text(message.parts)
            if not text:
                continue
            if turn_key:
                stats.stops += 1
                yield event("Stop", f"{turn_key}:stop", last_user_message=prompt, last_assistant_message=reply)
            at, prompt, reply, turn_key = created, text, "", message.id
            stats.prompts += 1
            yield event("UserPromptSubmit", f"{turn_key}:prompt", prompt=text)
            continue
        if role != "assistant" or message.info.get("summary") is True:  # a compaction's summary is no reply
            continue
        at = _time_of(message.info, "completed") or created  # a turn ends when its last reply is complete
        for part in message.parts:
            if part.get("type") == "text" and isinstance(part.get("text"), str) and part["text"]:
                reply = part["text"]
            elif part.get("type") == "tool":
                fields = tool_fields(part)
                if fields is None:
                    stats.unpaired_tool_uses += 1
                    continue
                stats.tool_uses += 1
                yield event("PostToolUse", str(part["id"]), when=_time_of(part["state"], "end", "start"), **fields)
    if turn_key:
        stats.stops += 1
        yield event("Stop", f"{turn_key}:stop", last_user_message=prompt, last_assistant_message=reply)
    yield event("SessionEnd", "end", reason="other")


def convert_sessions(paths: Iterable[Path], stats: ConversionStats | None = None) -> list[ReplaySession]:
    """OpenCode databases as replayable sessions of contract events (see the module docstring); a session found
    in two databases (a copy) is played once."""
    stats = stats or ConversionStats()
    sessions: list[ReplaySession] = []
    seen: set[str] = set()
    for path in paths:
        for stored in read_database(path, stats):
            if stored.id in seen:
                continue
            seen.add(stored.id)
            session = ReplaySession(stored.id, stored.directory)
            for at, stage, key, payload in session_payloads(stored, stats):
                events = contract_payloads(OPENCODE, stage, payload)
                for number, contract in enumerate(events):
                    stats.failed_tool_uses += contract["hook_event_name"] == "PostToolUseFailure"
                    session.events.append(HookEvent(at, str(contract["hook_event_name"]), contract,
                                                    key if len(events) == 1 else f"{key}#{number}"))
            if any(event.stage not in ("SessionStart", "SessionEnd") for event in session.events):
                sessions.append(session)  # not a session opened and left without a word
    stats.sessions = len(sessions)
    return sessions
