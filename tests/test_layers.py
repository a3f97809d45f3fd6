"""The layers of pyproject.toml's import-linter contracts hold, fail when broken, and hold at run time; a new
source folder is found by every tool that reads the tree, from pyproject's package-dir alone."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from setuptools.dist import Distribution

from tools import layout

REPO = Path(__file__).resolve().parent.parent
# Bare, as anyone runs it: pyproject.toml's contract type (tools/import_layout.py) lays out the installed package.
LINT = [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"]

# What a PostToolUse hook process may import: the standard library's C parts it needs, and the protocol.
HOOK_IMPORTS_PREFIXES = ("sessionmem.hooks", "sessionmem.protocol")


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(LINT, capture_output=True, text=True, timeout=120, cwd=root)


def copy_tree(tmp_path: Path) -> Path:
    """The package folders, tools/, pyproject.toml and the Makefile, as a checkout would have them."""
    root = tmp_path / "checkout"
    for folder in {*layout.folders(REPO), "tools"}:
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "Makefile"):
        shutil.copy(REPO / name, root / name)
    return root


def add_folder(root: Path, folder: str) -> None:
    """A new source folder ``<folder>/`` with a module, mapped to ``sessionmem.<folder>`` in package-dir alone."""
    (root / folder).mkdir()
    (root / folder / "__init__.py").write_text("")
    (root / folder / "thing.py").write_text("import json\n")
    config = root / "pyproject.toml"
    config.write_text(config.read_text().replace('"sessionmem.web" = "web"',
                                                 f'"sessionmem.web" = "web"\n"sessionmem.{folder}" = "{folder}"', 1))


def test_the_contracts_hold() -> None:
    result = lint(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert f"{len(contracts)} kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("file", "line", "broken"),
    [
        ("sessionmem/protocol/routes.py", "import trio\n", "The protocol package imports nothing of ours"),
        ("hooks/run.py", "from sessionmem.storage.sqlite import schema\n", "Hooks import only the protocol package"),
        ("replay/backfill.py", "from sessionmem.hooks import transcript\n", "Nothing outside hooks/ imports"),
        ("compress/offline.py", "from sessionmem.storage import base\n", "Compressors do not import storage"),
        ("storage/writer.py", "from sessionmem.server import jsonapi\n", "Storage does not import the server"),
        ("server/jsonapi.py", "from sessionmem import worker\n", "Layers, from the top"),
        ("web/assets.py", "from sessionmem.server import routing\n", "The web pages' package imports nothing"),
        # Dependencies and packages that no list names: the standard library is allowed, nothing else.
        ("sessionmem/protocol/routes.py", "import psycopg\n", "The protocol package imports nothing of ours"),
        ("hooks/run.py", "import detect_secrets\n", "Hooks import only the protocol package"),
        ("hooks/run.py", "from sessionmem import install\n", "Hooks import only the protocol package"),
        ("team/__init__.py", "from sessionmem.hooks import transcript\n", "Nothing outside hooks/ imports"),
        # storage/ by engine: what is neutral imports neither engine; the SQLite store never the team database's.
        ("storage/base.py", "from sessionmem.storage.sqlite import values\n", "Engine-neutral storage imports neither"),
        ("storage/sqlite/cards.py", "from sessionmem.storage.pg import text\n", "The SQLite store does not import the team"),
    ],
    ids=["protocol-imports-trio", "hooks-import-storage", "backfill-imports-hooks", "compress-imports-storage",
         "storage-imports-server", "server-imports-worker", "web-imports-server", "protocol-imports-psycopg",
         "hooks-import-detect-secrets", "hooks-import-install", "team-imports-hooks",
         "neutral-storage-imports-sqlite", "sqlite-imports-pg"],
)
def test_a_forbidden_import_breaks_its_contract(tmp_path: Path, file: str, line: str, broken: str) -> None:
    root = copy_tree(tmp_path)
    target = root / file
    text = target.read_text()
    marker = "from __future__ import annotations\n"
    target.write_text(text.replace(marker, marker + line, 1) if marker in text else line + text)
    result = lint(root)
    assert result.returncode != 0
    broken_section = result.stdout.split("Broken contracts", 1)[1]
    assert broken in broken_section, result.stdout


def test_a_mapped_folder_left_out_of_the_graph_breaks_the_layout_contract(tmp_path: Path) -> None:
    root = copy_tree(tmp_path)
    config = root / "pyproject.toml"
    config.write_text(config.read_text().replace('"sessionmem.web" = "web"',
                                                 '"sessionmem.web" = "web"\n"sessionmem.ghost" = "ghost"', 1))
    result = lint(root)  # ghost/ does not exist: nothing of it can be checked
    assert result.returncode != 0
    assert "sessionmem.ghost is not in the import graph" in result.stdout.split("Broken contracts", 1)[1]


def test_a_hook_process_loads_only_the_standard_library_and_the_protocol() -> None:
    """Run as Claude Code runs it (``python -S``, no site-packages): nothing else is even importable.

    (SessionStart alone also loads ``subprocess`` to start the worker, through ``protocol.launch``.)
    """
    script = (
        "import sys\n"
        f"g = {{'__file__': {str(REPO / 'hooks' / 'entry.py')!r}, '__name__': 'entry'}}\n"
        f"exec(open(g['__file__']).read().split('if __name__')[0], g)\n"
        "g['_bootstrap']()\n"
        "before = set(sys.modules)\n"
        "import sessionmem.hooks.run, sessionmem.protocol.state\n"  # what a PostToolUse hook runs

        "print('\\n'.join(sorted(set(sys.modules) - before)))\n"
    )
    result = subprocess.run([sys.executable, "-S", "-c", script], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    loaded = result.stdout.split()
    ours = [m for m in loaded if m.startswith("sessionmem")]
    assert ours and all(m.startswith(HOOK_IMPORTS_PREFIXES) for m in ours), ours
    # What costs a hook milliseconds stays out of its hot path.
    assert not {"typing", "json", "re", "socket", "http", "email", "enum", "msgspec", "trio"} & set(loaded), loaded


def test_a_new_folder_in_package_dir_alone_reaches_every_tool(tmp_path: Path) -> None:
    """pyproject's package-dir is the one list of source folders: a folder added there, and nowhere else, is
    installed, compiled by ``make bytecode``, type-checked, walked by import-linter, and must be placed in the
    layers (the contract is exhaustive), so it cannot slip past them."""
    root = copy_tree(tmp_path)
    add_folder(root, "ghost")
    (root / "sessionmem" / "stray.py").write_text("import json\n")  # a new module of the root package, too

    # The build: setuptools finds the packages inside each mapped folder (no list of packages to keep up).
    build = Distribution({"package_dir": layout.package_dirs(root), "src_root": str(root)})
    build.set_defaults()  # the discovery the build runs when [tool.setuptools] names no packages
    assert "sessionmem.ghost" in build.packages
    assert not tomllib.loads((root / "pyproject.toml").read_text())["tool"].get("setuptools", {}).get("packages")

    # make bytecode: the folders it compiles (the real virtualenv, taken as up to date).
    venv = Path(sys.executable).parent.parent
    make = subprocess.run(["make", "-n", "-o", f"{venv}/.installed", "bytecode", f"VENV={venv}"],
                          capture_output=True, text=True, timeout=60, cwd=root)
    assert make.returncode == 0, make.stderr
    assert "ghost" in make.stdout.split("compileall", 1)[1].split(), make.stdout

    # The type checker's tree (tools/typecheck.py), laid out as installed.
    assert (layout.stage(root, "typecheck") / "sessionmem" / "ghost" / "thing.py").is_file()

    # import-linter: in the graph, and not in any layer yet.
    result = lint(root)
    assert result.returncode != 0
    broken = result.stdout.split("Broken contracts", 1)[1]
    assert "Layers, from the top" in broken and "ghost" in broken and "stray" in broken, result.stdout
    assert "Every folder of the source tree is checked, laid out as installed KEPT" in result.stdout


def test_storage_and_team_name_each_module_once_but_for_an_engines_counterpart() -> None:
    """One name per thing: a module name of storage/ or team/ stands once, except the same job done by each
    engine (``storage/sqlite/schema.py`` and ``storage/pg/schema.py``: the folder names the engine)."""
    folders: dict[str, set[str]] = {}
    for root in ("storage", "team"):
        for module in (REPO / root).rglob("*.py"):
            if module.name != "__init__.py" and "__pycache__" not in module.parts:
                folders.setdefault(module.stem, set()).add(module.parent.relative_to(REPO).as_posix())
    repeated = {name: sorted(where) for name, where in folders.items()
                if len(where) > 1 and where != {"storage/sqlite", "storage/pg"}}
    assert not repeated, repeated
