"""The source tree laid out as installed: ``sessionmem`` with every mapped folder inside it.

The tree maps top-level folders (``actors/``, ``storage/``, ...) into the one
``sessionmem`` package (``[tool.setuptools.package-dir]``). Tools that read the code
without importing it through the editable install's import hook (import-linter's grimp,
the type checker) find ``sessionmem.actors`` only in such a layout: symbolic links under
``build/<name>/sessionmem``, made again at each run (links only: milliseconds).

That table is the one list of the source folders: setuptools finds the packages inside
them, and ``make bytecode``, the type checker, import-linter and the tests that scan the
tree read it here (``python -m tools.layout --folders`` prints it for the Makefile).
"""

from __future__ import annotations

import shutil
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the checkout this module belongs to (a copy checks itself)


def package_dirs(root: Path) -> dict[str, str]:
    """``[tool.setuptools.package-dir]`` of ``root``: package name -> folder."""
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    mapping: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    return mapping


def folders(root: Path) -> list[str]:
    """The source folders of ``root``'s package, as ``[tool.setuptools.package-dir]`` maps them."""
    return sorted(set(package_dirs(root).values()))


def stage(root: Path, name: str) -> Path:
    """Build ``<root>/build/<name>/sessionmem`` as the wheel lays it out; returns its parent."""
    mapping = package_dirs(root)
    staging = root / "build" / name
    shutil.rmtree(staging, ignore_errors=True)
    package = staging / "sessionmem"
    package.mkdir(parents=True)
    for entry in (root / mapping["sessionmem"]).iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry.resolve())
    for package_name, folder in mapping.items():
        if package_name != "sessionmem":
            (package / package_name.split(".", 1)[1]).symlink_to((root / folder).resolve())
    return staging


if __name__ == "__main__":
    if sys.argv[1:] != ["--folders"]:
        sys.exit("usage: python -m tools.layout --folders")
    print(" ".join(folders(ROOT)))
