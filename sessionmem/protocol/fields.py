"""Making one field safe to send and to store: private spans removed, then bounded in size.

Hooks apply this before a request leaves the hook process, the worker applies it
again to whatever reaches it (any client can post), with the same rules and the same
caps, so the second pass over a hook's request changes nothing.
"""

from __future__ import annotations

from sessionmem.protocol import fastjson
from sessionmem.protocol.limits import bound_value, head_tail
from sessionmem.protocol.privacy import contains_tag, strip_private, strip_private_deep

TYPE_CHECKING = False  # typing costs a hook ~4 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


def encode_utf8(value: Any) -> bytes:
    """The compact JSON encoding clients send (the worker passes msgspec's, which is the same size)."""
    return fastjson.dumps(value).encode("utf-8")


def clean_text(text: str, cap: int) -> str:
    """``text`` without private spans, cut to head and tail beyond ``cap`` characters."""
    return head_tail(strip_private(text), cap)


def clean_value(value: Any, cap: int, encode: Callable[[Any], bytes] = encode_utf8) -> Any:
    """A tool input or response without private spans, its JSON at most about ``cap`` bytes.

    The common case -- nothing private, small enough -- costs one C-level encode: both
    encoders write ``<`` unescaped, so the encoding holds a tag exactly when some
    string of the value does, and only then is the value walked.
    """
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return clean_text(value, cap)
    encoded = encode(value)
    if contains_tag(encoded):
        value = strip_private_deep(value)
        encoded = encode(value)
    return bound_value(value, cap, encode, encoded)
