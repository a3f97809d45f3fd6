"""Removal of ``<private>`` and ``<sessionmem-context>`` spans, in linear time.

Part of the client/worker contract (:mod:`sessionmem.protocol`): hooks strip these
spans before anything leaves the hook process, and the worker strips them again from
whatever reaches it, with the same rules. Standard library only: the hooks import
this on their hot path.

The tag grammar is HTML's, for these two tag names:

- names match without regard to ASCII case: ``<private>``, ``<PRIVATE>``, ``<Private>``;
- an opening tag may carry whitespace and attributes before its ``>``:
  ``<private >``, ``<private reason="keys">``, ``<private/>``; a closing tag may carry
  whitespace: ``</private >``. ``<privateer>`` is another tag, and is text.

Rules:

- ``<private>…</private>`` and ``<sessionmem-context>…</sessionmem-context>`` are removed
  with their content. The second tag is what the worker injects at SessionStart;
  removing it on the way back in keeps memory from feeding on itself.
- Nesting of the same name is counted: ``<private>a <private>b</private> c</private>``
  is one span.
- An opening tag without its closing tag hides everything after it (fail closed), as
  does an opening tag whose ``>`` never comes.
- A closing tag without an opening one is removed (its text is kept): a stray
  ``</sessionmem-context>`` must not close the wrapper of injected memory.
- A field with more than :data:`MAX_TAGS` tags is hidden whole: nobody writes that many
  by hand, and it bounds the work an adversarial field can cause.
- Each field (a prompt, one string of a tool's input or output) is stripped on its
  own: a tag opened in one field and closed in another hides the rest of the first
  field, and the close in the second is removed like any stray one.

The scan visits each ``<`` once, left to right, and looks at most a tag name's length
past it (plus the tag itself up to its ``>``), so the work is linear in the text
whatever the input (no regular expression, no backtracking).
"""

from __future__ import annotations

from sessionmem.protocol.limits import map_strings

TYPE_CHECKING = False  # typing costs a hook ~4 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

MAX_TAGS = 100
PRIVATE_TAG = "private"
CONTEXT_TAG = "sessionmem-context"  # wraps the memory the worker injects at SessionStart
TAG_NAMES = (PRIVATE_TAG, CONTEXT_TAG)
_NAME_ENDS = " \t\n\r\f/>"  # what may follow a tag name inside a tag (HTML's whitespace, '/', '>')
_LOWERED_MARKERS = tuple(f"<{name}" for name in TAG_NAMES) + tuple(f"</{name}" for name in TAG_NAMES)
_LOWERED_MARKERS_BYTES = tuple(marker.encode() for marker in _LOWERED_MARKERS)


def contains_tag(text: str | bytes) -> bool:
    """Whether ``text`` (a field, or a JSON encoding) may hold one of the tags: the cheap test before a walk.

    Any spelling counts (it over-approximates: ``<privateer>`` says yes, and the
    walk then leaves it alone).
    """
    if isinstance(text, bytes):
        if b"<" not in text:
            return False
        lowered_bytes = text.lower()  # ASCII only, as the grammar is
        return any(marker in lowered_bytes for marker in _LOWERED_MARKERS_BYTES)
    if "<" not in text:
        return False
    lowered = text.lower()
    return any(marker in lowered for marker in _LOWERED_MARKERS)


def _tag_at(text: str, at: int) -> tuple[int, bool, int] | None:
    """The tag starting with the ``<`` at ``at``: ``(name index, closing?, index after its '>')``.

    ``None`` if it is none of ours. The end is ``len(text)`` when its ``>`` never comes.
    """
    closing = text.startswith("/", at + 1)
    start = at + 2 if closing else at + 1
    for index, name in enumerate(TAG_NAMES):
        end = start + len(name)
        # Slice, then lower: only ASCII can equal an ASCII name, whatever lower() does to the rest.
        if text[start:end].lower() == name and (end == len(text) or text[end] in _NAME_ENDS):
            close = text.find(">", end)
            return index, closing, (close + 1 if close >= 0 else len(text))
    return None


def strip_private(text: str) -> str:
    """Return ``text`` without private or injected-context spans, and without stray closing tags."""
    if "<" not in text:
        return text
    out: list[str] = []
    cursor = 0  # the start of text not yet copied or dropped
    position = text.find("<")
    tags_seen = 0
    inside = -1  # the name index of the open span, or -1
    depth = 0
    while position >= 0:
        tag = _tag_at(text, position)
        if tag is None:
            position = text.find("<", position + 1)
            continue
        tags_seen += 1
        if tags_seen > MAX_TAGS:
            return ""
        name, closing, after = tag
        if inside < 0:
            out.append(text[cursor:position])  # text before the tag is kept
            if not closing:
                inside, depth = name, 1  # a span opens
            cursor = after  # an opening tag starts a span; a stray closing tag is dropped
        elif name == inside:
            depth += -1 if closing else 1
            if depth == 0:
                inside = -1
                cursor = after
        position = text.find("<", after)
    if inside >= 0:
        return "".join(out).strip()  # unterminated: hide the rest
    out.append(text[cursor:])
    return "".join(out).strip()


def strip_private_deep(value: Any) -> Any:
    """Apply :func:`strip_private` to every string inside JSON-like data (keys included)."""
    return map_strings(value, strip_private, keys=True)
