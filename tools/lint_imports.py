"""Check the import-linter contracts of ``pyproject.toml`` against this source tree.

The source tree maps top-level folders (``actors/``, ``storage/``, ...) into the one
``sessionmem`` package (``[tool.setuptools.package-dir]``); the editable install
resolves that mapping with an import hook that grimp, which walks directories, cannot
see. This script builds the installed layout as a tree of symbolic links under
``build/import-graph/`` (grimp follows links), then runs ``lint-imports`` on it.

Usage: ``python tools/lint_imports.py [--root DIR] [lint-imports options]``; ``--root``
checks another copy of the tree (the layer test uses it to show that a forbidden
import fails). Exit status: lint-imports' own (0 when every contract is kept).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def stage(root: Path) -> Path:
    """Build ``<root>/build/import-graph/sessionmem`` as the wheel would lay it out; returns its parent."""
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    mapping: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    staging = root / "build" / "import-graph"
    shutil.rmtree(staging, ignore_errors=True)
    package = staging / "sessionmem"
    package.mkdir(parents=True)
    for entry in (root / mapping["sessionmem"]).iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry.resolve())
    for name, folder in mapping.items():
        if name != "sessionmem":
            (package / name.split(".", 1)[1]).symlink_to((root / folder).resolve())
    return staging


def main(argv: list[str]) -> int:
    root = REPO
    if argv[:1] == ["--root"]:
        root, argv = Path(argv[1]).resolve(), argv[2:]
    staging = stage(root)
    env = {**os.environ, "PYTHONPATH": str(staging)}
    lint = Path(sys.executable).with_name("lint-imports")
    command = [str(lint), "--config", str(root / "pyproject.toml"), "--no-cache", *argv]
    # lint-imports puts its working directory first on sys.path: run it where only the
    # staged package is.
    return subprocess.run(command, env=env, cwd=staging).returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
