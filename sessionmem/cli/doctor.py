"""``sessionmem doctor``: what a user needs to know when memory does not seem to work, one line a check.

It checks, each on a line that says what to fix: the platform, the data dir (it exists or can be
made, takes a write, has room, is private), the settings and the compressor they choose, the worker
(running, or why the hooks cannot start one: a damaged database, a port another program holds), the
embedder, the team database (:mod:`sessionmem.cli.team_doctor`), the hooks and the MCP server wired
into Claude Code, and whether Claude Code's own auto memory is on for the project here
(:mod:`sessionmem.protocol.claude_memory`). It talks to the worker as every command does (:func:`sessionmem.cli.client.call`).

Error handling:
    A problem found is a line marked ``[!!]`` and exit status 1, never an exception: a settings file
    that does not parse, a Claude Code settings file it cannot read, a worker that does not answer.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from sessionmem.cli import team_doctor
from sessionmem.cli.client import PROBE, CommandFailed, call, client_config
from sessionmem.protocol import routes
from sessionmem.protocol.claude_memory import auto_memory, instruction_files_line
from sessionmem.protocol.client import WorkerUnavailable, request
from sessionmem.protocol.client_settings import ClientConfig
from sessionmem.protocol.oskit import sync_file
from sessionmem.protocol.platform_support import unsupported_platform
from sessionmem.protocol.state import read_state
from sessionmem.settings import DATABASE_FILE, Settings, SettingsError, load_settings

Report = team_doctor.Report


def cmd_doctor(args: argparse.Namespace, *, platform: str = sys.platform) -> int:
    """Report what a user needs to know when memory does not seem to work."""
    unsupported = unsupported_platform(platform)
    if unsupported:
        print(f"sessionmem doctor\n  [!!] {unsupported}\nsessionmem: 1 problem(s)")
        return 1
    problems = 0

    def report(ok: bool, message: str) -> None:
        nonlocal problems
        problems += not ok
        print(f"  [{'ok' if ok else '!!'}] {message}")

    print("sessionmem doctor")
    config = client_config(args, warn=False)
    report(*_data_dir_health(Path(config.data_dir)))
    settings = _doctor_settings(args, report)
    _doctor_worker(config, report)
    if settings is not None:
        _doctor_embedder(settings, config, report)
    if settings is not None:
        team_doctor.check_team(settings, report, lambda: _debug_snapshot(config))
    _doctor_hooks(report)
    _doctor_mcp_server(report)
    _doctor_codex(report)
    _doctor_gemini(report)
    _doctor_opencode(report)
    report(True, auto_memory(Path.cwd()).line())  # what else a session here starts with: not a problem either way
    report(True, instruction_files_line(Path.cwd()))
    print("sessionmem: all good" if not problems else f"sessionmem: {problems} problem(s)")
    return 0 if not problems else 1


def _doctor_settings(args: argparse.Namespace, report: Report) -> Settings | None:
    """Whether the settings load, and the compressor they choose and why; None when they do not load."""
    try:
        settings = load_settings(data_dir=getattr(args, "data_dir", None), port=getattr(args, "port", None))
    except SettingsError as exc:
        report(False, f"{exc} (the worker will not start until it is fixed)")
        return None
    from sessionmem.compress.choice import choose_backend, describe, not_inherited
    from sessionmem.settings import Backend, plain_http_warnings

    choice = choose_backend(settings)  # as a worker starting now would choose
    backend, why = describe(settings, choice)
    model = f", model {settings.model_of(backend)}" if backend != Backend.OFFLINE else ""
    report(True, f"compressor: {backend} ({why}{model})")
    for warning in plain_http_warnings(settings, backend):
        report(False, f"compressor: {warning}")
    for line in not_inherited(os.environ):
        report(True, f"compressor: {line}")
    return settings


def _doctor_hooks(report: Report) -> None:
    """Whether every hook stage is wired into Claude Code's settings, through an interpreter that exists."""
    from sessionmem.install import STAGES, claude_settings_path, hook_entry, installed_stages

    try:
        wired = installed_stages()
    except Exception as exc:  # a broken settings.json is worth reporting, not crashing on
        wired = {}
        report(False, f"cannot read {claude_settings_path()}: {exc}")
    missing = [stage for stage in STAGES if stage not in wired]
    report(not missing, f"hooks in {claude_settings_path()}: "
                        + ("all stages wired" if not missing else f"missing {', '.join(missing)} (run `sessionmem install`, "
                                                                   "or use `claude --plugin-dir plugin`)"))
    for stage, command in sorted(wired.items()):
        interpreter = command.split('"')[1] if command.startswith('"') else command.split()[0]
        if not os.path.exists(interpreter):
            report(False, f"{stage}: interpreter {interpreter} does not exist (re-run `sessionmem install`)")
    report(hook_entry().exists(), f"hook entry {hook_entry()}")


