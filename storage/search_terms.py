"""What a search looks for, whatever the engine answers it: the words of a query, the names a file goes by.

The SQLite store, the team database and hybrid search's word share read a query's words and
a file lookup's names the same way; this is that one rule, with no SQL of either engine.
"""

from __future__ import annotations

import re

MAX_QUERY_TERMS = 32
# Words that almost every document holds: asking for them costs a scan of their long
# posting lists and ranks nothing. Kept when a query has nothing else.
_STOPWORDS = frozenset(
    "a an and are as at be but by do does for from has have how i in is it its me my of on or so that the "
    "then there this to was we what when where which who why will with you your".split())
_WORD = re.compile(r"\w+")


def query_terms(query: str) -> list[str]:
    """The words of ``query`` that a search looks for (lowercase, unique, stopwords dropped if others remain)."""
    words = list(dict.fromkeys(word.lower() for word in _WORD.findall(query)))
    meaningful = [word for word in words if word not in _STOPWORDS]
    return (meaningful or words)[:MAX_QUERY_TERMS]


# A text with fewer words that mean something than this ("continue", "yes, go on", "keep going")
# says nothing to rank memories by: such a prompt is no focus of a SessionStart context and
# gets no prompt recall.
FOCUS_MIN_WORDS = 3


def says_what_about(text: str) -> bool:
    """Whether ``text`` holds words enough (:data:`FOCUS_MIN_WORDS`) to say what some work is about: as many
    :func:`query_terms`, read no further than needed (a prompt may be pages long, and this runs on its path)."""
    meaningful: set[str] = set()
    common: set[str] = set()
    for match in _WORD.finditer(text):
        word = match.group().lower()
        (common if word in _STOPWORDS else meaningful).add(word)
        if len(meaningful) >= FOCUS_MIN_WORDS:
            return True
    return not meaningful and len(common) >= FOCUS_MIN_WORDS


def like_escaped(text: str) -> str:
    """``text`` as a literal inside a ``LIKE`` pattern with ``ESCAPE '\\'`` (both engines write it so)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def file_name(path: str) -> str:
    """The name a lookup of ``path`` goes by: the ``basename`` it is matched on."""
    return path.strip().rstrip("/").rsplit("/", 1)[-1]


def file_params(path: str) -> dict[str, str]:
    """The parameters a file lookup binds: the path as asked, its name, and a ``LIKE`` pattern of paths ending in it."""
    path = path.strip()
    return {"file": path, "file_base": file_name(path), "file_suffix": "%/" + like_escaped(path.lstrip("/"))}
