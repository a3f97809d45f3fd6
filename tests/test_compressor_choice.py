"""The compressor backend: one enum for its names, one rule for ``auto``, applied once when the worker starts.

``Settings`` is a plain value: none of its properties reads the environment or ``PATH``
(a property once did, on every read). ``choose_backend`` reads ``PATH`` once; what it
chose travels with the compressor it builds, to ``/debug`` and the health route, and a
``PATH`` changed later changes nothing there.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import msgspec
import pytest
import trio

from sessionmem.compress.choice import BackendChoice, build_compressor, choose_backend
from sessionmem.compress.provider import provider_of
from sessionmem.protocol import routes
from sessionmem.settings import AUTO, COMPRESSORS, Backend, Settings, load_settings
from sessionmem.testing.harness import InProcessWorker
from sessionmem.worker import ShutdownBudget, open_services

DOCS = Path(__file__).resolve().parent.parent / "docs"


def fake_claude(folder: Path) -> Path:
    """A ``claude`` executable in ``folder`` that says it is not logged in (all the choice needs is that it is
    there)."""
    folder.mkdir(parents=True, exist_ok=True)
    cli = folder / "claude"
    cli.write_text("#!/bin/sh\necho '{\"loggedIn\": false}'\nexit 1\n")
    cli.chmod(0o755)
    return cli


def old_rule(settings: Settings, path: str) -> str:
    """The ``auto`` rule as ``Settings.resolved_compressor`` wrote it (re-read on every access), for comparison."""
    import shutil

    if settings.compressor == "auto":
        if settings.anthropic_api_key:
            return "anthropic"
        if settings.claude_path:
            found = os.path.isfile(settings.claude_path) and os.access(settings.claude_path, os.X_OK)
        else:
            found = bool(shutil.which("claude", path=path))
        return "claude-code" if found else "offline"
    return settings.compressor


class CountingEnviron(Mapping[str, str]):
    """An environment that counts how often each variable is read."""

    def __init__(self, values: dict[str, str]) -> None:
        self._values = values
        self.reads: dict[str, int] = {}

    def __getitem__(self, name: str) -> str:
        self.reads[name] = self.reads.get(name, 0) + 1
        return self._values[name]

    def get(self, name: str, default: object = None) -> object:  # type: ignore[override]
        self.reads[name] = self.reads.get(name, 0) + 1
        return self._values.get(name, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def test_backend_names_keep_their_spelling_everywhere(tmp_path: Path) -> None:
    assert [str(backend) for backend in Backend] == ["anthropic", "claude-code", "openai-compatible", "offline"]
    assert COMPRESSORS == ("auto", "anthropic", "claude-code", "openai-compatible", "offline")
    for backend in Backend:
        # Settings files and environment variables spell it as before, and read back as the enum.
        (tmp_path / "settings.json").write_text(json.dumps({"compressor": backend.value, "openai_model": "m"}))
        assert load_settings({}, data_dir=str(tmp_path)).compressor is backend
        assert load_settings({"SESSIONMEM_COMPRESSOR": backend.value, "SESSIONMEM_OPENAI_MODEL": "m"},
                             data_dir=str(tmp_path)).compressor is backend
        # JSON (/debug, the health route, stored rows) and messages spell it as before.
        assert json.dumps(backend) == msgspec.json.encode(backend).decode() == json.dumps(backend.value)
        assert f"{backend}" == backend.value
    (tmp_path / "settings.json").unlink()
    assert load_settings({}, data_dir=str(tmp_path)).compressor == AUTO == "auto"
    # The page of settings names every value the setting takes.
    row = next(line for line in (DOCS / "configuration.md").read_text(encoding="utf-8").splitlines()
               if line.startswith("| `compressor` |"))
    assert all(f"`{value}`" in row for value in COMPRESSORS), row


def test_every_backend_builds_its_own_compressor(tmp_path: Path) -> None:
    """The dispatch on the enum covers every member (mypy checks it too: ``assert_never``)."""
    settings = Settings(data_dir=tmp_path, openai_model="m")
    for backend in Backend:
        compressor = build_compressor(settings, BackendChoice(backend=backend, reason="the test's"))
        try:
            assert compressor.name is backend and compressor.statistics().backend == backend
            assert compressor.statistics().reason.startswith("the test's")
            assert (provider_of(settings, backend) is None) == (backend is Backend.OFFLINE)
        finally:
            trio.run(compressor.aclose)


@pytest.mark.parametrize(("case", "env", "claude_on_path", "expected", "why"), [
    ("an Anthropic API key configured", {"SESSIONMEM_ANTHROPIC_API_KEY": "sk-ant-mine"}, True,
     Backend.ANTHROPIC, "auto: an Anthropic API key is configured (anthropic_api_key)"),
    ("claude on PATH", {}, True,
     Backend.CLAUDE_CODE, "auto: no Anthropic API key, a Claude Code CLI is installed"),
    ("an OpenAI-compatible server's URL set", {"SESSIONMEM_OPENAI_BASE_URL": "http://127.0.0.1:1234/v1"}, False,
     Backend.OFFLINE, "auto: no Anthropic API key, and no Claude Code CLI (not on PATH)"),
    ("none", {}, False,
     Backend.OFFLINE, "auto: no Anthropic API key, and no Claude Code CLI (not on PATH)"),
    ("set to openai-compatible", {"SESSIONMEM_COMPRESSOR": "openai-compatible", "SESSIONMEM_OPENAI_MODEL": "m"}, True,
     Backend.OPENAI_COMPATIBLE, "set: compressor = openai-compatible"),
    ("set to claude-code", {"SESSIONMEM_COMPRESSOR": "claude-code"}, False,
     Backend.CLAUDE_CODE, "set: compressor = claude-code"),
])
def test_the_one_rule_agrees_with_the_old_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str,
                                              env: dict[str, str], claude_on_path: bool, expected: Backend,
                                              why: str) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-inherited")  # one session's: never read
    folder = tmp_path / "bin"
    cli = fake_claude(folder) if claude_on_path else None
    path = str(folder if claude_on_path else tmp_path)
    settings = load_settings(env, data_dir=str(tmp_path / "data"))
    choice = choose_backend(settings, {"PATH": path})
    assert (choice.backend, choice.reason) == (expected, why), case
    assert choice.backend == old_rule(settings, path), case
    assert choice.claude_cli == (str(cli) if cli and expected is Backend.CLAUDE_CODE else ""), case
    # claude_path instead of PATH: found there, not on PATH.
    if case == "claude on PATH":
        by_setting = dataclasses.replace(settings, claude_path=str(cli))
        assert choose_backend(by_setting, {"PATH": str(tmp_path)}).claude_cli == str(cli)
        assert old_rule(by_setting, str(tmp_path)) == "claude-code"


def test_path_is_read_once_and_only_when_the_rule_needs_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "bin"
    cli = fake_claude(folder)
    settings = load_settings({}, data_dir=str(tmp_path / "data"))
    environ = CountingEnviron({"PATH": str(folder), "ANTHROPIC_API_KEY": "sk-ant-inherited"})
    choice = choose_backend(settings, environ)
    assert (choice.backend, choice.claude_cli) == (Backend.CLAUDE_CODE, str(cli))
    assert environ.reads == {"PATH": 1}
    keyed = CountingEnviron({"PATH": str(folder)})
    assert choose_backend(dataclasses.replace(settings, anthropic_api_key="sk-ant-mine"), keyed).backend == "anthropic"
    assert keyed.reads == {}
    # The claude-code compressor runs the CLI its start found: it does not look for it again.
    monkeypatch.setenv("PATH", str(tmp_path))  # no claude there
    compressor = build_compressor(settings, choice)
    try:
        assert f"Claude Code CLI {cli}," in compressor.statistics().reason
    finally:
        trio.run(compressor.aclose)


def test_settings_are_a_value_whatever_the_environment_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every property of ``Settings`` reads the same whatever ``PATH`` and the login name say: the backend
    ``auto`` becomes (which the old ``resolved_compressor`` re-probed on each read) and this machine's origin
    (once a property too) are resolved by their users, once."""
    fake_claude(tmp_path / "bin")
    settings = load_settings({}, data_dir=str(tmp_path / "data"))
    properties = sorted(name for name, value in vars(Settings).items() if isinstance(value, property))

    def read_all() -> list[object]:
        return [getattr(settings, name) for name in properties]

    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.setenv(name, "alice")
    before = read_all()
    monkeypatch.setenv("PATH", str(tmp_path))
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.setenv(name, "bob")
    assert read_all() == before, properties
    assert all(isinstance(value, Path) for value in before), dict(zip(properties, before, strict=True))