def _doctor_mcp_server(report: Report) -> None:
    """Whether the MCP server is registered for every project, and its command exists."""
    from sessionmem.install import claude_user_config_path, installed_mcp

    try:
        server = installed_mcp()
    except Exception as exc:  # as for settings.json: worth reporting, not crashing on
        report(False, f"cannot read {claude_user_config_path()}: {exc}")
    else:
        if server is None:
            report(True, f"MCP server not in {claude_user_config_path()} (the plugin registers its own; "
                         f"`sessionmem install` adds it for every project)")
        else:
            report(os.path.exists(server["command"]), f"MCP server `{routes.MCP_SERVER_NAME}` in "
                                                      f"{claude_user_config_path()}: {server['command']}")


def _doctor_codex(report: Report) -> None:
    """Codex's wiring, as Codex itself sees it (its app server): the hooks, whether it trusts them (it runs no
    untrusted hook, silently), the MCP server. Nothing when Codex is neither installed nor wired."""
    from sessionmem.agents.codex import find_codex, wiring
    from sessionmem.install import InstallError

    codex = find_codex()
    try:
        found = wiring(codex)
    except InstallError as exc:
        report(False, f"Codex: {exc}")
        return
    if not found.stages:
        if codex is not None:
            report(True, f"Codex CLI at {codex}: sessionmem is not wired into it (`sessionmem install --agent codex`)")
        return
    missing = found.missing
    report(not missing, f"Codex hooks in {found.hooks_file}: "
                        + ("all stages wired" if not missing else f"missing {', '.join(missing)} "
                                                                   "(run `sessionmem install --agent codex`)"))
    if found.problem:
        report(False, f"Codex: cannot ask it whether it trusts sessionmem's hooks ({found.problem})")
        return
    if found.untrusted or len(found.trusted) < len(found.stages):
        unseen = sorted(set(found.stages) - found.trusted - found.untrusted)
        report(False, f"Codex does not run sessionmem's {', '.join(sorted(found.untrusted) + unseen)} hook(s): "
                      "not trusted (run `sessionmem install --agent codex`, or trust them in codex's /hooks)")
    else:
        report(True, f"Codex trusts sessionmem's {len(found.trusted)} hooks")
    if found.foreign_mcp:
        report(False, f"Codex has an MCP server named `{routes.MCP_SERVER_NAME}` that is not sessionmem's")
    else:
        report(True, f"Codex MCP server `{routes.MCP_SERVER_NAME}`: "
                     + (found.mcp["command"] if found.mcp else "not registered (`sessionmem install --agent codex`)"))


def _doctor_gemini(report: Report) -> None:
    """The Gemini CLI's wiring, read from its user settings: the hooks (through an interpreter that exists),
    whether it runs them (hooks on, none disabled by name, this folder trusted) and the MCP server. Nothing when
    sessionmem is not wired into it."""
    from sessionmem.agents.gemini import wiring
    from sessionmem.install import InstallError

    try:
        found = wiring()
    except InstallError as exc:
        report(False, f"Gemini CLI: {exc}")
        return
    if not found.stages:
        return
    missing = found.missing
    report(not missing, f"Gemini CLI hooks in {found.settings_file}: "
                        + ("all events wired" if not missing else f"missing {', '.join(missing)} "
                                                                   "(run `sessionmem install --agent gemini-cli`)"))
    for stage, command in sorted(found.stages.items()):
        interpreter = command.split('"')[1] if command.startswith('"') else command.split()[0]
        if not os.path.exists(interpreter):
            report(False, f"Gemini CLI {stage}: interpreter {interpreter} does not exist "
                          "(re-run `sessionmem install --agent gemini-cli`)")
    if found.hooks_disabled:
        report(False, f"the Gemini CLI runs no hook: hooksConfig.enabled is false in {found.settings_file}")
    if found.disabled_stages:
        report(False, f"the Gemini CLI skips sessionmem's {', '.join(sorted(found.disabled_stages))} hook(s): "
                      f"disabled in hooksConfig.disabled (`/hooks enable` in gemini)")
    if found.folder_trust_enforced and found.folder_trusted is False:
        report(False, f"the Gemini CLI runs no hook here: you did not trust {Path.cwd()} (`/permissions` in gemini)")
    elif found.folder_trust_enforced and found.folder_trusted is None:
        report(True, f"Gemini CLI: {Path.cwd()} is not trusted yet: it asks on its first start here, and runs "
                     "hooks only once you trust it")
    if found.foreign_mcp:
        report(False, f"Gemini CLI has an MCP server named `{routes.MCP_SERVER_NAME}` that is not sessionmem's")
    else:
        report(found.mcp is None or os.path.exists(found.mcp["command"]),
               f"Gemini CLI MCP server `{routes.MCP_SERVER_NAME}`: "
               + (found.mcp["command"] if found.mcp else "not registered (`sessionmem install --agent gemini-cli`)"))


