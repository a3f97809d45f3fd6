"""End to end with the real Gemini CLI (npm @google/gemini-cli, pinned in e2e/).

The CLI runs headless (``gemini -p ... --yolo``) against the scripted Gemini API
(``GOOGLE_GEMINI_BASE_URL``), with a temporary HOME whose ``~/.gemini/settings.json`` got
sessionmem's hooks and MCP server from ``sessionmem install --agent gemini-cli``, in a folder its
user trusted (``trustedFolders.json``). The hooks start the worker themselves, exactly as for a user,
and every worker they started is stopped at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sessionmem.protocol.agents import GEMINI_CLI
from sessionmem.testing.gemini_api import Part, ScriptedGeminiAPI, default_parts, request_text, turn_parts

from .conftest import data_dir_contains, session_observations, stored_session
from .test_e2e_claude_code import Harness

# One Gemini CLI at a time, and the module's harness set up once (`make test` runs in parallel).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("gemini")]

REPO = Path(__file__).resolve().parent.parent
GEMINI = REPO / "e2e" / "node_modules" / ".bin" / "gemini"
MODEL = "gemini-2.5-flash"  # named, so the CLI asks no router model which one to use
# The user's own settings before sessionmem is installed: an API key login, no telemetry or update check.
USER_SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "privacy": {"usageStatisticsEnabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
}


class Conversation:
    """The model's side of the scripted sessions: tool calls chosen by the prompt of the turn."""

    def __init__(self, project: Path) -> None:
        self.project = project

    def steps(self, prompt: str, tools: list[str]) -> list[Part]:
        if "divide bug" in prompt:
            return [
                {"functionCall": {"name": "replace", "args": {
                    "file_path": "calc.py", "old_string": "    return a / b", "instruction": "reject zero",
                    "new_string": "    if b == 0:\n        raise ZeroDivisionError('b is 0')\n    return a / b"}}},
                {"functionCall": {"name": "run_shell_command", "args": {
                    "command": "python3 -c 'import calc; calc.divide(1, 0)'", "description": "Check the new error"}}},
                {"functionCall": {"name": "write_file", "args": {"file_path": "NOTES.md",
                                                                 "content": "divide() now rejects b == 0\n"}}},
            ]
        if "search the memory" in prompt:
            search = "mcp_sessionmem_search"
            return [{"functionCall": {"name": search, "args": {"query": "divide"}}}] if search in tools else []
        return []

    def __call__(self, body: dict[str, Any]) -> list[Part]:
        if not body.get("tools"):
            return default_parts(body)  # the CLI's side calls (next speaker, compression)
        tools = [d.get("name", "") for t in body["tools"] for d in t.get("functionDeclarations") or []]
        prompt, done = turn_parts(body)
        steps = self.steps(prompt, tools)
        if done < len(steps):
            return [steps[done]]
        return [{"text": "Done: divide() rejects zero." if steps else "We fixed divide() last time."}]


class GeminiHarness(Harness):
    """The Claude Code harness's project, data dir and worker handling, with the Gemini CLI as the agent."""

    def __init__(self, root: Path, api: ScriptedGeminiAPI) -> None:
        super().__init__(root, api)  # type: ignore[arg-type]  # only its url is read, by env() below
        self.gemini_api = api

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SESSIONMEM_", "ANTHROPIC_", "CLAUDE", "GEMINI_", "GOOGLE_"))}
        # Under GitHub Actions (GITHUB_SHA) the Gemini CLI strips its hooks' environment to a short allow list:
        # this test's SESSIONMEM_* settings would not reach them.
        for name in ("GITHUB_SHA", "SURFACE"):
            env.pop(name, None)
        env.update(HOME=str(self.home), GEMINI_API_KEY="scripted-key", GOOGLE_GEMINI_BASE_URL=self.gemini_api.url,
                   SESSIONMEM_DATA_DIR=str(self.data_dir), SESSIONMEM_PORT="0", SESSIONMEM_BATCH_QUIET="0.1",
                   SESSIONMEM_COMPRESSOR="offline", NO_COLOR="1")
        env.update(self.extra_env)
        env.update(extra)
        return env

    def sessionmem(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "sessionmem", *args], env=self.env(), capture_output=True,
                              text=True, timeout=60, cwd=self.project)

    def gemini(self, prompt: str, *extra_args: str, **env: str) -> tuple[dict[str, Any], str]:
        """One headless session; returns the CLI's JSON result and what it wrote on stderr."""
        args = [str(GEMINI), "-p", prompt, "--yolo", "-m", MODEL, "--output-format", "json", *extra_args]
        result = subprocess.run(args, cwd=self.project, env=self.env(**env), capture_output=True, text=True,
                                timeout=180, stdin=subprocess.DEVNULL)
        assert result.returncode == 0, f"gemini failed: {result.stdout[-2000:]} {result.stderr[-2000:]}"
        output: dict[str, Any] = json.loads(result.stdout)
        assert "error" not in output, output
        return output, result.stderr


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GeminiHarness]:
    if not GEMINI.exists():
        pytest.fail(f"{GEMINI} is missing: `make test` installs the pinned Gemini CLI (npm ci in e2e/)")
    with ScriptedGeminiAPI() as api:
        h = GeminiHarness(tmp_path_factory.mktemp("e2e-gemini"), api)
        api.responder = Conversation(h.project)
        gemini_dir = h.home / ".gemini"
        gemini_dir.mkdir()
        (gemini_dir / "settings.json").write_text(json.dumps(USER_SETTINGS))
        (gemini_dir / "trustedFolders.json").write_text(json.dumps({str(h.project): "TRUST_FOLDER"}))
        installed = h.sessionmem("install", "--agent", "gemini-cli")
        assert installed.returncode == 0, installed.stdout + installed.stderr
        try:
            yield h
        finally:
            h.stop_workers()  # no leaked side processes


