"""The plugin as a marketplace installs it: manifests, the hook command's fast path, and end to end
with the real Claude Code CLI (marketplace add from a local path, install, the environment
bootstrapped in the background while the first session is spooled, memory in the next ones)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import tomllib
from pathlib import Path
from typing import Any

import psutil
import pytest

from .conftest import data_dir_contains
from .test_e2e_claude_code import CLAUDE, REPO, Harness, claude_harness, observations

# It drives the Claude Code CLI: one CLI at a time when `make test` runs in parallel.
pytestmark = pytest.mark.xdist_group("claude-code")

HOOK_SH = REPO / "plugin" / "bootstrap" / "hook.sh"
STAGES = ("SessionStart", "UserPromptSubmit", "PostToolUse", "PostToolUseFailure", "Stop", "PreCompact",
          "SubagentStop", "SessionEnd")


def test_manifests_name_one_plugin_of_the_packages_version() -> None:
    marketplace = json.loads((REPO / ".claude-plugin" / "marketplace.json").read_text())
    plugin = json.loads((REPO / ".claude-plugin" / "plugin.json").read_text())
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert [p["name"] for p in marketplace["plugins"]] == [plugin["name"]] == ["sessionmem"]
    assert plugin["version"] == version  # Claude Code upgrades an installed plugin when this changes
    hooks = json.loads((REPO / plugin["hooks"]).read_text())["hooks"]
    assert set(hooks) == set(STAGES)
    for stage, groups in hooks.items():
        (command,) = [h["command"] for group in groups for h in group["hooks"]]
        assert command == f'sh "${{CLAUDE_PLUGIN_ROOT}}/plugin/bootstrap/hook.sh" {stage}'
    servers = json.loads((REPO / plugin["mcpServers"]).read_text())["mcpServers"]
    assert servers["sessionmem"] == {"command": "sh", "args": ["${CLAUDE_PLUGIN_ROOT}/plugin/bootstrap/mcp.sh"]}


def fake_environment(data: Path, root: str) -> Path:
    """``<data>/venv`` as install.py leaves it, with an interpreter that only records its arguments."""
    venv = data / "venvs" / "1"
    (venv / "bin").mkdir(parents=True)
    entry = venv / "installed-entry.py"
    entry.write_text("")
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\necho "$@" > "{data}/ran"\ncat > "{data}/stdin"\n')
    python.chmod(0o755)
    (venv / "hook-entry").write_text(f"{entry}\n")
    (venv / "installed-from").write_text(root + "\n")
    (data / "venv").symlink_to(venv)
    return data / "ran"


def run_hook_sh(data: Path, root: str, stage: str = "PostToolUse") -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "CLAUDE_PLUGIN_DATA": str(data), "CLAUDE_PLUGIN_ROOT": root,
           "SESSIONMEM_DATA_DIR": str(data / "memory"), "SESSIONMEM_PORT": "9"}
    return subprocess.run(["sh", str(HOOK_SH), stage], input='{"session_id": "s"}', env=env, text=True,
                          capture_output=True, timeout=30)


def test_hook_sh_execs_the_installed_environment_when_it_is_this_plugin_copys(tmp_path: Path) -> None:
    ran = fake_environment(tmp_path, str(REPO))
    result = run_hook_sh(tmp_path, str(REPO))
    assert result.returncode == 0 and result.stderr == ""
    assert ran.read_text() == f"-S {tmp_path}/venvs/1/installed-entry.py PostToolUse\n"
    assert (tmp_path / "stdin").read_text() == '{"session_id": "s"}'  # the payload reaches the hook


def test_hook_sh_leaves_an_environment_of_another_plugin_version_to_run_py(tmp_path: Path) -> None:
    """A new plugin version: its hook does not take the old environment's fast path; run.py runs it
    with the old environment meanwhile (and starts the install, which this test keeps from running)."""
    ran = fake_environment(tmp_path, "/plugins/cache/sessionmem/0.0.9")
    (tmp_path / "install.failed").write_text("kept from installing by the test\n")  # run.py backs off
    result = run_hook_sh(tmp_path, str(REPO))
    assert result.returncode == 0
    # run.py: the old environment's interpreter on its own hook entry
    assert ran.read_text() == f"-S {tmp_path}/venvs/1/installed-entry.py PostToolUse\n"
    assert not (tmp_path / "venvs" / "2").exists()


def test_without_an_environment_hooks_spool_and_session_start_says_why(tmp_path: Path) -> None:
    (tmp_path / "install.failed").write_text("no network\n")  # the install failed a moment ago
    result = run_hook_sh(tmp_path, str(REPO), "SessionStart")
    assert result.returncode == 0
    assert "could not install" in json.loads(result.stdout)["systemMessage"]

    env = {"PATH": os.environ["PATH"], "CLAUDE_PLUGIN_DATA": str(tmp_path), "CLAUDE_PLUGIN_ROOT": str(REPO),
           "SESSIONMEM_DATA_DIR": str(tmp_path / "memory"), "SESSIONMEM_PORT": "9"}
    payload = {"session_id": "s", "hook_event_name": "UserPromptSubmit", "prompt": "Fix the divide bug",
               "cwd": str(tmp_path), "transcript_path": ""}
    result = subprocess.run(["sh", str(HOOK_SH), "UserPromptSubmit"], input=json.dumps(payload), env=env,
                            text=True, capture_output=True, timeout=30)
    assert result.returncode == 0 and result.stdout == ""
    (spooled,) = (tmp_path / "memory" / "spool").glob("*.json")
    assert b"Fix the divide bug" in spooled.read_bytes()


# -- end to end ------------------------------------------------------------------------------


def plugin_source(root: Path) -> Path:
    """This repository as a clone has it (tracked files, and new ones not ignored), for marketplace add."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                           capture_output=True).stdout.decode().split("\0")
    source = root / "marketplace"
    for name in filter(None, files):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    return source


