"""Retrieval quality on the corpus: recall@5, recall@10 and MRR of ``hybrid``, ``fts`` and ``vector``.

    .venv/bin/python bench/retrieval.py [--projects N] [--sweep] [--out FILE] [--smoke]

How the evaluation is built (bench/README.md holds the latest figures):

1. **Replay.** Each corpus repository (``transcripts/<owner>__<repo>``) is one project,
   named after the repository. Its sessions are replayed in the order they started, one
   at a time, each session's events in order and dated by the transcript (``occurredAt``,
   as ``sessionmem backfill`` sends them), into a worker in this process
   (:func:`sessionmem.testing.harness.open_worker`: the offline compressor, the real
   MiniLM embedder, the real vector index). Before each prompt the worker is left to
   finish, so everything before a prompt is stored as the compressor would have it.
   At the end the vector index catches up.
2. **Queries.** Every stored prompt is a query: its text, cut to the API's
   ``MAX_QUERY_CHARS``, searched in its own project among the observations stored before
   it (``until=`` the prompt's ``created_at``, ``kind=observation``).
3. **Relevance.** The files the prompt's turn touched (read or modified: the
   ``observation_files`` of the observations of that prompt) define what was relevant
   to it: the earlier observations of the project touching any of those files. A
   prompt whose turn touched no file that anything before it had touched has no
   relevant observation and is not a query.
4. **No shared words.** A query belongs to the no-shared-words subset when the
   search's own words of the query (``storage.fulltext.query_terms``: its words less
   stopwords, any of them) match none of its relevant observations in
   ``observations_fts`` -- the same tokenizer and the same Porter stemming as the
   search, so ``fixing`` and ``fixed`` count as shared. Full-text search cannot find
   any answer of these queries; only meaning can.
5. **Metrics**, per query, averaged: recall@k = relevant among the first k results /
   min(k, relevant) (capped, so a query with 40 relevant observations can reach 1.0);
   MRR = 1 / rank of the first relevant result (0 when none is in the first 10).
6. **Two scopes**: everything stored before the prompt (``earlier``), and only what
   earlier sessions stored (``earlier_sessions``: memory proper; a session's own turns
   are still in Claude's context). Two baselines beside the modes: the newest eligible
   observations whatever the query (``recency``), and SessionStart's ranking (nearest by
   meaning plus a recency bonus).

``--sweep`` evaluates again under other fusion constants, weights, vector cut-offs and
full-text budgets (module constants patched for the run; each query embedded once).
``--smoke`` replays the test fixtures' transcripts and a seeded two-session project
(:func:`seeded_project`) in a few seconds, and reports where each mode ranks its answer.

Every search goes through the worker's own path (``SearchService.search``, what
``GET /api/search`` calls) with the worker's settings.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import apsw
import trio

from sessionmem.protocol.limits import MAX_QUERY_CHARS
from sessionmem.protocol.requests import encoded_call
from sessionmem.records import OBSERVATION, RankedKey, SearchFilters
from sessionmem.replay.convert import ConversionStats, HookEvent, ReplaySession, convert, transcript_files
from sessionmem.search import context, hybrid
from sessionmem.search.hybrid import SearchMode, SearchService
from sessionmem.storage import fulltext
from sessionmem.testing.harness import InProcessWorker, open_worker

DEFAULT_CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "corpus" / "transcripts"
SMOKE_CORPUS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "transcripts"
MODES = (SearchMode.HYBRID, SearchMode.FTS, SearchMode.VECTOR)
# Two scopes: what was stored before the prompt (any earlier turn), and what earlier
# sessions stored (memory proper: a session's own turns are still in Claude's context).
SCOPES = ("earlier", "earlier_sessions")
SCOPE_TITLES = {"earlier": "Eligible: everything stored before the prompt",
                "earlier_sessions": "Eligible: what earlier sessions stored (before the query's session began)"}
# Baselines beside the three modes: the newest eligible observations first, whatever the
# query; and SessionStart's ranking (nearest by meaning fused with recency).
RECENCY = "recency (baseline)"
MEANING_AND_RECENCY = "meaning + recency (SessionStart's ranking)"
BASELINES = (RECENCY, MEANING_AND_RECENCY)
CUTOFFS = (5, 10)
DEPTH = max(CUTOFFS)
# Every project of the corpus by default (about 6 minutes on 2 cores, most of it
# embedding); --projects N takes the N with the most prompts.
DEFAULT_PROJECTS = 0


@dataclass
class Project:
    name: str
    sessions: list[ReplaySession]

    @property
    def prompts(self) -> int:
        return sum(1 for s in self.sessions for e in s.events if e.stage == "UserPromptSubmit")

    @property
    def tool_uses(self) -> int:
        return sum(s.tool_uses for s in self.sessions)


@dataclass
class Query:
    prompt_id: int
    project: str
    text: str
    until: float  # only observations stored before this are eligible
    files: list[str]
    relevant: set[int]
    shares_words: bool = True
    recent: list[int] = field(default_factory=list)  # the baseline: the newest eligible observations first


@dataclass
class Scores:
    recall: dict[int, list[float]] = field(default_factory=lambda: {k: [] for k in CUTOFFS})
    reciprocal_ranks: list[float] = field(default_factory=list)

    def add(self, found: Sequence[int], relevant: set[int]) -> None:
        for k in CUTOFFS:
            self.recall[k].append(len(relevant.intersection(found[:k])) / min(k, len(relevant)))
        rank = next((i for i, row_id in enumerate(found[:DEPTH], start=1) if row_id in relevant), None)
        self.reciprocal_ranks.append(1.0 / rank if rank else 0.0)

    def summary(self) -> dict[str, Any]:
        n = len(self.reciprocal_ranks)
        mean = (lambda values: round(statistics.fmean(values), 4) if values else 0.0)
        return {"queries": n, **{f"recall@{k}": mean(self.recall[k]) for k in CUTOFFS},
                "mrr": mean(self.reciprocal_ranks)}


# --smoke adds this project: two sessions a day apart about one file, the second one's
# prompt in other words than the first's. Its query must find the first session's work.
SEEDED_PROJECT = "seeded-shop"
SEEDED_FILE = "/home/dev/shop/src/billing/invoice.py"
SEEDED_QUERY = "Customers complain that the money amounts they are charged are a penny wrong"


def seeded_project(start: float = 1_700_000_000.0) -> Project:
    """:data:`SEEDED_PROJECT` as hook events (what the converter makes of a transcript)."""
    def session(session_id: str, at: float, prompt: str, tools: list[tuple[str, dict[str, Any], Any]],
                answer: str) -> ReplaySession:
        base = {"session_id": session_id, "cwd": "/home/dev/shop", "transcript_path": ""}
        events = [HookEvent(at, "UserPromptSubmit", {**base, "hook_event_name": "UserPromptSubmit", "prompt": prompt},
                            f"{session_id}:prompt")]
        for n, (tool, tool_input, response) in enumerate(tools, start=1):
            events.append(HookEvent(at + n, "PostToolUse", {
                **base, "hook_event_name": "PostToolUse", "tool_name": tool, "tool_input": tool_input,
                "tool_response": response, "tool_use_id": f"{session_id}-tool-{n}"}, f"{session_id}:tool:{n}"))
        events.append(HookEvent(at + len(tools) + 1, "Stop", {**base, "hook_event_name": "Stop",
                                                              "last_assistant_message": answer}, f"{session_id}:stop"))
        return ReplaySession(session_id, base["cwd"], events)

    code = "def invoice_total(lines):\n    total = sum(line.price * line.quantity for line in lines)\n    return total\n"
    first = session("seeded-1", start, "Invoice totals should be rounded to whole cents before they are shown", [
        ("Read", {"file_path": SEEDED_FILE}, {"type": "text", "file": {"filePath": SEEDED_FILE, "content": code}}),
        ("Edit", {"file_path": SEEDED_FILE, "old_string": "    return total",
                  "new_string": "    return round(total, 2)  # cents"}, {"filePath": SEEDED_FILE}),
        ("Bash", {"command": "pytest -q tests/test_invoice.py", "description": "Run the invoice tests"},
         {"stdout": "3 passed in 0.02s", "stderr": "", "interrupted": False}),
    ], "Invoice totals are now rounded to cents; the tests pass.")
    second = session("seeded-2", start + 86_400, SEEDED_QUERY, [
        ("Read", {"file_path": SEEDED_FILE}, {"type": "text", "file": {"filePath": SEEDED_FILE, "content": code}}),
    ], "The rounding is in invoice_total.")
    return Project(SEEDED_PROJECT, [first, second])


def load_projects(corpus: Path, stats: ConversionStats) -> list[Project]:
    """One project per repository folder of the corpus (or the corpus itself when it has none), most prompts first."""
    folders = sorted(p for p in corpus.iterdir() if p.is_dir()) if corpus.is_dir() else []
    sources = folders or [corpus]
    projects = []
    for folder in sources:
        sessions = convert(transcript_files(folder), stats)
        sessions.sort(key=lambda s: (s.events[0].at if s.events else 0.0, s.session_id))
        name = folder.name.split("__", 1)[-1]
        if sessions:
            projects.append(Project(name, sessions))
    projects.sort(key=lambda p: (-p.prompts, p.name))
    return projects


async def replay(worker: InProcessWorker, projects: list[Project]) -> int:
    """Every project's sessions, in the order they started, one event at a time; returns requests sent."""
    sent = 0
    for project in projects:
        for session in project.sessions:
            for event in session.events:
                if event.stage == "SessionStart":
                    continue  # a read: nothing to store
                call = encoded_call(event.payload, project=project.name, key=event.key, occurred_at=event.at)
                if call is None:
                    continue
                if event.stage == "UserPromptSubmit":
                    await worker.wait_idle(timeout=600)  # everything before the prompt is stored before it
                method, path, body = call
                reply = await worker.request(method, path, raw=body)
                if reply.status >= 300 and reply.status != 503:
                    raise RuntimeError(f"{method} {path} -> {reply.status}: {reply.body[:300]!r}")
                while reply.status == 503:
                    await trio.sleep(0.05)
                    reply = await worker.request(method, path, raw=body)
                sent += 1
    await worker.wait_idle(timeout=600)
    return sent


