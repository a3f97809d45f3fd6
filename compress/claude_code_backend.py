"""Compression with the user's own Claude Code login, through their installed ``claude`` CLI.

The same batched observation and summary requests as the ``anthropic`` backend
(:mod:`.prompts`, :mod:`.llm`), each sent by one run of ``claude -p`` in headless mode:
the request on stdin, the reply and the tokens the CLI reports (its JSON ``usage``) on
stdout. Users who sign in to Claude Code with a subscription have no API key; this is how
their memory gets a model.

Why the CLI directly, not ``claude-agent-sdk``: the SDK drives the same CLI (through
anyio, which would run under Trio), but its 0.2.189 wheel is 178 MB because it bundles
its own 400 MB copy of the CLI, while every user of this backend already has Claude Code
installed; and it gives no process rules of its own (an ``atexit`` SIGTERM, nothing after
a ``kill -9``). Running ``claude -p --output-format json`` is a few lines and keeps the
rules below ours.

What the child is (:func:`cli_command`; each flag checked against the pinned CLI in
``tests/test_claude_code_compressor.py``, and the sandbox in ``tests/test_compressor_sandbox.py``):
    ``--max-turns 1`` (one request a run, whatever the server answers);
    ``--tools ""`` (no tools) and ``--strict-mcp-config`` (no MCP servers);
    ``--system-prompt`` ours, not Claude Code's; ``--model`` the ``model`` setting (Haiku);
    ``--setting-sources ""`` (no user or project settings, so no hooks of ours, no plugins
    and no CLAUDE.md) and ``--settings`` with ``disableAllHooks`` (no hooks from anywhere
    else either: the compressor's own runs are never captured as memory), thinking and
    auto-memory off;
    ``--no-session-persistence`` (nothing in ``~/.claude/projects``, nothing in
    ``claude --resume``); ``--disable-slash-commands``. Not ``--bare``: it never reads the
    OAuth login, so it cannot serve a subscription user. Environment (:func:`cli_environment`):
    an allow-list of the worker's (who the user is, the locale), the provider and login
    sessionmem's settings give (``anthropic_base_url``, ``claude_config_dir``,
    ``claude_code_oauth_token``), the proxy and extra CAs they give (``llm_proxy`` as
    ``HTTPS_PROXY``/``HTTP_PROXY``, ``llm_ca_bundle`` as ``NODE_EXTRA_CA_CERTS``), never an
    ``ANTHROPIC_*``, proxy or CA variable of whichever session started the worker; and ``CLAUDE_CODE_MAX_RETRIES=0`` (our retry policy, below, decides),
    ``CLAUDE_CODE_MAX_OUTPUT_TOKENS`` (``llm_max_tokens``), ``API_TIMEOUT_MS``
    (``llm_timeout_s``), ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`` (no telemetry or
    update checks from a background child), ``CLAUDE_CODE_DISABLE_ATTACHMENTS=1`` (an
    ``@/path`` in a tool's output brings no file into the request),
    ``CLAUDE_CODE_DISABLE_AUTO_MEMORY=1``. It runs in ``<data dir>/claude-code``, an empty
    directory. What the CLI adds around our request (a billing and an identity line in the
    system prompt, reminders of the environment, the model and the date) measures about
    1,200 characters of text a request, shared by the batch's tool uses; no other switch of
    the pinned CLI removes any of it (``bench/compressor_cost.py``, docs/compressors.md).

Resource handling:
    A ``CapacityLimiter`` of ``claude_code_concurrency`` runs (default 2) bounds the CLI
    processes alive at once. Each run is started with :func:`trio.run_process` as the
    leader of a new process group (:func:`~sessionmem.protocol.oskit.new_group_options`), through a tiny guard
    (:mod:`.claude_code_guard`) that holds the read end of the worker's *lifeline* pipe:
    when the worker dies, ``kill -9`` included, the guard kills its group. A run that
    outlasts ``llm_timeout_s`` (plus the CLI's start-up allowance), or whose caller is
    cancelled (the worker stopping), has its whole group killed at once (SIGKILL) and is reaped
    before the call returns. :meth:`ClaudeCodeCompressor.aclose` closes the lifeline and
    kills the groups still running, so nothing outlives the worker's shutdown budget.

Login:
    Whether the CLI is logged in is read from ``claude auth status`` (JSON, exit 0 when
    logged in; under a second), run as any other child, once in the background after the
    worker starts (:meth:`~ClaudeCodeCompressor.warm_up`) and again after
    :data:`LOGIN_RECHECK_S` while it is not, or after an authentication failure. ``auth
    status`` reads the user's settings, the runs do not: a login from there (an
    ``apiKeyHelper``) counts as not logged in, with the reason (:func:`parse_login`), and a
    login a run was refused under is not run again until ``auth status`` reports another
    (:func:`refused_login`). While it is not usable, batches go to the offline compressor
    and ``/debug`` says why. Under ``auto``, the first usable login is announced once
    (:mod:`.announce`). On macOS the CLI keeps its login in the user's Keychain, which a
    worker first started from SSH, tmux or launchd may not reach for its whole life: there
    "not logged in" says what to do (:func:`headless_login_advice`): a login of sessionmem's
    own, ``claude_code_oauth_token``, which the runs get as ``CLAUDE_CODE_OAUTH_TOKEN``.

Error handling:
    The CLI's result says what happened (``is_error``, ``api_error_status``). A rate limit or
    a spent quota (429, "usage limit") and a refused login (401, 403) open the circuit
    breaker at once: a retry within minutes cannot help, and the user's quota is theirs.
    Overload, 5xx, a run past its timeout and a CLI that crashed or printed no result are
    retried with exponential backoff up to ``llm_max_attempts`` runs, then count as one
    failure for the breaker. Tool uses of a request that failed for good are stored raw
    (``compressed=False``), those refused while the breaker is open go to the offline
    compressor: nothing is lost. Cancellation always propagates.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

import msgspec
import trio

from sessionmem.compress.llm import GaveUp, LLMCompressor, backoff_s, reported_tokens
from sessionmem.compress.transport import cli_proxy_environment
from sessionmem.protocol import oskit
from sessionmem.protocol.client_settings import SETTINGS_FILE
from sessionmem.protocol.environment import describes_user
from sessionmem.settings import AUTO, Backend, Settings, find_claude_cli

log = logging.getLogger(__name__)

GUARD = Path(__file__).with_name("claude_code_guard.py")
STARTUP_ALLOWANCE_S = 20.0  # a run's timeout is llm_timeout_s plus this: the CLI's start (~0.6 s idle, seconds on a busy machine)
LOGIN_TIMEOUT_S = 20.0  # `claude auth status`
LOGIN_RECHECK_S = 300.0  # while not logged in, the login is read again this often (a user may log in any time)
REAP_TIMEOUT_S = 5.0  # a killed group's leader is reaped within this (SIGKILL: at once)
UNREAPED_STATUS = -9  # the status of a run whose group was killed and whose guard was not reaped in time
MAX_OUTPUT_BYTES = 4 * 1024 * 1024  # of a run's stdout or stderr kept (a result is a few KB)
CHILD_DIR = "claude-code"  # in the data dir: the runs' empty working directory
# --settings of every run: no hook from any source runs (ours would capture the compressor's own
# run as a session), no extended thinking (the CLI turns it on for Haiku with a 32k budget), and no
# auto-memory (the CLI would load ~/.claude/projects/<working dir>/memory/MEMORY.md into the request).
CHILD_SETTINGS = {"disableAllHooks": True, "alwaysThinkingEnabled": False, "autoMemoryEnabled": False}
# The CLI's ways to log in that a run with no settings (--setting-sources "") cannot use, though
# `claude auth status` (which reads the user's settings) reports them as logged in.
SETTINGS_LOGINS = {"api_key_helper": "an apiKeyHelper", "apiKeyHelper": "an apiKeyHelper"}
_QUOTA_WORDS = ("usage limit", "limit reached", "quota", "rate limit", "rate_limit", "credit balance")
_AUTH_WORDS = ("not logged in", "failed to authenticate", "invalid api key", "please run /login", "oauth token")


class CliUsage(msgspec.Struct, frozen=True):
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


class CliResult(msgspec.Struct, frozen=True):
    """The ``--output-format json`` result of a ``claude -p`` run (the fields read; the rest ignored)."""

    type: str = ""
    subtype: str = ""
    is_error: bool = False
    result: str = ""
    usage: CliUsage | None = None
    api_error_status: int | None = None
    terminal_reason: str = ""


class LoginStatus(msgspec.Struct, frozen=True):
    """``claude auth status``: whether the CLI can call a model, and a line saying how (or why not)."""

    logged_in: bool
    detail: str
    identity: str = ""  # which login (method, key source, expiry): a refused run is not retried under the same one


class RunFailed(NamedTuple):
    problem: str
    retryable: bool  # overload, 5xx, a crash: another run may succeed
    tokens: int = 0  # what the run cost anyway: spent from the budget with the request's other runs


_RESULT = msgspec.json.Decoder(CliResult)


def _usage(result: CliResult) -> CliUsage | None:
    """The run's token use as the CLI reports it; None if it reports none, or a count no API gives
    (:func:`~sessionmem.compress.llm.reported_tokens`): a reply with no trusted usage is not trusted."""
    usage = result.usage
    if usage is None or any(reported_tokens(count) is None for count in msgspec.structs.astuple(usage)):
        return None
    return usage


def cli_command(executable: str, settings: Settings, system: str) -> list[str]:
    """The ``claude -p`` command line of one request (the request itself goes on stdin)."""
    return [
        executable, "-p", "--output-format", "json", "--input-format", "text",
        "--model", settings.model,
        # One turn: with no tools there is nothing to loop on, and a server answering with tool calls
        # cannot make the CLI send request after request (it did: 526 requests in 40 s).
        "--max-turns", "1",
        "--tools", "",
        "--strict-mcp-config",
        "--system-prompt", system,
        "--setting-sources", "",
        "--settings", json.dumps(CHILD_SETTINGS),
        "--no-session-persistence",
        "--disable-slash-commands",
    ]


def cli_environment(settings: Settings, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """A run's environment: what describes the user and the machine in ``environ`` (default: the worker's;
    :func:`~sessionmem.protocol.environment.describes_user`: not SESSIONMEM_*, not PG*), the provider and login
    sessionmem's settings give (its proxy and extra CAs too), and ours. Nothing else: no ``ANTHROPIC_*``,
    ``CLAUDE_*``, proxy or CA variable of whichever session started the worker reaches the CLI. ``claude auth
    status`` runs with the same environment."""
    source = os.environ if environ is None else environ
    env = {name: value for name, value in source.items() if describes_user(name)}
    if settings.anthropic_base_url:
        env["ANTHROPIC_BASE_URL"] = settings.anthropic_base_url
    if settings.claude_config_dir:
        env["CLAUDE_CONFIG_DIR"] = os.path.expanduser(settings.claude_config_dir)
    if settings.claude_code_oauth_token:
        env["CLAUDE_CODE_OAUTH_TOKEN"] = settings.claude_code_oauth_token
    env.update(cli_proxy_environment(settings))  # llm_proxy and llm_ca_bundle, never the environment's
    env.update(
        CLAUDE_CODE_MAX_RETRIES="0",
        CLAUDE_CODE_MAX_OUTPUT_TOKENS=str(settings.llm_max_tokens),
        API_TIMEOUT_MS=str(int(settings.llm_timeout_s * 1000)),
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        # No attachments: an `@/path` in a tool's output would otherwise bring that file into the
        # request (and the reminder of the tokens left goes with them, 86 characters a request).
        CLAUDE_CODE_DISABLE_ATTACHMENTS="1",
        # No auto-memory (also off in CHILD_SETTINGS): the switch that wins over every setting.
        CLAUDE_CODE_DISABLE_AUTO_MEMORY="1",
    )
    return env


def headless_login_advice(platform: str, *, own_token: bool, settings_file: str = "~/.sessionmem/settings.json") -> str:
    """What to do when the CLI is not logged in for the worker on ``platform``; ``""`` where nothing more is known.

    On macOS (``darwin``) Claude Code keeps its login in the user's login Keychain, which a process
    started outside the user's GUI session (over SSH, in a tmux server started there, by launchd)
    may not be allowed to read: ``claude auth status`` then says "not logged in" to the worker while
    it says "logged in" in the user's terminal, and that worker stays logged out for its whole life.
    A token of sessionmem's own needs no Keychain. Not said when that token is already set.
    """
    if platform != "darwin" or own_token:
        return ""
    return ("on macOS a worker started from SSH, tmux or launchd may not reach the login Claude Code keeps in "
            "the Keychain: run `claude setup-token` and put the token it prints in "
            f"{settings_file} as \"claude_code_oauth_token\", then `sessionmem stop` "
            "(docs/compressors.md#a-headless-worker-on-macos)")


def parse_login(returncode: int, stdout: bytes, *, advice: str = "") -> LoginStatus:
    """What ``claude auth status`` said (JSON; exit status 0 when logged in), as the runs can use it.

    ``auth status`` takes no ``--setting-sources``: it reads the user's settings, the runs do not.
    A login that lives in those settings (an ``apiKeyHelper``) is reported as one the runs cannot use,
    rather than as logged in: every run would fail "Not logged in" and the breaker cycle for ever.
    """
    try:
        status = json.loads(stdout)
    except ValueError:
        status = None
    if not isinstance(status, dict):
        return LoginStatus(False, f"`claude auth status` answered no JSON (exit status {returncode})")
    if returncode == 0 and status.get("loggedIn") is True:
        method = str(status.get("authMethod") or "unknown method")
        helper = SETTINGS_LOGINS.get(method) or SETTINGS_LOGINS.get(str(status.get("apiKeySource") or ""))
        if helper:
            return LoginStatus(False, f"logged in through {helper} in Claude Code's settings, which the compressor's "
                                      "runs do not load (they load no settings); give sessionmem a login of its own: "
                                      "`claude setup-token`, then claude_code_oauth_token "
                                      "(docs/compressors.md#a-login-for-the-worker)")
        identity = json.dumps([method, status.get("apiKeySource"), status.get("loginExpiresAt")])
        return LoginStatus(True, f"logged in ({method})", identity)
    return LoginStatus(False, "not logged in (run `claude auth login`)" + (f"; {advice}" if advice else ""))


def login_advice(settings: Settings, platform: str = sys.platform) -> str:
    """:func:`headless_login_advice` under ``settings``: their token, their data dir's ``settings.json``."""
    settings_file = settings.data_dir / SETTINGS_FILE
    try:
        shown = f"~/{settings_file.relative_to(Path.home())}"
    except ValueError:
        shown = str(settings_file)
    return headless_login_advice(platform, own_token=bool(settings.claude_code_oauth_token), settings_file=shown)


