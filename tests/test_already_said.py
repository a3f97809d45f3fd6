"""The handover leaves out what Claude Code's own memory (CLAUDE.md, auto memory's MEMORY.md) already says
(search/already_said.py, sessionmem/protocol/claude_memory.py)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from sessionmem.protocol.claude_memory import instruction_files, memory_files, project_folder_name
from sessionmem.records import ObservationRow
from sessionmem.search.already_said import AlreadySaid, Known
from sessionmem.testing.harness import serve_in_thread
from sessionmem.testing.worker_process import WorkerClient

from .conftest import observation_row
from .test_hooks import run_hook


def ran(command: str, id: int = 1) -> ObservationRow:
    return observation_row(id, tool_name="Bash", title=f"Ran `{command}`", facts=[f"command: {command}"])


def test_a_command_the_files_hold_whole_is_already_said() -> None:
    known = Known.of("# Tests\nRun them with `python3 -m pytest -q tests`, never with tox.\n```\nmake   wheel\n```\n")
    assert known.says(ran("python3 -m pytest -q tests"))
    assert known.says(ran("make wheel"))  # whitespace aside
    assert not known.says(ran("python3 -m pytest -q tests/test_api.py"))  # another command
    assert not known.says(ran("tox"))  # too short to be the file's own command
    assert not Known.of("Coverage: `pytest-cov` is installed\n").says(ran("pytest"))  # not whole there
    assert not Known.of("").says(ran("python3 -m pytest -q tests"))


def test_a_title_whose_words_are_on_one_line_is_already_said() -> None:
    known = Known.of("- Use uv, not pip, to install packages into the project venv\n- Releases are tagged by CI\n")
    decision = observation_row(1, type="decision", title="Install packages with uv into the project venv")
    assert known.says(decision)
    other = observation_row(2, type="decision", title="Install packages from the wheelhouse when offline")
    assert not known.says(other)
    spread = observation_row(3, type="decision", title="Packages tagged by CI into venv")  # two lines' words
    assert not known.says(spread)
    short = observation_row(4, title="Edited calc.py")  # too few words to judge
    assert not Known.of("Edited calc.py\n").says(short)


def test_the_files_are_those_claude_code_loads(tmp_path: Path) -> None:
    config = tmp_path / "claude"
    env = {"CLAUDE_CONFIG_DIR": str(config)}
    top = tmp_path / "repo"
    (top / ".git").mkdir(parents=True)
    cwd = top / "pkg"
    cwd.mkdir()
    files = instruction_files(cwd, env, "linux")
    assert files[:2] == [Path("/etc/claude-code/CLAUDE.md"), config / "CLAUDE.md"]
    assert files[-3:] == [cwd / "CLAUDE.md", cwd / ".claude" / "CLAUDE.md", cwd / "CLAUDE.local.md"]
    assert top / "CLAUDE.md" in files and Path("/CLAUDE.md") not in files
    memory = config / "projects" / project_folder_name(top) / "memory" / "MEMORY.md"
    assert memory_files(cwd, env, "linux")[-1] == memory
    assert memory not in memory_files(cwd, {**env, "CLAUDE_CODE_DISABLE_AUTO_MEMORY": "1"}, "linux")


def test_memory_md_counts_its_first_200_lines_and_a_change_is_read_again(tmp_path: Path) -> None:
    config = tmp_path / "claude"
    cwd = tmp_path / "proj"
    cwd.mkdir()
    memory = config / "projects" / project_folder_name(cwd) / "memory" / "MEMORY.md"
    memory.parent.mkdir(parents=True)
    memory.write_text("filler line\n" * 200 + "run `npm run build:docs` for the site\n")
    said = AlreadySaid({"CLAUDE_CONFIG_DIR": str(config)})

    async def says(command: str) -> bool:
        return (await said.known(str(cwd))).says(ran(command))

    assert not trio.run(says, "npm run build:docs")  # line 201: Claude Code does not load it
    (cwd / "CLAUDE.local.md").write_text("Build the site: `npm run build:docs`\n")
    assert trio.run(says, "npm run build:docs")
    assert not trio.run(says, "npm run lint")
    assert trio.run(AlreadySaid({}).known, "relative/path") == Known("", [])
    # A repository can commit a CLAUDE.md that links to a FIFO: nothing would ever come from it, so it is not read.
    os.mkfifo(tmp_path / "fifo")
    (cwd / "CLAUDE.md").symlink_to(tmp_path / "fifo")
    (cwd / ".claude").mkdir()
    (cwd / ".claude" / "settings.json").symlink_to(tmp_path / "fifo")

    async def within_a_moment() -> bool:
        with trio.fail_after(10):
            return await says("npm run build:docs")

    assert trio.run(within_a_moment)  # CLAUDE.local.md still says it
    assert trio.run(AlreadySaid({}).known, str(tmp_path / "missing")) == Known("", [])


TESTS = "python3 -m pytest -q tests"
# What is handed over is under test, not the hooks' budget (2 s, which a loaded machine can spend while the
# worker is busy: the event is then spooled for later, the answer empty).
PATIENT = {"SESSIONMEM_HOOK_TIMEOUT": "30"}


def session(worker: WorkerClient, cwd: Path, name: str) -> None:
    """A session that edits a file and runs the tests, through the real hooks."""
    base = {"session_id": name, "cwd": str(cwd)}
    stages: list[dict[str, Any]] = [
        {**base, "hook_event_name": "UserPromptSubmit", "prompt": f"Work on the parser, part {name}"},
        {**base, "hook_event_name": "PostToolUse", "tool_name": "Edit", "tool_use_id": f"{name}-edit",
         "tool_input": {"file_path": str(cwd / "parser.py"), "old_string": "a", "new_string": "b"},
         "tool_response": {"filePath": str(cwd / "parser.py")}},
        {**base, "hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_use_id": f"{name}-tests",
         "tool_input": {"command": TESTS}, "tool_response": {"stdout": "3 passed", "stderr": "", "interrupted": False}},
        {**base, "hook_event_name": "Stop", "last_assistant_message": "Done."},
        {**base, "hook_event_name": "SessionEnd", "reason": "exit"},
    ]
    for payload in stages:
        assert run_hook(payload["hook_event_name"], payload, worker.data_dir, **PATIENT).returncode == 0
    worker.wait_idle()


def memories(context: str) -> list[str]:
    """The observations' lines of a handover (a summary may name the command it ran: it is handed over whole)."""
    return [line for line in context.splitlines() if line.startswith("- #")]