def build_queries(db_path: Path, scope: str) -> list[Query]:
    """The queries of ``scope`` (one of :data:`SCOPES`), their relevant observations, and whether they share a
    word with them (module docstring)."""
    connection = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        prompts = connection.execute(
            "SELECT p.id, s.project, p.text, p.created_at, s.created_at, p.session_db_id, p.prompt_number"
            " FROM user_prompts p JOIN sessions s ON s.id = p.session_db_id ORDER BY p.id").fetchall()
        queries = []
        for prompt_id, project, text, prompt_at, session_at, session_db_id, prompt_number in prompts:
            until = prompt_at if scope == "earlier" else session_at
            files = [path for (path,) in connection.execute(
                "SELECT DISTINCT f.path FROM observation_files f JOIN observations o ON o.id = f.observation_id"
                " WHERE o.session_db_id = ? AND o.prompt_number = ? ORDER BY f.path", (session_db_id, prompt_number))]
            relevant = {row_id for (row_id,) in connection.execute(
                "SELECT DISTINCT o.id FROM observations o JOIN observation_files f ON f.observation_id = o.id"
                " WHERE o.project = ? AND o.created_at < ? AND f.path IN (SELECT value FROM json_each(?))",
                (project, until, json.dumps(files)))}
            if not relevant:
                continue
            query = Query(prompt_id, project, text[:MAX_QUERY_CHARS], until, files, relevant)
            query.recent = [row_id for (row_id,) in connection.execute(
                "SELECT id FROM observations WHERE project = ? AND created_at < ? ORDER BY created_at DESC, id DESC"
                " LIMIT ?", (project, until, context.CANDIDATES))]
            terms = fulltext.query_terms(query.text)
            expression = " OR ".join(f'"{term}"' for term in terms)
            query.shares_words = bool(terms) and connection.execute(
                "SELECT count(*) FROM observations_fts WHERE observations_fts MATCH ?"
                " AND rowid IN (SELECT value FROM json_each(?))",
                (expression, json.dumps(sorted(relevant)))).fetchone()[0] > 0
            queries.append(query)
        return queries
    finally:
        connection.close()


