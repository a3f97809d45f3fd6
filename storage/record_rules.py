"""What a memory record from outside this machine may hold: the caps and the time clamp of every import.

One set of rules for every door a record comes in by: ``sessionmem import`` (an export
file) and the team pull (another machine's rows) decode into the same record types
(:mod:`sessionmem.storage.export_records`), whose fields are annotated with the types below,
and both store through :func:`~sessionmem.storage.sqlite.export_import.import_records`, which clamps
times with :func:`clamped_moment`. The team schema's CHECK constraints
(:mod:`sessionmem.storage.pg.schema`, version 3) state the same numbers.

- **Times** are finite, between 1970 and the year 3000 (``Moment``: NaN, infinities and
  ``1e300`` do not decode), and a time later than now (plus :data:`CLOCK_SKEW_S` for
  clocks a little ahead) is stored as now plus the skew: a row from the future is not
  trusted to sort first ("Last session") for years.
- **Texts** are capped in characters: a title or subtitle at :data:`MAX_TITLE_CHARS`; a
  prompt, a narrative, a summary's field at :data:`MAX_TEXT_CHARS` (the largest field
  ingest stores under the default body limit, ``tool_response_cap``'s ceiling); an item
  of a list (a fact, a concept, a path) at :data:`MAX_ITEM_CHARS`.
- **Lists** (facts, concepts, files read and modified) are lists of strings of at most
  :data:`MAX_ITEMS` items.

A record beyond a cap does not decode: an import answers 400 with the path at fault, a
pulled row is counted, logged and passed over. Nothing from outside is cut silently. What
leaves this machine (an export, a push) is :func:`fitted` to the same caps, so this machine's
own memory always imports again: a tool use on a path longer than a record allows is stored
as it was, and its record is cut to the caps (``…`` where it was cut) rather than refused by
every import.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, TypeVar

import msgspec

from sessionmem.protocol.limits import MAX_BODY_BYTES, MAX_IDENTIFIER, MAX_PATH

MOMENT_MAX = 32_503_680_000.0  # 3000-01-01T00:00:00Z
CLOCK_SKEW_S = 300.0  # how far ahead of this machine's clock a time may be before it is clamped
MAX_TITLE_CHARS = 1_000  # compressors write at most 200
MAX_TEXT_CHARS = MAX_BODY_BYTES // 4  # the largest field ingest stores with the default body limit
MAX_ITEM_CHARS = max(MAX_PATH, MAX_IDENTIFIER)  # a fact, a concept, a file path
MAX_ITEMS = 1_000  # of a list of facts, concepts or files

# Field types of the transfer records: each cap is one annotation, checked by msgspec as it decodes.
Moment = Annotated[float, msgspec.Meta(ge=0, le=MOMENT_MAX)]
TitleText = Annotated[str, msgspec.Meta(max_length=MAX_TITLE_CHARS)]
LongText = Annotated[str, msgspec.Meta(max_length=MAX_TEXT_CHARS)]
Item = Annotated[str, msgspec.Meta(max_length=MAX_ITEM_CHARS)]
Items = Annotated[list[Item], msgspec.Meta(max_length=MAX_ITEMS)]


TIME_FIELDS = ("created_at", "updated_at", "completed_at")  # the Moment fields of the transfer records

R = TypeVar("R", bound=msgspec.Struct)


def latest_moment(now: float) -> float:
    """The latest time a record may carry when stored at ``now``."""
    return now + CLOCK_SKEW_S


def clamped(record: R, now: float) -> R:
    """``record`` (decoded: its times are ``Moment`` s) with no time later than :func:`latest_moment`; the
    record itself when none is."""
    latest = latest_moment(now)
    later = {name: latest for name in TIME_FIELDS
             if isinstance(moment := getattr(record, name, None), float) and moment > latest}
    return msgspec.structs.replace(record, **later) if later else record


CUT = "…"


@functools.cache
def _caps(record_type: type[msgspec.Struct]) -> dict[str, tuple[int | None, int | None]]:
    """Each capped field of ``record_type``: (characters of the text, or of each item; items of a list)."""
    caps: dict[str, tuple[int | None, int | None]] = {}
    info = msgspec.inspect.type_info(record_type)
    if not isinstance(info, msgspec.inspect.StructType):
        raise TypeError(f"{record_type!r} is not a record type")
    for field in info.fields:
        kind = field.type
        if isinstance(kind, msgspec.inspect.UnionType):  # an optional text
            kind = next((member for member in kind.types if isinstance(member, msgspec.inspect.StrType)), kind)
        if isinstance(kind, msgspec.inspect.StrType) and kind.max_length is not None:
            caps[field.name] = (kind.max_length, None)
        elif isinstance(kind, msgspec.inspect.ListType) and isinstance(kind.item_type, msgspec.inspect.StrType):
            caps[field.name] = (kind.item_type.max_length, kind.max_length)
    return caps


def _cut(text: str, chars: int | None) -> str:
    return text if chars is None or len(text) <= chars else text[: chars - len(CUT)] + CUT


def fitted(record: R) -> R:
    """``record`` (one this machine built from its own rows) within the caps its type declares: each text
    and each item of a list cut to its length, each list to its items; the record itself when it fits."""
    changes: dict[str, Any] = {}
    for name, (chars, items) in _caps(type(record)).items():
        value = getattr(record, name)
        if isinstance(value, str):
            if chars is not None and len(value) > chars:
                changes[name] = _cut(value, chars)
        elif isinstance(value, list) and ((items is not None and len(value) > items)
                                          or (chars is not None and any(len(item) > chars for item in value))):
            changes[name] = [_cut(item, chars) for item in value[:items]]
    return msgspec.structs.replace(record, **changes) if changes else record
