"""Text helpers of the offline compressor: clipping, code spans, paths, a tool response's text, and
finding in a long output the line that says what went wrong.

Pure functions over strings, with no knowledge of tools or observations (the rules that use them:
:mod:`.offline_rules`; the summary: :mod:`.offline`). Each scan is bounded: a regular expression reads a
window of a long output (:func:`window`) and runs only after a substring test finds something to look
for (:func:`mentions`).
"""

from __future__ import annotations

import re
from typing import Any

from sessionmem.protocol.limits import printable_line

_WINDOW = 3000  # characters of an output's start, and of its end, read for errors and test results
# The line of an output that says what went wrong (a compiler's "error:", a refusal, a missing file).
# Both are matched against the lower-cased text: without re.IGNORECASE the scan of a long output
# with no match is ten times faster (about 0.3 ms instead of 2.5 ms for 10 kB).
_ERROR_LINE = re.compile(r"\b(?:error|fatal|exception|failed|failure|denied|not found|no such file|cannot|can't"
                         r"|segmentation fault|undefined|refused|timed out|invalid)\b|^[ \t]*e\s", re.M)
_ERROR_WORD = re.compile(r"\b(?:error|fatal)\b|^[ \t]*!\s", re.M)
# What each must find somewhere before it is worth running (a substring test runs at C speed).
_ERROR_WORD_NEEDLES = ("error", "fatal", "!")
_ERROR_LINE_NEEDLES = ("fa", "exception", "denied", "not found", "no such file", "can", "segmentation", "undefined",
                       "refused", "timed out", "invalid", "e ", "e\t")
# A program that crashed (C's allocator, a signal, a Rust panic, a sanitizer), whatever its exit status
# says: a test binary piped through grep exits 0 after aborting on "malloc(): invalid size".
_CRASH = re.compile(r"segmentation fault|core dumped|\bmalloc\(\)|double free|free\(\): invalid|stack smashing"
                    r"|\bsigsegv\b|\bsigabrt\b|panicked at|addresssanitizer|^aborted\b", re.M)
_CRASH_NEEDLES = ("segmentation", "core dumped", "malloc()", "free", "stack smashing", "sigsegv", "sigabrt",
                  "panicked", "sanitizer", "aborted")


