"""The claude-code compressor: the real pinned Claude Code CLI, logged in with its own OAuth credentials in a
temporary HOME, pointed at the scripted Messages API (``ANTHROPIC_BASE_URL``).

Shown here: ``auto`` chooses it without an API key, and what the model answers is stored; the CLI's flags
exist; its runs send no tools and our system prompt, run none of our hooks and write no session file; a rate
limit opens the breaker and nothing is lost; a run past its timeout, and every run after a ``kill -9`` of the
worker, leaves no process behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from sessionmem.compress.choice import choose_backend, describe
from sessionmem.compress.claude_code_backend import (
    ClaudeCodeCompressor,
    RunFailed,
    cli_command,
    headless_login_advice,
    parse_login,
)
from sessionmem.compress.llm import GaveUp
from sessionmem.compress.prompts import OBSERVATION_SYSTEM, SUMMARY_SYSTEM
from sessionmem.settings import Settings, load_settings
from sessionmem.testing.claude_login import logged_in_home
from sessionmem.testing.harness import InProcessWorker, open_worker
from sessionmem.testing.messages_api import Action, ScriptedMessagesAPI
from sessionmem.testing.worker_process import WorkerProcess, start_worker

from .test_anthropic_compressor import post_tool

REPO = Path(__file__).resolve().parent.parent
CLAUDE = REPO / "e2e" / "node_modules" / ".bin" / "claude"
CLI_ADDS_AT_MOST = 1_600  # characters the CLI adds around our system prompt and request (bench: 1,205)


def _require_cli() -> None:
    if not CLAUDE.exists():
        pytest.fail(f"{CLAUDE} is missing: `make test` installs the pinned Claude Code CLI (npm ci in e2e/)")


def cli_env(home: Path, api: ScriptedMessagesAPI, *, path: str | None = None) -> dict[str, str]:
    """This process's environment without any credentials or settings of its own, for ``home`` and ``api``: the
    CLI run plainly reads ``ANTHROPIC_BASE_URL``, the worker's runs sessionmem's ``anthropic_base_url``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONMEM_", "ANTHROPIC_", "CLAUDE"))}
    env.update(HOME=str(home), ANTHROPIC_BASE_URL=api.url, SESSIONMEM_ANTHROPIC_BASE_URL=api.url)
    if path is not None:
        env["PATH"] = path
    return env


def text_of(blocks: Any) -> str:
    if isinstance(blocks, str):
        return blocks
    return "".join(block.get("text", "") for block in blocks or [] if isinstance(block, dict))


def claude_processes(home: Path) -> list[int]:
    """Pids of the live processes (the CLI, or a guard) running with ``HOME=home``."""
    found = []
    for process in psutil.process_iter():
        try:
            if (process.pid != os.getpid() and process.status() != psutil.STATUS_ZOMBIE
                    and process.environ().get("HOME") == str(home)):
                found.append(process.pid)
        except psutil.Error:  # gone meanwhile, or not ours to read
            continue
    return found


# How long a process of the CLI's HOME (a run, its guard, a hook it started) may outlive the worker's stop:
# they are killed, not waited on; on a busy machine the kernel takes its time to tear a killed Node process down.
NOTHING_OUTLIVES_THE_WORKER_S = 10.0


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.1)


# -- fast: what the CLI says, read as the backend reads it --------------------------------------------


def test_login_status_is_read_from_the_cli_json() -> None:
    assert parse_login(0, b'{"loggedIn": true, "authMethod": "claude.ai"}').logged_in
    assert not parse_login(1, b'{"loggedIn": false, "authMethod": "none"}').logged_in
    assert not parse_login(0, b"not json").logged_in


def _result(**fields: Any) -> subprocess.CompletedProcess[bytes]:
    body = {"type": "result", "subtype": "success", "is_error": False, "result": "", "api_error_status": None,
            "usage": {"input_tokens": 10, "output_tokens": 2, "cache_read_input_tokens": 5}, **fields}
    return subprocess.CompletedProcess([], 1 if body["is_error"] else 0, json.dumps(body).encode(), b"")


