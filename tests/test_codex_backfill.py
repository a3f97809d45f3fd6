"""Codex CLI transcripts: rollouts played back as the hook payloads Codex fires (recorded ones, and one the pinned
Codex CLI writes in the test), `sessionmem backfill --agent codex` into a real worker, and the PreCompact hook
reading the last turn from the rollout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sessionmem.hooks.codex_transcript import last_codex_turn
from sessionmem.replay.codex_rollouts import RolloutPayload, convert_rollouts, rollout_files, rollout_payloads
from sessionmem.replay.convert import ConversionStats, read_entries
from sessionmem.testing.codex_cli import CODEX, CodexHome
from sessionmem.testing.codex_recording import (
    CALC,
    FIRST_PROMPT,
    FIRST_REPLY,
    SECOND_PROMPT,
    SECOND_REPLY,
    SUMMARY,
    scripted_model,
)
from sessionmem.testing.harness import ThreadedWorker
from sessionmem.testing.responses_api import ScriptedResponsesAPI
from sessionmem.testing.worker_process import start_worker

from .conftest import FIXTURES

CODEX_FIXTURES = FIXTURES / "codex"
SAMPLE = CODEX_FIXTURES / "rollout-sample.jsonl"
COMPACTED = CODEX_FIXTURES / "rollout-compacted.jsonl"
ENTRY = Path(__file__).resolve().parent.parent / "hooks" / "entry.py"


def played(path: Path, transcript_path: str) -> list[RolloutPayload]:
    stats = ConversionStats()
    return list(rollout_payloads(list(read_entries(path, stats)), transcript_path, stats))


def hook_fixture(name: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((CODEX_FIXTURES / "hooks" / f"{name}.json").read_text())
    return payload


def test_a_rollout_plays_back_as_the_payloads_codex_sent() -> None:
    """Each payload has the fields and values of the one Codex's hook received in the same session (recorded
    beside the rollout); a failed command, which the live hook cannot tell, is a PostToolUseFailure."""
    payloads = played(SAMPLE, hook_fixture("Stop")["transcript_path"])  # where Codex wrote it
    assert [p.stage for p in payloads] == ["SessionStart", "UserPromptSubmit", "PostToolUse", "PostToolUseFailure",
                                          "PostToolUse", "PostToolUse", "PostToolUseFailure", "Stop", "SessionEnd"]
    by_call = {p.payload.get("tool_use_id"): p.payload for p in payloads if "tool_use_id" in p.payload}
    shared = ("session_id", "turn_id", "transcript_path", "cwd", "hook_event_name", "model", "tool_name",
              "tool_input", "tool_response", "tool_use_id", "prompt", "last_assistant_message", "source", "reason")
    for name in ("SessionStart-startup", "UserPromptSubmit", "PostToolUse-Bash", "PostToolUse-apply_patch-add",
                 "PostToolUse-apply_patch-update", "Stop", "SessionEnd"):
        live = hook_fixture(name)
        ours = by_call.get(live.get("tool_use_id")) or next(p.payload for p in payloads
                                                            if p.stage == live["hook_event_name"])
        for field in shared:
            assert ours.get(field) == live.get(field), (name, field)
    failed = hook_fixture("PostToolUse-Bash-failed")
    ours = by_call[failed["tool_use_id"]]
    assert ours["hook_event_name"] == "PostToolUseFailure" and ours["tool_input"] == failed["tool_input"]
    assert ours["error"] == "Exit code 2\n" + failed["tool_response"]  # Claude Code's failure text
    assert len({p.key for p in payloads}) == len(payloads)  # a key of its own each: idempotent delivery


def test_conversion_names_the_prompts_commands_files_and_failures() -> None:
    stats = ConversionStats()
    [session] = convert_rollouts(rollout_files(SAMPLE), stats)
    assert session.session_id == "01a235ab-b9c6-77c1-9b29-3e05c1ceb186" and session.cwd == "/home/user/project"
    events = [e.payload for e in session.events]
    assert [e["prompt"] for e in events if e["hook_event_name"] == "UserPromptSubmit"] == [FIRST_PROMPT]
    tools = [(e["hook_event_name"], e["tool_name"], e["tool_input"].get("command") or e["tool_input"]["file_path"])
             for e in events if "tool_name" in e]
    assert tools == [
        ("PostToolUse", "Bash", "cat calc.py"),
        ("PostToolUseFailure", "Bash", "ls missing-notes.md"),
        ("PostToolUse", "Write", "/home/user/project/NOTES.md"),  # the patch, as the files it changed
        ("PostToolUse", "Edit", "/home/user/project/calc.py"),
        ("PostToolUseFailure", "Edit", "/home/user/project/missing.py"),  # a patch Codex could not apply
    ]
    edit = next(e for e in events if e.get("tool_name") == "Edit")
    assert (edit["tool_input"]["old_string"], edit["tool_input"]["new_string"]) == (
        "def add(a, b):\n    return a + b", "def add(a, b):\n    return b + a")
    assert "No such file or directory" in next(e["error"] for e in events if e.get("tool_name") == "Edit"
                                               and e["hook_event_name"] == "PostToolUseFailure")
    assert [e["last_assistant_message"] for e in events if e["hook_event_name"] == "Stop"] == [FIRST_REPLY]
    assert stats.as_dict() | {"lines": 0, "entries": 0} == ConversionStats(
        files=1, sessions=1, prompts=1, tool_uses=5, failed_tool_uses=2, stops=1).as_dict()


def test_a_compaction_is_a_checkpoint_of_the_turn_before_it() -> None:
    """The resumed run goes on in the same file; its compaction is PreCompact with the last prompt and reply
    before it (not the summary Codex wrote), then SessionStart ``compact``; the summary is nobody's prompt."""
    stats = ConversionStats()
    [session] = convert_rollouts([COMPACTED], stats)
    stages = [(e.stage, e.payload.get("source") or e.payload.get("prompt") or e.payload.get("last_assistant_message")
               or e.payload.get("tool_name")) for e in session.events]
    at = stages.index(("PreCompact", FIRST_REPLY))
    assert stages[at - 1] == ("Stop", FIRST_REPLY)
    assert stages[at:] == [("PreCompact", FIRST_REPLY), ("SessionStart", "compact"),
                           ("UserPromptSubmit", SECOND_PROMPT), ("Stop", SECOND_REPLY), ("SessionEnd", None)]
    checkpoint = session.events[at].payload
    assert checkpoint["last_user_message"] == FIRST_PROMPT and checkpoint["trigger"] == "auto"
    assert stats.compactions == 1 and stats.prompts == 2 and stats.stops == 2
    assert not any(SUMMARY in json.dumps(e.payload) for e in session.events)


