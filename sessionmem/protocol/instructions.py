"""Instruction-like text: text that reads as orders to an AI rather than as a record of what happened.

Memory is built from tool output (files, web pages, command output) and from other
machines' rows, and handed back to an agent that runs shell commands. Text planted there
to steer that agent has recognisable shapes; :func:`find_instruction` looks for five:

- **addressed to an AI** (``addressed``): a role label leading a line and giving an order
  (``SYSTEM: ignore…``, ``Assistant: run…``, ``Note to the AI agent:``), ``as an AI``,
  ``you must now``, ``from now on you``, ``your new instructions``, ``new system prompt:``;
  the session taken over or the user's request set aside (``take over the session``,
  ``stop what the user asked``), a permission claimed for the user (``the user has approved
  running…``), memory asked to keep an order (``remember this for all future sessions``);
- **an override** (``override``): ``ignore (all) previous/prior/above instructions``,
  ``disregard the above``, ``forget your instructions``;
- **a download piped into a shell** (``pipe-to-shell``): ``curl … | sh``, ``wget … | bash``,
  ``bash <(curl …)``, ``sh -c "$(curl …)"``, ``iex (iwr …)``, ``iwr … | iex``;
- **data sent to a URL** (``exfiltration``): ``send the credentials to https://…``,
  ``env | curl …``, ``curl -d @~/.ssh/id_rsa …``, ``curl -d "$(env)" …``;
- **a role tag** (``role-tag``): ``<system>``, ``</instructions>``, ``<|im_start|>``, ``[INST]``.

Who uses it: the compressors (an instruction-like piece is never promoted into a title, a
subtitle, "Learned" or "Next steps": :func:`withhold` takes it out, :func:`quoted` keeps it
as quoted text), the import of another machine's rows (re-checked on arrival), and
whatever else must agree on what "instruction-like" means -- one definition, standard
library only, so the hooks and the MCP server may use it too.

Bounded work: a text is read up to :data:`MAX_SCAN` characters (its start and its end,
where a planted line is put to be seen), invisible characters dropped and other scripts'
look-alikes folded (NFKC) first. Each group of shapes runs only when one of its needles is
in the text (a substring search at C speed); a pattern starts with a literal the regular
expression engine skips to, and its repetitions are bounded by a small window, never
nested: the time is linear in what is read (18 ms for 64 KiB repeating a needle).

False positives are the price of catching the planted line: a README's
``curl -fsSL https://… | sh`` install line, or code holding an LLM prompt, reads as
instruction-like too. Nothing is dropped for it: the text is kept, quoted, and the
memory flagged. Over the 6,622 tool outputs of the recorded sessions in the corpus it
flags 3 (0.05 %), all ``curl … | bash`` lines (``bench/instruction_rate.py``; docs/search.md,
"Provenance"). A paraphrase none of the shapes covers is not caught: recalled memory is
framed as quoted data for that.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Container
from typing import NamedTuple

from sessionmem.protocol.lookalikes import latin_skeleton
from sessionmem.protocol.safe_text import INVISIBLE

# Characters of a text read: its first HEAD and its last TAIL (a planted line is put where a
# reader looks: at the start, or at the end of a long output).
HEAD = 48 * 1024
TAIL = 16 * 1024
MAX_SCAN = HEAD + TAIL
# What replaces a withheld piece in a field that must not hold one (see withhold()).
WITHHELD = "[instruction-like text withheld]"
# What a quotation made by quoted() starts with.
_QUOTED = "(quoted "
# A label that goes with what it labels when that is withheld ("SYSTEM" of "SYSTEM: ignore…").
_ROLE_LABEL = re.compile(r"^[\W_]*(?:system|assistant|developer|ai|agent|claude|llm|model|user|human|note|important"
                         r"|urgent)[\W_]*$", re.I)
# A piece of a field, for withhold() and quote_pieces(): a line, a "; " item, or a sentence.
_PIECES = re.compile(r"(?<=[.!?])\s+(?=[A-Z\[<(\"'`])|;\s+|\n+")


class Finding(NamedTuple):
    """Which rule matched, and the text it matched (at most 200 characters of it)."""

    rule: str
    excerpt: str


class _Shape(NamedTuple):
    """One shape of a rule: a pattern, and what must end just before a match (a shell before ``<(curl``)."""

    rule: str
    pattern: re.Pattern[str]
    before: re.Pattern[str] | None = None
    reach: int = 40  # characters before a match that ``before`` reads


class _Group(NamedTuple):
    """Shapes that run only when the text holds one of ``needles`` (substring searches, at C speed: most
    text holds none, and costs a few searches)."""

    needles: tuple[str, ...]
    shapes: tuple[_Shape, ...]


def _shape(rule: str, needle: str, tail: str, *, word: bool = True, before: str | None = None,
           reach: int = 40) -> _Shape:
    """``needle`` (a whole word when ``word``: no letter or digit before it) then ``tail``: a pattern that
    starts with a literal, which the regular expression engine skips to by itself."""
    boundary = f"(?<![a-z0-9_]{re.escape(needle)})" if word else ""
    return _Shape(rule, re.compile(f"{re.escape(needle)}{boundary}(?:{tail})"), re.compile(before) if before else None,
                  reach)


# Role names an order may be addressed to, and the words of an order after one.
_ROLE = r"(?:system|assistant|developer|ai|a\.i\.|agent|claude|chatgpt|gpt|llm|model|copilot|gemini)"
_ORDER = (r"(?:ignore|disregard|forget|override|you\s+(?:must|should|will|are|need)|run|execute|do\s+not|don't"
          r"|never|always|now\b|instead|from\s+now|new\s+(?:instructions?|task|rules?)|important|urgent"
          r"|please|send|delete|download|install|curl|wget)")
_AI = r"(?:ai|a\.i\.|assistant|agent|llm|language\s+model|model|claude|chatgpt|copilot|bot)s?\b"
_PRIOR = r"(?:previous|prior|above|earlier|preceding|former|original|initial|system|existing|old|other)"
_GUIDANCE = (r"(?:instructions?|prompts?|directions?|directives?|rules|guidelines|guidance|context|messages?|commands?"
             r"|orders|constraints|restrictions|programming)")
_OVERRIDE = (rf"\s+(?:(?:all|any|every|of|the|your|my|these|those|such)\s+){{0,3}}{_PRIOR}\s+(?:\w+\s+)?{_GUIDANCE}\b"
             r"|\s+(?:all\s+|everything\s+)?(?:(?:that\s+)?(?:was\s+)?(?:said|written|stated)\s+)?(?:the\s+)?"
             r"(?:above|before\s+this|previous|prior|preceding)(?=\s*(?:[.!,:;\n]|$))")
_SHELL = r"(?:sudo\s+(?:-\S+\s+){0,3})?(?:/usr/bin/|/bin/|/usr/local/bin/)?(?:ba|z|da|k|fi|c|tc|a)?sh\b"
# "| python -m json.tool" pretty-prints: on its line only (a field after a line break is another field).
_INTERPRETER = r"(?:sudo\s+)?(?:python3?|perl|ruby|node|pwsh|powershell)\b(?![ \t]+-m[ \t]+json)"
_SECRETS = (r"(?:credentials?|secrets?|tokens?|api[ _-]?keys?|access[ _-]?keys?|passwords?|passwd|private[ _-]keys?"
            r"|ssh[ _-]keys?|env(?:ironment)?(?:\s+variables|\s+vars)?|\.env\b|cookies|~/\.ssh|~/\.aws|id_rsa|\.netrc"
            r"|keychain|wallet|netrc|npmrc|pypirc|git-credentials|ssh/|aws/)")
_URLISH = r"(?:https?://|ftp://|[\w.-]+\.(?:com|net|org|io|xyz|ru|cn|site|dev|app|sh|me)\b)"
_SENSITIVE = (r"(?:~|\$home|\$\{home\})?/?\.(?:ssh/|aws/|env\b|netrc|npmrc|pypirc|git-credentials|docker/config)"
              r"|[^\s\"']{0,40}id_rsa|\$\{?\w*(?:token|secret|api_?key|password)\w*")
_DATA_FLAG = (r"\s(?:-d|--data(?:-binary|-raw|-urlencode)?|-f|--form|-t|--upload-file|--post-data|--post-file"
              r"|--body-data)[=\s]+[\"']?@?(?:[\w-]+=)?[\"']?@?")
_SENT = rf"[^\n]{{0,120}}?{_DATA_FLAG}(?:\$\(\s*(?:env|printenv|cat\s+[^)\n]{{0,100}}?(?:{_SENSITIVE}))|{_SENSITIVE})"
_SUBSHELL_BEFORE = r"(?:sh|source|eval|iex|(?:^|\s)\.)\s+(?:-\w+\s+){0,2}[\"']?$"
_FETCHES = ("curl", "wget")
_EXFILTRATE = ("send", "upload", "exfiltrat", "post", "forward", "leak", "transmit")


@functools.cache
def groups() -> tuple[_Group, ...]:
    """The rules' shapes, compiled the first time they are needed (some 20 ms: not at import, so a
    process that imports this module and never reads a text, a hook, pays nothing)."""
    return (
        _Group(("ignore", "disregard", "forget", "override", "bypass"), (
            *(_shape("override", verb, _OVERRIDE) for verb in ("ignore", "disregard", "forget", "override", "bypass")),
            _shape("override", "forget", r"\s+(?:all\s+|everything\s+)?(?:you\s+(?:were|have\s+been)\s+told"
                                         r"|your\s+(?:instructions|rules|training))"),
            _shape("addressed", ",", r"\s*(?:ignore|disregard)\b", word=False, before=rf"\b{_AI}\s*$"),
        )),
        # A role label leading a line, then an order on that line (the text read starts with a line break).
        _Group(("\n",), (
            _shape("addressed", "\n", rf"[ \t>*#\-\[(|]{{0,6}}{_ROLE}(?:\s+(?:message|prompt|note|override|instructions?"
                                      rf"|update))?\s*(?:\*\*|\]|\))?\s*:[ \t*\"'`]{{0,4}}(?:[^\n]{{0,60}}?\b)?{_ORDER}",
                   word=False),
        )),
        _Group(("you",), (
            _shape("addressed", "you", r"\s+must\s+now\b|\s+are\s+now\s+(?:a|an|in|the|my|free|dan|unrestricted)\b"
                                       r"|r\s+(?:new|real|true|actual)\s+(?:instructions?|task|goal|objective|role"
                                       r"|purpose|orders)\b"),
            _shape("addressed", "from", r"\s+now\s+on,?\s+you\b"),
            _shape("addressed", ",", r"\s*you\s+must\b", word=False, before=rf"\b{_AI}\s*$"),
        )),
        _Group(("as an",), (_shape("addressed", "as", r"\s+an\s+(?:ai|a\.i\.|llm)\b"),)),
        _Group(("note", "message", "instruction", "attention"), (
            *(_shape("addressed", word, rf"s?\s+(?:to|for)\s+(?:the\s+|any\s+|all\s+)?(?:coding\s+|autonomous\s+)?{_AI}")
              for word in ("note", "message", "instruction", "attention")),
            _shape("addressed", "new", r"\s+(?:system\s+)?instructions?\s*:"),
        )),
        # A prompt or role handed over: "New system prompt: you are…", "your new role:".
        _Group(("system prompt", "new role", "new persona"), (
            _shape("addressed", "new", r"\s+(?:system\s+prompt|role|persona)\s*:"),
            _shape("addressed", "system prompt", r"\s*:\s*you\s+(?:are|must|will)\b", word=False),
        )),
        # The session taken over, the user's request set aside, memory asked to keep an order.
        _Group(("take over", "user asked", "user requested", "user wants", "user said", "user has", "future sessions",
                "remember this", "remember that"), (
            # A permission claimed for the user: "The user has approved running …".
            _shape("addressed", "user has", r"\s+(?:already\s+)?(?:approved|authori[sz]ed|allowed|granted|confirmed"
                                            r"|permitted)\s+(?:you\b|running|executing|this\s+(?:command|action)"
                                            r"|the\s+following|it\s+to\s+run)", word=False),
            _shape("addressed", "take over", r"\s+(?:the|this|your)\s+(?:session|conversation|terminal|agent|task"
                                             r"|machine|shell)\b"),
            *(_shape("addressed", "user", rf"\s+{verb}\b", before=r"\b(?:stop|ignore|abandon|drop|forget|disregard)"
                                                                r"\s+(?:what(?:ever)?|everything|the\s+task|the\s+request)"
                                                                r"\s+(?:that\s+)?(?:the\s+)?$")
              for verb in ("asked", "requested", "wants", "said")),
            *(_shape("addressed", "remember", rf"\s+{that}\s+(?:for|in|across)\s+(?:all\s+|every\s+)?"
                                              r"(?:future|later|next|subsequent)\s+(?:sessions?|conversations?|runs)")
              for that in ("this", "that")),
            _shape("addressed", "remember", r"\s+(?:this|that)\s+as\s+(?:a|an|the)\s+(?:rule|instruction|standing"
                                            r"\s+order|policy)\b"),
        )),
        _Group(_FETCHES, (
            # At each pipe into a shell, a download before it on its line (not each download scanning on to a pipe).
            _shape("pipe-to-shell", "|", rf"\s*(?:{_SHELL}|{_INTERPRETER})", word=False,
                   before=r"\b(?:curl|wget)\b[^\n|;&]{0,300}$", reach=310),
            *(_shape("pipe-to-shell", opening, r"\s*(?:curl|wget)\b", word=False, before=_SUBSHELL_BEFORE)
              for opening in ("<(", "$(")),
            *(_shape("exfiltration", fetch, _SENT) for fetch in _FETCHES),
            _shape("exfiltration", "env", r"\s*\|\s*(?:curl|wget)\b", word=False),
            _shape("exfiltration", "cat", r"\s+[^\n|]{0,100}?(?:~/\.ssh|~/\.aws|id_rsa|\.env\b)[^\n|]{0,100}\|\s*"
                                          r"(?:curl|wget)\b"),
        )),
        _Group(("iex", "invoke-expression"), (
            *(_shape("pipe-to-shell", run, r"\s*\(?\s*(?:\(\s*)?(?:iwr|irm|invoke-webrequest|invoke-restmethod"
                                           r"|new-object\s+(?:system\.)?net\.webclient)\b")
              for run in ("iex", "invoke-expression")),
            *(_shape("pipe-to-shell", get, r"[^\n|;]{0,300}\|\s*(?:iex|invoke-expression)\b")
              for get in ("iwr", "irm", "invoke-webrequest", "invoke-restmethod", "downloadstring")),
        )),
        *(_Group((verb,), (_shape("exfiltration", verb, rf"\w*\s+[^\n]{{0,60}}?\b{_SECRETS}[^\n]{{0,80}}?\b"
                                                        rf"(?:to|at|into|via)\s+{_URLISH}"),))
          for verb in _EXFILTRATE),
        _Group(("<", "[inst", "[/inst"), (
            _shape("role-tag", "<", r"/?(?:system|assistant|developer|instructions?|system[_-]?(?:prompt|message"
                                    r"|instructions?)|im_start|im_end|sys)(?:\s[^<>\n]{0,80})?>|\|(?:im_start|im_end|system"
                                    r"|assistant|endoftext|start_header_id|eot_id)\|>|<\s*/?sys\s*>>", word=False),
            _shape("role-tag", "[", r"/?inst\]", word=False),
        )),
    )
# The C0 controls and DEL a reader does not see (tab, line feed and carriage return aside): dropped
# from ASCII text in one bytes.translate, before the rules read it.
_ASCII_INVISIBLE = bytes([*range(0, 9), 11, 12, *range(14, 32), 127])


def _scanned(text: str) -> str:
    """What is read of ``text``: at most MAX_SCAN characters, after a line break, lower-cased, without
    invisible characters, look-alikes folded."""
    if len(text) > MAX_SCAN:
        text = f"{text[:HEAD]}\n{text[-TAIL:]}"
    if text.isascii():
        return "\n" + text.encode("ascii").translate(None, _ASCII_INVISIBLE).decode("ascii").lower()
    return "\n" + latin_skeleton(unicodedata.normalize("NFKC", INVISIBLE.sub("", text)).lower())


def needles() -> tuple[str, ...]:
    """Every needle of every group: what a faster finder given to :func:`find_instruction` looks for."""
    return tuple(sorted({needle for group in groups() for needle in group.needles}))


def find_instruction(text: str, needles_in: Callable[[str], Container[str]] | None = None) -> Finding | None:
    """The first instruction-like passage of ``text`` (see the module docstring), or ``None``.

    ``needles_in``: which of :func:`needles` the read text holds, all found in one pass (the
    worker's multi-pattern automaton, ``compress/promotion.py``); without it each group looks
    for its own needles, a substring search each (some 45 over the text: most of the time a
    long tool output costs). The answer is the same either way.

    Never raises; reads at most :data:`MAX_SCAN` characters.
    """
    if not text:
        return None
    lowered = _scanned(str(text))
    held: Container[str] = needles_in(lowered) if needles_in is not None else lowered
    for group_needles, shapes in groups():
        if not any(needle in held for needle in group_needles):
            continue
        for rule, pattern, before, reach in shapes:
            for match in pattern.finditer(lowered) if before is not None else (pattern.search(lowered),):
                if match is None:
                    break
                if before is None:
                    return Finding(rule, match.group(0).strip()[:200])
                lead = before.search(lowered, max(0, match.start() - reach), match.start())
                if lead is not None:
                    return Finding(rule, lowered[lead.start():match.end()].strip()[:200])
    return None


def instruction_like(text: str, needles_in: Callable[[str], Container[str]] | None = None) -> bool:
    """Whether ``text`` holds instruction-like text (:func:`find_instruction`)."""
    return find_instruction(text, needles_in) is not None


def pieces(text: str) -> list[str]:
    """``text`` cut where a reader would: lines, ``"; "`` items, sentences (the separators dropped)."""
    return [piece for piece in _PIECES.split(text) if piece.strip()]


def withhold(text: str) -> tuple[str, list[str]]:
    """``text`` without its instruction-like pieces (each replaced by :data:`WITHHELD`), and those pieces.

    For the fields that must never carry an order (a title, "Learned", "Next steps"): what
    is withheld is kept elsewhere by the caller, quoted (:func:`quoted`). A text whose
    instruction-like passage spans pieces is withheld whole. Whatever the input, the text
    returned is not instruction-like.
    """
    if find_instruction(text) is None:
        return text, []
    if len(text) > MAX_SCAN:  # no title is that long: withheld whole, rather than read piece by piece
        return WITHHELD, [text]
    kept: list[str] = []
    withheld: list[str] = []
    for piece in pieces(text):
        if find_instruction(piece) is None:
            kept.append(piece)
            continue
        withheld.append(piece.strip())
        lead = _clean_lead(piece)
        if lead:
            kept.append(f"{lead}: {WITHHELD}")
        elif not kept or kept[-1] != WITHHELD:
            kept.append(WITHHELD)
    joiner = "; " if ";" in text else " "
    result = joiner.join(piece.strip() for piece in kept)
    if find_instruction(result) is not None:  # spread over pieces, or made by joining them
        return WITHHELD, [text.strip()]
    return result, withheld


def _clean_lead(piece: str) -> str:
    """The longest start of ``piece`` that ends before a ``": "`` and is not instruction-like ("" if none):
    what a line such as ``Tests still fail: error: <planted text>`` still says."""
    parts = piece.strip().split(": ")
    for end in range(len(parts) - 1, 0, -1):
        if _ROLE_LABEL.match(parts[end - 1]):  # the label of what is withheld goes with it
            continue
        lead = ": ".join(parts[:end])
        if find_instruction(lead) is None:
            return lead
    return ""


def quoted(text: str, source: str = "tool output") -> str:
    """``text`` as a quotation of ``source``, not as something said to the reader: labelled, on one
    line, between quotation marks it cannot close (its own are made plain)."""
    inner = " ".join(text.replace("“", '"').replace("”", '"').split())
    return f"{_QUOTED}{source}, not an instruction) “{inner}”"


def quote_pieces(text: str, source: str = "tool output") -> tuple[str, bool]:
    """``text`` with each instruction-like piece made :func:`quoted`; and whether any was.

    For the fields that keep what was found (a narrative, a fact, notes). A piece already
    quoted is left as it is, so quoting twice changes nothing.
    """
    if find_instruction(text) is None:
        return text, False
    if len(text) > MAX_SCAN:  # quoted whole, rather than read line by line
        return (text, True) if text.startswith(_QUOTED) else (quoted(text, source), True)
    parts = []
    changed = False
    for piece in re.split(r"(\n+)", text):  # lines keep their breaks
        if piece.strip() and not piece.startswith(_QUOTED) and find_instruction(piece) is not None:
            piece, changed = quoted(piece, source), True
        parts.append(piece)
    if not changed and not text.startswith(_QUOTED) and not any(
            part.startswith(_QUOTED) for part in parts):  # a passage spread over lines
        return quoted(text, source), True
    return "".join(parts), True


# -- the fields a memory is read by ----------------------------------------------------------

# A summary's fields a later agent reads as conclusions and orders: never to hold instruction-like text.
PROTECTED_SUMMARY_FIELDS = ("learned", "next_steps")
_MOST_FACTS = 24
_FACT_CHARS = 500


class GuardedObservation(NamedTuple):
    """An observation's text fields once guarded (:func:`guard_observation`), and whether it is flagged."""

    title: str
    subtitle: str
    facts: tuple[str, ...]
    narrative: str
    concepts: tuple[str, ...]
    flagged: bool


def guard_observation(*, title: str, subtitle: str, facts: tuple[str, ...] | list[str], narrative: str,
                      concepts: tuple[str, ...] | list[str], source: str,
                      fallback_title: str | Callable[[], str], tainted: bool = False) -> GuardedObservation:
    """An observation's fields with no instruction-like text in its title or subtitle, and such text
    elsewhere quoted (:func:`quoted`, as from ``source``).

    What is withheld from the title or the subtitle is kept as a quoted fact: nothing is lost, and
    nothing is promoted. A title withheld is replaced by ``fallback_title`` (called only then, when a
    callable; when it is clean itself), else by what is left of it. A concept that reads as instructions is dropped (a label, not a
    record). ``tainted``: what it was made from held instruction-like text (the tool's output): it is
    flagged whatever its fields hold.
    """
    if find_instruction("\n".join((title, subtitle, narrative, *facts, *concepts))) is None:  # the usual case
        return GuardedObservation(title, subtitle, tuple(facts), narrative, tuple(concepts), tainted)
    flagged = tainted
    kept_title, from_title = withhold(title)
    kept_subtitle, from_subtitle = withhold(subtitle)
    if from_title:
        fallback = fallback_title() if callable(fallback_title) else fallback_title
        kept_title = fallback if fallback and not instruction_like(fallback) else kept_title
    if kept_subtitle == WITHHELD:
        kept_subtitle = ""
    guarded_facts = []
    for fact in facts:
        fact, quoted_one = quote_pieces(fact, source)
        guarded_facts.append(fact)
        flagged = flagged or quoted_one
    guarded_facts += [quoted(piece, source)[:_FACT_CHARS] for piece in (*from_title, *from_subtitle)]
    kept_narrative, quoted_narrative = quote_pieces(narrative, source)
    kept_concepts = tuple(concept for concept in concepts if not instruction_like(concept))
    flagged = (flagged or bool(from_title) or bool(from_subtitle) or quoted_narrative
               or len(kept_concepts) != len(concepts))
    return GuardedObservation(kept_title, kept_subtitle, tuple(guarded_facts[:_MOST_FACTS]), kept_narrative,
                              kept_concepts, flagged)


def guard_summary(fields: dict[str, str], *, source: str, tainted: bool = False) -> tuple[dict[str, str], bool]:
    """A summary's fields with no instruction-like text in :data:`PROTECTED_SUMMARY_FIELDS` (what is
    withheld there is quoted in ``notes``) and such text elsewhere quoted; and whether it is flagged
    (``tainted``: what it was made from held some)."""
    if find_instruction("\n".join(fields.values())) is None:  # the usual case: one reading
        return dict(fields), tainted
    guarded = dict(fields)
    flagged = tainted
    moved: list[str] = []
    for name in PROTECTED_SUMMARY_FIELDS:
        if name in guarded:
            guarded[name], withheld = withhold(guarded[name])
            if guarded[name] == WITHHELD:
                guarded[name] = ""
            moved += withheld
    for name, value in guarded.items():
        if name not in PROTECTED_SUMMARY_FIELDS:
            guarded[name], quoted_one = quote_pieces(value, source)
            flagged = flagged or quoted_one
    if moved:
        notes = guarded.get("notes", "")
        guarded["notes"] = "\n".join(part for part in (notes, *(quoted(piece, source) for piece in moved)) if part)
    return guarded, flagged or bool(moved)
