"""The ``sessionmem`` command line: its parser and :func:`main`, the console script.

The commands live by what they do: :mod:`~sessionmem.cli.worker_commands` (serve, status,
stop, replay, backfill, open, mcp), :mod:`~sessionmem.cli.agent_commands` (install, uninstall: per
agent), :mod:`~sessionmem.cli.doctor` (doctor),
:mod:`~sessionmem.cli.search_commands` (search, show) and
:mod:`~sessionmem.cli.data_commands` (prune, export, import) and :mod:`~sessionmem.cli.team_commands`
(share push). Every command that asks the
worker does it through :func:`sessionmem.cli.client.call`, and fails with
:class:`~sessionmem.cli.client.CommandFailed`, which :func:`main` turns into a message and
an exit status.
"""

from __future__ import annotations

import argparse
import os
import sys

from sessionmem.cli import agent_commands, data_commands, doctor, search_commands, team_commands, worker_commands
from sessionmem.cli.client import CommandFailed, client_config, whole_number
from sessionmem.protocol.agents import CLAUDE_CODE, CODEX, GEMINI_CLI, OPENCODE
from sessionmem.protocol.datadir import private_umask
from sessionmem.settings import SettingsError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sessionmem", description="Persistent memory for Claude Code sessions.")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--data-dir", help="data directory (default ~/.sessionmem, env SESSIONMEM_DATA_DIR)")
        p.add_argument("--port", type=int, help="port on 127.0.0.1 of a worker to start or to ask (default 37777, env "
                                                "SESSIONMEM_PORT); the data dir's running worker is found on its own port")

    serve = sub.add_parser("serve", help="run the worker in the foreground")
    common(serve)
    serve.set_defaults(fn=worker_commands.cmd_serve)
    status = sub.add_parser("status", help="show whether the worker runs, and its state")
    common(status)
    status.set_defaults(fn=worker_commands.cmd_status)
    stop = sub.add_parser("stop", help="stop the running worker gracefully")
    common(stop)
    stop.add_argument("--timeout", type=float, default=None,
                      help="seconds to wait (default: the worker's shutdown_timeout_s + 5)")
    stop.set_defaults(fn=worker_commands.cmd_stop)
    replay = sub.add_parser("replay", help="re-queue the parked events of a failed session")
    common(replay)
    replay.add_argument("claude_session_id", help="the Claude session id")
    replay.set_defaults(fn=worker_commands.cmd_replay)
    install = sub.add_parser("install", help="wire the hooks into ~/.claude/settings.json (Codex: ~/.codex/hooks.json, "
                                             "Gemini CLI: ~/.gemini/settings.json) and register the MCP server "
                                             "(idempotent, with backups)")
    install.add_argument("--no-mcp", dest="mcp", action="store_false",
                         help="hooks only: do not register the MCP server (the plugin has its own)")
    install.add_argument("--no-trust", dest="trust", action="store_false",
                         help="Codex: do not have Codex trust sessionmem's hooks (trust them yourself in its /hooks)")
    agent_commands.add_agent_argument(install)
    install.set_defaults(fn=agent_commands.cmd_install)
    uninstall = sub.add_parser("uninstall", help="remove exactly the hooks and the MCP server `install` added")
    agent_commands.add_agent_argument(uninstall)
    uninstall.set_defaults(fn=agent_commands.cmd_uninstall)
    backfill = sub.add_parser("backfill", help="import past sessions from an agent's transcripts (idempotent)")
    backfill.add_argument("path", nargs="?", default=None,
                          help="a transcript or a directory of them (default: the agent's own, ~/.claude/projects, "
                               "$CODEX_HOME/sessions, ~/.gemini/tmp, ~/.local/share/opencode)")
    backfill.add_argument("--agent", choices=(CLAUDE_CODE, CODEX, GEMINI_CLI, OPENCODE), default=CLAUDE_CODE,
                          help=f"the coding agent whose transcripts they are (default: {CLAUDE_CODE})")
    common(backfill)
    backfill.add_argument("--workers", type=whole_number(1), default=4, help="sessions sent in parallel (default 4)")
    backfill.add_argument("--no-wait", dest="wait", action="store_false",
                          help="return once the events are accepted, without showing the vector index catch up")
    backfill.set_defaults(fn=worker_commands.cmd_backfill)
    open_page = sub.add_parser("open", help="log this browser in to the worker's pages (a single-use link)")
    common(open_page)
    open_page.add_argument("page", nargs="?", choices=("viewer", "debug"), default="viewer")
    open_page.add_argument("--print-only", action="store_true", help="print the link, do not start a browser")
    open_page.set_defaults(fn=worker_commands.cmd_open)
    doctor_command = sub.add_parser("doctor", help="check worker, hook wiring, data dir and compressor")
    common(doctor_command)
    doctor_command.set_defaults(fn=doctor.cmd_doctor)
    search_commands.add_commands(sub, common, client_config)
    data_commands.add_commands(sub, common, client_config)
    team_commands.add_commands(sub, common, client_config)
    mcp = sub.add_parser("mcp", help="serve memory search to Claude as an MCP server (stdio)")
    common(mcp)
    mcp.set_defaults(fn=worker_commands.cmd_mcp)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    private_umask()  # whatever a command creates in the data dir (spool files, say) is its owner's only
    try:
        code = args.fn(args)
        sys.stdout.flush()  # here, where a reader that went away is handled, not at exit
        return code
    except SettingsError as exc:
        print(f"sessionmem: {exc}", file=sys.stderr)
        return 2
    except CommandFailed as exc:
        print(f"sessionmem: {exc}", file=sys.stderr)
        return exc.code
    except BrokenPipeError:
        # The reader went away (`sessionmem search ... | head`): not an error worth a traceback.
        # Python would still fail flushing stdout at exit, so point it at nothing first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0

