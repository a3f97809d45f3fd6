"""sessionmem in the real Codex CLI (npm @openai/codex, pinned in e2e/), as a user gets it.

``sessionmem install --agent codex`` wires the hooks into a temporary ``$CODEX_HOME`` and has Codex
trust them through its own app server: no run here passes ``--dangerously-bypass-hook-trust``, so
every hook that fires is one Codex itself agreed to run. Codex runs headless (``codex exec``)
against the scripted Responses API; the hooks start the worker themselves and every worker they
started is stopped at the end.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sessionmem.protocol.agents import CODEX as CODEX_AGENT
from sessionmem.testing.codex_cli import CODEX, CodexHome
from sessionmem.testing.responses_api import (
    Item,
    ScriptedResponsesAPI,
    apply_patch,
    input_text,
    is_compaction,
    mcp_tool_call,
    message,
    shell_command,
    tool_outputs,
    turn_prompt,
)
from sessionmem.testing.worker_process import WorkerProcess

from .conftest import data_dir_contains, session_observations, stored_session
from .test_e2e_claude_code import Harness

# One Codex CLI at a time (`make test` runs in parallel).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("codex")]

FIX_DIVIDE = ("*** Begin Patch\n*** Update File: calc.py\n@@\n def divide(a, b):\n-    return a / b\n"
              "+    if b == 0:\n+        raise ZeroDivisionError('b is 0')\n+    return a / b\n*** End Patch\n")
ADD_NOTES = "*** Begin Patch\n*** Add File: NOTES.md\n+divide() now rejects b == 0\n*** End Patch\n"
MCP_ATTEMPTS = 5  # Codex does not wait for an MCP server that is not required: the model tries again


HANDOVER_HEADING = "# Recalled memory of calcproj"  # SessionStart's handover (prompt recall is headed otherwise)


def memory_blocks(body: dict[str, Any]) -> list[str]:
    """The request's ``<sessionmem-context>`` blocks: what sessionmem's hooks handed the model."""
    texts = ["".join(part.get("text", "") for part in item.get("content", []))
             for item in body.get("input", []) if item.get("type") == "message"]
    return [block for text in texts for block in re.findall(r"<sessionmem-context>.*?</sessionmem-context>", text,
                                                            re.DOTALL)]


class Conversation:
    """The model's side of the scripted sessions: tool calls chosen by the prompt of the turn."""

    def steps(self, prompt: str) -> list[Item]:
        if "divide bug" in prompt:
            return [apply_patch(FIX_DIVIDE), shell_command("python3 -c 'import calc; calc.divide(1, 0)'"),
                    apply_patch(ADD_NOTES)]
        return []

    def __call__(self, body: dict[str, Any]) -> list[Item]:
        if is_compaction(body):
            return [message("Scripted summary: divide() was fixed.")]
        prompt, outputs = turn_prompt(body), tool_outputs(body)
        if "search the memory" in prompt:
            return self.search(outputs)
        steps = self.steps(prompt)
        if len(outputs) < len(steps):
            return [steps[len(outputs)]]
        return [message("Done: divide() rejects zero." if steps else "We fixed divide() last time.")]

    def search(self, outputs: list[Item]) -> list[Item]:
        """Search, and search again after a pause while Codex says the server is not there yet (it does not
        wait for an MCP server that is not required, and sessionmem's is not: a broken one must not stop Codex)."""
        if len(outputs) % 2:  # the last output is a search's
            missing = "unsupported call" in json.dumps(outputs[-1])
            if not missing or len(outputs) >= 2 * MCP_ATTEMPTS:
                return [message("Found it.")]
            return [shell_command("sleep 1")]
        return [mcp_tool_call("sessionmem", "search", {"query": "divide"})]


