"""Continuity across compaction: PreCompact stores a checkpoint of the session so far, and the SessionStart
after the compaction (``source=compact``) hands the session its own work back first, then related memory.

The hooks run as Claude Code runs them, against a real worker over HTTP; the real CLI compacting is in
tests/test_e2e_claude_code.py.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from sessionmem.protocol.limits import HOOK_CONTEXT_MAX_CHARS
from sessionmem.records import SessionSoFar
from sessionmem.search.context import ContextPlan, session_state
from sessionmem.search.told import SAME_REQUEST_S, Handover, ToldLedger
from sessionmem.server.app import COMPACT_SETTLE_S
from sessionmem.server.context_markdown import CHARS_PER_TOKEN, render_handover
from sessionmem.testing.harness import serve_in_thread
from sessionmem.testing.messages_api import ScriptedMessagesAPI
from sessionmem.testing.worker_process import WorkerClient, WorkerProcess

from .conftest import observation_row, summary_row
from .test_hooks import run_hook

pytestmark = pytest.mark.slow

CWD = "/home/dev/calcproj"  # the recorded payloads' project
SESSION = "compacted-session"


def event(stage: str, **fields: Any) -> dict[str, Any]:
    return {"session_id": SESSION, "cwd": CWD, "hook_event_name": stage, **fields}


def tool_use(name: str, tool_input: dict[str, Any], response: Any, *, failed: str = "") -> dict[str, Any]:
    stage = "PostToolUseFailure" if failed else "PostToolUse"
    fields = {"tool_name": name, "tool_input": tool_input, "tool_use_id": f"toolu_{name}_{len(json.dumps(tool_input))}"}
    return event(stage, **fields, **({"error": failed} if failed else {"tool_response": response}))


def hook(stage: str, payload: dict[str, Any], data_dir: Path) -> dict[str, Any] | None:
    """The hook, as Claude Code runs it, with time to wait for the worker: what it is handed is under test here,
    not the hooks' budget (2 s, which a loaded machine can spend while a worker starts or answers its readiness,
    spooling the event for later and leaving the session without a row yet)."""
    result = run_hook(stage, payload, data_dir, SESSIONMEM_HOOK_TIMEOUT="30", SESSIONMEM_START_TIMEOUT="30")
    assert result.returncode == 0 and result.stderr == b""
    return json.loads(result.stdout) if result.stdout else None


def earlier_session(worker: WorkerClient, payloads: list[dict[str, Any]]) -> None:
    """The recorded session: the divide bug fixed in calc.py, summarized, ended."""
    for payload in payloads:
        if payload["hook_event_name"] != "SessionStart":
            run_hook(payload["hook_event_name"], payload, worker.data_dir, SESSIONMEM_HOOK_TIMEOUT="30")
    worker.wait_idle()


def work_until_compaction(worker: WorkerClient) -> None:
    """A session that changed two files and left a test failing, then PreCompact (no wait: the SessionStart
    after it must find the checkpoint stored)."""
    data_dir = worker.data_dir
    hook("UserPromptSubmit", event("UserPromptSubmit", prompt="Add a power function to calc.py with tests"), data_dir)
    hook("PostToolUse", tool_use("Edit", {"file_path": f"{CWD}/calc.py", "old_string": "x", "new_string": "y"},
                                 {"filePath": f"{CWD}/calc.py"}), data_dir)
    hook("PostToolUse", tool_use("Write", {"file_path": f"{CWD}/test_power.py", "content": "def test_power(): ..."},
                                 {"type": "create", "filePath": f"{CWD}/test_power.py"}), data_dir)
    hook("PostToolUseFailure", tool_use("Bash", {"command": "pytest -q test_power.py"}, None,
                                        failed="Exit code 1\nFAILED test_power.py::test_power - AssertionError"),
         data_dir)
    assert hook("PreCompact", event("PreCompact", trigger="auto", custom_instructions=None), data_dir) is None


def test_a_compacted_session_is_handed_its_own_work_first_then_related_memory(
        worker: WorkerClient, payloads: list[dict[str, Any]]) -> None:
    earlier_session(worker, payloads)
    work_until_compaction(worker)
    output = hook("SessionStart", event("SessionStart", source="compact"), worker.data_dir)
    assert output is not None
    context = output["hookSpecificOutput"]["additionalContext"]
    sections = [line for line in context.splitlines() if line.startswith("## ")]
    assert sections[0] == "## This session so far (from before its conversation was compacted)", context
    own = context.split(sections[0])[1].split(sections[1] if len(sections) > 1 else "\n\nMore:")[0]
    assert "**Request:** Add a power function to calc.py with tests" in own
    assert "Wrote test_power.py" in own and "Edited calc.py" in own  # the files it changed
    assert "pytest -q test_power.py" in own and "failure" in own  # the test left failing
    assert "divide" not in own.lower()  # another session's work is not this one's
    # Then related memory: the earlier session's, never this session's own again.
    rest = context.split(own)[1]
    assert "divide" in rest.lower() and "test_power" not in rest and "#12" not in rest
    assert len(context) <= HOOK_CONTEXT_MAX_CHARS

    # The checkpoint PreCompact sent is this session's summary, stored before the context was read.
    summaries = [s for s in worker.get("/api/summaries")["summaries"] if s["claudeSessionId"] == SESSION]
    assert len(summaries) == 1 and summaries[0]["request"].startswith("Add a power function")


def test_a_fresh_start_of_the_same_project_is_not_handed_the_session_as_its_own(
        worker: WorkerClient, payloads: list[dict[str, Any]]) -> None:
    earlier_session(worker, payloads)
    work_until_compaction(worker)
    worker.wait_idle()
    for source in ("startup", "resume", "clear"):
        output = hook("SessionStart", event("SessionStart", source=source), worker.data_dir)
        assert output is not None
        assert "## This session so far" not in output["hookSpecificOutput"]["additionalContext"], source


def test_the_handover_after_compaction_stays_under_the_hook_output_limit(worker: WorkerClient) -> None:
    long = "very-long-directory-name-" * 8
    worker.post("/api/sessions/init", {"claudeSessionId": SESSION, "project": "calcproj", "cwd": CWD,
                                       "prompt": "Rename every module " + "and its tests " * 200})
    for number in range(300):
        path = f"{CWD}/{long}/module_{number}.py"
        worker.post("/api/sessions/observations", {
            "claudeSessionId": SESSION, "project": "calcproj", "cwd": CWD, "tool_name": "Edit",
            "tool_use_id": f"toolu_{number}", "tool_input": {"file_path": path, "old_string": "a", "new_string": "b"},
            "tool_response": {"filePath": path}})
    worker.wait_idle()
    hook("PreCompact", event("PreCompact", trigger="manual"), worker.data_dir)
    output = hook("SessionStart", event("SessionStart", source="compact"), worker.data_dir)
    assert output is not None
    context = output["hookSpecificOutput"]["additionalContext"]
    own = context.split("## This session so far")[1]
    assert "**Request:** Rename every module" in own and "Edited very-long-directory-name" in own
    assert "**Also changed:**" in own  # the files beyond those it worked on most, as many as fit one line
    assert len(context) <= HOOK_CONTEXT_MAX_CHARS


def test_the_context_after_a_compaction_waits_for_the_checkpoint_a_model_is_writing(
        worker_factory: Callable[..., WorkerProcess]) -> None:
    """With a model compressing (each call 0.1 s), the tool uses wait in their batch until PreCompact's summarize
    flushes them: the SessionStart after it waits (up to COMPACT_SETTLE_S) for them and the checkpoint."""
    with ScriptedMessagesAPI(delay=0.1) as api:
        worker = worker_factory(SESSIONMEM_COMPRESSOR="anthropic", SESSIONMEM_ANTHROPIC_API_KEY="sk-test-dummy",
                                SESSIONMEM_ANTHROPIC_BASE_URL=api.url, SESSIONMEM_BATCH_QUIET=30)
        work_until_compaction(worker)  # the three tool uses sit in the batch: 30 s of quiet before a flush
        started = time.monotonic()
        output = hook("SessionStart", event("SessionStart", source="compact"), worker.data_dir)
        waited = time.monotonic() - started
        log = worker.data_dir / "hooks.log"
        assert output is not None, log.read_text() if log.exists() else "no hooks.log"
        own = output["hookSpecificOutput"]["additionalContext"].split("## This session so far")[1]
        # The promise: it waited for the session's actor, up to its bound; a loaded machine may need all of it.
        stored = "**Completed:** scripted completion" in own and "- #" in own  # the checkpoint, its tool uses
        assert stored or waited >= COMPACT_SETTLE_S, (waited, own)
        worker.wait_idle()  # the checkpoint, once
        assert [s["claudeSessionId"] for s in worker.get("/api/summaries")["summaries"]].count(SESSION) == 1


def test_a_small_budget_keeps_the_sessions_fields_and_tells_only_the_lines_it_shows() -> None:
    """Rendering alone: where the session stands is cut from its end to fit, the fields stay, and what was cut
    is not recorded as told (a later recall may still say it)."""
    rows = [observation_row(n, type="change", title=f"Edited src/module_{n}.py with a long description " + "x" * 80,
                            files_modified=[f"{CWD}/src/module_{n}.py"]) for n in range(1, 31)]
    summary = summary_row(99, claude_session_id=SESSION, completed="Renamed the modules")
    state = session_state(SessionSoFar(CWD, "Rename the modules", "", summary, list(reversed(rows))), files=30)
    plan = ContextPlan("calcproj", None, "", "recency", [], [], state)
    small, large = render_handover(plan, token_budget=600), render_handover(plan, token_budget=20_000)
    assert "**Request:** Rename the modules" in small.text and "**Completed:** Renamed the modules" in small.text
    shown = {int(match) for match in re.findall(r"^- #(\d+)", small.text, re.MULTILINE)}
    assert 0 < len(shown) < len(state.lines) == large.observations
    assert set(small.told) == {("summary", 99)} | {("observation", row_id) for row_id in shown}
    assert small.observations == len(shown) and len(small.text) <= 600 * CHARS_PER_TOKEN
    assert "compacted)" in small.text  # not flagged: no mark
    flagged = msgspec.structs.replace(state, summary=msgspec.structs.replace(summary, flagged=True))
    heading = render_handover(msgspec.structs.replace(plan, own=flagged), token_budget=600).text
    assert "## This session so far (from before its conversation was compacted; flagged" in heading


# -- each memory told once in what the model sees, whichever SessionStarts bring it (search/told.py) --------------

def handed(source: str, data_dir: Path) -> str:
    """What a SessionStart of ``source`` hands the session ("" when nothing)."""
    output = hook("SessionStart", event("SessionStart", source=source), data_dir)
    return (output or {}).get("hookSpecificOutput", {}).get("additionalContext", "")


def memory_ids(context: str) -> set[str]:
    return set(re.findall(r"#(\d+)", context))


def sections(context: str) -> list[str]:
    return [line for line in context.splitlines() if line.startswith("## ")]


def related(context: str) -> str:
    """What follows the session's own work: the other sessions' memory."""
    own = sections(context)[0]
    assert own.startswith("## This session so far"), context
    return context.split(own)[1].split("\n## ", 1)[1] if len(sections(context)) > 1 else ""


def test_codexs_two_session_starts_after_a_resumed_sessions_compaction_tell_each_memory_once(
        worker: WorkerClient, payloads: list[dict[str, Any]]) -> None:
    """Codex 0.169.0 compacting a resumed session before its turn: PreCompact, then SessionStart ``resume``, then
    SessionStart ``compact``, both texts in the same model request (tests/fixtures/codex/README.md)."""
    earlier_session(worker, payloads)
    work_until_compaction(worker)
    first, second = handed("resume", worker.data_dir), handed("compact", worker.data_dir)
    assert sections(first)[0] == "## This session so far (from before its conversation was compacted)", first
    assert "divide" in related(first).lower()  # then related memory
    both = first + second
    assert both.count("## This session so far") == 1 and both.count("## Last session") <= 1
    assert both.count("## Earlier sessions") <= 1
    assert memory_ids(first) and not memory_ids(first) & memory_ids(second)

    # A later turn's compaction discards both: everything is handed back, the session's own work first.
    hook("UserPromptSubmit", event("UserPromptSubmit", prompt="Now make the power test pass"), worker.data_dir)
    assert hook("PreCompact", event("PreCompact", trigger="auto"), worker.data_dir) is None
    later = handed("compact", worker.data_dir)
    assert "divide" in related(later).lower()


def test_a_resume_before_a_compaction_does_not_hold_back_the_memory_after_it(
        worker: WorkerClient, payloads: list[dict[str, Any]]) -> None:
    """Claude Code's order: the resumed session is handed memory, then compacts (PreCompact, SessionStart
    ``compact``): the compaction discarded what the resume handed, so it is all handed back."""
    earlier_session(worker, payloads)
    resumed = handed("resume", worker.data_dir)
    assert "divide" in resumed.lower()
    work_until_compaction(worker)
    after = handed("compact", worker.data_dir)
    assert "divide" in related(after).lower()


def test_a_compaction_the_worker_did_not_see_coming_is_handed_over_in_full(
        worker: WorkerClient, payloads: list[dict[str, Any]]) -> None:
    """No PreCompact said so (a checkpoint without ``compacting``, as a spooled one or an older hook sends): the
    SessionStart ``compact`` after a ``resume`` hands everything over, the session's own work first -- told twice
    rather than missed."""
    earlier_session(worker, payloads)
    hook("UserPromptSubmit", event("UserPromptSubmit", prompt="Add a power function to calc.py"), worker.data_dir)
    hook("Stop", event("Stop", last_assistant_message="Added power()."), worker.data_dir)
    resumed = handed("resume", worker.data_dir)
    after = handed("compact", worker.data_dir)
    assert "## This session so far" not in resumed and "divide" in resumed.lower()
    assert "divide" in related(after).lower()


def test_a_restarted_worker_hands_the_memory_over_in_full(tmp_path: Path, payloads: list[dict[str, Any]]) -> None:
    """What a session was told lives in the worker's memory: after a restart between the PreCompact and the
    SessionStarts, the ``compact`` one hands everything over again (fail open)."""
    data_dir = tmp_path / "data"
    with serve_in_thread(data_dir, batch_quiet_s=0.05) as before:
        earlier_session(before, payloads)
        work_until_compaction(before)
        before.wait_idle()
    with serve_in_thread(data_dir, batch_quiet_s=0.05):
        resumed, after = handed("resume", data_dir), handed("compact", data_dir)
    assert "divide" in resumed.lower()
    assert "divide" in related(after).lower()


def test_two_session_starts_at_once_tell_each_memory_once(
        worker: WorkerClient, payloads: list[dict[str, Any]]) -> None:
    earlier_session(worker, payloads)
    work_until_compaction(worker)
    texts: dict[str, str] = {}
    threads = [threading.Thread(target=lambda s=source: texts.__setitem__(s, handed(s, worker.data_dir)))
               for source in ("resume", "compact")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    both = texts["resume"] + texts["compact"]
    assert both.count("## This session so far") == 1 and "divide" in both.lower()
    assert not memory_ids(texts["resume"]) & memory_ids(texts["compact"])


def test_the_ledger_tells_a_second_session_start_apart_from_a_later_compaction() -> None:
    """The rule alone (search/told.py), at chosen moments."""
    ledger = ToldLedger()

    def session_start(source: str, now: float, *told: int) -> Handover:
        handover = ledger.begin_handover("s", source, now)
        ledger.handed("s", handover, source, [("observation", row_id) for row_id in told], now)
        return handover

    ledger.tell("s", [("observation", 1)])
    ledger.compacting("s")
    assert ledger.told("s") == frozenset()  # gone from the compacted context
    # A handover begun and never made (its hook gave up): the next one is still the first after the compaction.
    assert ledger.begin_handover("s", "resume", 99.0) is Handover.AFTER_COMPACTION
    assert session_start("resume", 100.0, 2) is Handover.AFTER_COMPACTION
    assert session_start("compact", 101.0, 3) is Handover.AGAIN
    assert ledger.told("s") == {("observation", 2), ("observation", 3)}
    # No prompt, no PreCompact seen, long after: another compaction, handed over in full.
    assert session_start("compact", 101.0 + SAME_REQUEST_S + 1) is Handover.AFTER_COMPACTION
    assert ledger.told("s") == frozenset()
    ledger.prompted("s")
    assert session_start("resume", 200.0) is Handover.ORDINARY
    assert session_start("compact", 200.5) is Handover.AFTER_COMPACTION  # a prompt came between
    # A new conversation in the same session is not the compacted one.
    ledger.compacting("s")
    assert session_start("startup", 300.0) is Handover.ORDINARY
    assert session_start("resume", 300.5) is Handover.ORDINARY
    assert ledger.begin_handover("t", "startup", 1.0) is Handover.ORDINARY
    assert ledger.begin_handover("t", "compact", 1.0) is Handover.AFTER_COMPACTION
