"""Text as PostgreSQL can hold it: without NUL characters (its ``text`` cannot hold one; SQLite's can).

Every text :class:`~sessionmem.storage.pg.store.TeamStore` sends -- a pushed row, a query,
a filter -- goes through here, so a NUL becomes U+FFFD on the way in whichever way it came,
and a filter names a row the way the row was stored.
"""

from __future__ import annotations

from typing import TypeVar

import msgspec

NUL, REPLACEMENT = "\x00", "\ufffd"

S = TypeVar("S", bound=msgspec.Struct)


def text_without_nul(text: str) -> str:
    return text.replace(NUL, REPLACEMENT) if NUL in text else text


def without_nul(struct: S) -> S:
    """``struct`` with every NUL of its texts (strings, and lists or tuples of strings) replaced; the same
    struct when it has none, as nearly all have."""
    changes: dict[str, object] = {}
    for name in struct.__struct_fields__:
        value = getattr(struct, name)
        if isinstance(value, str) and NUL in value:
            changes[name] = value.replace(NUL, REPLACEMENT)
        elif isinstance(value, (list, tuple)) and any(isinstance(item, str) and NUL in item for item in value):
            changes[name] = type(value)(text_without_nul(item) if isinstance(item, str) else item for item in value)
    return msgspec.structs.replace(struct, **changes) if changes else struct
