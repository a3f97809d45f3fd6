"""The last user prompt and last assistant message of a Codex CLI rollout, read from its end.

Codex's PreCompact payload carries no summary, only ``transcript_path``: its rollout
(:mod:`sessionmem.protocol.codex_rollout` says what its lines hold). As for Claude Code's
transcripts (:mod:`.transcript`), the file is read backwards in blocks until both are
found or the read limit is reached; the messages Codex writes itself (environment context,
instructions) are not prompts, and the summary Codex writes at a compaction is not a reply.
Standard library only.
"""

from __future__ import annotations

from sessionmem.hooks.transcript import READ_LIMIT, lines_backwards
from sessionmem.protocol import fastjson
from sessionmem.protocol.codex_rollout import assistant_text_of, payload_of, prompt_of


def last_codex_turn(path: str, *, limit: int = READ_LIMIT) -> tuple[str, str, int]:
    """``(last user prompt, last assistant message, broken lines skipped)`` of a Codex rollout.

    Error handling:
        A missing or unreadable file raises ``OSError``; broken lines are counted, not fatal.
    """
    user, assistant, broken = "", "", 0
    for raw in lines_backwards(path, limit):
        try:
            entry = fastjson.loads(raw)
        except ValueError:
            broken += 1
            continue
        if not assistant:
            assistant = assistant_text_of(entry)
            ended = payload_of(entry, "event_msg")
            if not assistant and ended is not None and ended.get("type") == "task_complete":
                last = ended.get("last_agent_message")
                assistant = last if isinstance(last, str) else ""
        if not user:
            user = prompt_of(entry)
        if user and assistant:
            break
    return user, assistant, broken
