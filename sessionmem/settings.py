"""Worker settings: defaults, then ``settings.json`` in the data dir, then the environment.

Error handling:
    A malformed ``settings.json`` or an environment value of the wrong type raises
    :class:`SettingsError` naming the key, so ``sessionmem serve`` fails at once with
    a clear message instead of running with a half-applied configuration.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

from sessionmem.protocol import client_settings, oskit
from sessionmem.protocol.limits import MAX_BODY_BYTES
from sessionmem.protocol.state import STATE_FILE

# What clients also read (hooks, commands: sessionmem.protocol.client_settings, standard library
# only) has one definition, there: its defaults and environment variable names.
SHARED = client_settings.DEFAULTS
DEFAULT_PORT = SHARED["port"]
DEFAULT_SKIP_TOOLS = ("TodoWrite", "AskUserQuestion", "ListMcpResourcesTool", "SlashCommand", "Skill")


DATABASE_FILE = "sessionmem.db"


class Backend(enum.StrEnum):
    """A compressor backend: what the ``compressor`` setting names (or ``auto`` chooses at start:
    :func:`sessionmem.compress.choice.choose_backend`), what ``/debug`` and ``doctor`` show, and what a
    stored row's ``compressor`` says made it. A ``StrEnum``: each member is its own spelling in
    settings files, environment variables, JSON and the docs."""

    ANTHROPIC = "anthropic"
    CLAUDE_CODE = "claude-code"
    OPENAI_COMPATIBLE = "openai-compatible"
    OFFLINE = "offline"


AUTO: Final = "auto"  # the compressor setting that lets the worker choose a backend, once, at start
COMPRESSORS: Final = (AUTO, *Backend)  # what the compressor setting may be


class SettingsError(ValueError):
    """A setting could not be read; the message names the key and the source."""


@dataclasses.dataclass(frozen=True)
class Settings:
    """What the worker and its commands are configured with (:func:`load_settings`): a plain value.

    Nothing here reads the environment or ``PATH``: what ``compressor = "auto"`` becomes is chosen
    once, when the worker starts (:func:`sessionmem.compress.choice.choose_backend`), and carried
    from there as a value; the properties below are paths in the data dir.
    """

    data_dir: Path = Path(client_settings.DEFAULT_DATA_DIR).expanduser()
    host: str = SHARED["host"]
    port: int = DEFAULT_PORT

    # Compression
    compressor: Backend | Literal["auto"] = AUTO  # a Backend, or auto: chosen once at start (compress/choice.py)
    model: str = "claude-haiku-4-5"
    # The provider, from these settings only: never from the environment of whichever session started the
    # worker (sessionmem.protocol.environment). The secrets are kept out of repr(), never logged or shown.
    anthropic_api_key: str = dataclasses.field(default="", repr=False)  # the anthropic compressor's key
    anthropic_base_url: str = ""  # the Messages API's address for both Anthropic backends ("": Anthropic's own)
    claude_path: str = ""  # the Claude Code CLI of the claude-code compressor ("": `claude` on PATH)
    claude_config_dir: str = ""  # the CLI's configuration and login directory ("": ~/.claude)
    # A long-lived login for the CLI's runs (`claude setup-token`), for a worker with no login of its own
    claude_code_oauth_token: str = dataclasses.field(default="", repr=False)
    claude_code_concurrency: int = 2  # Claude Code CLI processes the claude-code compressor runs at once
    llm_concurrency: int = 2
    llm_timeout_s: float = 60.0
    llm_max_attempts: int = 4
    llm_max_tokens: int = 2048
    llm_backoff_cap_s: float = 20.0
    llm_breaker_failures: int = 5  # calls failed for good in a row that open the circuit breaker
    llm_breaker_open_s: float = 60.0  # offline compressor meanwhile; doubles while trial calls fail
    llm_daily_token_budget: int = 2_000_000  # input + output tokens a UTC day, whole worker (0: no limit)
    llm_session_token_cap: int = 300_000  # per Claude session (0: no cap)
    # The openai-compatible compressor (a local model: Ollama, LM Studio, vLLM, llama.cpp's server).
    # The key is kept out of repr(): a logged Settings must not carry it.
    openai_base_url: str = "http://127.0.0.1:11434/v1"  # Ollama's default address
    openai_model: str = ""  # required with compressor = openai-compatible: the server's name of the model
    openai_api_key: str = dataclasses.field(default="", repr=False)  # sent as a Bearer token when set
    # A key or login sent in clear to a host that is not this machine is refused at start unless this is set.
    llm_allow_plain_http: bool = False
    # The network between every LLM backend and its model (compress/transport.py), from these settings only:
    # never HTTPS_PROXY, SSL_CERT_FILE or NODE_EXTRA_CA_CERTS of whichever session started the worker.
    # The proxy URL may hold a user and password: kept out of repr(), never logged; /debug shows its host.
    llm_proxy: str = dataclasses.field(default="", repr=False)  # http(s)://[user:password@]host:port ("": none)
    llm_ca_bundle: str = ""  # a PEM file of CAs trusted besides the system's ("": the system's only)

    # Actors
    batch_size: int = 8
    batch_quiet_s: float = 2.0
    idle_timeout_s: float = 300.0
    mailbox_size: int = 256
    max_restarts: int = 5
    restart_window_s: float = 30.0
    fault_injection: bool = False

    # HTTP edge
    max_body_bytes: int = MAX_BODY_BYTES
    tool_response_cap: int = SHARED["tool_response_cap"]
    skip_tools: tuple[str, ...] = DEFAULT_SKIP_TOOLS
    redact_secrets: bool = True  # API keys, tokens, passwords: never stored; off: kept here, never pushed (redaction.py)
    redact_patterns: tuple[str, ...] = ()  # more regular expressions to redact (a group, if any, is the secret)
    access_log: bool = False
    max_connections: int = 512  # open at once (and below the file-descriptor limit); the quietest makes room
    request_timeout_s: float = 30.0  # a request must be answered within this (slow-drip headers and bodies)
    keep_alive_timeout_s: float = 5.0  # an idle keep-alive connection is closed after this
    shutdown_timeout_s: float = 15.0  # SIGTERM to exit, all stages together
    code_watch_s: float = 10.0  # how often the worker looks whether its code changed on disk (an upgrade; 0: never)

    # Context injection
    context_token_budget: int = 2000
    context_observations: int = 50
    # With nothing to rank by (a new session, before its first prompt): the files the recent sessions worked
    # on most, one line each (search/context.py files_that_matter); 0: the most recent observations instead.
    context_files: int = 8
    # Other machines' memories in what is injected unasked (SessionStart, file and prompt recall), marked
    # "unverified"; off: this machine's own only there, the others through search and the MCP tools.
    context_other_machines: bool = True
    file_recall: bool = True  # PostToolUse on a file: past observations about it, as additionalContext
    file_recall_max: int = 3  # observations a tool use may recall
    prompt_recall: bool = True  # UserPromptSubmit: the most relevant past observations, within 0.5 s
    prompt_recall_max: int = 3
    prompt_recall_budget_s: float = 0.5  # what one prompt's recall may take in the worker; past it, nothing
    # The relevance floor: a memory less similar in meaning to the prompt (or to a resumed or compacted
    # session's focus) is not handed over (cosine similarity of MiniLM vectors, 0 to 1; 0: no floor).
    # Chosen on the tune half of bench/handover_eval.py: the best F0.5 of prompt recall (bench/README.md).
    recall_min_similarity: float = 0.5
    # The background pass that merges near-duplicate memories, marks a decision a later one replaced as
    # superseded, and counts which memories handed over were then used (docs/search.md#consolidation).
    consolidation: bool = True

    # Retention
    raw_retention_days: float = 30.0  # raw tool input/output of stored observations kept this long (0: always)

    # Search and the vector index
    embedder: str = "minilm"  # minilm | none (full-text search only)
    index_save_interval_s: float = 120.0  # the vector index is saved this often while it changes

    # Team memory (team/, docs/team.md): this machine's memory of shared projects pushed to one
    # PostgreSQL, and the other machines' pulled into the local store. Off while database_url is "".
    # The URL may hold a password: kept out of repr(), never logged (libpq's PGPASSWORD and a 0600
    # PGPASSFILE work as well, and keep it out of settings).
    database_url: str = dataclasses.field(default="", repr=False)  # postgresql://… (a unix-socket URI too)
    share_projects: tuple[str, ...] = ()  # project names shared with the team database, or ("*",) for all
    machine_name: str = ""  # how this machine's rows are labelled for others ("": the host name)
    user_name: str = ""  # whose they are ("": the login name)
    team_pull_interval_s: float = 1.0  # how often the other machines' new rows are asked for
    team_push_batch: int = 200  # rows pushed to the team database in one transaction

    # Hooks (read by the hook processes through sessionmem.protocol.client_settings)
    hook_timeout_s: float = SHARED["hook_timeout_s"]
    start_timeout_s: float = SHARED["start_timeout_s"]
    system_message: bool = SHARED["system_message"]

    def model_of(self, backend: Backend) -> str:
        """The model a compressor backend asks for: ``openai_model`` of a local server, else ``model``."""
        return self.openai_model if backend == Backend.OPENAI_COMPATIBLE else self.model

    @property
    def db_path(self) -> Path:
        return self.data_dir / DATABASE_FILE

    @property
    def index_dir(self) -> Path:
        """Where the vector index is saved."""
        return self.data_dir / "index"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "worker.log"

    @property
    def state_path(self) -> Path:
        """Where a running worker records its pid and bound port."""
        return self.data_dir / STATE_FILE


# Environment variable -> field. Names are the documented public interface; those
# clients read too are defined with them (sessionmem.protocol.client_settings).
ENV = {
    client_settings.DATA_DIR_ENV: "data_dir",
    **client_settings.ENV,
    "SESSIONMEM_COMPRESSOR": "compressor",
    "SESSIONMEM_MODEL": "model",
    "SESSIONMEM_ANTHROPIC_API_KEY": "anthropic_api_key",
    "SESSIONMEM_ANTHROPIC_BASE_URL": "anthropic_base_url",
    "SESSIONMEM_CLAUDE_PATH": "claude_path",
    "SESSIONMEM_CLAUDE_CONFIG_DIR": "claude_config_dir",
    "SESSIONMEM_CLAUDE_CODE_OAUTH_TOKEN": "claude_code_oauth_token",
    "SESSIONMEM_CLAUDE_CODE_CONCURRENCY": "claude_code_concurrency",
    "SESSIONMEM_LLM_CONCURRENCY": "llm_concurrency",
    "SESSIONMEM_LLM_TIMEOUT": "llm_timeout_s",
    "SESSIONMEM_LLM_MAX_ATTEMPTS": "llm_max_attempts",
    "SESSIONMEM_LLM_BACKOFF_CAP": "llm_backoff_cap_s",
    "SESSIONMEM_LLM_BREAKER_FAILURES": "llm_breaker_failures",
    "SESSIONMEM_LLM_BREAKER_OPEN": "llm_breaker_open_s",
    "SESSIONMEM_LLM_DAILY_TOKENS": "llm_daily_token_budget",
    "SESSIONMEM_LLM_SESSION_TOKENS": "llm_session_token_cap",
    "SESSIONMEM_OPENAI_BASE_URL": "openai_base_url",
    "SESSIONMEM_OPENAI_MODEL": "openai_model",
    "SESSIONMEM_OPENAI_API_KEY": "openai_api_key",
    "SESSIONMEM_LLM_ALLOW_PLAIN_HTTP": "llm_allow_plain_http",
    "SESSIONMEM_LLM_PROXY": "llm_proxy",
    "SESSIONMEM_LLM_CA_BUNDLE": "llm_ca_bundle",
    "SESSIONMEM_BATCH_SIZE": "batch_size",
    "SESSIONMEM_BATCH_QUIET": "batch_quiet_s",
    "SESSIONMEM_IDLE_TIMEOUT": "idle_timeout_s",
    "SESSIONMEM_MAILBOX_SIZE": "mailbox_size",
    "SESSIONMEM_MAX_RESTARTS": "max_restarts",
    "SESSIONMEM_RESTART_WINDOW": "restart_window_s",
    "SESSIONMEM_FAULT_INJECTION": "fault_injection",
    "SESSIONMEM_MAX_BODY_BYTES": "max_body_bytes",
    "SESSIONMEM_SKIP_TOOLS": "skip_tools",
    "SESSIONMEM_REDACT_SECRETS": "redact_secrets",
    "SESSIONMEM_REDACT_PATTERNS": "redact_patterns",
    "SESSIONMEM_ACCESS_LOG": "access_log",
    "SESSIONMEM_MAX_CONNECTIONS": "max_connections",
    "SESSIONMEM_REQUEST_TIMEOUT": "request_timeout_s",
    "SESSIONMEM_KEEP_ALIVE_TIMEOUT": "keep_alive_timeout_s",
    "SESSIONMEM_SHUTDOWN_TIMEOUT": "shutdown_timeout_s",
    "SESSIONMEM_CODE_WATCH": "code_watch_s",
    "SESSIONMEM_CONTEXT_TOKENS": "context_token_budget",
    "SESSIONMEM_CONTEXT_OBSERVATIONS": "context_observations",
    "SESSIONMEM_CONTEXT_FILES": "context_files",
    "SESSIONMEM_CONTEXT_OTHER_MACHINES": "context_other_machines",
    "SESSIONMEM_FILE_RECALL": "file_recall",
    "SESSIONMEM_FILE_RECALL_MAX": "file_recall_max",
    "SESSIONMEM_PROMPT_RECALL": "prompt_recall",
    "SESSIONMEM_PROMPT_RECALL_MAX": "prompt_recall_max",
    "SESSIONMEM_PROMPT_RECALL_BUDGET_S": "prompt_recall_budget_s",
    "SESSIONMEM_RECALL_MIN_SIMILARITY": "recall_min_similarity",
    "SESSIONMEM_CONSOLIDATION": "consolidation",
    "SESSIONMEM_RAW_RETENTION_DAYS": "raw_retention_days",
    "SESSIONMEM_EMBEDDER": "embedder",
    "SESSIONMEM_INDEX_SAVE_INTERVAL": "index_save_interval_s",
    "SESSIONMEM_DATABASE_URL": "database_url",
    "SESSIONMEM_SHARE_PROJECTS": "share_projects",
    "SESSIONMEM_MACHINE_NAME": "machine_name",
    "SESSIONMEM_USER_NAME": "user_name",
    "SESSIONMEM_TEAM_PULL_INTERVAL": "team_pull_interval_s",
    "SESSIONMEM_TEAM_PUSH_BATCH": "team_push_batch",
}
EMBEDDERS = ("minilm", "none")  # what sessionmem.embed.choice builds


def _coerce(name: str, raw: Any, source: str) -> Any:
    field_type = {f.name: f.type for f in dataclasses.fields(Settings)}[name]
    if name == "compressor":  # read as text; load_settings checks it is one of COMPRESSORS
        field_type = "str"
    try:
        if field_type == "Path":
            return Path(str(raw)).expanduser()
        if field_type == "bool":
            if isinstance(raw, bool):
                return raw
            lowered = str(raw).strip().lower()
            if lowered in client_settings.TRUE_WORDS:
                return True
            if lowered in client_settings.FALSE_WORDS:
                return False
            raise ValueError(raw)
        if field_type == "int":
            if isinstance(raw, bool):
                raise ValueError(raw)
            return int(raw)
        if field_type == "float":
            return float(raw)
        if field_type == "tuple[str, ...]":
            if isinstance(raw, str) and raw.lstrip().startswith("["):  # a JSON list (patterns may hold commas)
                raw = json.loads(raw)
            if isinstance(raw, str):
                return tuple(part.strip() for part in raw.split(",") if part.strip())
            if isinstance(raw, list) and all(isinstance(item, str) for item in raw):
                return tuple(raw)
            raise ValueError(raw)
        if not isinstance(raw, str):
            raise ValueError(raw)
        return raw
    except (TypeError, ValueError):
        # A setting kept out of repr() (a key, a URL that may hold a password) is not quoted either.
        secret = not next(f.repr for f in dataclasses.fields(Settings) if f.name == name)
        got = f"a value of type {type(raw).__name__}" if secret else repr(raw)
        raise SettingsError(f"{source}: {name} must be {field_type}, got {got}") from None


def load_settings(environ: dict[str, str] | None = None, **overrides: Any) -> Settings:
    """Build settings from defaults < ``<data_dir>/settings.json`` < environment < overrides.

    ``overrides`` are what the command line said (``--port``, ``--data-dir``); ``None``
    values are ignored so callers can pass argparse results straight through.
    """
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    data_dir_raw = overrides.get("data_dir") or env.get(client_settings.DATA_DIR_ENV) or Settings.data_dir
    # Absolute: the worker works in its data dir (sessionmem.protocol.environment), a relative path would move.
    data_dir = Path(os.path.abspath(Path(data_dir_raw).expanduser()))

    settings_file = data_dir / client_settings.SETTINGS_FILE
    if settings_file.exists():
        try:
            from_file = json.loads(settings_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SettingsError(f"{settings_file}: cannot read settings: {exc}") from None
        if not isinstance(from_file, dict):
            raise SettingsError(f"{settings_file}: expected a JSON object")
        known = {f.name for f in dataclasses.fields(Settings)}
        for key, raw in from_file.items():
            if key not in known:
                raise SettingsError(f"{settings_file}: unknown setting {key!r}")
            values[key] = _coerce(key, raw, str(settings_file))

    for env_name, field_name in ENV.items():
        if env_name in env:
            values[field_name] = _coerce(field_name, env[env_name], env_name)

    for key, raw in overrides.items():
        if raw is not None:
            values[key] = _coerce(key, raw, "command line")
    values["data_dir"] = data_dir

    compressor = values.get("compressor", AUTO)
    if compressor not in COMPRESSORS:
        raise SettingsError(f"compressor must be one of {', '.join(COMPRESSORS)}, got {compressor!r}")
    values["compressor"] = AUTO if compressor == AUTO else Backend(compressor)
    settings = Settings(**values)
    if not 1 <= settings.claude_code_concurrency <= 8:
        raise SettingsError(f"claude_code_concurrency must be 1..8, got {settings.claude_code_concurrency}")
    if settings.compressor == Backend.OPENAI_COMPATIBLE:
        if not settings.openai_model:
            raise SettingsError("compressor openai-compatible needs openai_model (SESSIONMEM_OPENAI_MODEL): "
                                "the server's name of the model, such as qwen2.5-coder:7b for Ollama")
        _check_model_url("openai_base_url", settings.openai_base_url, credential=bool(settings.openai_api_key),
                         allowed=settings.llm_allow_plain_http)
    if settings.anthropic_base_url:
        # Whatever answers there gets the API key or the user's Claude Code login.
        _check_model_url("anthropic_base_url", settings.anthropic_base_url, credential=True,
                         allowed=settings.llm_allow_plain_http)
    _check_network(settings)
    if settings.embedder not in EMBEDDERS:
        raise SettingsError(f"embedder must be one of {', '.join(EMBEDDERS)}, got {settings.embedder!r}")
    if not 0 <= settings.port <= 65535:
        raise SettingsError(f"port must be 0..65535, got {settings.port}")
    if settings.max_restarts < 0 or settings.restart_window_s <= 0:
        raise SettingsError("max_restarts must be >= 0 and restart_window_s > 0")
    if not settings.code_watch_s >= 0:  # NaN too
        raise SettingsError(f"code_watch_s must be >= 0 (0: never), got {settings.code_watch_s}")
    if not 0 < settings.prompt_recall_budget_s <= 60:  # NaN too
        raise SettingsError(f"prompt_recall_budget_s must be over 0 and at most 60, got {settings.prompt_recall_budget_s}")
    if not 0 <= settings.recall_min_similarity <= 1:  # NaN too
        raise SettingsError(f"recall_min_similarity must be 0..1 (0: no floor), got {settings.recall_min_similarity}")
    if not 0 <= settings.context_files <= settings.context_observations:
        raise SettingsError(f"context_files must be 0..context_observations ({settings.context_observations}; "
                            f"0: the most recent observations), got {settings.context_files}")
    for pattern in settings.redact_patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise SettingsError(f"redact_patterns: {pattern!r} is not a regular expression: {exc}") from None
    if settings.database_url and not re.match(r"postgres(ql)?://", settings.database_url):
        # The URL itself is not repeated: it may hold a password.
        raise SettingsError("database_url must be a postgresql:// URL (see docs/team.md)")
    if not settings.team_pull_interval_s > 0 or not 1 <= settings.team_push_batch <= 10_000:
        raise SettingsError("team_pull_interval_s must be > 0 and team_push_batch 1..10000")
    if not 1024 <= settings.tool_response_cap <= settings.max_body_bytes // 4:
        # A request carries up to three capped fields: they must fit the body limit.
        raise SettingsError(f"tool_response_cap must be between 1024 and max_body_bytes / 4 "
                            f"({settings.max_body_bytes // 4}), got {settings.tool_response_cap}")
    return settings


def _check_network(settings: Settings) -> None:
    """``llm_proxy`` an http(s) URL with a host, ``llm_ca_bundle`` a readable PEM file of certificates."""
    from urllib.parse import urlsplit

    if settings.llm_proxy:
        try:
            parts = urlsplit(settings.llm_proxy)
            usable = parts.scheme in ("http", "https") and bool(parts.hostname)
            _ = parts.port  # a port that is not a number raises here
        except ValueError:
            usable = False
        if not usable:
            # The URL itself is not repeated: it may hold a password.
            raise SettingsError("llm_proxy must be an http:// or https:// URL with a host, such as "
                                "http://proxy.example:3128 (a user and password may go before the host)")
    if settings.llm_ca_bundle:
        path = os.path.expanduser(settings.llm_ca_bundle)
        try:
            with open(path, "rb") as bundle:
                pem = bundle.read(16 * 1024 * 1024)
        except OSError as exc:
            raise SettingsError(f"llm_ca_bundle: cannot read {path}: {exc.strerror or exc}") from None
        if b"-----BEGIN CERTIFICATE-----" not in pem:
            raise SettingsError(f"llm_ca_bundle: {path} holds no PEM certificate (-----BEGIN CERTIFICATE-----)")


def url_host(url: str) -> str:
    """``host[:port]`` of a URL (the model's address, the proxy's): never the user or password it may hold
    ("" for no URL)."""
    from urllib.parse import urlsplit

    if not url:
        return ""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return "(unreadable URL)"
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{port}" if port else host


def plain_http_host(url: str) -> str:
    """The host ``url`` reaches in clear over the network: "" for https:// and for this machine's loopback."""
    import ipaddress
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme != "http":
        return ""
    host = (parts.hostname or "").rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return ""
    try:
        return "" if ipaddress.ip_address(host).is_loopback else host
    except ValueError:
        return host


