"""Retrieval quality on the corpus: recall@5, recall@10, MRR and nDCG@10 of ``hybrid``, ``fts`` and ``vector``.

    .venv/bin/python bench/retrieval.py [--data-dir DIR [--reuse]] [--queries PATH ...] [--sweep] [--out FILE]
    .venv/bin/python bench/retrieval.py --check [--data-dir DIR]   # the written query files, and their answers
    .venv/bin/python bench/retrieval.py --smoke

How the evaluation is built (bench/README.md holds the method in full and the figures):

1. **Replay.** Each corpus repository (``transcripts/<owner>__<repo>``) is one project,
   named after the repository. Its sessions are replayed in the order they started, one
   at a time, each session's events in order and dated by the transcript (``occurredAt``,
   as ``sessionmem backfill`` sends them), into a worker in this process
   (:func:`sessionmem.testing.harness.open_worker`: the offline compressor, the real
   MiniLM embedder, the real vector index). Before each prompt the worker is left to
   finish, so everything before a prompt is stored as the compressor would have it.
   At the end the vector index catches up. ``--data-dir D --reuse`` evaluates a replay
   an earlier run left in ``D`` again, without replaying.
2. **Queries** (``eval_queries.py``): every stored prompt with its earlier observations
   touching the files its turn touched, and the written queries of ``bench/queries/``
   with the observations of the tool uses that answer them. Each is in the tune or the
   held-out half by a hash of its id.
3. **Search** (``eval_search.py``): each query in each mode through ``SearchService.search``
   (what ``GET /api/search`` calls) on the worker's store, index and embedder, and two
   baselines for prompt-derived queries.
4. **Metrics** (``eval_metrics.py``, ``eval_report.py``): per half, per category, per
   project and for the queries sharing no word with their answers, with 95 % bootstrap
   intervals; hybrid minus each single mode, paired.

``--sweep`` (``eval_sweep.py``) evaluates other settings of the search on the tune half,
and the best of each mode on the held-out half. ``--smoke`` replays the test fixtures'
transcripts and a seeded two-session project (:func:`seeded_project`) with the fixtures'
written queries (``tests/fixtures/eval-queries.jsonl``), and sweeps the first and last
setting of each family (:func:`eval_sweep.smoke_settings`), in a few seconds.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import apsw
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

import eval_queries  # noqa: E402
import eval_report  # noqa: E402
from eval_queries import (  # noqa: E402
    EARLIER,
    EARLIER_SESSIONS,
    HALVES,
    Located,
    Query,
    QueryFileError,
    UnmatchedAnswers,
)
from eval_search import RememberingEmbedder, rank  # noqa: E402
from eval_sweep import SearchParts, Setting, smoke_settings, sweep, sweep_table  # noqa: E402
from json_out import write_json  # noqa: E402

from sessionmem.protocol.requests import encoded_call  # noqa: E402
from sessionmem.replay.convert import ConversionStats, HookEvent, ReplaySession, convert, transcript_files  # noqa: E402
from sessionmem.search import context  # noqa: E402
from sessionmem.search.hybrid import SearchService  # noqa: E402
from sessionmem.testing.harness import InProcessWorker, open_worker  # noqa: E402

BENCH = Path(__file__).resolve().parent
DEFAULT_CORPUS = BENCH.parent.parent / "shared" / "corpus" / "transcripts"
SMOKE_CORPUS = BENCH.parent / "tests" / "fixtures" / "transcripts"
DEFAULT_QUERIES = BENCH / "queries"
SMOKE_QUERIES = BENCH.parent / "tests" / "fixtures" / "eval-queries.jsonl"
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


# --smoke adds this project: two sessions a day apart about one file, the second one's
# prompt sharing no word with what the first stored. Its query must find the first
# session's work: by meaning alone.
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
    first = session("seeded-1", start, "Invoice totals should be rounded to whole cents before display", [
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


@dataclass
class Evaluation:
    """The queries of one replay, what each ranking found for them, and the written answers not stored."""

    queries: list[Query]  # prompt-derived (scope EARLIER) and written
    earlier_sessions: list[Query]  # prompt-derived, scope EARLIER_SESSIONS
    unmatched: list[UnmatchedAnswers]


def build_queries(db_path: Path, written: Sequence[Located]) -> Evaluation:
    connection = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        written_queries, unmatched = eval_queries.written_queries(connection, written)
        return Evaluation(
            eval_queries.prompt_queries(connection, EARLIER, recent=context.CANDIDATES) + written_queries,
            eval_queries.prompt_queries(connection, EARLIER_SESSIONS, recent=context.CANDIDATES), unmatched)
    finally:
        connection.close()


async def run(projects: list[Project], data_dir: Path, written: Sequence[Located], *, sweeping: bool = False,
              swept: Sequence[Setting] | None = None, reuse: bool = False) -> dict[str, Any]:
    """``sweeping``: and the sweep, over ``swept`` (default: every setting, :func:`eval_sweep.settings`)."""
    async with open_worker(data_dir, batch_quiet_s=0.05, mailbox_size=4096) as worker:
        started = time.monotonic()
        sent = 0 if reuse else await replay(worker, projects)
        replayed = time.monotonic() - started
        await worker.services.index.caught_up()
        indexed = time.monotonic() - started
        index = worker.services.index.statistics()
        started = time.monotonic()
        evaluation = await trio.to_thread.run_sync(build_queries, worker.settings.db_path, written)
        built = time.monotonic() - started
        # The worker's search, its embedder remembering each query's vector: a query is searched in several
        # modes, and the embedder gives a text the same vector every time.
        services = worker.services
        parts = SearchParts(services.store, services.index, RememberingEmbedder(services.embedder))
        search = SearchService(parts.store, parts.index, parts.embedder)
        vectors_used: dict[str, int] = {}
        rankings = await rank(search, evaluation.queries, vectors_used=vectors_used)
        earlier_sessions = await rank(search, evaluation.earlier_sessions)
        searched = time.monotonic() - started - built
        started = time.monotonic()
        swept_rows = await sweep(parts, evaluation.queries, swept) if sweeping else None
        sweep_seconds = time.monotonic() - started
    queries = evaluation.queries
    result: dict[str, Any] = {
        "requests": sent, "replay_seconds": round(replayed, 1), "replay_and_index_seconds": round(indexed, 1),
        "documents_embedded": index.added, "vectors": index.vectors,
        "catch_up_per_second": None if reuse else round(index.added / max(indexed, 1e-9), 1),
        "query_building_seconds": round(built, 1), "search_seconds": round(searched, 1),
        "queries": {
            "total": len(queries), "by_half": {h: sum(q.half == h for q in queries) for h in HALVES},
            "written_left_out": [{"id": u.id, "where": u.where, "missing_answers": list(u.missing),
                                  "skipped": u.skipped} for u in evaluation.unmatched],
            "relevant_per_query": _spread([len(q.relevant) for q in queries])},
        "vectors_in_searches": vectors_used,
        "halves": eval_report.by_half(queries, eval_report.scores_of(queries, rankings)),
        EARLIER_SESSIONS: eval_report.by_half(evaluation.earlier_sessions,
                                              eval_report.scores_of(evaluation.earlier_sessions, earlier_sessions)),
        "per_query": eval_report.per_query(queries, rankings),
    }
    seeded = next((q for q in queries if q.project == SEEDED_PROJECT and q.text == SEEDED_QUERY), None)
    if seeded is not None:
        result["seeded"] = {"query": seeded.text, "relevant": sorted(seeded.relevant),
                            "shares_words": seeded.shares_words,
                            "first_relevant_rank": next(row["first_relevant"] for row in result["per_query"]
                                                        if row["id"] == seeded.id)}
    if swept_rows is not None:
        result["sweep"] = swept_rows
        result["sweep_seconds"] = round(sweep_seconds, 1)
    return result


def _spread(values: list[int]) -> dict[str, float]:
    values = sorted(values) or [0]
    return {"median": values[len(values) // 2], "mean": round(sum(values) / len(values), 1), "max": values[-1]}


def load_written(paths: Sequence[Path], *, smoke: bool) -> list[Located]:
    """The written queries of ``paths``; the queries folder's files are named after their project."""
    files = eval_queries.query_files(path for path in paths if path.exists())
    return eval_queries.load_written(files, file_named_after_project=not smoke)


