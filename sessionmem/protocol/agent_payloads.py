"""Another agent's hook payload in the one hook contract, and the worker's answer in that agent's output fields.
Standard library only (hook hot path).

The worker, the backfill and the tests speak one contract: Claude Code's hook payloads
(:mod:`.requests` maps them to the worker's requests). An adapter here is all an agent
needs beyond it:

- :func:`contract_stage`: the agent's event name as the contract's stage (Codex uses Claude
  Code's names).
- :func:`contract_payloads`: the agent's payload as contract payloads, usually one. Codex
  sends a shell command as Claude Code's ``Bash`` (``tool_input.command``), but a file edit as
  its ``apply_patch`` tool with the raw patch: each file the patch adds, changes, moves or
  deletes becomes its own ``Write`` or ``Edit`` of that file (:func:`patch_edits`), so what a
  Codex session changed is remembered, and recalled, by file as Claude Code's edits are.
- :func:`runs_another_agents_hook`: whether a hook installed for one agent was run by another
  (Codex can import Claude Code's hooks): such a run sends nothing, so no session is captured
  twice, or under the wrong agent.
- :func:`agent_output`: the worker's answer (memory for the model, a line for the user) in the
  output fields the agent reads.

Error handling:
    Whatever the payload holds, these return contract payloads or nothing, never raise: a
    patch that does not parse is kept as the tool use it was (``apply_patch`` with its text).
"""

from __future__ import annotations

from sessionmem.protocol.agents import CLAUDE_CODE, CODEX

TYPE_CHECKING = False  # typing costs a hook ~4 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

APPLY_PATCH = "apply_patch"
_ADD, _UPDATE, _DELETE, _MOVE = "*** Add File: ", "*** Update File: ", "*** Delete File: ", "*** Move to: "
_END = ("*** End Patch", "*** End of File")


def runs_another_agents_hook(agent: str, payload: dict[str, Any]) -> bool:
    """Whether ``payload`` comes from another agent than ``agent``, whose hook this is. Codex marks every event of
    a turn with ``turn_id``, which Claude Code's payloads never carry; a Codex hook, then, is Codex's."""
    return agent == CLAUDE_CODE and isinstance(payload.get("turn_id"), str)


def contract_stage(agent: str, stage: str) -> str:
    """The contract's name for the agent's hook event ``stage`` (Codex's are Claude Code's)."""
    return stage


def _absolute(path: str, cwd: str) -> str:
    if not cwd or path.startswith("/"):
        return path
    return cwd.rstrip("/") + "/" + path


def patch_edits(patch: str, cwd: str) -> list[dict[str, Any]]:
    """The files an ``apply_patch`` patch changes, each as a contract tool input: ``{"tool_name": "Write",
    "tool_input": {"file_path", "content"}}`` for a file it adds, ``Edit`` (``old_string``/``new_string``:
    the hunks' removed and added lines with their context) for one it changes, moves or deletes. Empty when
    ``patch`` is not one."""
    edits: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    old: list[str] = []
    new: list[str] = []

    def finish() -> None:
        if current is None:
            return
        tool_input = current["tool_input"]
        if current["tool_name"] == "Write":
            tool_input["content"] = "\n".join(new) + ("\n" if new else "")
        else:
            tool_input["old_string"], tool_input["new_string"] = "\n".join(old), "\n".join(new)
        edits.append(current)

    for line in patch.splitlines():
        for prefix, tool, action in ((_ADD, "Write", "add"), (_UPDATE, "Edit", "update"), (_DELETE, "Edit", "delete")):
            if line.startswith(prefix):
                finish()
                old, new = [], []
                path = _absolute(line[len(prefix):].strip(), cwd)
                current = {"tool_name": tool, "tool_input": {"file_path": path, "patch_action": action}}
                break
        else:
            if current is None or line.startswith(_END):
                continue
            if line.startswith(_MOVE):
                current["tool_input"]["moved_to"] = _absolute(line[len(_MOVE):].strip(), cwd)
            elif line.startswith("@@"):
                continue
            elif current["tool_name"] == "Write":
                new.append(line[1:] if line.startswith("+") else line)
            elif line.startswith("-"):
                old.append(line[1:])
            elif line.startswith("+"):
                new.append(line[1:])
            elif line.startswith(" "):
                old.append(line[1:])
                new.append(line[1:])
    finish()
    return edits


def _patch_text(tool_input: Any) -> str:
    """The patch of an ``apply_patch`` call, whichever field holds it (Codex sends the raw patch as ``command``,
    or as the whole input)."""
    if isinstance(tool_input, str):
        return tool_input
    if isinstance(tool_input, dict):
        for key in ("command", "patch", "input"):
            value = tool_input.get(key)
            if isinstance(value, str) and "*** " in value:
                return value
            if isinstance(value, list):  # ["apply_patch", "<patch>"]
                text = next((part for part in value if isinstance(part, str) and "*** " in part), "")
                if text:
                    return text
    return ""


def contract_payloads(agent: str, stage: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
    """``payload`` of ``agent``'s hook ``stage`` as the contract's payloads (one, or one a file a patch
    changed; each with ``hook_event_name`` set to the contract's stage)."""
    stage = contract_stage(agent, stage)
    payload = {**payload, "hook_event_name": stage}
    if agent != CODEX or stage != "PostToolUse" or payload.get("tool_name") != APPLY_PATCH:
        return [payload]
    cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) else ""
    edits = patch_edits(_patch_text(payload.get("tool_input")), cwd or "")
    if not edits:
        return [payload]
    tool_use_id = payload.get("tool_use_id") if isinstance(payload.get("tool_use_id"), str) else ""
    return [{**payload, **edit, "tool_use_id": f"{tool_use_id}#{index}" if tool_use_id and len(edits) > 1
             else tool_use_id}
            for index, edit in enumerate(edits)]


def agent_output(agent: str, stage: str, context: str, message: str = "") -> dict[str, Any] | None:
    """What the hook prints for ``agent``'s ``stage``: ``context`` for the model, ``message`` for the user.
    Claude Code and Codex read the same fields (Codex checks a SessionStart's strictly: a ``hookEventName``
    always with ``hookSpecificOutput``)."""
    output: dict[str, Any] = {}
    if context:
        output["hookSpecificOutput"] = {"hookEventName": stage, "additionalContext": context}
    if message:
        output["systemMessage"] = message
    return output or None
