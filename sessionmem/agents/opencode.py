"""Wiring sessionmem into OpenCode, and taking it out again: a plugin and the MCP server.

**The plugin** is ``sessionmem/agents/opencode_plugin.js``, written into OpenCode's global plugin
folder (``$XDG_CONFIG_HOME/opencode/plugins/sessionmem.js``, ``~/.config/opencode/...`` by default), which
OpenCode loads at start-up. It runs the same hook entry as the other agents' hooks
(:func:`sessionmem.install.hook_entry`, with this interpreter and ``-S``), the stage and ``opencode`` after
it; install fills both paths in. Its first line marks it as sessionmem's: a file of that name
without it is the user's, and neither replaced nor removed. A plugin changed since it was written
(another interpreter) is kept as a backup before it is rewritten.

**The MCP server** goes in OpenCode's global configuration, ``opencode.json`` in the same folder, as
``mcp.sessionmem`` (``type: local``, ``command: [python, -P, -m, sessionmem, mcp]``); OpenCode starts it
with its own environment, so the ``SESSIONMEM_*`` settings the plugin's hooks see reach it too. An
entry of that name that runs something else is left alone. A backup is kept of every file changed.

Error handling:
    A configuration file that is not a JSON object (or whose ``mcp`` is not one), or a plugin file of
    our name that is not ours, raises :class:`~sessionmem.install.InstallError` and is left untouched.
    OpenCode also reads ``opencode.jsonc``; when only that exists, the MCP server is not written
    (``jsonc_only`` says so) rather than lose its comments.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sessionmem.install import MCP_ARGS, InstallError, _write, hook_entry, load_json_object
from sessionmem.protocol.routes import MCP_SERVER_NAME

PLUGIN_MARKER = "// sessionmem-plugin:"
PLUGIN_NAME = "sessionmem.js"
_TEMPLATE = Path(__file__).with_name("opencode_plugin.js")
_PYTHON, _ENTRY = "__SESSIONMEM_PYTHON__", "__SESSIONMEM_ENTRY__"


def config_dir(environ: dict[str, str] | None = None) -> Path:
    """OpenCode's global configuration folder: ``$XDG_CONFIG_HOME/opencode``, else ``~/.config/opencode``."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or str(Path.home())) / ".config")
    return Path(base) / "opencode"


def plugin_path() -> Path:
    return config_dir() / "plugins" / PLUGIN_NAME


def config_path() -> Path:
    return config_dir() / "opencode.json"


def plugin_source(*, python: str | None = None, entry: Path | None = None) -> str:
    """The plugin as install writes it: the template with this interpreter and hook entry filled in."""
    template = _TEMPLATE.read_text(encoding="utf-8")
    return (template.replace(_PYTHON, json.dumps(python or sys.executable))
            .replace(_ENTRY, json.dumps(str(entry or hook_entry()))))


def mcp_server_entry(*, python: str | None = None) -> dict[str, Any]:
    """The ``mcp`` entry that runs ``sessionmem mcp`` with this interpreter, as OpenCode reads a local server."""
    return {"type": "local", "command": [python or sys.executable, *MCP_ARGS], "enabled": True}


def _is_our_server(entry: Any) -> bool:
    command = entry.get("command") if isinstance(entry, dict) else None
    return isinstance(command, list) and command[-3:] == list(MCP_ARGS[-3:])


def _is_our_plugin(path: Path) -> bool:
    try:
        with path.open(encoding="utf-8") as file:
            return file.readline().startswith(PLUGIN_MARKER)
    except (OSError, UnicodeDecodeError):
        return False


def _backup(path: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    backup, n = path.with_name(f"{path.name}.sessionmem-backup-{stamp}"), 1
    while backup.exists():  # never overwrite an earlier backup
        backup, n = path.with_name(f"{path.name}.sessionmem-backup-{stamp}-{n}"), n + 1
    shutil.copy2(path, backup)
    return backup


@dataclass
class OpenCodeWiring:
    """What OpenCode has of sessionmem: the plugin (whether it is as install would write it now) and the MCP
    server, read from its global configuration folder."""

    plugin_file: Path
    config_file: Path
    plugin: bool = False  # our plugin is there
    plugin_current: bool = False  # ... exactly as this install writes it
    foreign_plugin: bool = False  # a file of our name that is not ours
    mcp: dict[str, Any] | None = None  # our entry
    foreign_mcp: bool = False  # an entry of our name that is not ours
    jsonc_only: bool = False  # opencode.jsonc and no opencode.json: the MCP server is not written
    backup: Path | None = None


def _servers(config: dict[str, Any], path: Path) -> dict[str, Any]:
    servers = config.get("mcp")
    if servers is not None and not isinstance(servers, dict):
        raise InstallError(f"{path}: mcp is not a JSON object")
    return servers or {}


def wiring() -> OpenCodeWiring:
    """What OpenCode's global configuration folder holds of sessionmem."""
    found = OpenCodeWiring(plugin_path(), config_path())
    if found.plugin_file.exists():
        found.plugin = _is_our_plugin(found.plugin_file)
        found.foreign_plugin = not found.plugin
        found.plugin_current = found.plugin and found.plugin_file.read_text(encoding="utf-8") == plugin_source()
    found.jsonc_only = not found.config_file.exists() and found.config_file.with_suffix(".jsonc").exists()
    present = _servers(load_json_object(found.config_file), found.config_file).get(MCP_SERVER_NAME)
    found.mcp = present if _is_our_server(present) else None
    found.foreign_mcp = present is not None and found.mcp is None
    return found


def install_opencode(*, mcp: bool = True) -> OpenCodeWiring:
    """Write sessionmem's plugin (and, with ``mcp``, its MCP server) into OpenCode's global configuration;
    returns what it has afterwards, with the backup of the first change made."""
    found = wiring()
    if found.foreign_plugin:
        raise InstallError(f"{found.plugin_file} is not sessionmem's plugin; move it away first")
    backup = None
    if not found.plugin_current:
        found.plugin_file.parent.mkdir(parents=True, exist_ok=True)
        if found.plugin:
            backup = _backup(found.plugin_file)
        tmp = found.plugin_file.with_name(PLUGIN_NAME + ".sessionmem-tmp")
        tmp.write_text(plugin_source(), encoding="utf-8")
        os.replace(tmp, found.plugin_file)
    if mcp and not found.jsonc_only and not found.foreign_mcp and found.mcp != mcp_server_entry():
        config = load_json_object(found.config_file)
        config["mcp"] = {**_servers(config, found.config_file), MCP_SERVER_NAME: mcp_server_entry()}
        backup = _write(found.config_file, config) or backup
    after = wiring()
    after.backup = backup
    return after


def uninstall_opencode() -> tuple[OpenCodeWiring, bool, bool, Path | None]:
    """Remove exactly what install added: our plugin file and our MCP server entry; returns (what was there,
    whether the plugin was removed, whether the MCP server was, the backup of the configuration)."""
    found = wiring()
    removed_plugin = found.plugin
    if removed_plugin:
        found.plugin_file.unlink()
    backup = None
    if found.mcp is not None:
        config = load_json_object(found.config_file)
        kept = {name: entry for name, entry in _servers(config, found.config_file).items() if name != MCP_SERVER_NAME}
        config = {key: value for key, value in config.items() if key != "mcp" or kept}
        if kept:
            config["mcp"] = kept
        backup = _write(found.config_file, config)
    return found, removed_plugin, found.mcp is not None, backup
