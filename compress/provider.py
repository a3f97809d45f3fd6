"""Where an LLM backend's requests go and which credential they carry: what ``/debug`` and ``doctor`` show.

Read from sessionmem's settings only, as the backends read them: the model's address is
``anthropic_base_url`` or ``openai_base_url``, the credential a setting of sessionmem's or
the user's own Claude Code login -- never a variable of whichever session started the
worker (:mod:`sessionmem.protocol.environment`). Only the host and the credential's kind
are shown, never a secret.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from sessionmem.compress.base import ProviderStatistics
from sessionmem.settings import Settings

ANTHROPIC_HOST = "api.anthropic.com"


def _host(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    return f"{host}:{parts.port}" if parts.port else host


def provider_of(settings: Settings, backend: str) -> ProviderStatistics | None:
    """Where ``backend``'s requests go under ``settings`` (None for the offline compressor)."""
    anthropic_host = _host(settings.anthropic_base_url) if settings.anthropic_base_url else ANTHROPIC_HOST
    if backend == "anthropic":
        return ProviderStatistics(host=anthropic_host, credential="API key: anthropic_api_key (sessionmem setting)")
    if backend == "claude-code":
        if settings.claude_code_oauth_token:
            credential = "Claude Code login: claude_code_oauth_token (sessionmem setting)"
        else:
            credential = f"Claude Code login in {settings.claude_config_dir or '~/.claude'} (the user's own)"
        return ProviderStatistics(host=anthropic_host, credential=credential)
    if backend == "openai-compatible":
        credential = "API key: openai_api_key (sessionmem setting)" if settings.openai_api_key else "none"
        return ProviderStatistics(host=_host(settings.openai_base_url), credential=credential)
    return None


def describe(settings: Settings, backend: str) -> str:
    """One line for ``doctor``: ``requests to HOST, credential: …`` ("" offline)."""
    provider = provider_of(settings, backend)
    return f"requests to {provider.host}, credential: {provider.credential}" if provider is not None else ""
