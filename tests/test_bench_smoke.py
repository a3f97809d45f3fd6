"""A short run of the benchmark (a few sessions of every scenario): the report is written and nothing is lost."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent


def test_bench_smoke_run_writes_a_report_with_no_loss(tmp_path: Path) -> None:
    out = tmp_path / "report"
    corpus = REPO / "tests" / "fixtures" / "transcripts"  # stable: a copy of corpus samples
    result = subprocess.run([sys.executable, str(REPO / "bench" / "run.py"), "--smoke", "--corpus", str(corpus),
                             "--out", str(out)],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    results = report["results"]
    assert set(results) >= {"replay_http", "replay_hooks", "throughput", "openloop", "context", "python_baseline"}
    for name in ("replay_http", "replay_hooks"):
        assert results[name]["observations_expected"] > 0
        assert results[name]["lost"] == 0 and results[name]["duplicates"] == 0 and results[name]["unexpected"] == 0
    assert results["replay_hooks"]["hook_failures"] == 0
    assert results["replay_hooks"]["hook_wall_ms"]["PostToolUse"]["n"] > 0
    assert results["throughput"]["worker_median_per_s"] > 0 and results["throughput"]["bare_median_per_s"] > 0
    assert results["openloop"]["statuses"] == {"202": results["openloop"]["requests"]}
    # The machine's floor: the same schedule against the bare endpoint, every request answered.
    assert results["openloop"]["bare_statuses"] == {"202": results["openloop"]["requests"]}
    assert results["openloop"]["bare_accept_ms"]["n"] == results["openloop"]["requests"]
    assert results["openloop"]["loop"]["samples"] > 0  # the worker's event loop, watched during the open loop
    assert results["context"]["observations_in_project"] == 300
    for name in ("replay_http", "replay_hooks", "throughput", "openloop", "context"):
        disk = results[name]["data_dir_bytes"]  # what the worker left on disk, the WAL's size with it
        assert disk["at_end"]["db"] > 0 and 0 <= disk["at_end"]["wal"] <= disk["wal_peak"], (name, disk)
    for plot in ("accept_latency.png", "hook_wall_time.png", "worker_rss_cpu.png", "accept_to_stored.png"):
        assert (out / plot).stat().st_size > 1000
    summary = (out / "summary.md").read_text()
    assert "| replay_http:" in summary and "## Targets" in summary and "| WAL at the end of each scenario" in summary
    assert "the worker's event loop late by" in summary


def test_retrieval_smoke_evaluates_both_halves_and_finds_by_meaning(tmp_path: Path) -> None:
    """The fixtures' transcripts, a seeded project and the fixtures' written queries, every mode, both halves, and
    the sweep. The embedder and the offline compressor are deterministic: so are these figures."""
    out = tmp_path / "retrieval.json"
    result = subprocess.run([sys.executable, str(REPO / "bench" / "retrieval.py"), "--smoke", "--sweep", "--out",
                             str(out)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    halves = report["halves"]
    written = (REPO / "tests" / "fixtures" / "eval-queries.jsonl").read_text().splitlines()
    assert report["queries"]["written_left_out"] == []  # every fixture answer is stored
    assert halves["tune"]["counts"]["queries"] > 0 and halves["held_out"]["counts"]["queries"] > 0
    assert sum(halves[half]["counts"]["written"] for half in ("tune", "held_out")) == len(written)
    assert {row["half"] for row in report["per_query"]} == {"tune", "held_out"}
    for half in ("tune", "held_out", "both"):
        groups = [halves[half]["all"], halves[half]["no_shared_words"], *halves[half]["by_category"].values(),
                  *halves[half]["by_project"].values()]
        for by_ranking in groups:
            for name, figures in by_ranking.items():
                for metric in ("recall@5", "recall@10", "mrr", "ndcg@10"):
                    low, high = figures["interval"][metric]
                    assert 0.0 <= low <= figures[metric] <= high <= 1.0, (half, name, metric, figures)
    both = halves["both"]
    queries = both["counts"]["queries"]
    assert both["all"]["hybrid"]["queries"] == queries and both["all"]["fts"]["queries"] == queries
    assert report["vectors"] > 0 and report["vectors_in_searches"] == {"used": 2 * queries}
    # Fusion keeps the best of both sides: over the smoke set, at least either mode alone.
    fused, words, meaning = (both["all"][mode] for mode in ("hybrid", "fts", "vector"))
    for metric in ("recall@5", "recall@10", "mrr"):
        assert fused[metric] >= max(words[metric], meaning[metric]), (metric, both["all"])
    # ... and per query: what either side ranks in its first three, hybrid has in its first ten.
    for row in report["per_query"]:
        ranks = row["first_relevant"]
        if any(ranks[mode] is not None and ranks[mode] <= 3 for mode in ("fts", "vector")):
            assert ranks["hybrid"] is not None, row
    # The paraphrases share no word with their answers: words find none of them, meaning (and so hybrid) all.
    unshared = both["no_shared_words"]
    assert unshared["fts"]["queries"] >= 5 and unshared["fts"]["recall@10"] == 0.0
    assert unshared["vector"]["recall@10"] == 1.0 and unshared["hybrid"]["recall@10"] == 1.0
    # Two sessions a day apart about one file, the later prompt in other words: found first by meaning.
    seeded = report["seeded"]
    assert seeded["shares_words"] is False
    assert seeded["first_relevant_rank"]["fts"] is None
    assert seeded["first_relevant_rank"]["vector"] == 1 and seeded["first_relevant_rank"]["hybrid"] == 1
    # The sweep runs the shipped search too: its figures are the evaluation's, on either half.
    rows = report["sweep"]["rows"]
    assert len(rows) > 3 and all("tune" in row for row in rows)
    for row in rows:
        if "shipped" in row.get("chosen", []):
            for half in ("tune", "held_out"):
                swept, evaluated = row[half]["all"], halves[half]["all"][row["mode"]]
                assert {m: swept[m] for m in ("queries", "recall@10", "mrr")} == {
                    m: evaluated[m] for m in ("queries", "recall@10", "mrr")}, (row["name"], half)
    assert sum("shipped" in row.get("chosen", []) for row in rows) == 3
    assert "### Held-out half" in result.stdout and "| hybrid | " in result.stdout
    assert "hybrid − fts (paired" in result.stdout and "| paraphrase (" in result.stdout


def test_handover_eval_smoke_scores_every_surface_against_its_baselines(tmp_path: Path) -> None:
    """The fixtures' short sessions and the seeded project replayed into a worker process: every figure of every
    surface, baseline and half is computed and a fraction; what they are is the benchmark's business."""
    out = tmp_path / "handover.json"
    result = subprocess.run([sys.executable, str(REPO / "bench" / "handover_eval.py"), "--smoke", "--out", str(out)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    surfaces = ("session_start", "prompt_recall", "file_recall", "all", "compaction")
    for half in ("tune", "held_out"):
        assert report[half]["all"]["handover"]["sessions"] > 0, half
        for surface in surfaces:
            for baseline in ("handover", "recency", "nothing"):
                figures = report[half][surface][baseline]
                for measure in ("precision", "recall"):
                    for category, value in figures[measure].items():
                        assert value is None or 0.0 <= value <= 1.0, (half, surface, baseline, measure, category)
                for category, needed in figures["needed"].items():
                    assert 0 <= figures["found"][category] <= needed, (half, surface, baseline, category)
            assert report[half][surface]["nothing"]["observations"] == 0
            assert report[half][surface]["nothing"]["characters"] == 0
        assert report[half]["session_start"]["handover"]["characters"] > 0
    # The fixtures' v2.0 session compacts once: the context after it is scored, the session's own work first.
    assert sum(report[half]["compaction"]["handover"]["sessions"] for half in ("tune", "held_out")) == 1
    assert sum(report[half]["compaction"]["handover"]["characters"] for half in ("tune", "held_out")) > 0
    assert len(report["per_session"]) == sum(project["scored"] for project in report["meta"]["projects"]) > 0
    # The seeded project's second session reads the file the first one changed: the handover names it.
    assert sum(report[half]["all"]["handover"]["found"]["files"] for half in ("tune", "held_out")) >= 1
    assert "### Held-out half" in result.stdout and "| session_start | recency |" in result.stdout
    assert report["meta"]["consolidation"]["enabled"] and report["meta"]["consolidation"]["caughtUp"]
    # What if SessionStart handed over less: read from the same file's lines.
    trimmed = subprocess.run([sys.executable, str(REPO / "bench" / "handover_trim.py"), str(out)],
                             capture_output=True, text=True, timeout=60)
    assert trimmed.returncode == 0, trimmed.stderr[-3000:]
    assert "| no SessionStart at all |" in trimmed.stdout and "### held_out" in trimmed.stdout


def test_catch_up_smoke_times_the_index_catching_up_after_a_backfill(tmp_path: Path) -> None:
    out = tmp_path / "catch_up.json"
    corpus = REPO / "tests" / "fixtures" / "transcripts"
    # One fixture project (a session of 21 tool uses): a backfill, then a catch-up of some 20 documents.
    result = subprocess.run([sys.executable, str(REPO / "bench" / "catch_up.py"), "--corpus", str(corpus),
                             "--projects", "v1.0-inline-sidechain", "--rounds", "1", "--out", str(out)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = json.loads(out.read_text())["runs"]
    assert run["name"] == "this tree" and run["lost"] == 0 and run["accepted"] > 0
    assert run["documents"] == run["vectors"] > 0 and run["catch_up_seconds"] > 0
    assert run["model_id"].startswith("all-MiniLM-L6-v2-int8-dynamic@") and run["peak_worker_rss_mb"] > 0


def test_search_latency_smoke_measures_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "latency.json"
    result = subprocess.run([sys.executable, str(REPO / "bench" / "search_latency.py"), "--smoke",
                             "--work", str(tmp_path / "work"), "--out", str(out)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["catch_up"]["documents"] > 0 and report["catch_up"]["documents_per_second"] > 0
    assert report["build_scale"]["observations"] == 2000 and report["build_scale"]["index_build_vectors_per_second"] > 0
    latency = report["scale"]["latency_ms"]
    for name in ("search_hybrid", "search_fts", "search_vector", "context_inject_compact", "health"):
        assert latency[name]["n"] == 10 and latency[name]["p50"] > 0, name
    as_the_hook_asks = report["scale"]["as_the_hook_asks"]["latency_ms"]
    assert as_the_hook_asks["context_inject_compact"]["n"] == 10 and as_the_hook_asks["health"]["p50"] > 0
    assert report["scale"]["results_per_search"]["hybrid"] > 0
    assert report["scale"]["context_ranking"] == "meaning"
    assert report["scale"]["rss_mb"]["index_and_embedder_loaded"] > report["scale"]["rss_mb"]["worker_vectors_off"]
    fts = report["fts"]["latency_ms"]
    assert fts["ours_fts_http_observations"]["n"] == 10 and fts["claude_mem_sql_observations"]["n"] == 10
    cold = report["cold_session_start"]["scale"]
    assert cold["runs"] == 1 and cold["context_chars"]["min"] > 0
    filtered = report["filtered"]["2000"]  # a store of many projects: each mode, with a project filter and without
    for scope in ("all", "big", "medium", "small"):
        for mode in ("hybrid", "fts", "vector"):
            assert filtered["latency_ms"][f"{mode}_{scope}"]["n"] == 10, (mode, scope)
        assert filtered["vectors"][f"vector_{scope}"] == {"used": 10}
        assert filtered["worker_cpu_ms_per_hybrid_search"][scope] > 0
    assert filtered["filter_violations"] == 0 and filtered["results_per_search"]["hybrid_medium"] > 0


def test_gil_trips_measures_the_writer_beside_a_busy_thread(tmp_path: Path) -> None:
    out = tmp_path / "gil.json"
    result = subprocess.run([sys.executable, str(REPO / "bench" / "gil_trips.py"), "--smoke", "--out", str(out)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = json.loads(out.read_text())
    assert [run["switch_interval_ms"] for run in runs] == [5.0, 0.5]  # CPython's default, then the worker's
    for run in runs:
        for phase in ("idle", "busy"):
            assert all(run[phase][figure]["p50_ms"] > 0 for figure in ("accept", "store_64", "accept_burst", "store_burst"))
        assert run["busy"]["busy_thread_loops_per_s"] > 0
    assert "switch interval 0.5 ms: accept" in result.stdout


def test_edge_cost_prices_the_edge_and_fingerprints_what_redaction_gives_back() -> None:
    corpus = REPO / "tests" / "fixtures" / "transcripts"
    runs = [subprocess.run([sys.executable, str(REPO / "bench" / "edge_cost.py"), "--corpus", str(corpus)],
                           capture_output=True, text=True, timeout=300) for _ in range(2)]
    assert all(run.returncode == 0 for run in runs), runs[0].stderr[-3000:]
    first, second = (json.loads(run.stdout) for run in runs)
    assert first["events"] > 0 and first["accept"]["n"] == first["events"]
    total = first["redaction_total"]
    assert total["fields"] >= first["events"] and total["best_ms"] > 0
    assert total["digest"] == second["redaction_total"]["digest"]  # the same input, the same output


def test_compressor_cost_smoke_counts_what_each_backend_sends(tmp_path: Path) -> None:
    """Each LLM backend on the calc session and one fixture session, against the scripted servers (claude-code
    through the pinned CLI): every tool use stored by the model, every request counted, tokens as reported."""
    out = tmp_path / "cost"
    result = subprocess.run([sys.executable, str(REPO / "bench" / "compressor_cost.py"), "--smoke", "--out", str(out)],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "compressor_cost.json").read_text())
    runs = {(r["scenario"], r["backend"]): r for r in report["results"]}
    backends = ("anthropic", "claude-code", "openai-compatible")
    assert set(runs) == {(scenario, backend) for scenario in ("calc", "corpus") for backend in backends}
    for run in runs.values():
        stored = run["stored"]
        assert stored["observations"] == stored["observations_by_model"] == run["observations_expected"] > 0, run
        assert run["requests"] == run["observation_requests"] + run["summary_requests"] and run["side_requests"] == []
        assert run["observation_requests"] >= 1 and run["statuses"] == [200]
        assert run["chars"] > run["text_chars"] >= run["ours_chars"] > 0
        # Tokens as the backend read them from the reply (the CLI's result for claude-code) are the server's.
        assert run["worker_counted_tokens"] == {"input": run["input_tokens"], "output": run["output_tokens"]} != {
            "input": 0, "output": 0}
    calc = {backend: runs[("calc", backend)] for backend in backends}
    assert calc["anthropic"]["stored"]["observations"] == 9  # the recorded session's 8 tool uses, its subagent's report
    # Whatever the CLI adds (about 1,200 characters of text a request), a tenth of what claude-mem's observer sends.
    assert calc["claude-code"]["chars_per_observation"] < report["peer_calc"]["per_observation"] / 10
    # The anthropic and openai-compatible backends send our prompt alone; the CLI adds to each request.
    assert calc["anthropic"]["added_text_chars_per_request_range"] == [0, 0]
    assert calc["openai-compatible"]["added_text_chars_per_request_range"] == [0, 0]
    assert 0 < calc["claude-code"]["added_text_chars_per_request_median"] <= 1_600
    assert "| calc | claude-code |" in result.stdout and "claude-mem's observer" in result.stdout
