"""Making one field safe to send and to store: private spans removed, then bounded in size.

Hooks apply this before a request leaves the hook process, the worker applies it
again to whatever reaches it (any client can post), with the same rules and the same
caps, so the second pass over a hook's request changes nothing. The worker adds a
``redact`` step (secrets; it needs a regular-expression engine, which hooks cannot
afford), run after the privacy strip and before the cut, so that a cut never leaves
half a secret behind.

A tool value nested deeper than :data:`~.limits.MAX_DEPTH` is kept as its JSON text:
nothing downstream has to walk an adversarially deep structure, and nothing is lost.
"""

from __future__ import annotations

from sessionmem.protocol import fastjson
from sessionmem.protocol.limits import MAX_DEPTH, bound_value, deeper_than, elision, head_tail, kept_each_end
from sessionmem.protocol.privacy import contains_tag, strip_private, strip_private_deep

TYPE_CHECKING = False  # typing costs a hook ~4 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


# Beyond each cut, what is redacted with the kept text (longer than any secret a pattern finds whole).
REDACT_MARGIN = 8192  # an 8192-bit RSA key in PEM is ~6.4 KB

def encode_utf8(value: Any) -> bytes:
    """The compact JSON encoding clients send (the worker passes msgspec's, which is the same size)."""
    return fastjson.dumps(value).encode("utf-8")


def clean_text(text: str, cap: int, redact: Callable[[str], str] | None = None) -> str:
    """``text`` without private spans (and, given ``redact``, secrets), cut to head and tail beyond ``cap`` characters.

    Only what is kept is redacted: each end with :data:`REDACT_MARGIN` characters beyond
    its cut, then the margin dropped. A secret across a cut is whole in the margin and
    redacted before the cut; a secret cut by the window's own edge lies in the margin and
    is dropped with it. So a body of megabytes costs the worker's single thread the
    redaction of ~``cap`` characters, not of megabytes.
    """
    text = strip_private(text)
    if redact is None:
        return head_tail(text, cap)
    if len(text) <= cap + 2 * REDACT_MARGIN:
        return head_tail(redact(text), cap)
    keep = kept_each_end(cap)
    head = redact(text[: keep + REDACT_MARGIN])
    tail = redact(text[-(keep + REDACT_MARGIN):])
    return head[: len(head) - REDACT_MARGIN] + elision(len(text) - 2 * keep) + tail[REDACT_MARGIN:]


def clean_value(value: Any, cap: int, encode: Callable[[Any], bytes] = encode_utf8, *,
                redact: Callable[[Any, bytes], Any] | None = None,
                redact_text: Callable[[str], str] | None = None) -> Any:
    """A tool input or response without private spans, its JSON at most about ``cap`` bytes.

    ``redact(value, encoded)`` and ``redact_text(text)``, if given, remove secrets from
    a structured value (whose JSON is ``encoded``) and from a string. The common case
    -- nothing private, small enough -- costs one C-level encode: both encoders write
    ``<`` unescaped, so the encoding holds a tag exactly when some string of the value
    does, and only then is the value walked.
    """
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return clean_text(value, cap, redact_text)
    encoded = encode(value)
    # Fewer brackets than levels allowed: it cannot nest too deep (a C-speed count saves the walk).
    if encoded.count(b"[") + encoded.count(b"{") > MAX_DEPTH and deeper_than(value, MAX_DEPTH):
        return clean_text(encoded.decode("utf-8", "replace"), cap, redact_text)
    if contains_tag(encoded):
        value = strip_private_deep(value)
        encoded = encode(value)
    if redact is not None:
        redacted = redact(value, encoded)
        if redacted is not value:
            value, encoded = redacted, encode(redacted)
    return bound_value(value, cap, encode, encoded)
