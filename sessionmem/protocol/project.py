"""Project identity of a working directory, without spawning git. Standard library only.

The one definition for every client and the worker: the project is the name of the
git work tree root that contains ``cwd``, so every subdirectory belongs to the same
project. A linked worktree (its ``.git`` is a file pointing into
``<main>/.git/worktrees/<name>``) maps to its main repository's name. Outside git, or
for a path that no longer exists, it is ``basename(cwd)``, as in the reference.
Clients send the project they computed; the worker computes it the same way only
for a request that names none (:func:`resolve_project`).
"""

from __future__ import annotations

import os


def _main_repository_of_worktree(git_file: str, root: str) -> str | None:
    """For a ``.git`` file, the main repository's work tree root, or None if not a worktree."""
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
    common = None
    try:
        with open(os.path.join(gitdir, "commondir"), encoding="utf-8") as f:
            common = os.path.normpath(os.path.join(gitdir, f.read().strip()))
    except OSError:
        marker = os.sep + "worktrees" + os.sep
        if marker in gitdir:
            common = gitdir.split(marker)[0]
    if common is None:
        return None  # e.g. a submodule: it is a project of its own
    if os.path.basename(common) == ".git":
        return os.path.dirname(common)
    return common  # a bare repository: its own name is the best we have


def project_of(cwd: str) -> str:
    """The project name for ``cwd`` (see the module docstring)."""
    if not cwd:
        return "unknown"
    path = os.path.abspath(cwd)
    current = path
    while True:
        git = os.path.join(current, ".git")
        if os.path.isdir(git):
            return os.path.basename(current) or "unknown"
        if os.path.isfile(git):
            main = _main_repository_of_worktree(git, current)
            return os.path.basename(main or current) or "unknown"
        parent = os.path.dirname(current)
        if parent == current:
            return os.path.basename(path.rstrip(os.sep)) or "unknown"
        current = parent


def resolve_project(project: str, cwd: str) -> str:
    """The project a request names, else :func:`project_of` its ``cwd``."""
    return project.strip() or project_of(cwd)
