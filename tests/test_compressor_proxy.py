"""The compressor behind a corporate proxy or a TLS-intercepting CA: ``llm_proxy`` and ``llm_ca_bundle``.

The worker keeps no proxy or CA variable of whoever started it (tests/test_compressor_sandbox.py), so a user
behind a proxy gives sessionmem its own: every LLM backend then sends its requests through ``llm_proxy`` and
trusts ``llm_ca_bundle``'s CAs besides the system's, and nothing of the environment. Shown with a real forward
proxy on loopback (:mod:`sessionmem.testing.forward_proxy`), the scripted model servers, a real worker process,
the real pinned Claude Code CLI, and a scripted Messages API behind TLS with a certificate of a test CA.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from sessionmem.compress.anthropic_backend import AnthropicCompressor
from sessionmem.compress.base import ProviderStatistics, SessionContext
from sessionmem.compress.choice import not_inherited
from sessionmem.compress.claude_code_backend import cli_environment
from sessionmem.compress.openai_backend import OpenAICompatibleCompressor
from sessionmem.compress.provider import describe, provider_of
from sessionmem.events import ObservationEvent
from sessionmem.settings import Settings, SettingsError, load_settings, url_host
from sessionmem.testing.certificates import issue_server_certificate, make_authority
from sessionmem.testing.chat_completions_api import ScriptedChatCompletionsAPI
from sessionmem.testing.claude_login import logged_in_home
from sessionmem.testing.forward_proxy import ForwardProxy
from sessionmem.testing.messages_api import ScriptedMessagesAPI
from sessionmem.testing.worker_process import WorkerProcess, start_worker

from .test_claude_code_compressor import CLAUDE, _require_cli

PASSWORD = "pr0xy-s3cret-pw"


@pytest.fixture
def api() -> Iterator[ScriptedMessagesAPI]:
    with ScriptedMessagesAPI() as scripted:
        yield scripted


@pytest.fixture
def proxy() -> Iterator[ForwardProxy]:
    with ForwardProxy() as forward:
        yield forward


def _with_login(url: str) -> str:
    return url.replace("http://", f"http://alice:{PASSWORD}@", 1)


def _event(tool_use_id: str) -> ObservationEvent:
    return ObservationEvent(claude_session_id="s", project="p", tool_name="Read", tool_use_id=tool_use_id,
                            tool_input={"file_path": "/work/p/a.py"}, tool_response="print('hi')")


async def _compress_one(compressor: Any, *, timeout: float = 60) -> bool:
    """One tool use through ``compressor`` (closed after): whether a model compressed it."""
    try:
        with trio.fail_after(timeout):
            (row,) = await compressor.compress(SessionContext("s", "p"), [_event("t1")])
    finally:
        await compressor.aclose()
    return bool(row.compressed)


def _ca_bundle(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    return make_authority(directory, "corporate-ca").certificate


# -- the settings --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["socks5://127.0.0.1:1080", "127.0.0.1:3128", "http://", "http://:3128",
                                 f"ftp://alice:{PASSWORD}@proxy.example", f"http://alice:{PASSWORD}@proxy:port"])
def test_llm_proxy_must_be_an_http_url_with_a_host(tmp_path: Path, url: str) -> None:
    with pytest.raises(SettingsError, match="llm_proxy must be an http:// or https:// URL with a host") as caught:
        load_settings({"SESSIONMEM_LLM_PROXY": url}, data_dir=str(tmp_path))
    assert PASSWORD not in str(caught.value)


def test_llm_ca_bundle_must_be_a_readable_pem_file(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"llm_ca_bundle: cannot read .*missing\.pem"):
        load_settings({"SESSIONMEM_LLM_CA_BUNDLE": str(tmp_path / "missing.pem")}, data_dir=str(tmp_path))
    with pytest.raises(SettingsError, match="llm_ca_bundle: cannot read"):
        load_settings({"SESSIONMEM_LLM_CA_BUNDLE": str(tmp_path)}, data_dir=str(tmp_path))  # a directory
    not_pem = tmp_path / "notes.txt"
    not_pem.write_text("not a certificate\n")
    with pytest.raises(SettingsError, match="holds no PEM certificate"):
        load_settings({"SESSIONMEM_LLM_CA_BUNDLE": str(not_pem)}, data_dir=str(tmp_path))


def test_the_proxy_and_the_bundle_come_from_sessionmems_settings(tmp_path: Path) -> None:
    bundle = _ca_bundle(tmp_path / "ca")
    (tmp_path / "settings.json").write_text(json.dumps({"llm_ca_bundle": str(bundle)}))
    settings = load_settings({"SESSIONMEM_LLM_PROXY": f"https://alice:{PASSWORD}@proxy.corp.example:8443",
                              "HTTPS_PROXY": "http://evil.example:3128", "SSL_CERT_FILE": "/nonexistent.pem"},
                             data_dir=str(tmp_path))
    assert settings.llm_proxy == f"https://alice:{PASSWORD}@proxy.corp.example:8443"
    assert settings.llm_ca_bundle == str(bundle)
    assert PASSWORD not in repr(settings)
    defaults = load_settings({"HTTPS_PROXY": "http://evil.example:3128"}, data_dir=str(tmp_path / "plain"))
    assert defaults.llm_proxy == "" and defaults.llm_ca_bundle == ""


def test_a_proxy_urls_user_and_password_are_never_shown(tmp_path: Path) -> None:
    assert url_host(f"http://alice:{PASSWORD}@proxy.corp.example:3128") == "proxy.corp.example:3128"
    assert url_host(f"https://{PASSWORD}@[::1]:8443/") == "[::1]:8443"
    assert url_host("http://proxy.corp.example") == "proxy.corp.example"
    assert url_host("") == ""
    # A base URL is checked for its scheme and host only: a port that is not a number is shown, never raised.
    keyless = Settings(data_dir=tmp_path, compressor="openai-compatible", openai_model="m",
                       openai_base_url="http://127.0.0.1:port/v1")
    assert provider_of(keyless, "openai-compatible") == ProviderStatistics(host="(unreadable URL)", credential="none")
    bundle = _ca_bundle(tmp_path / "ca")
    settings = Settings(data_dir=tmp_path, llm_proxy=f"http://alice:{PASSWORD}@proxy.corp.example:3128",
                        llm_ca_bundle=str(bundle), openai_model="m")
    for backend in ("anthropic", "claude-code", "openai-compatible"):
        provider = provider_of(settings, backend)
        assert provider is not None and provider.proxy == "proxy.corp.example:3128" and provider.ca_bundle
        line = describe(settings, backend)
        assert "through the proxy proxy.corp.example:3128" in line and str(bundle) in line
        assert PASSWORD not in line and "alice" not in line
        assert PASSWORD not in msgspec.json.encode(provider).decode()
    assert provider_of(Settings(data_dir=tmp_path), "anthropic") == ProviderStatistics(
        host="api.anthropic.com", credential="API key: anthropic_api_key (sessionmem setting)", proxy="",
        ca_bundle=False)


def test_the_cli_child_gets_the_proxy_and_cas_from_settings_only(tmp_path: Path) -> None:
    worker_env = {"HOME": "/home/u", "PATH": "/usr/bin", "HTTPS_PROXY": "http://evil.example:3128",
                  "HTTP_PROXY": "http://evil.example:3128", "NODE_EXTRA_CA_CERTS": "/tmp/evil-ca.pem",
                  "SSL_CERT_FILE": "/tmp/evil-ca.pem"}
    plain = cli_environment(Settings(data_dir=tmp_path), worker_env)
    assert not {"HTTPS_PROXY", "HTTP_PROXY", "NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE"} & plain.keys()
    bundle = _ca_bundle(tmp_path / "ca")
    proxy_url = f"http://alice:{PASSWORD}@proxy.corp.example:3128"
    configured = cli_environment(Settings(data_dir=tmp_path, llm_proxy=proxy_url, llm_ca_bundle=str(bundle)),
                                 worker_env)
    assert configured["HTTPS_PROXY"] == configured["HTTP_PROXY"] == proxy_url
    assert configured["NODE_EXTRA_CA_CERTS"] == str(bundle)
    assert "SSL_CERT_FILE" not in configured and "evil" not in json.dumps(configured)


def test_doctor_says_which_setting_replaces_a_proxy_or_ca_variable() -> None:
    lines = not_inherited({"HTTPS_PROXY": "http://proxy:3128", "NODE_EXTRA_CA_CERTS": "/etc/ca.pem"})
    assert any(line.startswith("HTTPS_PROXY is set here") and "llm_proxy (SESSIONMEM_LLM_PROXY)" in line
               for line in lines), lines
    assert any(line.startswith("NODE_EXTRA_CA_CERTS") and "llm_ca_bundle" in line for line in lines), lines


# -- the SDK clients, through a real proxy and a real TLS handshake --------------------------------------------


async def test_the_openai_compatible_compressor_goes_through_llm_proxy(tmp_path: Path, proxy: ForwardProxy) -> None:
    with ScriptedChatCompletionsAPI() as chat:
        settings = load_settings({}, data_dir=str(tmp_path), compressor="openai-compatible", openai_model="qwen",
                                 openai_base_url=chat.url, llm_proxy=_with_login(proxy.url))
        assert await _compress_one(OpenAICompatibleCompressor(settings)) and len(chat.requests) == 1
    (through,) = proxy.requests
    assert through.method == "POST" and through.target == f"{chat.url.rstrip('/')}/chat/completions"
    assert through.proxy_authorization.startswith("Basic ")  # the proxy's login, from the URL


def _serve_over_tls(api: ScriptedMessagesAPI, tmp_path: Path) -> tuple[str, Path]:
    """``api`` answering over TLS with a certificate of a CA of its own, as a TLS-intercepting proxy's
    machine sees every host: (its https:// URL, that CA's PEM file)."""
    authority = make_authority(tmp_path, "intercepting-ca")
    certificate = issue_server_certificate(authority, tmp_path, hosts=("localhost",), addresses=("127.0.0.1",))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificate.certificate, certificate.key)
    server = api._server  # the scripted server's listening socket, wrapped: a failed handshake drops that connection
    server.socket = context.wrap_socket(server.socket, server_side=True)
    return f"https://127.0.0.1:{api.port}", authority.certificate


