"""Wiring sessionmem into the Codex CLI, and taking it out again: hooks, their trust, the MCP server.

**Hooks** go in ``$CODEX_HOME/hooks.json`` (``~/.codex/hooks.json``), which has the shape of
Claude Code's settings hooks: the same entry (:func:`sessionmem.install.hook_command`) with the
agent's name after the stage, marked by :data:`sessionmem.install.MARKER`, so ``uninstall``
removes exactly what ``install`` added. A backup is kept of every file changed.

**Trust.** Codex runs a hook someone else wrote only once its user trusted that exact
definition, and skips an untrusted one without a word. ``sessionmem install --agent codex`` is
the user's say-so for sessionmem's own hooks, so it asks Codex itself
(:mod:`.codex_app_server`) which hooks it found and trusts those, and only those, that are
sessionmem's: in the user's ``hooks.json`` this install wrote, with exactly the command written
there. Hooks of a project's ``.codex/`` (a cloned repository's) are never trusted by sessionmem,
whatever they run. ``--no-trust`` leaves it to the user (Codex's ``/hooks``).

**The MCP server** goes in Codex's ``config.toml`` as ``[mcp_servers.sessionmem]``, written by
Codex (``config/batchWrite``); an entry of that name that runs something else is the user's and
is left alone.

Error handling:
    A hook file that is not a JSON object raises :class:`~sessionmem.install.InstallError`, left
    untouched. When Codex cannot be asked (not installed, fails), the hooks are still written and
    the result says what the user must do by hand; nothing half-trusted is left behind.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sessionmem.agents.codex_app_server import CodexAppServer, CodexUnavailable, ListedHook
from sessionmem.install import MCP_ARGS, Stages, hook_command, install, installed_stages, resolved, uninstall
from sessionmem.protocol.agents import CODEX
from sessionmem.protocol.client_settings import DATA_DIR_ENV, ENV
from sessionmem.protocol.routes import MCP_SERVER_NAME

# Codex's events sessionmem listens to; timeouts are seconds, as Codex reads them, and SessionEnd's at
# most 3 (Codex clamps a longer one, and says so as an error). Codex has no PostToolUseFailure (a failed
# command is a PostToolUse with its output; a failed patch fires none) and reports a subagent in its own
# session, so neither has a stage here.
STAGES: Stages = {
    "SessionStart": ("startup|resume|clear|compact", 10),
    "UserPromptSubmit": (None, 5),
    "PostToolUse": (None, 5),
    "Stop": (None, 5),
    "PreCompact": (None, 5),
    "SessionEnd": (None, 3),
}
TRUSTED = "trusted"
MCP_KEY = f"mcp_servers.{MCP_SERVER_NAME}"
# Codex starts an MCP server with a few variables of its own environment only: these it passes on, so the
# server asks the worker of the data dir (and port) the hooks use when the user's environment sets them.
MCP_ENV_VARS = [DATA_DIR_ENV, *ENV]


def codex_home(environ: dict[str, str] | None = None) -> Path:
    """Codex's configuration folder: ``$CODEX_HOME``, else ``~/.codex``."""
    environ = os.environ if environ is None else environ  # type: ignore[assignment]
    assert environ is not None
    home = environ.get("CODEX_HOME")
    return Path(home) if home else Path(environ.get("HOME") or Path.home()) / ".codex"


def hooks_path() -> Path:
    return codex_home() / "hooks.json"


def find_codex(explicit: str | None = None) -> str | None:
    """The ``codex`` binary to ask: ``explicit``, else the one on PATH."""
    return explicit or shutil.which("codex")


@dataclass
class CodexWiring:
    """What Codex has of sessionmem: hooks written (stage -> command), which of them Codex trusts, the MCP
    server; ``problem`` says why Codex could not be asked (then ``trusted`` and ``mcp`` are unknown)."""

    hooks_file: Path
    stages: dict[str, str] = field(default_factory=dict)
    trusted: set[str] = field(default_factory=set)  # stages Codex trusts
    untrusted: set[str] = field(default_factory=set)  # stages Codex found and does not trust (or found changed)
    mcp: dict[str, Any] | None = None  # our entry, as Codex reads it
    foreign_mcp: bool = False  # an entry of our name that is not ours
    problem: str = ""
    backup: Path | None = None

    @property
    def missing(self) -> list[str]:
        return [stage for stage in STAGES if stage not in self.stages]


def _ours(hooks: list[ListedHook], hooks_file: Path) -> list[ListedHook]:
    """The hooks Codex lists that are exactly what this install wrote: in the user's hook file, with our command."""
    commands = {hook_command(stage, agent=CODEX) for stage in STAGES}
    ours = hooks_file.resolve()
    return [hook for hook in hooks if hook.command in commands and hook.source == "user"
            and hook.source_path is not None and resolved(hook.source_path) == ours]


