"""sessionmem's OpenCode plugin on its own, in Node.js: what it hands OpenCode from the hook's answer, and that it
fails open (a hook that fails, answers garbage, cannot start or hangs never throws into OpenCode, and a hang
costs a bounded time).

The plugin is rendered as install writes it, with a stand-in for the interpreter: a shell script that answers
as the scenario says. That the real OpenCode loads it and runs the real hook entry is tests/test_e2e_opencode.py's
proof.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from sessionmem.agents.opencode import plugin_source

NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="Node.js is not installed (e2e/ needs it too)")

# Drives the plugin as OpenCode would: a session created, its system prompt, a prompt, a tool use, the end of
# its turn; prints what the plugin left in OpenCode's outputs.
DRIVER = """
import { SessionmemPlugin } from "./plugin.mjs";
const hooks = await SessionmemPlugin({ directory: "/home/dev/calcproj" });
const sessionID = "ses_1";
await hooks.event({ event: { type: "session.created", properties: { sessionID, info: { id: sessionID,
  directory: "/home/dev/calcproj" } } } });
await hooks["chat.message"]({ sessionID }, { message: {}, parts: [{ type: "text", text: "Fix the divide bug" }] });
const system = { system: ["You are opencode."] };
await hooks["experimental.chat.system.transform"]({ sessionID, model: {} }, system);
const tool = { title: "", output: "calc.py\\n", metadata: { exit: 0 } };
await hooks["tool.execute.after"]({ tool: "bash", sessionID, callID: "call_1", args: { command: "ls" } }, tool);
await hooks.event({ event: { type: "session.idle", properties: { sessionID } } });
console.log(JSON.stringify({ system: system.system, output: tool.output }));
"""


def run_plugin(tmp_path: Path, script: str, *, python: str | None = None) -> tuple[dict[str, Any], float]:
    """The driver's result with a plugin whose interpreter is ``script`` (a shell script's body; each run's stage
    and payload are appended to ``calls.log``), and how long it took."""
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\nstage="$3"\npayload="$(cat)"\n'
                    f'printf "%s %s\\n" "$stage" "$payload" >> "{tmp_path}/calls.log"\n' + script)
    fake.chmod(0o755)
    (tmp_path / "plugin.mjs").write_text(plugin_source(python=python or str(fake), entry=tmp_path / "entry.py"))
    (tmp_path / "driver.mjs").write_text(DRIVER)
    started = time.monotonic()
    assert NODE is not None
    result = subprocess.run([NODE, "driver.mjs"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    output: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return output, elapsed


def calls(tmp_path: Path) -> list[tuple[str, dict[str, Any]]]:
    log = tmp_path / "calls.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [(stage, json.loads(payload)) for stage, _, payload in (line.partition(" ") for line in lines)]


ANSWERS = """
case "$stage" in
  SessionStart) echo '{"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "MEMORY"}}' ;;
  UserPromptSubmit) echo '{"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "RECALL"}}' ;;
  PostToolUse) echo '{"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "PAST WORK"}}' ;;
esac
"""


def test_the_hooks_answers_reach_the_system_prompt_and_the_tool_s_output(tmp_path: Path) -> None:
    output, _ = run_plugin(tmp_path, ANSWERS)
    assert output["system"] == ["You are opencode.", "MEMORY", "RECALL"]
    assert output["output"] == "calc.py\n\n\nPAST WORK"
    sent = calls(tmp_path)
    assert [stage for stage, _ in sent] == ["SessionStart", "UserPromptSubmit", "PostToolUse", "Stop"]
    by_stage = dict(sent)
    assert by_stage["SessionStart"] == {"session_id": "ses_1", "cwd": "/home/dev/calcproj", "source": "startup",
                                        "hook_event_name": "SessionStart"}
    assert by_stage["PostToolUse"]["tool_name"] == "bash" and by_stage["PostToolUse"]["exit_code"] == 0
    assert by_stage["Stop"]["last_user_message"] == "Fix the divide bug"


@pytest.mark.parametrize("script", ["echo 'not json'; exit 1", "exit 3", "echo '[1, 2'"])
def test_a_hook_that_fails_or_answers_garbage_changes_nothing(tmp_path: Path, script: str) -> None:
    output, _ = run_plugin(tmp_path, script)
    assert output == {"system": ["You are opencode."], "output": "calc.py\n"}
    assert len(calls(tmp_path)) == 4  # every stage still ran


def test_an_interpreter_that_is_gone_changes_nothing(tmp_path: Path) -> None:
    output, _ = run_plugin(tmp_path, "", python=str(tmp_path / "no-such-python"))
    assert output == {"system": ["You are opencode."], "output": "calc.py\n"}


@pytest.mark.slow
def test_a_hook_that_hangs_is_killed_within_its_budget(tmp_path: Path) -> None:
    # PostToolUse hangs; the plugin gives up on it after 8 s (the hook's own deadline is shorter).
    output, elapsed = run_plugin(tmp_path, '[ "$stage" = PostToolUse ] && exec sleep 60\n' + ANSWERS)
    assert output == {"system": ["You are opencode.", "MEMORY", "RECALL"], "output": "calc.py\n"}
    assert 7.5 < elapsed < 40