@pytest.mark.parametrize(
    ("fields", "trips", "retryable"),
    [
        ({"is_error": True, "api_error_status": 429, "result": "API Error: rate limited"}, True, None),
        ({"is_error": True, "api_error_status": None, "result": "Claude usage limit reached"}, True, None),
        ({"is_error": True, "api_error_status": 401, "result": "Failed to authenticate. API Error: 401"}, True, None),
        ({"is_error": True, "api_error_status": 529, "result": "API Error: 529 overloaded"}, False, True),
        ({"is_error": True, "api_error_status": 400, "result": "API Error: 400 bad request"}, False, False),
        ({"type": "crash"}, False, True),
    ],
    ids=["rate-limit", "usage-limit", "auth", "overloaded", "bad-request", "no-result"],
)
def test_a_failed_run_trips_the_breaker_or_is_retried(tmp_path: Path, fields: dict[str, Any], trips: bool,
                                                      retryable: bool | None) -> None:
    compressor = ClaudeCodeCompressor(Settings(data_dir=tmp_path), executable=str(CLAUDE))
    try:
        outcome = compressor._outcome(_result(**fields))
    except GaveUp as failure:
        assert trips and failure.trip
    else:
        assert not trips and isinstance(outcome, RunFailed) and outcome.retryable is retryable
    finally:
        trio.run(compressor.aclose)


def test_a_successful_run_counts_the_tokens_the_cli_reported(tmp_path: Path) -> None:
    compressor = ClaudeCodeCompressor(Settings(data_dir=tmp_path), executable=str(CLAUDE))
    assert compressor._outcome(_result(result="<summary/>")) == ("<summary/>", 15, 2)  # cache reads are input too
    trio.run(compressor.aclose)


def test_auto_chooses_by_api_key_then_cli_then_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _require_cli()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-inherited")  # one session's: never read (test_compressor_sandbox)
    monkeypatch.setenv("PATH", str(CLAUDE.parent))
    settings = load_settings({}, data_dir=str(tmp_path))
    assert settings.compressor == "auto" and choose_backend(settings).backend == "claude-code"
    assert choose_backend(settings).reason == "auto: no Anthropic API key, a Claude Code CLI is installed"

    keyed = load_settings({"SESSIONMEM_ANTHROPIC_API_KEY": "sk-test"}, data_dir=str(tmp_path))
    assert choose_backend(keyed).backend == "anthropic"

    monkeypatch.setenv("PATH", str(tmp_path))  # no claude there
    assert choose_backend(settings).backend == "offline"
    claude_path = load_settings({}, data_dir=str(tmp_path), claude_path=str(CLAUDE))
    assert choose_backend(claude_path).backend == "claude-code"
    assert load_settings({"SESSIONMEM_COMPRESSOR": "claude-code"}, data_dir=str(tmp_path)).compressor == "claude-code"


# -- the pinned CLI ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_every_flag_the_backend_passes_exists_in_the_pinned_cli(tmp_path: Path) -> None:
    _require_cli()
    env = {"HOME": str(tmp_path), "PATH": os.environ["PATH"]}
    help_text = subprocess.run([str(CLAUDE), "--help"], capture_output=True, text=True, env=env, timeout=60).stdout
    # --max-turns is a hidden option of the pinned CLI: its effect is proven instead
    # (test_compressor_sandbox.py::test_a_server_answering_with_tool_calls_gets_one_request_a_run).
    flags = [arg for arg in cli_command(str(CLAUDE), Settings(), "system") if arg.startswith("--")
             and arg != "--max-turns"]
    assert flags and all(flag in help_text for flag in flags), [f for f in flags if f not in help_text]
    status_help = subprocess.run([str(CLAUDE), "auth", "status", "--help"], capture_output=True, text=True, env=env,
                                 timeout=60).stdout
    assert "--json" in status_help


@pytest.fixture
def api() -> Iterator[ScriptedMessagesAPI]:
    with ScriptedMessagesAPI() as scripted:
        yield scripted


