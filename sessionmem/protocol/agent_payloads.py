"""Another agent's hook payload in the one hook contract, and the worker's answer in that agent's output fields.
Standard library only (hook hot path).

The worker, the backfill and the tests speak one contract: Claude Code's hook payloads
(:mod:`.requests` maps them to the worker's requests). An adapter here is all an agent
needs beyond it:

- :func:`contract_stage`: the agent's event name as the contract's stage (Codex uses Claude
  Code's names; the Gemini CLI's are :data:`GEMINI_STAGES`).
- :func:`contract_payloads`: the agent's payload as contract payloads, usually one. Codex
  sends a shell command as Claude Code's ``Bash`` (``tool_input.command``), but a file edit as
  its ``apply_patch`` tool with the raw patch: each file the patch adds, changes, moves or
  deletes becomes its own ``Write`` or ``Edit`` of that file (:func:`patch_edits`), so what a
  Codex session changed is remembered, and recalled, by file as Claude Code's edits are.
  The Gemini CLI's tools become Claude Code's (:func:`gemini_tool_use`): ``run_shell_command`` a
  ``Bash``, ``write_file`` a ``Write``, ``replace`` an ``Edit``, ``read_file`` a ``Read``, each with
  Claude Code's input fields and the text the model saw as the response; a tool that reports an
  ``error``, or a command that exits non-zero, is a ``PostToolUseFailure``.
  OpenCode's plugin (``sessionmem/agents/opencode_plugin.js``) sends the contract's stages with
  OpenCode's tools (:func:`opencode_tool_use`): ``bash`` a ``Bash``, ``edit`` an ``Edit``, ``write`` a
  ``Write``, ``read`` a ``Read`` (``filePath`` as an absolute ``file_path``, camelCase fields as Claude
  Code's), ``apply_patch`` a ``Write`` or ``Edit`` per file as Codex's; a command that exits non-zero,
  or a tool that failed with an ``error``, is a ``PostToolUseFailure``; sessionmem's own MCP tools (``sessionmem_search``...) get Claude Code's
  names, so their use is not recorded.
- :func:`runs_another_agents_hook`: whether a hook installed for one agent was run by another
  (Codex can import Claude Code's hooks, the Gemini CLI migrate them): such a run sends nothing,
  so no session is captured twice, or under the wrong agent.
- :func:`agent_output`: the worker's answer (memory for the model, a line for the user) in the
  output fields the agent reads (the Gemini CLI reads Claude Code's, under its own event names).

Error handling:
    Whatever the payload holds, these return contract payloads or nothing, never raise: a
    patch that does not parse is kept as the tool use it was (``apply_patch`` with its text).
"""

from __future__ import annotations

from sessionmem.protocol.agents import CLAUDE_CODE, CODEX, GEMINI_CLI, OPENCODE

TYPE_CHECKING = False  # typing costs a hook ~4 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

APPLY_PATCH = "apply_patch"
_ADD, _UPDATE, _DELETE, _MOVE = "*** Add File: ", "*** Update File: ", "*** Delete File: ", "*** Move to: "
_END = ("*** End Patch", "*** End of File")


# The Gemini CLI's hook events -> the contract's stages. Its other events (BeforeTool, BeforeModel,
# AfterModel, BeforeToolSelection, Notification) carry nothing to store.
GEMINI_STAGES = {
    "SessionStart": "SessionStart",
    "BeforeAgent": "UserPromptSubmit",
    "AfterTool": "PostToolUse",
    "AfterAgent": "Stop",
    "PreCompress": "PreCompact",
    "SessionEnd": "SessionEnd",
}
_GEMINI_EVENTS = {stage: event for event, stage in GEMINI_STAGES.items()} | {"PostToolUseFailure": "AfterTool"}
# Event names only the Gemini CLI sends (SessionStart and SessionEnd are everyone's).
_GEMINI_ONLY = frozenset(GEMINI_STAGES) - {"SessionStart", "SessionEnd"} | {
    "BeforeTool", "BeforeModel", "AfterModel", "BeforeToolSelection", "Notification"}
