"""Rows of the SQLite store read as typed values: each column as the type the schema gives it,
and the one row a statement must return.

apsw hands a column back as any SQLite value (``int | float | bytes | str | None``) and
``fetchone()`` as optional. The readers of every job turn each row into a typed record
through these, so the record holds what its fields say. SQLite's values are what
the schema declares them (``INTEGER``, ``REAL`` with its affinity, ``TEXT``, ``BLOB``,
``NOT NULL`` where a field cannot be ``None``), so a conversion is a type test, nothing more.

Error handling:
    A value of another type, or no row where a statement always returns one, raises
    :class:`UnexpectedRow` naming what was expected and what came: the database and this
    code disagree (a query and its reader out of step, a file another program wrote).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import apsw
import msgspec

if TYPE_CHECKING:
    from apsw import Bindings, SQLiteValue, SQLiteValues


T = TypeVar("T")


def to_json(value: Any) -> str:
    """``value`` as JSON text: how a list of ids or keys is bound (read back with ``json_each``)."""
    return msgspec.json.encode(value).decode()


def placeholders(width: int, rows: int = 1) -> str:
    """``VALUES`` placeholders for ``rows`` rows of ``width`` values: one statement for many rows."""
    return ", ".join(["(" + ", ".join(["?"] * width) + ")"] * rows)


class UnexpectedRow(Exception):
    """A statement returned no row where it always returns one, or a column holds a value of another
    type than the schema gives it."""


def _unexpected(expected: str, value: SQLiteValue) -> UnexpectedRow:
    return UnexpectedRow(f"expected {expected} in a row of the store, got {type(value).__name__} {value!r:.80}")


def one_row(connection: apsw.Connection, sql: str, bindings: Bindings | None = None) -> SQLiteValues:
    """The first row of ``sql``: for a statement that always returns one (an aggregate, a pragma)."""
    row: SQLiteValues | None = connection.execute(sql, bindings).fetchone()
    if row is None:
        raise UnexpectedRow(f"no row from {sql[:200]!r}")
    return row


def optional_row(connection: apsw.Connection, sql: str, bindings: Bindings | None = None) -> SQLiteValues | None:
    """The first row of ``sql``, ``None`` when it returns none."""
    row: SQLiteValues | None = connection.execute(sql, bindings).fetchone()
    return row


def all_rows(connection: apsw.Connection, sql: str, bindings: Bindings | None = None) -> list[SQLiteValues]:
    """Every row of ``sql``."""
    return connection.execute(sql, bindings).fetchall()


def integer(value: SQLiteValue) -> int:
    if type(value) is int:
        return value
    raise _unexpected("an integer", value)



def flag(value: SQLiteValue) -> bool:
    """A boolean, which SQLite keeps as the integer 0 or 1."""
    if type(value) is int and 0 <= value <= 1:
        return value == 1
    raise _unexpected("0 or 1", value)


def real(value: SQLiteValue) -> float:
    """A number: a ``REAL`` column keeps floats, but an expression on one (``coalesce(..., 0)``,
    ``max()`` of nothing but integers) can give an integer."""
    if type(value) is float:
        return value
    if type(value) is int:
        return float(value)
    raise _unexpected("a number", value)


def optional_integer(value: SQLiteValue) -> int | None:
    return None if value is None else integer(value)


def optional_real(value: SQLiteValue) -> float | None:
    return None if value is None else real(value)


def text(value: SQLiteValue) -> str:
    if type(value) is str:
        return value
    raise _unexpected("a text", value)


def optional_text(value: SQLiteValue) -> str | None:
    return None if value is None else text(value)


def blob(value: SQLiteValue) -> bytes:
    if type(value) is bytes:
        return value
    raise _unexpected("a blob", value)


_text_list = msgspec.json.Decoder(list[str])


def text_list(value: SQLiteValue) -> list[str]:
    """A list of texts, which the store keeps as a JSON array (``facts``, ``concepts``, file lists)."""
    return _text_list.decode(text(value))


def one_of(value: SQLiteValue, allowed: tuple[T, ...]) -> T:
    """One of the texts ``allowed`` (a ``Literal``'s values: a status, an observation's type)."""
    for candidate in allowed:
        if candidate == value:
            return candidate
    raise _unexpected(f"one of {allowed}", value)
