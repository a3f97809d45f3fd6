"""End to end with the real OpenCode (npm opencode-ai, pinned in e2e/).

OpenCode runs headless (``opencode run``) against the scripted chat completions server (an
OpenAI-compatible provider, ``@ai-sdk/openai-compatible``, which OpenCode bundles: nothing is fetched),
with a temporary HOME and XDG folders whose OpenCode configuration got sessionmem's plugin and MCP
server from ``sessionmem install --agent opencode``. The plugin's hooks start the worker themselves,
exactly as for a user, and every worker they started is stopped at the end.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sessionmem.protocol.agents import OPENCODE
from sessionmem.testing.chat_completions_api import Message, ScriptedChatCompletionsAPI, tool_call
from sessionmem.testing.opencode_recording import MODEL, configure, environment, turn
from sessionmem.testing.opencode_recording import OPENCODE as OPENCODE_BIN
from sessionmem.testing.worker_process import WorkerProcess

from .conftest import data_dir_contains, session_observations, stored_session
from .test_e2e_claude_code import Harness
from .test_e2e_gemini import GeminiHarness

# One OpenCode at a time, and the module's harness set up once (`make test` runs in parallel).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("opencode")]



def system_text(body: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content") or "") for m in body.get("messages") or [] if m.get("role") == "system")


class Conversation:
    """The model's side of the scripted sessions: tool calls chosen by the prompt of the turn."""

    def __init__(self, project: Path) -> None:
        self.project = project

    def steps(self, prompt: str, tools: list[str]) -> list[dict[str, Any]]:
        """The tool calls of the turn (or whole messages, with ``tool_calls``), one a model request."""
        if "divide bug" in prompt:
            calc = str(self.project / "calc.py")
            return [
                tool_call("read", {"filePath": str(self.project / "README.md")}),  # there is none: it fails
                tool_call("read", {"filePath": calc}),  # OpenCode edits only a file read first
                tool_call("edit", {"filePath": calc, "oldString": "    return a / b",
                                   "newString": "    if b == 0:\n        raise ZeroDivisionError('b is 0')\n"
                                                "    return a / b"}),
                tool_call("bash", {"command": "python3 -c 'import calc; calc.divide(1, 0)'",
                                   "description": "Check the new error"}),
                tool_call("write", {"filePath": "NOTES.md", "content": "divide() now rejects b == 0\n"}),
            ]
        if "then compact" in prompt:
            # The context reported all but full after this step: OpenCode compacts the session, then continues.
            return [{"content": "Checking the divide fix first.", "prompt_tokens": 99_000,
                     "tool_calls": [tool_call("bash", {"command": "echo divide-checked", "description": "Check"})]}]
        if "search the memory" in prompt and "sessionmem_search" in tools:
            return [tool_call("sessionmem_search", {"query": "divide"})]
        return []

    def __call__(self, body: dict[str, Any]) -> Message:
        if not body.get("tools"):
            return {"content": "Calc session"}  # OpenCode's side call: the session's title
        tools = [t.get("function", {}).get("name", "") for t in body["tools"]]
        prompt, done = turn(body)
        steps = self.steps(prompt, tools)
        if done < len(steps):
            step = steps[done]
            return step if "tool_calls" in step else {"content": None, "tool_calls": [step]}
        return {"content": "Done: divide() rejects zero." if steps else "We fixed divide() last time."}


