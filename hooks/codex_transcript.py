"""The last user prompt and last assistant message of a Codex CLI rollout, read from its end.

Codex's PreCompact payload carries no summary, only ``transcript_path``: its rollout
(:mod:`sessionmem.protocol.codex_rollout` says what its lines hold). As for Claude Code's
transcripts (:mod:`.transcript`), the file is read backwards in blocks until both are
found or the read limit is reached; the messages Codex writes itself (environment context,
instructions) are not prompts, and the summary Codex writes at a compaction is not a reply.
Standard library only.
"""

from __future__ import annotations

from sessionmem.hooks.transcript import BROKEN, READ_LIMIT, entries_backwards
from sessionmem.protocol.codex_rollout import assistant_text_of, payload_of, prompt_of


def last_codex_turn(path: str, *, limit: int = READ_LIMIT) -> tuple[str, str, int]:
    """``(last user prompt, last assistant message, broken lines skipped)`` of a Codex rollout; a missing or
    unreadable file raises ``OSError``, as for :func:`~sessionmem.hooks.transcript.last_turn`."""
    found = {"user": "", "assistant": ""}
    broken = 0
    for entry in entries_backwards(path, limit):
        if entry is BROKEN:
            broken += 1
            continue
        found["assistant"] = found["assistant"] or _reply(entry)
        found["user"] = found["user"] or prompt_of(entry)
        if found["user"] and found["assistant"]:
            break
    return found["user"], found["assistant"], broken


def _reply(entry: object) -> str:
    """The model's words in ``entry``: an assistant message, or the end of a turn (``task_complete``)."""
    said = assistant_text_of(entry)
    ended = payload_of(entry, "event_msg")
    if not said and ended is not None and ended.get("type") == "task_complete":
        last = ended.get("last_agent_message")
        said = last if isinstance(last, str) else ""
    return said
