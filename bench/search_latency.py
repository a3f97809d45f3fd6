"""Search and SessionStart latency at 100,000 observations, and what the index costs.

    .venv/bin/python bench/search_latency.py [--source DATA_DIR] [--observations N] [--out DIR]

How the 100,000 observations are made (bench/README.md holds the latest figures):

1. **Real text and real vectors.** A source data dir holds corpus sessions replayed by
   the offline compressor, with vectors from the real MiniLM embedder: by default this
   script replays ``--projects`` corpus projects with vectors off, then starts a worker
   with MiniLM on that data dir and times how fast it catches up (every document
   embedded and added: the **catch-up rate**). ``--source`` reuses a data dir instead
   (``bench/retrieval.py --data-dir`` leaves one).
2. **Scale-up.** Observation ``i`` of the synthetic store takes the title, subtitle,
   facts, files, type and concepts of real observation ``i mod R`` and the narrative of
   real observation ``(7919 i + 13) mod R``, so texts are real sentences of this corpus
   in combinations that repeat rarely; its vector is those two real vectors mixed
   (0.8 : 0.2) plus Gaussian noise, renormalized (cosine ~0.9 to the first). Prompts
   and summaries are real ones, one of each per 13 observations (the corpus ratio).
   Rows go into SQLite in one transaction through the schema's own triggers (full-text
   tables, ``observation_files``); the vectors are added to an :class:`HnswIndex`
   (the **build rate**) and saved (**save time, file size**). A worker process then
   starts on that data dir: it loads the index (**load time**) and reconciles it with
   SQLite (nothing to embed). For latency this is fair: the index holds as many
   vectors, of the same dimension and norm, clustered as real ones are; FTS5 posting
   lists hold real vocabulary at 100,000 rows. Beside them, a small project
   (``bench-small``): a copy of every 167th observation, with its vector, as a store of
   many projects holds.
3. **Measured** over HTTP on one keep-alive connection to the worker process, one
   request at a time, the kinds interleaved so a noisy machine slows all alike:
   ``GET /api/search`` in each mode (the query embedded at request time, every time),
   and in ``hybrid`` and ``fts`` for the small project,
   ``GET /api/context/inject?source=compact`` (relevance ranking: the header says
   ``meaning``), the same for a project with nothing stored, and ``GET /api/health``
   (the HTTP round trip alone). At 10,000
   observations, ``mode=fts`` is set beside claude-mem's full-text query run on the
   same database from this process (its SQL, no HTTP). Worker RSS comes from /proc.
4. **Filtered beside unfiltered** (``--filtered-sizes``, 10,000 and 100,000; ``--filtered-only``
   runs this alone): a store of each size made as in 2., its sessions spread over projects
   as a store of many holds them (:data:`FILTERED_LAYOUT`: one project of 40 % of the
   observations, four of 7.5 %, thirty of 1 %; sessions of each project shuffled
   together), and a worker on it. Each round asks ``hybrid``, ``fts`` and ``vector``
   without a filter and with ``project=`` the big one, a medium one and a small one (the
   medium and small in turn), the order rotating; every result is checked to be of the
   project asked. Then the worker's CPU time per hybrid search of each kind, in blocks
   (what latency would be on an idle machine, and what a busy one does not blur).
5. **Cold SessionStart**: no worker running, the real hook
   (``python -S hooks/entry.py SessionStart``) is spawned and timed until it exits
   with the context printed (it starts the worker and waits for it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw
import numpy as np
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

import loadgen  # noqa: E402
import retrieval  # noqa: E402
from json_out import write_json  # noqa: E402
from sampler import _cpu_seconds, _rss_mb  # noqa: E402
from scenarios import percentiles  # noqa: E402

from sessionmem.embed.minilm import DIMENSIONS, MiniLMEmbedder  # noqa: E402
from sessionmem.index.hnsw import HnswIndex, label_of  # noqa: E402
from sessionmem.protocol import client as hook_client  # noqa: E402
from sessionmem.protocol import oskit, routes  # noqa: E402
from sessionmem.records import OBSERVATION, PROMPT, SUMMARY, SearchFilters  # noqa: E402
from sessionmem.replay.convert import ConversionStats  # noqa: E402
from sessionmem.storage.search_terms import query_terms  # noqa: E402
from sessionmem.storage.sqlite import cards, fulltext  # noqa: E402
from sessionmem.storage.sqlite.connection_setup import open_writer  # noqa: E402
from sessionmem.testing.harness import open_worker  # noqa: E402
from sessionmem.testing.worker_process import WorkerProcess, start_worker  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
HOOK_ENTRY = REPO / "hooks" / "entry.py"
PROJECT = "bench-scale"
# A small project beside the large one, as a store of many projects has: a copy of every
# SMALL_EVERY-th observation of the large one (598 at 100,000), in a session of its own.
SMALL_PROJECT = "bench-small"
SMALL_EVERY = 167
OBSERVATIONS_PER_SESSION = 130
OBSERVATIONS_PER_TURN = 13  # the corpus: 6,622 tool uses for 514 prompts
NARRATIVE_STRIDE = 7919
NOISE = 0.35  # norm of the Gaussian noise added to a unit vector (cosine ~0.9 to its source)
QUERY_WORDS = 4
ADD_CHUNK = 1000
# The filtered stores: observations spread over projects as a store of many projects holds
# them: one big project (40 %), four medium ones (7.5 % each), thirty small ones (1 % each);
# prompts and summaries follow their sessions. Searched with each project class as the filter.
FILTERED_LAYOUT = (("big", 1, 0.40), ("medium", 4, 0.075), ("small", 30, 0.01))
FILTERED_SIZES = (10_000, 100_000)
FILTERED_SCOPES = ("all", "big", "medium", "small")
CPU_BLOCKS, CPU_BLOCK_SEARCHES = 4, 40
# --smoke: blocks enough for every scope's figure (a hybrid search costs the worker ~20 ms of CPU, so a
# block reads several clock ticks), not for a steady median.
SMOKE_CPU_BLOCKS, SMOKE_CPU_BLOCK_SEARCHES = 2, 4


# -- the source: real texts, real vectors -------------------------------------------------


@dataclass
class Pool:
    observations: list[tuple[Any, ...]]  # type, title, subtitle, facts, narrative, concepts, files_read, files_modified, tool_name
    observation_vectors: np.ndarray
    prompts: list[str]
    prompt_vectors: np.ndarray
    summaries: list[tuple[Any, ...]]  # request, investigated, learned, completed, next_steps, notes
    summary_vectors: np.ndarray


async def _replay_source(data_dir: Path, projects: list[retrieval.Project]) -> dict[str, Any]:
    """Replay with vectors off, then time a MiniLM worker catching up on every document."""
    async with open_worker(data_dir, embedder="none", batch_quiet_s=0.05, mailbox_size=4096) as worker:
        await retrieval.replay(worker, projects)
    started = time.monotonic()
    async with open_worker(data_dir, batch_quiet_s=0.05) as worker:
        await worker.services.index.caught_up()
        seconds = time.monotonic() - started
        stats = worker.services.index.statistics()
    return {"documents": stats.added, "seconds": round(seconds, 1),
            "documents_per_second": round(stats.added / seconds, 1),
            "embed_seconds": stats.embed_seconds, "load_seconds_at_start": stats.load_seconds}


def load_pool(source: Path) -> Pool:
    model_id = MiniLMEmbedder().model_id
    index, reason = HnswIndex.load(source / "index", DIMENSIONS, model_id)
    if index is None:
        raise SystemExit(f"no usable vector index in {source / 'index'}: {reason}")
    connection = apsw.Connection(str(source / "sessionmem.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        def with_vectors(kind: str, sql: str) -> tuple[list[tuple[Any, ...]], np.ndarray]:
            rows, vectors = [], []
            for row_id, *fields in connection.execute(sql):
                vector = index.vector_of(label_of(kind, row_id))
                if vector is not None:
                    rows.append(tuple(fields))
                    vectors.append(vector)
            return rows, np.array(vectors, dtype=np.float32)

        observations, observation_vectors = with_vectors(OBSERVATION, (
            "SELECT id, type, title, subtitle, facts, narrative, concepts, files_read, files_modified, tool_name"
            " FROM observations ORDER BY id"))
        prompts, prompt_vectors = with_vectors(PROMPT, "SELECT id, text FROM user_prompts ORDER BY id")
        summaries, summary_vectors = with_vectors(SUMMARY, (
            "SELECT id, request, investigated, learned, completed, next_steps, notes FROM session_summaries"
            " ORDER BY id"))
    finally:
        connection.close()
    return Pool(observations, observation_vectors, [text for (text,) in prompts], prompt_vectors, summaries,
                summary_vectors)


# -- the synthetic store --------------------------------------------------------------------


def _unit(vectors: np.ndarray) -> np.ndarray:
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def add_small_project(connection: apsw.Connection) -> list[tuple[int, int]]:
    """:data:`SMALL_PROJECT`'s observations, copied from the large project's (once): (their id, the copied one's)."""
    if not connection.execute("SELECT 1 FROM observations WHERE project = ?", (SMALL_PROJECT,)).fetchone():
        with connection:
            connection.execute("INSERT INTO sessions (claude_session_id, project, cwd, created_at, updated_at)"
                               " VALUES (?, ?, ?, 0, 0)", (f"synthetic-{SMALL_PROJECT}", SMALL_PROJECT,
                                                           f"/synthetic/{SMALL_PROJECT}"))
            session = connection.last_insert_rowid()
            # event_id: minus the copied row's id (the bench's rows have no journal).
            connection.execute(
                "INSERT INTO observations (session_db_id, project, prompt_number, event_id, tool_name, tool_use_id,"
                " type, title, subtitle, facts, narrative, concepts, files_read, files_modified, compressed,"
                " compressor, created_at, stored_at) SELECT ?1, ?2, 1, -id, tool_name, 'small-' || id, type, title,"
                " subtitle, facts, narrative, concepts, files_read, files_modified, 1, 'offline', created_at,"
                " stored_at FROM observations WHERE project = ?3 AND id % ?4 = 0",
                (session, SMALL_PROJECT, PROJECT, SMALL_EVERY))
    return connection.execute("SELECT id, -event_id FROM observations WHERE project = ? ORDER BY id",
                              (SMALL_PROJECT,)).fetchall()


def _sessions(observations: int, layout: list[tuple[str, int]] | None,
              rng: np.random.Generator) -> list[tuple[str, int]]:
    """(project, observations) of each session, in the order they happened: :data:`PROJECT`'s alone, or
    each project of ``layout`` (name, observations) in sessions of :data:`OBSERVATIONS_PER_SESSION`, the
    projects' sessions shuffled together (one works on several projects in turn)."""
    sessions: list[tuple[str, int]] = []
    for project, count in layout or [(PROJECT, observations)]:
        full = max(1, count // OBSERVATIONS_PER_SESSION)
        sizes = [OBSERVATIONS_PER_SESSION] * full
        sizes[-1] += count - OBSERVATIONS_PER_SESSION * full  # the last takes the rest
        sessions += [(project, size) for size in sizes]
    if layout:
        sessions = [sessions[i] for i in rng.permutation(len(sessions))]
    return sessions


def filtered_layout(observations: int) -> list[tuple[str, int]]:
    """(project, observations) of a store of ``observations`` laid out as :data:`FILTERED_LAYOUT` says."""
    return [(f"{size}-{n}", round(observations * share)) for size, count, share in FILTERED_LAYOUT
            for n in range(count)]


def synthesize(pool: Pool, data_dir: Path, observations: int, *, seed: int = 7, small_project: bool = False,
               layout: list[tuple[str, int]] | None = None) -> dict[str, Any]:
    """A data dir holding ``observations`` scaled-up observations (module docstring), its index built and saved;
    ``small_project``: and :data:`SMALL_PROJECT` beside them; ``layout``: spread over these projects
    (name, observations; see :func:`filtered_layout`) instead of :data:`PROJECT` alone."""
    rng = np.random.default_rng(seed)
    real = len(pool.observations)
    sessions = _sessions(observations, layout, rng)
    observations = sum(size for _, size in sessions)
    now = time.time() - observations  # one row a second, ending now
    data_dir.mkdir(parents=True, exist_ok=True)
    connection = open_writer(data_dir / "sessionmem.db")
    started = time.perf_counter()
    try:
        with connection:
            session_rows, rows, turn_rows = [], [], []  # turn: (id, session, prompt number, project, at)
            i = 0
            for s, (project, size) in enumerate(sessions, start=1):
                turns_before = len(turn_rows)
                for j in range(size):
                    a, b = i % real, (NARRATIVE_STRIDE * i + 13) % real
                    type_, title, subtitle, facts, _, concepts, files_read, files_modified, tool = pool.observations[a]
                    narrative = pool.observations[b][4]
                    prompt_number = j // OBSERVATIONS_PER_TURN + 1
                    if j % OBSERVATIONS_PER_TURN == 0:
                        turn_rows.append((len(turn_rows) + 1, s, prompt_number, project, now + i))
                    rows.append((i + 1, s, project, prompt_number, i + 1, tool, f"synthetic-{i}", type_,
                                 title, subtitle, facts, narrative, concepts, files_read, files_modified, now + i))
                    i += 1
                session_rows.append((s, f"synthetic-{s - 1}", project, f"/synthetic/{project}",
                                     pool.prompts[(s - 1) % len(pool.prompts)], len(turn_rows) - turns_before,
                                     now + i - size, now + i))
            connection.executemany(
                "INSERT INTO sessions (id, claude_session_id, project, cwd, first_prompt, prompt_counter, status,"
                " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, 'completed', ?, ?)", session_rows)
            connection.executemany(
                "INSERT INTO observations (id, session_db_id, project, prompt_number, event_id, tool_name, tool_use_id,"
                " type, title, subtitle, facts, narrative, concepts, files_read, files_modified, compressed,"
                " compressor, created_at, stored_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, 'offline', ?,"
                " ?16)", rows)
            connection.executemany(
                "INSERT INTO user_prompts (id, session_db_id, project, prompt_number, text, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                [(t, s, project, n, pool.prompts[t % len(pool.prompts)], at - 0.5)
                 for t, s, n, project, at in turn_rows])
            connection.executemany(
                "INSERT INTO session_summaries (id, session_db_id, project, prompt_number, event_id, request,"
                " investigated, learned, completed, next_steps, notes, compressed, compressor, created_at, stored_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, 'offline', ?12, ?12)",
                [(t, s, project, n, -t, *pool.summaries[t % len(pool.summaries)], at + OBSERVATIONS_PER_TURN - 0.5)
                 for t, s, n, project, at in turn_rows])
        turns = len(turn_rows)
        prompt_ids = [row_id for (row_id,) in connection.execute("SELECT id FROM user_prompts ORDER BY id")]
        copies = add_small_project(connection) if small_project else []
        connection.execute("PRAGMA optimize")
    finally:
        connection.close()
    inserted = time.perf_counter() - started

    # The vectors, in the order the rows were made.
    ids = np.arange(observations)
    vectors = 0.8 * pool.observation_vectors[ids % real] \
        + 0.2 * pool.observation_vectors[(NARRATIVE_STRIDE * ids + 13) % real]
    vectors = _unit(_unit(vectors) + rng.normal(0, NOISE / np.sqrt(DIMENSIONS), vectors.shape))
    labels = [np.array([label_of(OBSERVATION, int(i) + 1) for i in ids], dtype=np.uint64)]
    parts = [vectors]
    if copies:  # the small project's copies have the vectors of what they copy
        parts.append(vectors[np.array([copied - 1 for _, copied in copies])])
        labels.append(np.array([label_of(OBSERVATION, row_id) for row_id, _ in copies], dtype=np.uint64))
    parts.append(_unit(pool.prompt_vectors[np.array(prompt_ids) % len(pool.prompts)]
                       + rng.normal(0, 0.05 / np.sqrt(DIMENSIONS), (len(prompt_ids), DIMENSIONS))))
    labels.append(np.array([label_of(PROMPT, row_id) for row_id in prompt_ids], dtype=np.uint64))
    summary_ids = np.arange(1, turns + 1)
    parts.append(_unit(pool.summary_vectors[summary_ids % len(pool.summaries)]
                       + rng.normal(0, 0.05 / np.sqrt(DIMENSIONS), (turns, DIMENSIONS))))
    labels.append(np.array([label_of(SUMMARY, int(t)) for t in summary_ids], dtype=np.uint64))
    all_vectors, all_labels = np.concatenate(parts), np.concatenate(labels)

    index = HnswIndex(DIMENSIONS, MiniLMEmbedder().model_id)
    started = time.perf_counter()
    for start in range(0, len(all_labels), ADD_CHUNK):
        index.add(all_labels[start:start + ADD_CHUNK], all_vectors[start:start + ADD_CHUNK])
    built = time.perf_counter() - started
    accuracy = ann_recall(index, all_vectors, all_labels, rng)
    (data_dir / "index").mkdir(mode=0o700, exist_ok=True)
    started = time.perf_counter()
    size = index.save(data_dir / "index")
    saved = time.perf_counter() - started
    return {"observations": observations, "small_project_observations": len(copies), "prompts": len(prompt_ids),
            "summaries": turns, "sessions": len(sessions),
            "vectors": index.vectors, "sqlite_insert_seconds": round(inserted, 1),
            "index_build_seconds": round(built, 1), "index_build_vectors_per_second": round(index.vectors / built),
            "index_save_seconds": round(saved, 2), "index_file_mb": round(size / 2**20, 1),
            "index_recall_at_10": accuracy,
            "database_mb": round((data_dir / "sessionmem.db").stat().st_size / 2**20, 1)}


def ann_recall(index: HnswIndex, vectors: np.ndarray, labels: np.ndarray, rng: np.random.Generator, *,
               queries: int = 200) -> dict[str, float]:
    """How many of the exact 10 nearest the index returns (queries: stored vectors, perturbed), asked for
    10 (ef 64) and for 120 (what a search asks, ef 120)."""
    picked = vectors[rng.choice(len(vectors), size=queries, replace=False)]
    probes = _unit(picked + rng.normal(0, NOISE / np.sqrt(DIMENSIONS), picked.shape))
    exact = np.argsort(-(probes @ vectors.T), axis=1)[:, :10]
    found: dict[str, float] = {}
    for k in (10, 120):
        hits = 0
        for probe, truth in zip(probes, exact):
            returned = {label for label, _ in index.nearest(probe, k)[:10]}
            hits += len(returned.intersection(int(labels[i]) for i in truth))
        found[f"k={k}"] = round(hits / (10 * queries), 4)
    return found


# -- measuring ---------------------------------------------------------------------------------


def queries_from(pool: Pool) -> list[str]:
    """Short queries (the first few words of real prompts that have them), as a search tool is asked."""
    found = []
    for prompt in pool.prompts:
        terms = query_terms(prompt)
        if len(terms) >= QUERY_WORDS and all(len(term) < 30 for term in terms[:QUERY_WORDS]):
            found.append(" ".join(terms[:QUERY_WORDS]))
    return list(dict.fromkeys(found))


def prompt_queries_from(pool: Pool) -> list[str]:
    """Whole real prompts (cut at 500 characters), as SessionStart and prompt injection would use them."""
    return list(dict.fromkeys(p[:500] for p in pool.prompts if len(query_terms(p)) >= 3))


def _search_path(query: str, mode: str, limit: int = 20, kind: str = "", project: str = PROJECT) -> str:
    arguments = {"q": query, "mode": mode, "project": project, "limit": limit}
    return routes.SEARCH + "?" + urllib.parse.urlencode({**arguments, "kind": kind} if kind else arguments)


class Timer:
    """Latencies by name, in ms, and the blocks they fell in (for the spread)."""

    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = {}

    def add(self, name: str, seconds: float) -> None:
        self.samples.setdefault(name, []).append(seconds * 1000)

    def summary(self) -> dict[str, Any]:
        result = {}
        for name, values in self.samples.items():
            figures = percentiles(values)
            thirds = [values[i * len(values) // 3:(i + 1) * len(values) // 3] for i in range(3)]
            figures["p50_by_third"] = [round(statistics.median(t), 3) for t in thirds if t]
            result[name] = figures
        return result


class _Client:
    """One keep-alive connection to the worker, timing each GET; a connection the server closed is opened
    again (and counted) and the request sent again, untimed."""

    def __init__(self, worker: WorkerProcess) -> None:
        self._worker = worker
        self._connection: loadgen.Connection | None = None
        self.reconnects = 0

    async def get(self, path: str, timer: Timer | None = None, name: str = "") -> bytes:
        request = loadgen.encode_get("127.0.0.1", self._worker.port, path, self._worker.token)
        for attempt in range(2):
            if self._connection is None:
                self._connection = await loadgen.Connection.open("127.0.0.1", self._worker.port)
            started = time.perf_counter()
            try:
                status, body = await self._connection.roundtrip(request)
            except (ConnectionError, OSError, trio.BrokenResourceError):
                if attempt:
                    raise
                self.reconnects += 1
                await self.aclose()
                continue
            if timer is not None:
                timer.add(name, time.perf_counter() - started)
            if status != 200:
                raise RuntimeError(f"GET {path} -> {status}: {body[:300]!r}")
            return body
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        if self._connection is not None:
            connection, self._connection = self._connection, None
            await connection.aclose()


def _rss(pid: int) -> float:
    return round(_rss_mb(pid), 1)


def _wait_index_ready(worker: WorkerProcess, timeout: float = 600) -> dict[str, Any]:
    """Once the index is loaded, has every document's vector (none pending) and the embedder is loaded."""
    return worker.wait_until(lambda: (d := worker.get(routes.DEBUG))["index"]["state"] == "ready"
                             and not d["index"]["pending"] and d["embedder"]["embedder"]["loaded"] and d,
                             timeout=timeout)


async def _measure_scale(worker: WorkerProcess, queries: list[str], prompts: list[str], runs: int) -> dict[str, Any]:
    timer = Timer()
    found: dict[str, list[int]] = {}
    client = _Client(worker)
    context_path = routes.CONTEXT + "?" + urllib.parse.urlencode({"project": PROJECT, "source": "compact"})
    # A project with nothing stored yet, beside the 100,000: its reads must not walk theirs.
    new_project_path = routes.CONTEXT + "?" + urllib.parse.urlencode({"project": "bench-new", "source": "compact"})
    try:
        for warm in range(5):  # first requests load what is lazy
            await client.get(_search_path(queries[warm % len(queries)], "hybrid"))
        for i in range(runs):
            query = queries[i % len(queries)]
            for mode in ("hybrid", "fts", "vector"):
                body = await client.get(_search_path(query, mode), timer, f"search_{mode}")
                found.setdefault(mode, []).append(len(json.loads(body)["results"]))
            for mode in ("hybrid", "fts"):
                body = await client.get(_search_path(query, mode, project=SMALL_PROJECT), timer,
                                        f"search_{mode}_small_project")
                found.setdefault(f"{mode}_small_project", []).append(len(json.loads(body)["results"]))
            await client.get(_search_path(prompts[i % len(prompts)], "hybrid"), timer, "search_hybrid_whole_prompt")
            await client.get(context_path, timer, "context_inject_compact")
            await client.get(new_project_path, timer, "context_inject_new_project")
            await client.get(routes.HEALTH, timer, "health")
    finally:
        await client.aclose()
    headers = _context_headers(worker, context_path)
    return {"latency_ms": timer.summary(), "context_ranking": headers.get("x-sessionmem-ranking"),
            "context_observations_named": headers.get("x-sessionmem-observations"),
            "results_per_search": {mode: statistics.median(n) for mode, n in found.items()},
            "reconnects": client.reconnects}


async def _measure_filtered(worker: WorkerProcess, layout: list[tuple[str, int]], queries: list[str],
                            runs: int, cpu_blocks: tuple[int, int] = (CPU_BLOCKS, CPU_BLOCK_SEARCHES)
                            ) -> dict[str, Any]:
    """Each mode without a filter and with ``project`` set to a big, a medium and a small project (the
    medium and small ones in turn), interleaved; every result checked to be of the project asked.
    ``cpu_blocks``: the blocks of hybrid searches the worker's CPU time is read over, and searches a block."""
    timer = Timer()
    projects = {scope: [name for name, _ in layout if name.startswith(scope + "-")] for scope in FILTERED_SCOPES[1:]}
    found: dict[str, list[int]] = {}
    vectors: dict[str, dict[str, int]] = {}
    violations = 0
    client = _Client(worker)
    try:
        for warm in range(5):
            for names in projects.values():
                await client.get(_search_path(queries[warm % len(queries)], "hybrid",
                                              project=names[warm % len(names)]))
        for i in range(runs):
            query = queries[i % len(queries)]
            scopes = FILTERED_SCOPES[i % 4:] + FILTERED_SCOPES[:i % 4]  # no scope always first
            for scope in scopes:
                project = "*" if scope == "all" else projects[scope][i % len(projects[scope])]
                for mode in ("hybrid", "fts", "vector"):
                    name = f"{mode}_{scope}"
                    answer = json.loads(await client.get(_search_path(query, mode, project=project), timer, name))
                    found.setdefault(name, []).append(len(answer["results"]))
                    counted = vectors.setdefault(name, {})
                    counted[answer["vectors"]] = counted.get(answer["vectors"], 0) + 1
                    if scope != "all":
                        violations += sum(1 for hit in answer["results"] if hit["project"] != project)
        # The worker's CPU time per hybrid search of each scope (what latency is on an idle machine, and
        # what a busy one cannot blur): blocks of one scope at a time, the scopes in turn.
        cpu: dict[str, list[float]] = {}
        blocks, searches = cpu_blocks
        for block in range(blocks):
            for scope in FILTERED_SCOPES:
                names = projects.get(scope, ["*"])
                started = _cpu_seconds(worker.pid)
                for i in range(searches):
                    query = queries[(block * searches + i) % len(queries)]
                    await client.get(_search_path(query, "hybrid", project=names[i % len(names)]))
                cpu.setdefault(scope, []).append((_cpu_seconds(worker.pid) - started) * 1000 / searches)
    finally:
        await client.aclose()
    return {"latency_ms": timer.summary(), "results_per_search": {n: statistics.median(c) for n, c in found.items()},
            "worker_cpu_ms_per_hybrid_search": {scope: round(statistics.median(v), 2) for scope, v in cpu.items()},
            "vectors": vectors, "filter_violations": violations, "reconnects": client.reconnects,
            "projects": {scope: {"count": len(names), "observations": dict(layout)[names[0]]}
                         for scope, names in projects.items()}}


def measure_filtered(pool: Pool, work: Path, sizes: list[int], queries: list[str], runs: int, *,
                     reuse: bool, cpu_blocks: tuple[int, int] = (CPU_BLOCKS, CPU_BLOCK_SEARCHES)) -> dict[str, Any]:
    """Build (unless ``reuse`` finds them) and measure a store of each size laid out as :data:`FILTERED_LAYOUT`
    (``cpu_blocks``: see :func:`_measure_filtered`)."""
    result: dict[str, Any] = {}
    for size in sizes:
        layout = filtered_layout(size)
        data_dir = work / f"filtered-{size}"
        figures: dict[str, Any] = {}
        if not (reuse and (data_dir / "sessionmem.db").exists()):
            print(f"search_latency: building {size} observations over {len(layout)} projects", file=sys.stderr)
            figures["build"] = synthesize(pool, data_dir, size, layout=layout)
        print(f"search_latency: filtered and unfiltered search at {size}", file=sys.stderr)
        with start_worker(data_dir, env={"SESSIONMEM_COMPRESSOR": "offline"}, timeout=120) as worker:
            debug = _wait_index_ready(worker)
            figures["worker_rss_mb_ready"] = _rss(worker.pid)
            figures.update(trio.run(_measure_filtered, worker, layout, queries, runs, cpu_blocks))
            figures["worker_rss_mb_after"] = _rss(worker.pid)
            figures["index"] = {k: debug["index"][k] for k in ("vectors", "loadSeconds")}
        result[str(size)] = figures
    return result


def _measure_as_the_hook_asks(worker: WorkerProcess, runs: int) -> dict[str, Any]:
    """The SessionStart context and the health route through the hook's own client
    (``sessionmem.protocol.client``: blocking, a new connection each, ``Connection: close``),
    one after the other, nothing else in between: what a SessionStart hook waits for."""
    timer = Timer()
    context_path = routes.CONTEXT + "?" + urllib.parse.urlencode({"project": PROJECT, "source": "compact"})
    for _ in range(20):
        hook_client.request("127.0.0.1", worker.port, "GET", context_path, timeout=10, token=worker.token)
    for _ in range(runs):
        for name, path in (("context_inject_compact", context_path), ("health", routes.HEALTH)):
            started = time.perf_counter()
            reply = hook_client.request("127.0.0.1", worker.port, "GET", path, timeout=10, token=worker.token)
            timer.add(name, time.perf_counter() - started)
            if reply.status != 200:
                raise RuntimeError(f"GET {path} -> {reply.status}")
    return {"latency_ms": timer.summary()}


def _context_headers(worker: WorkerProcess, path: str) -> dict[str, str]:
    import urllib.request

    request = urllib.request.Request(worker.url + path, headers={"Authorization": f"Bearer {worker.token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return {k.lower(): v for k, v in response.headers.items()}


CLAUDE_MEM_SQL = (
    # claude-mem's SessionSearch.searchObservations (src/services/sqlite/SessionSearch.ts): the
    # query's tokens each quoted and ANDed, the project filter, FTS5's rank, LIMIT/OFFSET.
    "SELECT o.* FROM observations o JOIN observations_fts ON observations_fts.rowid = o.id"
    " WHERE observations_fts MATCH ? AND o.project = ? ORDER BY observations_fts.rank ASC LIMIT ? OFFSET ?")


def claude_mem_match(query: str) -> str:
    tokens = [token for token in query.split() if any(c.isalnum() for c in token)]
    return " AND ".join('"' + token.replace('"', '""') + '"' for token in tokens)


async def _measure_fts(worker: WorkerProcess, queries: list[str], runs: int) -> dict[str, Any]:
    """Ours over HTTP, claude-mem's SQL direct, our SQL direct, the HTTP round trip alone: interleaved."""
    timer = Timer()
    counts: dict[str, list[int]] = {"ours": [], "claude_mem": []}
    database = apsw.Connection(str(worker.data_dir / "sessionmem.db"), flags=apsw.SQLITE_OPEN_READONLY)
    plan = [row[3] for row in database.execute("EXPLAIN QUERY PLAN " + CLAUDE_MEM_SQL, ('"x"', PROJECT, 20, 0))]
    client = _Client(worker)
    filters = SearchFilters(project=PROJECT, kinds=(OBSERVATION,))
    try:
        for warm in range(5):
            await client.get(_search_path(queries[warm % len(queries)], "fts"))
        for i in range(runs):
            query = queries[i % len(queries)]
            body = await client.get(_search_path(query, "fts", kind=OBSERVATION), timer, "ours_fts_http_observations")
            counts["ours"].append(len(json.loads(body)["results"]))
            await client.get(_search_path(query, "fts"), timer, "ours_fts_http_all_kinds")
            started = time.perf_counter()
            rows = database.execute(CLAUDE_MEM_SQL, (claude_mem_match(query), PROJECT, 20, 0)).fetchall()
            timer.add("claude_mem_sql_observations", time.perf_counter() - started)
            counts["claude_mem"].append(len(rows))
            started = time.perf_counter()
            # What the worker's fts mode runs in SQL for one page of 20 (and one more, as SearchService asks).
            keys = fulltext.search_text(database, query_terms(query), filters, 21, every_word_first=True)
            cards.cards(database, [(key.kind, key.row_id) for key in keys[:20]])
            timer.add("ours_sql_observations", time.perf_counter() - started)
            await client.get(routes.HEALTH, timer, "health_http")
    finally:
        await client.aclose()
        database.close()
    return {"latency_ms": timer.summary(), "claude_mem_plan": plan, "reconnects": client.reconnects,
            "results": {name: {"median": statistics.median(n), "zero": sum(1 for x in n if x == 0), "of": len(n)}
                        for name, n in counts.items()}}


def _stop(pid: int, data_dir: Path, timeout: float = 60) -> None:
    try:
        oskit.terminate_process(pid)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not oskit.process_alive(pid):
            return
        time.sleep(0.05)
    oskit.kill_process(pid)


# --smoke: the cold SessionStart hook's wait for the worker it starts (see cold_session_start).
SMOKE_START_TIMEOUT_S = 30.0


def cold_session_start(data_dir: Path, runs: int, project: str = PROJECT, *,
                       start_timeout_s: float | None = None) -> dict[str, Any]:
    """Spawn the real SessionStart hook with no worker running; time it until it printed the context.

    ``start_timeout_s``: the hook's wait for the worker it starts (``SESSIONMEM_START_TIMEOUT``; by
    default the shipped one). On a loaded machine a start can outlast the shipped wait, and the hook
    then fails open with no context, as it should: ``--smoke`` waits longer, to check that a cold start
    does inject the project's memory, not how fast the machine is."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONMEM_", "ANTHROPIC_"))}
    env.update(SESSIONMEM_DATA_DIR=str(data_dir), SESSIONMEM_PORT="0", SESSIONMEM_COMPRESSOR="offline")
    if start_timeout_s is not None:
        env["SESSIONMEM_START_TIMEOUT"] = str(start_timeout_s)
    payload = json.dumps({"session_id": "cold-start", "hook_event_name": "SessionStart", "source": "startup",
                          "cwd": f"/synthetic/{project}", "transcript_path": ""}).encode()
    wall: list[float] = []
    injected: list[int] = []
    for _ in range(runs):
        started = time.perf_counter()
        result = subprocess.run([sys.executable, "-S", str(HOOK_ENTRY), "SessionStart"], input=payload, env=env,
                                capture_output=True, timeout=60)
        wall.append((time.perf_counter() - started) * 1000)
        output = json.loads(result.stdout) if result.stdout.strip() else {}
        injected.append(len(output.get("hookSpecificOutput", {}).get("additionalContext", "")))
        state = json.loads((data_dir / "worker.json").read_text()) if (data_dir / "worker.json").exists() else None
        if state is not None:
            _stop(state["pid"], data_dir)
        time.sleep(0.5)
    return {"runs": runs, "wall_ms": percentiles(wall), "all_ms": [round(w) for w in wall],
            "context_chars": {"min": min(injected), "max": max(injected)}}


def _largest_project(data_dir: Path) -> str:
    connection = apsw.Connection(str(data_dir / "sessionmem.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return connection.execute("SELECT project FROM observations GROUP BY project ORDER BY count(*) DESC"
                                  " LIMIT 1").fetchone()[0]
    finally:
        connection.close()


def _count_observations(data_dir: Path, project: str = PROJECT) -> int:
    database = apsw.Connection(str(data_dir / "sessionmem.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return int(database.execute("SELECT count(*) FROM observations WHERE project = ?", (project,)).fetchone()[0])
    finally:
        database.close()


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - started


def summary(result: dict[str, Any]) -> str:
    """The figures the targets are about, as a markdown table (every figure is in the JSON)."""
    scale, fts = result["scale"]["latency_ms"], result["fts"]["latency_ms"]
    hook = result["scale"]["as_the_hook_asks"]["latency_ms"]
    build = result.get("build_scale", {})
    n_scale, n_fts = result["stored_observations"]["scale"], result["stored_observations"]["fts"]
    n_small = result["stored_observations"]["small_project"]

    def ms(figures: dict[str, Any]) -> str:
        return f"{figures['p50']:.1f} ms (p95 {figures['p95']:.1f})"

    rows = [
        (f"hybrid search, {n_scale} observations, query embedded (4-word queries)", ms(scale["search_hybrid"])),
        (f"hybrid search, {n_scale}, a whole prompt as the query", ms(scale["search_hybrid_whole_prompt"])),
        (f"fts search, {n_scale}", ms(scale["search_fts"])),
        (f"vector search, {n_scale}", ms(scale["search_vector"])),
        (f"hybrid search, a project of {n_small} beside them", ms(scale["search_hybrid_small_project"])),
        (f"fts search, a project of {n_small} beside them", ms(scale["search_fts_small_project"])),
        (f"SessionStart context (source=compact, ranking {result['scale']['context_ranking']}), {n_scale}",
         ms(scale["context_inject_compact"])),
        (f"SessionStart context of a project with nothing stored, beside {n_scale}",
         ms(scale["context_inject_new_project"])),
        ("HTTP round trip alone (GET /api/health)", ms(scale["health"])),
        (f"SessionStart context as the hook asks (its client, a connection each, nothing in between), {n_scale}",
         ms(hook["context_inject_compact"])),
        ("HTTP round trip alone, as the hook asks", ms(hook["health"])),
        (f"fts search over HTTP, {n_fts}, observations", ms(fts["ours_fts_http_observations"])),
        (f"fts search over HTTP, {n_fts}, every kind", ms(fts["ours_fts_http_all_kinds"])),
        (f"our fts SQL in-process, {n_fts}, observations", ms(fts["ours_sql_observations"])),
        (f"claude-mem's FTS5 query in-process, {n_fts}", ms(fts["claude_mem_sql_observations"])),
        ("cold SessionStart (hook + worker start), large store",
         ms(result["cold_session_start"]["scale"]["wall_ms"])),
        ("cold SessionStart, replayed corpus", ms(result["cold_session_start"]["source"]["wall_ms"])),
    ]
    if build:
        rows.append(("index build (HNSW add)", f"{build['index_build_vectors_per_second']} vectors/s"))
    if "catch_up" in result:
        rows.append(("catch-up (embed + add, MiniLM)", f"{result['catch_up']['documents_per_second']} documents/s"))
    rss = result["scale"]["rss_mb"]
    rows.append(("worker RSS: vectors off / index and embedder loaded",
                 f"{rss['worker_vectors_off']} / {rss['index_and_embedder_loaded']} MiB"))
    return "\n".join(["| figure | measured |", "|---|---|", *(f"| {name} | {value} |" for name, value in rows)])


def filtered_summary(filtered: dict[str, Any]) -> str:
    """p50 (p95) by mode, each store a column group, each scope a row."""
    sizes = list(filtered)
    header = "| search | " + " | ".join(f"{mode} at {int(size):,}" for size in sizes for mode in ("hybrid", "fts", "vector"))
    rows = [header + " |", "|---|" + "---|" * (3 * len(sizes))]
    for scope in FILTERED_SCOPES:
        cells = []
        for size in sizes:
            latency = filtered[size]["latency_ms"]
            cells += [f"{latency[f'{mode}_{scope}']['p50']:.1f} ({latency[f'{mode}_{scope}']['p95']:.1f})"
                      for mode in ("hybrid", "fts", "vector")]
        label = "no filter" if scope == "all" else (
            f"project: {scope} ({filtered[sizes[-1]]['projects'][scope]['observations']:,} observations at"
            f" {int(sizes[-1]):,})")
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    cpu = [f"{int(size):,}: " + ", ".join(f"{scope} {ms:.1f}" for scope, ms in
                                         filtered[size]["worker_cpu_ms_per_hybrid_search"].items())
           for size in sizes]
    rss = ", ".join(f"{int(size):,}: {filtered[size]['worker_rss_mb_after']} MiB" for size in sizes)
    violations = sum(figures["filter_violations"] for figures in filtered.values())
    rows.append(f"\nms, p50 (p95); results of another project than the one asked: {violations}"
                f"\nworker CPU ms per hybrid search: {'; '.join(cpu)}\nworker RSS: {rss}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, help="a data dir with replayed corpus and its vectors "
                        "(default: replay --projects projects and time the catch-up)")
    parser.add_argument("--corpus", type=Path, default=retrieval.DEFAULT_CORPUS)
    parser.add_argument("--projects", type=int, default=3,
                        help="corpus projects replayed for the source (the most prompts first; 0: all)")
    parser.add_argument("--observations", type=int, default=100_000)
    parser.add_argument("--fts-observations", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=300, help="measured rounds of every request kind")
    parser.add_argument("--cold-runs", type=int, default=10)
    parser.add_argument("--work", type=Path, help="where the data dirs go (default: a temporary dir)")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    parser.add_argument("--reuse", action="store_true", help="measure the stores already built in --work (the replayed source too)")
    parser.add_argument("--filtered-sizes", type=lambda text: [int(n) for n in text.split(",")],
                        default=list(FILTERED_SIZES), help="observations of each store of many projects, comma-separated")
    parser.add_argument("--filtered-only", action="store_true",
                        help="measure the stores of many projects only (filtered and unfiltered search)")
    parser.add_argument("--smoke", action="store_true",
                        help="a few seconds of everything: a test fixtures' project, 2,000 and 1,000 observations")
    args = parser.parse_args(argv)
    if args.smoke:
        if args.corpus == retrieval.DEFAULT_CORPUS:
            args.corpus = retrieval.SMOKE_CORPUS
        # One fixture project (the one with the most prompts: 23 documents to embed), enough real texts
        # and vectors to scale up and five short queries: the catch-up's embedding runs at the lowest
        # CPU priority, and on a busy machine it was most of the smoke's time.
        args.projects, args.observations, args.fts_observations = 1, 2000, 1000
        args.runs, args.cold_runs, args.filtered_sizes = 10, 1, [2000]

    result: dict[str, Any] = {"meta": {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                                       "command": " ".join(sys.argv), "cores": os.cpu_count()}}
    with tempfile.TemporaryDirectory(prefix="sessionmem-latency-") as temporary:
        work = args.work or Path(temporary)
        source = args.source
        if source is None and args.reuse and (work / "source" / "sessionmem.db").exists():
            source = work / "source"  # replayed and caught up by an earlier run: no catch-up to time
        if source is None:
            source = work / "source"
            projects = retrieval.load_projects(args.corpus, ConversionStats())[: args.projects or None]
            print(f"search_latency: replaying {len(projects)} projects, then timing the catch-up", file=sys.stderr)
            result["catch_up"] = trio.run(_replay_source, source, projects)
        pool = load_pool(source)
        result["pool"] = {"observations": len(pool.observations), "prompts": len(pool.prompts),
                          "summaries": len(pool.summaries)}
        queries, prompts = queries_from(pool), prompt_queries_from(pool)
        result["queries"] = {"short": len(queries), "examples": queries[:5], "whole_prompts": len(prompts)}
        cpu_blocks = (SMOKE_CPU_BLOCKS, SMOKE_CPU_BLOCK_SEARCHES) if args.smoke else (CPU_BLOCKS, CPU_BLOCK_SEARCHES)
        result["filtered"] = measure_filtered(pool, work, args.filtered_sizes, queries, args.runs, reuse=args.reuse,
                                              cpu_blocks=cpu_blocks)
        if args.filtered_only:
            print(filtered_summary(result["filtered"]))
            write_json(result, args.out)
            return 0

        for name, count in (("scale", args.observations), ("fts", args.fts_observations)):
            if args.reuse and (work / name / "sessionmem.db").exists():
                continue
            print(f"search_latency: building {count} observations", file=sys.stderr)
            result[f"build_{name}"] = synthesize(pool, work / name, count, small_project=name == "scale")
        # A store built before the small project had it gets it now (the worker embeds it at start).
        writer = open_writer(work / "scale" / "sessionmem.db")
        try:
            add_small_project(writer)
        finally:
            writer.close()
        result["stored_observations"] = {name: _count_observations(work / name) for name in ("scale", "fts")}
        result["stored_observations"]["small_project"] = _count_observations(work / "scale", SMALL_PROJECT)

        print("search_latency: worker RSS without vectors", file=sys.stderr)
        with start_worker(work / "scale", env={"SESSIONMEM_COMPRESSOR": "offline", "SESSIONMEM_EMBEDDER": "none"},
                          timeout=120) as bare:
            time.sleep(1.0)
            rss_without = _rss(bare.pid)
        print("search_latency: the worker on the large store", file=sys.stderr)
        # No relevance floor: the SessionStart measured hands over what meaning ranked, whatever the
        # synthetic prompts' similarity to the synthetic memories (the floor filters only what is read).
        with start_worker(work / "scale", env={"SESSIONMEM_COMPRESSOR": "offline",
                                               "SESSIONMEM_RECALL_MIN_SIMILARITY": "0"}, timeout=120) as worker:
            rss_ready = _rss(worker.pid)
            debug, waited = _timed(lambda: _wait_index_ready(worker))
            rss_loaded = _rss(worker.pid)
            result["scale"] = trio.run(_measure_scale, worker, queries, prompts, args.runs)
            result["scale"]["as_the_hook_asks"] = _measure_as_the_hook_asks(worker, args.runs)
            result["scale"]["index"] = {k: debug["index"][k] for k in (
                "vectors", "capacity", "pending", "loadSeconds", "rebuilds", "lastRebuildReason")}
            result["scale"]["rss_mb"] = {"worker_vectors_off": rss_without, "at_ready": rss_ready,
                                         "index_and_embedder_loaded": rss_loaded,
                                         "after_measuring": _rss(worker.pid)}
            result["scale"]["seconds_until_index_ready"] = round(waited, 1)
        print("search_latency: fts beside claude-mem's query", file=sys.stderr)
        with start_worker(work / "fts", env={"SESSIONMEM_COMPRESSOR": "offline"}, timeout=120) as worker:
            _wait_index_ready(worker)
            result["fts"] = trio.run(_measure_fts, worker, queries, args.runs)
        print("search_latency: cold SessionStart", file=sys.stderr)
        wait = SMOKE_START_TIMEOUT_S if args.smoke else None
        result["cold_session_start"] = {
            "scale": cold_session_start(work / "scale", args.cold_runs, start_timeout_s=wait),
            "source": cold_session_start(source, args.cold_runs, _largest_project(source), start_timeout_s=wait)}
    print(summary(result))
    print()
    print(filtered_summary(result["filtered"]))
    write_json(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