# The Gemini CLI's tools -> Claude Code's, with the input fields each keeps under Claude Code's names.
_GEMINI_TOOLS: dict[str, tuple[str, dict[str, str]]] = {
    "run_shell_command": ("Bash", {"command": "command", "description": "description", "dir_path": "dir_path",
                                   "is_background": "run_in_background"}),
    "write_file": ("Write", {"file_path": "file_path", "content": "content"}),
    "replace": ("Edit", {"file_path": "file_path", "old_string": "old_string", "new_string": "new_string",
                         "allow_multiple": "replace_all", "instruction": "instruction"}),
    "read_file": ("Read", {"file_path": "file_path", "start_line": "offset", "end_line": "end_line"}),
}
# OpenCode's tools -> Claude Code's, with the input fields each keeps under Claude Code's names.
_OPENCODE_TOOLS: dict[str, tuple[str, dict[str, str]]] = {
    "bash": ("Bash", {"command": "command", "description": "description", "timeout": "timeout",
                      "workdir": "dir_path"}),
    "write": ("Write", {"filePath": "file_path", "content": "content"}),
    "edit": ("Edit", {"filePath": "file_path", "oldString": "old_string", "newString": "new_string",
                      "replaceAll": "replace_all"}),
    "read": ("Read", {"filePath": "file_path", "offset": "offset", "limit": "limit"}),
}
_OPENCODE_PATCH_TOOLS = ("apply_patch", "patch")
_UNTRUSTED_OPEN, _UNTRUSTED_CLOSE = "<untrusted_context>", "</untrusted_context>"
_HOOK_CONTEXT_OPEN, _HOOK_CONTEXT_CLOSE = "<hook_context>", "</hook_context>"


def runs_another_agents_hook(agent: str, payload: dict[str, Any]) -> bool:
    """Whether ``payload`` comes from another agent than ``agent``, whose hook this is. Codex marks every event of
    a turn with ``turn_id``, which Claude Code's payloads never carry; a Codex hook, then, is Codex's. The Gemini
    CLI names its events its own way (``AfterTool``...), and stamps each (``timestamp``) with a transcript of its
    own (``~/.gemini/tmp/...``): a Claude Code hook it runs (``gemini hooks migrate``) is the Gemini CLI's."""
    if agent == GEMINI_CLI:
        return False
    if agent == CLAUDE_CODE and isinstance(payload.get("turn_id"), str):
        return True
    return _is_gemini_payload(payload)


def _is_gemini_payload(payload: dict[str, Any]) -> bool:
    event = payload.get("hook_event_name")
    if event in _GEMINI_ONLY:
        return True
    transcript = payload.get("transcript_path")
    return (isinstance(payload.get("timestamp"), str) and isinstance(transcript, str)
            and "/.gemini/" in transcript.replace("\\", "/"))


def contract_stage(agent: str, stage: str) -> str:
    """The contract's name for the agent's hook event ``stage`` (Codex's are Claude Code's)."""
    if agent == GEMINI_CLI:
        return GEMINI_STAGES.get(stage, stage)
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


