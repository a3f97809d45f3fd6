"""The anthropic compressor: the real ``anthropic`` client against a local scripted Messages API
server, inside the in-process worker (batching, retries, raw fallbacks, token counts), and a faulty
LLM: refused connections, replies cut off or echoed, a circuit breaker, token budgets."""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anthropic
import pytest

from sessionmem.compress.anthropic_backend import AnthropicCompressor
from sessionmem.compress.base import SessionContext
from sessionmem.compress.breaker import BreakerState, CircuitBreaker
from sessionmem.compress.prompts import observation_request, summary_request
from sessionmem.events import ObservationEvent, SummarizeEvent
from sessionmem.records import SummaryInputs
from sessionmem.settings import Settings
from sessionmem.testing.harness import InProcessWorker, open_worker
from sessionmem.testing.messages_api import Action, ScriptedMessagesAPI


def scripted(url: str, *, clock: Callable[[], float] = time.monotonic) -> Callable[[Settings], AnthropicCompressor]:
    """The anthropic compressor, its client pointed at ``url``, its circuit breaker on ``clock``."""
    def compressor(settings: Settings) -> AnthropicCompressor:
        return AnthropicCompressor(settings, client=lambda s: anthropic.AsyncAnthropic(
            api_key="sk-test-dummy", base_url=url, max_retries=0, timeout=s.llm_timeout_s), clock=clock)
    return compressor


