"""Hybrid search on the team database (PostgreSQL + pgvector) at 100,000 and 1,000,000 observations,
beside SQLite at 100,000 in the same run.

    .venv/bin/python bench/team_search.py --work DIR [--reuse] [--sizes 100000,1000000] [--runs 200] [--out FILE.json]

How the stores are made (bench/README.md holds the figures):

1. **The pool of real texts and vectors** is a replayed corpus with MiniLM vectors, as
   ``bench/search_latency.py`` makes it (``--source DIR``, or ``--work DIR/source`` when an
   earlier run of either script left one there; else the replay and catch-up are run).
2. **SQLite at 100,000**: :func:`search_latency.synthesize` with its filtered layout (35
   projects: one of 40 % of the observations, four of 7.5 %, thirty of 1 %), rows through the
   schema's triggers, vectors into the HNSW index file: the store ``search_latency.py
   --filtered-only`` measures.
3. **PostgreSQL at each size**: the same recipe (:func:`observation_rows`: observation ``i``
   takes the title, subtitle, facts, files, type and concepts of real observation ``i mod R``,
   the narrative of real observation ``(7919 i + 13) mod R``, and a vector of those two real
   vectors mixed 0.8 : 0.2 plus Gaussian noise, renormalized), laid out over the same 35
   projects. The schema is the team store's own (``open_team_store`` applies its
   migrations); its full-text and vector indexes are read from the catalog, dropped, the
   rows loaded with ``COPY ... FROM STDIN (FORMAT BINARY)`` (psycopg), then the indexes built
   again from their own definitions with ``maintenance_work_mem`` and
   ``max_parallel_maintenance_workers`` raised: load and build are timed apart. Sessions and
   prompts go in by the store's own ``push`` (a few thousand rows), observations by COPY.
4. **Measured in one process, interleaved**: an in-process worker (``open_worker``, the real
   embedder process and HNSW index) serves the SQLite side through ``SearchService.search``
   (what ``GET /api/search`` runs); the PostgreSQL side through ``TeamSearch.search`` (what
   ``GET /api/search?source=team`` runs): the query embedded by that same embedder, full text
   (``TeamStore.search_text``) beside embedding + nearest (``TeamStore.nearest``), fused with
   ``search.hybrid.fuse``, and the page's cards read.
   Each round asks every store the same 4-word query (from real prompts) without a filter and
   with ``project=`` the big project, a medium one and a small one, the order rotating.

Resource handling:
    The PostgreSQL server this script starts is stopped on the way out (``cleanup_mode="stop"``);
    its data stays in ``--work`` for ``--reuse``. The in-process worker stops with the run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

import search_latency as latency  # noqa: E402
from json_out import write_json  # noqa: E402
from scenarios import percentiles  # noqa: E402

from sessionmem.embed.minilm import DIMENSIONS  # noqa: E402
from sessionmem.records import SearchFilters  # noqa: E402

SCOPES = ("all", "big", "medium", "small")
COPY_CHUNK = 50_000


# -- the rows ----------------------------------------------------------------------------------


def layout_sessions(observations: int, seed: int = 7) -> list[tuple[str, int]]:
    """(project, observations) of each session, as search_latency's filtered stores lay them out."""
    return latency._sessions(observations, latency.filtered_layout(observations), np.random.default_rng(seed))


def observation_rows(pool: latency.Pool, sessions: Sequence[tuple[str, int]], *, seed: int = 7,
                     chunk: int = COPY_CHUNK) -> Iterator[tuple[list[dict[str, Any]], np.ndarray]]:
    """The observations of ``sessions`` in chunks: (row fields by name, their vectors as float32)."""
    rng = np.random.default_rng(seed + 1)
    real = len(pool.observations)
    total = sum(size for _, size in sessions)
    now = time.time() - total
    pending: list[dict[str, Any]] = []
    i = 0
    for s, (project, size) in enumerate(sessions):
        for j in range(size):
            a, b = i % real, (latency.NARRATIVE_STRIDE * i + 13) % real
            type_, title, subtitle, facts, _, concepts, files_read, files_modified, tool = pool.observations[a]
            pending.append({"i": i, "session": s, "claude_session_id": f"synthetic-{s}", "project": project,
                            "prompt_number": j // latency.OBSERVATIONS_PER_TURN + 1, "tool_name": tool,
                            "tool_use_id": f"synthetic-{i}", "type": type_, "title": title, "subtitle": subtitle,
                            "facts": facts, "narrative": pool.observations[b][4], "concepts": concepts,
                            "files_read": files_read, "files_modified": files_modified, "created_at": now + i})
            i += 1
            if len(pending) == chunk:
                yield pending, _vectors(pool, [row["i"] for row in pending], rng)
                pending = []
    if pending:
        yield pending, _vectors(pool, [row["i"] for row in pending], rng)


