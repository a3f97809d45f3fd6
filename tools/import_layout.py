"""An import-linter plugin: ``lint-imports`` checks this source tree as it is installed.

The tree maps top-level folders (``actors/``, ``storage/``, ...) into the one
``sessionmem`` package (``[tool.setuptools.package-dir]``). grimp, which builds
import-linter's graph, walks the folder that ``find_spec("sessionmem")`` names, and from a
checkout that is the root ``sessionmem/`` alone: a bare ``lint-imports`` said "Module
'sessionmem.storage' does not exist".

``pyproject.toml`` registers :class:`InstalledLayoutContract` as a contract type, so
import-linter imports this module after reading its configuration and before it builds
the graph. On import, it lays the package out as the wheel does, as symbolic links under
``build/import-graph/`` (grimp follows them), and puts that first on ``sys.path``. The
contract then checks that every folder of the mapping is in the graph: that the layers
were checked against all of the code, not a part of it.

Resource handling:
    ``build/import-graph/`` is made again at each run (links only: milliseconds).
"""

from __future__ import annotations

import shutil
import sys
import tomllib
from pathlib import Path

from importlinter import Contract, ContractCheck, output

ROOT = Path(__file__).resolve().parent.parent  # the checkout this module belongs to (a copy checks itself)


def package_dirs(root: Path) -> dict[str, str]:
    """``[tool.setuptools.package-dir]`` of ``root``: package name -> folder."""
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    return config["tool"]["setuptools"]["package-dir"]


def stage(root: Path) -> Path:
    """Build ``<root>/build/import-graph/sessionmem`` as the wheel lays it out; returns its parent."""
    mapping = package_dirs(root)
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


class InstalledLayoutContract(Contract):
    """Every package that ``[tool.setuptools.package-dir]`` maps is in the import graph."""

    def check(self, graph: object, verbose: bool) -> ContractCheck:
        modules = graph.modules  # type: ignore[attr-defined]
        missing = sorted(name for name in package_dirs(ROOT) if name not in modules)
        return ContractCheck(kept=not missing, metadata={"missing": missing})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for name in check.metadata["missing"]:
            output.print_error(f"{name} is not in the import graph: its folder was not checked", bold=False)
            output.new_line()


sys.path.insert(0, str(stage(ROOT)))  # ahead of the working directory, which lint-imports put first
