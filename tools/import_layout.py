"""An import-linter plugin: ``lint-imports`` checks this source tree as it is installed, and allow-lists.

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

import-linter's own contract types forbid what they name; :class:`StandardLibraryOnlyContract`
allows what it names (the standard library, and the few modules of ours listed), so that a
new dependency or a new package of ours is refused without being added to any list.

Resource handling:
    ``build/import-graph/`` is made again at each run (links only: milliseconds).
"""

from __future__ import annotations

import sys

import grimp
from importlinter import Contract, ContractCheck, fields, output
from importlinter.domain.helpers import module_expressions_to_modules

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


class StandardLibraryOnlyContract(Contract):
    """``source_modules`` import only the standard library, themselves and ``allowed_modules``.

    The standard library is the running Python's ``sys.stdlib_module_names``. Direct imports
    only: an allowed module of ours answers for its own imports under its own contract.
    """

    source_modules = fields.ListField(subfield=fields.ModuleExpressionField())
    allowed_modules = fields.ListField(subfield=fields.ModuleExpressionField(), required=False)

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        sources = _modules(graph, self.source_modules)
        allowed = sources | _modules(graph, self.allowed_modules or [])
        illegal = sorted(
            (importer, imported)
            for importer in sources
            for imported in graph.find_modules_directly_imported_by(importer)
            if imported not in allowed and imported.split(".")[0] not in sys.stdlib_module_names
        )
        return ContractCheck(kept=not illegal, metadata={"illegal": illegal})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for importer, imported in check.metadata["illegal"]:
            output.print_error(f"{importer} imports {imported}, which is neither the standard library nor allowed",
                               bold=False)
            output.new_line()


def _modules(graph: grimp.ImportGraph, expressions: object) -> set[str]:
    """The modules that a contract's module expressions name, with everything inside them."""
    modules = module_expressions_to_modules(graph, expressions, as_packages=True)  # type: ignore[arg-type]
    return {module.name for module in modules}


sys.path.insert(0, str(stage(ROOT, "import-graph")))  # ahead of the working directory, which lint-imports put first
