"""Which compressor the worker uses, and why: chosen once, when the worker starts (:func:`choose_backend`).

``compressor = "auto"`` (the default) picks, in order: ``anthropic`` when sessionmem's
``anthropic_api_key`` is set (never ``ANTHROPIC_API_KEY`` of whichever session started the
worker: :mod:`sessionmem.protocol.environment`); else ``claude-code`` when a
Claude Code CLI is found (``claude_path``, or ``claude`` on ``PATH``), whose login the
backend reads with ``claude auth status`` off the Trio thread, in the background after the
worker starts -- the offline compressor serves while it is not logged in; else ``offline``.
Finding the CLI is a few ``stat`` calls, so choosing never delays the worker's start.
The choice is made once (``PATH`` read once) and carried as a value, :class:`BackendChoice`,
to the compressor it builds (and from there to ``/debug``'s ``compressor`` and the health
route) and to ``sessionmem doctor``; the reason is in ``/debug`` (``compressor.reason``).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import assert_never

import msgspec

from sessionmem.compress import provider
from sessionmem.compress.base import Compressor
from sessionmem.compress.offline import OfflineCompressor
from sessionmem.settings import AUTO, ENV, Backend, Settings, find_claude_cli, plain_http_warnings

log = logging.getLogger(__name__)

# What a user may have set for Claude Code or the SDK that the worker does not read, and the setting that does.
NOT_INHERITED = {
    "ANTHROPIC_API_KEY": "anthropic_api_key",
    "ANTHROPIC_AUTH_TOKEN": "anthropic_api_key",
    "ANTHROPIC_BASE_URL": "anthropic_base_url",
    "CLAUDE_CONFIG_DIR": "claude_config_dir",
    "CLAUDE_CODE_OAUTH_TOKEN": "claude_code_oauth_token",
    **dict.fromkeys(("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"), "llm_proxy"),
    **dict.fromkeys(("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"), "llm_ca_bundle"),
}


def not_inherited(environ: Mapping[str, str]) -> list[str]:
    """Lines for ``doctor``: each provider variable set in ``environ`` that the worker ignores, and what to set
    (the setting, and its ``SESSIONMEM_*`` variable)."""
    variable = {setting: name for name, setting in ENV.items()}
    return [f"{name} is set here, but the worker does not read it (one project's session may set it too): "
            f"set {setting} ({variable[setting]}) to use it"
            for name, setting in NOT_INHERITED.items() if environ.get(name)]


class BackendChoice(msgspec.Struct, frozen=True, kw_only=True):
    """The compressor backend the worker runs, chosen once at start (:func:`choose_backend`), and why."""

    backend: Backend
    reason: str  # its rule, explained: /debug's compressor.reason and doctor begin with it
    claude_cli: str = ""  # the Claude Code CLI found for claude-code ("": none found, or another backend)


def choose_backend(settings: Settings, environ: Mapping[str, str] | None = None) -> BackendChoice:
    """The one rule for ``compressor``: a backend it names, or for ``auto``, ``anthropic`` when
    ``anthropic_api_key`` is set, else ``claude-code`` when a Claude Code CLI is found (``claude_path``, or
    ``claude`` on ``environ``'s ``PATH``; default: this process's), else ``offline``.

    It reads ``PATH`` at most once, so call it once, when the worker (or a command) starts, and pass the
    result on: the settings stay a plain value, and a ``PATH`` changed later changes nothing.
    """
    if settings.compressor != AUTO:
        backend = Backend(settings.compressor)
        found = find_claude_cli(settings.claude_path, environ) if backend == Backend.CLAUDE_CODE else ""
        return BackendChoice(backend=backend, reason=f"set: compressor = {backend}", claude_cli=found)
    if settings.anthropic_api_key:  # never ANTHROPIC_API_KEY: it may be one project's (protocol/environment.py)
        return BackendChoice(backend=Backend.ANTHROPIC,
                             reason="auto: an Anthropic API key is configured (anthropic_api_key)")
    if found := find_claude_cli(settings.claude_path, environ):
        return BackendChoice(backend=Backend.CLAUDE_CODE,
                             reason="auto: no Anthropic API key, a Claude Code CLI is installed", claude_cli=found)
    where = f"not at claude_path {settings.claude_path}" if settings.claude_path else "not on PATH"
    return BackendChoice(backend=Backend.OFFLINE, reason=f"auto: no Anthropic API key, and no Claude Code CLI ({where})")


def build_compressor(settings: Settings, choice: BackendChoice) -> Compressor:
    """The compressor of ``choice``; the LLM backends' modules are imported only when chosen (the anthropic SDK
    costs an offline worker ~100 MB and its start-up time)."""
    for warning in plain_http_warnings(settings, choice.backend):
        log.warning("%s", warning)
    match choice.backend:
        case Backend.ANTHROPIC:
            from sessionmem.compress.anthropic_backend import AnthropicCompressor

            return AnthropicCompressor(settings, reason=choice.reason)
        case Backend.CLAUDE_CODE:
            from sessionmem.compress.claude_code_backend import ClaudeCodeCompressor

            return ClaudeCodeCompressor(settings, executable=choice.claude_cli, reason=choice.reason)
        case Backend.OPENAI_COMPATIBLE:
            from sessionmem.compress.openai_backend import OpenAICompatibleCompressor

            return OpenAICompatibleCompressor(settings, reason=choice.reason)
        case Backend.OFFLINE:
            return OfflineCompressor(reason=choice.reason)
        case unknown:
            assert_never(unknown)


def choose_compressor(settings: Settings) -> Compressor:
    """The compressor ``settings`` choose now (:func:`choose_backend`, then :func:`build_compressor`)."""
    return build_compressor(settings, choose_backend(settings))


def describe(settings: Settings, choice: BackendChoice, *, login_timeout_s: float = 20.0,
             platform: str = sys.platform) -> tuple[Backend, str]:
    """(backend, why) of ``choice`` as ``sessionmem doctor`` reports it: for ``claude-code``, the CLI's login read
    now (what to do when it is not, on ``platform``: :func:`~.claude_code_backend.headless_login_advice`).

    Blocking (it runs ``claude auth status``): for commands, never on the worker's Trio thread.
    """
    import subprocess

    backend, why = choice.backend, choice.reason
    where = provider.describe(settings, backend)
    why = f"{why}; {where}" if where else why
    if backend != Backend.CLAUDE_CODE:
        return backend, why
    from sessionmem.compress.claude_code_backend import cli_environment, login_advice, parse_login

    executable = choice.claude_cli
    if not executable:
        return backend, f"{why}; no Claude Code CLI found: offline compressor meanwhile"
    try:
        done = subprocess.run([executable, "auth", "status", "--json"], capture_output=True, timeout=login_timeout_s,
                              env=cli_environment(settings), stdin=subprocess.DEVNULL, check=False,
                              cwd=settings.data_dir if settings.data_dir.is_dir() else None)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return backend, f"{why}; `{executable} auth status` failed ({exc}): offline compressor meanwhile"
    login = parse_login(done.returncode, done.stdout, advice=login_advice(settings, platform))
    meanwhile = "" if login.logged_in else ": offline compressor until it is"
    return backend, f"{why}; Claude Code CLI {executable}, {login.detail}{meanwhile}"
