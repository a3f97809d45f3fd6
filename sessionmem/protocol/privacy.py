r"""Removal of ``<private>`` and ``<sessionmem-context>`` spans, in linear time, failing closed.

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
- Tags are also read through the encodings tools print text in (see "Encodings").

Encodings: a tool prints what a person wrote in its own encoding -- a web page as HTML
entities (``&lt;private&gt;``, ``&#60;``, ``&#x3c;``), ``gh --json`` and other JSON
writers as escapes (``\u003cprivate\u003e``, ``<\/private>``), a URL percent-encoded
(``%3Cprivate%3E``), an input method in full-width forms (``＜private＞``, ``ｐｒｉｖａｔｅ``).
Before tags are looked for, a *view* of the field is made: HTML character references
(numeric ones, and the named ones that spell a tag's characters: HTML names no letter),
JSON and JavaScript escapes (``\uXXXX``, surrogate pairs, ``\xXX``, ``\/``, and ``\\``
where it leads to one),
percent-encoding (ASCII, and whole UTF-8 characters) decoded, and every character that
Unicode compatibility normalization (NFKC) changes folded, its result too. Doubly
encoded text (``&amp;lt;``, ``%253C``, ``\\u003c``) is decoded again, up to
:data:`MAX_DECODE_ROUNDS` times; a field still decoding after that is hidden whole (made,
not written, as past :data:`MAX_TAGS`). Tags found in the view remove the original text they
were decoded from, under the same rules: an opener that never closes, or whose closer is
an escape that does not decode, hides the rest of the field. The view is made only where
it can differ (a field holding ``&``, ``%``, ``\`` or a character beyond ASCII), each
escape decoded once, in one pass a round: linear. ``unicodedata`` (a C module,
~0.3 ms) is imported only for a field beyond ASCII.

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

MAX_DECODE_ROUNDS = 4  # &amp;amp;lt; is three; a text still decoding after these is hidden whole
# HTML's named references of a tag's characters (it names no letter), longest first; HTML reads the
# first few without their ";" too.
_ENTITIES = (("NewLine", "\n"), ("lbrack", "["), ("rbrack", "]"), ("lsqb", "["), ("rsqb", "]"), ("nbsp", "\xa0"),
             ("amp", "&"), ("AMP", "&"), ("sol", "/"), ("Tab", "\t"), ("lt", "<"), ("LT", "<"), ("gt", ">"),
             ("GT", ">"))
_WITHOUT_SEMICOLON = frozenset(("nbsp", "amp", "AMP", "lt", "LT", "gt", "GT"))
# What follows the "&" of a reference: "#", or a name's first letter.
_REFERENCE_SECOND = frozenset({"#"} | {name[0] for name, _ in _ENTITIES})
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
# What a percent or backslash escape of no use to a name decodes to: controls, the space and the URL
# punctuation percent-encoding is mostly made of (%20, %2F, %3A, %3D, %2C, %22, %27, %3C, %3E, %5B, %5D).
_NO_LETTER_CODES = frozenset((*range(0x21), 0x22, 0x27, 0x2C, 0x2F, 0x3A, 0x3C, 0x3D, 0x3E, 0x5B, 0x5D, 0x7F))
_DECIMAL_DIGITS = frozenset("0123456789")


def contains_tag(text: str | bytes) -> bool:
    """Whether ``text``, a field or the JSON encoding of a value, may hold one of the tags: the test before a walk.

    For a field, exact. For an encoding (our encoders': ``<``, ``[`` and ``/`` as they
    are, whitespace but the space escaped as ``\\t``, ``\\n``, ``\\r``, ``\\f``), it
    over-approximates, never the other way: it says yes where some string of the value
    may hold a tag, and the walk then decides; a name beside no ``<`` or ``[`` (the
    ``private`` of Java code, or of prose) says no without a walk.
    """
    if isinstance(text, str):
        return _holds_tag(text)
    lowered = text.lower()  # ASCII only, as the grammar is
    if (b"&" in text or b"%" in text or b"\\" in text or not text.isascii()) and _may_decode_to_a_tag(text, lowered):
        return True
    if b"<" not in text and b"[" not in text:
        return False
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
    if "<" not in text and "[" not in text and "&" not in text and "%" not in text and "\\" not in text and (
            text.isascii() or not any(character in text for character in _FOLDS_TO_A_BRACKET)):
        return text  # no tag, nor anything that decodes to the bracket a tag begins with: most text
    decode = _may_be_encoded(text) and _may_spell_a_name(text)
    if "<" not in text and "[" not in text and not decode:
        return text
    view, rounds = _decoded_view(text) if decode else (text, [])
    if rounds is None:
        return ""  # encoded deeper than anyone writes: made, not written
    if rounds and next(tags_in(view), None) is not None:
        kept = _kept_ranges(view)  # read through the encodings; the original text is cut
        if kept is None:
            return ""
        result = "".join(text[_to_original(start, rounds, end=False):_to_original(end, rounds, end=True)]
                         for start, end in kept if start < end).strip()
    else:
        kept = _kept_ranges(text)
        if kept is None:
            return ""
        if kept == [(0, len(text))]:
            return text  # no tag
        result = "".join(text[start:end] for start, end in kept).strip()
    if _holds_tag(result):
        return ""  # kept pieces that join into a tag, or end in one: made, not written
    return result


def _kept_ranges(text: str) -> list[tuple[int, int]] | None:
    """The ranges of ``text`` kept under the rules (``[(0, len(text))]``: it holds no tag; ``None``: hide it whole)."""
    kept: list[tuple[int, int]] = []
    cursor = 0  # the start of text not yet kept or dropped
    tags_seen = 0
    inside = -1  # the name index of the open span, or -1
    depth = 0
    for start, after, name, closing in tags_in(text):
        tags_seen += 1
        if tags_seen > MAX_TAGS:
            return None
        if inside < 0:
            if closing:
                kept.clear()  # a closer with no opener: everything before it was meant private
            else:
                kept.append((cursor, start))  # text before a span is kept
                inside, depth = name, 1
            cursor = after
        elif name == inside:
            depth += -1 if closing else 1
            if depth == 0:
                inside = -1
                cursor = after
    if tags_seen == 0:
        return [(0, len(text))]
    if inside < 0:
        kept.append((cursor, len(text)))  # else unterminated: the rest is hidden
    return kept


def _holds_tag(text: str) -> bool:
    """Whether ``text`` holds a tag, as written or through its encodings."""
    if next(tags_in(text), None) is not None:
        return True
    if not _may_be_encoded(text) or not _may_spell_a_name(text):
        return False
    view, rounds = _decoded_view(text)
    return rounds is None or (bool(rounds) and next(tags_in(view), None) is not None)


def _may_be_encoded(text: str) -> bool:
    return "&" in text or "%" in text or "\\" in text or not text.isascii()


# What NFKC folds into the bracket a tag begins with (compatibility mappings never change once made): ＜ ﹤
# ［ and the vertical presentation form of "[". A text holding none, no "<" or "[" and no escape (``&``,
# ``%``, a backslash) has no tag to decode, as nearly every stored line (an ellipsis or a curly quote is
# no bracket): a few substring searches say so, before any view is made.
_FOLDS_TO_A_BRACKET = "\uff1c\ufe64\uff3b\ufe47"


def _may_spell_a_name(text: str) -> bool:
    """Whether the decoded view of ``text`` may hold a tag's name (a tag needs one): the name as written (any
    case), or an escape that may decode to a letter or to part of another escape (a character reference, a
    percent or backslash escape of anything but a control, a space or URL punctuation), or a character NFKC
    changes. The quick test before a view is made: 2 % of the corpus's strings pass it."""
    lowered = text.lower()
    return any(name in lowered for name in TAG_NAMES) or _letters_may_be_encoded(text)