class HandClock:
    """A clock that moves only when the test moves it: how long a breaker stays open is exact, not a race
    with a busy machine."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


LLM_SETTINGS = {"llm_timeout_s": 1, "llm_backoff_cap_s": 0.2, "llm_max_attempts": 3, "batch_size": 3,
                "batch_quiet_s": 0.1}


@pytest.fixture
async def llm_worker(tmp_path: Path, messages_api: ScriptedMessagesAPI) -> AsyncIterator[InProcessWorker]:
    async with open_worker(tmp_path / "data", compressor=scripted(messages_api.url), **LLM_SETTINGS) as worker:
        yield worker


async def post_tool(worker: InProcessWorker, session: str, tool_use_id: str) -> None:
    reply = await worker.request("POST", "/api/sessions/observations", {
        "claudeSessionId": session, "cwd": "/work/llm", "tool_name": "Read", "tool_use_id": tool_use_id,
        "tool_input": {"file_path": f"/work/llm/{tool_use_id}.py"}, "tool_response": "print('hi')\n"})
    assert reply.status == 202


async def observation(worker: InProcessWorker, tool_use_id: str) -> dict[str, object]:
    rows = (await worker.get("/api/observations?limit=500"))["observations"]
    return next(r for r in rows if r["toolUseId"] == tool_use_id)


async def test_batch_is_compressed_in_one_call_and_summarized(tmp_path: Path,
                                                              messages_api: ScriptedMessagesAPI) -> None:
    # A quiet time no loaded machine reaches between two posts: the batch closes because it is full.
    settings = {**LLM_SETTINGS, "batch_quiet_s": 60}
    async with open_worker(tmp_path / "data", compressor=scripted(messages_api.url), **settings) as worker:
        await batch_is_compressed_in_one_call_and_summarized(worker, messages_api)


async def batch_is_compressed_in_one_call_and_summarized(worker: InProcessWorker,
                                                         messages_api: ScriptedMessagesAPI) -> None:
    assert (await worker.get("/api/health"))["compressor"] == "anthropic"
    await worker.post("/api/sessions/init", {"claudeSessionId": "llm", "cwd": "/work/llm",
                                             "prompt": "explain the module <private>hunter2</private>"})
    for n in (1, 2, 3):
        await post_tool(worker, "llm", f"t{n}")
    await worker.post("/api/sessions/summarize", {"claudeSessionId": "llm", "last_assistant_message": "done"})
    await worker.wait_idle()
    debug = await worker.debug()

    assert messages_api.statuses() == [200, 200]  # one call for three tool uses, one for the summary
    first = messages_api.requests[0].body
    assert first["model"] == "claude-haiku-4-5"
    assert first["messages"][0]["content"].count("<tool_use index=") == 3
    assert "hunter2" not in str([r.body for r in messages_api.requests])

    for n in (1, 2, 3):
        row = await observation(worker, f"t{n}")
        assert row["compressed"] is True and row["compressor"] == "anthropic"
        assert row["title"] == f"Scripted: Read #{n}"
        assert row["facts"] == ["tool Read ran"] and row["concepts"] == ["how-it-works"]
    (summary,) = (await worker.get("/api/summaries"))["summaries"]
    assert summary["request"] == "scripted request" and summary["nextSteps"] == "scripted next steps"

    (session,) = (await worker.get("/api/sessions"))["sessions"]
    assert session["inputTokens"] == messages_api.input_tokens > 0
    assert session["outputTokens"] == messages_api.output_tokens > 0
    stats = debug["compressor"]
    assert stats["calls"] == 2 and stats["retries"] == 0 and stats["toolUses"] == 3 and stats["summaries"] == 1
    assert stats["inputTokens"] == messages_api.input_tokens


@pytest.mark.parametrize(
    ("fault", "statuses", "retries"),
    [
        (Action(status=429, retry_after=0.1), [429, 200], 1),
        (Action(status=500), [500, 200], 1),
        (Action(status=529), [529, 200], 1),
        (Action(delay=2.5), [200, 200], 1),  # the first reply comes after the client's 1 s timeout
        (Action(cut=True), [200, 200], 1),  # the first reply stops half-way
    ],
    ids=["rate-limited", "server-error", "overloaded", "timeout", "cut-off"],
)
async def test_transient_failures_are_retried(llm_worker: InProcessWorker, messages_api: ScriptedMessagesAPI,
                                              fault: Action, statuses: list[int], retries: int) -> None:
    worker = llm_worker
    messages_api.queue(fault)
    await post_tool(worker, "retry", "r1")
    await worker.wait_idle()
    debug = await worker.debug()
    assert messages_api.statuses() == statuses
    row = await observation(worker, "r1")
    assert row["compressed"] is True and row["title"] == "Scripted: Read #1"
    assert debug["compressor"]["retries"] == retries and debug["compressor"]["failures"] == 0


async def test_malformed_reply_is_kept_raw_and_not_retried(llm_worker: InProcessWorker,
                                                           messages_api: ScriptedMessagesAPI) -> None:
    worker = llm_worker
    messages_api.queue(Action(text="I am not XML at all <observation>broken"))
    await post_tool(worker, "bad", "b1")
    await worker.wait_idle()
    debug = await worker.debug()
    assert messages_api.statuses() == [200]
    row = await observation(worker, "b1")
    assert row["compressed"] is False and row["compressor"] == "anthropic"
    assert row["title"] == "Read b1.py"  # built from the tool data itself
    assert row["inputTokens"] > 0  # the call still cost tokens, and they are counted
    assert debug["compressor"]["unparsedReplies"] == 1 and debug["compressor"]["retries"] == 0


async def test_exhausted_retries_fall_back_to_raw(llm_worker: InProcessWorker,
                                                  messages_api: ScriptedMessagesAPI) -> None:
    worker = llm_worker
    messages_api.queue(Action(status=500), Action(status=500), Action(status=500))
    await post_tool(worker, "down", "x1")
    await worker.wait_idle()
    debug = await worker.debug()
    assert messages_api.statuses() == [500, 500, 500]  # llm_max_attempts = 3, then no more
    row = await observation(worker, "x1")
    assert row["compressed"] is False and row["title"] == "Read x1.py"
    assert debug["compressor"]["failures"] == 1 and debug["compressor"]["rawFallbacks"] == 1


async def test_an_echoed_prompt_loses_nothing(llm_worker: InProcessWorker, messages_api: ScriptedMessagesAPI) -> None:
    # Every request echoes, however a busy machine splits the three tool uses into batches.
    messages_api.queue(Action(echo=True), Action(echo=True), Action(echo=True))
    for n in (1, 2, 3):
        await post_tool(llm_worker, "echo", f"e{n}")
    await llm_worker.wait_idle()
    rows = [await observation(llm_worker, f"e{n}") for n in (1, 2, 3)]
    assert [r["title"] for r in rows] == [f"Read e{n}.py" for n in (1, 2, 3)]  # raw, from the tool data
    assert all(r["compressed"] is False for r in rows)
    assert (await llm_worker.debug())["supervisor"]["crashes"] == 0


async def test_a_refused_connection_falls_back_and_the_breaker_opens_then_closes(
        tmp_path: Path, messages_api: ScriptedMessagesAPI) -> None:
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        nowhere = f"http://127.0.0.1:{closed.getsockname()[1]}"
    # Open for longer than the test: the later tool uses meet it open however slow the machine is.
    settings = {**LLM_SETTINGS, "llm_max_attempts": 1, "batch_size": 1, "llm_breaker_failures": 2,
                "llm_breaker_open_s": 60}
    async with open_worker(tmp_path / "down", compressor=scripted(nowhere), **settings) as worker:
        for n in range(4):
            await post_tool(worker, "down", f"d{n}")
            await worker.wait_idle()
        stats = (await worker.debug())["compressor"]
        rows = [await observation(worker, f"d{n}") for n in range(4)]
    assert stats["failures"] == 2 and stats["breaker"]["state"] == "open" and stats["breaker"]["opened"] == 1
    assert [r["compressor"] for r in rows] == ["anthropic", "anthropic", "offline", "offline"]
    assert [r["compressed"] for r in rows] == [False, False, True, True]  # raw fallbacks, then offline ones

    settings["llm_breaker_open_s"] = 1.0
    clock = HandClock()  # stands still while the three tool uses are stored: the third meets the breaker open
    async with open_worker(tmp_path / "flaky", compressor=scripted(messages_api.url, clock=clock),
                           **settings) as worker:
        messages_api.queue(Action(status=500), Action(status=500))
        for n in range(3):
            await post_tool(worker, "flaky", f"f{n}")
            await worker.wait_idle()
        assert (await worker.debug())["compressor"]["breaker"]["state"] == "open"
        clock.advance(1.1)  # half-open: the next batch is a trial call, which succeeds
        await post_tool(worker, "flaky", "f3")
        await worker.wait_idle()
        stats = (await worker.debug())["compressor"]
        assert stats["breaker"]["state"] == "closed" and stats["offlineFallbacks"] == 1
        assert (await observation(worker, "f3"))["title"] == "Scripted: Read #1"
    assert messages_api.statuses() == [500, 500, 200]  # the open breaker saved a call


UNREADABLE = [  # 2xx replies the SDK cannot read, or messages that are not one: none may crash the session's
    # actor, which would retry the same call at once until the session was failed
    Action(body=b"<html>gateway</html>", content_type="text/html"),  # a proxy's or a captive portal's page
    Action(body=b'{"id": "msg_x", "type": "mess'),
    Action(drop=("content",)),
    Action(drop=("usage",)),
]


async def test_an_unreadable_reply_is_a_failure_the_breaker_counts_not_a_crash(
        tmp_path: Path, messages_api: ScriptedMessagesAPI) -> None:
    # Open for 0.8 s (1.6 s once reopened) on a clock that moves only when the test moves it: the fifth
    # tool use and the look at the reopened breaker come while it is open, however busy the machine.
    settings = {**LLM_SETTINGS, "batch_size": 1, "llm_breaker_failures": 4, "llm_breaker_open_s": 0.8}
    clock = HandClock()
    async with open_worker(tmp_path / "data", compressor=scripted(messages_api.url, clock=clock),
                           **settings) as worker:
        messages_api.queue(*UNREADABLE)
        for n in range(len(UNREADABLE) + 1):
            await post_tool(worker, "odd", f"u{n}")
            await worker.wait_idle()
        debug = await worker.debug()
        rows = [await observation(worker, f"u{n}") for n in range(len(UNREADABLE) + 1)]
        # The breaker opened on the fourth; once half-open, its trial call meets another
        # unreadable reply: it opens again -- it does not stay half-open, letting nothing through.
        clock.advance(0.9)
        messages_api.queue(UNREADABLE[0])
        await post_tool(worker, "odd", "t1")
        await worker.wait_idle()
        reopened = (await worker.debug())["compressor"]["breaker"]
        clock.advance(1.7)  # reopened for twice as long
        await post_tool(worker, "odd", "t2")  # the model answers again: calls go through
        await worker.wait_idle()
        closed = (await worker.debug())["compressor"]
        assert (await observation(worker, "t2"))["compressed"] is True
    assert debug["supervisor"]["crashes"] == 0 and debug["journal"]["parked"] == 0
    assert [r["compressed"] for r in rows] == [False, False, False, False, True]  # raw, then offline
    assert [r["compressor"] for r in rows[:4]] == ["anthropic"] * 4 and rows[4]["compressor"] == "offline"
    compressor = debug["compressor"]
    assert compressor["failures"] == 4 and compressor["retries"] == 0  # what answered would answer the same
    assert compressor["breaker"]["state"] == "open"
    assert compressor["budget"]["usedToday"] > 0  # the reply without usage is counted at an estimate
    assert (reopened["state"], reopened["opened"], reopened["openForSeconds"]) == ("open", 2, 1.6)
    assert closed["breaker"]["state"] == "closed" and closed["failures"] == 5
    assert len(messages_api.requests) == 6  # one call each, and none while open


def message_body(text: str, usage: dict[str, object]) -> bytes:
    """A Messages API reply of ``text`` with ``usage`` as it is (JSON escapes a lone surrogate as ``\\ud800``)."""
    return json.dumps({"id": "msg_hostile", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
                       "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                       "stop_sequence": None, "usage": usage}).encode()


async def test_a_hostile_reply_neither_gives_budget_back_nor_crashes_the_session(
        tmp_path: Path, messages_api: ScriptedMessagesAPI) -> None:
    """Whatever answers at the model's address writes the reply and its usage. A negative count once gave the
    daily budget back (for good: it is stored in the session's row), a count of 10**20 overflowed that row, and
    a lone surrogate in a title or a 5,000-digit index crashed the session's actor until it was failed."""
    block = '<observation index="{}"><type>change</type><title>{}</title></observation>'
    settings = {**LLM_SETTINGS, "batch_size": 1, "llm_daily_token_budget": 10**9}
    async with open_worker(tmp_path / "data", compressor=scripted(messages_api.url), **settings) as worker:
        messages_api.queue(
            Action(body=message_body(block.format(1, "Read h0.py \ud800"), {"input_tokens": -10**12,
                                                                             "output_tokens": 5})),
            Action(body=message_body(block.format("9" * 5000, "Read h1.py"), {"input_tokens": 10**20,
                                                                               "output_tokens": 10**20})),
            Action(body=message_body(block.format(1, "Read h2.py"), {"input_tokens": 0, "output_tokens": 0})))
        for n in range(3):
            await post_tool(worker, "hostile", f"h{n}")
            await worker.wait_idle()
        debug = await worker.debug()
        rows = [await observation(worker, f"h{n}") for n in range(3)]
        (session,) = (await worker.get("/api/sessions?project=llm"))["sessions"]
    assert debug["supervisor"]["crashes"] == 0 and debug["journal"]["parked"] == 0
    assert [r["title"] for r in rows] == ["Read h0.py ?", "Read h1.py", "Read h2.py"]  # each stored, once
    budget = debug["compressor"]["budget"]
    # Each call counted at the estimate (a quarter of the request's characters), none at what it said.
    assert 3 * 100 < budget["usedToday"] < 3 * 10_000 and budget["leftToday"] < 10**9
    assert 0 < session["inputTokens"] < 30_000, session


async def test_a_secret_the_model_decodes_is_redacted_before_it_is_stored(
        tmp_path: Path, messages_api: ScriptedMessagesAPI) -> None:
    """Ingest cannot see a key held hex-encoded in a tool's output; the model reading it can decode it and write
    it back. What the model wrote goes through the ingest redactor before it is stored."""
    key = "ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5"
    reply = (f'<observation index="1"><type>discovery</type><title>Decoded {key}</title><facts><fact>the token is '
             f'{key}</fact></facts><narrative>It reads {key}.</narrative><files_read><file>/work/llm/{key}.txt</file>'
             f'</files_read></observation>')
    summary = f"<summary><request>Find the token</request><learned>It is {key}</learned></summary>"
    usage = {"input_tokens": 100, "output_tokens": 20}
    async with open_worker(tmp_path / "data", compressor=scripted(messages_api.url),
                           **{**LLM_SETTINGS, "batch_size": 1}) as worker:
        messages_api.queue(Action(body=message_body(reply, usage)), Action(body=message_body(summary, usage)))
        await post_tool(worker, "decoded", "d0")
        await worker.wait_idle()
        assert (await worker.request("POST", "/api/sessions/summarize", {
            "claudeSessionId": "decoded", "last_assistant_message": "Found it."})).status == 202
        await worker.wait_idle()
        stored = await observation(worker, "d0")
        (summarized,) = (await worker.get("/api/summaries?project=llm"))["summaries"]
    assert stored["compressor"] == "anthropic" and summarized["compressor"] == "anthropic"
    assert key not in json.dumps([stored, summarized]) and "[REDACTED:github-token]" in stored["title"]
    assert data_dir_holds(tmp_path / "data", key.encode()) == []


def data_dir_holds(data_dir: Path, needle: bytes) -> list[str]:
    return [str(path) for path in data_dir.rglob("*") if path.is_file() and needle in path.read_bytes()]


async def test_token_budgets_fall_back_to_offline_and_say_so(tmp_path: Path, messages_api: ScriptedMessagesAPI,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    settings = {**LLM_SETTINGS, "batch_size": 1, "llm_daily_token_budget": 1}
    async with open_worker(tmp_path / "daily", compressor=scripted(messages_api.url), **settings) as worker:
        for n in range(3):
            await post_tool(worker, "daily", f"b{n}")
            await worker.wait_idle()
        budget = (await worker.debug())["compressor"]["budget"]
        rows = [await observation(worker, f"b{n}") for n in range(3)]
    assert [r["compressor"] for r in rows] == ["anthropic", "offline", "offline"]
    assert budget["leftToday"] == 0 and budget["usedToday"] > 1 and budget["refusedCalls"] == 2
    assert len(messages_api.requests) == 1
    assert sum("daily token budget" in r.getMessage() for r in caplog.records) == 1  # said once, not per batch

    settings = {**LLM_SETTINGS, "batch_size": 1, "llm_session_token_cap": 1}
    async with open_worker(tmp_path / "capped", compressor=scripted(messages_api.url), **settings) as worker:
        for session in ("one", "one", "two"):
            await post_tool(worker, session, f"{session}-{len(messages_api.requests)}")
            await worker.wait_idle()
        budget = (await worker.debug())["compressor"]["budget"]
    assert budget["sessionsCapped"] == 1 and len(messages_api.requests) == 3  # "two" had its own cap


def test_what_a_request_carries_is_bounded_whatever_the_prompts() -> None:
    # Prompts of 67,000 characters: uncut, each batch would carry the prompt whole (66 KB for a
    # one-line echo) and each summary every prompt (+4 KB a prompt).
    long_prompt = "please refactor " + "x" * 67_000
    context = SessionContext("s", "p", prompt=long_prompt)
    echo = ObservationEvent(claude_session_id="s", project="p", tool_name="Bash", tool_input={"command": "echo ok"}, tool_response="ok")
    assert len(observation_request(context, [echo])) < 5_000
    prompts = [f"prompt {n} " + "y" * 5_000 for n in range(1, 41)]
    request = summary_request(context, SummarizeEvent(claude_session_id="s", project="p"), SummaryInputs(prompts, []))
    assert len(request) < 13_000
    assert "1. prompt 1 " in request and "40. prompt 40 " in request and "prompt 39 " not in request
    assert "…[38 prompt(s) elided]…" in request  # each cut to ~4,000: the first and the latest fit
    few = summary_request(context, SummarizeEvent(claude_session_id="s", project="p"), SummaryInputs(["fix it", "and test it"], []))
    assert "1. fix it\n2. and test it" in few and "elided" not in few


def test_a_trial_call_that_ends_without_an_outcome_lets_the_next_one_through() -> None:
    now = [0.0]
    breaker = CircuitBreaker(threshold=1, open_s=1.0, max_open_s=4.0, clock=lambda: now[0])
    assert breaker.allow()
    breaker.failed()
    assert breaker.state is BreakerState.OPEN and not breaker.allow()
    now[0] = 1.5
    assert breaker.allow() and not breaker.allow()  # half-open: one trial at a time
    breaker.abandoned()  # cancelled: it neither closes nor opens the breaker...
    assert breaker.state is BreakerState.HALF_OPEN and breaker.allow()  # ...and does not hold the next trial back
    breaker.succeeded()
    assert breaker.state is BreakerState.CLOSED and breaker.allow()