def _doctor_opencode(report: Report) -> None:
    """OpenCode's wiring, read from its global configuration folder: the plugin (as this install writes it: the
    interpreter and hook entry it runs) and the MCP server. Nothing when sessionmem is not wired into it."""
    from sessionmem.agents.opencode import wiring
    from sessionmem.install import InstallError

    try:
        found = wiring()
    except InstallError as exc:
        report(False, f"OpenCode: {exc}")
        return
    if found.foreign_plugin:
        report(False, f"OpenCode: {found.plugin_file} is not sessionmem's plugin")
    if not found.plugin:
        return
    report(found.plugin_current, f"OpenCode plugin {found.plugin_file}: "
                                 + ("runs this install's hooks" if found.plugin_current
                                    else "runs another interpreter or hook entry (re-run `sessionmem install "
                                         "--agent opencode`)"))
    if found.foreign_mcp:
        report(False, f"OpenCode has an MCP server named `{routes.MCP_SERVER_NAME}` that is not sessionmem's")
    else:
        report(found.mcp is None or os.path.exists(found.mcp["command"][0]),
               f"OpenCode MCP server `{routes.MCP_SERVER_NAME}`: "
               + (found.mcp["command"][0] if found.mcp else "not registered (`sessionmem install --agent opencode`)"))


LOW_DISK_BYTES = 100 * 1024 * 1024


def _data_dir_health(path: Path) -> tuple[bool, str]:
    """Whether the worker can keep memory in ``path``: it exists or can be made, takes a write, has room."""
    import shutil
    import tempfile

    if not path.exists():
        parent = next((p for p in path.parents if p.exists()), path.anchor)
        writable = os.access(parent, os.W_OK)
        return writable, f"data dir {path} (created on first start)" + ("" if writable else
                                                                          f": {parent} is not writable")
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix=".doctor-") as probe:
            probe.write(b"\0" * 4096)
            probe.flush()
            sync_file(probe.fileno())
    except OSError as exc:
        return False, f"data dir {path} does not take a write: {exc.strerror or exc}"
    free = shutil.disk_usage(path).free
    if free < LOW_DISK_BYTES:
        return False, f"data dir {path}: only {free // (1024 * 1024)} MB free on its disk"
    if path.stat().st_mode & 0o077:
        return False, f"data dir {path} can be read by other users (the worker makes it private when it starts)"
    return True, f"data dir {path} ({free // (1024 * 1024)} MB free)"