def _stage_of(hook: ListedHook) -> str:
    event = hook.event_name or ""
    return event[:1].upper() + event[1:]


def mcp_server_entry() -> dict[str, Any]:
    """Codex's ``[mcp_servers.sessionmem]`` table: ``sessionmem mcp`` with this interpreter, the settings passed on."""
    return {"command": sys.executable, "args": list(MCP_ARGS), "env_vars": list(MCP_ENV_VARS)}


def _our_mcp(server: Any) -> bool:
    args = server.get("args") if isinstance(server, dict) else None
    return isinstance(args, list) and args[-3:] == list(MCP_ARGS[-3:])


def _mcp_servers(app: CodexAppServer) -> dict[str, Any]:
    servers = app.config().get("mcp_servers")
    return servers if isinstance(servers, dict) else {}


def _environment() -> dict[str, str]:
    return dict(os.environ, CODEX_HOME=str(codex_home()))


def wiring(codex: str | None, cwd: str | None = None) -> CodexWiring:
    """What Codex has of sessionmem, as Codex itself sees it for a session in ``cwd`` (default: here)."""
    path = hooks_path()
    found = CodexWiring(path, stages=installed_stages(path))
    if codex is None:
        found.problem = "the Codex CLI (`codex`) is not on PATH"
        return found
    try:
        with CodexAppServer(codex, env=_environment()) as app:
            for hook in _ours(app.hooks(cwd or os.getcwd()), path):
                (found.trusted if hook.trust_status == TRUSTED else found.untrusted).add(_stage_of(hook))
            server = _mcp_servers(app).get(MCP_SERVER_NAME)
    except CodexUnavailable as exc:
        found.problem = str(exc)
        return found
    found.mcp = server if _our_mcp(server) else None
    found.foreign_mcp = server is not None and not _our_mcp(server)
    return found


def install_codex(codex: str | None, *, trust: bool = True, mcp: bool = True) -> CodexWiring:
    """Write sessionmem's hooks into Codex's ``hooks.json``, then have Codex trust them (``trust``) and register
    the MCP server (``mcp``); returns what Codex has afterwards."""
    path, backup = install(hooks_path(), stages=STAGES, agent=CODEX)
    if codex is not None and (trust or mcp):
        try:
            with CodexAppServer(codex, env=_environment()) as app:
                edits: list[dict[str, Any]] = []
                if trust:
                    pending = [hook for hook in _ours(app.hooks(str(codex_home())), path)
                               if hook.trust_status != TRUSTED and hook.current_hash and hook.key]
                    if pending:
                        edits.append({"keyPath": "hooks.state", "mergeStrategy": "upsert",
                                      "value": {hook.key: {"trusted_hash": hook.current_hash} for hook in pending}})
                if mcp:
                    present = _mcp_servers(app).get(MCP_SERVER_NAME)
                    entry = mcp_server_entry()
                    if present is None or (_our_mcp(present) and any(present.get(key) != value
                                                                     for key, value in entry.items())):
                        edits.append({"keyPath": MCP_KEY, "mergeStrategy": "replace", "value": entry})
                if edits:
                    app.write_config(edits)
        except CodexUnavailable:
            pass  # wiring() below says what Codex could not be asked, and the caller tells the user
    found = wiring(codex, str(codex_home()))
    found.backup = backup
    return found


def uninstall_codex(codex: str | None) -> tuple[Path, int, Path | None, str]:
    """Remove sessionmem's hooks from Codex's ``hooks.json``, the trust Codex recorded for them and the MCP server;
    returns (hook file, hooks removed, backup, what could not be done)."""
    path = hooks_path()
    problem = ""
    if codex is not None:
        try:
            with CodexAppServer(codex, env=_environment()) as app:
                keys = [hook.key for hook in _ours(app.hooks(str(codex_home())), path) if hook.key]
                edits = [{"keyPath": f'hooks.state."{key}"', "mergeStrategy": "replace", "value": None}
                         for key in keys if '"' not in key]
                if _our_mcp(_mcp_servers(app).get(MCP_SERVER_NAME)):
                    edits.append({"keyPath": MCP_KEY, "mergeStrategy": "replace", "value": None})
                if edits:
                    app.write_config(edits)
        except CodexUnavailable as exc:
            problem = f"{exc}: Codex's config.toml keeps sessionmem's MCP server and hook trust, if any"
    else:
        problem = "the Codex CLI (`codex`) is not on PATH: Codex's config.toml keeps sessionmem's MCP server, if any"
    path, removed, backup = uninstall(path)
    return path, removed, backup, problem
