"""Removal of ``<private>`` and ``<sessionmem-context>`` spans, in linear time.

Part of the client/worker contract (:mod:`sessionmem.protocol`): hooks strip these
spans before anything leaves the hook process, and the worker strips them again from
whatever reaches it, with the same rules. Standard library only: the hooks import
this on their hot path.

Rules:
- ``<private>…</private>`` and ``<sessionmem-context>…</sessionmem-context>`` are removed
  with their content. The second tag is what the worker injects at SessionStart; removing
  it on the way back in keeps memory from feeding on itself.
- An opening tag without its closing tag hides everything after it (fail closed).
- A field with more than :data:`MAX_TAGS` tags is hidden whole: nobody writes that many
  by hand, and it bounds the work an adversarial field can cause.

Each tag's next position is remembered and only searched again once the cursor has
passed it, so the scan touches every character a bounded number of times whatever
the input (no regular expression, no backtracking).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs a hook ~4 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

MAX_TAGS = 100
PRIVATE_TAG = "private"
CONTEXT_TAG = "sessionmem-context"  # wraps the memory the worker injects at SessionStart
_TAGS = tuple((f"<{name}>", f"</{name}>") for name in (PRIVATE_TAG, CONTEXT_TAG))
_OPENERS = tuple(open_tag for open_tag, _ in _TAGS)
_OPENERS_BYTES = tuple(open_tag.encode() for open_tag in _OPENERS)


def contains_tag(text: str | bytes) -> bool:
    """Whether ``text`` (e.g. a JSON encoding) holds an opening tag: the cheap test before a walk."""
    openers = _OPENERS_BYTES if isinstance(text, bytes) else _OPENERS
    return any(opener in text for opener in openers)


def strip_private(text: str) -> str:
    """Return ``text`` without private or injected-context spans (nesting respected)."""
    if "<" not in text:
        return text
    next_open = [text.find(open_tag) for open_tag, _ in _TAGS]
    if all(pos < 0 for pos in next_open):
        return text

    out: list[str] = []
    cursor = 0
    tags_seen = 0
    while True:
        candidates = [(pos, kind) for kind, pos in enumerate(next_open) if pos >= 0]
        if not candidates:
            out.append(text[cursor:])
            break
        start, kind = min(candidates)
        open_tag, close_tag = _TAGS[kind]
        out.append(text[cursor:start])
        # Find the matching close tag, counting nested opens of the same kind.
        depth, pos = 1, start + len(open_tag)
        inner_open = text.find(open_tag, pos)
        tags_seen += 1
        while depth:
            if tags_seen > MAX_TAGS:
                return ""
            close = text.find(close_tag, pos)
            if close < 0:
                return "".join(out).strip()  # unterminated: hide the rest
            if 0 <= inner_open < close:
                depth += 1
                tags_seen += 1
                pos = inner_open + len(open_tag)
                inner_open = text.find(open_tag, pos)
            else:
                depth -= 1
                pos = close + len(close_tag)
        cursor = pos
        for other, found in enumerate(next_open):
            if 0 <= found < cursor:
                next_open[other] = text.find(_TAGS[other][0], cursor)
    return "".join(out).strip()


def strip_private_deep(value: Any) -> Any:
    """Apply :func:`strip_private` to every string inside JSON-like data (keys included)."""
    if isinstance(value, str):
        return strip_private(value)
    if isinstance(value, dict):
        return {strip_private(str(k)): strip_private_deep(v) for k, v in value.items()}
    if isinstance(value, list):
        return [strip_private_deep(item) for item in value]
    return value