class OpenCodeHarness(Harness):
    """The Claude Code harness's project, data dir and worker handling, with OpenCode as the agent."""

    def __init__(self, root: Path, api: ScriptedChatCompletionsAPI) -> None:
        super().__init__(root, api)  # type: ignore[arg-type]  # its url is never read: env() below
        self.completions = api

    def env(self, **extra: str) -> dict[str, str]:
        env = environment(self.home, self.project)  # OpenCode's, its XDG folders under this HOME
        env.update(SESSIONMEM_DATA_DIR=str(self.data_dir), SESSIONMEM_PORT="0", SESSIONMEM_BATCH_QUIET="0.1",
                   SESSIONMEM_COMPRESSOR="offline")
        env.update(self.extra_env)
        env.update(extra)
        return env

    sessionmem = GeminiHarness.sessionmem  # `sessionmem ARGS` with this harness's environment

    def opencode(self, prompt: str) -> tuple[str, str]:
        """One headless session; returns its id and the reply's text."""
        # --auto: the tools run without asking, as the Gemini CLI's --yolo (headless, OpenCode would refuse them).
        # The prompt word by word: OpenCode puts a message argument that holds spaces in quotes.
        args = [str(OPENCODE_BIN), "run", "--auto", "--format", "json", "-m", MODEL, *prompt.split()]
        result = subprocess.run(args, cwd=self.project, env=self.env(), capture_output=True, text=True,
                                timeout=180, stdin=subprocess.DEVNULL)
        assert result.returncode == 0, f"opencode failed: {result.stdout[-2000:]} {result.stderr[-2000:]}"
        events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
        session_ids = {e.get("sessionID") for e in events if e.get("sessionID")}
        assert len(session_ids) == 1, result.stdout[-2000:]
        text = "".join(e["part"].get("text", "") for e in events
                       if e.get("type") == "text" and isinstance(e.get("part"), dict))
        return session_ids.pop(), text


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenCodeHarness]:
    if not OPENCODE_BIN.exists():
        pytest.fail(f"{OPENCODE_BIN} is missing: `make test` installs the pinned OpenCode (npm ci in e2e/)")
    with ScriptedChatCompletionsAPI() as api:
        h = OpenCodeHarness(tmp_path_factory.mktemp("e2e-opencode"), api)
        api.responder = Conversation(h.project)
        configure(h.home, api.url)
        installed = h.sessionmem("install", "--agent", "opencode")
        assert installed.returncode == 0, installed.stdout + installed.stderr
        try:
            yield h
        finally:
            h.stop_workers()  # every worker the plugin's hooks started: none outlives the test


@pytest.fixture(scope="module")
def session_one(harness: OpenCodeHarness) -> dict[str, Any]:
    """The divide bug fixed in five tool uses (a read that fails, a read, an edit, a failing command, a new
    file), captured."""
    session_id, reply = harness.opencode("Fix the divide bug in calc.py <private>secret</private>")
    assert reply == "Done: divide() rejects zero."
    worker = harness.started_worker()
    worker.wait_idle()
    return {"session_id": session_id, "worker": worker}


def summaries(worker: WorkerProcess, session_id: str) -> list[dict[str, Any]]:
    return [s for s in worker.get("/api/summaries")["summaries"] if s["claudeSessionId"] == session_id]


def test_an_opencode_session_is_captured_prompt_tools_and_turn(harness: OpenCodeHarness,
                                                              session_one: dict[str, Any]) -> None:
    worker, session_id = session_one["worker"], session_one["session_id"]
    worker.wait_until(lambda: len(session_observations(worker, session_id)) == 5 and summaries(worker, session_id),
                      timeout=30)
    session = stored_session(worker, session_id)
    assert session["project"] == "calcproj" and session["promptCounter"] == 1
    assert session["firstPrompt"] == "Fix the divide bug in calc.py"
    assert session["agent"] == OPENCODE

    rows = session_observations(worker, session_id)
    assert sorted(r["toolName"] for r in rows) == ["Bash", "Edit", "Read", "Read", "Write"]
    assert {r["agent"] for r in rows} == {OPENCODE}
    by_tool = {(r["toolName"], r["failed"]): r for r in rows}
    missing, edit, bash, write = (by_tool[("Read", True)], by_tool[("Edit", False)], by_tool[("Bash", True)],
                                  by_tool[("Write", False)])
    assert ("Read", False) in by_tool
    failure = worker.get(f"/api/observations/{bash['id']}")
    assert failure["type"] == "failure" and "exit status 1" in failure["facts"]  # the command exited 1
    # The read that threw (no tool.execute.after), from its part's update; the command that exited 1.
    assert "README.md" in json.dumps(worker.get(f"/api/observations/{missing['id']}"))
    assert str(harness.project / "calc.py") in json.dumps(worker.get(f"/api/observations/{edit['id']}"))
    # A relative path, made absolute.
    assert str(harness.project / "NOTES.md") in json.dumps(worker.get(f"/api/observations/{write['id']}"))
    assert len(summaries(worker, session_id)) == 1  # session.idle: the end of the turn

    assert (harness.project / "NOTES.md").exists()  # OpenCode really ran the tools
    assert "ZeroDivisionError('b is 0')" in (harness.project / "calc.py").read_text()
    assert data_dir_contains(harness.data_dir, b"secret") == []
    log = harness.data_dir / "hooks.log"
    assert not log.exists() or "unexpected" not in log.read_text()


