"""An agent's settings file is the user's, and may hold anything: install, uninstall and the checks that read it
(``doctor``, ``install --agent``) answer with a clear error or do their work, never a traceback.

For Claude Code's ``settings.json`` and ``~/.claude.json`` (the shape Codex's ``hooks.json`` shares), the
Gemini CLI's ``settings.json`` and ``trustedFolders.json``, and OpenCode's ``opencode.json``: values of any
type wherever the files have structure (hypothesis), ours among them now and then. Each step either works or
raises :class:`~sessionmem.install.InstallError`; an install that worked is found whole, and after uninstall
nothing of ours is left while the user's other settings are as they were.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sessionmem.agents import gemini, opencode
from sessionmem.install import (
    STAGES,
    InstallError,
    hook_command,
    install,
    install_mcp,
    installed_mcp,
    installed_stages,
    mcp_server_entry,
    uninstall,
    uninstall_mcp,
)
from sessionmem.protocol.routes import MCP_SERVER_NAME

from .test_fuzz import nested

T = TypeVar("T")
FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
OTHER_SETTINGS = ("model", "permissions", "hooksConfig", "security")  # the user's, never touched


# Where the file has structure, a value of another type: what an editor, a merge or another tool may leave.
wrong = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8), st.lists(st.none(), max_size=2),
                  st.dictionaries(st.text(max_size=4), st.none(), max_size=2), nested)


def either(structured: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``structured`` most of the time, else a value of any other type."""
    return st.one_of(structured, structured, wrong)


def hook_files(stages: list[str], ours: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A hook settings file's JSON: ``hooks`` by stage, groups, hooks; ``mcpServers``; the user's other keys;
    in each place, now and then, a value of another type; ours (a hook of ``stages``, the MCP entry ``ours``)
    among them."""
    hook = either(st.fixed_dictionaries({"type": either(st.just("command")),
                                         "command": either(st.sampled_from([hook_command(s) for s in stages]))},
                                        optional={"timeout": wrong}))
    group = either(st.fixed_dictionaries({"hooks": either(st.lists(hook, min_size=1, max_size=3))},
                                         optional={"matcher": wrong}))
    hooks = either(st.dictionaries(st.sampled_from([*stages, "Other"]), either(st.lists(group, min_size=1, max_size=3)),
                                   min_size=1, max_size=4))
    servers = either(st.dictionaries(st.sampled_from([MCP_SERVER_NAME, "other"]), either(st.just(ours)),
                                     min_size=1, max_size=2))
    users = {key: wrong for key in OTHER_SETTINGS}
    with_hooks = st.fixed_dictionaries({"hooks": hooks}, optional={"mcpServers": servers, **users})
    return st.one_of(with_hooks, with_hooks, st.fixed_dictionaries({"mcpServers": servers}, optional=users), wrong)


def attempt(step: Callable[[], T]) -> T | None:
    """``step``'s answer, or None when it refused with a clear error."""
    try:
        return step()
    except InstallError as error:
        assert str(error), "an InstallError says what is wrong"
        return None


def write(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))


def others(path: Path) -> dict[str, Any]:
    """The user's settings in ``path`` that sessionmem has no business with."""
    data = json.loads(path.read_text()) if path.exists() else {}
    return {key: data[key] for key in OTHER_SETTINGS if isinstance(data, dict) and key in data}


def test_claude_code_settings_of_any_shape(tmp_path: Path) -> None:
    settings_file, user_config = tmp_path / "settings.json", tmp_path / ".claude.json"

    @FUZZ
    @given(hooks_json=hook_files(list(STAGES), mcp_server_entry()),
           config_json=hook_files(list(STAGES), mcp_server_entry()))
    @example(hooks_json={"hooks": {"SessionStart": [{"hooks": 5}, {"hooks": None}]}}, config_json={})
    def check(hooks_json: Any, config_json: Any) -> None:
        write(settings_file, hooks_json)
        write(user_config, config_json)
        kept = others(settings_file), others(user_config)
        attempt(lambda: installed_stages(settings_file))
        attempt(lambda: installed_mcp(user_config))
        if attempt(lambda: install(settings_file)) is not None:
            assert set(installed_stages(settings_file)) == set(STAGES)
        registered = attempt(lambda: install_mcp(user_config))
        if registered is not None and registered[2]:
            assert installed_mcp(user_config) == mcp_server_entry()
        attempt(lambda: uninstall(settings_file))
        attempt(lambda: uninstall_mcp(user_config))
        if attempt(lambda: installed_stages(settings_file)) is not None:
            assert installed_stages(settings_file) == {}
        assert (others(settings_file), others(user_config)) == kept

    check()


def test_gemini_cli_settings_of_any_shape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path))
    monkeypatch.delenv("GEMINI_CLI_TRUSTED_FOLDERS_PATH", raising=False)
    settings_file = gemini.settings_path()
    trusted_folders = either(st.dictionaries(st.one_of(st.sampled_from([str(tmp_path), "/", "\0"]), st.text(max_size=20)),
                                             either(st.sampled_from(gemini.TRUSTED_LEVELS))))

    @FUZZ
    @given(settings_json=hook_files(list(gemini.STAGES), gemini.mcp_server_entry()), trusted=trusted_folders)
    @example(settings_json={"hooks": {"BeforeAgent": [{"hooks": 5}]}}, trusted={"/\0": "TRUST_FOLDER"})
    def check(settings_json: Any, trusted: Any) -> None:
        write(settings_file, settings_json)
        write(gemini.trusted_folders_path(), trusted)
        kept = others(settings_file)
        attempt(gemini.wiring)
        wired = attempt(gemini.install_gemini)
        if wired is not None:
            assert not wired.missing
        attempt(gemini.uninstall_gemini)
        after = attempt(gemini.wiring)
        if after is not None:
            assert after.stages == {}
        assert others(settings_file) == kept

    check()


def test_opencode_config_of_any_shape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    config_file = opencode.config_path()
    servers = either(st.dictionaries(st.sampled_from([MCP_SERVER_NAME, "other"]),
                                     either(st.just(opencode.mcp_server_entry())), max_size=2))
    configs = either(st.fixed_dictionaries({}, optional={"mcp": servers, "plugin": wrong,
                                                         **{key: wrong for key in OTHER_SETTINGS}}))

    @FUZZ
    @given(config=configs, plugin=st.one_of(st.none(), st.just(opencode.plugin_source()), st.text(max_size=50)))
    def check(config: Any, plugin: str | None) -> None:
        write(config_file, config)
        plugin_file = opencode.plugin_path()
        plugin_file.unlink(missing_ok=True)
        if plugin is not None:
            plugin_file.parent.mkdir(parents=True, exist_ok=True)
            plugin_file.write_text(plugin)
        kept = others(config_file)
        attempt(opencode.wiring)
        wired = attempt(opencode.install_opencode)
        if wired is not None:
            assert wired.plugin and wired.plugin_current
        attempt(opencode.uninstall_opencode)
        after = attempt(opencode.wiring)
        if after is not None:
            assert after.mcp is None and not after.plugin
        assert others(config_file) == kept

    check()
