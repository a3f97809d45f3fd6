"""The layers of pyproject.toml's import-linter contracts hold, fail when broken, and hold at run time."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Bare, as anyone runs it: pyproject.toml's contract type (tools/import_layout.py) lays out the installed package.
LINT = [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"]

# What a PostToolUse hook process may import: the standard library's C parts it needs, and the protocol.
HOOK_IMPORTS_PREFIXES = ("sessionmem.hooks", "sessionmem.protocol")


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(LINT, capture_output=True, text=True, timeout=120, cwd=root)


def copy_tree(tmp_path: Path) -> Path:
    """The package folders, tools/ and pyproject.toml, as a checkout would have them."""
    root = tmp_path / "checkout"
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    for folder in {*config["tool"]["setuptools"]["package-dir"].values(), "tools"}:
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


def test_the_contracts_hold() -> None:
    result = lint(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert f"{len(contracts)} kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("file", "line", "broken"),
    [
        ("sessionmem/protocol/routes.py", "import trio\n", "The protocol package imports nothing of ours"),
        ("hooks/run.py", "from sessionmem.storage import schema\n", "Hooks import only the protocol package"),
        ("replay/backfill.py", "from sessionmem.hooks import transcript\n", "Nothing outside hooks/ imports"),
        ("compress/offline.py", "from sessionmem.storage import base\n", "Compressors do not import storage"),
        ("storage/writer.py", "from sessionmem.server import jsonapi\n", "Storage does not import the server"),
        ("server/jsonapi.py", "from sessionmem import worker\n", "Layers, from the top"),
        ("web/assets.py", "from sessionmem.server import routing\n", "The web pages' package imports nothing"),
    ],
    ids=["protocol-imports-trio", "hooks-import-storage", "backfill-imports-hooks", "compress-imports-storage",
         "storage-imports-server", "server-imports-worker", "web-imports-server"],
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


def _our_top_level_modules(config: dict) -> set[str]:
    names = {name for name in config["tool"]["setuptools"]["package-dir"] if name.count(".") == 1}
    names |= {f"sessionmem.{path.stem}" for path in (REPO / "sessionmem").glob("*.py")
              if path.stem not in ("__init__", "__main__")}
    names |= {f"sessionmem.{path.parent.name}" for path in (REPO / "sessionmem").glob("*/__init__.py")}
    return names


def test_every_module_of_ours_is_placed_by_the_contracts() -> None:
    """A new top-level module cannot slip past the layers: each one is forbidden to the protocol and
    the hooks, and stands in a layer (the lists are written out in pyproject.toml, so this keeps them whole)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    contracts = {contract["name"]: contract for contract in config["tool"]["importlinter"]["contracts"]}
    ours = _our_top_level_modules(config)
    assert {"sessionmem.protocol", "sessionmem.search", "sessionmem.index", "sessionmem.cli"} <= ours
    protocol = contracts["The protocol package imports nothing of ours and only the standard library"]
    hooks = contracts["Hooks import only the protocol package and the standard library"]
    assert ours - {"sessionmem.protocol"} - set(protocol["forbidden_modules"]) == set()
    assert ours - {"sessionmem.protocol", "sessionmem.hooks"} - set(hooks["forbidden_modules"]) == set()
    layered = {name.strip() for layer in contracts["Layers, from the top"]["layers"] for name in layer.split("|")}
    assert ours - {"sessionmem.hooks"} - layered == set()
