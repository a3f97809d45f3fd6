"""An import-linter plugin: ``lint-imports`` checks this source tree as it is installed.

The tree maps top-level folders (``actors/``, ``storage/``, ...) into the one
``sessionmem`` package (``[tool.setuptools.package-dir]``). grimp, which builds
import-linter's graph, walks the folder that ``find_spec("sessionmem")`` names, and from a
checkout that is the root ``sessionmem/`` alone: a bare ``lint-imports`` said "Module
'sessionmem.storage' does not exist".

``pyproject.toml`` registers :class:`InstalledLayoutContract` as a contract type, so
import-linter imports this module after reading its configuration and before it builds
the graph. On import, it lays the package out as the wheel does (:func:`tools.layout.stage`),
as symbolic links under ``build/import-graph/`` (grimp follows them), and puts that first
on ``sys.path``. The contract then checks that every folder of the mapping is in the graph: that the layers
were checked against all of the code, not a part of it.

Resource handling:
    ``build/import-graph/`` is made again at each run (links only: milliseconds).
"""

from __future__ import annotations

import sys

import grimp
from importlinter import Contract, ContractCheck, output

from tools.layout import ROOT, package_dirs, stage


class InstalledLayoutContract(Contract):
    """Every package that ``[tool.setuptools.package-dir]`` maps is in the import graph."""

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        missing = sorted(name for name in package_dirs(ROOT) if name not in graph.modules)
        return ContractCheck(kept=not missing, metadata={"missing": missing})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for name in check.metadata["missing"]:
            output.print_error(f"{name} is not in the import graph: its folder was not checked", bold=False)
            output.new_line()


sys.path.insert(0, str(stage(ROOT, "import-graph")))  # ahead of the working directory, which lint-imports put first