async def evaluate(search: SearchService, queries: list[Query], modes: Sequence[SearchMode] = MODES, *,
                   baselines: bool = True) -> dict[str, Any]:
    """Each query in each mode through ``search``; metrics for all queries, the subset, and each project."""
    subsets = ("all", "no_shared_words", *sorted({q.project for q in queries}))
    names = [mode.value for mode in modes] + (list(BASELINES) if baselines else [])
    scores: dict[str, dict[str, Scores]] = {subset: {name: Scores() for name in names} for subset in subsets}
    vectors_used: dict[str, int] = {}
    for query in queries:
        filters = SearchFilters(project=query.project, until=query.until, kinds=(OBSERVATION,))
        rankings = {}
        for mode in modes:
            results = await search.search(query.text, filters, mode=mode, limit=DEPTH)
            if mode is not SearchMode.FTS:
                vectors_used[results.vectors] = vectors_used.get(results.vectors, 0) + 1
            rankings[mode.value] = [result.id for result in results.results]
        if baselines:
            rankings[RECENCY] = query.recent[:DEPTH]
            # SessionStart's own ranking (search/context.py): closeness to the prompt plus a
            # recency bonus, over as many nearest and recent candidates as it reads.
            nearest = await search.search(query.text, filters, mode=SearchMode.VECTOR, limit=context.CANDIDATES)
            relevant = [RankedKey(OBSERVATION, r.id, r.score) for r in nearest.results]
            rankings[MEANING_AND_RECENCY] = context.ranked(relevant, query.recent)[:DEPTH]
        for name, found in rankings.items():
            for subset in ("all", query.project) + (() if query.shares_words else ("no_shared_words",)):
                scores[subset][name].add(found, query.relevant)
    metrics = {subset: {mode: s.summary() for mode, s in by_mode.items()} for subset, by_mode in scores.items()}
    result = {"metrics": {"all": metrics.pop("all"), "no_shared_words": metrics.pop("no_shared_words")},
              "per_project": metrics, "vectors_in_searches": vectors_used}
    if len(modes) > 1 and SearchMode.HYBRID in modes:
        # Is hybrid's lead over each other mode more than the luck of these queries?
        ours = scores["all"][SearchMode.HYBRID.value]
        result["hybrid_minus"] = {
            other.value: {f"recall@{DEPTH}": paired_interval(ours.recall[DEPTH], scores["all"][other.value].recall[DEPTH]),
                          "mrr": paired_interval(ours.reciprocal_ranks, scores["all"][other.value].reciprocal_ranks)}
            for other in modes if other is not SearchMode.HYBRID}
    return result