def _response_text(value: Any) -> str:
    """The text of a Gemini tool's ``llmContent`` (a string, a part, or a list of parts), without the
    ``<untrusted_context>`` wrapper the CLI puts around a command's output."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, dict) and isinstance(value.get("text"), str):
        text = value["text"]
    elif isinstance(value, list):
        text = "\n".join(_response_text(part) for part in value)
    else:
        text = ""
    stripped = text.strip()
    if stripped.startswith(_UNTRUSTED_OPEN) and stripped.endswith(_UNTRUSTED_CLOSE):
        return stripped[len(_UNTRUSTED_OPEN):-len(_UNTRUSTED_CLOSE)].strip("\n")
    return text


_EXIT_CODE = "\nExit Code: "


def _shell_failure(text: str) -> str:
    """Claude Code's error text for a failed ``run_shell_command`` (``Exit code N`` and the command's output), from
    the text the Gemini CLI gives the model (``Output: ...``, then ``Exit Code: N``); empty when it exited 0."""
    at = text.rfind(_EXIT_CODE)
    if at < 0:
        return ""
    digits = text[at + len(_EXIT_CODE):].split("\n", 1)[0].strip()
    if not digits.lstrip("-").isdigit() or int(digits) == 0:
        return ""
    output = text[:at]
    return f"Exit code {int(digits)}\n{output[len('Output: '):] if output.startswith('Output: ') else output}"


def claude_tool(mapping: tuple[str, dict[str, str]], tool_input: dict[str, Any], cwd: str) -> tuple[str, dict[str, Any]]:
    """Another agent's tool input as Claude Code's tool (``mapping``: its name, and the input fields renamed), a
    relative ``file_path`` made absolute with ``cwd``."""
    claude_name, fields = mapping
    converted = {fields.get(key, key): value for key, value in tool_input.items()}
    if isinstance(converted.get("file_path"), str):
        converted["file_path"] = _absolute(converted["file_path"], cwd)
    return claude_name, converted


def gemini_tool_use(payload: dict[str, Any]) -> dict[str, Any]:
    """An ``AfterTool`` payload as the contract's tool use: Claude Code's tool name and input fields (a relative
    ``file_path`` made absolute with ``cwd``), the text the model saw as ``tool_response``, and, when the tool
    reports an ``error`` or a command exits non-zero, ``PostToolUseFailure`` with that ``error``."""
    name = payload.get("tool_name")
    tool_input = payload.get("tool_input")
    response = payload.get("tool_response")
    cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) else ""
    event: dict[str, Any] = {**payload, "hook_event_name": "PostToolUse"}
    if isinstance(name, str) and name in _GEMINI_TOOLS and isinstance(tool_input, dict):
        event["tool_name"], event["tool_input"] = claude_tool(_GEMINI_TOOLS[name], tool_input, cwd or "")
    elif isinstance(name, str) and name.startswith("mcp_"):
        server, _, tool = name[len("mcp_"):].partition("_")
        if tool and server == "sessionmem":  # Claude Code's name for our own tools: their use is not recorded
            event["tool_name"] = f"mcp__{server}__{tool}"
    if not isinstance(response, dict):
        return event
    text = _response_text(response.get("llmContent"))
    event["tool_response"] = text
    error = response.get("error")
    if isinstance(error, dict) and error:
        message = error.get("message") if isinstance(error.get("message"), str) else ""
        kind = error.get("type") if isinstance(error.get("type"), str) else ""
        event["hook_event_name"], event["error"] = "PostToolUseFailure", message or kind or text
    elif isinstance(error, str) and error:
        event["hook_event_name"], event["error"] = "PostToolUseFailure", error
    elif event.get("tool_name") == "Bash" and _shell_failure(text):
        event["hook_event_name"], event["error"] = "PostToolUseFailure", _shell_failure(text)
    return event


def opencode_tool_use(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """A PostToolUse payload of OpenCode's plugin as the contract's tool uses: Claude Code's tool name and input
    fields (``filePath`` made an absolute ``file_path``), one ``Write`` or ``Edit`` a file for a patch, and, for a
    tool that failed with an ``error`` (the plugin sends it), or a command whose ``exit_code`` is not 0,
    ``PostToolUseFailure`` with Claude Code's error text."""
    name = payload.get("tool_name")
    tool_input = payload.get("tool_input")
    cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) else ""
    event: dict[str, Any] = {**payload, "hook_event_name": "PostToolUse"}
    event.pop("exit_code", None)
    if isinstance(name, str) and name in _OPENCODE_PATCH_TOOLS and isinstance(tool_input, dict):
        edits = patch_edits(text_of(tool_input.get("patchText")) or _patch_text(tool_input), cwd or "")
        return _edit_events(event, edits) if edits else [event]
    if isinstance(name, str) and name in _OPENCODE_TOOLS and isinstance(tool_input, dict):
        event["tool_name"], event["tool_input"] = claude_tool(_OPENCODE_TOOLS[name], tool_input, cwd or "")
    elif isinstance(name, str) and name.startswith("sessionmem_"):  # our own MCP tools: their use is not recorded
        event["tool_name"] = f"mcp__sessionmem__{name[len('sessionmem_'):]}"
    code = payload.get("exit_code")
    if text_of(payload.get("error")):  # a tool that threw: the plugin sends its error
        event["hook_event_name"] = "PostToolUseFailure"
    elif event.get("tool_name") == "Bash" and isinstance(code, int) and not isinstance(code, bool) and code != 0:
        output = text_of(payload.get("tool_response"))
        event["hook_event_name"], event["error"] = "PostToolUseFailure", f"Exit code {code}\n{output}"
    return [event]


