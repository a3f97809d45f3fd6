"""Acceptance 5 and 6: injected actor crashes on the real worker, restart intensity, parking, replay."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from sessionmem.testing.worker_process import WorkerProcess

pytestmark = pytest.mark.slow

CRASH_TOOL = "SessionmemCrash"


def send_observation(worker: WorkerProcess, session: str, tool_use_id: str, *, crash_times: int = 0) -> None:
    body = {"claudeSessionId": session, "cwd": "/work/sup", "tool_use_id": tool_use_id,
            "tool_name": CRASH_TOOL if crash_times else "Read",
            "tool_input": {"times": crash_times} if crash_times else {"file_path": f"/work/sup/{tool_use_id}.py"},
            "tool_response": "x = 1\n"}
    status, answer = worker.request("POST", "/api/sessions/observations", body)
    assert status == 202, answer


def init(worker: WorkerProcess, session: str, prompt: str) -> None:
    assert worker.request("POST", "/api/sessions/init", {"claudeSessionId": session, "cwd": "/work/sup",
                                                         "prompt": prompt})[0] == 200


def summarize_and_complete(worker: WorkerProcess, session: str) -> None:
    assert worker.request("POST", "/api/sessions/summarize", {"claudeSessionId": session,
                                                              "last_assistant_message": "ok"})[0] == 202
    assert worker.request("POST", "/api/sessions/complete", {"claudeSessionId": session})[0] == 202


def observations_of(worker: WorkerProcess, session: str) -> list[dict[str, object]]:
    rows = worker.get("/api/observations?limit=500")["observations"]
    return sorted((r for r in rows if r["claudeSessionId"] == session), key=lambda r: r["id"])


def actor(worker: WorkerProcess, session: str) -> dict[str, object]:
    return next(a for a in worker.get("/debug")["actors"] if a["claudeSessionId"] == session)


@pytest.fixture
def faulty_worker(worker_factory: Callable[..., WorkerProcess]) -> WorkerProcess:
    return worker_factory(SESSIONMEM_FAULT_INJECTION=1, SESSIONMEM_MAX_RESTARTS=5, SESSIONMEM_RESTART_WINDOW=60,
                          SESSIONMEM_BATCH_QUIET=0.05, SESSIONMEM_BATCH_SIZE=2)


def test_crashed_actor_restarts_and_keeps_order(faulty_worker: WorkerProcess) -> None:
    worker = faulty_worker
    init(worker, "crashy", "explore the module")
    init(worker, "calm", "a healthy session")
    send_observation(worker, "crashy", "c1")
    send_observation(worker, "calm", "k1")
    send_observation(worker, "crashy", "c2", crash_times=2)  # crashes twice, then succeeds
    send_observation(worker, "crashy", "c3")
    send_observation(worker, "calm", "k2")
    send_observation(worker, "crashy", "c4")
    summarize_and_complete(worker, "crashy")
    summarize_and_complete(worker, "calm")
    debug = worker.wait_idle()

    # Every message was processed, in arrival order, by the restarted actor.
    assert [o["tool_use_id"] for o in observations_of(worker, "crashy")] == ["c1", "c2", "c3", "c4"]
    assert [o["tool_use_id"] for o in observations_of(worker, "calm")] == ["k1", "k2"]
    sessions = {s["claudeSessionId"]: s for s in worker.get("/api/sessions")["sessions"]}
    assert sessions["crashy"]["status"] == sessions["calm"]["status"] == "completed"

    actors = {a["claudeSessionId"]: a for a in debug["actors"]}
    assert actors["crashy"]["restarts"] == 2 and "injected crash 2/2" in actors["crashy"]["last_error"]
    assert actors["crashy"]["processed_by_kind"] == {"init": 1, "observation": 4, "summarize": 1, "complete": 1}
    assert actors["calm"]["restarts"] == 0 and actors["calm"]["last_error"] == ""
    assert debug["supervisor"]["crashes"] == 2 and debug["supervisor"]["failed_sessions"] == 0


def test_intensity_limit_fails_only_that_session_and_parks_events(faulty_worker: WorkerProcess) -> None:
    worker = faulty_worker
    init(worker, "doomed", "this one will fail")
    init(worker, "healthy", "this one is fine")
    send_observation(worker, "doomed", "d1")
    send_observation(worker, "doomed", "d2", crash_times=7)  # 6 crashes exceed 5 restarts
    send_observation(worker, "doomed", "d3")
    worker.wait_until(lambda: actor(worker, "doomed")["failed"])
    send_observation(worker, "doomed", "d4")  # arrives after the failure: parked too
    send_observation(worker, "healthy", "h1")
    summarize_and_complete(worker, "healthy")
    debug = worker.wait_idle()

    doomed = {a["claudeSessionId"]: a for a in debug["actors"]}["doomed"]
    assert doomed["state"] == "failed" and doomed["restarts"] == 5
    assert debug["supervisor"]["failed_sessions"] == 1 and debug["supervisor"]["crashes"] == 6
    # Everything not yet durably processed is parked: d1 (still in the batch the poison
    # interrupted), d2 (the poison), d3, and d4.
    assert debug["journal"]["parked"] == 4
    sessions = {s["claudeSessionId"]: s for s in worker.get("/api/sessions")["sessions"]}
    assert sessions["doomed"]["status"] == "failed" and "gave up after 6 crashes" in sessions["doomed"]["failure"]
    assert sessions["healthy"]["status"] == "completed"
    assert observations_of(worker, "doomed") == []
    assert [o["tool_use_id"] for o in observations_of(worker, "healthy")] == ["h1"]
    assert worker.request("GET", "/api/health")[0] == 200

    # The operator replays the parked events with the CLI; the 7th crash is restarted and all complete.
    env = {**os.environ, "SESSIONMEM_DATA_DIR": str(worker.data_dir)}
    result = subprocess.run([sys.executable, "-m", "sessionmem", "replay", "doomed"], env=env,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert "4 parked event(s)" in result.stdout
    debug = worker.wait_idle()
    assert [o["tool_use_id"] for o in observations_of(worker, "doomed")] == ["d1", "d2", "d3", "d4"]
    assert debug["journal"]["parked"] == 0
    assert {a["claudeSessionId"]: a for a in debug["actors"]}["doomed"]["failed"] is False