# What --sweep varies: the fusion's constant and weights, the vector distance cut-off, and
# the full-text row budget (storage.fulltext.MATCH_BUDGET; None: the shipped value).
SWEEP_RRF_K = (5, 10, 20, 60)
SWEEP_WEIGHTS = ((1.0, 1.0), (1.0, 0.5), (0.5, 1.0))
SWEEP_MAX_DISTANCE = (0.8, 0.9, 1.0)
SWEEP_MATCH_BUDGET = (250, 500, 1000, 2000, 4000, 10**9)

Setting = tuple[SearchMode, int | None, tuple[float, float] | None, float | None, int | None]


class _RememberingEmbedder:
    """The worker's embedder, each query embedded once for the whole sweep (the same vector every time)."""

    def __init__(self, embedder: Any) -> None:
        self._embedder = embedder
        self._vectors: dict[str, Any] = {}

    async def embed(self, texts: list[str], *, urgent: bool = False) -> list[Any]:
        missing = [text for text in texts if text not in self._vectors]
        if missing:
            self._vectors.update(zip(missing, await self._embedder.embed(missing, urgent=urgent)))
        return [self._vectors[text] for text in texts]


async def sweep(worker: InProcessWorker, queries: dict[str, list[Query]]) -> list[dict[str, Any]]:
    """Metrics under other cut-offs, fusion constants, weights and full-text budgets (the real search, its
    module constants patched for the run)."""
    services = worker.services
    embedder: Any = _RememberingEmbedder(services.embedder)
    saved = hybrid.RRF_K, hybrid.MAX_VECTOR_DISTANCE, fulltext.MATCH_BUDGET
    settings: list[Setting] = [(SearchMode.FTS, None, None, None, budget) for budget in SWEEP_MATCH_BUDGET]
    settings += [(SearchMode.VECTOR, None, None, distance, None) for distance in SWEEP_MAX_DISTANCE]
    settings += [(SearchMode.HYBRID, k, weights, distance, None) for k, weights, distance
                 in itertools.product(SWEEP_RRF_K, SWEEP_WEIGHTS, SWEEP_MAX_DISTANCE)]
    rows = []
    try:
        for mode, k, weights, distance, budget in settings:
            hybrid.RRF_K = k or saved[0]
            hybrid.MAX_VECTOR_DISTANCE = saved[1] if distance is None else distance
            fulltext.MATCH_BUDGET = budget or saved[2]
            search = SearchService(services.store, services.index, embedder, weights=weights or (1.0, 1.0))
            row: dict[str, Any] = {"mode": mode.value, "rrf_k": k, "weights": weights, "max_vector_distance": distance,
                                   "match_budget": budget}
            for scope, scoped in queries.items():
                metrics = (await evaluate(search, scoped, (mode,), baselines=False))["metrics"]
                row[scope] = {subset: metrics[subset][mode.value] for subset in ("all", "no_shared_words")}
            rows.append(row)
    finally:
        hybrid.RRF_K, hybrid.MAX_VECTOR_DISTANCE, fulltext.MATCH_BUDGET = saved
    return rows


