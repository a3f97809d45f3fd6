"""Size limits of what clients send and the worker stores, and how text is cut to them.

One set of numbers for both sides of the process boundary: a hook cuts a field to
the same cap the worker stores it at, so the worker's own pass over a hook's request
changes nothing, and a request built within these caps is always far below the body
limit. The worker's settings (``max_body_bytes``, ``tool_response_cap``) default to
these values; clients read the same settings (:mod:`.config`).

Long text keeps its head and its tail around an elision marker: the start of a
command's output says what ran, the end says how it finished.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs a hook ~4 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

MAX_BODY_BYTES = 5 * 1024 * 1024  # a larger request body is refused with 413
FIELD_CAP = 64 * 1024  # bytes of one tool input, tool response, error or message, as JSON
MAX_SESSION_ID = 256  # characters of a Claude session id
MAX_TOOL_NAME = 512
MAX_IDENTIFIER = 512  # characters of a tool use id, an agent's id or type, an idempotency key
MAX_PATH = 4096  # characters of a working directory or a project name
MAX_REASON = 200  # characters of a SessionEnd reason
MAX_DEPTH = 64  # nesting of a tool value kept as structure; deeper values are kept as their JSON text

# -- the read API (``/api/search``, ``/api/timeline``, ``/api/observations/batch``) -------
# The worker answers a 400 beyond these; the MCP server's tool schemas state the same numbers.
MAX_QUERY_CHARS = 4000  # characters of a search query
MAX_SEARCH_RESULTS = 100  # results of one search page (``limit``)
MAX_SEARCH_OFFSET = 10_000
MAX_TIMELINE_SIDE = 50  # entries before, and after, a timeline's anchor
MAX_BATCH_IDS = 100  # observations fetched by id at once
MAX_PAGE = 500  # rows of one page of a list route (``limit``: sessions, projects, observations)

# -- what a hook hands Claude (``additionalContext``) ------------------------------------
# Claude Code writes a hook's output over 10,000 characters to a file and shows the model a
# ~2 KB preview: the SessionStart context and every recall stay below this, with room left
# for the JSON around them and the one-line system message.
HOOK_CONTEXT_MAX_CHARS = 9000

ELISION = "\n…[sessionmem: {n} characters elided]…\n"


def head_tail(text: str, cap: int) -> str:
    """``text`` if short enough, else its head and tail around an elision marker."""
    if len(text) <= cap:
        return text
    keep = kept_each_end(cap)
    return text[:keep] + elision(len(text) - 2 * keep) + text[-keep:]


def kept_each_end(cap: int) -> int:
    """Characters :func:`head_tail` keeps of each end of a text longer than ``cap`` (room left for the marker)."""
    return max(cap - 64, 2) // 2


def elision(dropped: int) -> str:
    """The marker where :func:`head_tail` took ``dropped`` characters out."""
    return ELISION.format(n=dropped)


def map_strings(value: Any, change: Callable[[str], str], *, keys: bool = False) -> Any:
    """JSON-like ``value`` with ``change`` applied to every string in it (to the keys too, given ``keys``),
    keeping its shape."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        return {(change(str(k)) if keys else k): map_strings(v, change, keys=keys) for k, v in value.items()}
    if isinstance(value, list):
        return [map_strings(v, change, keys=keys) for v in value]
    return value


def shorten_strings(value: Any, limit: int) -> Any:
    """Apply :func:`head_tail` to every string inside JSON-like data, keeping its shape."""
    return map_strings(value, lambda text: head_tail(text, limit))


def deeper_than(value: Any, limit: int) -> bool:
    """Whether JSON-like ``value`` nests lists and dicts more than ``limit`` levels (no recursion)."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        pending.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def bound_value(value: Any, cap: int, encode: Callable[[Any], bytes], encoded: bytes | None = None) -> Any:
    """A JSON-like ``value`` whose encoding (by ``encode``) is at most about ``cap`` bytes.

    A string is cut to ``cap`` characters. A structured value within the cap is
    returned as it is. Otherwise its long strings are cut
    to head and tail (``cap / 8`` each, at least 256 characters), keeping the shape
    (a tool response's ``stdout`` stays ``stdout``); if that is still too long, the
    whole value becomes one string, the head and tail of its JSON. ``encoded`` is
    ``encode(value)`` when the caller has it already.
    """
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return head_tail(value, cap)
    if encoded is None:
        encoded = encode(value)
    if len(encoded) <= cap:
        return value
    shortened = shorten_strings(value, max(cap // 8, 256))
    if len(encode(shortened)) <= cap:
        return shortened
    text = encoded.decode("utf-8", "replace")
    flat = head_tail(text, cap)
    escaping = len(encode(flat)) - cap  # the quotes and backslashes of JSON inside a JSON string
    return head_tail(text, max(cap - escaping, 256)) if escaping > 0 else flat


def printable_line(text: str) -> str:
    """``text`` on one line of printable characters: controls (escape sequences, line breaks) and
    invisible format characters (bidirectional overrides, zero-width) become spaces, runs of spaces
    one. For a name printed in a terminal or a message (a project, a session id): no ``re``, so a
    hook can afford it."""
    line = " ".join(text.split())
    if line.isprintable():  # the usual case, at C speed
        return line
    return " ".join("".join(ch if ch.isprintable() else " " for ch in line).split())