def claude_cli(harness: Harness, *args: str) -> str:
    result = subprocess.run([str(CLAUDE), *args], cwd=harness.project, env=harness.env(), capture_output=True,
                            text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, f"claude {' '.join(args)}: {result.stdout[-2000:]} {result.stderr[-2000:]}"
    return result.stdout


def wait_for(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.25)
    return result


@pytest.mark.slow
def test_installed_from_a_marketplace_it_bootstraps_itself_and_remembers(tmp_path: Path) -> None:
    with claude_harness(tmp_path) as harness:
        # The user's pip cache (the test's HOME is empty): the install still resolves every
        # dependency from the package index, without downloading what this machine has.
        harness.extra_env["PIP_CACHE_DIR"] = os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip")
        # pip leaves the dependencies uncompiled (its bytecode of them all is ~20 s of CPU, which the test
        # does not read); install.py still compiles sessionmem itself, for the hooks.
        harness.extra_env["PIP_COMPILE"] = "0"
        claude_cli(harness, "plugin", "marketplace", "add", str(plugin_source(tmp_path)))
        claude_cli(harness, "plugin", "install", "sessionmem@sessionmem")
        data_dirs = harness.home / ".claude" / "plugins" / "data"

        # Session 1: no environment yet. No hook waits for the install; the events are spooled.
        output, _ = harness.claude("Fix the divide bug in calc.py <private>secret</private>", plugin=False)
        session_one = output["session_id"]
        assert harness.worker() is None
        assert len(list((harness.data_dir / "spool").glob("*.json"))) >= 6  # init, 4 tool uses, stop, end
        (plugin_data,) = {log.parent for log in data_dirs.glob("*/install.log")}  # CLAUDE_PLUGIN_DATA
        assert "installing sessionmem from" in (plugin_data / "install.log").read_text()

        wait_for(lambda: (plugin_data / "venv" / "installed-from").exists(), 600, "the background install")
        installed_from = (plugin_data / "venv" / "installed-from").read_text().strip()
        assert (Path(installed_from) / ".claude-plugin" / "plugin.json").exists()  # the plugin copy hooks run from
        assert subprocess.run([plugin_data / "venv" / "bin" / "sessionmem", "--help"], capture_output=True,
                              timeout=60).returncode == 0  # the environment's own scripts work

        # Session 2 starts the worker from that environment; it imports session 1.
        harness.claude("What did we change last time?", plugin=False)
        worker = harness.started_worker()
        interpreter = psutil.Process(worker.pid).cmdline()[0]
        assert interpreter == str(plugin_data / "venv" / "bin" / "python")
        worker.wait_until(lambda: not list((harness.data_dir / "spool").glob("*.json")), timeout=60)
        worker.wait_idle()
        assert [r["toolName"] for r in observations(worker, session_one)] == ["Read", "Edit", "Bash", "Write"]
        sessions = {s["claudeSessionId"]: s for s in worker.get("/api/sessions")["sessions"]}
        assert sessions[session_one]["status"] == "completed"

        # Session 3 receives the memory of session 1.
        first_request = len(harness.api.requests)
        harness.claude("What did we change last time?", plugin=False)
        sent = json.dumps([r.body["messages"] for r in harness.api.requests[first_request:] if r.body.get("tools")])
        assert "<sessionmem-context>" in sent and ("Scripted: Edit" in sent or "Edited calc.py" in sent)
        assert data_dir_contains(harness.data_dir, b"secret") == []
