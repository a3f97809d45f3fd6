"""``sessionmem install --agent gemini-cli``, ``uninstall`` and ``doctor``: the Gemini CLI's user settings.

That the real Gemini CLI runs what install writes (hooks and MCP server) is tests/test_e2e_gemini.py's proof.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from sessionmem.agents.gemini import STAGES, folder_trust, wiring
from sessionmem.cli import main
from sessionmem.install import MARKER

USER_SETTINGS: dict[str, Any] = {
    "model": {"name": "gemini-2.5-pro"},
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "hooks": {"AfterTool": [{"matcher": "write_file", "hooks": [{"type": "command", "command": "echo theirs",
                                                                 "timeout": 3000}]}]},
    "mcpServers": {"github": {"command": "github-mcp"}},
}


@pytest.fixture
def gemini_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps(USER_SETTINGS, indent=2))
    monkeypatch.setenv("HOME", str(home))
    for name in ("GEMINI_CLI_HOME", "GEMINI_CLI_TRUSTED_FOLDERS_PATH", "CLAUDE_CONFIG_DIR", "CODEX_HOME"):
        monkeypatch.delenv(name, raising=False)
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    return home / ".gemini"


def _settings(gemini_dir: Path) -> dict[str, Any]:
    settings: dict[str, Any] = json.loads((gemini_dir / "settings.json").read_text())
    return settings


def _install(*extra: str) -> int:
    return main(["install", "--agent", "gemini-cli", *extra])


def test_install_writes_each_event_s_hook_in_milliseconds_and_the_mcp_server(gemini_dir: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert _install() == 0
    assert "the next Gemini CLI session starts the worker" in capsys.readouterr().out
    settings = _settings(gemini_dir)
    assert settings["model"] == USER_SETTINGS["model"] and settings["security"] == USER_SETTINGS["security"]
    hooks = settings["hooks"]
    assert set(hooks) == set(STAGES)
    assert hooks["AfterTool"][0] == USER_SETTINGS["hooks"]["AfterTool"][0]  # theirs, first and untouched
    for stage, (_matcher, timeout) in STAGES.items():
        ours = [hook for group in hooks[stage] for hook in group["hooks"] if hook["command"].endswith(MARKER)]
        assert len(ours) == 1, stage
        assert ours[0]["command"].endswith(f" {stage} gemini-cli {MARKER}")
        assert ours[0]["timeout"] == timeout and timeout >= 5000  # milliseconds
    assert [group.get("matcher") for group in hooks["PreCompress"]] == ["manual"]
    assert settings["mcpServers"]["github"] == {"command": "github-mcp"}
    assert settings["mcpServers"]["sessionmem"] == {"command": sys.executable,
                                                    "args": ["-P", "-m", "sessionmem", "mcp"]}

    backups = sorted(gemini_dir.glob("settings.json.sessionmem-backup-*"))
    assert backups and json.loads(backups[0].read_text()) == USER_SETTINGS  # the first: the file as it was
    assert _install() == 0  # again: nothing to change, so nothing written and no new backup
    assert sorted(gemini_dir.glob("settings.json.sessionmem-backup-*")) == backups


def test_uninstall_removes_exactly_what_install_added(gemini_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _install() == 0
    assert main(["uninstall", "--agent", "gemini-cli"]) == 0
    out = capsys.readouterr().out
    assert f"removed {len(STAGES)} hook(s)" in out and "removed the MCP server" in out
    assert _settings(gemini_dir) == USER_SETTINGS
    assert main(["uninstall", "--agent", "gemini-cli"]) == 0
    assert "no sessionmem hooks" in capsys.readouterr().out


def test_an_mcp_server_of_our_name_that_is_not_ours_is_left_alone(gemini_dir: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    theirs = {**USER_SETTINGS, "mcpServers": {"sessionmem": {"command": "/opt/other/server"}}}
    (gemini_dir / "settings.json").write_text(json.dumps(theirs))
    assert _install() == 1
    assert "not sessionmem's; left as it is" in capsys.readouterr().err
    assert main(["uninstall", "--agent", "gemini-cli"]) == 0
    assert _settings(gemini_dir)["mcpServers"] == {"sessionmem": {"command": "/opt/other/server"}}


def test_a_settings_file_that_is_not_json_is_left_untouched(gemini_dir: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    (gemini_dir / "settings.json").write_text("{ not json")
    assert _install() == 1
    assert "is not valid JSON" in capsys.readouterr().err
    assert (gemini_dir / "settings.json").read_text() == "{ not json"


def test_install_and_doctor_say_when_the_gemini_cli_would_not_run_the_hooks(gemini_dir: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    settings = {**USER_SETTINGS, "hooksConfig": {"enabled": False}}
    (gemini_dir / "settings.json").write_text(json.dumps(settings))
    assert _install() == 1
    assert "runs no hook while hooksConfig.enabled is false" in capsys.readouterr().err

    found = wiring()
    command = found.stages["AfterTool"]
    settings = {**_settings(gemini_dir), "hooksConfig": {"enabled": True, "disabled": [command]}}
    (gemini_dir / "settings.json").write_text(json.dumps(settings))
    (gemini_dir / "trustedFolders.json").write_text(json.dumps({str(Path.cwd()): "DO_NOT_TRUST"}))
    main(["doctor"])
    out = capsys.readouterr().out
    assert "[ok] Gemini CLI hooks in" in out and "all events wired" in out
    assert "[!!] the Gemini CLI skips sessionmem's AfterTool hook(s)" in out
    assert f"[!!] the Gemini CLI runs no hook here: you did not trust {Path.cwd()}" in out

    (gemini_dir / "trustedFolders.json").write_text(json.dumps({str(Path.cwd().parent / "x"): "TRUST_PARENT"}))
    main(["doctor"])
    assert "runs no hook here" not in capsys.readouterr().out


def test_folder_trust_is_decided_by_the_longest_rule_that_holds_the_folder(tmp_path: Path) -> None:
    work = tmp_path / "work"
    project = work / "project"
    project.mkdir(parents=True)
    assert folder_trust(project, {}) is None
    assert folder_trust(project, {str(work): "TRUST_FOLDER"}) is True
    assert folder_trust(project, {str(work): "TRUST_FOLDER", str(project): "DO_NOT_TRUST"}) is False
    assert folder_trust(project, {str(project / "sibling"): "TRUST_PARENT"}) is True
    assert folder_trust(work, {str(project): "TRUST_FOLDER"}) is None
    assert folder_trust(tmp_path / "workshop", {str(work): "TRUST_FOLDER"}) is None
