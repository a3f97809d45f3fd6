"""Acceptance 1, 2 and 6: genuine Claude Code 2.1.328 hook payloads against a real worker process."""

from __future__ import annotations

import collections
from typing import Any

import pytest

from sessionmem.protocol.requests import api_call
from sessionmem.testing.worker_process import WorkerProcess

from .conftest import data_dir_contains

pytestmark = pytest.mark.slow

SESSION_1 = "19a4c37f-abc8-46fc-a5e3-44d2dabf04e3"
SESSION_2 = "f3b50f3d-97d6-4192-b09e-ae70194cc9ab"


def replay(worker: WorkerProcess, payloads: list[dict[str, Any]]) -> list[tuple[str, int, Any]]:
    results = []
    for payload in payloads:
        call = api_call(payload)
        if call is None:
            continue
        method, path, body = call
        status, answer = worker.request(method, path, body)
        results.append((payload["hook_event_name"], status, answer))
    return results


def test_health_without_api_key(worker: WorkerProcess) -> None:
    status, body = worker.request("GET", "/api/health")
    assert status == 200
    assert body["status"] == "ok"
    assert body["compressor"] == "offline"
    assert worker.request("GET", "/api/readiness")[0] == 200


def test_genuine_payload_sequence(worker: WorkerProcess, payloads: list[dict[str, Any]]) -> None:
    results = replay(worker, payloads)
    assert all(status in (200, 202) for _, status, _ in results), results

    # Prompt numbers as the worker answered them: 1..n per session; the
    # <task-notification> prompt is skipped, not counted.
    inits = [answer for event, _, answer in results if event == "UserPromptSubmit"]
    assert [(a["promptNumber"], a["skipped"]) for a in inits] == [(1, False), (1, True), (2, False), (1, False)]
    assert "task-notification" in inits[1]["reason"]

    debug = worker.wait_idle()

    sessions = {s["claudeSessionId"]: s for s in worker.get("/api/sessions")["sessions"]}
    assert set(sessions) == {SESSION_1, SESSION_2}
    assert sessions[SESSION_1]["prompt_counter"] == 2
    assert sessions[SESSION_2]["prompt_counter"] == 1
    assert {s["status"] for s in sessions.values()} == {"completed"}
    assert {s["project"] for s in sessions.values()} == {"calcproj"}

    everything = worker.get("/api/observations?project=calcproj&limit=100")["observations"]
    # The background subagent's final report is kept as an observation of its own.
    (report,) = [o for o in everything if o["tool_name"] == "SubagentStop"]
    assert report["title"] == "The general-purpose agent reported: No other edge cases: add, sub and mul are total functions."
    assert report["agent_id"] == "a391bd5424096c38a"
    observations = [o for o in everything if o["tool_name"] != "SubagentStop"]
    tool_uses = [p for p in payloads if p["hook_event_name"] in ("PostToolUse", "PostToolUseFailure")]
    assert len(observations) == len(tool_uses) == 8
    assert sorted(o["tool_use_id"] for o in observations) == sorted(p["tool_use_id"] for p in tool_uses)
    assert all(o["claudeSessionId"] == SESSION_1 for o in observations)
    by_tool_use = {o["tool_use_id"]: o for o in observations}
    assert by_tool_use["toolu_c04"]["failed"] is True and by_tool_use["toolu_c04"]["type"] == "failure"
    assert by_tool_use["toolu_s01"]["agent_id"] == "a391bd5424096c38a"
    assert by_tool_use["toolu_s01"]["agent_type"] == "general-purpose"
    assert by_tool_use["toolu_c03"]["files_modified"] == ["/home/dev/calcproj/calc.py"]
    assert by_tool_use["toolu_c03"]["type"] == "bugfix"  # the prompt asks to fix a bug
    assert by_tool_use["toolu_c06"]["prompt_number"] == 2  # written after the second prompt

    summaries = worker.get("/api/summaries?limit=100")["summaries"]
    stops = collections.Counter(p["session_id"] for p in payloads if p["hook_event_name"] == "Stop")
    assert collections.Counter(s["claudeSessionId"] for s in summaries) == stops
    assert stops == {SESSION_1: 3, SESSION_2: 1}

    # Acceptance 6: /debug shows these actors with correct counts.
    actors = {a["claudeSessionId"]: a for a in debug["actors"]}
    assert actors[SESSION_1]["processed_by_kind"] == {"init": 3, "observation": 9, "summarize": 3, "complete": 2}
    assert actors[SESSION_2]["processed_by_kind"] == {"init": 1, "summarize": 1, "complete": 1}
    assert actors[SESSION_1]["processed"] == 17 and actors[SESSION_1]["restarts"] == 0
    assert debug["journal"]["pending"] == 0 and debug["journal"]["parked"] == 0
    assert debug["supervisor"]["crashes"] == 0
    assert debug["compressor"]["observations"] == 9

    # The injected context for the next session carries this memory.
    status, context = worker.request("GET", "/api/context/inject?project=calcproj")
    assert status == 200
    assert context.startswith("<sessionmem-context>") and context.rstrip().endswith("</sessionmem-context>")
    assert "Edited calc.py" in context

    worker.stop()
    # The private password is nowhere in the data dir (database, WAL, logs)...
    assert data_dir_contains(worker.data_dir, b"hunter2") == []
    # ...while the rest of that same prompt was stored, so the search above can find things.
    assert data_dir_contains(worker.data_dir, b"Fix the divide-by-zero bug")


def test_replayed_payloads_do_not_duplicate(worker: WorkerProcess, payloads: list[dict[str, Any]]) -> None:
    tool_uses = [p for p in payloads if p["hook_event_name"] in ("PostToolUse", "PostToolUseFailure")]
    replay(worker, tool_uses)
    replay(worker, tool_uses)  # a hook retried every event
    worker.wait_idle()
    observations = worker.get("/api/observations?limit=100")["observations"]
    assert len(observations) == len(tool_uses)