async def test_extra_cas_are_trusted_from_llm_ca_bundle_never_from_the_environment(
        tmp_path: Path, api: ScriptedMessagesAPI, monkeypatch: pytest.MonkeyPatch) -> None:
    url, ca = _serve_over_tls(api, tmp_path)
    # What a project's session might set: neither is read by the compressor's client.
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca))

    async def compressed(**settings: Any) -> bool:
        loaded = load_settings({}, data_dir=str(tmp_path / "data"), compressor="anthropic", anthropic_api_key="k",
                               anthropic_base_url=url, llm_max_attempts=1, **settings)
        return await _compress_one(AnthropicCompressor(loaded))

    assert not await compressed()  # the certificate is not the system's CAs' nor the environment's: refused
    assert api.requests == []
    assert await compressed(llm_ca_bundle=str(ca))
    assert len(api.requests) == 1


# -- real workers ---------------------------------------------------------------------------------------------


def _post_and_read(worker: WorkerProcess) -> tuple[dict[str, Any], dict[str, Any]]:
    worker.post("/api/sessions/observations", {
        "claudeSessionId": "px", "cwd": "/work/px", "tool_name": "Read", "tool_use_id": "px1",
        "tool_input": {"file_path": "/work/px/a.py"}, "tool_response": "print('hi')"})
    worker.wait_idle(timeout=180)
    (row,) = worker.get("/api/observations?limit=5")["observations"]
    return row, worker.get("/debug.json")


