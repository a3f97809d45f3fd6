"""Parsing of the model's XML reply: ``<observation>`` blocks and a ``<summary>``.

Models do not write well-formed XML reliably (a stray ``&`` or ``<`` in a fact, a
missing close tag, prose around the blocks), so this is a tolerant scanner rather
than an XML parser: it finds each block, reads the fields it recognises, unescapes
entities, and ignores the rest. A block without a usable ``type`` and ``title`` does
not count as parsed.
"""

from __future__ import annotations

import html
import re

from sessionmem.records import OBSERVATION_TYPES

# Bounded input (the reply is limited by max_tokens) and lazy, non-nested patterns:
# no catastrophic backtracking.
_BLOCK = re.compile(r"<observation\b([^>]*)>(.*?)</observation\s*>", re.S | re.I)
_INDEX = re.compile(r"""index\s*=\s*["']?(\d+)""", re.I)
_SUMMARY = re.compile(r"<summary\b[^>]*>(.*?)(?:</summary\s*>|$)", re.S | re.I)


def _field(body: str, name: str) -> str:
    match = re.search(rf"<{name}\b[^>]*>(.*?)</{name}\s*>", body, re.S | re.I)
    return html.unescape(match.group(1).strip()) if match else ""


def _items(body: str, container: str, item: str) -> tuple[str, ...]:
    match = re.search(rf"<{container}\b[^>]*>(.*?)</{container}\s*>", body, re.S | re.I)
    if not match:
        return ()
    inner = match.group(1)
    found = re.findall(rf"<{item}\b[^>]*>(.*?)</{item}\s*>", inner, re.S | re.I)
    if not found:
        found = [line.lstrip("-* ").strip() for line in inner.splitlines()]
    return tuple(html.unescape(value.strip()) for value in found if value.strip())


class ParsedObservation(dict[str, object]):
    """Field name -> value for one observation block; ``index`` is 1-based or None."""


def parse_observations(text: str) -> list[ParsedObservation]:
    parsed = []
    for attributes, body in _BLOCK.findall(text):
        type_ = _field(body, "type").lower()
        title = _field(body, "title")
        if not title or type_ not in OBSERVATION_TYPES:
            continue
        index_match = _INDEX.search(attributes)
        parsed.append(
            ParsedObservation(
                index=int(index_match.group(1)) if index_match else None,
                type=type_,
                title=title,
                subtitle=_field(body, "subtitle"),
                facts=_items(body, "facts", "fact"),
                narrative=_field(body, "narrative"),
                concepts=_items(body, "concepts", "concept"),
                files_read=_items(body, "files_read", "file"),
                files_modified=_items(body, "files_modified", "file"),
            )
        )
    return parsed


SUMMARY_FIELDS = ("request", "investigated", "learned", "completed", "next_steps", "notes")


def parse_summary(text: str) -> dict[str, str] | None:
    match = _SUMMARY.search(text)
    if not match:
        return None
    fields = {name: _field(match.group(1), name) for name in SUMMARY_FIELDS}
    if not fields["request"] and not fields["completed"] and not fields["learned"]:
        return None
    return fields
