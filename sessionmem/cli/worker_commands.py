"""``sessionmem`` commands that run the worker: serve, status, stop, replay, backfill, open, mcp (wiring it
into the agents: :mod:`sessionmem.cli.agent_commands`; doctor's checks: :mod:`sessionmem.cli.doctor`).

The client commands (status, stop, replay, open) talk to the worker the way every
client does (:mod:`sessionmem.protocol`: its state file, its HTTP client, its one
delivery policy, with a command's patience, through :func:`sessionmem.cli.client.call`),
using only the standard library, so they start fast and work even when the worker's
dependencies are broken.
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import sys
import time
from typing import Any

from sessionmem.cli import data_commands, index_progress, team_commands
from sessionmem.cli.client import PROBE, CommandFailed, WorkerUnreachable, call, client_config, foreign
from sessionmem.cli.doctor import port_holder
from sessionmem.protocol import routes
from sessionmem.protocol.datadir import make_private
from sessionmem.protocol.delivery import NO_LIVE_WORKER, Patience
from sessionmem.protocol.environment import confine_process
from sessionmem.protocol.limits import printable_line
from sessionmem.protocol.oskit import process_alive, terminate_process, try_lock_file
from sessionmem.protocol.state import (
    INSTANCE_LOCK_FILE,
    SHUTDOWN_REPORT_FILE,
    WorkerState,
    read_state,
    starting_worker,
    verified_worker,
)
from sessionmem.settings import Settings, load_settings

STOP_MARGIN_S = 5.0  # beyond the worker's shutdown budget: interpreter exit, a loaded machine


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(data_dir=getattr(args, "data_dir", None), port=getattr(args, "port", None))


def _running_worker(settings: Settings) -> WorkerState | None:
    """The live worker of this data dir, or None."""
    return read_state(str(settings.data_dir))


def cmd_serve(args: argparse.Namespace) -> int:
    import apsw
    import trio

    from sessionmem.server.guard import is_loopback
    from sessionmem.storage.sqlite.schema import SchemaTooNew
    from sessionmem.worker import configure_logging, raise_file_limit, run_worker, shorten_gil_switch_interval

    settings = _settings(args)
    running = _running_worker(settings)
    if running is not None:
        print(f"sessionmem: a worker is already running for {settings.data_dir} "
              f"(pid {running.pid}, port {running.port})", file=sys.stderr)
        return 1
    if settings.data_dir.exists() and not settings.data_dir.is_dir():
        print(f"sessionmem: the data dir {settings.data_dir} is a file, not a directory "
              f"(choose another with --data-dir or SESSIONMEM_DATA_DIR)", file=sys.stderr)
        return 1
    try:
        make_private(str(settings.data_dir))
        # Held for the worker's lifetime: a second worker for this data dir stops here,
        # even if the first has not written worker.json yet. Opened without emptying it:
        # it may be a running worker's, naming its pid.
        instance_lock = open(settings.data_dir / INSTANCE_LOCK_FILE, "a+", encoding="ascii")
    except OSError as exc:
        print(f"sessionmem: cannot use the data dir {settings.data_dir}: {exc.strerror or exc} "
              f"(choose another with --data-dir or SESSIONMEM_DATA_DIR)", file=sys.stderr)
        return 1
    if not try_lock_file(instance_lock.fileno()):
        print(f"sessionmem: a worker is already running for {settings.data_dir}", file=sys.stderr)
        return 1
    # Named in the lock, so that `stop` and `status` find a worker still starting (no worker.json yet).
    instance_lock.seek(0)
    instance_lock.truncate()
    instance_lock.write(f"{os.getpid()}\n")
    instance_lock.flush()
    if not is_loopback(settings.host):
        print(f"sessionmem: WARNING: binding {settings.host}, not loopback: other machines can reach this worker "
              f"(every request but /api/health still needs the token)", file=sys.stderr)
    # Whoever started it (a hook inside one project's session, a shell, `make run`), the worker keeps only the
    # allow-listed environment and works in its data dir: no project chooses the model's address, key or proxy.
    dropped = confine_process(str(settings.data_dir))
    configure_logging(settings, to_stderr=True)
    if dropped:
        logging.getLogger("sessionmem").info("left out of the worker's environment: %s", ", ".join(dropped))
    raise_file_limit()
    shorten_gil_switch_interval()
    try:
        start_again = trio.run(run_worker, settings)
    except Exception as exc:
        if _caused_by(exc, lambda e: isinstance(e, OSError) and e.errno == errno.EADDRINUSE):
            print(f"sessionmem: port {settings.port} on {settings.host} is already in use "
                  f"(set SESSIONMEM_PORT or --port)", file=sys.stderr)
            return 1
        newer = _caused_by(exc, lambda e: isinstance(e, SchemaTooNew))
        if newer is not None:
            print(f"sessionmem: {newer}: the data dir {settings.data_dir} was upgraded by a newer sessionmem. "
                  f"Install that version again (nothing was changed), or use another --data-dir", file=sys.stderr)
            return 1
        damaged = _caused_by(exc, lambda e: isinstance(e, (apsw.NotADBError, apsw.CorruptError)))
        if damaged is not None:
            print(f"sessionmem: the database {settings.db_path} is damaged ({damaged}). Keep a copy of the data dir; "
                  f"`sqlite3 {settings.db_path} .recover` may save what it holds, or move it aside to start "
                  f"empty (with `sessionmem export` from a backup, `sessionmem import` brings memories back)",
                  file=sys.stderr)
            return 1
        storage = (apsw.CantOpenError, apsw.ReadOnlyError, apsw.FullError, apsw.IOError, OSError)
        failure = _caused_by(exc, lambda e: isinstance(e, storage))
        if failure is not None:
            print(f"sessionmem: cannot open the database in {settings.data_dir}: {failure} "
                  f"(is the disk full or read-only?)", file=sys.stderr)
            return 1
        raise
    if start_again:
        _start_again()
    return 0


def _start_again() -> None:
    """Replace this process by the same command (same pid, same environment), which imports the new code and
    opens what is at the data dir's path now.

    The instance lock goes with the old image (Python opens files close-on-exec); the
    new worker takes it, then replays what the journal holds.
    """
    logging.shutdown()
    sys.stderr.flush()
    try:
        os.execv(sys.executable, sys.orig_argv)
    except OSError as exc:  # the interpreter went with the upgrade: the next SessionStart starts the new one
        print(f"sessionmem: cannot start again ({exc}); the next session starts it",
              file=sys.stderr)


def _caused_by(exc: BaseException, matches: Any) -> BaseException | None:
    """The first exception in ``exc`` (nurseries wrap them in groups) for which ``matches`` is true."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _caused_by(inner, matches)
            if found is not None:
                return found
        return None
    return exc if matches(exc) else None


