"""End to end with the real Claude Code CLI (npm @anthropic-ai/claude-code, pinned in e2e/).

The CLI runs offline against the scripted Messages API server (streaming), with a
temporary HOME, ``--plugin-dir plugin`` and the sessionmem hooks. The hooks start
the worker themselves, exactly as for a user.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest

from sessionmem.testing.messages_api import ScriptedMessagesAPI, default_reply
from sessionmem.testing.model_cache import place_model_cache
from sessionmem.testing.worker_process import WorkerProcess

from .conftest import data_dir_contains
from .processes import running

# One Claude Code CLI at a time, and the module's harness set up once (`make test` runs in parallel).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("claude-code")]

REPO = Path(__file__).resolve().parent.parent
CLAUDE = REPO / "e2e" / "node_modules" / ".bin" / "claude"
ALLOWED_TOOLS = "Read,Edit,Bash,Write"
CALC = "def add(a, b):\n    return a + b\n\n\ndef divide(a, b):\n    return a / b\n"


def _is_tool_result(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(b.get("type") == "tool_result" for b in content)


def _prompt_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content if b.get("type") == "text")


class Conversation:
    """The model's side of the scripted sessions: tool calls chosen by the prompt of the turn."""

    def __init__(self, project: Path) -> None:
        self.project = project

    def steps(self, prompt: str) -> list[dict[str, Any]]:
        calc = str(self.project / "calc.py")
        if "divide bug" in prompt:
            return [
                {"name": "Read", "input": {"file_path": calc}},
                {"name": "Edit", "input": {"file_path": calc, "old_string": "    return a / b",
                                           "new_string": "    if b == 0:\n        raise ZeroDivisionError('b is 0')\n"
                                                         "    return a / b"}},
                {"name": "Bash", "input": {"command": "python3 -c 'import calc; calc.divide(1, 0)'",
                                           "description": "Check the new error"}},
                {"name": "Write", "input": {"file_path": str(self.project / "NOTES.md"),
                                            "content": "divide() now rejects b == 0\n"}},
            ]
        if "add a test" in prompt:
            return [{"name": "Write", "input": {"file_path": str(self.project / "test_calc.py"),
                                                "content": "import calc\n\n\ndef test_add():\n    assert calc.add(1, 2) == 3\n"}}]
        return []

    def __call__(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        system = json.dumps(body.get("system") or "")
        if "coding agent's tool uses" in system or "coding agent's session" in system:
            return [{"type": "text", "text": default_reply(body)}]  # sessionmem's own compressor calls
        messages = body.get("messages") or []
        if not body.get("tools") or not messages:
            return [{"type": "text", "text": "Scripted session"}]
        turn_start = max(i for i, m in enumerate(messages) if m["role"] == "user" and not _is_tool_result(m))
        done = sum(1 for m in messages[turn_start:] if m["role"] == "user" and _is_tool_result(m))
        steps = self.steps(_prompt_text(messages[turn_start]))
        if done < len(steps):
            return [{"type": "tool_use", "id": f"toolu_e2e_{time.time_ns()}", **steps[done]}]
        return [{"type": "text", "text": "Done: divide() rejects zero." if steps else "We fixed divide() last time."}]


class Harness:
    def __init__(self, root: Path, api: ScriptedMessagesAPI) -> None:
        self.root = root
        self.api = api
        self.home = root / "home"
        self.project = root / "calcproj"
        self.data_dir = root / "data"
        self.extra_env: dict[str, str] = {}  # for every command this harness runs
        self.home.mkdir()
        place_model_cache(self.home)  # the int8 model, built once for the whole run, not in each HOME
        self.project.mkdir()
        (self.project / "calc.py").write_text(CALC)

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONMEM_", "ANTHROPIC_", "CLAUDE"))}
        env.update(HOME=str(self.home), ANTHROPIC_BASE_URL=self.api.url, ANTHROPIC_API_KEY="sk-e2e-dummy",
                   CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", SESSIONMEM_DATA_DIR=str(self.data_dir),
                   SESSIONMEM_PORT="0", SESSIONMEM_BATCH_QUIET="0.1")
        env.update(self.extra_env)
        env.update(extra)
        return env

    def claude(self, prompt: str, *extra_args: str, plugin: bool = True, allowed_tools: str = ALLOWED_TOOLS,
               **env: str) -> tuple[dict[str, Any], float]:
        args = [str(CLAUDE), "-p", prompt, "--output-format", "json", "--allowedTools", allowed_tools, *extra_args]
        if plugin:
            args += ["--plugin-dir", str(REPO / "plugin")]
        started = time.monotonic()
        result = subprocess.run(args, cwd=self.project, env=self.env(**env), capture_output=True, text=True,
                                timeout=180, stdin=subprocess.DEVNULL)
        elapsed = time.monotonic() - started
        assert result.returncode == 0, f"claude failed: {result.stdout[-2000:]} {result.stderr[-2000:]}"
        output = json.loads(result.stdout)
        assert output["is_error"] is False, output
        return output, elapsed

    def worker(self) -> WorkerProcess | None:
        """The worker the hooks started, if it is running."""
        return WorkerProcess.attach(self.data_dir)

    def started_worker(self, timeout: float = 30.0) -> WorkerProcess:
        """The worker a hook started. SessionStart waits for it only ``start_timeout_s`` (2 s): on a
        loaded machine it comes up after the session that started it has ended."""
        deadline = time.monotonic() + timeout
        while (worker := self.worker()) is None:
            assert time.monotonic() < deadline, f"no worker came up within {timeout} s"
            time.sleep(0.05)
        return worker

    def stop_worker(self) -> None:
        worker = self.worker()
        if worker is not None:
            worker.stop()

    def stop_workers(self, timeout: float = 30.0) -> None:
        """Stop every worker the hooks started, one still starting included (it records itself in
        ``worker.json`` only once it listens): none may outlive the test, importing the spool of a
        data dir that is gone -- or of the next test run's, should it get the same path."""
        log = self.data_dir / "hooks.log"
        started = re.findall(r"started worker pid (\d+)", log.read_text()) if log.exists() else []
        deadline = time.monotonic() + timeout
        for pid in map(int, started):
            while self._runs_a_worker_of_ours(pid):
                worker = self.worker()
                if worker is not None and worker.pid == pid:
                    worker.stop()
                elif time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                else:
                    time.sleep(0.05)

    def _runs_a_worker_of_ours(self, pid: int) -> bool:
        """``pid`` is alive and is a worker of this data dir (not a later process that got the same pid)."""
        try:
            environ = psutil.Process(pid).environ()
        except psutil.Error:
            return False
        return running(pid) and environ.get("SESSIONMEM_DATA_DIR") == str(self.data_dir)


@contextmanager
def claude_harness(root: Path, conversation: type[Conversation] = Conversation) -> Iterator[Harness]:
    """The scripted Messages API answering as ``conversation`` does, and a harness to run the CLI against it."""
    if not CLAUDE.exists():
        pytest.fail(f"{CLAUDE} is missing: `make test` installs the pinned Claude Code CLI (npm ci in e2e/)")
    with ScriptedMessagesAPI() as api:
        h = Harness(root, api)
        api.responder = conversation(h.project)
        try:
            yield h
        finally:
            h.stop_workers()  # no leaked side processes


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    with claude_harness(tmp_path_factory.mktemp("e2e")) as h:
        yield h


@pytest.fixture(scope="module")
def session_one(harness: Harness) -> dict[str, Any]:
    return first_session(harness)


def first_session(harness: Harness) -> dict[str, Any]:
    """The divide bug fixed in four tool uses, captured by the hooks; returns its session id and the worker, idle."""
    output, _ = harness.claude("Fix the divide bug in calc.py <private>secret</private>")
    worker = harness.started_worker()
    worker.wait_idle()
    return {"session_id": output["session_id"], "worker": worker}


def observations(worker: WorkerProcess, session_id: str) -> list[dict[str, Any]]:
    rows = worker.get("/api/observations?limit=200")["observations"]
    return sorted((r for r in rows if r["claudeSessionId"] == session_id), key=lambda r: r["id"])


def test_session_is_captured_and_private_text_is_nowhere(harness: Harness, session_one: dict[str, Any]) -> None:
    worker, session_id = session_one["worker"], session_one["session_id"]
    sessions = {s["claudeSessionId"]: s for s in worker.get("/api/sessions")["sessions"]}
    session = sessions[session_id]
    assert session["status"] == "completed" and session["promptCounter"] == 1
    assert session["project"] == "calcproj" and session["firstPrompt"] == "Fix the divide bug in calc.py"

    rows = observations(worker, session_id)
    assert [r["toolName"] for r in rows] == ["Read", "Edit", "Bash", "Write"]
    bash = rows[2]
    assert bash["failed"] is True and "Exit code 1" in json.dumps(worker.get(f"/api/observations/{bash['id']}"))
    assert all(r["compressed"] for r in rows)  # compressed through the scripted Messages API
    summaries = [s for s in worker.get("/api/summaries")["summaries"] if s["claudeSessionId"] == session_id]
    assert len(summaries) == 1

    assert (harness.project / "NOTES.md").exists()  # the CLI really ran the tools
    assert data_dir_contains(harness.data_dir, b"secret") == []
    assert data_dir_contains(harness.data_dir, b"Fix the divide bug")


def test_resume_continues_the_same_session(harness: Harness, session_one: dict[str, Any]) -> None:
    worker, session_id = session_one["worker"], session_one["session_id"]
    before = {s["claudeSessionId"]: s for s in worker.get("/api/sessions")["sessions"]}[session_id]
    output, _ = harness.claude("Now add a test file", "--resume", session_id)
    assert output["session_id"] == session_id
    worker.wait_idle()
    after = {s["claudeSessionId"]: s for s in worker.get("/api/sessions")["sessions"]}[session_id]
    assert after["sessionDbId"] == before["sessionDbId"] and after["promptCounter"] == 2
    write = observations(worker, session_id)[-1]
    assert write["toolName"] == "Write" and write["promptNumber"] == 2
    assert write["filesModified"] == [] or write["filesModified"] == [str(harness.project / "test_calc.py")]


def test_new_session_receives_the_memory(harness: Harness, session_one: dict[str, Any]) -> None:
    first_request = len(harness.api.requests)
    output, _ = harness.claude("What did we change last time?")
    assert output["session_id"] != session_one["session_id"]
    model_requests = [r.body for r in harness.api.requests[first_request:] if r.body.get("tools")]
    assert model_requests, "the CLI made no model request"
    sent = json.dumps(model_requests[0]["messages"])
    assert "<sessionmem-context>" in sent
    assert "Scripted: Edit" in sent or "Edited calc.py" in sent  # an observation of session 1


def test_hooks_fail_open_and_next_start_restarts_the_worker(harness: Harness, session_one: dict[str, Any]) -> None:
    _, baseline = harness.claude("What did we change last time?", plugin=False)
    harness.stop_worker()
    assert harness.worker() is None

    # The worker cannot start (the user's settings are invalid): every hook fails open.
    settings = harness.data_dir / "settings.json"
    kept = settings.read_bytes() if settings.exists() else None
    settings.write_text(json.dumps({"compressor": "no-such-backend"}))
    try:
        output, broken = harness.claude("What did we change last time?")
    finally:
        if kept is None:
            settings.unlink()
        else:
            settings.write_bytes(kept)
    assert output["result"] == "We fixed divide() last time."
    assert harness.worker() is None
    # Within the SessionStart hook's deadline (start_timeout_s, hook_timeout_s and 1 s: 5 s), plus as much
    # again for a busy machine; that the hook stopped waiting once the worker exited, the log shows.
    assert broken < baseline + 5.0 + 5.0
    log = (harness.data_dir / "hooks.log").read_text()
    # The hook saw the worker it started exit and stopped waiting for it then; or, where a busy machine
    # takes longer than start_timeout_s (2 s) to start the interpreter that fails, it stopped at that
    # timeout. Either way within its deadline, and the events were spooled.
    assert "the worker exited at start (status 2)" in log or "worker not ready within" in log, log
    assert "event spooled" in log

    # The next SessionStart starts the worker again, and capture resumes.
    output, _ = harness.claude("What did we change last time?")
    worker = harness.started_worker()
    # On a loaded machine it starts after this session's hooks spooled their events: idle waits for its
    # spool rounds (every 5 s) to import them.
    worker.wait_idle(timeout=60)
    sessions = {s["claudeSessionId"]: s for s in worker.get("/api/sessions")["sessions"]}
    assert sessions[output["session_id"]]["status"] == "completed"


def test_compaction_hands_the_session_its_own_work_back_first(harness: Harness, session_one: dict[str, Any]) -> None:
    """`/compact` in a session: its PreCompact stores a checkpoint, and the SessionStart after the compaction hands
    the session its own work first; the next turn's request to the model carries it."""
    output, _ = harness.claude("Please add a test for add()")
    session_id = output["session_id"]
    worker = harness.started_worker()  # whichever the hooks run now: an earlier test restarts it
    worker.wait_idle()

    def summaries() -> int:
        return sum(1 for s in worker.get("/api/summaries")["summaries"] if s["claudeSessionId"] == session_id)

    before = summaries()
    compacted, _ = harness.claude("/compact", "--resume", session_id)
    assert compacted["session_id"] == session_id
    worker.wait_idle()
    assert summaries() == before + 1  # the checkpoint PreCompact sent

    first_request = len(harness.api.requests)
    harness.claude("What is left to do?", "--resume", session_id)
    model_requests = [r.body for r in harness.api.requests[first_request:] if r.body.get("tools")]
    assert model_requests, "the CLI made no model request"
    sent = json.dumps(model_requests[0]["messages"])
    assert "## This session so far" in sent and "**Request:** Please add a test for add()" in sent
    assert "Wrote test_calc.py" in sent or "Scripted: Write" in sent  # its own work, by the scripted compressor
    log = harness.data_dir / "hooks.log"
    assert not log.exists() or "PreCompact" not in log.read_text()  # the PreCompact hook had nothing to complain of