def paired_interval(a: Sequence[float], b: Sequence[float], *, rounds: int = 2000,
                    seed: int = 1) -> tuple[float, float, float]:
    """Mean of ``a - b`` (per query) and its 95 % bootstrap interval, queries resampled."""
    rng = random.Random(seed)
    differences = [x - y for x, y in zip(a, b)]
    if not differences:
        return 0.0, 0.0, 0.0
    means = sorted(statistics.fmean(rng.choices(differences, k=len(differences))) for _ in range(rounds))
    return (round(statistics.fmean(differences), 3), round(means[int(0.025 * rounds)], 3),
            round(means[int(0.975 * rounds)], 3))


async def run(projects: list[Project], data_dir: Path, *, sweeping: bool = False,
              reuse: bool = False) -> dict[str, Any]:
    async with open_worker(data_dir, batch_quiet_s=0.05, mailbox_size=4096) as worker:
        started = time.monotonic()
        sent = 0 if reuse else await replay(worker, projects)
        replayed = time.monotonic() - started
        await worker.services.index.caught_up()
        indexed = time.monotonic() - started
        index = worker.services.index.statistics()
        queries = {scope: build_queries(worker.settings.db_path, scope) for scope in SCOPES}
        started = time.monotonic()
        scopes = {}
        for scope, scoped in queries.items():
            relevant = [len(q.relevant) for q in scoped] or [0]
            scopes[scope] = {
                "queries": len(scoped),
                "queries_no_shared_words": sum(1 for q in scoped if not q.shares_words),
                "queries_per_project": {p.name: sum(1 for q in scoped if q.project == p.name) for p in projects},
                "relevant_per_query": {"median": statistics.median(relevant),
                                       "mean": round(statistics.fmean(relevant), 1), "max": max(relevant)},
                **await evaluate(worker.services.search, scoped),
            }
        searched = time.monotonic() - started
        seeded = [q for q in queries["earlier"] if q.project == SEEDED_PROJECT]
        found_seeded = await seeded_ranks(worker.services.search, seeded[0]) if seeded else None
        swept = await sweep(worker, queries) if sweeping else None
    result = {"requests": sent, "replay_seconds": round(replayed, 1), "replay_and_index_seconds": round(indexed, 1),
              "documents_embedded": index.added, "vectors": index.vectors,
              "catch_up_per_second": round(index.added / max(indexed, 1e-9), 1) if not reuse else None,
              "search_seconds": round(searched, 1), "scopes": scopes}
    if swept is not None:
        result["sweep"] = swept
    if found_seeded is not None:
        result["seeded"] = found_seeded
    return result


async def seeded_ranks(search: SearchService, query: Query) -> dict[str, Any]:
    """Where each mode ranks the first answer of the seeded query (``None``: not in its first 10)."""
    filters = SearchFilters(project=query.project, until=query.until, kinds=(OBSERVATION,))
    ranks: dict[str, int | None] = {}
    for mode in MODES:
        found = [r.id for r in (await search.search(query.text, filters, mode=mode, limit=DEPTH)).results]
        ranks[mode.value] = next((i for i, row_id in enumerate(found, start=1) if row_id in query.relevant), None)
    return {"query": query.text, "relevant": sorted(query.relevant), "shares_words": query.shares_words,
            "first_relevant_rank": ranks}