@pytest.mark.slow
def test_doctor_says_which_compressor_and_why(tmp_path: Path, api: ScriptedMessagesAPI) -> None:
    _require_cli()
    home = logged_in_home(tmp_path / "home")
    env = cli_env(home, api, path=f"{CLAUDE.parent}:{os.path.dirname(sys.executable)}:/usr/bin:/bin")
    env.update(SESSIONMEM_DATA_DIR=str(tmp_path / "data"), SESSIONMEM_PORT="0")
    doctor = subprocess.run([sys.executable, "-m", "sessionmem", "doctor"], capture_output=True, text=True, env=env,
                            timeout=120)
    host = api.url.split("//", 1)[1].rstrip("/")
    assert (f"compressor: claude-code (auto: no Anthropic API key, a Claude Code CLI is installed; requests to {host}, "
            f"credential: Claude Code login in ~/.claude (the user's own); Claude Code CLI {CLAUDE}, logged in "
            f"(claude.ai), model claude-haiku-4-5)") in doctor.stdout, doctor.stdout

    (home / ".claude" / ".credentials.json").unlink()
    doctor = subprocess.run([sys.executable, "-m", "sessionmem", "doctor"], capture_output=True, text=True, env=env,
                            timeout=120)
    assert "not logged in (run `claude auth login`): offline compressor until it is" in doctor.stdout, doctor.stdout


def test_not_logged_in_on_macos_says_how_to_give_a_headless_worker_a_login() -> None:
    """A worker first started from SSH, tmux or launchd may not reach the Keychain that holds Claude Code's login
    on macOS: there, and only there, "not logged in" names the one fix (a token of sessionmem's own)."""
    advice = headless_login_advice("darwin", own_token=False)
    assert "`claude setup-token`" in advice and '~/.sessionmem/settings.json as "claude_code_oauth_token"' in advice
    assert "Keychain" in advice and "docs/compressors.md#a-headless-worker-on-macos" in advice
    assert headless_login_advice("linux", own_token=False) == ""
    assert headless_login_advice("darwin", own_token=True) == ""  # the token is set: it is not the Keychain
    said = parse_login(1, b'{"loggedIn": false}', advice=advice).detail
    assert said == f"not logged in (run `claude auth login`); {advice}"


@pytest.mark.parametrize("platform", ["darwin", "linux"])
def test_doctor_and_debug_say_what_to_do_when_the_worker_is_not_logged_in_on_macos(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, platform: str) -> None:
    """The real CLI, not logged in (an empty HOME): what ``doctor`` prints (``describe``) and what ``/debug`` shows
    (the compressor's ``reason``) carry the macOS advice on darwin, with this data dir's settings file; on Linux
    not. With ``claude_code_oauth_token`` set, the advice is not given."""
    _require_cli()
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    settings = load_settings({}, data_dir=str(tmp_path / "data"), compressor="claude-code", claude_path=str(CLAUDE))
    expected = headless_login_advice("darwin", own_token=False, settings_file=str(tmp_path / "data" / "settings.json"))
    _, why = describe(settings, choose_backend(settings), platform=platform)
    assert "not logged in (run `claude auth login`)" in why
    assert (expected in why) == (platform == "darwin"), why

    async def reason() -> str:
        compressor = ClaudeCodeCompressor(settings, executable=str(CLAUDE), platform=platform)
        try:
            await compressor.login()
            return compressor.reason()
        finally:
            await compressor.aclose()

    shown = trio.run(reason)
    assert "not logged in" in shown and (expected in shown) == (platform == "darwin"), shown


def _marker_hooks(home: Path, marker: Path) -> None:
    """User settings with a hook on every stage that appends its stage to ``marker``."""
    command = {"type": "command", "command": f"echo hook >> {marker}"}
    hooks = {stage: [{"hooks": [command]}] for stage in ("SessionStart", "UserPromptSubmit", "Stop", "SessionEnd")}
    settings = home / ".claude" / "settings.json"
    settings.write_text(json.dumps({"hooks": hooks}))