def test_broken_lines_are_counted_never_fatal(tmp_path: Path) -> None:
    lines = SAMPLE.read_text().splitlines(keepends=True)
    broken = tmp_path / "rollout-2026-12-02T07-32-56-broken.jsonl"
    broken.write_text("".join(lines[:9]) + "{not json\n" + "".join(lines[9:]) + '{"timestamp": "2026-12-02T07:3')
    stats = ConversionStats()
    [session] = convert_rollouts(rollout_files(tmp_path), stats)
    assert stats.broken_lines == 2 and stats.files == 1
    [whole] = convert_rollouts([SAMPLE])
    assert [e.payload for e in session.events] == [
        {**e.payload, "transcript_path": str(broken)} for e in whole.events]
    garbage = tmp_path / "other" / "rollout-x.jsonl"
    garbage.parent.mkdir()
    garbage.write_bytes(b"\x00\xff not a rollout\n")
    stats = ConversionStats()
    assert convert_rollouts([garbage], stats) == [] and stats.broken_lines == 1


def test_the_last_turn_is_read_from_the_end_of_a_rollout(tmp_path: Path) -> None:
    assert last_codex_turn(str(SAMPLE)) == (FIRST_PROMPT, FIRST_REPLY, 0)
    assert last_codex_turn(str(COMPACTED)) == (SECOND_PROMPT, SECOND_REPLY, 0)
    # At the compaction (the file as PreCompact finds it): the turn before it, not the summary being written.
    lines = COMPACTED.read_text().splitlines(keepends=True)
    summary_at = next(i for i, line in enumerate(lines) if SUMMARY in line)
    cut = tmp_path / "rollout-at-compaction.jsonl"
    cut.write_text("".join(lines[:summary_at + 1]) + "{broken\n")
    assert last_codex_turn(str(cut)) == (FIRST_PROMPT, FIRST_REPLY, 1)
    # Only Codex's own messages so far (environment context, instructions): no prompt, no reply.
    start = tmp_path / "rollout-start.jsonl"
    start.write_text("".join(line for line in lines[:7]))
    assert last_codex_turn(str(start)) == ("", "", 0)
    with pytest.raises(OSError):
        last_codex_turn(str(tmp_path / "missing.jsonl"))


@pytest.mark.slow
def test_a_codex_pre_compact_hook_stores_a_checkpoint_naming_the_last_prompt(worker: ThreadedWorker) -> None:
    """Codex's PreCompact has no summary: the hook (run as Codex runs it) reads the turn from the rollout."""
    payload = {**hook_fixture("PreCompact"), "transcript_path": str(SAMPLE)}
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONMEM_")}
    result = subprocess.run([sys.executable, "-S", str(ENTRY), "PreCompact", "codex"], input=json.dumps(payload).encode(),
                            env={**env, "SESSIONMEM_DATA_DIR": str(worker.data_dir)}, capture_output=True, timeout=30)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")
    worker.wait_idle()
    [checkpoint] = worker.get("/api/summaries")["summaries"]
    assert checkpoint["claudeSessionId"] == payload["session_id"]
    assert checkpoint["request"] == FIRST_PROMPT and FIRST_REPLY in checkpoint["completed"]
    assert not (worker.data_dir / "hooks.log").exists()


