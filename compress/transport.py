"""The network between an LLM backend and its model: the proxy and the extra CAs, from sessionmem's settings.

The worker keeps no proxy or CA variable of whoever started it (:mod:`sessionmem.protocol.environment`):
one project's session could otherwise send every project's batches through its own proxy, or
make the worker trust its own CA. A user behind a corporate proxy, or a TLS-intercepting one
with its own CA, gives them to sessionmem instead: ``llm_proxy`` and ``llm_ca_bundle``. Every
backend applies them the same way:

- the ``anthropic`` SDK and the ``openai-compatible`` client: one ``httpx2`` transport
  (:func:`http_transport`) with ``proxy`` and an SSL context holding the system's CAs and the
  bundle's (:func:`ssl_context`), and ``trust_env=False``: no ``HTTPS_PROXY``, ``SSL_CERT_FILE``
  or ``~/.netrc`` is read, whatever the process's environment holds;
- the ``claude -p`` child (:func:`cli_proxy_environment`): ``HTTPS_PROXY``/``HTTP_PROXY`` and
  ``NODE_EXTRA_CA_CERTS``, set from the settings, never passed through.

Resource handling:
    :func:`ssl_context` reads the bundle and the system's CAs from disk: call it where the
    clients are made, on a worker thread, never on the Trio thread.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from sessionmem.settings import Settings

if TYPE_CHECKING:
    import ssl

    import httpx2


def ssl_context(settings: Settings) -> ssl.SSLContext:
    """The system's CAs (as ``httpx2`` loads them, without ``SSL_CERT_FILE``/``SSL_CERT_DIR``), and those of
    ``llm_ca_bundle`` besides. Blocking (it reads files)."""
    import httpx2

    context = httpx2.create_ssl_context(verify=True, trust_env=False)
    if settings.llm_ca_bundle:
        context.load_verify_locations(cafile=os.path.expanduser(settings.llm_ca_bundle))
    return context


def http_transport(settings: Settings, *, limits: httpx2.Limits | None = None) -> httpx2.AsyncHTTPTransport:
    """An ``httpx2`` transport through ``llm_proxy`` (if set) trusting :func:`ssl_context`. Blocking."""
    import httpx2

    return httpx2.AsyncHTTPTransport(verify=ssl_context(settings), trust_env=False,
                                     proxy=settings.llm_proxy or None, limits=limits or httpx2.Limits())


def cli_proxy_environment(settings: Settings) -> dict[str, str]:
    """What the Claude Code CLI reads for its proxy and its extra CAs, from the settings ({} when neither is set)."""
    env = {}
    if settings.llm_proxy:
        env["HTTPS_PROXY"] = env["HTTP_PROXY"] = settings.llm_proxy
    if settings.llm_ca_bundle:
        env["NODE_EXTRA_CA_CERTS"] = os.path.expanduser(settings.llm_ca_bundle)
    return env