def _environment(proxy: ForwardProxy, hostile: ForwardProxy, **settings: str) -> dict[str, str]:
    """A worker's start: sessionmem's settings name ``proxy``; the starter's environment names ``hostile``."""
    return {"SESSIONMEM_LLM_PROXY": _with_login(proxy.url), "SESSIONMEM_BATCH_QUIET": "0.1",
            "HTTPS_PROXY": hostile.url, "HTTP_PROXY": hostile.url, "ALL_PROXY": hostile.url, **settings}


@pytest.mark.slow
def test_a_worker_sends_the_anthropic_compressors_requests_through_llm_proxy(
        tmp_path: Path, api: ScriptedMessagesAPI, proxy: ForwardProxy) -> None:
    data_dir = tmp_path / "data"
    with ForwardProxy() as hostile:
        env = _environment(proxy, hostile, SESSIONMEM_COMPRESSOR="anthropic",
                           SESSIONMEM_ANTHROPIC_API_KEY="sk-ant-api03-mine", SESSIONMEM_ANTHROPIC_BASE_URL=api.url)
        with start_worker(data_dir, env=env, timeout=60) as worker:
            row, debug = _post_and_read(worker)
        assert hostile.requests == []
    assert row["compressed"] and row["compressor"] == "anthropic" and row["title"].startswith("Scripted:")
    assert api.requests and proxy.targets() == [f"{api.url.rstrip('/')}/v1/messages"] * len(api.requests)
    provider = debug["compressor"]["provider"]
    assert provider["proxy"] == f"127.0.0.1:{proxy.port}" and provider["caBundle"] is False
    assert PASSWORD not in json.dumps(debug) and PASSWORD not in (data_dir / "worker.log").read_text()


