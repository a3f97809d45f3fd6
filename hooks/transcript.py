"""The last user prompt and last assistant text of a Claude Code transcript, read from its end.

Transcripts reach several megabytes; the Stop hook only needs the last turn, so the
file is read backwards in blocks until both are found (or a read limit is reached).
Broken lines are skipped, ``<system-reminder>`` blocks dropped, and tool results,
meta entries, sidechains and ``<task-notification>`` prompts are not user prompts.
Standard library only.
"""

from __future__ import annotations

import os

from sessionmem.protocol import fastjson

TYPE_CHECKING = False  # typing costs a hook ~4 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

BLOCK = 256 * 1024
READ_LIMIT = 8 * 1024 * 1024
_REMINDER_OPEN, _REMINDER_CLOSE = "<system-reminder>", "</system-reminder>"


def drop_system_reminders(text: str) -> str:
    out, cursor = [], 0
    while True:
        start = text.find(_REMINDER_OPEN, cursor)
        if start < 0:
            out.append(text[cursor:])
            break
        out.append(text[cursor:start])
        end = text.find(_REMINDER_CLOSE, start)
        if end < 0:
            break
        cursor = end + len(_REMINDER_CLOSE)
    return "".join(out).strip()


def lines_backwards(path: str, limit: int = READ_LIMIT) -> Iterator[bytes]:
    """The non-empty lines of ``path``, last first, reading at most ``limit`` bytes from its end."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        position = f.tell()
        carry = b""
        read = 0
        while position > 0 and read < limit:
            size = min(BLOCK, position)
            position -= size
            f.seek(position)
            block = f.read(size) + carry
            read += size
            lines = block.split(b"\n")
            carry = lines[0]  # may be partial: completed by the next (earlier) block
            for line in reversed(lines[1:]):
                if line.strip():
                    yield line
        if position == 0 and carry.strip():
            yield carry


BROKEN = object()  # what entries_backwards yields for a line that is not JSON


def entries_backwards(path: str, limit: int = READ_LIMIT) -> Iterator[Any]:
    """The JSON lines of ``path`` decoded, last first (:func:`lines_backwards`); :data:`BROKEN` for one that is not JSON."""
    for raw in lines_backwards(path, limit):
        try:
            yield fastjson.loads(raw)
        except ValueError:
            yield BROKEN


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(part.get("text", "") for part in content
                         if isinstance(part, dict) and part.get("type") == "text")
    return ""


def last_turn(path: str, *, limit: int = READ_LIMIT) -> tuple[str, str, int]:
    """``(last user prompt, last assistant text, broken lines skipped)`` of a transcript.

    Error handling:
        A missing or unreadable file raises ``OSError``; broken lines are counted, not fatal.
    """
    user, assistant, broken = "", "", 0
    for entry in entries_backwards(path, limit):
        if entry is BROKEN:
            broken += 1
            continue
        if not isinstance(entry, dict) or entry.get("isSidechain") or entry.get("isMeta"):
            continue
        message = entry.get("message")
        if not isinstance(message, dict):
            continue
        if not assistant and entry.get("type") == "assistant":
            assistant = drop_system_reminders(_text_of(message.get("content")))
        elif not user and entry.get("type") == "user":
            content = message.get("content")
            if isinstance(content, list) and any(isinstance(p, dict) and p.get("type") == "tool_result" for p in content):
                continue
            text = drop_system_reminders(_text_of(content))
            if text and not text.startswith("<task-notification>"):
                user = text
        if user and assistant:
            break
    return user, assistant, broken
