"""What the team sync reports (``/debug``, ``GET /api/team``, ``sessionmem status``) and the refusal of a
share push, importable without the sync and its database driver: a worker without ``database_url``
never loads either."""

from __future__ import annotations

from enum import Enum

import msgspec

from sessionmem.team.sharing import ProjectSharing


class SharePushState(str, Enum):
    RUNNING = "running"
    WAITING = "waiting"  # the team database cannot be reached: tried again after a pause
    DONE = "done"
    FAILED = "failed"


class SharePushStatus(msgspec.Struct, frozen=True, kw_only=True):
    project: str
    state: SharePushState
    done: int  # rows of the project read and (those of this machine) pushed
    total: int  # rows of the project to read when it started
    pushed: int  # rows sent to the team database
    started_at: float
    finished_at: float | None = None
    error: str = ""


class TeamStatistics(msgspec.Struct, frozen=True, kw_only=True):
    connected: bool  # the last call to the team database succeeded
    machine_id: str
    machine: str
    user: str
    share_projects: list[str]
    pushed: int  # rows pushed since the worker started
    pulled: int  # rows pulled since the worker started (stored here, or here already)
    backlog: int  # this machine's rows of shared projects not pushed yet
    last_push_at: float | None  # when rows last reached the team database
    last_pull_at: float | None  # when the team database was last asked (and answered)
    failures: int  # calls that failed (unreachable, or another error)
    refused: int  # rows the team database would not take (logged, passed over: kept here only)
    last_error: str  # never holds a password
    # Rows pulled and passed over (logged, not stored): they broke the rules of an import, or belong to a
    # project this machine does not pull; and which one was last, and why (never its content).
    pull_refused: int = 0
    last_pull_refused: str = ""
    transport: str = ""  # how the connection is secured (storage/pg/connections.py Transport.describe)
    transport_warnings: list[str] = []  # how database_url weakens the secure defaults, if it does
    share_push: SharePushStatus | None = None
    database: str = ""  # the team database as answers name it: host:port/database
    sharing: list[ProjectSharing] = []  # what is shared and why, and what asks to be and is not
    consent_error: str = ""  # the consent file cannot be trusted: nothing is shared by approval


class ShareRefused(Exception):
    """A share push that cannot start: the project is not shared, has no memory here, or another runs."""