class CodexHarness(Harness):
    """The Claude Code harness's project, data dir and worker handling, with Codex as the agent."""

    def __init__(self, root: Path, api: ScriptedResponsesAPI) -> None:
        super().__init__(root, api)  # type: ignore[arg-type]  # its url is read by codex below only
        self.responses = api
        self.codex = CodexHome.create(self.home, api.url)

    def env(self, **extra: str) -> dict[str, str]:
        return self.codex.env(SESSIONMEM_DATA_DIR=str(self.data_dir), SESSIONMEM_PORT="0",
                              SESSIONMEM_BATCH_QUIET="0.1", SESSIONMEM_COMPRESSOR="offline",
                              **self.extra_env, **extra)

    def sessionmem(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "sessionmem", *args], env=self.env(), capture_output=True,
                              text=True, timeout=120, cwd=self.project)

    def run(self, prompt: str, *, resume: str | None = None, compact: bool = False) -> str:
        """One headless Codex session (or a resumed one); returns its session id."""
        limit = 1000 if compact else None
        env = {key: value for key, value in self.env().items() if key.startswith("SESSIONMEM_")}
        if resume:
            run = self.codex.resume(prompt, project=self.project, session_id=resume, auto_compact_token_limit=limit,
                                    env=env)
        else:
            run = self.codex.exec(prompt, project=self.project, env=env)
        run.check()
        assert run.session_id, run.events
        return run.session_id


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CodexHarness]:
    if not CODEX.exists():
        pytest.fail(f"{CODEX} is missing: `make test` installs the pinned Codex CLI (npm ci in e2e/)")
    with ScriptedResponsesAPI(responder=Conversation()) as api:
        h = CodexHarness(tmp_path_factory.mktemp("e2e-codex"), api)
        installed = h.sessionmem("install", "--agent", "codex", "--codex", str(CODEX))
        assert installed.returncode == 0, installed.stdout + installed.stderr
        assert "Codex trusts the 6 sessionmem hooks" in installed.stdout
        try:
            yield h
        finally:
            h.stop_workers()  # no leaked side processes
            stray = WorkerProcess.attach(h.home / ".sessionmem")  # one the MCP server would start without the
            if stray is not None:                                 # settings Codex passes it
                stray.stop()
                pytest.fail("a worker ran on the default data dir: Codex did not pass the MCP server its settings")


@pytest.fixture(scope="module")
def session_one(harness: CodexHarness) -> dict[str, Any]:
    """The divide bug fixed in three tool uses (a patch, a failing command, a new file), captured by the hooks."""
    session_id = harness.run("Fix the divide bug in calc.py <private>secret</private>")
    worker = harness.started_worker()
    worker.wait_idle()
    return {"session_id": session_id, "worker": worker}


def test_a_codex_session_is_captured_as_codex_s(harness: CodexHarness, session_one: dict[str, Any]) -> None:
    worker, session_id = session_one["worker"], session_one["session_id"]
    worker.wait_until(lambda: stored_session(worker, session_id)["status"] == "completed", timeout=30)
    session = stored_session(worker, session_id)
    assert session["project"] == "calcproj" and session["firstPrompt"] == "Fix the divide bug in calc.py"
    assert session["agent"] == CODEX_AGENT

    rows = session_observations(worker, session_id)
    # Each patch is an edit (or a write) of its file; the shell command is Bash.
    assert [r["toolName"] for r in rows] == ["Edit", "Bash", "Write"]
    assert {r["agent"] for r in rows} == {CODEX_AGENT}
    edit, _, write = rows
    assert str(harness.project / "calc.py") in json.dumps(worker.get(f"/api/observations/{edit['id']}"))
    assert str(harness.project / "NOTES.md") in json.dumps(worker.get(f"/api/observations/{write['id']}"))
    summaries = [s for s in worker.get("/api/summaries")["summaries"] if s["claudeSessionId"] == session_id]
    assert len(summaries) == 1  # Stop: the end of the turn

    assert "ZeroDivisionError('b is 0')" in (harness.project / "calc.py").read_text()  # Codex really patched it
    assert data_dir_contains(harness.data_dir, b"secret") == []
    log = harness.data_dir / "hooks.log"
    assert not log.exists() or "unexpected" not in log.read_text()


