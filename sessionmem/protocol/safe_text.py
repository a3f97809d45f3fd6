"""Stored text made safe to hand to an agent: inside ``<sessionmem-context>``, or as an MCP tool's answer.

Stored text is untrusted (it came from tool output, web pages, files). Every field put
into injected context, and into what the MCP tools answer Claude, goes through
:func:`neutral` (standard library only, so the MCP server, which talks to the worker
through this package alone, uses the same rules): our tags in any spelling are
removed, and its name in any other spelling is written apart, so nothing can close the
wrapper early and speak outside it, not even in a model's eyes; a chat role's tag
(``<system>``, ``</assistant>``, ``<|im_start|>``, ``<system-reminder>``, in look-alike
letters of other scripts too) has its angle brackets written ``‹ ›``, so it reads as what
it is, quoted text, not a turn of the conversation; and control and bidirectional-override
characters are dropped, so nothing hides or reorders what a reader sees. The wrapper
itself, and the words that frame memory as recalled data, are :mod:`sessionmem.protocol.framing`'s.
"""

from __future__ import annotations

import re
import time
import unicodedata
from collections.abc import Callable
from typing import Any

from sessionmem.protocol.limits import printable_line
from sessionmem.protocol.lookalikes import latin_skeleton
from sessionmem.protocol.privacy import strip_private

# C0 and C1 controls (whitespace aside), and the characters that reorder or hide text:
# bidirectional embeddings, overrides and isolates, marks, zero-width joiners, the soft
# hyphen, the grapheme joiner and variation selectors (invisible inside a word: "</session\xadmem-context>"
# reads as the closing tag). And Unicode's tag characters (U+E0000-E007F): invisible, yet a
# model reads them as ASCII.
# The pages drop the same characters (web/assets/dom.js; a browser test holds the two equal).
INVISIBLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\xad\u034f\u061c\u180e\u200b-\u200f\u202a-\u202e"
                       "\u2060-\u2069\ufe00-\ufe0f\ufeff\U000e0000-\U000e007f\U000e0100-\U000e01ef]")
# Every other space (no-break, em, ideographic...) made a plain one before the tags are looked for:
# `</sessionmem-context\u00a0>` is no tag to the strip, yet becomes `</sessionmem-context >` once a
# line's spaces are joined.
_SPACES = re.compile("[\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")
# The wrapper's name in any other spelling: another case, fullwidth letters (NFKC folds them), another
# dash, an underscore, a dot or a colon, spaces or nothing between its words ("session" and "mem" too). No
# tag to the strip, yet a model may read `</sessionmem‑context>`, `</SESSIONMEM_CONTEXT>` or
# `</SessionMemContext>` as the end of memory. (`＜/sessionmem-context＞` and `&lt;/sessionmem-context&gt;`
# are tags to the strip, which reads through NFKC and entities.)
# A path (`sessionmem/context.py`) is left as it is.
_JOINT = "[\\s\\-_.:\u2010-\u2015\u2212\ufe58\ufe63\uff0d]{0,3}"
_NAME_SPELLINGS = re.compile(f"session{_JOINT}mem{_JOINT}context", re.IGNORECASE)
NAME_DEFANGED = "sessionmem context"  # a tag name has no space: no spelling of the closing tag is left
# A tag of a chat role or turn, as prompt formats write them (any case, an attribute or spaces inside,
# `&lt;`/`&gt;` for the brackets): a model may read one as a turn of the conversation, or as its
# system's voice. A tag of code (`<div>`, `List<String>`) is none of these, and stays as it is.
_ROLE_TAG = re.compile(
    r"(?:<|&lt;)\s*/?\s*(?:system|system[\s_-]*(?:reminder|prompt|message)|user|assistant|human|developer"
    r"|tool[\s_-]*(?:results?|use|calls?|response)|function[\s_-]*(?:calls?|results?)|instructions?"
    r"|\|[^<>|]{0,40}\|)(?=[\s/>|&])[^<>&]{0,200}(?:>|&gt;)", re.IGNORECASE)
ROLE_OPEN, ROLE_CLOSE = "\u2039", "\u203a"  # ‹ ›: no tag to a parser, nor to a model; NFKC keeps them


