"""Wiring sessionmem into Claude Code, and taking it out again: the hooks and the MCP server.

**Hooks** go in ``settings.json``. Every command sessionmem adds ends with the shell
comment :data:`MARKER`, which is how ``uninstall`` removes exactly what ``install``
added and nothing else. Installing twice replaces our entries instead of adding more.

**The MCP server** goes in Claude Code's user-scope MCP configuration: the
``mcpServers`` object at the top of ``~/.claude.json`` (``$CLAUDE_CONFIG_DIR/.claude.json``
when that is set), where ``claude mcp add --scope user`` writes too. A JSON entry has
no room for a comment, so ours is recognized by its name, :data:`~sessionmem.protocol.routes.MCP_SERVER_NAME`,
*and* its arguments (``-m sessionmem mcp``): an entry of that name that runs something
else is the user's, and is neither replaced nor removed.

Before any change a file is copied to ``<name>.sessionmem-backup-<time>``, and the
new content replaces it atomically with the same permissions (``~/.claude.json`` is
private). Standard library only.

Error handling:
    A file that is not a JSON object raises :class:`InstallError` and is left
    untouched.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from sessionmem.protocol.agents import DEFAULT_AGENT
from sessionmem.protocol.claude_memory import claude_config_dir
from sessionmem.protocol.routes import MCP_SERVER_NAME

MARKER = "# sessionmem-hook"
# `-P`: the user's project directory is not put on sys.path, so a folder of theirs named
# `mcp` or `sessionmem` cannot shadow the packages the server imports.
MCP_ARGS = ("-P", "-m", "sessionmem", "mcp")

# stage -> (matcher or None, timeout in seconds)
Stages = dict[str, tuple[str | None, int]]
STAGES: Stages = {
    "SessionStart": ("startup|resume|clear|compact", 10),
    "UserPromptSubmit": (None, 5),
    "PostToolUse": ("*", 5),
    "PostToolUseFailure": ("*", 5),
    "Stop": (None, 5),
    "PreCompact": (None, 5),
    "SubagentStop": (None, 5),
    "SessionEnd": (None, 5),
}


class InstallError(Exception):
    pass


def claude_settings_path() -> Path:
    return claude_config_dir() / "settings.json"


def claude_user_config_path() -> Path:
    """Where Claude Code keeps user-scope MCP servers: ``$CLAUDE_CONFIG_DIR/.claude.json``, else ``~/.claude.json``."""
    config_dir = os.environ.get("CLAUDE_CONFIG_DIR")
    return (Path(config_dir) if config_dir else Path.home()) / ".claude.json"


def mcp_server_entry(*, python: str | None = None) -> dict[str, Any]:
    """The user-scope ``mcpServers`` entry that runs ``sessionmem mcp`` with this interpreter."""
    return {"type": "stdio", "command": python or sys.executable, "args": list(MCP_ARGS), "env": {}}


def _is_our_server(entry: Any) -> bool:
    args = entry.get("args") if isinstance(entry, dict) else None
    return isinstance(args, list) and args[-3:] == list(MCP_ARGS[-3:])


def hook_entry() -> Path:
    from sessionmem import hooks

    return Path(hooks.__path__[0]) / "entry.py"


def hook_command(stage: str, *, python: str | None = None, entry: Path | None = None,
                 agent: str = DEFAULT_AGENT) -> str:
    """The command a hook stage runs: the interpreter itself, never a shim; -S skips site (see hooks/entry.py).
    An agent other than Claude Code is named after the stage, so the hook knows whose payload it reads."""
    named = "" if agent == DEFAULT_AGENT else f" {agent}"
    return f'"{python or sys.executable}" -S "{entry or hook_entry()}" {stage}{named} {MARKER}'


def load_json_object(path: Path) -> dict[str, Any]:
    """A settings file's JSON object (empty when the file does not exist)."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except ValueError as exc:
        raise InstallError(f"{path} is not valid JSON ({exc}); fix or move it first") from None
    if not isinstance(data, dict):
        raise InstallError(f"{path} does not hold a JSON object")
    return data


def resolved(path: str) -> Path | None:
    """``path`` made absolute with its links followed, or None when it names nothing this system could
    (a NUL in it, say): the path read from another program's file or answer is not trusted to be one."""
    try:
        return Path(path).resolve()
    except (ValueError, OSError):
        return None


def _is_ours(hook: Any) -> bool:
    return isinstance(hook, dict) and str(hook.get("command", "")).rstrip().endswith(MARKER)


def _without_ours(settings: dict[str, Any]) -> tuple[dict[str, Any], int]:
    removed = 0
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        return dict(settings), 0  # a copy, like the other way out: callers change what they get
    cleaned: dict[str, Any] = {}
    for stage, groups in hooks.items():
        if not isinstance(groups, list):
            cleaned[stage] = groups
            continue
        kept_groups = []
        for group in groups:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                kept = [h for h in group["hooks"] if not _is_ours(h)]
                removed += len(group["hooks"]) - len(kept)
                if kept:
                    kept_groups.append({**group, "hooks": kept})
            else:
                kept_groups.append(group)
        if kept_groups:
            cleaned[stage] = kept_groups
    result = {**settings, "hooks": cleaned}
    if not cleaned:
        del result["hooks"]
    return result, removed