@pytest.mark.slow
def test_a_worker_sends_the_claude_code_compressors_runs_through_llm_proxy(
        tmp_path: Path, api: ScriptedMessagesAPI, proxy: ForwardProxy) -> None:
    """The pinned CLI honours ``HTTP_PROXY`` for a plain-http base URL: its requests to the scripted API go
    through the proxy that ``llm_proxy`` names, none through the starter's."""
    _require_cli()
    home = logged_in_home(tmp_path / "home")
    data_dir = tmp_path / "data"
    with ForwardProxy() as hostile:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONMEM_", "ANTHROPIC_", "CLAUDE"))}
        env.update(_environment(proxy, hostile, SESSIONMEM_COMPRESSOR="claude-code",
                                SESSIONMEM_ANTHROPIC_BASE_URL=api.url),
                   HOME=str(home), PATH=f"{CLAUDE.parent}:{os.path.dirname(sys.executable)}:/usr/bin:/bin")
        with start_worker(data_dir, env=env, timeout=60) as worker:
            row, debug = _post_and_read(worker)
        assert hostile.requests == []
    assert row["compressed"] and row["compressor"] == "claude-code" and api.requests
    messages = [r for r in proxy.requests if r.method == "POST"]
    assert len(messages) == len(api.requests)
    assert all(r.target.startswith(f"{api.url.rstrip('/')}/v1/messages") for r in messages), messages
    assert debug["compressor"]["provider"]["proxy"] == f"127.0.0.1:{proxy.port}"
    assert PASSWORD not in json.dumps(debug)


@pytest.mark.slow
async def test_the_claude_code_cli_trusts_llm_ca_bundle(tmp_path: Path, api: ScriptedMessagesAPI) -> None:
    """``llm_ca_bundle`` reaches the CLI as ``NODE_EXTRA_CA_CERTS``: a Messages API behind a certificate of
    that CA answers the run; without it, the run is refused by the CLI's certificate check."""
    from sessionmem.compress.claude_code_backend import ClaudeCodeCompressor

    _require_cli()
    url, ca = _serve_over_tls(api, tmp_path)
    home = logged_in_home(tmp_path / "home")
    environ = {"HOME": str(home), "PATH": os.environ["PATH"], "NODE_EXTRA_CA_CERTS": str(ca)}

    async def compressed(**settings: Any) -> bool:
        loaded = load_settings({}, data_dir=str(tmp_path / "data"), compressor="claude-code", anthropic_base_url=url,
                               llm_max_attempts=1, **settings)
        return await _compress_one(ClaudeCodeCompressor(loaded, executable=str(CLAUDE), environ=environ,
                                                        run_timeout_s=60), timeout=120)

    assert not await compressed()  # the environment's NODE_EXTRA_CA_CERTS is not passed on: refused
    assert api.requests == []
    assert await compressed(llm_ca_bundle=str(ca))
    assert len(api.requests) == 1