def _database_damage(database: Path) -> str:
    """What SQLite's own check finds wrong with ``database`` ("" if nothing, or no file): run only while
    no worker has it open. Read-only, through APSW: the SQLite the worker itself runs (a system's older
    one, as Python's ``sqlite3`` may link, found damage in healthy files: Debian 12's 3.40.1 did)."""
    import apsw

    if not database.exists():
        return ""
    try:
        connection = apsw.Connection(str(database), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            connection.set_busy_timeout(1000)
            (verdict,) = connection.execute("PRAGMA quick_check(1)").fetchone() or ("no answer",)
        finally:
            connection.close()
    except apsw.Error as exc:
        return f"the database {database} cannot be read ({exc})"
    return "" if verdict == "ok" else f"the database {database} is damaged ({verdict}); `sqlite3 {database} .recover`"


def port_holder(config: ClientConfig, port: int) -> str:
    """Who holds ``port`` while this data dir has no live worker, asked without this data dir's token (a
    worker's health answers anyone its status and version; the token goes to no port a worker of ours does
    not hold): ``""`` (nothing listens), ``a sessionmem worker of another data dir`` or ``a program that is
    not sessionmem``."""
    try:
        reply = request(config.host, port, "GET", routes.HEALTH, timeout=PROBE.request_timeout_s)
    except WorkerUnavailable as exc:
        return "" if exc.refused else "a program that is not sessionmem"
    try:
        health = json.loads(reply.body)
    except ValueError:
        health = None
    return ("a sessionmem worker of another data dir" if reply.status == 200 and isinstance(health, dict)
            and "version" in health else "a program that is not sessionmem")


def _doctor_worker(config: ClientConfig, report: Report) -> None:
    """Report whether this data dir's worker runs, or why the hooks cannot start one."""
    from sessionmem.protocol.launch import probe

    port = config.live_port()
    shown = config.port if port is None else port
    where = f"{config.host}:{shown}"
    # No worker of ours: whoever holds its port is asked without the token (probe sends it nothing either).
    holder = port_holder(config, shown) if port is None else ""
    state = "foreign" if holder else probe(config, port, PROBE.request_timeout_s)
    if state == "down":
        damage = _database_damage(Path(config.data_dir) / DATABASE_FILE)
        if damage:
            report(False, f"worker not running, and it cannot start: {damage}")
        else:
            report(True, f"worker not running on {where} (the next SessionStart hook starts it)")
        return
    if state == "foreign":
        # Not this data dir's worker: the hooks will not start one there, so "the next SessionStart
        # hook starts it" would be wrong.
        report(False, f"{where} is held by {holder or port_holder(config, shown)}: the hooks cannot start this "
                      f"data dir's worker there (stop it, or choose another port: --port, SESSIONMEM_PORT)")
        return
    try:
        health = call(config, "GET", routes.HEALTH, patience=PROBE)
    except CommandFailed:
        health = None
    if isinstance(health, dict) and "pid" in health:
        report(True, f"worker {'running' if state == 'ready' else 'starting'}: pid {health['pid']}, {where}, "
                     f"compressor {health['compressor']}")
        _doctor_compressor(config, report)
    else:
        report(False, f"{where} answers, but not as a sessionmem worker")


def _doctor_embedder(settings: Settings, config: ClientConfig, report: Report) -> None:
    """Whether searches use meaning: the ``embedder`` setting, and whether its runtime is here (the running
    worker's word, else this interpreter's: :mod:`sessionmem.embed.availability`)."""
    from sessionmem.embed.availability import missing_runtime

    if settings.embedder == "none":
        report(True, "embedder: none (the `embedder` setting): words-only search")
        return
    snapshot = _debug_snapshot(config)
    if isinstance(snapshot, dict) and isinstance(snapshot.get("embedder"), dict):
        running = snapshot["embedder"].get("embedder", {})
        unavailable, name = running.get("unavailable", ""), running.get("name", "")
        index = snapshot.get("index") or {}
    else:
        unavailable, name, index = missing_runtime(), "none", {}
    if unavailable and name == "none":  # not installed: this platform/Python has no wheel of it
        report(True, f"embedder: {unavailable}")
    elif unavailable:  # installed, but it does not load: an install to repair
        report(False, f"embedder {settings.embedder}: {unavailable}")
    elif index.get("state") == "failed":
        report(False, f"embedder {settings.embedder}: the vector index failed ({index.get('lastError', '')}); "
                      "words-only search until it recovers")
    else:
        report(True, f"embedder: {settings.embedder} (search by meaning and by words)")


def _debug_snapshot(config: ClientConfig) -> Any:
    """The running worker's ``/debug`` JSON, or None when none answers."""
    if read_state(config.data_dir) is None:
        return None
    try:
        return call(config, "GET", routes.DEBUG_JSON, patience=PROBE)
    except CommandFailed:
        return None


def _doctor_compressor(config: ClientConfig, report: Report) -> None:
    """What the running worker's compressor does now: why it runs, and whether it falls back to offline."""
    try:
        snapshot = call(config, "GET", routes.DEBUG_JSON, patience=PROBE)
    except CommandFailed:
        return
    stats = snapshot.get("compressor") if isinstance(snapshot, dict) else None
    if not isinstance(stats, dict):
        return
    if stats.get("reason"):
        report(True, f"worker's compressor {stats.get('backend')}: {stats['reason']}")
    breaker = stats.get("breaker") or {}
    if breaker.get("state") in ("open", "half-open"):
        report(False, f"worker's compressor: circuit breaker {breaker['state']} (offline compressor for "
                      f"{breaker.get('openForSeconds', 0):.0f} s more): {stats.get('lastFailure') or 'repeated failures'}")
    elif stats.get("lastFailure"):
        report(True, f"worker's compressor: its latest request failed: {stats['lastFailure']}")