def test_the_next_codex_session_is_handed_the_memory(harness: CodexHarness, session_one: dict[str, Any]) -> None:
    first_request = len(harness.responses.requests)
    harness.run("What did we change last time?")
    turns = [r.body for r in harness.responses.requests[first_request:]]
    assert turns, "Codex made no model request"
    sent = input_text(turns[0])
    # SessionStart's additionalContext, as a developer message of the first request.
    assert "sessionmem-context" in sent and "calc.py" in sent


def test_after_a_compaction_the_memory_is_handed_back(harness: CodexHarness, session_one: dict[str, Any]) -> None:
    session_id = session_one["session_id"]
    first_request = len(harness.responses.requests)
    harness.run("Anything left to do?", resume=session_id, compact=True)
    bodies = [r.body for r in harness.responses.requests[first_request:]]
    compactions = [i for i, body in enumerate(bodies) if is_compaction(body)]
    assert compactions, "Codex did not compact (the test proves nothing then)"
    after = [input_text(body) for body in bodies[compactions[0] + 1:]]
    assert after and "sessionmem-context" in after[0]  # SessionStart source=compact, in the compacted request
    worker = session_one["worker"]
    # The resumed session is the same session (its prompt may reach the worker late, through the spool, on a
    # loaded machine: waited for, not lost).
    worker.wait_until(lambda: stored_session(worker, session_id)["promptCounter"] >= 2, timeout=60)


def test_a_resumed_sessions_compaction_hands_each_memory_over_once(harness: CodexHarness,
                                                                   session_one: dict[str, Any]) -> None:
    """Codex compacts a resumed session before its turn, then fires SessionStart ``resume`` and ``compact``, both
    into the compacted request (tests/fixtures/codex/README.md): the memory is in it once, the session's own
    work first, then session 1's."""
    worker = session_one["worker"]
    # Session 1's tool uses stored first (on a loaded machine they may reach the worker through the spool).
    worker.wait_until(lambda: len(session_observations(worker, session_one["session_id"])) == 3, timeout=60)
    session_id = harness.run("Check the divide fix in calc.py once more")
    first_request = len(harness.responses.requests)
    harness.run("Anything left to do?", resume=session_id, compact=True)
    bodies = [r.body for r in harness.responses.requests[first_request:]]
    compactions = [i for i, body in enumerate(bodies) if is_compaction(body)]
    assert compactions, "Codex did not compact (the test proves nothing then)"
    blocks = memory_blocks(bodies[compactions[0] + 1])
    handovers = [block for block in blocks if HANDOVER_HEADING in block]
    assert len(handovers) == 1, blocks  # one handover, whichever SessionStart brought it
    sections = [line for line in handovers[0].splitlines() if line.startswith("## ")]
    assert sections[0].startswith("## This session so far"), handovers[0]
    assert "calc.py" in handovers[0].split(sections[0])[1]  # then session 1's memory
    told = re.findall(r"#(\d+)\b", "\n".join(blocks))
    assert told and len(told) == len(set(told)), blocks  # no memory twice, prompt recall included
    assert sum(block.count("## Last session") for block in blocks) <= 1


def test_codex_searches_memory_through_the_mcp_server_install_registered(harness: CodexHarness,
                                                                         session_one: dict[str, Any]) -> None:
    first_request = len(harness.responses.requests)
    session_id = harness.run("Please search the memory for the divide fix")
    bodies = [r.body for r in harness.responses.requests[first_request:]]
    answers = [json.dumps(item) for body in bodies for item in tool_outputs(body)]
    assert any("calc.py" in answer for answer in answers), answers  # session 1's memory, found by the server
    worker = harness.started_worker()
    worker.wait_idle()
    # sessionmem's own tools are not remembered.
    assert [r for r in session_observations(worker, session_id) if r["toolName"].startswith("mcp__sessionmem")] == []
