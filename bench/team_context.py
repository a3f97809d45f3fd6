"""SessionStart context at 100,000 observations: team store not configured, configured (PostgreSQL up),
configured with PostgreSQL down; side by side, alternating.

    .venv/bin/python bench/team_context.py --work DIR [--rounds 4] [--runs 200] [--out FILE.json]

The store is ``bench/team_search.py``'s SQLite store (``DIR/sqlite-100000``: 100,000 observations
over 35 projects, vectors in the index; run that script first). Each **block** starts a worker
process on it (``sessionmem serve``, offline compressor, MiniLM), waits until its index is ready,
then asks ``GET /api/context/inject?source=compact`` for the big project (40,000 observations)
``--runs`` times on one keep-alive connection, then as many times with the hook's own client (a
connection each), and stops the worker. The three conditions:

- ``off``: no ``SESSIONMEM_DATABASE_URL`` (as today);
- ``up``: ``SESSIONMEM_DATABASE_URL`` set to a running PostgreSQL and a medium project (7,500
  observations) shared: the worker's sync task connects, pulls every second and pushes what is
  stored after it started (a project's past memory goes by ``sessionmem share push``, which
  this bench does not run: nothing is stored meanwhile, so nothing is pushed). Before the first
  measured block an unmeasured one waits until that project's rows are in PostgreSQL, at most
  :data:`FIRST_PUSH_TIMEOUT_S` (the migrations and first pulls happen there);
- ``down``: the same settings with PostgreSQL stopped: the sync task retries with its backoff.

Blocks go ``off up down`` per round, ``--rounds`` rounds; figures are the medians of the
blocks' p50 (and p95), so a slow minute slows one block, not one condition.

Resource handling:
    The worker of each block is stopped when the block ends; the PostgreSQL server this script
    started is stopped on the way out.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

import psycopg
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

import search_latency as latency  # noqa: E402
from json_out import write_json  # noqa: E402
from team_replay import PgHandle  # noqa: E402

from sessionmem.protocol import routes  # noqa: E402
from sessionmem.testing.worker_process import WorkerProcess, start_worker  # noqa: E402

CONDITIONS = ("off", "up", "down")
PROJECT = "big-0"
SHARED = "medium-0"
FIRST_PUSH_TIMEOUT_S = 300.0


async def _keep_alive(worker: WorkerProcess, runs: int) -> dict[str, Any]:
    timer = latency.Timer()
    client = latency._Client(worker)
    path = routes.CONTEXT + "?" + urllib.parse.urlencode({"project": PROJECT, "source": "compact"})
    try:
        for _ in range(20):
            await client.get(path)
        for _ in range(runs):
            await client.get(path, timer, "context_keep_alive")
            await client.get(routes.HEALTH, timer, "health_keep_alive")
    finally:
        await client.aclose()
    return timer.summary()


def block(data_dir: Path, env: dict[str, str], runs: int) -> dict[str, Any]:
    with start_worker(data_dir, env={"SESSIONMEM_COMPRESSOR": "offline", **env}, timeout=180) as worker:
        latency._wait_index_ready(worker)
        figures = trio.run(_keep_alive, worker, runs)
        hook = latency._measure_as_the_hook_asks(worker, runs)["latency_ms"]
        figures["context_hook_client"] = hook["context_inject_compact"]
        figures["health_hook_client"] = hook["health"]
        figures["team"] = worker.get(routes.DEBUG).get("team")
    return figures


def wait_first_push(data_dir: Path, env: dict[str, str], url: str) -> dict[str, Any]:
    """An unmeasured worker with the team store up, until the shared project's observations are in PostgreSQL."""
    import team_schema

    started = time.monotonic()
    with start_worker(data_dir, env={"SESSIONMEM_COMPRESSOR": "offline", **env}, timeout=180) as worker:
        latency._wait_index_ready(worker)
        local = latency._count_observations(data_dir, SHARED)
        pushed = 0
        while time.monotonic() - started < FIRST_PUSH_TIMEOUT_S:
            with psycopg.connect(url) as connection:
                pushed = connection.execute(team_schema.OBSERVATION_COUNT_SQL).fetchone()[0]
            if pushed >= local:
                break
            time.sleep(1.0)
    return {"pushed": pushed, "local": local, "seconds": round(time.monotonic() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    data_dir = args.work / "sqlite-100000"
    if not (data_dir / "sessionmem.db").exists():
        raise SystemExit(f"no store in {data_dir}: run bench/team_search.py --work {args.work} first")
    result: dict[str, Any] = {"meta": {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "command": " ".join(sys.argv),
                                       "cores": os.cpu_count(), "load_average_at_start": os.getloadavg()},
                              "project": PROJECT, "observations_in_project": latency._count_observations(data_dir,
                                                                                                        PROJECT),
                              "shared_project": SHARED, "blocks": []}
    pg = PgHandle(args.work / "pgdata-context")
    pg.start()
    try:
        with psycopg.connect(pg.url("postgres"), autocommit=True) as connection:
            connection.execute("DROP DATABASE IF EXISTS team_context")
            connection.execute("CREATE DATABASE team_context")
        url = pg.url("team_context")
        team_env = {"SESSIONMEM_DATABASE_URL": url, "SESSIONMEM_SHARE_PROJECTS": SHARED,
                    "SESSIONMEM_MACHINE_NAME": "bench", "SESSIONMEM_USER_NAME": "bench"}
        result["first_push"] = wait_first_push(data_dir, team_env, url)
        for round_ in range(args.rounds):
            for condition in CONDITIONS:
                if condition == "down":
                    pg.stop()
                try:
                    env = {} if condition == "off" else team_env
                    print(f"team_context: round {round_ + 1}, {condition}", file=sys.stderr)
                    figures = block(data_dir, env, args.runs)
                finally:
                    if condition == "down":
                        pg.start()
                result["blocks"].append({"round": round_ + 1, "condition": condition,
                                         "load_average": os.getloadavg(), **figures})
    finally:
        pg.stop()
    result["medians"] = {
        condition: {name: {q: round(statistics.median(b[name][q] for b in result["blocks"]
                                                      if b["condition"] == condition), 2) for q in ("p50", "p95")}
                    for name in ("context_keep_alive", "context_hook_client", "health_keep_alive")}
        for condition in CONDITIONS}
    result["meta"]["load_average_at_end"] = os.getloadavg()
    for condition, figures in result["medians"].items():
        print(f"{condition}: " + ", ".join(f"{name} p50 {v['p50']} p95 {v['p95']}" for name, v in figures.items()))
    write_json(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
