"""JSON at the HTTP edge: typed records in, camelCase JSON out.

Inside the worker every record is a msgspec Struct with snake_case fields (rows,
statistics, replies). This module is the one place where their names become the
API's camelCase (``session_db_id`` -> ``sessionDbId``), so nothing else needs to know
how the API spells things.

Rules: the fields of a Struct are renamed, recursively through Structs, lists and
tuples (a Struct declared ``omit_defaults`` leaves out fields at their default);
enums are written as their values; the keys of a dict are data (a tool's own JSON,
counts by kind) and are written as they are, while its values are walked like the rest.
"""

from __future__ import annotations

import enum
from functools import cache
from typing import Any

import msgspec

_encoder = msgspec.json.Encoder()


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


_NO_DEFAULT = object()


@cache
def _api_names(kind: type[msgspec.Struct]) -> tuple[tuple[str, str, Any], ...]:
    """(field, API name, default to leave out or a sentinel) for each field of ``kind``."""
    omit = kind.__struct_config__.omit_defaults
    return tuple((field.name, camel(field.name), field.default if omit else _NO_DEFAULT)
                 for field in msgspec.structs.fields(kind))


def to_api(value: Any) -> Any:
    """``value`` as JSON-ready builtins, Struct fields in camelCase."""
    if isinstance(value, msgspec.Struct):
        out = {}
        for field, api, default in _api_names(type(value)):
            item = getattr(value, field)
            if item is not default and item != default:
                out[api] = to_api(item)
        return out
    if isinstance(value, (list, tuple)):
        return [to_api(item) for item in value]
    if isinstance(value, dict):
        return {key: to_api(item) for key, item in value.items()}
    if isinstance(value, enum.Enum):
        return value.value
    return value


def encode(value: Any) -> bytes:
    return _encoder.encode(to_api(value))