def _write(path: Path, settings: dict[str, Any]) -> Path | None:
    path.parent.mkdir(parents=True, exist_ok=True)
    backup = None
    if path.exists():
        stamp = time.strftime("%Y%m%d-%H%M%S")
        backup = path.with_name(f"{path.name}.sessionmem-backup-{stamp}")
        n = 1
        while backup.exists():  # never overwrite an earlier backup
            backup = path.with_name(f"{path.name}.sessionmem-backup-{stamp}-{n}")
            n += 1
        shutil.copy2(path, backup)
    tmp = path.with_name(path.name + ".sessionmem-tmp")
    tmp.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
    if path.exists():
        shutil.copymode(path, tmp)  # ~/.claude.json holds credentials and history: it stays private
    os.replace(tmp, path)
    return backup


def install(path: Path | None = None, *, stages: Stages = STAGES,
            agent: str = DEFAULT_AGENT) -> tuple[Path, Path | None]:
    """Add (or refresh) sessionmem's hooks; returns (settings path, backup path).

    ``path`` is Claude Code's settings file by default; another agent whose hook file has the same
    shape (Codex's ``hooks.json``) passes its own, its ``stages`` and its name."""
    path = path or claude_settings_path()
    before = load_json_object(path)
    hooks = before.get("hooks", {})
    if not isinstance(hooks, dict):
        raise InstallError(f"{path}: \"hooks\" is not a JSON object; fix or move it first")
    for stage in stages:
        if not isinstance(hooks.get(stage, []), list):
            raise InstallError(f"{path}: \"hooks\".{stage} is not a JSON list; fix or move it first")
    settings, _ = _without_ours(before)
    hooks = settings.setdefault("hooks", {})
    for stage, (matcher, timeout) in stages.items():
        command = hook_command(stage, agent=agent)
        group: dict[str, Any] = {"hooks": [{"type": "command", "command": command, "timeout": timeout}]}
        if matcher is not None:
            group = {"matcher": matcher, **group}
        hooks.setdefault(stage, []).append(group)
    if settings == before and path.exists():
        return path, None  # installed already, as it would be now: no write, no backup
    return path, _write(path, settings)


def uninstall(path: Path | None = None) -> tuple[Path, int, Path | None]:
    """Remove exactly the hooks sessionmem added; returns (path, hooks removed, backup)."""
    path = path or claude_settings_path()
    if not path.exists():
        return path, 0, None
    settings, removed = _without_ours(load_json_object(path))
    if not removed:
        return path, 0, None
    return path, removed, _write(path, settings)


def installed_stages(path: Path | None = None) -> dict[str, str]:
    """stage -> our command, as found in the settings file."""
    found: dict[str, str] = {}
    hooks = load_json_object(path or claude_settings_path()).get("hooks")
    if not isinstance(hooks, dict):
        return found
    for stage, groups in hooks.items():
        for group in groups if isinstance(groups, list) else []:
            inner = group.get("hooks") if isinstance(group, dict) else None
            for hook in inner if isinstance(inner, list) else []:
                if _is_ours(hook):
                    found[stage] = str(hook["command"])
    return found


def install_mcp(path: Path | None = None, *, entry: dict[str, Any] | None = None) -> tuple[Path, Path | None, bool]:
    """Register (or refresh) the MCP server at user scope; returns (config path, backup, registered).

    ``registered`` is false when an entry of our name that is not ours is there: it is kept. Another agent
    whose configuration has an ``mcpServers`` object of the same shape (the Gemini CLI's ``settings.json``)
    passes its file and the ``entry`` it reads.
    """
    path = path or claude_user_config_path()
    config = load_json_object(path)
    servers = config.get("mcpServers")
    if servers is not None and not isinstance(servers, dict):
        raise InstallError(f"{path}: mcpServers is not a JSON object")
    present = (servers or {}).get(MCP_SERVER_NAME)
    if present is not None and not _is_our_server(present):
        return path, None, False
    entry = entry or mcp_server_entry()
    if present == entry:
        return path, None, True  # nothing to change: no write, no backup
    config["mcpServers"] = {**(servers or {}), MCP_SERVER_NAME: entry}
    return path, _write(path, config), True


def uninstall_mcp(path: Path | None = None) -> tuple[Path, bool, Path | None]:
    """Remove the MCP server entry ``install_mcp`` added; returns (config path, removed, backup)."""
    path = path or claude_user_config_path()
    if not path.exists():
        return path, False, None
    config = load_json_object(path)
    servers = config.get("mcpServers")
    if not isinstance(servers, dict) or not _is_our_server(servers.get(MCP_SERVER_NAME)):
        return path, False, None
    kept = {name: entry for name, entry in servers.items() if name != MCP_SERVER_NAME}
    config = {key: value for key, value in config.items() if key != "mcpServers" or kept}
    if kept:
        config["mcpServers"] = kept
    return path, True, _write(path, config)


def installed_mcp(path: Path | None = None) -> dict[str, Any] | None:
    """Our MCP server entry in the user-scope configuration, if it is there."""
    servers = load_json_object(path or claude_user_config_path()).get("mcpServers")
    entry = servers.get(MCP_SERVER_NAME) if isinstance(servers, dict) else None
    return entry if _is_our_server(entry) else None