def clip(text: str, limit: int) -> str:
    """``text`` on one line with its white space folded, cut to ``limit`` characters (an ellipsis last)."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def code_span(text: str) -> str:
    """``text`` as one markdown code span: fenced by one backtick more than its longest run of them,
    padded where it starts or ends with one (CommonMark's rule), so a stored backtick cannot end the
    span and let the rest read as markdown."""
    if "`" not in text:
        return f"`{text}`"
    fence = "`" * (max(len(run) for run in re.findall("`+", text)) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def first_line(text: str) -> str:
    """The first line of ``text`` that is not blank, stripped; "" for none."""
    for line in str(text).splitlines():
        if line.strip():
            return line.strip()
    return ""


def last_meaningful_line(text: str) -> str:
    """The last line of ``text`` that is not blank, stripped; "" for none."""
    for line in reversed(str(text or "").splitlines()):
        if line.strip():
            return line.strip()
    return ""


def last_match(pattern: re.Pattern[str], text: str) -> str:
    """The last line of ``text`` that ``pattern`` finds something in, stripped of ``=`` rules; "" for none."""
    for line in reversed(str(text or "").splitlines()):
        if pattern.search(line.strip()):
            return line.strip().strip("=").strip()
    return ""


def line_count(text: str) -> int:
    return len(text.splitlines()) if text else 0


def article(word: str) -> str:
    """``a`` or ``an`` before ``word``."""
    return "an" if word[:1].lower() in "aeiou" else "a"


def edit_fact(old: str, new: str) -> str:
    """What an edit changed, by its first differing line: ``replaced `a` with `b```, ``added `b```,
    ``removed `a```; "" for no text at all.

    Lines the two sides share at the start and at the end (indentation aside) are skipped,
    so an edit whose ``old_string`` is context kept around one new line says what is new,
    not that a line was replaced by itself.
    """
    before = [line.strip() for line in old.splitlines()]
    after = [line.strip() for line in new.splitlines()]
    start = 0
    while start < min(len(before), len(after)) and before[start] == after[start]:
        start += 1
    end = 0
    while end < min(len(before), len(after)) - start and before[-1 - end] == after[-1 - end]:
        end += 1
    removed = first_line("\n".join(before[start:len(before) - end]))
    added = first_line("\n".join(after[start:len(after) - end]))
    if removed and added:
        return f"replaced {code_span(removed)} with {code_span(added)}"
    if added:
        return f"added {code_span(added)}"
    if removed:
        return f"removed {code_span(removed)}"
    return "changed whitespace only" if old != new else ""


def relative(path: str, cwd: str) -> str:
    """``path`` as the text names it: under ``cwd``, relative to it; on one line (a break in a
    name must not pass for a line of the narrative)."""
    if cwd and path.startswith(cwd.rstrip("/") + "/"):
        path = path[len(cwd.rstrip("/")) + 1 :]
    return printable_line(path)


def text_of(value: Any) -> str:
    """The human-readable text inside a tool response of any shape."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(text_of(item) for item in value)
    if isinstance(value, dict):
        for key in ("stdout", "content", "text", "output", "result", "message"):
            if key in value and value[key]:
                return text_of(value[key])
        if isinstance(value.get("file"), dict):
            return text_of(value["file"].get("content"))
    return ""


def window(text: str) -> str:
    """The start and the end of a long output: where a compiler's first error and a test runner's summary
    are. Regular expressions scan a few kilobytes, not the whole capped response (Python's re scans a
    pattern with no literal prefix at about 0.1 ms a kilobyte)."""
    return text if len(text) <= 2 * _WINDOW else f"{text[:_WINDOW]}\n{text[-_WINDOW:]}"


def mentions(text: str, *needles: str) -> bool:
    """Whether ``text`` holds one of ``needles`` (lower case), at C speed: the regular expression after it is
    skipped for the usual output that has nothing to find."""
    lowered = text.lower()
    return any(needle in lowered for needle in needles)


def crashed(output: str) -> bool:
    """Whether ``output`` shows a program that crashed, whatever its exit status says."""
    lowered = output.lower()  # once, for the substring test and the pattern alike
    return any(needle in lowered for needle in _CRASH_NEEDLES) and bool(_CRASH.search(lowered))


def error_line(text: str) -> str:
    """The line of a failed tool's output that says what went wrong: a Python traceback's last line, else
    the first line naming an error (a compiler's first error, not make's last progress line), else the
    first naming a failure of another kind, else the last line. One regular-expression scan per kind."""
    text = _strip_error_prefix(str(text or ""))
    if "Traceback (most recent call last)" in text:
        return _strip_error_prefix(last_meaningful_line(text))
    lowered = text.lower()
    if len(lowered) != len(text):  # a character whose lower case is longer: positions would not match
        lowered = "".join(ch if len(ch.lower()) != 1 else ch.lower() for ch in text)
    for pattern, needles in ((_ERROR_WORD, _ERROR_WORD_NEEDLES), (_ERROR_LINE, _ERROR_LINE_NEEDLES)):
        if not any(needle in lowered for needle in needles):
            continue
        for match in pattern.finditer(lowered):
            start = text.rfind("\n", 0, match.start()) + 1
            end = text.find("\n", match.end())
            line = _strip_error_prefix(text[start:end if end >= 0 else len(text)].strip())
            if line.lower() not in ("error", "failed") and not line.startswith("hint:"):
                return line
    last = _strip_error_prefix(last_meaningful_line(text))
    return "" if last.lower() in ("error", "failed") else last  # Claude Code 1.0's bare "Error" says nothing


def _strip_error_prefix(line: str) -> str:
    """Without the ``Error: `` Claude Code puts before a failed command's output (``Error: Error`` is none)."""
    while line.startswith("Error: ") and len(line) > len("Error: "):
        line = line[len("Error: "):]
    return line
