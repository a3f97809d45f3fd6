"""Removal of ``<private>`` and ``<sessionmem-context>`` spans, in linear time, failing closed.

Part of the client/worker contract (:mod:`sessionmem.protocol`): hooks strip these
spans before anything leaves the hook process, and the worker strips them again from
whatever reaches it, with the same rules. Standard library only: the hooks import
this on their hot path.

People type this markup by hand, and carelessly. Where it is malformed or ambiguous,
the rule hides what the person plausibly meant to hide rather than keep it: hiding too
much loses a little memory of one field, keeping too much writes a secret to disk, to
the logs, to an LLM and into the memory injected into later sessions.

The tag grammar, for these two names (``private``, ``sessionmem-context``):

- a tag is ``<``, then optional whitespace, an optional ``/`` (a closing tag) and
  optional whitespace, then the name in any ASCII case, ending at whitespace, ``/``,
  ``>``, ``]`` or the end of the text; the tag ends at its first ``>`` or ``]``, or
  just before a ``<`` or ``[`` that comes first (a tag left unfinished never swallows
  the next one), or at the end of the text. HTML reads
  ``<private>``, ``<PRIVATE>``, ``<private >``, ``<private reason="keys">``,
  ``<private/>`` and ``</private >`` as tags, and so do we; HTML reads ``< private>``
  and ``< / private>`` as text, we read them as tags;
- the same with ``[`` and ``]``: ``[private]…[/private]``, and the two brackets mixed;
- ``<privateer>``, ``<private-key>``, ``<privacy>`` are other names, and are text;
- tags count wherever they are: inside a Markdown code fence or inline code too (this
  module does not parse Markdown; a fence it misread would let a span through).

Rules (a *field* is a prompt, or one string of a tool's input or output):

- ``<private>…</private>`` and ``<sessionmem-context>…</sessionmem-context>`` are removed
  with their content. The second tag is what the worker injects at SessionStart;
  removing it on the way back in keeps memory from feeding on itself.
- Nesting of the same name is counted: ``<private>a <private>b</private> c</private>``
  is one span, and an opener written where a closer was meant leaves the span open.
  Inside a span, tags of the other name are content.
- An opening tag without its closing tag hides everything after it, as does an
  opening tag whose ``>`` never comes.
- A closing tag with no open span (one whose opener was forgotten, a doubled closer,
  the second name of two overlapping spans) hides everything before it in the field,
  and itself. Nothing marks where the person meant the span to start, and a line or a
  paragraph is no safe guess (a pasted ``.env`` or a key has many); so the field's
  start, as an unterminated opener hides to the field's end. A stray
  ``</sessionmem-context>`` thus also takes injected memory whose opener was lost.
- A field with more than :data:`MAX_TAGS` tags is hidden whole: nobody writes that many
  by hand, and it bounds the work an adversarial field can cause.
- A field whose kept pieces join into a new tag (``<priv<private>x</private>ate>``), or
  end in one (``<private<private>``), is hidden whole: such markup is made, not written,
  and so what is kept never holds a tag.
- Each field is stripped on its own: a tag opened in one field and closed in another
  hides the rest of the first field and the start of the second.

The scan finds each occurrence of a name (case folded, ASCII only), looks back over
whitespace for ``<`` or ``[`` (and ``/``) and forward for the tag's end, never before
the end of the previous tag; so the work is linear in the text whatever the input (no
regular expression, no backtracking), and text without ``<`` and ``[`` costs two
searches. A name that is no tag costs one look at its neighbours.
"""

from __future__ import annotations

from sessionmem.protocol.limits import map_strings

TYPE_CHECKING = False  # typing costs a hook ~4 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

MAX_TAGS = 100
PRIVATE_TAG = "private"
CONTEXT_TAG = "sessionmem-context"  # wraps the memory the worker injects at SessionStart
TAG_NAMES = (PRIVATE_TAG, CONTEXT_TAG)
_TAG_NAMES_BYTES = tuple(name.encode() for name in TAG_NAMES)
_SPACE = " \t\n\r\f"  # HTML's whitespace
_NAME_ENDS = _SPACE + "/>]"  # what may follow a tag name
_TAG_STARTS = "<["
# The same for a JSON encoding: a string's end (its quote) and an escape (a backslash) may follow a name.
_SPACE_BYTES = frozenset(_SPACE.encode())
_ESCAPED_SPACE = frozenset(b"tnrf")  # after a backslash
_ENCODED_NAME_ENDS = frozenset(_NAME_ENDS.encode() + b'"\\')
_ENCODED_TAG_STARTS = frozenset(b"<[")
_SLASH, _BACKSLASH = ord("/"), ord("\\")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def contains_tag(text: str | bytes) -> bool:
    """Whether ``text``, a field or the JSON encoding of a value, may hold one of the tags: the test before a walk.

    For a field, exact. For an encoding (our encoders': ``<``, ``[`` and ``/`` as they
    are, whitespace but the space escaped as ``\\t``, ``\\n``, ``\\r``, ``\\f``), it
    over-approximates, never the other way: it says yes where some string of the value
    may hold a tag, and the walk then decides; a name beside no ``<`` or ``[`` (the
    ``private`` of Java code, or of prose) says no without a walk.
    """
    if isinstance(text, str):
        return next(tags_in(text), None) is not None
    if b"<" not in text and b"[" not in text:
        return False
    lowered = text.lower()  # ASCII only, as the grammar is
    for name in _TAG_NAMES_BYTES:
        at = lowered.find(name)
        while at >= 0:
            end = at + len(name)
            if end == len(lowered) or lowered[end] in _ENCODED_NAME_ENDS:
                start = _encoded_space_before(lowered, at)
                if start >= 0 and lowered[start] == _SLASH:
                    start = _encoded_space_before(lowered, start)
                if start >= 0 and lowered[start] in _ENCODED_TAG_STARTS:
                    return True
            at = lowered.find(name, end)
    return False


