"""Wiring sessionmem into the Gemini CLI, and taking it out again: the hooks and the MCP server.

**Hooks** go in the Gemini CLI's user settings, ``~/.gemini/settings.json``
(``$GEMINI_CLI_HOME/.gemini/settings.json`` when that is set), under ``hooks``: the shape of
Claude Code's settings hooks, so :func:`sessionmem.install.install` writes them, each the same hook
entry (:func:`sessionmem.install.hook_command`) with the Gemini CLI's event name as its stage and
``gemini-cli`` after it, marked by :data:`sessionmem.install.MARKER`, so ``uninstall`` removes
exactly what ``install`` added. Timeouts are milliseconds, as the Gemini CLI reads them. A backup
is kept of every file changed; the rest of the file (the user's model, auth, other hooks) is kept
as it was.

**The MCP server** goes in the same file, ``mcpServers.sessionmem``, and is recognized as ours by
its arguments (``-m sessionmem mcp``), as in :mod:`sessionmem.install`: an entry of that name that
runs something else is the user's, and is neither replaced nor removed.

What the Gemini CLI does with them (verified with the version pinned in ``e2e/``; see
``tests/fixtures/gemini/hooks/README.md``): it runs hooks with no opt-in (``hooksConfig.enabled``
is on by default) but none at all in a folder the user has not trusted, and none the user
disabled by name (``hooksConfig.disabled``): :func:`wiring` says which of these applies.

Error handling:
    A settings file that is not a JSON object (or whose ``hooks`` or ``mcpServers`` is not one)
    raises :class:`~sessionmem.install.InstallError` and is left untouched.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sessionmem.install import (
    MCP_ARGS,
    InstallError,
    Stages,
    hook_command,
    install,
    install_mcp,
    installed_mcp,
    installed_stages,
    load_json_object,
    resolved,
    uninstall,
    uninstall_mcp,
)
from sessionmem.protocol.agents import GEMINI_CLI
from sessionmem.protocol.routes import MCP_SERVER_NAME

# The Gemini CLI's events sessionmem listens to (the adapter maps them to the contract: BeforeAgent is a
# UserPromptSubmit, AfterTool a PostToolUse, AfterAgent a Stop); timeouts in milliseconds, as the Gemini CLI
# reads them: SessionStart may start the worker. A lifecycle matcher is an exact string: PreCompress listens
# to /compress only ("manual"), because the CLI fires an "auto" PreCompress before every model request,
# whether it then compresses or not.
STAGES: Stages = {
    "SessionStart": (None, 10_000),
    "BeforeAgent": (None, 5_000),
    "AfterTool": (None, 5_000),
    "AfterAgent": (None, 5_000),
    "PreCompress": ("manual", 5_000),
    "SessionEnd": (None, 5_000),
}
TRUSTED_LEVELS = ("TRUST_FOLDER", "TRUST_PARENT")


def gemini_home(environ: dict[str, str] | None = None) -> Path:
    """The Gemini CLI's configuration folder: ``$GEMINI_CLI_HOME/.gemini``, else ``~/.gemini``."""
    env = os.environ if environ is None else environ
    home = env.get("GEMINI_CLI_HOME") or env.get("HOME") or str(Path.home())
    return Path(home) / ".gemini"


def settings_path() -> Path:
    return gemini_home() / "settings.json"


def trusted_folders_path() -> Path:
    """Where the Gemini CLI records the folders its user trusts (``$GEMINI_CLI_TRUSTED_FOLDERS_PATH`` moves it)."""
    moved = os.environ.get("GEMINI_CLI_TRUSTED_FOLDERS_PATH")
    return Path(moved) if moved else gemini_home() / "trustedFolders.json"


def mcp_server_entry(*, python: str | None = None) -> dict[str, Any]:
    """The ``mcpServers`` entry that runs ``sessionmem mcp`` with this interpreter (a ``command`` is a stdio
    server to the Gemini CLI: no ``type``, which it reads only beside a ``url``)."""
    return {"command": python or sys.executable, "args": list(MCP_ARGS)}