def _letters_may_be_encoded(text: str, *, in_json: bool = False) -> bool:
    """The second half of :func:`_may_spell_a_name`: escapes and folds (each sign looked for only where its
    first character is: one fast pass each over a long text). ``in_json``: ``text`` is a JSON encoding, whose
    own ``\\u`` escapes are of controls (our encoders write the rest as they are), and a string's backslash
    is written ``\\\\``."""
    if "&" in text and ("&#" in text or "amp;#" in text or "AMP;#" in text or "amp#" in text or "AMP#" in text):
        return True  # a numeric reference, maybe encoded again (&amp;#112;): named ones spell no letter
    backslash = "\\\\" if in_json else "\\"
    for sign, digits in (("%", 2), (backslash + "u", 4), (backslash + "x", 2)):
        if sign[0] not in text:
            continue
        at = text.find(sign)
        while at >= 0:
            code = _hex_at(text, at + len(sign), digits)
            if code is not None and code not in _NO_LETTER_CODES:
                return True
            at = text.find(sign, at + 1)
    if text.isascii():
        return False
    import unicodedata

    return not unicodedata.is_normalized("NFKC", text)


def _may_decode_to_a_tag(encoded: bytes, lowered: bytes) -> bool:
    """Whether a JSON encoding's decoded view may hold a tag (over-approximated: it holds a name and a ``<`` or
    ``[``; the JSON's own escaped whitespace is not decoded, so a tag's spelling around its name is not read)."""
    text = encoded.decode("utf-8", "replace")
    if not any(name in lowered for name in _TAG_NAMES_BYTES) and not _letters_may_be_encoded(text, in_json=True):
        return False
    view, rounds = _decoded_view(text)
    if rounds is None:
        return True
    if not rounds:
        return False
    lowered_view = _ascii_lowered(view)
    return ("<" in view or "[" in view) and any(name in lowered_view for name in TAG_NAMES)


