"""``sessionmem install`` and ``uninstall``: wiring the hooks and the MCP server into a coding agent, and out again.

Claude Code (the default) is wired by :mod:`sessionmem.install`; ``--agent codex`` by
:mod:`sessionmem.agents.codex`; ``--agent gemini-cli`` by :mod:`sessionmem.agents.gemini`; ``--agent opencode`` by
:mod:`sessionmem.agents.opencode`. Each says what it changed, where the backups are, and, when
something is left to the user (a hook Codex does not trust yet), exactly what to do.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sessionmem.protocol import routes
from sessionmem.protocol.agents import CLAUDE_CODE, CODEX, GEMINI_CLI, OPENCODE
from sessionmem.protocol.platform_support import unsupported_platform

INSTALLABLE = (CLAUDE_CODE, CODEX, GEMINI_CLI, OPENCODE)


def add_agent_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agent", choices=INSTALLABLE, default=CLAUDE_CODE,
                        help="the coding agent to wire (default: claude-code)")
    parser.add_argument("--codex", metavar="PATH", help="the Codex CLI to ask (default: `codex` on PATH)")


def cmd_install(args: argparse.Namespace, *, platform: str = sys.platform) -> int:
    unsupported = unsupported_platform(platform)
    if unsupported:
        print(f"sessionmem: not installed: {unsupported}", file=sys.stderr)
        return 1
    from sessionmem.install import InstallError

    try:
        if getattr(args, "agent", CLAUDE_CODE) == CODEX:
            return _install_codex(args)
        if getattr(args, "agent", CLAUDE_CODE) == GEMINI_CLI:
            return _install_gemini(args)
        if getattr(args, "agent", CLAUDE_CODE) == OPENCODE:
            return _install_opencode(args)
        _install_claude_code(args)
    except InstallError as exc:
        print(f"sessionmem: {exc}", file=sys.stderr)
        return 1
    print("sessionmem: the next Claude Code session starts the worker and records its work")
    return 0


def _install_claude_code(args: argparse.Namespace) -> None:
    from sessionmem.install import install, install_mcp

    path, backup = install()
    print(f"sessionmem: hooks installed in {path}" + (f" (backup: {backup})" if backup else ""))
    if args.mcp:
        path, backup, registered = install_mcp()
        if registered:
            print(f"sessionmem: MCP server `{routes.MCP_SERVER_NAME}` (search, timeline, get_observations) "
                  f"registered in {path}" + (f" (backup: {backup})" if backup else ""))
        else:
            print(f"sessionmem: {path} already has an MCP server named `{routes.MCP_SERVER_NAME}` that is not "
                  f"sessionmem's; left as it is", file=sys.stderr)


def _install_codex(args: argparse.Namespace) -> int:
    from sessionmem.agents.codex import codex_home, find_codex, install_codex

    codex = find_codex(getattr(args, "codex", None))
    found = install_codex(codex, trust=getattr(args, "trust", True), mcp=args.mcp)
    print(f"sessionmem: Codex hooks installed in {found.hooks_file}"
          + (f" (backup: {found.backup})" if found.backup else ""))
    if found.problem:
        print(f"sessionmem: could not ask Codex ({found.problem}). Codex skips a hook until you trust it: start "
              f"`codex`, type /hooks and trust the {len(found.stages)} sessionmem hooks"
              + (", and run `sessionmem install --agent codex` again to register the MCP server" if args.mcp else ""),
              file=sys.stderr)
        return 1
    if found.untrusted:
        print(f"sessionmem: Codex does not trust sessionmem's {', '.join(sorted(found.untrusted))} hook(s) yet: "
              f"start `codex`, type /hooks and trust them (Codex runs no untrusted hook)", file=sys.stderr)
    else:
        print(f"sessionmem: Codex trusts the {len(found.trusted)} sessionmem hooks (their definitions as written; "
              f"a changed one needs trusting again: run this command again)")
    if args.mcp:
        _say_mcp(codex_home() / "config.toml", foreign=found.foreign_mcp, registered=found.mcp is not None)
    if found.untrusted or found.foreign_mcp:
        return 1
    print("sessionmem: the next Codex session starts the worker and records its work")
    return 0


def _install_gemini(args: argparse.Namespace) -> int:
    from sessionmem.agents.gemini import install_gemini, trusted_folders_path

    found = install_gemini(mcp=args.mcp)
    print(f"sessionmem: Gemini CLI hooks installed in {found.settings_file}"
          + (f" (backup: {found.backup})" if found.backup else ""))
    if args.mcp:
        _say_mcp(found.settings_file, foreign=found.foreign_mcp, registered=found.mcp is not None)
    if found.hooks_disabled:
        print(f"sessionmem: the Gemini CLI runs no hook while hooksConfig.enabled is false in "
              f"{found.settings_file}: set it to true", file=sys.stderr)
        return 1
    print("sessionmem: the Gemini CLI runs hooks only in folders you trust (it asks the first time; "
          f"{trusted_folders_path()} keeps your answers)")
    if found.foreign_mcp:
        return 1
    print("sessionmem: the next Gemini CLI session starts the worker and records its work")
    return 0


def _install_opencode(args: argparse.Namespace) -> int:
    from sessionmem.agents.opencode import install_opencode, mcp_server_entry

    found = install_opencode(mcp=args.mcp)
    print(f"sessionmem: OpenCode plugin installed in {found.plugin_file}"
          + (f" (backup: {found.backup})" if found.backup else ""))
    if args.mcp:
        if found.jsonc_only:
            print(f"sessionmem: OpenCode's configuration is {found.config_file.with_suffix('.jsonc')}, left as it is: "
                  f"add the MCP server yourself: \"mcp\": {{\"{routes.MCP_SERVER_NAME}\": "
                  f"{json.dumps(mcp_server_entry())}}}", file=sys.stderr)
        else:
            _say_mcp(found.config_file, foreign=found.foreign_mcp, registered=found.mcp is not None)
        if found.foreign_mcp or found.jsonc_only:
            return 1
    print("sessionmem: the next OpenCode session starts the worker and records its work")
    return 0


def _say_mcp(config_file: Path, *, foreign: bool, registered: bool) -> None:
    """What install did with the MCP server in an agent's ``config_file`` (one that keeps servers by name)."""
    if foreign:
        print(f"sessionmem: {config_file} already has an MCP server named `{routes.MCP_SERVER_NAME}` "
              f"that is not sessionmem's; left as it is", file=sys.stderr)
    elif registered:
        print(f"sessionmem: MCP server `{routes.MCP_SERVER_NAME}` (search, timeline, get_observations) "
              f"registered in {config_file}")


