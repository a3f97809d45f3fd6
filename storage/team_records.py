"""What one machine sends to the team database and gets back from it.

A shared row is an export record (:mod:`sessionmem.storage.export_records`, whose identity
rules hold between machines: a session is its Claude session id, an observation its
session and tool use id, and so on) with what the team database adds: the project's
identity between machines, the row's origin, and its vector when it has one. A pulled row
is decoded into these types as an import decodes a record (the same annotations, the caps
of :mod:`~sessionmem.storage.record_rules`).
"""

from __future__ import annotations

import msgspec

from sessionmem.records import Identifier, PathText
from sessionmem.storage.export_records import Record

NAME_KEY_PREFIX = "name:"  # the project key of a project without a git remote: its name


class Origin(msgspec.Struct, frozen=True, array_like=True):
    """Where a row came from: the machine (its stable id, and the name shown) and the user."""

    machine_id: Identifier  # made once per data dir; what a puller leaves out as its own
    machine: Identifier
    user: Identifier

    def machine_shown(self) -> str:
        """The machine's name as shown: never empty, since an empty one reads as this machine's own
        (a row written around sessionmem may carry none)."""
        return self.machine or self.machine_id[:8] or "unknown"


class SharedRow(msgspec.Struct, frozen=True, kw_only=True):
    record: Record  # a SessionRecord's ``cwd`` is always None: a path of one machine stays there
    project_key: PathText  # :func:`shared_key`
    origin: Origin
    vector: bytes | None = None  # float32, observations and summaries that were embedded
    model: str = ""  # the embedder's model_id of ``vector``
    project: PathText = ""  # pulled: the project's name in the team database (a prompt's record has none)


class PullCursor(msgspec.Struct, frozen=True, array_like=True):
    """How far a machine has read the team database: its rows ordered by (transaction id, sequence)."""

    xid: int = 0
    seq: int = 0


def shared_key(project_key: str, project: str) -> str:
    """The project's identity between machines: its normalized git remote, else its name."""
    return project_key or NAME_KEY_PREFIX + project
