"""Acceptance 3: the real anthropic client against a local scripted Messages API server."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sessionmem.testing.messages_api import Action, ScriptedMessagesAPI
from sessionmem.testing.worker_process import WorkerProcess

pytestmark = pytest.mark.slow


@pytest.fixture
def llm_worker(worker_factory: Callable[..., WorkerProcess], messages_api: ScriptedMessagesAPI) -> WorkerProcess:
    # `auto` picks anthropic because a key is configured; the key is a dummy.
    return worker_factory(ANTHROPIC_API_KEY="sk-test-dummy", ANTHROPIC_BASE_URL=messages_api.url,
                          SESSIONMEM_COMPRESSOR="auto", SESSIONMEM_LLM_TIMEOUT=1, SESSIONMEM_LLM_BACKOFF_CAP=0.2,
                          SESSIONMEM_LLM_MAX_ATTEMPTS=3, SESSIONMEM_BATCH_SIZE=3, SESSIONMEM_BATCH_QUIET=0.1)


def post_tool(worker: WorkerProcess, session: str, tool_use_id: str) -> None:
    status, _ = worker.request("POST", "/api/sessions/observations", {
        "claudeSessionId": session, "cwd": "/work/llm", "tool_name": "Read", "tool_use_id": tool_use_id,
        "tool_input": {"file_path": f"/work/llm/{tool_use_id}.py"}, "tool_response": "print('hi')\n"})
    assert status == 202


def observation(worker: WorkerProcess, tool_use_id: str) -> dict[str, object]:
    rows = worker.get("/api/observations?limit=500")["observations"]
    return next(r for r in rows if r["tool_use_id"] == tool_use_id)


def test_batch_is_compressed_in_one_call_and_summarized(llm_worker: WorkerProcess,
                                                        messages_api: ScriptedMessagesAPI) -> None:
    worker = llm_worker
    assert worker.get("/api/health")["compressor"] == "anthropic"
    worker.request("POST", "/api/sessions/init", {"claudeSessionId": "llm", "cwd": "/work/llm",
                                                  "prompt": "explain the module <private>hunter2</private>"})
    for n in (1, 2, 3):
        post_tool(worker, "llm", f"t{n}")
    worker.request("POST", "/api/sessions/summarize", {"claudeSessionId": "llm", "last_assistant_message": "done"})
    debug = worker.wait_idle()

    assert messages_api.statuses() == [200, 200]  # one call for three tool uses, one for the summary
    first = messages_api.requests[0].body
    assert first["model"] == "claude-haiku-4-5"
    assert first["messages"][0]["content"].count("<tool_use index=") == 3
    assert "hunter2" not in str([r.body for r in messages_api.requests])

    for n in (1, 2, 3):
        row = observation(worker, f"t{n}")
        assert row["compressed"] is True and row["compressor"] == "anthropic"
        assert row["title"] == f"Scripted: Read #{n}"
        assert row["facts"] == ["tool Read ran"] and row["concepts"] == ["how-it-works"]
    (summary,) = worker.get("/api/summaries")["summaries"]
    assert summary["request"] == "scripted request" and summary["next_steps"] == "scripted next steps"

    (session,) = worker.get("/api/sessions")["sessions"]
    assert session["input_tokens"] == messages_api.input_tokens > 0
    assert session["output_tokens"] == messages_api.output_tokens > 0
    stats = debug["compressor"]
    assert stats["calls"] == 2 and stats["retries"] == 0 and stats["tool_uses"] == 3
    assert stats["input_tokens"] == messages_api.input_tokens


@pytest.mark.parametrize(
    ("fault", "statuses", "retries"),
    [
        (Action(status=429, retry_after=0.1), [429, 200], 1),
        (Action(status=500), [500, 200], 1),
        (Action(status=529), [529, 200], 1),
        (Action(delay=2.5), [200, 200], 1),  # the first reply comes after the client's 1 s timeout
    ],
    ids=["rate-limited", "server-error", "overloaded", "timeout"],
)
def test_transient_failures_are_retried(llm_worker: WorkerProcess, messages_api: ScriptedMessagesAPI,
                                        fault: Action, statuses: list[int], retries: int) -> None:
    worker = llm_worker
    messages_api.queue(fault)
    post_tool(worker, "retry", "r1")
    debug = worker.wait_idle()
    assert messages_api.statuses() == statuses
    row = observation(worker, "r1")
    assert row["compressed"] is True and row["title"] == "Scripted: Read #1"
    assert debug["compressor"]["retries"] == retries and debug["compressor"]["failures"] == 0


def test_malformed_reply_is_kept_raw_and_not_retried(llm_worker: WorkerProcess,
                                                     messages_api: ScriptedMessagesAPI) -> None:
    worker = llm_worker
    messages_api.queue(Action(text="I am not XML at all <observation>broken"))
    post_tool(worker, "bad", "b1")
    debug = worker.wait_idle()
    assert messages_api.statuses() == [200]
    row = observation(worker, "b1")
    assert row["compressed"] is False and row["compressor"] == "anthropic"
    assert row["title"] == "Read b1.py"  # built from the tool data itself
    assert row["input_tokens"] > 0  # the call still cost tokens, and they are counted
    assert debug["compressor"]["unparsed_replies"] == 1 and debug["compressor"]["retries"] == 0


def test_exhausted_retries_fall_back_to_raw(llm_worker: WorkerProcess, messages_api: ScriptedMessagesAPI) -> None:
    worker = llm_worker
    messages_api.queue(Action(status=500), Action(status=500), Action(status=500))
    post_tool(worker, "down", "x1")
    debug = worker.wait_idle()
    assert messages_api.statuses() == [500, 500, 500]  # llm_max_attempts = 3, then no more
    row = observation(worker, "x1")
    assert row["compressed"] is False and row["title"] == "Read x1.py"
    assert debug["compressor"]["failures"] == 1 and debug["compressor"]["raw_fallbacks"] == 1
