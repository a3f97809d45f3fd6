"""Which compressor the worker uses, and why (``Settings.resolved_compressor``).

``compressor = "auto"`` (the default) picks, in order: ``anthropic`` when sessionmem's
``anthropic_api_key`` is set (never ``ANTHROPIC_API_KEY`` of whichever session started the
worker: :mod:`sessionmem.protocol.environment`); else ``claude-code`` when a
Claude Code CLI is found (``claude_path``, or ``claude`` on ``PATH``), whose login the
backend reads with ``claude auth status`` off the Trio thread, in the background after the
worker starts -- the offline compressor serves while it is not logged in; else ``offline``.
Finding the CLI is a few ``stat`` calls, so choosing never delays the worker's start.
The reason is in ``/debug`` (``compressor.reason``) and ``sessionmem doctor``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping

from sessionmem.compress import provider
from sessionmem.compress.base import Compressor
from sessionmem.compress.offline import OfflineCompressor
from sessionmem.settings import ENV, Settings, find_claude_cli, plain_http_warnings

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


def reason(settings: Settings) -> str:
    """Why ``settings.resolved_compressor`` is the one: its rule, explained (the CLI's login aside: the backend
    reads it)."""
    if settings.compressor != "auto":
        return f"set: compressor = {settings.compressor}"
    backend = settings.resolved_compressor
    if backend == "anthropic":
        return "auto: an Anthropic API key is configured (anthropic_api_key)"
    if backend == "claude-code":
        return "auto: no Anthropic API key, a Claude Code CLI is installed"
    where = f"not at claude_path {settings.claude_path}" if settings.claude_path else "not on PATH"
    return f"auto: no Anthropic API key, and no Claude Code CLI ({where})"


def choose_compressor(settings: Settings) -> Compressor:
    backend = settings.resolved_compressor
    why = reason(settings)
    for warning in plain_http_warnings(settings):
        log.warning("%s", warning)
    if backend == "anthropic":
        # Imported only when used: the SDK costs an offline worker ~100 MB and its start-up time.
        from sessionmem.compress.anthropic_backend import AnthropicCompressor

        return AnthropicCompressor(settings, reason=why)
    if backend == "claude-code":
        from sessionmem.compress.claude_code_backend import ClaudeCodeCompressor

        return ClaudeCodeCompressor(settings, reason=why)
    if backend == "openai-compatible":
        # Imported only when used, as the anthropic SDK is.
        from sessionmem.compress.openai_backend import OpenAICompatibleCompressor

        return OpenAICompatibleCompressor(settings, reason=why)
    return OfflineCompressor(reason=why)


def describe(settings: Settings, *, login_timeout_s: float = 20.0, platform: str = sys.platform) -> tuple[str, str]:
    """(backend, why) as ``sessionmem doctor`` reports it: for ``claude-code``, the CLI's login read now
    (what to do when it is not, on ``platform``: :func:`~.claude_code_backend.headless_login_advice`).

    Blocking (it runs ``claude auth status``): for commands, never on the worker's Trio thread.
    """
    import subprocess

    backend, why = settings.resolved_compressor, reason(settings)
    where = provider.describe(settings, backend)
    why = f"{why}; {where}" if where else why
    if backend != "claude-code":
        return backend, why
    from sessionmem.compress.claude_code_backend import cli_environment, login_advice, parse_login

    executable = find_claude_cli(settings.claude_path)
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