def _check_model_url(name: str, url: str, *, credential: bool, allowed: bool) -> None:
    """The setting ``name`` is an http(s) URL, and does not send a ``credential`` in clear to another host
    unless that is ``allowed`` (``llm_allow_plain_http``)."""
    if not re.match(r"https?://[^/]", url):
        raise SettingsError(f"{name} must be an http:// or https:// URL, got {url!r}")
    host = plain_http_host(url)
    if host and credential and not allowed:
        raise SettingsError(f"{name} is plain http:// to {host}, not this machine: the key or login would cross "
                            f"the network in clear. Use https://, or set llm_allow_plain_http "
                            f"(SESSIONMEM_LLM_ALLOW_PLAIN_HTTP=1) if that network is yours")


def plain_http_warnings(settings: Settings, backend: Backend) -> list[str]:
    """What the worker's log and ``doctor`` say about ``backend``'s model reached in clear over the network."""
    warnings = []
    if backend == Backend.OPENAI_COMPATIBLE and (host := plain_http_host(settings.openai_base_url)):
        carried = "the API key" if settings.openai_api_key else "no key, but every tool use"
        warnings.append(f"openai_base_url is plain http:// to {host}: {carried} crosses the network in clear")
    if backend in (Backend.ANTHROPIC, Backend.CLAUDE_CODE) and (host := plain_http_host(settings.anthropic_base_url)):
        warnings.append(f"anthropic_base_url is plain http:// to {host}: the key or login and every tool use cross "
                        f"the network in clear (llm_allow_plain_http is set)")
    return warnings


def find_claude_cli(claude_path: str = "", environ: Mapping[str, str] | None = None) -> str:
    """The Claude Code CLI's executable: ``claude_path`` if it is one, else ``claude`` on ``PATH``; "" if none.

    Cheap (a few ``stat`` calls): it says whether the CLI is there, not whether it is logged in.
    """
    import shutil

    if claude_path:
        path = os.path.expanduser(claude_path)
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else ""
    env = os.environ if environ is None else environ
    return shutil.which("claude", path=env.get("PATH")) or ""


def machine_origin(settings: Settings) -> tuple[str, str]:
    """(machine, user) that this machine's rows carry in the team database: ``machine_name`` and ``user_name``,
    else the host and login names, read now (the team sync reads them once, when it starts)."""
    import getpass
    import socket

    try:
        user = settings.user_name or getpass.getuser()
    except (KeyError, OSError):  # no login name (a container's numeric uid)
        user = str(oskit.user_id())
    return (settings.machine_name or socket.gethostname(), user)
