"""The real Codex CLI (npm ``@openai/codex``, pinned in ``e2e/``) run headless against the scripted Responses API.

:class:`CodexHome` is one user's Codex: a temporary ``HOME`` with ``$CODEX_HOME`` = ``HOME/.codex``
and a ``config.toml`` that names the scripted server (:class:`~sessionmem.testing.responses_api.ScriptedResponsesAPI`)
as the model provider, approvals off and no sandbox (the scripted model's shell commands and patches
really run in the project), analytics and plugins off (the run reaches no host but the scripted
server; proxies point nowhere besides). :meth:`CodexHome.exec` runs ``codex exec --json`` in a
project directory and returns a :class:`CodexRun`; :meth:`CodexHome.resume` continues a session
(``codex exec resume``). Hooks go in ``$CODEX_HOME/hooks.json`` (:meth:`CodexHome.write_hooks`,
the shape of Claude Code's settings hooks); Codex runs none that is not trusted unless the run
passes ``--dangerously-bypass-hook-trust`` (``bypass_hook_trust=True``). :func:`recording_hooks`
wires a hook for every event that saves its stdin, for reading the payloads Codex sends.

Compaction: a run given ``auto_compact_token_limit`` (``-c model_auto_compact_token_limit=N``)
compacts the conversation once the last reply's token usage passes N: before the turn of a resumed
session (PreCompact, PostCompact, then SessionStart with ``source`` ``compact``), or in the middle of
a turn after a tool call. The scripted server reports about a quarter of a request's bytes, and
Codex's own instructions alone pass 1,000, so a limit of 1,000 compacts at every chance: give it to
one ``resume`` of a session made without it, and script the model to end its turn once compacted
(the compacted input no longer holds the earlier tool outputs). Codex asks the same
``/v1/responses`` for the summary (:func:`~sessionmem.testing.responses_api.is_compaction`).

Hook trust through ``codex app-server`` (JSON-RPC over stdio, :class:`AppServer`): :meth:`CodexHome.list_hooks` returns
each hook Codex knows with its ``trustStatus`` and ``currentHash``; :meth:`CodexHome.trust_hooks`
records them as trusted (``config/batchWrite`` of ``hooks.state."<key>".trusted_hash``), after which a
run without the bypass flag runs them. tests/fixtures/codex/README.md says what each was found to do.

Resource handling:
    Every Codex process runs to completion under a timeout in its own session; when the timeout
    passes, the whole session is killed (npm's wrapper would leave the native CLI running) and
    ``subprocess.TimeoutExpired`` raised. Nothing outlives a call. The homes live in the caller's
    directory (``tmp_path``).
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from sessionmem.protocol.oskit import kill_process_group, new_group_options
from sessionmem.testing.model_cache import place_model_cache

REPO = Path(__file__).resolve().parent.parent
CODEX = REPO / "e2e" / "node_modules" / ".bin" / "codex"
# A model Codex 0.169.0 knows: its tools (exec_command, the freeform apply_patch) and instructions are
# what a user's session gets; the scripted server answers whatever the name.
DEFAULT_MODEL = "gpt-5.5"
PROVIDER = "scripted"
API_KEY_ENV = "SCRIPTED_RESPONSES_API_KEY"
RUN_TIMEOUT_S = 120.0
# The hook events of Codex 0.169.0's hooks.json (each with its own input and output schema in codex-rs/hooks).
HOOK_EVENTS = (
    "SessionStart", "UserPromptSubmit", "PreToolUse", "PermissionRequest", "PostToolUse", "PreCompact",
    "PostCompact", "Stop", "SubagentStart", "SubagentStop", "SessionEnd",
)
# Nothing may leave the machine: Codex's HTTP client honours these; loopback (the scripted server) is exempt.
_NO_NETWORK = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
               "ALL_PROXY": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1,localhost"}
_KEPT_ENV = ("PATH", "LANG", "LC_ALL", "SYSTEMROOT")


def toml_string(value: str) -> str:
    """``value`` as a TOML basic string (JSON's escaping is valid TOML)."""
    return json.dumps(value)


def mcp_server_table(name: str, command: str, *args: str, env: dict[str, str] | None = None,
                     required: bool = False) -> str:
    """A ``config.toml`` table that starts an MCP server over stdio (for ``extra_config``): Codex
    starts it with the session and offers its tools as the namespace ``mcp__<name>``. Codex waits
    for a ``required`` server before the first model request (and fails the run when it does not
    start); for any other it does not wait, and a call made before the server is up fails."""
    lines = [f"[mcp_servers.{name}]", f"command = {toml_string(command)}",
             f"args = [{', '.join(toml_string(arg) for arg in args)}]", f"required = {str(required).lower()}"]
    if env:
        lines.append("env = { " + ", ".join(f"{key} = {toml_string(value)}" for key, value in env.items()) + " }")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class CodexRun:
    """One finished ``codex exec --json``: its process result and what its JSONL event stream says."""

    process: subprocess.CompletedProcess[str]

    @property
    def returncode(self) -> int:
        return self.process.returncode

    @property
    def events(self) -> list[dict[str, Any]]:
        """The JSONL events on stdout (``thread.started``, ``item.completed``, ``turn.completed``...)."""
        found = []
        for line in self.process.stdout.splitlines():
            if line.startswith("{"):
                try:
                    found.append(json.loads(line))
                except ValueError:
                    continue
        return found

    @property
    def session_id(self) -> str | None:
        """The session (thread) id: what hooks get as ``session_id`` and ``resume`` takes."""
        return next((e["thread_id"] for e in self.events if e.get("type") == "thread.started"), None)

    @property
    def last_message(self) -> str | None:
        """The text of the last assistant message of the run."""
        texts = [e["item"].get("text") for e in self.events
                 if e.get("type") == "item.completed" and e.get("item", {}).get("type") == "agent_message"]
        return texts[-1] if texts else None

    def check(self) -> CodexRun:
        """This run, if Codex exited 0; else AssertionError with the tail of its output."""
        assert self.returncode == 0, (f"codex exited {self.returncode}: "
                                      f"{self.process.stdout[-3000:]}\n{self.process.stderr[-3000:]}")
        return self


@dataclass
class CodexHome:
    """A temporary user of the Codex CLI: ``home`` is its ``HOME``, :attr:`codex_home` its ``$CODEX_HOME``."""

    home: Path
    api_url: str
    model: str = DEFAULT_MODEL
    codex_home: Path = field(init=False)  # $CODEX_HOME: configuration, hooks, sessions, databases
    config_path: Path = field(init=False)  # the user's config.toml: the provider; the hooks' trust once given
    hooks_path: Path = field(init=False)  # the user's hooks.json

    def __post_init__(self) -> None:
        self.codex_home = self.home / ".codex"
        self.config_path = self.codex_home / "config.toml"
        self.hooks_path = self.codex_home / "hooks.json"

    @classmethod
    def create(cls, home: Path, api_url: str, *, model: str = DEFAULT_MODEL, extra_config: str = "",
               hooks: dict[str, Any] | None = None) -> CodexHome:
        """A Codex home in ``home`` (created) whose model is the scripted server at ``api_url``.
        ``extra_config`` is appended to ``config.toml`` as it is (:func:`mcp_server_table`);
        ``hooks`` is written as ``hooks.json``."""
        codex = cls(home=home, api_url=api_url, model=model)
        codex.codex_home.mkdir(parents=True, exist_ok=True)
        place_model_cache(home)  # the workers its hooks start find the embedder's model built
        top = [f"model = {toml_string(model)}", f"model_provider = {toml_string(PROVIDER)}",
               'approval_policy = "never"', 'sandbox_mode = "danger-full-access"',
               "check_for_update_on_startup = false"]
        config = "\n".join([
            *top, "",
            "[analytics]", "enabled = false", "",
            "[features]", "plugins = false", "",
            f"[model_providers.{PROVIDER}]",
            'name = "Scripted Responses API"',
            f"base_url = {toml_string(api_url)}",
            'wire_api = "responses"',
            f"env_key = {toml_string(API_KEY_ENV)}",
            "request_max_retries = 0",
            "stream_max_retries = 1",
            "",
        ])
        codex.config_path.write_text(config + (extra_config.strip() + "\n" if extra_config.strip() else ""))
        if hooks is not None:
            codex.write_hooks(hooks)
        return codex

    def trust_project(self, project: Path) -> None:
        """Mark ``project`` trusted in ``config.toml`` (``[projects."<path>"] trust_level = "trusted"``,
        what ``codex exec --trust`` saves): only then does Codex load its ``.codex/`` layer, its
        ``.codex/hooks.json`` among it (whose hooks still need their own trust)."""
        with self.config_path.open("a") as config:
            config.write(f'\n[projects.{toml_string(str(project))}]\ntrust_level = "trusted"\n')

    def write_hooks(self, hooks: dict[str, Any]) -> None:
        """``hooks`` as ``$CODEX_HOME/hooks.json``: ``{"hooks": {"Event": [{"matcher": ..., "hooks": [...]}]}}``."""
        self.hooks_path.write_text(json.dumps(hooks, indent=2) + "\n")

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a Codex process: this home, the scripted provider's key, no network."""
        env = {name: os.environ[name] for name in _KEPT_ENV if name in os.environ}
        env.update(_NO_NETWORK)
        # TMPDIR inside the home: Codex saves a hook's whole additionalContext there when it truncates it.
        (self.home / "tmp").mkdir(exist_ok=True)
        env.update(HOME=str(self.home), CODEX_HOME=str(self.codex_home), TMPDIR=str(self.home / "tmp"),
                   **{API_KEY_ENV: "sk-scripted"})
        env.update(extra)
        return env

    def _run(self, args: list[str], *, project: Path, env: dict[str, str] | None,
             timeout: float) -> CodexRun:
        command = [str(CODEX), *args]
        with subprocess.Popen(command, cwd=project, env=self.env(**(env or {})), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              **new_group_options()) as process:
            try:
                stdout, stderr = process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                _stop(process)
                raise
        return CodexRun(subprocess.CompletedProcess(command, process.returncode, stdout, stderr))

    def exec(self, prompt: str, *, project: Path, bypass_hook_trust: bool = False,
             auto_compact_token_limit: int | None = None, args: tuple[str, ...] = (),
             env: dict[str, str] | None = None, timeout: float = RUN_TIMEOUT_S) -> CodexRun:
        """``codex exec --json PROMPT`` in ``project`` (its cwd and workspace root), to completion.
        ``auto_compact_token_limit``: see the module docstring; ``args`` go before the prompt
        (``-c key=value``, ``--enable FEATURE``); ``env`` adds to :meth:`env`. A timeout raises
        ``subprocess.TimeoutExpired`` (the process is killed)."""
        flags = self._flags(bypass_hook_trust, auto_compact_token_limit)
        return self._run([*flags, *args, prompt], project=project, env=env, timeout=timeout)

    def resume(self, prompt: str, *, project: Path, session_id: str | None = None, bypass_hook_trust: bool = False,
               auto_compact_token_limit: int | None = None, args: tuple[str, ...] = (),
               env: dict[str, str] | None = None, timeout: float = RUN_TIMEOUT_S) -> CodexRun:
        """``codex exec resume`` of ``session_id`` (the newest session when None) with a new prompt:
        SessionStart fires with ``source`` ``resume``; the options are :meth:`exec`'s."""
        flags = self._flags(bypass_hook_trust, auto_compact_token_limit)
        target = [session_id] if session_id else ["--last"]
        return self._run([*flags, *args, "resume", *target, prompt], project=project, env=env, timeout=timeout)

    @staticmethod
    def _flags(bypass_hook_trust: bool, auto_compact_token_limit: int | None) -> list[str]:
        flags = ["exec", "--json", "--skip-git-repo-check"]
        if bypass_hook_trust:
            flags.append("--dangerously-bypass-hook-trust")
        if auto_compact_token_limit is not None:
            flags += ["-c", f"model_auto_compact_token_limit={auto_compact_token_limit}"]
        return flags

    def app_server(self, project: Path, *, timeout: float = RUN_TIMEOUT_S) -> AppServer:
        """A ``codex app-server`` of this home, started in ``project`` when its ``with`` block begins."""
        return AppServer(self, project, timeout=timeout)

    def list_hooks(self, project: Path) -> list[dict[str, Any]]:
        """Every hook Codex finds for ``project`` (``hooks/list``), each with its ``key``, ``eventName``
        (camelCase: ``sessionStart``), ``command``, ``sourcePath``, ``currentHash`` and ``trustStatus``
        (``untrusted``, ``trusted``, ``modified`` or ``managed``)."""
        with self.app_server(project) as server:
            listing = server.request("hooks/list", {"cwds": [str(project)]})
        return [hook for entry in listing["data"] for hook in entry["hooks"]]

    def trust_hooks(self, project: Path, hooks: list[dict[str, Any]] | None = None) -> None:
        """Record ``hooks`` (entries of :meth:`list_hooks`; all of them when None) as trusted, as Codex's
        own ``/hooks`` does: ``config/batchWrite`` of ``hooks.state."<key>".trusted_hash = <currentHash>``
        into the user's ``config.toml``. The hash is Codex's, never computed here."""
        chosen = self.list_hooks(project) if hooks is None else hooks
        edits = [{"keyPath": f"hooks.state.{toml_string(hook['key'])}.trusted_hash", "value": hook["currentHash"],
                  "mergeStrategy": "upsert"} for hook in chosen]
        with self.app_server(project) as server:
            server.request("config/batchWrite", {"edits": edits})

    def rollouts(self) -> list[Path]:
        """The session transcripts Codex wrote (``$CODEX_HOME/sessions/**/rollout-*.jsonl``), oldest first."""
        return sorted(self.codex_home.glob("sessions/**/rollout-*.jsonl"), key=lambda p: p.stat().st_mtime)


class AppServer:
    """``codex app-server`` over stdio (JSON-RPC 2.0, one JSON object a line) for one ``with`` block:
    :meth:`request` sends a request and returns its answer's ``result``; the notifications that
    arrive meanwhile are kept, in order, and :meth:`wait_for` waits for one. The block begins with
    the ``initialize`` / ``initialized`` handshake.

    Resource handling:
        The server leads its own process session; leaving the block closes its stdin (it exits,
        dropping any request not yet answered: each is awaited before the next is sent) and kills
        the session if it has not exited 10 s later.

    Error handling:
        An error answer, or none by the deadline (``timeout`` seconds after the block began),
        raises AssertionError naming the method.
    """

    def __init__(self, codex: CodexHome, project: Path, *, timeout: float = RUN_TIMEOUT_S) -> None:
        self.codex = codex
        self.project = project
        self.timeout = timeout
        self.notifications: list[dict[str, Any]] = []
        self._lines: queue.Queue[str] = queue.Queue()
        self._numbers = itertools.count()
        self._waited: dict[str, int] = {}  # per method: where the next wait_for looks from

    def __enter__(self) -> AppServer:
        self._deadline = time.monotonic() + self.timeout
        self._process = subprocess.Popen([str(CODEX), "app-server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, cwd=self.project, env=self.codex.env(),
                                         text=True, **new_group_options())
        assert self._process.stdout is not None
        threading.Thread(target=_pump, args=(self._process.stdout, self._lines), name="codex-app-server-reader",
                         daemon=True).start()
        self.request("initialize", {"clientInfo": {"name": "sessionmem-tests", "version": "0"}})
        self._send({"method": "initialized"})
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _stop(self._process)

    def _send(self, message: dict[str, Any]) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
        self._process.stdin.flush()

    def _next(self, waiting_for: str) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=max(0.0, self._deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"app-server: no {waiting_for} in {self.timeout} s") from None
        message = json.loads(line) if line.startswith("{") else {}
        return message if isinstance(message, dict) else {}

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The ``result`` of ``method`` called with ``params``."""
        number = next(self._numbers)
        self._send({"id": number, "method": method, "params": params})
        while True:
            message = self._next(f"answer to {method}")
            if message.get("id") == number:
                assert "result" in message, f"app-server {method}: {message}"
                return dict(message["result"])
            if "method" in message and "id" not in message:
                self.notifications.append(message)

    def wait_for(self, method: str) -> dict[str, Any]:
        """The ``params`` of the next notification ``method`` (``turn/completed``, ``hook/completed``...)
        not yet waited for: one already kept, else the next to arrive."""
        while True:
            for position in range(self._waited.get(method, 0), len(self.notifications)):
                if self.notifications[position].get("method") == method:
                    self._waited[method] = position + 1
                    return dict(self.notifications[position].get("params") or {})
            message = self._next(f"notification {method}")
            if "method" in message and "id" not in message:
                self.notifications.append(message)


def _stop(process: subprocess.Popen[str]) -> None:
    """Kill ``process`` and what it started: ``e2e/node_modules/.bin/codex`` is npm's node wrapper,
    and a killed wrapper leaves the native CLI running; each Codex process leads its own session."""
    try:
        kill_process_group(process.pid)
    except ProcessLookupError:
        pass  # it had ended
    process.wait()


def _pump(stream: IO[str], lines: queue.Queue[str]) -> None:
    """Every line of ``stream`` into ``lines``, until it ends (the reader thread of :meth:`CodexHome.app_server`)."""
    for line in stream:
        lines.put(line)


_RECORDER = """\
import json, os, sys, time
data = sys.stdin.read()
try:
    payload = json.loads(data)
    event, source = payload.get("hook_event_name") or "unknown", payload.get("source") or ""
except ValueError:
    event, source = "unparsable", ""
folder = sys.argv[1]
pause = os.path.join(folder, event + ".sleep")
if os.path.exists(pause):
    time.sleep(float(open(pause).read()))
with open(os.path.join(folder, "%d-%s.json" % (time.time_ns(), event)), "w") as f:
    f.write(data)
reply = os.path.join(folder, event + "." + source + ".reply")
if not (source and os.path.exists(reply)):
    reply = os.path.join(folder, event + ".reply")
if os.path.exists(reply):
    sys.stdout.write(open(reply).read())
code = os.path.join(folder, event + ".exit")
if os.path.exists(code):
    sys.stderr.write("scripted failure of the " + event + " hook\\n")
    sys.exit(int(open(code).read()))
"""


def recording_hooks(folder: Path, *, events: tuple[str, ...] = HOOK_EVENTS, timeout: int = 30) -> dict[str, Any]:
    """A ``hooks.json`` document with one command hook for each of ``events`` that saves its stdin to
    ``folder/<ns>-<hook_event_name>.json`` (:func:`recorded_payloads` reads them back). What the hook
    answers is scripted by files in ``folder``: ``<Event>.sleep`` holds seconds to wait first (the
    payload is saved after it), ``<Event>.reply`` is printed to stdout (``<Event>.<source>.reply`` instead,
    when there is one, for a payload with that ``source``: SessionStart's), ``<Event>.exit`` holds an exit
    status to end with (stderr then says so)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "record_hook.py"
    script.write_text(_RECORDER)
    command = shlex.join([sys.executable, str(script), str(folder)])
    return {"hooks": {event: [{"hooks": [{"type": "command", "command": command, "timeout": timeout}]}]
                      for event in events}}


def recorded_payloads(folder: Path) -> list[dict[str, Any]]:
    """The payloads :func:`recording_hooks` saved, in the order they arrived."""
    return [json.loads(path.read_text()) for path in sorted(folder.glob("*-*.json"),
                                                             key=lambda p: int(p.name.split("-", 1)[0]))]
