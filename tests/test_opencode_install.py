"""``sessionmem install --agent opencode``, ``uninstall`` and ``doctor``: OpenCode's plugin and configuration.

That the real OpenCode loads the plugin install writes, and starts its MCP server, is
tests/test_e2e_opencode.py's proof.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from sessionmem.agents.opencode import PLUGIN_MARKER, plugin_source, wiring
from sessionmem.cli import main
from sessionmem.install import hook_entry

USER_CONFIG: dict[str, Any] = {
    "$schema": "https://opencode.ai/config.json",
    "model": "anthropic/claude-sonnet-4-5",
    "mcp": {"github": {"type": "local", "command": ["github-mcp"]}},
}


@pytest.fixture
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for name in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "GEMINI_CLI_HOME"):
        monkeypatch.delenv(name, raising=False)
    folder = tmp_path / "config" / "opencode"
    folder.mkdir(parents=True)
    (folder / "opencode.json").write_text(json.dumps(USER_CONFIG, indent=2))
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    return folder


def _config(folder: Path) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((folder / "opencode.json").read_text())
    return config


def _install(*extra: str) -> int:
    return main(["install", "--agent", "opencode", *extra])


def test_install_writes_the_plugin_with_this_hook_entry_and_the_mcp_server(config_dir: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert _install() == 0
    assert "the next OpenCode session starts the worker" in capsys.readouterr().out
    plugin = (config_dir / "plugins" / "sessionmem.js").read_text()
    assert plugin.startswith(PLUGIN_MARKER)
    assert f"const PYTHON = {json.dumps(sys.executable)};" in plugin
    assert f"const ENTRY = {json.dumps(str(hook_entry()))};" in plugin
    assert "__SESSIONMEM_" not in plugin  # every placeholder filled in
    config = _config(config_dir)
    assert config["model"] == USER_CONFIG["model"] and config["mcp"]["github"] == USER_CONFIG["mcp"]["github"]
    assert config["mcp"]["sessionmem"] == {"type": "local", "command": [sys.executable, "-P", "-m", "sessionmem",
                                                                         "mcp"], "enabled": True}
    assert list(config_dir.glob("opencode.json.sessionmem-backup-*"))  # the file as it was before


def test_installing_again_changes_nothing(config_dir: Path) -> None:
    assert _install() == 0
    before = {p.name: p.read_bytes() for p in config_dir.rglob("*") if p.is_file()}
    assert _install() == 0
    assert {p.name: p.read_bytes() for p in config_dir.rglob("*") if p.is_file()} == before  # no new backup either


def test_a_plugin_of_another_interpreter_is_rewritten_with_a_backup(config_dir: Path) -> None:
    (config_dir / "plugins").mkdir()
    old = plugin_source(python="/old/venv/bin/python")
    (config_dir / "plugins" / "sessionmem.js").write_text(old)
    assert not wiring().plugin_current
    assert _install() == 0
    assert wiring().plugin_current
    backups = list((config_dir / "plugins").glob("sessionmem.js.sessionmem-backup-*"))
    assert [b.read_text() for b in backups] == [old]


def test_uninstall_removes_exactly_what_install_added(config_dir: Path) -> None:
    assert _install() == 0
    assert main(["uninstall", "--agent", "opencode"]) == 0
    assert not (config_dir / "plugins" / "sessionmem.js").exists()
    assert _config(config_dir) == USER_CONFIG


def test_files_of_our_names_that_are_not_ours_are_left_alone(config_dir: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    (config_dir / "opencode.json").write_text(json.dumps({"mcp": {"sessionmem": {"type": "remote",
                                                                                  "url": "https://x"}}}))
    assert _install() == 1  # the plugin is written; the server of that name is the user's
    assert "not sessionmem's; left as it is" in capsys.readouterr().err
    assert _config(config_dir)["mcp"]["sessionmem"]["type"] == "remote"
    assert main(["uninstall", "--agent", "opencode"]) == 0
    assert _config(config_dir)["mcp"]["sessionmem"]["type"] == "remote"

    theirs = config_dir / "plugins" / "sessionmem.js"
    theirs.write_text("export const Theirs = async () => ({});\n")
    assert _install() == 1
    assert "is not sessionmem's plugin" in capsys.readouterr().err
    assert main(["uninstall", "--agent", "opencode"]) == 0
    assert theirs.read_text() == "export const Theirs = async () => ({});\n"


def test_doctor_reports_the_plugin_and_the_mcp_server(config_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _install() == 0
    capsys.readouterr()
    main(["doctor"])
    out = capsys.readouterr().out
    assert f"[ok] OpenCode plugin {config_dir / 'plugins' / 'sessionmem.js'}: runs this install's hooks" in out
    assert f"[ok] OpenCode MCP server `sessionmem`: {sys.executable}" in out
    (config_dir / "plugins" / "sessionmem.js").write_text(plugin_source(python="/gone/python"))
    main(["doctor"])
    assert "[!!] OpenCode plugin" in capsys.readouterr().out