def neutral(text: str) -> str:
    """Stored text made safe to print inside the wrapper (see the module docstring)."""
    text = _SPACES.sub(" ", INVISIBLE.sub("", str(text)))
    # One pass: what strip_private keeps never holds a tag, so a second would change nothing.
    text = strip_private(text)
    # Both checks read the NFKC-folded text (a fullwidth ＜system＞ is a tag too): folded once, here.
    folded = text if text.isascii() or unicodedata.is_normalized("NFKC", text) else unicodedata.normalize("NFKC", text)
    # Our name and a role's tag are looked for with look-alike letters read as Latin (`</sessiоnmem-context>`,
    # `<sуstem>`: a Cyrillic о, у), and only what is found there is changed: the rest keeps its letters.
    skeleton = latin_skeleton(folded)
    names = list(_NAME_SPELLINGS.finditer(skeleton))
    if names:
        folded = _replaced(folded, names, lambda _: NAME_DEFANGED)
        skeleton = latin_skeleton(folded)
    roles = list(_ROLE_TAG.finditer(skeleton)) if "<" in skeleton or "&lt;" in skeleton else []
    if not names and not roles:
        return text
    return _replaced(folded, roles, lambda found: _bracketed(found, folded)) if roles else folded


def _replaced(text: str, spans: list[re.Match[str]], by: Callable[[re.Match[str]], str]) -> str:
    """``text`` with each of ``spans`` (found in its skeleton: the same positions) written as ``by`` says."""
    pieces, at = [], 0
    for found in spans:
        pieces += [text[at:found.start()], by(found)]
        at = found.end()
    return "".join(pieces) + text[at:]


def _bracketed(found: re.Match[str], text: str) -> str:
    """The role tag ``found`` (in the skeleton) as ``text`` spells it, its brackets written ‹ ›."""
    tag = found.group(0)
    opener = 4 if tag.startswith("&lt;") else 1
    closer = 4 if tag.endswith("&gt;") else 1
    return f"{ROLE_OPEN}{text[found.start() + opener:found.end() - closer]}{ROLE_CLOSE}"


# Fields of the worker's answers that name something or are one item of a list (they come from a
# hook's payload, or from a model's reply): printed on one line, each string of a list too. A line
# break in a session id would forge a record line in an MCP answer and in `sessionmem show`, and one in
# a file a model named a "SYSTEM:" line of its own. A narrative keeps its lines.
ONE_LINE_FIELDS = frozenset({"project", "claudeSessionId", "agentId", "agentType", "toolName", "toolUseId", "cwd",
                             "type", "kind", "title", "subtitle", "facts", "concepts", "files", "filesRead",
                             "filesModified", "compressor", "model", "provenance"})


def neutral_deep(value: Any) -> Any:
    """Every string in JSON-like ``value`` (an answer of the worker) made :func:`neutral`, and those of the
    :data:`ONE_LINE_FIELDS` (strings, or lists of them) one line too."""
    if isinstance(value, dict):
        return {key: _one_line_deep(item) if key in ONE_LINE_FIELDS else neutral_deep(item)
                for key, item in value.items()}
    if isinstance(value, list):
        return [neutral_deep(item) for item in value]
    return neutral(value) if isinstance(value, str) else value


def _one_line_deep(value: Any) -> Any:
    if isinstance(value, str):
        return one_line(value)
    if isinstance(value, list):
        return [one_line(item) if isinstance(item, str) else neutral_deep(item) for item in value]
    return neutral_deep(value)


def one_line(text: str, limit: int | None = None) -> str:
    """:func:`neutral` text on one printable line (:func:`~sessionmem.protocol.limits.printable_line`),
    cut to ``limit`` characters if given."""
    text = printable_line(neutral(text))
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


NO_DATE = "(no valid date)"


def local_time(timestamp: float, form: str = "%Y-%m-%d %H:%M") -> str:
    """A stored time as local time, or :data:`NO_DATE` for one no date can show (NaN, infinite, past
    what the platform's time_t holds): a time is stored text too, and one row must not fail a whole answer."""
    try:
        return time.strftime(form, time.localtime(timestamp))
    except (OverflowError, OSError, ValueError):
        return NO_DATE