def turn_rows(pool: latency.Pool, sessions: Sequence[tuple[str, int]], *, seed: int = 7
              ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], np.ndarray]:
    """The prompts and summaries of ``sessions`` (one of each per :data:`latency.OBSERVATIONS_PER_TURN`
    observations, real ones taken in turn, as search_latency makes them): (prompts, summaries, summary
    vectors: the real one plus a little noise)."""
    rng = np.random.default_rng(seed + 2)
    total = sum(size for _, size in sessions)
    now = time.time() - total
    prompts: list[dict[str, Any]] = []
    summaries: list[dict[str, Any]] = []
    i = 0
    for s, (project, size) in enumerate(sessions):
        for j in range(0, size, latency.OBSERVATIONS_PER_TURN):
            t = len(prompts) + 1
            number = j // latency.OBSERVATIONS_PER_TURN + 1
            at = now + i + j
            prompts.append({"claude_session_id": f"synthetic-{s}", "project": project, "prompt_number": number,
                            "text": pool.prompts[t % len(pool.prompts)], "created_at": at - 0.5})
            request, investigated, learned, completed, next_steps, notes = pool.summaries[t % len(pool.summaries)]
            summaries.append({"claude_session_id": f"synthetic-{s}", "project": project, "prompt_number": number,
                              "request": request, "investigated": investigated, "learned": learned,
                              "completed": completed, "next_steps": next_steps, "notes": notes,
                              "created_at": at + latency.OBSERVATIONS_PER_TURN - 0.5, "t": t})
        i += size
    ids = np.array([row["t"] for row in summaries]) % len(pool.summaries)
    vectors = latency._unit(pool.summary_vectors[ids] + rng.normal(0, 0.05 / np.sqrt(DIMENSIONS),
                                                                   (len(ids), DIMENSIONS)))
    return prompts, summaries, vectors


def _vectors(pool: latency.Pool, indices: list[int], rng: np.random.Generator) -> np.ndarray:
    ids = np.array(indices)
    real = len(pool.observation_vectors)
    mixed = 0.8 * pool.observation_vectors[ids % real] \
        + 0.2 * pool.observation_vectors[(latency.NARRATIVE_STRIDE * ids + 13) % real]
    return latency._unit(latency._unit(mixed) + rng.normal(0, latency.NOISE / np.sqrt(DIMENSIONS), mixed.shape))


def scope_projects(observations: int) -> dict[str, list[str]]:
    """The project names of each size class of the filtered layout."""
    names = [name for name, _ in latency.filtered_layout(observations)]
    return {scope: [n for n in names if n.startswith(scope + "-")] for scope in SCOPES[1:]}


# -- measuring -----------------------------------------------------------------------------------


async def measure(sqlite_dir: Path, pg_urls: dict[str, str], runs: int, queries: list[str],
                  sqlite_size: int) -> dict[str, Any]:
    from sessionmem.search.team_search import TeamSearch
    from sessionmem.storage.pg.store import open_team_store
    from sessionmem.testing.harness import open_worker

    samples: dict[str, list[float]] = {}
    counts: dict[str, list[int]] = {}
    violations: dict[str, int] = {}
    async with open_worker(sqlite_dir, batch_quiet_s=0.05) as worker:
        await worker.services.index.caught_up()
        # The worker's own search of the team database (``GET /api/search?source=team``).
        team_search = TeamSearch(worker.services.index, worker.services.embedder)
        async with _open_all(open_team_store, pg_urls) as stores:

            async def sqlite_search(query: str, filters: SearchFilters) -> list[Any]:
                answer = await worker.services.search.search(query, filters, limit=20)
                return [(result.kind, result.id, result.project) for result in answer.results]

            async def pg_search(name: str, query: str, filters: SearchFilters) -> list[Any]:
                answer = await team_search.search(stores[name], query, filters, limit=20)
                return [(result.kind, result.id, result.project) for result in answer.results]

            sides: list[tuple[str, int, Any]] = [("sqlite", sqlite_size, sqlite_search)]
            sides += [(f"postgres-{size}", int(size), (lambda n: lambda q, f: pg_search(n, q, f))(size))
                      for size in pg_urls]
            for warm in range(5):  # what is lazy loads: the embedder, the first pages of each index
                for _, _, search in sides:
                    await search(queries[warm], SearchFilters())
            for i in range(runs):
                query = queries[i % len(queries)]
                scopes = SCOPES[i % 4:] + SCOPES[:i % 4]
                for scope in scopes:
                    for side, size, search in sides[i % len(sides):] + sides[:i % len(sides)]:
                        projects = scope_projects(size)
                        project = None if scope == "all" else projects[scope][i % len(projects[scope])]
                        started = time.perf_counter()
                        found = await search(query, SearchFilters(project=project))
                        samples.setdefault(f"{side}/{scope}", []).append((time.perf_counter() - started) * 1000)
                        counts.setdefault(f"{side}/{scope}", []).append(len(found))
                        if project is not None:
                            violations[side] = violations.get(side, 0) + sum(1 for hit in found if hit[2] != project)
    return {"latency_ms": {name: percentiles(values) for name, values in samples.items()},
            "results_per_search": {name: statistics.median(values) for name, values in counts.items()},
            "filter_violations": violations}


