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

import msgspec

from sessionmem.protocol.limits import printable_line
from sessionmem.records import OBSERVATION_TYPES

# Characters of each field kept (and items of each list); a file is a name, on one line.
LIMITS = {"title": 200, "subtitle": 300, "narrative": 2000, "fact": 500, "concept": 100, "file": 1024,
          "summary_field": 4000}
MOST_ITEMS = {"facts": 20, "concepts": 10, "files_read": 50, "files_modified": 50}
MAX_REPLY_CHARS = 200_000  # what is scanned of a reply (2,048 tokens are ~8,000)

# Bounded input (the reply is limited by max_tokens) and lazy, non-nested patterns:
# no catastrophic backtracking.
_BLOCK = re.compile(r"<observation\b([^>]*)>(.*?)</observation\s*>", re.S | re.I)
_INDEX = re.compile(r"""index\s*=\s*["']?(\d+)""", re.I)
_SUMMARY = re.compile(r"<summary\b[^>]*>(.*?)(?:</summary\s*>|$)", re.S | re.I)


def _field(body: str, name: str, limit: int) -> str:
    match = re.search(rf"<{name}\b[^>]*>(.*?)</{name}\s*>", body, re.S | re.I)
    return html.unescape(match.group(1).strip())[:limit].strip() if match else ""


def _items(body: str, container: str, item: str) -> tuple[str, ...]:
    match = re.search(rf"<{container}\b[^>]*>(.*?)</{container}\s*>", body, re.S | re.I)
    if not match:
        return ()
    inner = match.group(1)
    found = re.findall(rf"<{item}\b[^>]*>(.*?)</{item}\s*>", inner, re.S | re.I)
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
    for attributes, body in _BLOCK.findall(text[:MAX_REPLY_CHARS]):
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
    match = _SUMMARY.search(text[:MAX_REPLY_CHARS])
    if not match:
        return None
    fields = {name: _field(match.group(1), name, LIMITS["summary_field"]) for name in SUMMARY_FIELDS}
    if not fields["request"] and not fields["completed"] and not fields["learned"]:
        return None
    return fields