def text_of(value: Any) -> str:
    return value if isinstance(value, str) else ""


def user_prompt(prompt: Any) -> str:
    """What the user typed, from a Gemini CLI ``prompt``: headless, the CLI puts a SessionStart hook's context
    before it (``<hook_context>...</hook_context>``, its ``<`` and ``>`` escaped, then a blank line), which is
    memory handed over, not the user's words."""
    text = prompt if isinstance(prompt, str) else ""
    while text.startswith(_HOOK_CONTEXT_OPEN):
        end = text.find(_HOOK_CONTEXT_CLOSE)
        if end < 0:
            return ""  # unterminated: nothing of it is the user's
        text = text[end + len(_HOOK_CONTEXT_CLOSE):].lstrip("\n")
    return text


def _gemini_payload(stage: str, payload: dict[str, Any]) -> dict[str, Any]:
    """A Gemini CLI payload (``stage``, the contract's) in the contract's fields."""
    if stage == "PostToolUse":
        return gemini_tool_use(payload)
    event = {**payload, "hook_event_name": stage}
    if "prompt" in payload:
        event["prompt"] = user_prompt(payload["prompt"])
    if stage in ("Stop", "PreCompact"):
        # The turn is in the payload (AfterAgent's prompt and prompt_response); the transcript is the Gemini
        # CLI's own format, not Claude Code's, so the hook must not read it for one.
        event.pop("transcript_path", None)
        if stage == "Stop":
            event["last_user_message"] = event.get("prompt", "")
            response = payload.get("prompt_response")
            event["last_assistant_message"] = response if isinstance(response, str) else ""
    return event


def contract_payloads(agent: str, stage: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
    """``payload`` of ``agent``'s hook ``stage`` as the contract's payloads (one, or one a file a patch
    changed; each with ``hook_event_name`` set to the contract's stage)."""
    stage = contract_stage(agent, stage)
    if agent == GEMINI_CLI:
        return [_gemini_payload(stage, payload)]
    if agent == OPENCODE and stage == "PostToolUse":
        return opencode_tool_use(payload)
    payload = {**payload, "hook_event_name": stage}
    if agent != CODEX or stage != "PostToolUse" or payload.get("tool_name") != APPLY_PATCH:
        return [payload]
    cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) else ""
    edits = patch_edits(_patch_text(payload.get("tool_input")), cwd or "")
    return _edit_events(payload, edits) if edits else [payload]


def _edit_events(payload: dict[str, Any], edits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A patch's tool use as one event a file it changes (:func:`patch_edits`), each with a tool use id of its own."""
    tool_use_id = text_of(payload.get("tool_use_id"))
    return [{**payload, **edit, "tool_use_id": f"{tool_use_id}#{index}" if tool_use_id and len(edits) > 1
             else tool_use_id}
            for index, edit in enumerate(edits)]


def agent_output(agent: str, stage: str, context: str, message: str = "") -> dict[str, Any] | None:
    """What the hook prints for ``agent``'s ``stage`` (the contract's): ``context`` for the model, ``message`` for
    the user. Claude Code, Codex and sessionmem's OpenCode plugin read the same fields (Codex checks a SessionStart's strictly: a
    ``hookEventName`` always with ``hookSpecificOutput``); the Gemini CLI reads them too, under its own event
    name (it escapes ``<`` and ``>`` in the context and wraps it in ``<hook_context>``)."""
    output: dict[str, Any] = {}
    if context:
        event = _GEMINI_EVENTS.get(stage, stage) if agent == GEMINI_CLI else stage
        output["hookSpecificOutput"] = {"hookEventName": event, "additionalContext": context}
    if message:
        output["systemMessage"] = message
    return output or None
