"""Size limits for stored text, keeping the head and the tail. Standard library only.

Shared by the hooks (which must keep their request under the worker's body limit)
and the worker (which bounds what it journals).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs a hook ~4 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

ELISION = "\n…[sessionmem: {n} characters elided]…\n"


def head_tail(text: str, cap: int) -> str:
    """``text`` if short enough, else its head and tail around an elision marker."""
    if len(text) <= cap:
        return text
    keep = max(cap - 64, 2) // 2
    return text[:keep] + ELISION.format(n=len(text) - 2 * keep) + text[-keep:]


def shorten_strings(value: Any, limit: int) -> Any:
    """Apply :func:`head_tail` to every string inside JSON-like data, keeping its shape."""
    if isinstance(value, str):
        return head_tail(value, limit)
    if isinstance(value, dict):
        return {k: shorten_strings(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [shorten_strings(v, limit) for v in value]
    return value