@pytest.fixture(scope="module")
def session_one(harness: GeminiHarness) -> dict[str, Any]:
    """The divide bug fixed in three tool uses (an edit, a failing command, a new file), captured by the hooks."""
    output, stderr = harness.gemini("Fix the divide bug in calc.py <private>secret</private>")
    worker = harness.started_worker()
    worker.wait_idle()
    return {"session_id": output["session_id"], "worker": worker, "stderr": stderr}


def test_a_gemini_session_is_captured_prompt_tools_and_end(harness: GeminiHarness,
                                                           session_one: dict[str, Any]) -> None:
    worker, session_id = session_one["worker"], session_one["session_id"]
    worker.wait_until(lambda: stored_session(worker, session_id)["status"] == "completed", timeout=30)
    session = stored_session(worker, session_id)
    assert session["project"] == "calcproj" and session["promptCounter"] == 1
    assert session["firstPrompt"] == "Fix the divide bug in calc.py"  # the user's words, not the memory before them
    assert session["agent"] == GEMINI_CLI

    rows = session_observations(worker, session_id)
    assert [r["toolName"] for r in rows] == ["Edit", "Bash", "Write"]
    edit, bash, write = rows
    failure = worker.get(f"/api/observations/{bash['id']}")
    assert bash["failed"] is True and failure["type"] == "failure" and "exit status 1" in failure["facts"]
    assert not edit["failed"] and not write["failed"]
    detail = json.dumps(worker.get(f"/api/observations/{write['id']}"))
    assert str(harness.project / "NOTES.md") in detail  # a relative path, made absolute
    summaries = [s for s in worker.get("/api/summaries")["summaries"] if s["claudeSessionId"] == session_id]
    assert len(summaries) == 1  # AfterAgent: the end of the turn

    assert (harness.project / "NOTES.md").exists()  # the CLI really ran the tools
    assert "ZeroDivisionError('b is 0')" in (harness.project / "calc.py").read_text()
    assert data_dir_contains(harness.data_dir, b"secret") == []
    log = harness.data_dir / "hooks.log"
    assert not log.exists() or "unexpected" not in log.read_text()


def test_resume_continues_the_same_session(harness: GeminiHarness, session_one: dict[str, Any]) -> None:
    worker, session_id = session_one["worker"], session_one["session_id"]
    before = stored_session(worker, session_id)
    output, _ = harness.gemini("Now add a test file", "--resume", session_id)
    assert output["session_id"] == session_id
    worker.wait_until(lambda: stored_session(worker, session_id)["promptCounter"] == 2, timeout=30)
    after = stored_session(worker, session_id)
    assert after["sessionDbId"] == before["sessionDbId"] and after["firstPrompt"] == before["firstPrompt"]

def test_a_new_session_receives_the_memory_of_the_first(harness: GeminiHarness, session_one: dict[str, Any]) -> None:
    first_request = len(harness.gemini_api.requests)
    output, stderr = harness.gemini("What did we change last time?")
    assert output["session_id"] != session_one["session_id"]
    assert output["response"] == "We fixed divide() last time."
    turns = [r.body for r in harness.gemini_api.requests[first_request:] if r.body.get("tools")]
    assert turns, "the CLI made no model request"
    sent = request_text(turns[0])
    # SessionStart's context, before the prompt: the Gemini CLI escapes its markup and wraps it.
    assert "<hook_context>&lt;sessionmem-context&gt;" in sent
    context = sent[sent.index("<hook_context>&lt;sessionmem-context&gt;"):]
    assert "calc.py" in context.split("</hook_context>")[0]  # an observation of session 1
    assert "sessionmem: " in stderr  # the line for the user (systemMessage), on stderr when headless


def test_the_mcp_server_answers_a_search_through_the_cli(harness: GeminiHarness, session_one: dict[str, Any]) -> None:
    first_request = len(harness.gemini_api.requests)
    output, _ = harness.gemini("Please search the memory for the divide fix")
    turns = [r.body for r in harness.gemini_api.requests[first_request:] if r.body.get("tools")]
    tools = [d.get("name", "") for t in turns[0]["tools"] for d in t.get("functionDeclarations") or []]
    assert "mcp_sessionmem_search" in tools, tools  # the Gemini CLI's name for an MCP tool: mcp_<server>_<tool>
    results = [p["functionResponse"] for body in turns for c in body.get("contents") or []
               for p in c.get("parts") or [] if "functionResponse" in p]
    assert results, "the model's search call got no answer"
    assert "calc.py" in json.dumps(results[-1])  # session 1's memory, found by the MCP server
    worker = harness.started_worker()
    worker.wait_idle()
    # sessionmem's own tools are not remembered: the search is not an observation of this session.
    assert session_observations(worker, output["session_id"]) == []

