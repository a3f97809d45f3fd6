"""Records crossing a boundary between machines: no private span and no secret, whatever this machine's settings.

The ingest edge removes ``<private>`` spans always, and secrets as the ``redact_secrets``
setting says. Records that come from, or go to, another machine pass through here as
well, with the default rules of :mod:`sessionmem.redaction` whatever that setting:

- pushed to a team database (:meth:`~sessionmem.storage.pg.store.TeamStore.push`, the one
  way rows reach it): a machine with ``redact_secrets=false`` keeps its secrets on its own
  disk, never in the team's;
- imported, from a file (``sessionmem import``, ``POST /api/import``) or pulled from a team
  database (:meth:`~sessionmem.storage.sqlite.store.SQLiteStore.import_records` and
  ``team_import``, the two ways into :func:`~sessionmem.storage.sqlite.export_import.import_records`):
  whatever wrote them (another machine, an older version, a person, a row written
  straight into the team database), no private span and no secret is stored from them.

Each text of a record (lists of texts too) is cleaned, the ids that link records to each
other too (a session's, a tool use's): cleaning gives the same text for the same text, so a
file imported twice still finds its records, and real ids have nothing to clean
(``tests/test_transfer.py`` holds agents' ids of every shape unchanged). Only the values of a fixed
set (:data:`KINDS`) are left as they are. An id cleaned down to nothing becomes
:data:`EMPTIED`, which its type accepts. A text is made safe in the order of the ingest edge:
private spans out (:func:`~sessionmem.protocol.privacy.strip_private`, encodings and all),
then secrets.

Resource handling:
    Redaction costs ~10-100 µs a text, more for long ones: :func:`cleaned_off_thread` runs it
    on a thread, one batch at a time per Trio run (a :class:`trio.CapacityLimiter` of 1), never
    on the Trio thread and never inside the writer's transaction.

Error handling:
    Never raises on input (redaction and the strip do not).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import msgspec
import trio

from sessionmem.protocol.privacy import strip_private
from sessionmem.redaction import Redactor
from sessionmem.storage.export_records import Record
from sessionmem.storage.team_records import SharedRow

# Fields whose values are one of a fixed set (the decoder refused any other): kept as they are.
KINDS = frozenset({"status", "type", "agent"})
# Fields a record must not hold empty: what is left when cleaning took all of one.
NOT_EMPTY = frozenset({"claude_session_id", "tool_name"})
EMPTIED = "[REDACTED:private]"

_DEFAULT_RULES = Redactor()  # enabled, no custom patterns: the same on every machine
_LIMITER: trio.lowlevel.RunVar[trio.CapacityLimiter] = trio.lowlevel.RunVar("boundary_limiter")

R = TypeVar("R", bound=msgspec.Struct)
T = TypeVar("T")


def clean_text(text: str) -> str:
    """``text`` without private spans, then without secrets (the default rules)."""
    return _DEFAULT_RULES.text(strip_private(text)) if text else text


def record_texts_with(record: R, clean: Callable[[str], str]) -> R:
    """``record`` with ``clean`` applied to each of its texts (lists of texts too), :data:`KINDS` aside;
    the same record when nothing changed."""
    changes: dict[str, Any] = {}
    for name in record.__struct_fields__:
        value = getattr(record, name)
        if name in KINDS or not value:
            continue
        if isinstance(value, str):
            new: Any = clean(value) or (EMPTIED if name in NOT_EMPTY else "")
        elif isinstance(value, list):
            new = [clean(item) if isinstance(item, str) else item for item in value]
        else:
            continue
        if new != value:
            changes[name] = new
    return msgspec.structs.replace(record, **changes) if changes else record


def clean_records(records: Sequence[Record]) -> list[Record]:
    """``records`` as they may cross a boundary (see the module docstring)."""
    return [record_texts_with(record, clean_text) for record in records]


def clean_rows(rows: Sequence[SharedRow]) -> list[SharedRow]:
    """``rows`` (records with their origin) as they may cross a boundary: their records cleaned."""
    out = []
    for row in rows:
        record = record_texts_with(row.record, clean_text)
        out.append(row if record is row.record else msgspec.structs.replace(row, record=record))
    return out


async def cleaned_off_thread(clean: Callable[[Sequence[T]], list[T]], items: Sequence[T]) -> list[T]:
    """``clean(items)`` on a thread (see "Resource handling" in the module docstring)."""
    if not items:
        return list(items)
    try:
        limiter = _LIMITER.get()
    except LookupError:
        limiter = trio.CapacityLimiter(1)
        _LIMITER.set(limiter)
    return await trio.to_thread.run_sync(clean, items, limiter=limiter)