# -- the decoded view ------------------------------------------------------------------------------

# One round of decoding: for each piece replaced, (view start, view end, original start, original end),
# in order, and the view starts alone (for bisect).
Round = tuple[list[int], list[tuple[int, int, int, int]]]


def _decoded_view(text: str) -> tuple[str, list[Round] | None]:
    """``text`` with its encodings decoded (see "Encodings" in the module docstring), and the rounds that
    map the view back to it (none: the view is ``text``; ``None``: it is encoded more than
    :data:`MAX_DECODE_ROUNDS` deep, which a tag could hide under)."""
    rounds: list[Round] = []
    view = text
    while _may_be_encoded(view):
        decoded = _decode_round(view)
        if decoded is None:
            break
        if len(rounds) == MAX_DECODE_ROUNDS:
            return view, None
        view, starts, pieces = decoded
        rounds.append((starts, pieces))
    return view, rounds


def _to_original(index: int, rounds: list[Round], *, end: bool) -> int:
    """The index in the original text of a view's ``index``: a start maps to the start of the escape it is in,
    an end to the end of the escape it is in (so a range never cuts one in two)."""
    from bisect import bisect_left, bisect_right  # ~0.25 ms: only where a decoded tag is cut out

    for starts, pieces in reversed(rounds):
        at = (bisect_left(starts, index) if end else bisect_right(starts, index)) - 1
        if at < 0:
            continue  # before any replaced piece: the same index
        view_start, view_end, original_start, original_end = pieces[at]
        index = original_start if not end and index < view_end else original_end + max(0, index - view_end)
    return index


def _decode_round(text: str) -> tuple[str, list[int], list[tuple[int, int, int, int]]] | None:
    """One round over ``text``: each escape decoded, each character NFKC changes folded; ``None`` if none was."""
    folds = _folds(text)
    sites: list[int] = []
    at = text.find("&")
    while at >= 0:  # a reference starts "&#" or "&" and a name's first letter; "&&" is none
        if text[at + 1:at + 2] in _REFERENCE_SECOND:
            sites.append(at)
        at = text.find("&", at + 1)
    for sign in ("%", "\\u", "\\x", "\\/", "\\\\", *folds):
        if sign[0] not in text:
            continue  # one fast pass (memchr) spares a search of each of its signs
        at = text.find(sign)
        while at >= 0:
            sites.append(at)
            at = text.find(sign, at + 1)
    if not sites:
        return None
    sites.sort()
    out: list[str] = []
    pieces: list[tuple[int, int, int, int]] = []
    done = 0  # text before this is settled
    size = 0  # the view's length so far
    plain_until = 0  # the end of a run of backslashes that escapes nothing (C:\\dir, a regex)
    for at in sites:
        if at < done or at < plain_until:
            continue  # inside an escape decoded already, or a run of plain backslashes
        if text.startswith("\\\\", at):
            run_end = at
            while text[run_end:run_end + 1] == "\\":
                run_end += 1
            if text[run_end:run_end + 1] not in ("u", "x", "/"):
                plain_until = run_end  # "\\" decodes only where it leads to an escape (JSON inside JSON)
                continue
        decoded = _escape_at(text, at, folds)
        if decoded is None:
            continue
        value, end = decoded
        out.append(text[done:at])
        size += at - done
        out.append(value)
        pieces.append((size, size + len(value), at, end))
        size += len(value)
        done = end
    if not pieces:
        return None
    out.append(text[done:])
    return "".join(out), [piece[0] for piece in pieces], pieces


