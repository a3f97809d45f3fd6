"""Short snippets of a document around the words a query asked for."""

from __future__ import annotations

import re

SNIPPET_CHARS = 200


def snippet(text: str, terms: list[str], *, width: int = SNIPPET_CHARS) -> str:
    """About ``width`` characters of ``text`` (whitespace folded) around the first word that starts
    with one of ``terms`` (so ``fix`` finds ``fixing``, as the stemmed full-text search does);
    the beginning when none is found."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    start = 0
    if terms:
        pattern = re.compile(r"\b(?:" + "|".join(re.escape(term) for term in terms) + ")", re.IGNORECASE)
        found = pattern.search(text)
        if found:
            start = max(0, found.start() - width // 4)
            if start:
                space = text.find(" ", start)
                start = space + 1 if 0 <= space < found.start() else start
    end = min(len(text), start + width)
    if end < len(text):
        space = text.rfind(" ", start + width // 2, end)
        end = space if space > 0 else end
    return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")