@dataclass
class GeminiWiring:
    """What the Gemini CLI has of sessionmem, read from its settings: hooks written (stage -> command), the MCP
    server, and what keeps the hooks from running (``hooksConfig``, the folder's trust)."""

    settings_file: Path
    stages: dict[str, str] = field(default_factory=dict)
    mcp: dict[str, Any] | None = None  # our entry
    foreign_mcp: bool = False  # an entry of our name that is not ours
    hooks_disabled: bool = False  # hooksConfig.enabled is false: no hook runs
    disabled_stages: list[str] = field(default_factory=list)  # ours, disabled by name (hooksConfig.disabled)
    folder_trusted: bool | None = None  # the folder asked about, per trustedFolders.json; None: no rule says
    folder_trust_enforced: bool = True  # security.folderTrust.enabled is not false
    backup: Path | None = None

    @property
    def missing(self) -> list[str]:
        return [stage for stage in STAGES if stage not in self.stages]


def folder_trust(folder: Path, rules: dict[str, Any]) -> bool | None:
    """Whether the Gemini CLI trusts ``folder`` by its trusted-folders ``rules`` (path -> level), as it decides:
    the longest rule whose folder (``TRUST_PARENT``: its parent) holds ``folder`` wins; None when none does."""
    target = os.path.realpath(folder)
    best, verdict = -1, None
    for rule, level in rules.items():
        base_path = resolved(os.path.dirname(rule) if level == "TRUST_PARENT" else rule)
        if base_path is None:
            continue  # names no folder
        base = str(base_path)
        inside = target == base or target.startswith(base.rstrip(os.sep) + os.sep)
        if inside and len(rule) > best:
            best, verdict = len(rule), level
    if verdict is None:
        return None
    return verdict in TRUSTED_LEVELS


def _object(settings: dict[str, Any], key: str) -> dict[str, Any]:
    value = settings.get(key)
    return value if isinstance(value, dict) else {}


def wiring(folder: Path | None = None) -> GeminiWiring:
    """What the Gemini CLI's user settings hold of sessionmem, and whether its hooks run in ``folder`` (default:
    here)."""
    path = settings_path()
    settings = load_json_object(path)
    found = GeminiWiring(path, stages=installed_stages(path))
    servers = settings.get("mcpServers")
    found.mcp = installed_mcp(path)
    found.foreign_mcp = found.mcp is None and isinstance(servers, dict) and MCP_SERVER_NAME in servers
    hooks_config = _object(settings, "hooksConfig")
    found.hooks_disabled = hooks_config.get("enabled") is False
    disabled = hooks_config.get("disabled")
    found.disabled_stages = [stage for stage, command in found.stages.items()
                             if isinstance(disabled, list) and command in disabled]
    found.folder_trust_enforced = _object(_object(settings, "security"), "folderTrust").get("enabled") is not False
    try:
        rules = load_json_object(trusted_folders_path())
    except InstallError:
        rules = {}
    found.folder_trusted = folder_trust(folder or Path.cwd(), rules)
    return found


def install_gemini(*, mcp: bool = True) -> GeminiWiring:
    """Write sessionmem's hooks (and, with ``mcp``, its MCP server) into the Gemini CLI's user settings; returns
    what it has afterwards, with the backup of the first change made."""
    path, backup = install(settings_path(), stages=STAGES, agent=GEMINI_CLI)
    if mcp:
        _, mcp_backup, _ = install_mcp(path, entry=mcp_server_entry())
        backup = backup or mcp_backup  # the first one holds the file as it was before
    found = wiring()
    found.backup = backup
    return found


def uninstall_gemini() -> tuple[Path, int, bool, Path | None]:
    """Remove sessionmem's hooks and MCP server from the Gemini CLI's user settings; returns (settings file,
    hooks removed, whether the MCP server was removed, the backup of the first change)."""
    path, removed, backup = uninstall(settings_path())
    _, removed_server, mcp_backup = uninstall_mcp(path)
    return path, removed, removed_server, backup or mcp_backup


def hook_commands() -> dict[str, str]:
    """stage -> the command this install writes for it."""
    return {stage: hook_command(stage, agent=GEMINI_CLI) for stage in STAGES}