class _open_all:
    """Every team store of ``urls`` open for the block."""

    def __init__(self, opener: Any, urls: dict[str, str]) -> None:
        from contextlib import AsyncExitStack

        self._opener, self._urls, self._stack = opener, urls, AsyncExitStack()

    async def __aenter__(self) -> dict[str, Any]:
        opened = {}
        for name, url in self._urls.items():
            opened[name] = await self._stack.enter_async_context(self._opener(url))
        return opened

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()


# -- main --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    import pg_load
    import team_schema

    from sessionmem.embed.minilm import MiniLMEmbedder

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True, help="where the stores go (kept for --reuse)")
    parser.add_argument("--reuse", action="store_true", help="measure the stores an earlier run left in --work")
    parser.add_argument("--source", type=Path, help="a replayed corpus with vectors (default: --work/source)")
    parser.add_argument("--sizes", type=lambda t: [int(n) for n in t.split(",")], default=[100_000, 1_000_000],
                        help="observations of each PostgreSQL store, comma-separated")
    parser.add_argument("--sqlite-size", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    result: dict[str, Any] = {"meta": {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "command": " ".join(sys.argv),
                                       "cores": os.cpu_count(), "load_average_at_start": os.getloadavg()}}
    work = args.work
    source = args.source or work / "source"
    if not (source / "sessionmem.db").exists():
        raise SystemExit(f"no replayed source in {source}: run bench/search_latency.py --work {work} first, "
                         "or give --source")
    pool = latency.load_pool(source)
    model = MiniLMEmbedder().model_id
    queries = latency.queries_from(pool)
    result["pool"] = {"observations": len(pool.observations), "queries": len(queries)}

    sqlite_dir = work / f"sqlite-{args.sqlite_size}"
    if not (args.reuse and (sqlite_dir / "sessionmem.db").exists()):
        print(f"team_search: SQLite, {args.sqlite_size} observations", file=sys.stderr)
        result["build_sqlite"] = latency.synthesize(pool, sqlite_dir, args.sqlite_size,
                                                    layout=latency.filtered_layout(args.sqlite_size))
    with pg_load.server(work / "pgdata") as server:
        result["postgres"] = pg_load.describe(server)
        urls: dict[str, str] = {}
        for size in args.sizes:
            database = f"team_{size}"
            if args.reuse and pg_load.loaded(server, database):
                result[f"build_postgres_{size}"] = pg_load.build_figures(server, database)
            else:
                print(f"team_search: PostgreSQL, {size} observations", file=sys.stderr)
                sessions = layout_sessions(size)
                result[f"build_postgres_{size}"] = pg_load.build(
                    server, database, lambda connection, sessions=sessions: team_schema.load(
                        connection, pool, sessions, model, observation_rows, turn_rows))
            urls[str(size)] = server.get_uri(database)
            result[f"stored_postgres_{size}"] = pg_load.counts(server, database)
        print("team_search: measuring", file=sys.stderr)
        result["search"] = trio.run(measure, sqlite_dir, urls, args.runs, queries, args.sqlite_size)
    result["meta"]["load_average_at_end"] = os.getloadavg()
    print(summary(result))
    write_json(result, args.out)
    return 0


def summary(result: dict[str, Any]) -> str:
    latency_ms = result["search"]["latency_ms"]
    sides = sorted({name.split("/")[0] for name in latency_ms}, key=lambda s: (s != "sqlite", len(s), s))
    rows = ["| hybrid, query embedded | " + " | ".join(sides) + " |", "|---|" + "---|" * len(sides)]
    for scope in SCOPES:
        cells = [f"{latency_ms[f'{side}/{scope}']['p50']:.1f} ({latency_ms[f'{side}/{scope}']['p95']:.1f})"
                 for side in sides]
        rows.append(f"| {'no filter' if scope == 'all' else 'project: ' + scope} | " + " | ".join(cells) + " |")
    rows.append("\nms, p50 (p95)")
    rows.append(f"results of another project than the one asked: {result['search']['filter_violations']}")
    for key, value in result.items():
        if key.startswith("build_"):
            builds = {name: b["seconds"] for name, b in value.get("index_builds", {}).items() if b["seconds"] >= 1}
            rows.append(f"{key}: " + ", ".join(f"{name} {value[name]}" for name in (
                "copy_seconds", "index_build_seconds", "vacuum_analyze_seconds", "database_bytes",
                "sqlite_insert_seconds", "index_build_seconds") if name in value) + f"; {builds}")
    return "\n".join(rows)


if __name__ == "__main__":
    raise SystemExit(main())