def table(scope: dict[str, Any]) -> str:
    """The markdown table of one scope's metrics: modes side by side, all queries and the subset."""
    lines = ["| queries | ranking | recall@5 | recall@10 | MRR |", "|---|---|---|---|---|"]
    for subset, label in (("all", "all"), ("no_shared_words", "no shared words")):
        for mode, m in scope["metrics"][subset].items():
            if not m["queries"]:
                continue
            lines.append(f"| {label} ({m['queries']}) | {mode} | {m['recall@5']:.3f} | {m['recall@10']:.3f} "
                         f"| {m['mrr']:.3f} |")
    return "\n".join(lines)


def sweep_table(rows: list[dict[str, Any]]) -> str:
    head = "| mode | RRF_K | weights (words, meaning) | MAX_VECTOR_DISTANCE | MATCH_BUDGET |"
    rule = "|---|---|---|---|---|"
    for scope in SCOPES:
        head += f" {scope}: R@5 | R@10 | MRR | no shared words: R@10 | MRR |"
        rule += "---|---|---|---|---|"
    lines = [head, rule]
    for row in rows:
        weights = f"{row['weights'][0]:g}, {row['weights'][1]:g}" if row["weights"] else "–"
        distance = "–" if row["max_vector_distance"] is None else f"{row['max_vector_distance']:g}"
        budget = {None: "–", 10**9: "none"}.get(row["match_budget"], str(row["match_budget"]))
        line = f"| {row['mode']} | {row['rrf_k'] or '–'} | {weights} | {distance} | {budget} |"
        for scope in SCOPES:
            a, n = row[scope]["all"], row[scope]["no_shared_words"]
            line += (f" {a['recall@5']:.3f} | {a['recall@10']:.3f} | {a['mrr']:.3f} | {n['recall@10']:.3f}"
                     f" | {n['mrr']:.3f} |")
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS,
                        help="transcripts, one folder per project (the shared corpus by default)")
    parser.add_argument("--projects", type=int, default=DEFAULT_PROJECTS,
                        help="replay the N projects with the most prompts (default 0: all)")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    parser.add_argument("--data-dir", type=Path, help="keep the worker's data here (default: a temporary dir)")
    parser.add_argument("--reuse", action="store_true",
                        help="--data-dir already holds the replayed projects: evaluate only")
    parser.add_argument("--smoke", action="store_true",
                        help="a few seconds: the test fixtures' transcripts (not the corpus) and a seeded project")
    parser.add_argument("--sweep", action="store_true",
                        help="also evaluate hybrid under other RRF_K, weights and MAX_VECTOR_DISTANCE values")
    args = parser.parse_args(argv)

    stats = ConversionStats()
    corpus = SMOKE_CORPUS if args.smoke and args.corpus == DEFAULT_CORPUS else args.corpus
    projects = load_projects(corpus, stats)
    if args.projects and not args.smoke:
        projects = projects[: args.projects]
    if args.smoke:
        projects.append(seeded_project())
    described = ", ".join(f"{p.name} ({len(p.sessions)} sessions, {p.prompts} prompts, {p.tool_uses} tool uses)"
                          for p in projects)
    print(f"retrieval: replaying {described}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="sessionmem-retrieval-") as temporary:
        data_dir = args.data_dir or Path(temporary) / "data"
        if args.reuse and not (data_dir / "sessionmem.db").exists():
            parser.error("--reuse needs a --data-dir holding a replay")
        result = trio.run(partial(run, projects, data_dir, sweeping=args.sweep, reuse=args.reuse))
    result["meta"] = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "command": " ".join(sys.argv),
                      "cores": os.cpu_count(), "corpus": str(corpus),
                      "projects": [{"name": p.name, "sessions": len(p.sessions), "prompts": p.prompts,
                                    "tool_uses": p.tool_uses} for p in projects]}
    for scope, figures in result["scopes"].items():
        print(f"\n{SCOPE_TITLES[scope]}\n")
        print(table(figures))
        for other, intervals in figures.get("hybrid_minus", {}).items():
            print(f"hybrid - {other}: " + ", ".join(f"{name} {mean:+.3f} (95% CI {low:+.3f} .. {high:+.3f})"
                                                  for name, (mean, low, high) in intervals.items()))
    if "seeded" in result:
        print(f"\nseeded query: first answer at rank {result['seeded']['first_relevant_rank']}")
    if args.sweep:
        print()
        print(sweep_table(result["sweep"]))
    print(f"{result['vectors']} vectors; replay + index {result['replay_and_index_seconds']} s, "
          f"searches {result['search_seconds']} s", file=sys.stderr)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