def test_a_new_session_receives_the_memory_of_the_first(harness: OpenCodeHarness,
                                                        session_one: dict[str, Any]) -> None:
    first_request = len(harness.completions.requests)
    session_id, reply = harness.opencode("What did we change last time?")
    assert session_id != session_one["session_id"]
    assert reply == "We fixed divide() last time."
    turns = [r.body for r in harness.completions.requests[first_request:] if r.body.get("tools")]
    assert turns, "OpenCode made no model request"
    system = system_text(turns[0])
    assert "<sessionmem-context" in system  # SessionStart's context, in the session's system prompt
    context = system[system.index("<sessionmem-context"):]
    assert "calc.py" in context.split("</sessionmem-context>")[0]  # an observation of session 1


def test_the_mcp_server_answers_a_search_through_opencode(harness: OpenCodeHarness,
                                                          session_one: dict[str, Any]) -> None:
    first_request = len(harness.completions.requests)
    session_id, _ = harness.opencode("Please search the memory for the divide fix")
    turns = [r.body for r in harness.completions.requests[first_request:] if r.body.get("tools")]
    tools = [t.get("function", {}).get("name", "") for t in turns[0]["tools"]]
    assert "sessionmem_search" in tools, tools  # OpenCode's name for an MCP tool: <server>_<tool>
    results = [m for m in turns[-1]["messages"] if m.get("role") == "tool"]
    assert results, "the model's search call got no answer"
    assert "calc.py" in json.dumps(results[-1])  # session 1's memory, found by the MCP server
    worker = harness.started_worker()
    worker.wait_idle()
    # sessionmem's own tools are not remembered: the search is not an observation of this session.
    assert session_observations(worker, session_id) == []


def test_after_a_compaction_the_session_s_checkpoint_is_handed_back(harness: OpenCodeHarness,
                                                                    session_one: dict[str, Any]) -> None:
    first_request = len(harness.completions.requests)
    session_id, _ = harness.opencode("Check the divide fix then compact")
    bodies = [r.body for r in harness.completions.requests[first_request:]]
    # OpenCode's compaction: a request without tools that hands the model the conversation to summarize.
    compactions = [i for i, body in enumerate(bodies) if not body.get("tools") and "<conversation>" in turn(body)[0]]
    assert compactions, "OpenCode did not compact (the test proves nothing then)"
    checkpoint = "This session so far (from before its conversation was compacted"
    before = [system_text(body) for body in bodies[:compactions[0]] if body.get("tools")]
    after = [system_text(body) for body in bodies[compactions[0] + 1:] if body.get("tools")]
    assert before and not any(checkpoint in text for text in before)
    # SessionStart with source "compact": the session's own checkpoint first, in the system prompt.
    assert after and checkpoint in after[0], after
    worker = harness.started_worker()
    worker.wait_idle()
    assert stored_session(worker, session_id)["agent"] == OPENCODE
