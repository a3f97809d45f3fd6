"""One memory across agents, with the real CLIs: Claude Code, then Codex, then the Gemini CLI, in one repository.

One user (one HOME, one data dir): Claude Code with the plugin's hooks, Codex and the Gemini CLI
with the hooks ``sessionmem install --agent ...`` wrote (Codex's trusted through its own app server),
each CLI against its scripted model server. A Claude Code session fixes a bug; a Codex session
is handed that work, marked as Claude Code's, and writes a note; a Gemini CLI session is handed
both, each marked with the agent that did it. The hooks start the one worker themselves; it is
stopped at the end.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sessionmem.protocol.agents import CLAUDE_CODE, CODEX, GEMINI_CLI
from sessionmem.testing.codex_cli import CODEX as CODEX_CLI
from sessionmem.testing.codex_cli import CodexHome
from sessionmem.testing.gemini_api import ScriptedGeminiAPI, request_text
from sessionmem.testing.messages_api import ScriptedMessagesAPI
from sessionmem.testing.responses_api import Item, ScriptedResponsesAPI, apply_patch, input_text, message, tool_outputs

from .test_e2e_claude_code import Conversation as ClaudeConversation
from .test_e2e_claude_code import Harness
from .test_e2e_gemini import GEMINI, MODEL, USER_SETTINGS
from .test_e2e_gemini import Conversation as GeminiConversation

# Each CLI one at a time, as their own modules run them: one group for all three.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("cross-agent")]

WRITE_CHANGELOG = "*** Begin Patch\n*** Add File: CHANGELOG.md\n+divide() rejects zero\n*** End Patch\n"


def codex_turn(body: dict[str, Any]) -> list[Item]:
    """Codex's model: a changelog written in one patch, then a reply."""
    return [apply_patch(WRITE_CHANGELOG)] if not tool_outputs(body) else [message("Changelog written.")]


class ThreeAgents(Harness):
    """Claude Code's harness (project, data dir, HOME, the hooks' worker), with Codex and the Gemini CLI in the
    same HOME."""

    def __init__(self, root: Path, claude: ScriptedMessagesAPI, codex: ScriptedResponsesAPI,
                 gemini: ScriptedGeminiAPI) -> None:
        super().__init__(root, claude)
        self.codex = CodexHome.create(self.home, codex.url)
        self.responses = codex
        self.gemini_api = gemini
        gemini_dir = self.home / ".gemini"
        gemini_dir.mkdir()
        (gemini_dir / "settings.json").write_text(json.dumps(USER_SETTINGS))
        (gemini_dir / "trustedFolders.json").write_text(json.dumps({str(self.project): "TRUST_FOLDER"}))

    def env(self, **extra: str) -> dict[str, str]:
        env = super().env(SESSIONMEM_COMPRESSOR="offline", GEMINI_API_KEY="scripted-key",
                          GOOGLE_GEMINI_BASE_URL=self.gemini_api.url, NO_COLOR="1", **extra)
        for name in ("GITHUB_SHA", "SURFACE"):  # the Gemini CLI would strip its hooks' environment
            env.pop(name, None)
        return env

    def sessionmem(self, *args: str) -> None:
        result = subprocess.run([sys.executable, "-m", "sessionmem", *args], env=self.env(), capture_output=True,
                                text=True, timeout=120, cwd=self.project)
        assert result.returncode == 0, result.stdout + result.stderr

    def run_codex(self, prompt: str) -> str:
        settings = {key: value for key, value in self.env().items() if key.startswith("SESSIONMEM_")}
        run = self.codex.exec(prompt, project=self.project, env=settings).check()
        assert run.session_id
        return run.session_id

    def run_gemini(self, prompt: str) -> dict[str, Any]:
        args = [str(GEMINI), "-p", prompt, "--yolo", "-m", MODEL, "--output-format", "json"]
        result = subprocess.run(args, cwd=self.project, env=self.env(), capture_output=True, text=True, timeout=180,
                                stdin=subprocess.DEVNULL)
        assert result.returncode == 0, f"gemini failed: {result.stdout[-2000:]} {result.stderr[-2000:]}"
        output: dict[str, Any] = json.loads(result.stdout)
        return output


@pytest.fixture(scope="module")
def agents(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreeAgents]:
    for cli in (CODEX_CLI, GEMINI):
        if not cli.exists():
            pytest.fail(f"{cli} is missing: `make test` installs the pinned CLIs (npm ci in e2e/)")
    root = tmp_path_factory.mktemp("e2e-three-agents")
    with ScriptedMessagesAPI() as claude, ScriptedResponsesAPI(responder=codex_turn) as codex, \
            ScriptedGeminiAPI() as gemini:
        h = ThreeAgents(root, claude, codex, gemini)
        claude.responder = ClaudeConversation(h.project)
        gemini.responder = GeminiConversation(h.project)
        h.sessionmem("install", "--agent", "codex", "--codex", str(CODEX_CLI))
        h.sessionmem("install", "--agent", "gemini-cli")
        try:
            yield h
        finally:
            h.stop_workers()  # no leaked side processes


def _agents_of(worker: Any) -> dict[str, str]:
    return {s["claudeSessionId"]: s["agent"] for s in worker.get("/api/sessions")["sessions"]}


def test_claude_code_then_codex_then_gemini_cli_share_one_memory(agents: ThreeAgents) -> None:
    # Claude Code fixes the bug.
    output, _ = agents.claude("Fix the divide bug in calc.py")
    claude_session = output["session_id"]
    worker = agents.started_worker()
    worker.wait_idle()

    # Codex is handed Claude Code's work, marked as Claude Code's, and writes the changelog.
    codex_session = agents.run_codex("Write a changelog entry for the last fix")
    first_codex_request = input_text(agents.responses.requests[0].body)
    assert "sessionmem-context" in first_codex_request and "calc.py" in first_codex_request
    assert "(Claude Code)" in first_codex_request or "Claude Code" in first_codex_request
    assert (agents.project / "CHANGELOG.md").exists()
    worker.wait_idle()

    # The Gemini CLI is handed both, each marked with the agent that did it.
    before = len(agents.gemini_api.requests)
    gemini_session = agents.run_gemini("What changed recently?")["session_id"]
    turns = [r.body for r in agents.gemini_api.requests[before:] if r.body.get("tools")]
    sent = request_text(turns[0])
    context = sent[sent.index("<hook_context>"):].split("</hook_context>")[0]
    assert "calc.py" in context and "CHANGELOG.md" in context, context
    assert "Claude Code" in context and "Codex CLI" in context, context
    worker.wait_idle()

    # One project, one memory, each session the agent's that ran it.
    recorded = _agents_of(worker)
    assert recorded[claude_session] == CLAUDE_CODE
    assert recorded[codex_session] == CODEX
    assert recorded[gemini_session] == GEMINI_CLI
    projects = {s["project"] for s in worker.get("/api/sessions")["sessions"]}
    assert projects == {"calcproj"}
