"""A row's origin in SQL: how it is shown, and how a filter names it (``sessionmem.records.LOCAL_ORIGIN``).

Observations, summaries and prompts carry ``origin_machine`` and ``origin_user`` (schema
v7): both ``''`` for this machine's own rows, the other machine's names for a row another
machine wrote. Every read that shows a row selects :func:`label_sql` beside it (a column
of the row already read: no query more), and every read a filter narrows adds
:func:`origin_condition`.
"""

from __future__ import annotations

from typing import Any

from sessionmem.records import LOCAL_ORIGIN


def label_sql(alias: str) -> str:
    """SQL for the shown origin of the row aliased ``alias``: ``''``, ``user@machine`` or ``machine``
    (:func:`sessionmem.records.origin_label`)."""
    return (f"CASE WHEN {alias}.origin_machine = '' THEN '' WHEN {alias}.origin_user = '' THEN {alias}.origin_machine"
            f" ELSE {alias}.origin_user || '@' || {alias}.origin_machine END")


def origin_condition(alias: str, origin: str | None, params: dict[str, Any]) -> str:
    """The condition that the row aliased ``alias`` is of ``origin`` (named parameters added to
    ``params``); ``"1"`` when ``origin`` is ``None``.

    ``local``: this machine's own rows. ``user@machine``: that user on that machine. A name
    alone: rows of the machine, or of the user, of that name.
    """
    if origin is None:
        return "1"
    if origin == LOCAL_ORIGIN:
        return f"{alias}.origin_machine = ''"
    user, at, machine = origin.rpartition("@")
    if at:
        params["origin_user"], params["origin_machine"] = user, machine
        return f"({alias}.origin_machine = :origin_machine AND {alias}.origin_user = :origin_user)"
    params["origin_name"] = origin
    return f"({alias}.origin_machine = :origin_name OR ({alias}.origin_user = :origin_name AND {alias}.origin_machine != ''))"
