"""Codex's app server is another program: its answers are read as input, and one in a shape sessionmem does not
know is never a traceback nor a trust it did not mean to give.

A stand-in for ``codex app-server`` (a script speaking its JSON-RPC over stdio, answering each method with
what the test scripts) plays Codex's answers in shapes a later or broken Codex might give: a hook whose fields
have other types beside sessionmem's own, a listing that is no list, a configuration that is no object. The
real Codex CLI's answers are tested in ``tests/test_codex_install.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from sessionmem.agents import codex
from sessionmem.agents.codex_app_server import CodexAppServer, CodexUnavailable, ListedHook

STAND_IN = """\
import json, sys
answers = json.loads({answers!r})
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    print(json.dumps({{"jsonrpc": "2.0", "id": message["id"], **answers.get(message["method"], {{"result": {{}}}})}}),
          flush=True)
"""


def stand_in(tmp_path: Path, answers: dict[str, Any]) -> str:
    """An executable that answers as ``codex app-server`` would, each method with ``answers[method]`` (a
    ``result`` or an ``error``)."""
    script = tmp_path / "codex"
    script.write_text(f"#!{sys.executable}\nimport sys\nsys.argv[1:] == ['app-server'] or sys.exit(2)\n"
                      + STAND_IN.format(answers=json.dumps(answers)))
    script.chmod(0o755)
    return str(script)


@pytest.fixture
def codex_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "codex-home"
    home.mkdir()
    monkeypatch.setenv("CODEX_HOME", str(home))
    return home


def our_hook(stage: str, **fields: Any) -> dict[str, Any]:
    return {"key": f"user:{stage}", "eventName": stage[:1].lower() + stage[1:], "source": "user",
            "sourcePath": str(codex.hooks_path()), "command": codex.hook_command(stage, agent=codex.CODEX),
            "currentHash": "sha256:0", "trustStatus": "trusted", **fields}


def test_hooks_described_in_other_shapes_are_passed_over_and_ours_still_read(codex_home: Path, tmp_path: Path) -> None:
    codex.install(codex.hooks_path(), stages=codex.STAGES, agent=codex.CODEX)
    listing = {"data": [{"hooks": [
        our_hook("SessionStart"),
        our_hook("Stop", trustStatus=["trusted"]),  # another type: not read as trusted
        {"key": 5, "command": {"type": "prompt"}},  # another kind of hook, from a later Codex
        "not a hook",
        our_hook("PostToolUse", sourcePath="/tmp/\u0000/hooks.json"),  # names no file
    ]}]}
    answers = {"hooks/list": {"result": listing},
               "config/read": {"result": {"config": {"mcp_servers": {"sessionmem": [1, 2]}}}}}
    codex_cli = stand_in(tmp_path, answers)
    with CodexAppServer(codex_cli) as app:
        assert [hook.key for hook in app.hooks(str(tmp_path))] == ["user:SessionStart", "user:PostToolUse"]
    found = codex.wiring(codex_cli, str(tmp_path))
    assert found.problem == "" and found.trusted == {"SessionStart"} and found.untrusted == set()
    assert found.mcp is None and found.foreign_mcp


@pytest.mark.parametrize(("answers", "said"), [
    ({"hooks/list": {"result": {"data": 5}}}, "hooks/list with no list of hooks"),
    ({"hooks/list": {"result": {"data": [{"hooks": {"a": 1}}]}}}, "hooks/list with no list of hooks"),
    ({"hooks/list": {"result": {"data": []}}, "config/read": {"result": {"config": ["x"]}}},
     "config/read with no configuration"),
    ({"hooks/list": {"result": []}}, "hooks/list with no result"),
    ({"hooks/list": {"error": {"code": -32601, "message": "no such method"}}}, "Codex refused hooks/list: no such"),
])
def test_an_answer_in_another_shape_is_a_problem_reported_not_a_traceback(
        codex_home: Path, tmp_path: Path, answers: dict[str, Any], said: str) -> None:
    codex.install(codex.hooks_path(), stages=codex.STAGES, agent=codex.CODEX)
    codex_cli = stand_in(tmp_path, answers)
    found = codex.wiring(codex_cli, str(tmp_path))
    assert said in found.problem and found.trusted == set()
    installed = codex.install_codex(codex_cli)  # hooks written; Codex's part told, not done
    assert said in installed.problem and not installed.missing
    with CodexAppServer(codex_cli) as app, pytest.raises(CodexUnavailable, match=said.split(":")[0]):
        app.hooks(str(tmp_path))
        app.config()


def test_a_listed_hook_reads_codex_s_field_names() -> None:
    hook = ListedHook(key="k", event_name="sessionStart", command="c", source="user", source_path="/p",
                      current_hash="h", trust_status="trusted")
    assert msgspec.convert(msgspec.to_builtins(hook), ListedHook) == hook
    assert set(msgspec.to_builtins(hook)) == {"key", "eventName", "command", "source", "sourcePath", "currentHash",
                                              "trustStatus"}
