"""Which projects leave this machine: the one rule the pusher, the puller and the pages use.

Sharing is opt-in per project. A project is shared when ``share_projects`` names it (or
is ``*``), or when its repository commits a :data:`SHARE_FILE` at its root (seen when a
session began: ``sessions.share_file``). Nothing else is ever pushed.
"""

from __future__ import annotations

from collections.abc import Collection

from sessionmem.protocol.git_remote import SHARE_FILE
from sessionmem.protocol.project import ALL_PROJECTS

__all__ = ["SHARE_FILE", "is_shared", "shares_everything"]  # SHARE_FILE: hooks read it, so protocol defines it


def shares_everything(share_projects: Collection[str]) -> bool:
    return ALL_PROJECTS in share_projects


def is_shared(project: str, *, share_file: bool, share_projects: Collection[str]) -> bool:
    """Whether ``project``'s memory may leave this machine."""
    return share_file or shares_everything(share_projects) or project in share_projects