def handover(worker: WorkerClient, cwd: Path, session_id: str) -> str:
    result = run_hook("SessionStart", {"session_id": session_id, "cwd": str(cwd), "hook_event_name": "SessionStart",
                                       "source": "startup"}, worker.data_dir, **PATIENT)
    return json.loads(result.stdout)["hookSpecificOutput"]["additionalContext"]


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[WorkerClient]:
    """The worker over real HTTP, with a Claude config dir of its own (not this machine's CLAUDE.md)."""
    # Prompt recall given the time a busy machine needs (tests/test_recall.py says why).
    with serve_in_thread(tmp_path / "data", batch_quiet_s=0.05, claude_config_dir=str(tmp_path / "claude"),
                         prompt_recall_budget_s=30) as served:
        yield served


@pytest.mark.slow
def test_the_handover_leaves_out_a_command_claude_md_gives(worker: WorkerClient, tmp_path: Path) -> None:
    cwd = tmp_path / "parser"
    cwd.mkdir()
    session(worker, cwd, "one")
    session(worker, cwd, "two")
    assert any(TESTS in line for line in memories(handover(worker, cwd, "before")))  # two sessions ran it
    (cwd / "CLAUDE.md").write_text(f"# parser\n\nRun the tests with `{TESTS}` before every commit.\n")
    context = handover(worker, cwd, "after")
    assert not any(TESTS in line for line in memories(context))  # CLAUDE.md says it
    assert any("Edited parser.py" in line for line in memories(context))  # the rest is still handed over


def recalled(worker: WorkerClient, cwd: Path, session_id: str) -> str:
    """What prompt recall hands a new session's first prompt about the tests, through the real hook."""
    result = run_hook("UserPromptSubmit", {"session_id": session_id, "cwd": str(cwd), "hook_event_name":
                                           "UserPromptSubmit", "prompt": "run the pytest tests"},
                      worker.data_dir, **PATIENT)
    return json.loads(result.stdout)["hookSpecificOutput"]["additionalContext"] if result.stdout else ""


@pytest.mark.slow
def test_prompt_recall_leaves_out_a_command_claude_md_gives(worker: WorkerClient, tmp_path: Path) -> None:
    cwd = tmp_path / "parser"
    cwd.mkdir()
    session(worker, cwd, "one")
    worker.wait_indexed()  # recalled by meaning, above the relevance floor
    assert any(TESTS in line for line in memories(recalled(worker, cwd, "before")))
    (cwd / "CLAUDE.local.md").write_text(f"Tests: `{TESTS}`\n")
    assert not any(TESTS in line for line in memories(recalled(worker, cwd, "after")))