@pytest.mark.slow
def test_auto_compresses_with_the_cli_and_its_runs_are_bare(tmp_path: Path, api: ScriptedMessagesAPI) -> None:
    """The acceptance test: no API key, a logged-in CLI: ``auto`` is claude-code, a real worker stores what
    the model answered; the requests hold no tools and our system prompt; no hook ran, no session was written."""
    _require_cli()
    home = logged_in_home(tmp_path / "home")
    marker = tmp_path / "hooks-ran"
    _marker_hooks(home, marker)
    path = f"{CLAUDE.parent}:{os.path.dirname(sys.executable)}:/usr/bin:/bin"
    env = cli_env(home, api, path=path)

    # The control: a plain run of the same CLI in this HOME runs the user's hooks.
    plain = subprocess.run([str(CLAUDE), "-p", "hello", "--output-format", "json", "--no-session-persistence"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180, stdin=subprocess.DEVNULL)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    wait_for(marker.exists, 30, "the control run's hooks ran")
    marker.unlink()
    # ... and sessionmem's own hooks, installed as a user installs them, would post to this data dir.
    data_dir = tmp_path / "data"
    install = subprocess.run([sys.executable, "-m", "sessionmem", "install", "--no-mcp"], capture_output=True,
                             text=True, env={**env, "SESSIONMEM_DATA_DIR": str(data_dir)}, timeout=60)
    assert install.returncode == 0, install.stderr
    assert "sessionmem" in (home / ".claude" / "settings.json").read_text()
    before = {str(p) for p in (home / ".claude").rglob("*")}
    requests_before, tokens_before = len(api.requests), (api.input_tokens, api.output_tokens)

    worker = start_worker(data_dir, env={**env, "SESSIONMEM_COMPRESSOR": "auto", "SESSIONMEM_BATCH_QUIET": "0.2",
                                         "SESSIONMEM_BATCH_SIZE": "4"}, timeout=60)
    try:
        assert worker.get("/api/health")["compressor"] == "claude-code"
        worker.post("/api/sessions/init", {"claudeSessionId": "cc", "cwd": "/work/calc", "prompt": "Fix divide"})
        for n, tool in enumerate(("Read", "Edit", "Bash"), 1):
            worker.post("/api/sessions/observations", {
                "claudeSessionId": "cc", "cwd": "/work/calc", "tool_name": tool, "tool_use_id": f"t{n}",
                "tool_input": {"file_path": "/work/calc/calc.py"}, "tool_response": "def divide(a, b): ..."})
        worker.post("/api/sessions/summarize", {"claudeSessionId": "cc", "last_assistant_message": "Fixed."})
        worker.wait_idle(timeout=180)
        rows = worker.get("/api/observations?limit=50")["observations"]
        summaries = worker.get("/api/summaries")["summaries"]
        sessions = worker.get("/api/sessions")["sessions"]
        stats = worker.get("/debug.json")["compressor"]
    finally:
        worker.stop()

    # Each tool use compressed by the CLI (the scripted titles number a use within its batch: how the three
    # were batched depends on timing).
    assert sorted(r["title"].rsplit(" #", 1)[0] for r in rows) == ["Scripted: Bash", "Scripted: Edit", "Scripted: Read"]
    assert all(r["compressed"] and r["compressor"] == "claude-code" for r in rows)
    (summary,) = summaries
    assert summary["request"] == "scripted request" and summary["compressor"] == "claude-code"
    assert stats["backend"] == "claude-code" and stats["clientReady"] is True
    assert stats["reason"] == (f"auto: no Anthropic API key, a Claude Code CLI is installed; Claude Code CLI {CLAUDE}, "
                               "logged in (claude.ai)")
    # Token use is what the CLI reported: the scripted server's counts.
    assert (stats["inputTokens"], stats["outputTokens"]) == (api.input_tokens - tokens_before[0],
                                                             api.output_tokens - tokens_before[1])
    (session,) = sessions
    assert session["inputTokens"] == stats["inputTokens"] and session["outputTokens"] == stats["outputTokens"]

    sent = [r.body for r in api.requests[requests_before:]]
    assert len(sent) == stats["calls"] >= 2  # one request per batch and one per summary: no side requests
    for body in sent:
        assert body["tools"] == [] and body["model"] == "claude-haiku-4-5"
        assert body.get("thinking") in (None, {"type": "disabled"}) and body["max_tokens"] <= 2048
        system = text_of(body["system"])
        assert OBSERVATION_SYSTEM in system or SUMMARY_SYSTEM in system
        assert "Claude Code" not in system.replace("Claude Code CLI", "")  # not Claude Code's own system prompt
        ours = OBSERVATION_SYSTEM if OBSERVATION_SYSTEM in system else SUMMARY_SYSTEM
        (message,) = body["messages"]
        content = text_of(message["content"])
        added = len(system) - len(ours) + len(content) - len(_our_request(content))
        assert added <= CLI_ADDS_AT_MOST, (added, system, content)

    # No hook ran: not the marker's, not sessionmem's (no hooks.log, no session but the one posted). A hook
    # runs as a child of the CLI with its HOME: once no process of that HOME is left, any hook has written.
    wait_for(lambda: not claude_processes(home), NOTHING_OUTLIVES_THE_WORKER_S, "no process of the CLI's HOME")
    assert not marker.exists()
    assert not (data_dir / "hooks.log").exists()
    assert [s["claudeSessionId"] for s in sessions] == ["cc"]
    # No session file: nothing new under ~/.claude but what the CLI keeps of itself (no projects/, no transcript).
    new = {str(p) for p in (home / ".claude").rglob("*")} - before
    assert not [p for p in new if "/projects" in p or p.endswith(".jsonl")], sorted(new)
    assert claude_processes(home) == []


def _our_request(content: str) -> str:
    """Our request inside the user message the CLI sent (the CLI puts its reminders before it)."""
    start = content.find("Project: ")
    return content[start:] if start >= 0 else content


# -- failures, in the in-process worker with the real CLI ------------------------------------------


LLM_SETTINGS = {"llm_backoff_cap_s": 0.2, "llm_max_attempts": 2, "batch_size": 2, "batch_quiet_s": 0.1,
                "llm_breaker_open_s": 600}


@pytest.fixture
async def cli_worker(tmp_path: Path, api: ScriptedMessagesAPI) -> AsyncIterator[tuple[InProcessWorker, Path]]:
    _require_cli()
    home = logged_in_home(tmp_path / "home")
    env = cli_env(home, api)
    async with open_worker(tmp_path / "data", compressor=lambda s: ClaudeCodeCompressor(
            s, executable=str(CLAUDE), environ=env, run_timeout_s=20), anthropic_base_url=api.url,
            **LLM_SETTINGS) as worker:
        yield worker, home


async def post_tools(worker: InProcessWorker, session: str, *ids: str) -> None:
    for tool_use_id in ids:
        await post_tool(worker, session, tool_use_id)


@pytest.mark.slow
async def test_a_rate_limit_opens_the_breaker_and_nothing_is_lost(
        cli_worker: tuple[InProcessWorker, Path], api: ScriptedMessagesAPI) -> None:
    worker, home = cli_worker
    api.queue(Action(status=429, retry_after=1))
    await post_tools(worker, "limited", "a1", "a2")
    await worker.wait_idle(timeout=120)
    await post_tools(worker, "limited", "a3", "a4")
    await worker.wait_idle(timeout=120)
    debug = await worker.debug()
    rows = {r["toolUseId"]: r for r in (await worker.get("/api/observations?limit=50"))["observations"]}

    assert api.statuses() == [429]  # not retried, and no call while the breaker is open
    assert sorted(rows) == ["a1", "a2", "a3", "a4"]  # nothing lost
    assert [rows[i]["compressed"] for i in ("a1", "a2")] == [False, False]  # the failed batch: raw
    assert {rows[i]["compressor"] for i in ("a3", "a4")} == {"offline"}  # then the offline compressor
    stats = debug["compressor"]
    assert stats["breaker"]["state"] == "open" and stats["breaker"]["opened"] == 1
    assert "rate-limited or out of quota (429)" in stats["lastFailure"]
    assert stats["offlineFallbacks"] == 2 and stats["retries"] == 0
    assert claude_processes(home) == []


@pytest.mark.slow
async def test_a_run_past_its_timeout_has_its_group_killed(tmp_path: Path, api: ScriptedMessagesAPI) -> None:
    _require_cli()
    home = logged_in_home(tmp_path / "home")
    settings = load_settings({}, data_dir=str(tmp_path / "data"), compressor="claude-code", llm_max_attempts=1,
                             anthropic_base_url=api.url)
    # Long enough for the CLI to start and send its request on a busy 2-core machine (a few seconds idle).
    compressor = ClaudeCodeCompressor(settings, executable=str(CLAUDE), environ=cli_env(home, api), run_timeout_s=20)
    api.stall()
    try:
        from sessionmem.compress.base import SessionContext
        from sessionmem.events import ObservationEvent

        event = ObservationEvent(claude_session_id="slow", project="p", tool_name="Read", tool_use_id="s1",
                                 tool_input={"file_path": "a.py"}, tool_response="x")
        with trio.fail_after(120):
            (row,) = await compressor.compress(SessionContext("slow", "p"), [event])
        assert row.compressed is False  # stored raw
        assert "no result within 20 s" in compressor.statistics().last_failure
        assert api.requests  # the CLI was mid-request when it was killed
        # The guard is reaped before compress() returns; the rest of its group was sent SIGKILL
        # then, and a killed process takes a moment to exit on a busy machine: none may survive.
        with trio.fail_after(10):
            while claude_processes(home):
                await trio.sleep(0.05)
    finally:
        api.resume()
        await compressor.aclose()


@pytest.mark.slow
def test_no_claude_process_survives_a_kill_9_of_the_worker(tmp_path: Path, api: ScriptedMessagesAPI) -> None:
    _require_cli()
    home = logged_in_home(tmp_path / "home")
    env = cli_env(home, api, path=f"{CLAUDE.parent}:{os.path.dirname(sys.executable)}:/usr/bin:/bin")
    api.stall()  # every request hangs: the CLI is mid-request when the worker dies
    worker: WorkerProcess | None = None
    try:
        worker = start_worker(tmp_path / "data", env={**env, "SESSIONMEM_COMPRESSOR": "claude-code",
                                                      "SESSIONMEM_BATCH_QUIET": "0.1"}, timeout=60)
        worker.post("/api/sessions/observations", {
            "claudeSessionId": "k", "cwd": "/work/k", "tool_name": "Read", "tool_use_id": "k1",
            "tool_input": {"file_path": "/work/k/a.py"}, "tool_response": "x"})
        wait_for(lambda: len(api.requests) > 0, 120, "the CLI's request reached the model")
        children = claude_processes(home)
        assert children, "no CLI process while its request is in flight"
        os.kill(worker.pid, signal.SIGKILL)
        worker.process.wait(timeout=30)  # type: ignore[union-attr]
        wait_for(lambda: claude_processes(home) == [], 30, f"the CLI processes {children} ended")
    finally:
        api.resume()
        if worker is not None and worker.process is not None and worker.process.poll() is None:
            worker.process.kill()
        for pid in claude_processes(home):  # a failure above must not leak them
            os.kill(pid, signal.SIGKILL)


def test_describe_without_a_cli_says_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    settings = load_settings({}, data_dir=str(tmp_path))
    assert describe(settings, choose_backend(settings)) == ("offline", "auto: no Anthropic API key, and no Claude Code CLI (not on PATH)")


def test_the_runs_a_request_retried_are_spent_too_and_a_count_no_api_gives_is_no_count(tmp_path: Path) -> None:
    """Runs that failed and were retried cost tokens too (they were not spent from the budget: only the breaker
    bounded what an overloaded API cost); a negative or huge count is no usage, and a reply without usage is
    not trusted."""
    compressor = ClaudeCodeCompressor(Settings(data_dir=tmp_path), executable=str(CLAUDE))
    overloaded = {"is_error": True, "api_error_status": 529, "result": "API Error: 529 overloaded"}
    assert compressor._outcome(_result(**overloaded)) == RunFailed("API error 529: API Error: 529 overloaded", True, 17)
    for usage in ({"input_tokens": -10**9, "output_tokens": 2}, {"input_tokens": 10**20, "output_tokens": 2}):
        with pytest.raises(GaveUp, match="no usage"):
            compressor._outcome(_result(result="<summary/>", usage=usage))
    trio.run(compressor.aclose)

    runs = tmp_path / "runs"
    stand_in = tmp_path / "claude"  # the CLI's answers, two runs overloaded then one that succeeds
    stand_in.write_text(f"#!/bin/sh\ncat > /dev/null\nn=$(($(cat {runs} 2>/dev/null || echo 0) + 1))\n"
                        f"echo $n > {runs}\nif [ $n -lt 3 ]; then echo '{_result(**overloaded).stdout.decode()}'; "
                        f"exit 1; fi\necho '{_result(result='<summary/>').stdout.decode()}'\n")
    stand_in.chmod(0o755)
    retrying = ClaudeCodeCompressor(Settings(data_dir=tmp_path, llm_max_attempts=3, llm_backoff_cap_s=0.05),
                                    executable=str(stand_in))

    async def request() -> tuple[str, int, int]:
        try:
            return await retrying._request("system", "content")
        finally:
            await retrying.aclose()

    assert trio.run(request) == ("<summary/>", 15 + 2 * 17, 2)  # its own 15 in, and the two failed runs' 17 each
