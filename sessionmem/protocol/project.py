"""Project identity of a working directory, without spawning git. Standard library only.

The one definition for every client and the worker: the project is the name of the
git work tree root that contains ``cwd``, so every subdirectory belongs to the same
project. A linked worktree (its ``.git`` is a file pointing into
``<main>/.git/worktrees/<name>``) maps to its main repository's name.

When no git work tree contains ``cwd`` -- outside git, or a path that no longer exists,
as in old transcripts that backfill reads -- the usual worktree layouts still name the
repository (:data:`WORKTREE_LAYOUTS`): ``<repo>/.claude/worktrees/<name>`` (Claude
Code), ``~/.claude-worktrees/<repo>/<name>`` (Claude Desktop),
``<repo>/.worktrees/<name>``, ``<repo>-worktrees/<name>`` (side by side),
``conductor/workspaces/<repo>/<name>``, and any directory below them. Otherwise it is
``basename(cwd)``, as in the reference: what cannot be known from a path alone is the
root of a repository that is gone (its subdirectory ``/old/repo/src`` is project
``src``). Windows paths (``C:\\Users\\me\\repo``) are read as Windows paths.
On a disk that ignores case, the name is the directory's as the disk spells it
(:func:`~sessionmem.protocol.path_case.on_disk_name`): ``/users/me/proj`` is project ``Proj``
when ``/Users/me/Proj`` is its directory, as it always was from that spelling.
Clients send the project they computed; the worker computes it the same way only
for a request that names none (:func:`resolve_project`).
"""

from __future__ import annotations

import os

from sessionmem.protocol.path_case import on_disk_name

ALL_PROJECTS = "*"  # what a client asking for a project may say for every project (MCP tools, the CLI)


def git_dir_of_file(git_file: str, root: str) -> str | None:
    """The git directory a ``.git`` file (a linked worktree's, a submodule's) points to, or None."""
    try:
        with open(git_file, encoding="utf-8") as f:
            first = f.readline().strip()
    except OSError:
        return None
    if not first.startswith("gitdir:"):
        return None
    gitdir = first[len("gitdir:") :].strip()
    if not os.path.isabs(gitdir):
        gitdir = os.path.normpath(os.path.join(root, gitdir))
    return gitdir


def common_dir(gitdir: str) -> str | None:
    """A linked worktree's git directory -> the main repository's (``commondir``); None if not a worktree."""
    try:
        with open(os.path.join(gitdir, "commondir"), encoding="utf-8") as f:
            return os.path.normpath(os.path.join(gitdir, f.read().strip()))
    except OSError:
        marker = os.sep + "worktrees" + os.sep
        if marker in gitdir:
            return gitdir.split(marker)[0]
    return None  # e.g. a submodule: a repository of its own


def _main_repository_of_worktree(git_file: str, root: str) -> str | None:
    """For a ``.git`` file, the main repository's work tree root, or None if not a worktree."""
    gitdir = git_dir_of_file(git_file, root)
    common = common_dir(gitdir) if gitdir is not None else None
    if common is None:
        return None  # e.g. a submodule: it is a project of its own
    if os.path.basename(common) == ".git":
        return os.path.dirname(common)
    return common  # a bare repository: its own name is the best we have


def work_tree_root(cwd: str) -> str | None:
    """The root of the innermost git work tree containing ``cwd`` (it holds ``.git``), or None."""
    if not cwd or ("\\" in cwd and "/" not in cwd):  # nothing, or a Windows path read here
        return None
    current = os.path.abspath(cwd)
    while True:
        if os.path.exists(os.path.join(current, ".git")):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


# (the directory names before the repository, the names after it): a path holding
# them in a row, then one more name, is a worktree of the repository that name marks.
WORKTREE_LAYOUTS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    ((), (".claude", "worktrees")),  # <repo>/.claude/worktrees/<name>
    ((), (".worktrees",)),  # <repo>/.worktrees/<name>
    ((".claude-worktrees",), ()),  # ~/.claude-worktrees/<repo>/<name>
    (("conductor", "workspaces"), ()),  # ~/conductor/workspaces/<repo>/<name>
)
SIDE_BY_SIDE = "-worktrees"  # <repo>-worktrees/<name>


def project_from_layout(parts: list[str]) -> str | None:
    """The repository a worktree path names by its layout (see the module docstring), if any."""
    for index in range(len(parts) - 1, -1, -1):  # the innermost layout wins
        name = parts[index]
        for before, after in WORKTREE_LAYOUTS:
            if before and tuple(parts[index - len(before) + 1 : index + 1]) == before \
                    and index + 2 < len(parts):
                return parts[index + 1]
            if after and tuple(parts[index + 1 : index + 1 + len(after)]) == after \
                    and index + len(after) + 1 < len(parts):
                return name
        if name.endswith(SIDE_BY_SIDE) and not name.startswith(".") and len(name) > len(SIDE_BY_SIDE) \
                and index + 1 < len(parts):
            return name[: -len(SIDE_BY_SIDE)]
    return None


def _split(path: str) -> list[str]:
    """The names of a path, a Windows one (``C:\\Users\\me``) too."""
    if "\\" in path and "/" not in path:
        path = path.replace("\\", "/")
    return [part for part in path.split("/") if part and not part.endswith(":")]


def project_of(cwd: str) -> str:
    """The project name for ``cwd`` (see the module docstring)."""
    if not cwd:
        return "unknown"
    if "\\" in cwd and "/" not in cwd:  # a Windows path, in a transcript read here
        parts = _split(cwd)
        return project_from_layout(parts) or (parts[-1] if parts else "unknown")
    root = work_tree_root(cwd)
    if root is None:
        where = os.path.abspath(cwd)
        parts = _split(where)
        return project_from_layout(parts) or (on_disk_name(where) if parts else "unknown")
    git = os.path.join(root, ".git")
    if os.path.isfile(git):
        main = _main_repository_of_worktree(git, root)
        return on_disk_name(main or root) or "unknown"
    return on_disk_name(root) or "unknown"


def resolve_project(project: str, cwd: str) -> str:
    """The project a request names, else :func:`project_of` its ``cwd``."""
    return project.strip() or project_of(cwd)