def cmd_uninstall(args: argparse.Namespace) -> int:
    from sessionmem.install import InstallError

    try:
        if getattr(args, "agent", CLAUDE_CODE) == CODEX:
            return _uninstall_codex(args)
        if getattr(args, "agent", CLAUDE_CODE) == GEMINI_CLI:
            return _uninstall_gemini()
        if getattr(args, "agent", CLAUDE_CODE) == OPENCODE:
            return _uninstall_opencode()
        _uninstall_claude_code()
    except InstallError as exc:
        print(f"sessionmem: {exc}", file=sys.stderr)
        return 1
    return 0


def _uninstall_claude_code() -> None:
    from sessionmem.install import uninstall, uninstall_mcp

    path, removed, backup = uninstall()
    if not removed:
        print(f"sessionmem: no sessionmem hooks in {path}")
    else:
        print(f"sessionmem: removed {removed} hook(s) from {path} (backup: {backup})")
    path, removed_server, backup = uninstall_mcp()
    if removed_server:
        print(f"sessionmem: removed the MCP server `{routes.MCP_SERVER_NAME}` from {path} (backup: {backup})")


def _uninstall_codex(args: argparse.Namespace) -> int:
    from sessionmem.agents.codex import find_codex, uninstall_codex

    path, removed, backup, problem = uninstall_codex(find_codex(getattr(args, "codex", None)))
    print(f"sessionmem: removed {removed} hook(s) from {path} (backup: {backup})" if removed
          else f"sessionmem: no sessionmem hooks in {path}")
    if problem:
        print(f"sessionmem: {problem}", file=sys.stderr)
        return 1
    return 0


def _uninstall_gemini() -> int:
    from sessionmem.agents.gemini import uninstall_gemini

    path, removed, removed_server, backup = uninstall_gemini()
    print(f"sessionmem: removed {removed} hook(s) from {path} (backup: {backup})" if removed
          else f"sessionmem: no sessionmem hooks in {path}")
    if removed_server:
        print(f"sessionmem: removed the MCP server `{routes.MCP_SERVER_NAME}` from {path}")
    return 0


def _uninstall_opencode() -> int:
    from sessionmem.agents.opencode import uninstall_opencode

    found, removed_plugin, removed_server, backup = uninstall_opencode()
    print(f"sessionmem: removed the OpenCode plugin {found.plugin_file}" if removed_plugin
          else f"sessionmem: no sessionmem plugin in {found.plugin_file.parent}")
    if removed_server:
        print(f"sessionmem: removed the MCP server `{routes.MCP_SERVER_NAME}` from {found.config_file} "
              f"(backup: {backup})")
    return 0
