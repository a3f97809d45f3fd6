"""The openai-compatible compressor: its real HTTP client against a local scripted chat completions
server (``sessionmem.testing.chat_completions_api``), chosen by the settings as a user chooses it,
inside the in-process worker -- observations and summaries stored, retries honouring Retry-After, a
rate limit and a stalled model opening the circuit breaker without losing an event, token budgets,
malformed replies, a server that reports no usage, and an API key that never reaches a log."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from sessionmem.compress.base import Compressor
from sessionmem.compress.choice import choose_backend, choose_compressor
from sessionmem.settings import Settings, SettingsError, load_settings, plain_http_warnings
from sessionmem.testing.chat_completions_api import ScriptedChatCompletionsAPI
from sessionmem.testing.harness import InProcessWorker, open_worker
from sessionmem.testing.messages_api import Action
from sessionmem.testing.worker_process import WorkerProcess

from .conftest import data_dir_contains
from .test_anthropic_compressor import post_tool

MODEL = "qwen2.5-coder:7b"
KEY = "sk-local-5f1c0e9a7b3d4c2e8f6a1b0c9d8e7f6a"  # a key that must never be logged or stored
LLM_SETTINGS = {"openai_model": MODEL, "llm_timeout_s": 1,
                "llm_backoff_cap_s": 0.2, "llm_max_attempts": 3, "batch_size": 3, "batch_quiet_s": 0.1}


@pytest.fixture
def chat_api() -> Iterator[ScriptedChatCompletionsAPI]:
    with ScriptedChatCompletionsAPI() as api:
        yield api


def worker_on(data_dir: Path, api: ScriptedChatCompletionsAPI, **settings: Any) -> Any:
    """The worker with the compressor ``compressor = "openai-compatible"`` chooses (``choose_compressor``,
    as ``serve`` does; the harness's own ``compressor`` setting is the offline one)."""
    def chosen(loaded: Settings) -> Compressor:
        return choose_compressor(dataclasses.replace(loaded, compressor="openai-compatible"))
    return open_worker(data_dir, compressor=chosen, **{**LLM_SETTINGS, "openai_base_url": api.url, **settings})


@pytest.fixture
async def llm_worker(tmp_path: Path, chat_api: ScriptedChatCompletionsAPI) -> AsyncIterator[InProcessWorker]:
    async with worker_on(tmp_path / "data", chat_api) as worker:
        yield worker


async def observations(worker: InProcessWorker) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = (await worker.get("/api/observations?limit=500"))["observations"]
    return rows


async def observation(worker: InProcessWorker, tool_use_id: str) -> dict[str, Any]:
    return next(r for r in await observations(worker) if r["toolUseId"] == tool_use_id)


async def stored_exactly_once(worker: InProcessWorker, tool_use_ids: list[str]) -> list[dict[str, Any]]:
    rows = await observations(worker)
    counts = Counter(r["toolUseId"] for r in rows)
    assert {tool_use_id: counts[tool_use_id] for tool_use_id in tool_use_ids} == dict.fromkeys(tool_use_ids, 1)
    assert len(rows) == len(tool_use_ids)
    by_id = {r["toolUseId"]: r for r in rows}
    return [by_id[tool_use_id] for tool_use_id in tool_use_ids]


async def test_observations_and_a_summary_come_back_from_the_model_and_are_stored(
        tmp_path: Path, chat_api: ScriptedChatCompletionsAPI) -> None:
    # A quiet time no loaded machine reaches between two posts: the batch closes because it is full.
    async with worker_on(tmp_path / "data", chat_api, batch_quiet_s=60, openai_api_key=KEY) as worker:
        assert (await worker.get("/api/health"))["compressor"] == "openai-compatible"
        await worker.post("/api/sessions/init", {"claudeSessionId": "llm", "cwd": "/work/llm",
                                                 "prompt": "explain the module <private>hunter2</private>"})
        for n in (1, 2, 3):
            await post_tool(worker, "llm", f"t{n}")
        await worker.post("/api/sessions/summarize", {"claudeSessionId": "llm", "last_assistant_message": "done"})
        await worker.wait_idle()
        debug = await worker.debug()
        rows = await stored_exactly_once(worker, ["t1", "t2", "t3"])
        (summary,) = (await worker.get("/api/summaries"))["summaries"]
        (session,) = (await worker.get("/api/sessions"))["sessions"]

    assert chat_api.statuses() == [200, 200]  # one call for three tool uses, one for the summary
    first = chat_api.requests[0]
    assert first.body["model"] == MODEL and first.body["stream"] is False
    assert [m["role"] for m in first.body["messages"]] == ["system", "user"]
    assert "<observation index=" in first.body["messages"][0]["content"]  # the anthropic backend's prompt
    assert first.body["messages"][1]["content"].count("<tool_use index=") == 3
    assert first.headers["authorization"] == f"Bearer {KEY}"
    assert "hunter2" not in str([r.body for r in chat_api.requests])

    for n, row in enumerate(rows, 1):
        assert row["compressed"] is True and row["compressor"] == "openai-compatible"
        assert row["title"] == f"Scripted: Read #{n}" and row["facts"] == ["tool Read ran"]
    assert summary["request"] == "scripted request" and summary["nextSteps"] == "scripted next steps"
    assert session["inputTokens"] == chat_api.input_tokens > 0  # as the server's `usage` reported them
    assert session["outputTokens"] == chat_api.output_tokens > 0
    stats = debug["compressor"]
    assert stats["backend"] == "openai-compatible" and stats["model"] == MODEL and stats["clientReady"] is True
    assert stats["calls"] == 2 and stats["retries"] == 0 and stats["toolUses"] == 3 and stats["summaries"] == 1
    assert stats["inputTokens"] == chat_api.input_tokens


async def test_a_server_that_reports_no_usage_counts_as_unknown_not_estimated(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    with ScriptedChatCompletionsAPI(usage=False) as api:
        async with worker_on(tmp_path / "data", api, batch_size=1) as worker:
            for n in range(2):
                await post_tool(worker, "nousage", f"n{n}")
                await worker.wait_idle()
            rows = await stored_exactly_once(worker, ["n0", "n1"])
            stats = (await worker.debug())["compressor"]
    assert [r["compressed"] for r in rows] == [True, True]  # the text is used...
    assert [(r["inputTokens"], r["outputTokens"]) for r in rows] == [(0, 0), (0, 0)]  # ...its cost is unknown
    assert stats["inputTokens"] == 0 and stats["budget"]["usedToday"] == 0 and stats["failures"] == 0
    assert sum("reports no token usage" in r.getMessage() for r in caplog.records) == 1  # said once


@pytest.mark.parametrize(
    ("fault", "statuses"),
    [
        (Action(status=429, retry_after=0.1), [429, 200]),
        (Action(status=500), [500, 200]),
        (Action(status=503), [503, 200]),
        (Action(delay=2.5), [200, 200]),  # the first reply comes after the client's 1 s timeout
        (Action(cut=True), [200, 200]),  # the first reply stops half-way
    ],
    ids=["rate-limited", "server-error", "unavailable", "timeout", "cut-off"],
)
async def test_transient_failures_are_retried(llm_worker: InProcessWorker, chat_api: ScriptedChatCompletionsAPI,
                                              fault: Action, statuses: list[int]) -> None:
    chat_api.queue(fault)
    await post_tool(llm_worker, "retry", "r1")
    await llm_worker.wait_idle()
    stats = (await llm_worker.debug())["compressor"]
    assert chat_api.statuses() == statuses
    (row,) = await stored_exactly_once(llm_worker, ["r1"])
    assert row["compressed"] is True and row["title"] == "Scripted: Read #1"
    assert stats["retries"] == 1 and stats["failures"] == 0


# Long enough that a busy machine posts the tool uses that follow while the breaker is still open.
OPEN_S = 3.0


async def wait_half_open(worker: InProcessWorker) -> None:
    with trio.fail_after(OPEN_S + 10):
        while (await worker.debug())["compressor"]["breaker"]["state"] == "open":
            await trio.sleep(0.1)


async def test_a_rate_limit_opens_the_breaker_and_loses_nothing(tmp_path: Path,
                                                                chat_api: ScriptedChatCompletionsAPI) -> None:
    # Two calls answered 429 (Retry-After: 0.3 s) exhaust the batch's attempts: the breaker opens;
    # the tool uses that follow go to the offline compressor; once it is half-open, a trial call
    # succeeds and the model compresses again. Every tool use is stored exactly once.
    settings = {"batch_size": 1, "llm_max_attempts": 2, "llm_backoff_cap_s": 5, "llm_breaker_failures": 1,
                "llm_breaker_open_s": OPEN_S}
    ids = [f"q{n}" for n in range(5)]
    async with worker_on(tmp_path / "data", chat_api, **settings) as worker:
        chat_api.queue(Action(status=429, retry_after=0.3), Action(status=429, retry_after=0.3))
        for tool_use_id in ids[:4]:
            await post_tool(worker, "limited", tool_use_id)
            await worker.wait_idle()
        opened = (await worker.debug())["compressor"]
        await wait_half_open(worker)  # the next batch is a trial call
        await post_tool(worker, "limited", ids[4])
        await worker.wait_idle()
        closed = (await worker.debug())["compressor"]
        rows = await stored_exactly_once(worker, ids)

    assert chat_api.statuses() == [429, 429, 200]  # none while the breaker was open
    first, second = chat_api.requests[:2]
    assert second.at - first.at >= 0.3  # Retry-After was honoured
    assert opened["breaker"]["state"] == "open" and opened["failures"] == 1 and opened["offlineFallbacks"] == 3
    assert [r["compressor"] for r in rows] == ["openai-compatible"] + ["offline"] * 3 + ["openai-compatible"]
    assert [r["compressed"] for r in rows] == [False, True, True, True, True]  # raw, offline, then the model
    assert rows[4]["title"] == "Scripted: Read #1"
    assert closed["breaker"]["state"] == "closed" and closed["breaker"]["opened"] == 1


async def test_a_stalled_model_falls_back_offline_and_nothing_is_lost(tmp_path: Path,
                                                                      chat_api: ScriptedChatCompletionsAPI) -> None:
    settings = {"batch_size": 1, "llm_max_attempts": 1, "llm_breaker_failures": 1, "llm_breaker_open_s": OPEN_S}
    ids = [f"s{n}" for n in range(4)]
    async with worker_on(tmp_path / "data", chat_api, **settings) as worker:
        chat_api.stall()
        try:
            for tool_use_id in ids[:3]:
                await post_tool(worker, "stalled", tool_use_id)
                await worker.wait_idle()
            stalled = (await worker.debug())["compressor"]
        finally:
            chat_api.resume()
        await wait_half_open(worker)
        await post_tool(worker, "stalled", ids[3])
        await worker.wait_idle()
        rows = await stored_exactly_once(worker, ids)
        debug = await worker.debug()
    assert stalled["failures"] == 1 and stalled["breaker"]["state"] == "open"  # the call timed out
    assert [r["compressor"] for r in rows] == ["openai-compatible", "offline", "offline", "openai-compatible"]
    assert rows[3]["compressed"] is True and rows[3]["title"] == "Scripted: Read #1"
    assert debug["supervisor"]["crashes"] == 0 and debug["journal"]["parked"] == 0


async def test_token_budgets_bound_what_the_model_is_sent(tmp_path: Path, chat_api: ScriptedChatCompletionsAPI,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    async with worker_on(tmp_path / "daily", chat_api, batch_size=1, llm_daily_token_budget=1) as worker:
        for n in range(3):
            await post_tool(worker, "daily", f"b{n}")
            await worker.wait_idle()
        budget = (await worker.debug())["compressor"]["budget"]
        rows = await stored_exactly_once(worker, [f"b{n}" for n in range(3)])
    assert [r["compressor"] for r in rows] == ["openai-compatible", "offline", "offline"]
    assert budget["leftToday"] == 0 and budget["usedToday"] == chat_api.input_tokens + chat_api.output_tokens
    assert budget["refusedCalls"] == 2 and len(chat_api.requests) == 1
    assert sum("daily token budget" in r.getMessage() for r in caplog.records) == 1

    async with worker_on(tmp_path / "capped", chat_api, batch_size=1, llm_session_token_cap=1) as worker:
        for session in ("one", "one", "two"):
            await post_tool(worker, session, f"{session}-{len(chat_api.requests)}")
            await worker.wait_idle()
        budget = (await worker.debug())["compressor"]["budget"]
    assert budget["sessionsCapped"] == 1 and len(chat_api.requests) == 3  # "two" had its own cap


MALFORMED = [  # each a whole batch of three tool uses, kept raw; the next batch is the model's again
    Action(text="I am not XML at all <observation>broken"),  # a reply that does not parse
    Action(body=b"<html>gateway</html>", content_type="text/html"),  # a proxy's page
    Action(body=b'{"id": "chatcmpl-x", "choi'),  # broken JSON
    Action(drop=("choices",)),  # JSON, but no message
]


@pytest.mark.parametrize("fault", MALFORMED, ids=["not-xml", "html", "broken-json", "no-choices"])
async def test_a_malformed_reply_falls_back_for_its_batch_only(tmp_path: Path, chat_api: ScriptedChatCompletionsAPI,
                                                               fault: Action) -> None:
    ids = [f"m{n}" for n in range(6)]
    async with worker_on(tmp_path / "data", chat_api, batch_quiet_s=60) as worker:  # batches close when full
        chat_api.queue(fault)
        for tool_use_id in ids:
            await post_tool(worker, "malformed", tool_use_id)
        await worker.wait_idle()
        rows = await stored_exactly_once(worker, ids)
        debug = await worker.debug()
    assert chat_api.statuses() == [200, 200]  # not retried: what answered would answer the same
    assert [r["compressed"] for r in rows] == [False] * 3 + [True] * 3
    assert all(r["compressor"] == "openai-compatible" for r in rows)
    assert [r["title"] for r in rows[:3]] == [f"Read m{n}.py" for n in range(3)]  # built from the tool data
    assert [r["title"] for r in rows[3:]] == [f"Scripted: Read #{n}" for n in (1, 2, 3)]
    stats = debug["compressor"]
    assert stats["rawFallbacks"] == 3 and stats["retries"] == 0
    assert stats["unparsedReplies"] + stats["failures"] == 1
    assert debug["supervisor"]["crashes"] == 0


async def test_the_api_key_never_reaches_a_log_the_database_or_debug(tmp_path: Path,
                                                                     chat_api: ScriptedChatCompletionsAPI,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)  # the HTTP client's own debug logs too
    quoted = json.dumps({"error": {"message": f"Incorrect API key provided: {KEY}"}}).encode()
    settings = {"batch_size": 1, "llm_max_attempts": 2, "openai_api_key": KEY}
    async with worker_on(tmp_path / "data", chat_api, **settings) as worker:
        chat_api.queue(Action(status=401, body=quoted), Action(status=500), Action(status=500),
                       Action(text="not xml"))
        for n in range(4):
            await post_tool(worker, "secret", f"k{n}")
            await worker.wait_idle()
        debug = await worker.debug()
        await stored_exactly_once(worker, [f"k{n}" for n in range(4)])
    assert chat_api.statuses() == [401, 500, 500, 200, 200]
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in chat_api.requests)  # it was sent...
    logged = "\n".join(f"{r.name} {r.getMessage()}" for r in caplog.records)
    assert "HTTP 401: {\"error\": {\"message\": \"Incorrect API key provided: [api key]\"}}" in logged
    assert KEY not in logged and KEY[-12:] not in logged  # ...and never written anywhere
    assert KEY not in json.dumps(debug)
    assert data_dir_contains(tmp_path / "data", KEY.encode()) == []
    assert KEY not in repr(load_settings({"SESSIONMEM_OPENAI_API_KEY": KEY}, data_dir=str(tmp_path / "other")))


def test_the_settings_choose_it_and_say_what_is_missing(tmp_path: Path) -> None:
    env = {"SESSIONMEM_COMPRESSOR": "openai-compatible", "SESSIONMEM_OPENAI_MODEL": MODEL,
           "SESSIONMEM_OPENAI_BASE_URL": "http://127.0.0.1:1234/v1", "SESSIONMEM_OPENAI_API_KEY": KEY}
    settings = load_settings(env, data_dir=str(tmp_path))
    assert choose_backend(settings).backend == "openai-compatible"
    assert (settings.openai_model, settings.openai_base_url, settings.openai_api_key) == (
        MODEL, "http://127.0.0.1:1234/v1", KEY)
    assert choose_compressor(settings).statistics().model == MODEL
    with pytest.raises(SettingsError, match="openai_model"):
        load_settings({**env, "SESSIONMEM_OPENAI_MODEL": ""}, data_dir=str(tmp_path))
    with pytest.raises(SettingsError, match="openai_base_url"):
        load_settings({**env, "SESSIONMEM_OPENAI_BASE_URL": "localhost:11434"}, data_dir=str(tmp_path))
    assert load_settings({}, data_dir=str(tmp_path)).openai_base_url == "http://127.0.0.1:11434/v1"


def test_choosing_it_imports_no_sdk_and_no_http_client_until_warm_up(tmp_path: Path) -> None:
    # The offline worker never pays for an LLM client, and this backend never loads the anthropic SDK.
    code = (
        "import sys, trio\n"
        "from sessionmem.settings import load_settings\n"
        "from sessionmem.compress.choice import choose_compressor\n"
        f"s = load_settings({{'SESSIONMEM_COMPRESSOR': 'openai-compatible', 'SESSIONMEM_OPENAI_MODEL': 'm'}},"
        f" data_dir={str(tmp_path)!r})\n"
        "c = choose_compressor(s)\n"
        "before = sorted(m for m in ('anthropic', 'httpx2') if m in sys.modules)\n"
        "async def main():\n    await c.warm_up()\n    await c.aclose()\n"
        "trio.run(main)\n"
        "print(before, 'httpx2' in sys.modules, 'anthropic' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": ""}, check=True).stdout
    assert out.split() == ["[]", "True", "False"]


@pytest.mark.slow
def test_a_real_worker_chosen_by_the_environment_logs_no_key(worker_factory: Callable[..., WorkerProcess],
                                                             chat_api: ScriptedChatCompletionsAPI) -> None:
    # `sessionmem serve` as a user runs it: the environment chooses the backend, the worker's own log file.
    quoted = json.dumps({"error": {"message": f"Incorrect API key provided: {KEY}"}}).encode()
    chat_api.queue(Action(status=401, body=quoted))
    worker = worker_factory(SESSIONMEM_COMPRESSOR="openai-compatible", SESSIONMEM_OPENAI_MODEL=MODEL,
                            SESSIONMEM_OPENAI_BASE_URL=chat_api.url, SESSIONMEM_OPENAI_API_KEY=KEY,
                            SESSIONMEM_EMBEDDER="none", SESSIONMEM_BATCH_SIZE=1, SESSIONMEM_BATCH_QUIET=0.05)
    for n in range(2):
        worker.post("/api/sessions/observations", {
            "claudeSessionId": "process", "cwd": "/work/llm", "tool_name": "Read", "tool_use_id": f"p{n}",
            "tool_input": {"file_path": f"/work/llm/p{n}.py"}, "tool_response": "print('hi')\n"})
        worker.wait_idle(timeout=60)
    debug = worker.get("/debug")
    worker.stop()
    assert chat_api.statuses() == [401, 200]
    assert debug["compressor"]["backend"] == "openai-compatible" and debug["compressor"]["model"] == MODEL
    log = (worker.data_dir / "worker.log").read_text()
    assert "compressor openai-compatible" in log and "HTTP 401" in log and "[api key]" in log
    assert data_dir_contains(worker.data_dir, KEY.encode()) == []  # the log, the database, the state files


def test_doctor_names_the_local_model(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONMEM_", "ANTHROPIC_"))}
    env.update(SESSIONMEM_COMPRESSOR="openai-compatible", SESSIONMEM_OPENAI_MODEL="qwen2.5-coder:7b")
    doctor = subprocess.run([sys.executable, "-m", "sessionmem", "doctor", "--data-dir", str(tmp_path / "data")],
                            capture_output=True, text=True, env=env, timeout=120)
    assert ("compressor: openai-compatible (set: compressor = openai-compatible; requests to 127.0.0.1:11434, "
            "credential: none, model qwen2.5-coder:7b)") in doctor.stdout, doctor.stdout


def test_a_key_sent_in_clear_to_another_host_is_refused_at_start(tmp_path: Path) -> None:
    env = {"SESSIONMEM_COMPRESSOR": "openai-compatible", "SESSIONMEM_OPENAI_MODEL": MODEL,
           "SESSIONMEM_OPENAI_BASE_URL": "http://192.168.1.20:11434/v1"}
    with pytest.raises(SettingsError, match=r"plain http:// to 192\.168\.1\.20.*llm_allow_plain_http"):
        load_settings({**env, "SESSIONMEM_OPENAI_API_KEY": KEY}, data_dir=str(tmp_path))
    # The user's explicit choice starts, and is warned about; so is no key over the same network.
    allowed = load_settings({**env, "SESSIONMEM_OPENAI_API_KEY": KEY, "SESSIONMEM_LLM_ALLOW_PLAIN_HTTP": "1"},
                            data_dir=str(tmp_path))
    assert plain_http_warnings(allowed, choose_backend(allowed).backend) == ["openai_base_url is plain http:// to 192.168.1.20: the API key crosses "
                                            "the network in clear"]
    keyless = load_settings(env, data_dir=str(tmp_path))
    assert plain_http_warnings(keyless, choose_backend(keyless).backend) == ["openai_base_url is plain http:// to 192.168.1.20: no key, but every "
                                            "tool use crosses the network in clear"]
    # This machine, and TLS, are fine with a key.
    for url in ("http://127.0.0.1:11434/v1", "http://localhost:1234/v1", "http://[::1]:8000/v1",
                "https://models.example/v1"):
        fine = load_settings({**env, "SESSIONMEM_OPENAI_BASE_URL": url, "SESSIONMEM_OPENAI_API_KEY": KEY},
                             data_dir=str(tmp_path))
        assert plain_http_warnings(fine, choose_backend(fine).backend) == []


@pytest.mark.slow
def test_a_worker_with_a_key_in_clear_does_not_start_and_says_why(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONMEM_", "ANTHROPIC_"))}
    env.update(SESSIONMEM_COMPRESSOR="openai-compatible", SESSIONMEM_OPENAI_MODEL=MODEL, SESSIONMEM_PORT="0",
               SESSIONMEM_OPENAI_BASE_URL="http://10.1.2.3:8000/v1", SESSIONMEM_OPENAI_API_KEY=KEY,
               SESSIONMEM_DATA_DIR=str(tmp_path / "data"))
    serve = subprocess.run([sys.executable, "-m", "sessionmem", "serve"], capture_output=True, text=True, env=env,
                           timeout=120, stdin=subprocess.DEVNULL)
    assert serve.returncode != 0
    assert "openai_base_url is plain http:// to 10.1.2.3" in serve.stderr and KEY not in serve.stderr