def _folds(text: str) -> dict[str, str]:
    """The characters of ``text`` that compatibility normalization (NFKC) changes, and what it makes of them."""
    if text.isascii():
        return {}
    import unicodedata  # a C module, ~0.2 ms: only for text beyond ASCII

    if unicodedata.is_normalized("NFKC", text):
        return {}
    folds = {}
    for character in set(text):
        if character > "\x7f" and (folded := unicodedata.normalize("NFKC", character)) != character:
            folds[character] = folded
    return folds


def _fold(value: str) -> str:
    """A decoded character as NFKC makes it (``&#xFF1C;`` is ``＜``, which is ``<``)."""
    if value.isascii():
        return value
    import unicodedata

    return unicodedata.normalize("NFKC", value)


def _escape_at(text: str, at: int, folds: dict[str, str]) -> tuple[str, int] | None:
    """What the escape at ``at`` decodes to, and the index after it; ``None`` if there is none there."""
    sign = text[at]
    if sign == "&":
        return _reference_at(text, at)
    if sign == "%":
        return _percent_at(text, at)
    if sign == "\\":
        follows = text[at + 1:at + 2]
        if follows in ("/", "\\"):
            return follows, at + 2
        if follows == "x":
            code = _hex_at(text, at + 2, 2)
            return None if code is None else (_fold(chr(code)), at + 4)
        code = _hex_at(text, at + 2, 4)  # \uXXXX
        if code is None:
            return None
        if 0xD800 <= code < 0xDC00 and text.startswith("\\u", at + 6):
            low = _hex_at(text, at + 8, 4)
            if low is not None and 0xDC00 <= low < 0xE000:
                return _fold(chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00))), at + 12
        if 0xD800 <= code < 0xE000:
            return None  # a lone surrogate: no character
        return _fold(chr(code)), at + 6
    return folds.get(sign, sign), at + 1


def _hex_at(text: str, at: int, digits: int) -> int | None:
    """The number written by ``digits`` hexadecimal digits at ``at``, if they are there."""
    part = text[at:at + digits]
    if len(part) != digits or not all(digit in _HEX_DIGITS for digit in part):
        return None
    return int(part, 16)


def _reference_at(text: str, at: int) -> tuple[str, int] | None:
    """An HTML character reference at ``at`` (``&#60;``, ``&#x3c;``, ``&lt;``; the ``;`` optional where HTML
    allows it)."""
    if text.startswith("&#", at):
        start = at + 2
        hexadecimal = text[start:start + 1] in ("x", "X")
        start += hexadecimal
        digits = _HEX_DIGITS if hexadecimal else _DECIMAL_DIGITS
        end = start
        while end < len(text) and end - start < 8 and text[end] in digits:
            end += 1
        if end == start:
            return None
        code = int(text[start:end], 16 if hexadecimal else 10)
        if not 0 < code <= 0x10FFFF or 0xD800 <= code < 0xE000:
            return None
        return _fold(chr(code)), end + (text[end:end + 1] == ";")
    for name, value in _ENTITIES:
        if text.startswith(name, at + 1):
            end = at + 1 + len(name)
            if text[end:end + 1] == ";":
                return value, end + 1
            if name in _WITHOUT_SEMICOLON:
                return value, end
    return None


def _percent_at(text: str, at: int) -> tuple[str, int] | None:
    """A percent-encoded character at ``at``: an ASCII byte, or the bytes of one UTF-8 character."""
    first = _hex_at(text, at + 1, 2)
    if first is None:
        return None
    if first < 0x80:
        return chr(first), at + 3
    length = 2 if 0xC2 <= first <= 0xDF else 3 if 0xE0 <= first <= 0xEF else 4 if 0xF0 <= first <= 0xF4 else 0
    if not length:
        return None
    encoded = [first]
    end = at + 3
    for _ in range(length - 1):
        byte = _hex_at(text, end + 1, 2) if text[end:end + 1] == "%" else None
        if byte is None:
            return None
        encoded.append(byte)
        end += 3
    try:
        return _fold(bytes(encoded).decode("utf-8")), end
    except UnicodeDecodeError:
        return None


def strip_private_deep(value: Any) -> Any:
    """Apply :func:`strip_private` to every string inside JSON-like data (keys included)."""
    return map_strings(value, strip_private, keys=True)
