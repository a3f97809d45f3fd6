"""Which projects leave this machine, and why: the one rule the pusher, the puller and the pages use.

Only the user shares. A project is shared with the team database when

- ``share_projects`` names it (or is ``*``), or
- the user approved it on this machine (``sessionmem share allow`` in its repository; the
  answers of :mod:`sessionmem.team.consent`, for this team database, by the project's identity
  between machines).

A repository that commits :data:`SHARE_FILE` at its root only asks: its sessions note it
(``sessions.share_file``), SessionStart tells the user once, and nothing of it is pushed or
pulled until the user approves. ``share deny`` takes an approval back (and answers the
request, which is not shown again); it does not override ``share_projects``, which the user
edits.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable
from enum import Enum

import msgspec

from sessionmem.protocol.git_remote import SHARE_FILE
from sessionmem.protocol.project import ALL_PROJECTS
from sessionmem.storage.team_records import shared_key
from sessionmem.team.consent import Answer, Decision

__all__ = ["SHARE_FILE", "ProjectSharing", "SharingReason", "describe", "is_shared", "sharing_list",
           "shares_everything"]


class SharingReason(str, Enum):
    SHARE_PROJECTS = "share_projects"  # shared: named in share_projects (or it is *)
    APPROVED = "approved"  # shared: the user ran `share allow` on this machine (at)
    REQUESTED = "requested"  # not shared: its repository commits the share file, the user has not answered
    DENIED = "denied"  # not shared: the user ran `share deny` on this machine (at)


class ProjectSharing(msgspec.Struct, frozen=True, kw_only=True):
    """One line of "what is shared and why" (``sessionmem status``, ``doctor``, ``GET /api/team``, the viewer)."""

    project: str  # its name here (``*``: every project)
    project_key: str  # its identity between machines ("" for a name of share_projects)
    shared: bool
    reason: SharingReason
    at: float | None = None  # when the user answered (approved, denied) or was asked (requested)


def shares_everything(share_projects: Collection[str]) -> bool:
    return ALL_PROJECTS in share_projects


def is_shared(project: str, project_key: str, *, share_projects: Collection[str], approved: Collection[str]) -> bool:
    """Whether ``project`` (of identity ``project_key``, "" without a remote) may be pushed and pulled."""
    return (shares_everything(share_projects) or project in share_projects
            or shared_key(project_key, project) in approved)


def sharing_list(share_projects: Collection[str], answers: Iterable[Answer],
                 requests: Iterable[tuple[str, str]]) -> list[ProjectSharing]:
    """What is shared and why: the names of ``share_projects``, then each project the user answered for this
    database (``answers``) or whose repository asks (``requests``: ``(project_key, project)`` of sessions that
    saw the share file), unless ``share_projects`` already shares it."""
    listed = [ProjectSharing(project=name, project_key="", shared=True, reason=SharingReason.SHARE_PROJECTS)
              for name in share_projects]
    by_key: dict[str, ProjectSharing] = {}
    for project_key, project in requests:
        key = shared_key(project_key, project)
        if not is_shared(project, project_key, share_projects=share_projects, approved=()):
            by_key.setdefault(key, ProjectSharing(project=project, project_key=key, shared=False,
                                                  reason=SharingReason.REQUESTED))
    for answer in answers:
        requested = by_key.get(answer.project_key)
        project = requested.project if requested is not None else answer.project
        if answer.decision is Decision.ALLOWED:
            by_key[answer.project_key] = ProjectSharing(project=project, project_key=answer.project_key, shared=True,
                                                        reason=SharingReason.APPROVED, at=answer.at)
        elif shares_everything(share_projects) or project in share_projects:
            by_key.pop(answer.project_key, None)  # shared by share_projects, listed above
        elif answer.decision is Decision.DENIED:
            by_key[answer.project_key] = ProjectSharing(project=project, project_key=answer.project_key, shared=False,
                                                        reason=SharingReason.DENIED, at=answer.at)
        else:
            by_key[answer.project_key] = ProjectSharing(project=project, project_key=answer.project_key, shared=False,
                                                        reason=SharingReason.REQUESTED, at=answer.at)
    return listed + sorted(by_key.values(), key=lambda entry: (not entry.shared, entry.project, entry.project_key))


def describe(entry: ProjectSharing) -> str:
    """One entry as a person reads it: ``app (github.com/me/app): shared (approved on this machine at ...)``."""
    name = entry.project if entry.project_key in ("", shared_key("", entry.project)) \
        else f"{entry.project} ({entry.project_key})"
    when = f" at {time.strftime('%Y-%m-%d %H:%M', time.localtime(entry.at))}" if entry.at is not None else ""
    if entry.reason is SharingReason.SHARE_PROJECTS:
        return f"{'every project' if entry.project == ALL_PROJECTS else name}: shared (share_projects)"
    if entry.reason is SharingReason.APPROVED:
        return f"{name}: shared (approved on this machine{when})"
    if entry.reason is SharingReason.DENIED:
        return f"{name}: not shared (refused on this machine{when})"
    return f"{name}: not shared (requested by its repository, not approved: `sessionmem share allow` in it)"