def cmd_status(args: argparse.Namespace) -> int:
    config = client_config(args)
    port = config.worker_port()
    try:
        health = call(config, "GET", routes.HEALTH, patience=PROBE)
        debug = call(config, "GET", routes.DEBUG, patience=PROBE)
    except WorkerUnreachable as exc:
        starting = starting_worker(config.data_dir)
        if starting is not None:
            print(f"sessionmem: worker {starting} is starting (replaying its journal, importing spooled events); "
                  f"it answers once ready")
        elif foreign(exc.detail) or exc.detail == NO_LIVE_WORKER:
            print(f"sessionmem: {exc}")
        else:
            print(f"sessionmem: worker not running on {config.host}:{port} ({exc.detail})")
        return 1
    if args.port is not None and args.port != port:
        print(f"sessionmem: the data dir's worker listens on port {port}, not {args.port}: that is the one shown")
    sessions, supervisor, journal = debug["sessions"], debug["supervisor"], debug["journal"]
    print(f"sessionmem {health['version']}: running, pid {health['pid']}, port {port}, "
          f"up {health['uptimeSeconds']:.0f}s, compressor {health['compressor']}")
    print(f"  data dir: {health['dataDir']}")
    print(f"  sessions being handled: {sessions['known']} ({sessions['alive']} active, {sessions['failed']} failed), "
          f"{sessions['queued']} event(s) queued; restarts {supervisor['restarts']}")
    print(f"  journal: {journal['pending']} pending, {journal['parked']} parked, {journal['done']} done")
    try:
        storage = call(config, "GET", routes.STORAGE, patience=PROBE)
        print(f"  storage: {data_commands.size_line(storage)}")
    except (CommandFailed, KeyError):
        pass
    index = debug.get("index")
    if index:
        unavailable = (debug.get("embedder") or {}).get("embedder", {}).get("unavailable", "")
        print(f"  {index_progress.index_line(index, unavailable=unavailable)}")
    team = debug.get("team")
    if team:
        print(f"  {team_commands.team_line(team)}")
    failed = [a["claudeSessionId"] for a in debug["actors"] if a["state"] == "failed"]
    failed += [s for s in journal.get("parkedSessions", []) if s not in failed]  # failed before a restart too
    if failed:
        print(f"  failed sessions (`sessionmem replay SESSION_ID` once fixed): "
              f"{', '.join(printable_line(session) for session in failed)}")
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    """Ask the worker to stop (SIGTERM), then wait for its whole shutdown budget (and a margin) and say what
    it did."""
    settings = _settings(args)
    state = _running_worker(settings)
    if state is None:
        pid = starting_worker(str(settings.data_dir))  # still starting: no worker.json yet
        if pid is None:
            print("sessionmem: no worker running for", settings.data_dir)
            return 0
    elif verified_worker(str(settings.data_dir)) is None:
        print(f"sessionmem: {settings.state_path} names pid {state.pid}, which is not this data dir's worker "
              f"(a stale file); not signalling it", file=sys.stderr)
        return 1
    else:
        pid = state.pid
    report_path = settings.data_dir / SHUTDOWN_REPORT_FILE
    report_path.unlink(missing_ok=True)
    timeout = args.timeout if args.timeout is not None else settings.shutdown_timeout_s + STOP_MARGIN_S
    terminate_process(pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process_alive(pid):
            print(f"sessionmem: worker {pid} {_shutdown_summary(report_path)}")
            return 0
        time.sleep(0.05)
    print(f"sessionmem: worker {pid} did not stop within {timeout:.0f} s (its budget is "
          f"{settings.shutdown_timeout_s:.0f} s); see {settings.log_path}", file=sys.stderr)
    return 1


def _shutdown_summary(report_path: Any) -> str:
    """What the worker's shutdown report says, in a line."""
    try:
        report = json.loads(report_path.read_text(encoding="utf-8"))
        stages = ", ".join(f"{s['name']} {s['seconds']:.2f} s" for s in report["stages"])
        left = report["pending_events"]
        pending = (f"{left} event(s) left pending" if left >= 0  # -1: its budget was spent before they were counted
                   else "the events left pending were not counted (out of time)")
        return (f"stopped in {report['took_seconds']:.2f} s of its {report['budget_seconds']:.0f} s budget "
                f"({stages}); {pending}" + (", replayed at the next start" if left else ""))
    except (OSError, ValueError, KeyError, TypeError):
        return "stopped (it left no shutdown report: see its log)"


def cmd_replay(args: argparse.Namespace) -> int:
    """Re-queue a failed session's parked events (after fixing what made it crash)."""
    config = client_config(args)
    if read_state(config.data_dir) is None:
        print("sessionmem: the worker must be running to replay parked events (`sessionmem serve`)", file=sys.stderr)
        return 1
    body = call(config, "POST", routes.path(routes.REPLAY, claude_session_id=args.claude_session_id), {},
                patience=Patience.patient(60.0))
    print(f"sessionmem: {body['replayed']} parked event(s) of {args.claude_session_id} queued again")
    return 0


def cmd_open(args: argparse.Namespace) -> int:
    """Print (and open, if a browser is at hand) a single-use link that logs this browser in to the worker's pages."""
    config = client_config(args)
    if read_state(config.data_dir) is None:
        holder = port_holder(config, config.port)
        held = f"; port {config.port} is held by {holder}" if holder else ""
        print(f"sessionmem: no worker is running for {config.data_dir}{held} (`sessionmem serve`, or start Claude "
              f"Code)", file=sys.stderr)
        return 1
    target = {"viewer": "/", "debug": routes.DEBUG}[args.page]
    body = call(config, "POST", f"{routes.LOGIN_CODE}?next={target}", {}, patience=PROBE)
    print(f"sessionmem: open within {body['expiresInSeconds']:.0f} s (works once): {body['url']}")
    if not args.print_only:
        import webbrowser

        webbrowser.open(body["url"])
    return 0


def cmd_backfill(args: argparse.Namespace) -> int:
    """Import an agent's past sessions (its transcripts) into memory; safe to run again."""
    from pathlib import Path

    from tqdm import tqdm

    from sessionmem.protocol.agents import AGENT_TITLES
    from sessionmem.protocol.launch import ensure_worker
    from sessionmem.replay.backfill import READERS, backfill

    reader = READERS[args.agent]
    title = AGENT_TITLES[args.agent]
    root = Path(args.path).expanduser() if args.path else reader.default_root()
    if not root.exists():
        print(f"sessionmem: {root} does not exist", file=sys.stderr)
        return 1
    config = client_config(args)
    config.start_timeout_s = max(config.start_timeout_s, 20.0)
    problems: list[str] = []
    running_before = read_state(config.data_dir) is not None
    port = ensure_worker(config, problems.append)
    if port is None:
        print(f"sessionmem: no worker available: {'; '.join(problems) or 'start it with `sessionmem serve`'}",
              file=sys.stderr)
        return 1
    report = backfill(root, config, agent=args.agent, workers=args.workers,
                      progress=lambda total: tqdm(total=total, unit="event", desc="backfill", file=sys.stderr))
    c = report.conversion
    if not c.files:
        print(f"sessionmem: no {title} transcript ({reader.pattern}) under {root}", file=sys.stderr)
        return 1
    print(f"sessionmem: {title}: {c.sessions} session(s) from {c.files} file(s): {c.prompts} prompts, "
          f"{c.tool_uses} tool uses")
    print(f"  sent {report.sent}: {report.accepted} new, {report.duplicates} already known, {report.skipped} skipped, "
          f"{report.refused} refused, {report.spooled} spooled for the worker to import, {report.lost} lost")
    print(f"  unreadable: {c.broken_lines} line(s), {c.broken_files} file(s); {c.unpaired_tool_uses} tool use(s) "
          f"without a result")
    if not running_before:
        print(f"  a worker was started for it (port {port}); it keeps running for the agents' hooks "
              f"(`sessionmem stop` stops it)")
    for error in report.errors[:10]:
        print(f"  error: {error}", file=sys.stderr)
    status = 0 if not report.errors and not report.lost else 1
    if args.wait and report.accepted:
        sys.stdout.flush()
        followed = index_progress.follow_catch_up(
            config, lambda total: tqdm(total=total, unit="doc", desc="vector index", file=sys.stderr))
        status = status if followed else 1
    return status


def cmd_mcp(args: argparse.Namespace) -> int:
    """Serve the MCP tools on stdin/stdout (Claude Code starts this; see ``plugin/.mcp.json``)."""
    from sessionmem.mcpserver.server import run
    from sessionmem.protocol.project import project_of

    run(client_config(args), project_of(os.getcwd()))
    return 0