def _encoded_space_before(encoded: bytes, at: int) -> int:
    """The index of the last byte before ``at`` that is no whitespace, raw or escaped (-1 if none)."""
    at -= 1
    while at >= 0:
        if encoded[at] in _SPACE_BYTES:
            at -= 1
        elif at >= 1 and encoded[at] in _ESCAPED_SPACE and encoded[at - 1] == _BACKSLASH:
            at -= 2  # an escaped backslash before a letter reads as whitespace too: it only says yes more often
        else:
            break
    return at


def _ascii_lowered(text: str) -> str:
    """``text`` in lower case, each character where it was (so an index into one is an index into the other).

    ``str.lower`` keeps the length but for a few characters (``İ`` becomes two); only
    then is the slower ASCII-only table used. A non-ASCII character that ``lower`` makes
    ASCII (the Kelvin sign's ``k``) is in neither name.
    """
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.translate(_ASCII_LOWER)


def tags_in(text: str) -> Iterator[tuple[int, int, int, bool]]:
    """Every tag of ``text``, as the module docstring's grammar reads them, left to right:
    ``(start, index after its end, name index, closing?)``.

    A tag never starts before the end of the one before it. A lazy generator: a caller
    that stops early (past :data:`MAX_TAGS`, or at the first tag) stops the work.
    """
    if "<" not in text and "[" not in text:
        return
    lowered = _ascii_lowered(text)
    size = len(text)
    marks = dict.fromkeys("<>[]", -2)  # the next of each character at or after the last look (-2: not looked)

    def next_of(mark: str, at: int) -> int:  # ``at`` never decreases: each character's search moves on only
        known = marks[mark]
        if known == -1 or known >= at:
            return known
        marks[mark] = found_at = text.find(mark, at)
        return found_at

    floor = 0  # the end of the last tag: nothing before it is looked at again
    found = [lowered.find(name) for name in TAG_NAMES]  # the next occurrence of each name
    while True:
        index = -1
        for candidate, at in enumerate(found):
            if at >= 0 and (index < 0 or at < found[index]):
                index = candidate
        if index < 0:
            return
        at = found[index]
        name_end = at + len(TAG_NAMES[index])
        found[index] = lowered.find(TAG_NAMES[index], name_end)  # a name cannot overlap itself
        if name_end < size and text[name_end] not in _NAME_ENDS:
            continue  # a longer name: <privateer>
        start = at - 1
        while start >= floor and text[start] in _SPACE:
            start -= 1
        closing = start >= floor and text[start] == "/"
        if closing:
            start -= 1
            while start >= floor and text[start] in _SPACE:
                start -= 1
        if start < floor or text[start] not in _TAG_STARTS:
            continue
        end = _min_found(next_of(">", name_end), next_of("]", name_end))
        stop = _min_found(next_of("<", name_end), next_of("[", name_end))
        after = end + 1 if end >= 0 and (stop < 0 or end < stop) else stop if stop >= 0 else size
        yield start, after, index, closing
        floor = after
        found = [lowered.find(name, after) if 0 <= next_at < after else next_at
                 for name, next_at in zip(TAG_NAMES, found)]


def _min_found(first: int, second: int) -> int:
    """The smaller of two ``str.find`` results, -1 (not found) counting as the larger."""
    return first if second < 0 or 0 <= first < second else second


def strip_private(text: str) -> str:
    """Return ``text`` without private or injected-context spans, under the rules of the module docstring."""
    if "<" not in text and "[" not in text:
        return text
    out: list[str] = []  # the kept pieces
    cursor = 0  # the start of text not yet kept or dropped
    tags_seen = 0
    inside = -1  # the name index of the open span, or -1
    depth = 0
    for start, after, name, closing in tags_in(text):
        tags_seen += 1
        if tags_seen > MAX_TAGS:
            return ""
        if inside < 0:
            if closing:
                out.clear()  # a closer with no opener: everything before it was meant private
            else:
                out.append(text[cursor:start])  # text before a span is kept
                inside, depth = name, 1
            cursor = after
        elif name == inside:
            depth += -1 if closing else 1
            if depth == 0:
                inside = -1
                cursor = after
    if tags_seen == 0:
        return text
    if inside < 0:
        out.append(text[cursor:])  # else unterminated: the rest is hidden
    kept = "".join(out).strip()
    if next(tags_in(kept), None) is not None:
        return ""  # kept pieces that join into a tag, or end in one: made, not written
    return kept


def strip_private_deep(value: Any) -> Any:
    """Apply :func:`strip_private` to every string inside JSON-like data (keys included)."""
    return map_strings(value, strip_private, keys=True)
