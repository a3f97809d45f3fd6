"""Settings precedence: defaults < settings.json < environment < command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sessionmem.settings import DEFAULT_PORT, SettingsError, load_settings


def test_defaults(tmp_path: Path) -> None:
    settings = load_settings({"SESSIONMEM_DATA_DIR": str(tmp_path)})
    assert settings.port == DEFAULT_PORT and settings.host == "127.0.0.1"
    assert settings.compressor == "auto" and settings.model == "claude-haiku-4-5"
    assert settings.db_path == tmp_path / "sessionmem.db"
    assert (settings.max_restarts, settings.restart_window_s) == (5, 30.0)
    assert "TodoWrite" in settings.skip_tools


def test_file_then_environment_then_overrides(tmp_path: Path) -> None:
    (tmp_path / "settings.json").write_text(json.dumps({"port": 4000, "batch_size": 3, "skip_tools": ["Read"]}))
    env = {"SESSIONMEM_DATA_DIR": str(tmp_path), "SESSIONMEM_PORT": "5000", "SESSIONMEM_FAULT_INJECTION": "yes"}
    settings = load_settings(env)
    assert (settings.port, settings.batch_size, settings.skip_tools) == (5000, 3, ("Read",))
    assert settings.fault_injection is True
    assert load_settings(env, port=6000).port == 6000


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SESSIONMEM_PORT": "http"}, "SESSIONMEM_PORT: port must be int"),
        ({"SESSIONMEM_PORT": "70000"}, "port must be 0..65535"),
        ({"SESSIONMEM_COMPRESSOR": "gpt"}, "compressor must be one of"),
        ({"SESSIONMEM_FAULT_INJECTION": "maybe"}, "fault_injection must be bool"),
        ({"SESSIONMEM_CODE_WATCH": "-1"}, "code_watch_s must be >= 0"),
        ({"SESSIONMEM_CODE_WATCH": "nan"}, "code_watch_s must be >= 0"),
        ({"SESSIONMEM_CONTEXT_FILES": "-1"}, "context_files must be 0..context_observations"),
        ({"SESSIONMEM_CONTEXT_FILES": "60"}, "context_files must be 0..context_observations"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_settings({"SESSIONMEM_DATA_DIR": str(tmp_path), **env})


def test_bad_settings_file(tmp_path: Path) -> None:
    (tmp_path / "settings.json").write_text("{not json")
    with pytest.raises(SettingsError, match="cannot read settings"):
        load_settings({"SESSIONMEM_DATA_DIR": str(tmp_path)})
    (tmp_path / "settings.json").write_text(json.dumps({"prot": 1}))
    with pytest.raises(SettingsError, match="unknown setting 'prot'"):
        load_settings({"SESSIONMEM_DATA_DIR": str(tmp_path)})