def backfill(data_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONMEM_", "CODEX_HOME"))}
    return subprocess.run([sys.executable, "-m", "sessionmem", "backfill", "--no-wait", *args],
                          env={**clean, "SESSIONMEM_DATA_DIR": str(data_dir), **env},
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def recorded_codex_home(tmp_path: Path) -> Iterator[CodexHome]:
    """A session the pinned Codex CLI runs and records now (the scripted model of the fixtures' recording):
    two commands (one fails), three patches (one fails), a reply; resumed with a compaction and a second prompt."""
    if not CODEX.exists():
        pytest.fail(f"{CODEX} is missing: `make test` installs the pinned Codex CLI (npm ci in e2e/)")
    project = tmp_path / "user" / "project"
    project.mkdir(parents=True)
    (project / "calc.py").write_text(CALC)
    with ScriptedResponsesAPI(responder=scripted_model) as api:
        codex = CodexHome.create(tmp_path / "user", api.url)
        first = codex.exec(FIRST_PROMPT, project=project).check()
        codex.resume(SECOND_PROMPT, project=project, session_id=first.session_id, auto_compact_token_limit=1000).check()
    yield codex


@pytest.mark.slow
@pytest.mark.xdist_group("codex")
def test_backfill_of_a_rollout_the_pinned_codex_wrote(recorded_codex_home: CodexHome, tmp_path: Path) -> None:
    codex_home = recorded_codex_home.codex_home
    project = recorded_codex_home.home / "project"
    # The rollout the pinned CLI writes now plays back as the recorded one does (the fixtures are what it writes).
    [fresh] = convert_rollouts(rollout_files(codex_home / "sessions"))
    [recorded] = convert_rollouts([COMPACTED])
    assert [(e.stage, e.payload.get("tool_name")) for e in fresh.events] == [
        (e.stage, e.payload.get("tool_name")) for e in recorded.events]
    with start_worker(tmp_path / "data", env={"SESSIONMEM_COMPRESSOR": "offline", "SESSIONMEM_EMBEDDER": "none"}) as worker:
        first = backfill(worker.data_dir, "--agent", "codex", CODEX_HOME=str(codex_home))  # its default: $CODEX_HOME/sessions
        assert first.returncode == 0, first.stdout + first.stderr
        assert "sessionmem: Codex CLI: 1 session(s) from 1 file(s): 2 prompts, 5 tool uses" in first.stdout
        assert "0 refused" in first.stdout and "0 lost" in first.stdout
        worker.wait_idle()
        observations = worker.get("/api/observations?limit=100")["observations"]
        assert sorted((o["toolName"], o["failed"], tuple(o["filesModified"])) for o in observations) == [
            ("Bash", False, ()), ("Bash", True, ()),  # `ls missing-notes.md` exited 2
            ("Edit", False, (str(project / "calc.py"),)),
            ("Edit", True, (str(project / "missing.py"),)),  # the patch Codex could not apply
            ("Write", False, (str(project / "NOTES.md"),)),
        ]
        [session] = worker.get("/api/sessions")["sessions"]
        assert session["promptCounter"] == 2 and session["status"] == "completed"
        assert session["cwd"] == str(project) and session["agent"] == "codex"
        assert {o["agent"] for o in observations} == {"codex"}
        summaries = worker.get("/api/summaries")["summaries"]
        assert len(summaries) == 3  # two turns and the checkpoint at the compaction
        assert {s["request"] for s in summaries} == {FIRST_PROMPT, SECOND_PROMPT}

        again = backfill(worker.data_dir, "--agent", "codex", str(codex_home / "sessions"))
        assert again.returncode == 0 and " 0 new" in again.stdout, again.stdout + again.stderr
        worker.wait_idle()
        assert len(worker.get("/api/observations?limit=100")["observations"]) == len(observations)
        assert len(worker.get("/api/summaries")["summaries"]) == len(summaries)
        assert worker.get("/api/sessions")["sessions"][0]["promptCounter"] == 2



def test_an_mcp_call_is_played_back_as_the_hook_saw_it() -> None:
    """As Codex's PostToolUse hook names it (``mcp__<server>__<tool>``, the arguments, the server's result);
    the search that found the tool fires no hook and makes nothing."""
    stats = ConversionStats()
    [session] = convert_rollouts([CODEX_FIXTURES / "rollout-mcp.jsonl"], stats)
    [call] = [e.payload for e in session.events if "tool_name" in e.payload]
    assert (call["hook_event_name"], call["tool_name"], call["tool_input"]) == ("PostToolUse", "mcp__notes__lookup",
                                                                                 {"query": "x"})
    assert call["tool_response"]["content"] == [{"type": "text", "text": "remembered: x"}]
    assert call["tool_response"]["isError"] is False
    assert stats.tool_uses == 1 and stats.unpaired_tool_uses == 0