def check(written: Sequence[Located], data_dir: Path | None) -> int:
    """``--check``: the written queries' counts, and (with a replay) the answers it does not hold."""
    categories: dict[str, int] = {}
    for item in written:
        categories[item.query.category] = categories.get(item.query.category, 0) + 1
    print(f"{len(written)} written queries, well formed: "
          + ", ".join(f"{count} {category}" for category, count in sorted(categories.items())))
    if data_dir is None or not (data_dir / "sessionmem.db").exists():
        print("no replay given (--data-dir): answers not checked")
        return 0
    connection = apsw.Connection(str(data_dir / "sessionmem.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        queries, unmatched = eval_queries.written_queries(connection, written)
    finally:
        connection.close()
    report_unmatched(unmatched, sys.stdout)
    unshared = [q for q in queries if not q.shares_words]
    print(f"{len(queries)} queries with an answer in the replay: "
          + ", ".join(f"{sum(q.half == h for q in queries)} {h}" for h in HALVES)
          + f"; {len(unshared)} share no word with their answers"
          + (f" ({', '.join(q.id for q in unshared)})" if unshared else ""))
    return 1 if unmatched else 0


def report_unmatched(unmatched: Sequence[UnmatchedAnswers], stream: Any) -> None:
    for u in unmatched:
        outcome = "left out: none of its answers is stored" if u.skipped else "kept with the others"
        print(f"written query {u.id} ({u.where}): answers not in the replay: {', '.join(u.missing)}; {outcome}",
              file=stream)


def print_tables(result: dict[str, Any], *, sweeping: bool) -> None:
    for half in HALVES:
        report = result["halves"][half]
        print(f"\n### {eval_report.HALF_TITLES[half]}: {eval_report.describe(report)}\n")
        print(eval_report.modes_table(report))
        print()
        print(eval_report.differences(report))
        print(f"\n{eval_report.HALF_TITLES[half]}, by category (written queries) and for prompt-derived ones:\n")
        print(eval_report.subsets_table(report, "by_category"))
        print(f"\n{eval_report.HALF_TITLES[half]}, by project:\n")
        print(eval_report.subsets_table(report, "by_project"))
    for half in HALVES:
        report = result[EARLIER_SESSIONS][half]
        print(f"\n### {eval_report.HALF_TITLES[half]}, prompt-derived queries, eligible only what earlier sessions"
              f" stored: {report['counts']['queries']} queries\n")
        print(eval_report.modes_table(report))
    if "seeded" in result:
        print(f"\nseeded query: first answer at rank {result['seeded']['first_relevant_rank']}")
    if sweeping:
        sweep_result = result["sweep"]
        print(f"\n### Sweep: {sweep_result['tune_queries']} tune queries, {sweep_result['held_out_queries']} held-out;"
              f" chosen by the {sweep_result['criterion']}\n")
        print(sweep_table(sweep_result))


def _commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=BENCH).stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS,
                        help="transcripts, one folder per project (the shared corpus by default)")
    parser.add_argument("--projects", type=int, default=DEFAULT_PROJECTS,
                        help="replay the N projects with the most prompts (default 0: all)")
    parser.add_argument("--queries", type=Path, action="append",
                        help="written query files, or folders of them (default: bench/queries; --smoke: the fixtures')")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    parser.add_argument("--data-dir", type=Path, help="keep the worker's data here (default: a temporary dir)")
    parser.add_argument("--reuse", action="store_true",
                        help="--data-dir already holds the replayed projects: evaluate only")
    parser.add_argument("--smoke", action="store_true",
                        help="a few seconds: the test fixtures' transcripts (not the corpus) and a seeded project")
    parser.add_argument("--sweep", action="store_true",
                        help="also evaluate other settings of the search (eval_sweep.py) on the tune half")
    parser.add_argument("--check", action="store_true",
                        help="only check the written query files (and, with --data-dir, that their answers are stored)")
    args = parser.parse_args(argv)

    try:
        written = load_written(args.queries or [SMOKE_QUERIES if args.smoke else DEFAULT_QUERIES], smoke=args.smoke)
    except QueryFileError as exc:
        print(f"retrieval: {exc}", file=sys.stderr)
        return 2
    if args.check:
        return check(written, args.data_dir)
    if args.reuse and not (args.data_dir and (args.data_dir / "sessionmem.db").exists()):
        parser.error("--reuse needs a --data-dir holding a replay")

    projects: list[Project] = []
    stats = ConversionStats()
    corpus = SMOKE_CORPUS if args.smoke and args.corpus == DEFAULT_CORPUS else args.corpus
    if not args.reuse:
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
        started = time.monotonic()
        result = trio.run(partial(run, projects, data_dir, written, sweeping=args.sweep,
                                  swept=smoke_settings() if args.smoke else None, reuse=args.reuse))
    result["total_seconds"] = round(time.monotonic() - started, 1)
    result["meta"] = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                      "command": shlex.join([sys.executable, *sys.argv]), "commit": _commit(),
                      "cores": os.cpu_count(), "corpus": None if args.reuse else str(corpus),
                      "written_queries": len(written),
                      "projects": [{"name": p.name, "sessions": len(p.sessions), "prompts": p.prompts,
                                    "tool_uses": p.tool_uses} for p in projects]}
    unmatched = [eval_queries.UnmatchedAnswers(u["id"], u["where"], tuple(u["missing_answers"]), u["skipped"])
                 for u in result["queries"]["written_left_out"]]
    report_unmatched(unmatched, sys.stderr)
    print_tables(result, sweeping=args.sweep)
    skipped = [u.id for u in unmatched if u.skipped]
    if skipped:
        print(f"\n{len(skipped)} written queries left out, none of their answers stored: {', '.join(skipped)}")
    print(f"{result['vectors']} vectors; replay + index {result['replay_and_index_seconds']} s, queries "
          f"{result['query_building_seconds']} s, searches {result['search_seconds']} s, total "
          f"{result['total_seconds']} s", file=sys.stderr)
    write_json(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
