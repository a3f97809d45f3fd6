"""Parsing of the model's XML reply: ``<observation>`` blocks and a ``<summary>``.

Models do not write well-formed XML reliably (a stray ``&`` or ``<`` in a fact, a
missing close tag, prose around the blocks), so this is a tolerant scanner rather
than an XML parser: it finds each block, reads the fields it recognises, unescapes
entities, and ignores the rest. A block without a usable ``type`` and ``title`` does
not count as parsed.

What it keeps is bounded whatever the reply holds (:data:`LIMITS`): the reply is the
model's, or whatever answers at ``ANTHROPIC_BASE_URL``, and it is stored and handed to
later sessions. Unbounded, a proxy that answers a 1,000,000-character narrative and 10,000
facts would have one ``get_observations`` call answer a million characters.
"""

from __future__ import annotations

import html
import itertools
import re
from collections.abc import Iterator

import msgspec

from sessionmem.protocol.limits import printable_line
from sessionmem.records import OBSERVATION_TYPES

# Characters of each field kept (and items of each list); a file is a name, on one line.
LIMITS = {"title": 200, "subtitle": 300, "narrative": 2000, "fact": 500, "concept": 100, "file": 1024,
          "summary_field": 4000}
MOST_ITEMS = {"facts": 20, "concepts": 10, "files_read": 50, "files_modified": 50}
MAX_REPLY_CHARS = 200_000  # what is scanned of a reply (2,048 tokens are ~8,000)

# Tags are found with str.find, never a lazy pattern running to the end of the reply: a reply of
# unclosed tags once took a regex scan from each open tag to the end (quadratic: 30 s at 200,000
# characters, on the worker's event loop). Here an open tag without a close after it ends the scan,
# since no later one can be closed either: each character is looked at a bounded number of times.
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")  # length kept
# An index of six digits at most, alone (`1e9` or `3.7` is no index): a 5,000-digit one is no int
# Python converts (ValueError), and was a crash of the session's actor.
_INDEX = re.compile(r"""index\s*=\s*["']?([0-9]{1,6})(?![0-9.eE])""", re.I)


def _elements(text: str, name: str, *, open_to_the_end: bool = False) -> Iterator[tuple[str, str]]:
    """``(attributes, inner text)`` of each ``<name ...>...</name>`` in ``text``, in order, in any case.

    ``open_to_the_end``: an open tag with no close runs to the end of ``text`` (a summary cut
    short by ``max_tokens``), else it is no element.
    """
    lowered = text.translate(_ASCII_LOWER)
    opener, closer = f"<{name}", f"</{name}"
    at = 0
    while (start := lowered.find(opener, at)) >= 0:
        after = start + len(opener)
        if after < len(lowered) and (lowered[after].isalnum() or lowered[after] == "_"):
            at = after  # another tag (`<titles>` is not `<title>`)
            continue
        tag_end = lowered.find(">", after)
        if tag_end < 0:
            return
        close, close_end = _close_tag(lowered, closer, tag_end + 1)
        if close < 0:
            if open_to_the_end:
                yield text[after:tag_end], text[tag_end + 1:]
            return
        yield text[after:tag_end], text[tag_end + 1:close]
        at = close_end


def _close_tag(lowered: str, closer: str, at: int) -> tuple[int, int]:
    """Where the first ``</name\\s*>`` from ``at`` starts and ends, or (-1, -1)."""
    while (close := lowered.find(closer, at)) >= 0:
        end = close + len(closer)
        while end < len(lowered) and lowered[end].isspace():
            end += 1
        if end < len(lowered) and lowered[end] == ">":
            return close, end + 1
        at = end
    return -1, -1


def _first(text: str, name: str) -> str | None:
    return next((inner for _, inner in _elements(text, name)), None)


def _field(body: str, name: str, limit: int) -> str:
    inner = _first(body, name)
    return html.unescape(inner.strip())[:limit].strip() if inner is not None else ""


def _items(body: str, container: str, item: str) -> tuple[str, ...]:
    inner = _first(body, container)
    if inner is None:
        return ()
    found = [value for _, value in itertools.islice(_elements(inner, item), 4 * MOST_ITEMS[container])]
    if not found:
        found = [line.lstrip("-* ").strip() for line in inner.splitlines()]
    values = (html.unescape(value.strip()) for value in found if value.strip())
    if item == "file":
        values = (printable_line(value) for value in values)
    kept = (value[: LIMITS[item]].strip() for value in values)
    return tuple(itertools.islice((value for value in kept if value), MOST_ITEMS[container]))  # the rest unread


class ParsedObservation(msgspec.Struct, frozen=True, kw_only=True):
    """One observation block; ``index`` is 1-based, or None where the reply gave none."""

    index: int | None
    type: str
    title: str
    subtitle: str
    facts: tuple[str, ...]
    narrative: str
    concepts: tuple[str, ...]
    files_read: tuple[str, ...]
    files_modified: tuple[str, ...]


def parse_observations(text: str) -> list[ParsedObservation]:
    parsed: list[ParsedObservation] = []
    for attributes, body in _elements(text[:MAX_REPLY_CHARS], "observation"):
        type_ = _field(body, "type", 40).lower()
        title = _field(body, "title", LIMITS["title"])
        if not title or type_ not in OBSERVATION_TYPES:
            continue
        index_match = _INDEX.search(attributes)
        parsed.append(
            ParsedObservation(
                index=int(index_match.group(1)) if index_match else None,
                type=type_,
                title=title,
                subtitle=_field(body, "subtitle", LIMITS["subtitle"]),
                facts=_items(body, "facts", "fact"),
                narrative=_field(body, "narrative", LIMITS["narrative"]),
                concepts=_items(body, "concepts", "concept"),
                files_read=_items(body, "files_read", "file"),
                files_modified=_items(body, "files_modified", "file"),
            )
        )
    return parsed


SUMMARY_FIELDS = ("request", "investigated", "learned", "completed", "next_steps", "notes")


def parse_summary(text: str) -> dict[str, str] | None:
    body = next((inner for _, inner in _elements(text[:MAX_REPLY_CHARS], "summary", open_to_the_end=True)), None)
    if body is None:
        return None
    fields = {name: _field(body, name, LIMITS["summary_field"]) for name in SUMMARY_FIELDS}
    if not fields["request"] and not fields["completed"] and not fields["learned"]:
        return None
    return fields
