"""Where an LLM backend's requests go and which credential they carry: what ``/debug`` and ``doctor`` show.

Read from sessionmem's settings only, as the backends read them: the model's address is
``anthropic_base_url`` or ``openai_base_url``, the credential a setting of sessionmem's or
the user's own Claude Code login -- never a variable of whichever session started the
worker (:mod:`sessionmem.protocol.environment`); so are the proxy the requests go through
(``llm_proxy``) and the extra CAs they trust (``llm_ca_bundle``). Only the hosts, the
credential's kind and whether a CA bundle is set are shown, never a secret (a proxy URL's
user and password included).
"""

from __future__ import annotations

from typing import assert_never

from sessionmem.compress.base import ProviderStatistics
from sessionmem.settings import Backend, Settings, url_host

ANTHROPIC_HOST = "api.anthropic.com"


def provider_of(settings: Settings, backend: Backend) -> ProviderStatistics | None:
    """Where ``backend``'s requests go under ``settings`` (None for the offline compressor)."""
    anthropic_host = url_host(settings.anthropic_base_url) if settings.anthropic_base_url else ANTHROPIC_HOST
    match backend:
        case Backend.ANTHROPIC:
            host, credential = anthropic_host, "API key: anthropic_api_key (sessionmem setting)"
        case Backend.CLAUDE_CODE:
            host = anthropic_host
            if settings.claude_code_oauth_token:
                credential = "Claude Code login: claude_code_oauth_token (sessionmem setting)"
            else:
                credential = f"Claude Code login in {settings.claude_config_dir or '~/.claude'} (the user's own)"
        case Backend.OPENAI_COMPATIBLE:
            host = url_host(settings.openai_base_url)
            credential = "API key: openai_api_key (sessionmem setting)" if settings.openai_api_key else "none"
        case Backend.OFFLINE:
            return None
        case unknown:
            assert_never(unknown)
    return ProviderStatistics(host=host, credential=credential, proxy=url_host(settings.llm_proxy),
                              ca_bundle=bool(settings.llm_ca_bundle))


def describe(settings: Settings, backend: Backend) -> str:
    """One line for ``doctor``: ``requests to HOST[ through the proxy PROXY], credential: …[, trusting …]``
    ("" offline)."""
    provider = provider_of(settings, backend)
    if provider is None:
        return ""
    through = f" through the proxy {provider.proxy} (llm_proxy)" if provider.proxy else ""
    trusting = f", trusting the CAs of {settings.llm_ca_bundle} too (llm_ca_bundle)" if provider.ca_bundle else ""
    return f"requests to {provider.host}{through}, credential: {provider.credential}{trusting}"