async def test_a_worker_keeps_the_backend_its_start_chose(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``auto`` is resolved once, when the worker starts: a ``PATH`` changed afterwards changes neither what
    it runs nor what ``/debug`` and the health route say."""
    cli = fake_claude(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    settings = load_settings({}, data_dir=str(tmp_path / "data"), compressor="auto", port=0)
    async with open_services(settings) as services:
        worker = InProcessWorker(services)
        monkeypatch.setenv("PATH", str(tmp_path))  # no claude there any more
        assert choose_backend(settings).backend == "offline"  # what a start now would choose
        debug = (await worker.get(routes.DEBUG_JSON))["compressor"]
        assert debug["backend"] == "claude-code"
        assert debug["reason"].startswith("auto: no Anthropic API key, a Claude Code CLI is installed; "
                                          f"Claude Code CLI {cli},")
        assert (await worker.get(routes.HEALTH))["compressor"] == "claude-code"


async def test_open_services_stops_its_parts_in_reverse_order_and_passes_a_cancellation_on(tmp_path: Path) -> None:
    """The shut-down stages in their order; a cancellation from outside is never swallowed on the way out,
    and the worker's files are left as a stop leaves them."""
    settings = load_settings({}, data_dir=str(tmp_path / "data"), compressor="offline", port=0)
    budget = ShutdownBudget(settings.shutdown_timeout_s)
    async with open_services(settings, budget=budget) as services:
        assert services.status.ready.is_set()
    assert [stage.name for stage in budget.stages] == ["actors", "index", "compressor", "store"]
    assert services.status.pending_at_exit == 0

    reached_after_the_block = False
    with trio.CancelScope() as outside:
        async with open_services(settings) as services:
            outside.cancel(reason="the test")
            await trio.sleep_forever()
        reached_after_the_block = True
    assert outside.cancelled_caught and not reached_after_the_block
    assert not (settings.data_dir / "worker.json").exists()