def switch_message(settings: Settings, status: LoginStatus) -> str:
    """What the user is told once when ``auto`` starts compressing with their Claude Code login."""
    budget = (f"up to {settings.llm_daily_token_budget:,} tokens a day" if settings.llm_daily_token_budget
              else "with no daily limit")
    return (f"sessionmem: memory is now compressed by {settings.model} through your Claude Code login "
            f"({status.detail.removeprefix('logged in ').strip('()')}), on your plan's usage, {budget}; "
            "set compressor to offline in settings.json to stop it")


def refused_login(status: LoginStatus) -> LoginStatus:
    """``status`` once a run was refused under it: what ``auth status`` says cannot be used as it is."""
    return LoginStatus(False, f"{status.detail} according to `claude auth status`, but its runs were refused as "
                              "not logged in; log in again (`claude auth login`) or give sessionmem a login of its own "
                              "(`claude setup-token`, then claude_code_oauth_token)", status.identity)


class ClaudeCodeCompressor(LLMCompressor):
    name = Backend.CLAUDE_CODE

    def __init__(self, settings: Settings, *, executable: str | None = None, reason: str = "",
                 environ: dict[str, str] | None = None, run_timeout_s: float | None = None,
                 platform: str = sys.platform, clock: Callable[[], float] = time.monotonic) -> None:
        """``executable``: the Claude Code CLI to run, as the worker's start found it (``compress/choice.py``;
        "": none; default: found now, from ``claude_path`` or ``PATH``); ``environ``: the runs' environment before ours (default: the worker's); ``run_timeout_s``: how long one
        run may take before its group is killed (default: ``llm_timeout_s`` plus :data:`STARTUP_ALLOWANCE_S`);
        ``platform``: the OS whose advice "not logged in" gives (:func:`headless_login_advice`); ``clock``: the
        circuit breaker's (a test gives a clock it moves by hand)."""
        super().__init__(settings, reason=reason, clock=clock)
        self._platform = platform
        self._run_timeout_s = run_timeout_s or settings.llm_timeout_s + STARTUP_ALLOWANCE_S
        self._executable = find_claude_cli(settings.claude_path) if executable is None else executable
        self._env = cli_environment(settings, environ)
        self._workdir = settings.data_dir / CHILD_DIR
        self._limiter = trio.CapacityLimiter(settings.claude_code_concurrency)
        # The lifeline: the worker holds the only write end (not inheritable); each guard a read end.
        self._lifeline_read, self._lifeline_write = os.pipe()
        self._groups: set[int] = set()  # process groups alive (their leaders' pids)
        self._login: LoginStatus | None = None
        self._login_checked = float("-inf")
        self._refused_identity: str | None = None  # the login a run was refused under, until auth status changes
        self._login_lock = trio.Lock()
        self._closed = False

    # -- what /debug and doctor read -----------------------------------------------------------

    def reason(self) -> str:
        where = f"Claude Code CLI {self._executable}" if self._executable else "no Claude Code CLI found"
        login = self._login.detail if self._login is not None else "login not checked yet"
        meanwhile = "" if self._login is None or self._login.logged_in else ": offline compressor meanwhile"
        return f"{self._reason + '; ' if self._reason else ''}{where}, {login}{meanwhile}"

    def _client_ready(self) -> bool:
        return self._login is not None and self._login.logged_in

    # -- the login ----------------------------------------------------------------------------

    async def warm_up(self) -> None:
        await self.login()

    async def login(self) -> LoginStatus:
        """The CLI's login, read again when it is older than :data:`LOGIN_RECHECK_S` and was not logged in."""
        async with self._login_lock:
            stale = trio.current_time() - self._login_checked > LOGIN_RECHECK_S
            if self._login is None or (not self._login.logged_in and stale):
                before = self._login.detail if self._login is not None else None
                status = await self._read_login()
                if status.logged_in and status.identity == self._refused_identity:
                    status = refused_login(status)  # the same login again: no run until it changes
                self._login = status
                self._login_checked = trio.current_time()
                if status.detail != before:  # not every LOGIN_RECHECK_S (a refusal is warned of once: llm.py)
                    log.info("claude-code compressor: %s", self.reason())
                if status.logged_in and self._settings.compressor == AUTO:
                    await self.notice.offer(f"claude-code {status.detail}", switch_message(self._settings, status))
            return self._login

    async def _read_login(self) -> LoginStatus:
        if not self._executable:
            return LoginStatus(False, "no `claude` on PATH (set claude_path)")
        try:
            with trio.fail_after(LOGIN_TIMEOUT_S):
                done = await self._run([self._executable, "auth", "status", "--json"], b"")
        except trio.TooSlowError:
            return LoginStatus(False, f"`claude auth status` did not answer within {LOGIN_TIMEOUT_S:.0f} s")
        except OSError as exc:
            return LoginStatus(False, f"cannot run {self._executable}: {exc}")
        return parse_login(done.returncode, done.stdout, advice=login_advice(self._settings, self._platform))

    async def _refusal(self) -> str:
        status = await self.login()
        return "" if status.logged_in else f"Claude Code is {status.detail}"

    # -- one request ----------------------------------------------------------------------------

    async def _request(self, system: str, content: str) -> tuple[str, int, int]:
        settings = self._settings
        command = cli_command(self._executable, settings, system)
        attempt = spent = 0  # tokens of the runs that failed: the request costs them too
        while True:
            attempt += 1
            async with self._limiter:
                self._counters.in_flight += 1
                self._counters.calls += 1
                try:
                    with trio.move_on_after(self._run_timeout_s) as timeout:
                        done = await self._run(command, content.encode())
                except OSError as exc:  # the CLI is gone (uninstalled, moved): no use trying again soon
                    raise self._failure(f"cannot run {self._executable}: {exc}", trip=True) from exc
                finally:
                    self._counters.in_flight -= 1
            if timeout.cancelled_caught:
                problem, retryable = f"no result within {self._run_timeout_s:g} s (its process group killed)", True
            else:
                try:
                    outcome = self._outcome(done)
                except GaveUp as failure:
                    failure.tokens += spent
                    raise
                if not isinstance(outcome, RunFailed):
                    text, tokens_in, tokens_out = outcome
                    return text, tokens_in + spent, tokens_out
                problem, retryable = outcome.problem, outcome.retryable
                spent += outcome.tokens
            if not retryable or attempt >= settings.llm_max_attempts:
                raise self._failure(f"Claude Code CLI failed after {attempt} run(s): {problem}", tokens=spent)
            self._counters.retries += 1
            await trio.sleep(backoff_s(settings, attempt))

    def _outcome(self, done: subprocess.CompletedProcess[bytes]) -> tuple[str, int, int] | RunFailed:
        """A run's (text, input tokens, output tokens), or what went wrong and whether to retry.

        Raises :class:`~sessionmem.compress.llm.GaveUp` with ``trip`` for a rate limit, a quota or a login refused.
        """
        try:
            result = _RESULT.decode(done.stdout.strip() or b"{}")
        except msgspec.DecodeError:
            result = CliResult()
        usage = _usage(result)
        tokens_in = usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens if usage else 0
        tokens_out = usage.output_tokens if usage else 0
        self._count_tokens(tokens_in, tokens_out)
        if result.type != "result":
            stderr = done.stderr.decode(errors="replace").strip()[-300:]
            return RunFailed(f"exit status {done.returncode}, no result{': ' + stderr if stderr else ''}", True,
                             tokens_in + tokens_out)
        if not result.is_error and done.returncode == 0:
            if usage is None:  # token use comes from the CLI, or the reply is not trusted
                raise self._failure("the CLI's result has no usage", trip=False)
            return result.result, tokens_in, tokens_out
        status = result.api_error_status
        said = result.result.strip()[:300]
        lowered = said.lower()
        if status in (401, 403) or any(word in lowered for word in _AUTH_WORDS):
            # Read the login again before the next request; the same login again is not used (refused_login).
            self._refused_identity = self._login.identity if self._login is not None else None
            self._login_checked = float("-inf")
            self._login = None
            raise self._failure(f"Claude Code's login was refused ({status}): {said}", tokens=tokens_in + tokens_out,
                                trip=True)
        if status == 429 or any(word in lowered for word in _QUOTA_WORDS):
            raise self._failure(f"Claude Code is rate-limited or out of quota ({status}): {said}",
                                tokens=tokens_in + tokens_out, trip=True)
        retryable = status is None or status >= 500 or status == 408
        return RunFailed(f"{'API error ' + str(status) if status else result.subtype or 'error'}: {said}", retryable,
                         tokens_in + tokens_out)

    async def _run(self, command: list[str], stdin: bytes) -> subprocess.CompletedProcess[bytes]:
        """Run ``command`` under the guard, as the leader of its own process group, and wait for it.

        However this ends -- the command exits, the caller's timeout or cancellation -- the
        group is killed if it still runs and the guard is reaped before this returns or raises.
        """
        if self._closed:
            raise trio.ClosedResourceError("the claude-code compressor is closed")
        await trio.to_thread.run_sync(lambda: self._workdir.mkdir(parents=True, exist_ok=True))
        process = await trio.lowlevel.open_process(
            [sys.executable, "-I", "-S", str(GUARD), oskit.__file__, str(self._lifeline_read), *command],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(self._workdir),
            env=self._env, **oskit.new_group_options(), **oskit.pass_fds_options((self._lifeline_read,)))
        self._groups.add(process.pid)
        output: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}

        async def feed() -> None:
            assert process.stdin is not None
            try:
                await process.stdin.send_all(stdin)
            except trio.BrokenResourceError:
                pass  # it exited without reading all of it: its status says why
            finally:
                await process.stdin.aclose()  # end of input: the CLI starts its request

        async def read(stream: trio.abc.ReceiveStream | None, into: bytearray) -> None:
            assert stream is not None
            try:
                while chunk := await stream.receive_some(65536):
                    if len(into) < MAX_OUTPUT_BYTES:
                        into += chunk
            finally:
                await stream.aclose()

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(feed)
                nursery.start_soon(read, process.stdout, output["stdout"])
                nursery.start_soon(read, process.stderr, output["stderr"])
                await process.wait()
        finally:
            if process.returncode is None:
                _kill_group(process.pid)
            with trio.move_on_after(REAP_TIMEOUT_S, shield=True):
                await process.wait()
            self._groups.discard(process.pid)
        status = process.returncode if process.returncode is not None else UNREAPED_STATUS
        return subprocess.CompletedProcess(command, status, bytes(output["stdout"]),
                                           bytes(output["stderr"]))

    async def aclose(self) -> None:
        """Close the lifeline (every guard then kills its group) and kill the groups still running."""
        if self._closed:
            return
        self._closed = True
        os.close(self._lifeline_write)
        for group in list(self._groups):
            _kill_group(group)
        os.close(self._lifeline_read)


def _kill_group(pgid: int) -> None:
    try:
        oskit.kill_process_group(pgid)
    except (ProcessLookupError, PermissionError):
        pass  # gone already
