"""What a line of a Codex CLI rollout (``$CODEX_HOME/sessions/**/rollout-*.jsonl``) says about the conversation.
Standard library only (the PreCompact hook reads the end of a rollout with these).

Each line of a rollout is ``{"timestamp", "type", "payload"}`` (Codex 0.169.0's format, described in
``tests/fixtures/codex/README.md``). The model's conversation is in ``response_item`` lines
(``message`` by role, tool calls and their outputs); what happened around it in ``event_msg`` lines
(``item_completed`` of a ``UserMessage``, a ``CommandExecution`` with its ``exit_code``, a
``FileChange``; ``task_complete`` at the end of a turn). The user role also carries what Codex writes
itself -- ``<environment_context>``, instructions, ``AGENTS.md`` -- which nobody typed and no
UserPromptSubmit hook saw: :func:`prompt_of` leaves those out, as it does the summary Codex writes
when it compacts (an assistant message marked ``compaction_output``).

Error handling:
    Every function takes whatever a line decoded to and returns text or nothing, never raises.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs a hook ~4 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

# User-role messages Codex writes itself (context, instructions, notices), by how they begin.
_CODEX_WRITTEN = ("<environment_context>", "<user_instructions>", "<skills_instructions>", "<turn_aborted>",
                  "<user_shell_command>", "<permissions instructions>", "<subagent_notification>",
                  "# AGENTS.md instructions")
_TEXT_PARTS = ("input_text", "output_text", "text", "Text")


def payload_of(entry: Any, line_type: str) -> dict[str, Any] | None:
    """The ``payload`` of a rollout line of type ``line_type``, else None."""
    if not isinstance(entry, dict) or entry.get("type") != line_type:
        return None
    payload = entry.get("payload")
    return payload if isinstance(payload, dict) else None


def text_of(content: Any) -> str:
    """The text of a message's content (a string, or parts of type ``input_text``/``output_text``/``text``)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "\n".join(part["text"] for part in content
                     if isinstance(part, dict) and part.get("type") in _TEXT_PARTS and isinstance(part.get("text"), str))


def _message(entry: Any, role: str) -> dict[str, Any] | None:
    payload = payload_of(entry, "response_item")
    if payload is None or payload.get("type") != "message" or payload.get("role") != role:
        return None
    return payload


def prompt_of(entry: Any) -> str:
    """The prompt the user typed, if ``entry`` is a user message of the conversation; else ''."""
    message = _message(entry, "user")
    if message is None:
        return ""
    text = text_of(message.get("content")).strip()
    return "" if text.startswith(_CODEX_WRITTEN) else text


def assistant_text_of(entry: Any) -> str:
    """The model's words, if ``entry`` is an assistant message (not Codex's summary at a compaction); else ''."""
    message = _message(entry, "assistant")
    if message is None:
        return ""
    metadata = entry.get("metadata")  # beside the payload
    if isinstance(metadata, dict) and metadata.get("compaction_output"):
        return ""
    return text_of(message.get("content")).strip()


def turn_id_of(entry: Any) -> str:
    """The turn a ``response_item`` or ``event_msg`` belongs to, when the line says."""
    if not isinstance(entry, dict) or not isinstance(entry.get("payload"), dict):
        return ""
    payload = entry["payload"]
    turn = payload.get("turn_id")
    if isinstance(turn, str):
        return turn
    passthrough = payload.get("internal_chat_message_metadata_passthrough")
    turn = passthrough.get("turn_id") if isinstance(passthrough, dict) else None
    return turn if isinstance(turn, str) else ""


def is_compaction(entry: Any) -> bool:
    """Whether ``entry`` marks where Codex compacted the conversation (its ``compacted`` line)."""
    return payload_of(entry, "compacted") is not None
