"""The benchmark scenarios. Each starts its own worker on a fresh data dir and returns a dict of figures.

- ``replay``: recorded transcripts replayed as hook events (``--via http`` or ``--via hooks``),
  with lost/duplicated events, accept latency, accept->stored latency, LLM use.
- ``throughput``: closed-loop durable accept rate vs a bare Quart-Trio endpoint, same run.
- ``openloop``: accept latency at a fixed offered load spread over many sessions.
- ``context``: ``GET /api/context/inject`` latency for a project with many observations.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import apsw
import loadgen
import trio
from sampler import ProcessSampler, WalWatcher, data_dir_bytes
from tqdm import tqdm

from sessionmem.protocol.project import project_of
from sessionmem.protocol.requests import api_call, clean_body, encoded_call
from sessionmem.replay.convert import ReplaySession
from sessionmem.testing.messages_api import ScriptedMessagesAPI
from sessionmem.testing.worker_process import WorkerProcess, start_worker

REPO = Path(__file__).resolve().parent.parent
HOOK_ENTRY = REPO / "hooks" / "entry.py"
TOOL_STAGES = ("PostToolUse", "PostToolUseFailure")


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)

    return {"n": len(ordered), "p50": round(statistics.median(ordered), 3), "p95": at(0.95), "p99": at(0.99),
            "max": round(ordered[-1], 3), "mean": round(statistics.fmean(ordered), 3)}


@dataclass
class Context:
    """What every scenario needs: options, the converted corpus, where to write."""

    out: Path
    sessions: list[ReplaySession]
    llm: str = "offline"  # offline | scripted
    llm_delay: float = 0.2
    plots: dict[str, Any] = field(default_factory=dict)  # raw series for report.py
    # Per worker (named as its scenario): bytes of its data dir when the scenario's load
    # was done (the worker still running) and after it stopped, and the WAL's peak.
    disk: dict[str, dict[str, Any]] = field(default_factory=dict)
    worker_env: dict[str, str] = field(default_factory=dict)  # --worker-env: over the scenario's own settings

    @contextmanager
    def worker(self, name: str, **env: Any) -> Iterator[tuple[WorkerProcess, ScriptedMessagesAPI | None]]:
        api = ScriptedMessagesAPI(delay=self.llm_delay) if self.llm == "scripted" else None
        # The worker as shipped: default batching and limits unless a scenario says otherwise.
        settings = {"SESSIONMEM_COMPRESSOR": "offline"}
        if api is not None:
            settings.update(SESSIONMEM_COMPRESSOR="anthropic", SESSIONMEM_ANTHROPIC_API_KEY="sk-bench-dummy",
                            SESSIONMEM_ANTHROPIC_BASE_URL=api.url, SESSIONMEM_LLM_CONCURRENCY="4")
        settings.update({k: str(v) for k, v in env.items()})
        settings.update(self.worker_env)
        worker = start_worker(self.out / "data" / name, env=settings, timeout=60)
        try:
            with WalWatcher(worker.data_dir) as wal:
                yield worker, api
                at_end = data_dir_bytes(worker.data_dir)
        finally:
            worker.stop()
            if api is not None:
                api.close()
        self.disk[name] = {"at_end": at_end, "after_stop": data_dir_bytes(worker.data_dir),
                           "wal_peak": max(wal.peak_bytes, at_end["wal"])}


def _debug_summary(worker: WorkerProcess) -> dict[str, Any]:
    debug = worker.get("/debug")
    return {
        "peak_mailbox_depth": debug["sessions"]["peakDepth"],
        "actor_restarts": debug["supervisor"]["restarts"],
        "actor_crashes": debug["supervisor"]["crashes"],
        "actors": debug["sessions"]["known"],
        "writer": debug["store"]["writer"],
        "checkpointer": debug["store"]["checkpointer"],
        "gathered_reads": debug["store"]["gatheredReads"],  # file recall: reads, thread trips
        "file_recall_cache": debug["store"]["fileRecallCache"],  # file recall: answers kept, hits, misses
        "compressor": debug["compressor"],
        "connections": debug["connections"],  # accepted, evicted at the cap, refused, peak
        "gc": debug["gc"]["generations"],
        "loop": debug["loop"],  # how late the worker's Trio thread woke: p50/p99 of the last minute, max, stalls
    }


def _sampled(sampler: ProcessSampler) -> dict[str, Any]:
    cpu = [s[2] for s in sampler.samples]
    return {"peak_rss_mb": round(sampler.peak_rss_mb, 1), "cpu_seconds": round(sampler.cpu_seconds, 2),
            "peak_cpu_percent": round(max(cpu, default=0.0), 1)}


# -- replay ---------------------------------------------------------------------------------


async def _replay_http(worker: WorkerProcess, sessions: list[ReplaySession], *, concurrency: int,
                       speed: float | None, rate: float | None, bar: tqdm) -> dict[str, Any]:
    accept_ms: dict[str, list[float]] = {}
    accepted_tool_uses: set[tuple[str, str]] = set()
    statuses: dict[int, int] = {}
    queue = list(reversed(sessions))
    start = trio.current_time()
    sent = 0

    async def one_session(session: ReplaySession) -> None:
        nonlocal sent
        project = project_of(session.cwd)
        connection = await loadgen.Connection.open("127.0.0.1", worker.port)
        previous_at = None
        try:
            for event in session.events:
                if speed is not None and previous_at is not None:
                    await trio.sleep(min(max(event.at - previous_at, 0) / speed, 30.0))
                previous_at = event.at
                if rate is not None:
                    slot = start + sent / rate
                    sent += 1
                    await trio.sleep_until(slot)
                request = encoded_call(event.payload, project=project)
                bar.update(1)
                if request is None:
                    continue
                method, path, body = request
                raw = loadgen.encode_post("127.0.0.1", worker.port, path, body, worker.token) if body is not None \
                    else loadgen.encode_get("127.0.0.1", worker.port, path, worker.token)
                began = time.perf_counter()
                status, reply = await connection.roundtrip(raw)
                while status == 503:  # backpressure: retry like a hook would
                    await trio.sleep(0.05)
                    began = time.perf_counter()
                    status, reply = await connection.roundtrip(raw)
                accept_ms.setdefault(event.stage, []).append((time.perf_counter() - began) * 1000)
                statuses[status] = statuses.get(status, 0) + 1
                if event.stage in TOOL_STAGES and status == 202 and json.loads(reply).get("status") == "accepted":
                    accepted_tool_uses.add((session.session_id, event.payload["tool_use_id"]))
        finally:
            await connection.aclose()

    async def runner() -> None:
        while queue:
            await one_session(queue.pop())

    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(runner)
    return {"accept_ms": accept_ms, "accepted": accepted_tool_uses, "statuses": statuses}


def _replay_hooks(worker: WorkerProcess, sessions: list[ReplaySession], *, concurrency: int,
                  bar: tqdm) -> dict[str, Any]:
    """Spawn the real hook process for every event, as Claude Code does (sessions in parallel)."""
    from concurrent.futures import ThreadPoolExecutor

    wall_ms: dict[str, list[float]] = {}
    failures = 0
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONMEM_", "ANTHROPIC_"))}
    env["SESSIONMEM_DATA_DIR"] = str(worker.data_dir)
    command = [sys.executable, "-S", str(HOOK_ENTRY)]

    def one_session(session: ReplaySession) -> None:
        nonlocal failures
        for event in session.events:
            payload = json.dumps(event.payload).encode()
            began = time.perf_counter()
            result = subprocess.run([*command, event.stage], input=payload, env=env, capture_output=True)
            elapsed = (time.perf_counter() - began) * 1000
            wall_ms.setdefault(event.stage, []).append(elapsed)
            failures += result.returncode != 0
            bar.update(1)

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(one_session, sessions))
    accepted = {(s.session_id, e.payload["tool_use_id"]) for s in sessions for e in s.events
                if e.stage in TOOL_STAGES and e.payload["tool_name"] not in _skip_tools()}
    return {"wall_ms": wall_ms, "accepted": accepted, "failures": failures}


def _skip_tools() -> tuple[str, ...]:
    from sessionmem.settings import DEFAULT_SKIP_TOOLS

    return DEFAULT_SKIP_TOOLS


def _stored(worker: WorkerProcess) -> tuple[dict[tuple[str, str], int], list[float]]:
    """(session, tool_use_id) -> rows, and accept->stored seconds of every observation event."""
    connection = apsw.Connection(str(worker.data_dir / "sessionmem.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = connection.execute(
            "SELECT s.claude_session_id, o.tool_use_id, count(*) FROM observations o"
            " JOIN sessions s ON s.id = o.session_db_id GROUP BY 1, 2").fetchall()
        delays = [d for (d,) in connection.execute(
            "SELECT processed_at - accepted_at FROM journal WHERE kind = 'observation' AND status = 'done'")]
    finally:
        connection.close()
    return {(a, b): n for a, b, n in rows}, delays


def scenario_replay(ctx: Context, *, via: str, concurrency: int, speed: float | None, rate: float | None,
                    name: str = "replay") -> dict[str, Any]:
    sessions = ctx.sessions
    total_events = sum(len(s.events) for s in sessions)
    with ctx.worker(name) as (worker, api):
        with ProcessSampler(worker.pid) as sampler, tqdm(total=total_events, unit="event", desc=f"{name} via {via}",
                                                         file=sys.stderr, mininterval=1.0) as bar:
            started = time.monotonic()
            if via == "hooks":
                outcome = _replay_hooks(worker, sessions, concurrency=concurrency, bar=bar)
            else:
                outcome = trio.run(lambda: _replay_http(worker, sessions, concurrency=concurrency, speed=speed,
                                                        rate=rate, bar=bar))
            sent_seconds = time.monotonic() - started
            worker.wait_idle(timeout=3600)
            drained_seconds = time.monotonic() - started
        stored, delays = _stored(worker)
        debug = _debug_summary(worker)
    expected = outcome["accepted"]
    lost = sorted(expected - set(stored))
    result: dict[str, Any] = {
        "via": via,
        "sessions": len(sessions),
        "events": total_events,
        "concurrency": concurrency,
        "speed": "max" if speed is None else speed,
        "rate": rate,
        "send_seconds": round(sent_seconds, 2),
        "drain_seconds": round(drained_seconds, 2),
        "events_per_second": round(total_events / sent_seconds, 1),
        "observations_expected": len(expected),
        "observations_stored": sum(stored.values()),
        "lost": len(lost),
        "lost_examples": lost[:5],
        "duplicates": sum(n - 1 for n in stored.values()),
        "unexpected": len(set(stored) - expected),
        "accept_to_stored_ms": percentiles([d * 1000 for d in delays]),
        **_sampled(sampler),
        **debug,
    }
    if via == "hooks":
        result["hook_wall_ms"] = {stage: percentiles(v) for stage, v in sorted(outcome["wall_ms"].items())}
        result["hook_failures"] = outcome["failures"]
    else:
        result["accept_ms"] = {stage: percentiles(v) for stage, v in sorted(outcome["accept_ms"].items())}
        result["statuses"] = outcome["statuses"]
    compressor = debug["compressor"]
    if api is not None:
        calls = len(api.requests)
        result["llm"] = {
            "calls": calls,
            "input_tokens": api.input_tokens,
            "output_tokens": api.output_tokens,
            "tool_uses_per_call": round(compressor.get("toolUses", 0) / max(1, calls - _summary_calls(api)), 2),
            "tokens_per_observation": round((api.input_tokens + api.output_tokens) / max(1, result["observations_stored"]), 1),
            "retries": compressor.get("retries", 0),
            "raw_fallbacks": compressor.get("rawFallbacks", 0),
        }
    ctx.plots[f"{name}_rss"] = sampler.samples
    ctx.plots[f"{name}_accept_to_stored_ms"] = [d * 1000 for d in delays]
    if via == "hooks":
        ctx.plots[f"{name}_hook_ms"] = outcome["wall_ms"]
    return result


def _summary_calls(api: ScriptedMessagesAPI) -> int:
    return sum(1 for r in api.requests if "<summary>" in json.dumps(r.body.get("system", "")))


# -- throughput and open loop ------------------------------------------------------------------


def observation_bodies(ctx: Context, count: int, *, sessions: int, tag: str) -> list[dict[str, Any]]:
    """``count`` distinct observation bodies from the corpus, spread over ``sessions`` sessions."""
    tool_events = [e for s in ctx.sessions for e in s.events if e.stage in TOOL_STAGES
                   and e.payload["tool_name"] not in _skip_tools()]
    bodies = []
    for n in range(count):
        event = tool_events[n % len(tool_events)]
        call = api_call({**event.payload, "session_id": f"{tag}-{n % sessions}",
                         "tool_use_id": f"{tag}-{n}"}, project=f"bench-{tag}")
        assert call is not None and call[2] is not None
        bodies.append(clean_body(call[2]))
    return bodies


@contextmanager
def bare_endpoints(out: Path, *kinds: str) -> Iterator[list[int]]:
    """A bare endpoint (``bench/bare_app.py``) of each of ``kinds``, started side by side; their ports."""
    states = [out / f"bare-{kind}.json" for kind in kinds]
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for kind, state in zip(kinds, states):
            state.unlink(missing_ok=True)
            processes.append(subprocess.Popen([sys.executable, str(Path(__file__).with_name("bare_app.py")),
                                               str(state), kind],
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 30
        while not all(state.exists() for state in states):
            if time.monotonic() > deadline or any(process.poll() is not None for process in processes):
                raise RuntimeError("a bare endpoint did not start")
            time.sleep(0.05)
        time.sleep(0.1)
        yield [json.loads(state.read_text())["port"] for state in states]
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(30)


@contextmanager
def bare_endpoint(out: Path, kind: str = "quart") -> Iterator[int]:
    with bare_endpoints(out, kind) as (port,):
        yield port


def scenario_throughput(ctx: Context, *, rounds: int, seconds: float, concurrency: int) -> dict[str, Any]:
    """Closed loop, as fast as it goes: durable accepts vs the bare endpoints, alternating rounds."""
    per_round = max(2_000, int(seconds * 4_000))  # more than a round can send: distinct tool uses throughout
    bodies = [json.dumps(b).encode() for b in observation_bodies(ctx, 3 * per_round, sessions=64, tag="tp")]
    path = "/api/sessions/observations"

    def measure(port: int, offset: int) -> loadgen.Result:
        requests = [loadgen.encode_post("127.0.0.1", port, path, b, tokens.get(port))
                    for b in bodies[offset:offset + per_round]]
        return trio.run(partial(loadgen.closed_loop, "127.0.0.1", port, requests,
                                concurrency=concurrency, duration=seconds))

    rates: dict[str, list[float]] = {"worker": [], "bare_quart": [], "bare_asgi": []}
    worker_latency: list[float] = []
    with ctx.worker("throughput", SESSIONMEM_MAILBOX_SIZE=4096) as (worker, _), \
            bare_endpoints(ctx.out, "quart", "asgi") as (quart_port, asgi_port):
        tokens = {worker.port: worker.token}  # the bare endpoints take none
        with ProcessSampler(worker.pid) as sampler:
            for round_number in range(rounds):
                run = measure(worker.port, (round_number * per_round) % len(bodies))
                rates["worker"].append(run.statuses.get(202, 0) / (run.finished - run.started))
                worker_latency.extend(run.latencies_ms)
                for name, port in (("bare_quart", quart_port), ("bare_asgi", asgi_port)):
                    bare = measure(port, 0)
                    rates[name].append(bare.statuses.get(202, 0) / (bare.finished - bare.started))
                worker.wait_idle(timeout=600)  # let the actors catch up before the next round
        debug = _debug_summary(worker)
    ctx.plots["throughput_latency_ms"] = worker_latency
    ctx.plots["throughput_rss"] = sampler.samples
    medians = {name: statistics.median(values) for name, values in rates.items()}
    return {
        "rounds": rounds, "seconds_per_round": seconds, "concurrency": concurrency,
        "worker_accepts_per_s": [round(r, 1) for r in rates["worker"]],
        "worker_last_to_first": round(rates["worker"][-1] / rates["worker"][0], 3) if rates["worker"][0] else 0.0,
        "bare_accepts_per_s": [round(r, 1) for r in rates["bare_quart"]],
        "bare_asgi_accepts_per_s": [round(r, 1) for r in rates["bare_asgi"]],
        "worker_median_per_s": round(medians["worker"], 1),
        "bare_median_per_s": round(medians["bare_quart"], 1),
        "bare_asgi_median_per_s": round(medians["bare_asgi"], 1),
        "ratio": round(medians["worker"] / medians["bare_quart"], 3),
        "ratio_to_bare_asgi": round(medians["worker"] / medians["bare_asgi"], 3),
        "worker_accept_ms": percentiles(worker_latency),
        **_sampled(sampler), **debug,
    }


def scenario_openloop(ctx: Context, *, rate: float, sessions: int, seconds: float) -> dict[str, Any]:
    count = int(rate * seconds)
    bodies = [json.dumps(b).encode() for b in observation_bodies(ctx, count, sessions=sessions, tag="ol")]
    with ctx.worker("openloop") as (worker, _):
        requests = [loadgen.encode_post("127.0.0.1", worker.port, "/api/sessions/observations", b, worker.token)
                    for b in bodies]
        with ProcessSampler(worker.pid) as sampler:
            run = trio.run(lambda: loadgen.open_loop("127.0.0.1", worker.port, requests, rate=rate))
            worker.wait_idle(timeout=600)
        debug = _debug_summary(worker)
        stored, delays = _stored(worker)
    # The same schedule against the bare Quart-Trio endpoint, right after: the tail this
    # machine, this load generator and this server stack give with no work behind them.
    with bare_endpoint(ctx.out, "quart") as port:
        bare_requests = [loadgen.encode_post("127.0.0.1", port, "/api/sessions/observations", b) for b in bodies]
        bare = trio.run(lambda: loadgen.open_loop("127.0.0.1", port, bare_requests, rate=rate))
    accepted = run.latencies_of(202)
    ctx.plots["openloop_latency_ms"] = accepted
    ctx.plots["openloop_completed_at"] = [t - run.started for t in run.completed_at]
    ctx.plots["openloop_rss"] = sampler.samples
    elapsed = run.finished - run.started
    return {
        "offered_rate_per_s": rate, "sessions": sessions, "seconds": seconds, "requests": count,
        "statuses": run.statuses, "errors": run.errors,
        "achieved_rate_per_s": round(run.rate, 1),  # answered, whatever the answer
        "accepted_rate_per_s": round(len(accepted) / elapsed, 1) if elapsed > 0 else 0.0,
        # Latency of the events accepted (202); those turned away (503: a session's mailbox was full)
        # apart: hooks retry or spool them.
        "accept_ms": percentiles(accepted),
        "turned_away": len(run.latencies_of(503)),
        "turned_away_ms": percentiles(run.latencies_of(503)),
        "observations_stored": sum(stored.values()),
        "accept_to_stored_ms": percentiles([d * 1000 for d in delays]),
        "bare_accept_ms": percentiles(bare.latencies_of(202)),
        "bare_statuses": bare.statuses, "bare_errors": bare.errors,
        **_sampled(sampler), **debug,
    }


def scenario_context(ctx: Context, *, observations: int, requests: int) -> dict[str, Any]:
    bodies = observation_bodies(ctx, observations, sessions=20, tag="cx")
    # A short quiet period: the seeded batches are flushed at once instead of after 2 s.
    with ctx.worker("context", SESSIONMEM_MAILBOX_SIZE=4096, SESSIONMEM_BATCH_QUIET=0.05) as (worker, _):
        seed = [loadgen.encode_post("127.0.0.1", worker.port, "/api/sessions/observations", json.dumps(b).encode(),
                                    worker.token)
                for b in bodies]
        trio.run(lambda: loadgen.closed_loop("127.0.0.1", worker.port, seed, concurrency=16))
        worker.wait_idle(timeout=1200)
        stored = worker.get("/api/sessions?project=bench-cx&limit=500")["sessions"]
        count = sum(s["observations"] for s in stored)
        get = loadgen.encode_get("127.0.0.1", worker.port, "/api/context/inject?project=bench-cx", worker.token)
        run = trio.run(lambda: loadgen.closed_loop("127.0.0.1", worker.port, [get] * requests, concurrency=1,
                                                   keep_bodies=True))
        size = len(run.bodies[-1]) if run.bodies else 0
    return {"observations_in_project": count, "requests": requests, "statuses": run.statuses,
            "inject_ms": percentiles(run.latencies_ms), "context_bytes": size}


def scenario_python_baseline(runs: int = 30) -> dict[str, Any]:
    """A bare interpreter start, measured in the same run, to put hook times in proportion."""
    samples = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run([sys.executable, "-S", "-c", "pass"], check=True)
        samples.append((time.perf_counter() - began) * 1000)
    with_site = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        with_site.append((time.perf_counter() - began) * 1000)
    return {"python_S_pass_ms": percentiles(samples), "python_pass_ms": percentiles(with_site)}
