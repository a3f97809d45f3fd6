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
    assert results["context"]["observations_in_project"] == 300
    for name in ("replay_http", "replay_hooks", "throughput", "openloop", "context"):
        disk = results[name]["data_dir_bytes"]  # what the worker left on disk, the WAL's size with it
        assert disk["at_end"]["db"] > 0 and 0 <= disk["at_end"]["wal"] <= disk["wal_peak"], (name, disk)
    for plot in ("accept_latency.png", "hook_wall_time.png", "worker_rss_cpu.png", "accept_to_stored.png"):
        assert (out / plot).stat().st_size > 1000
    summary = (out / "summary.md").read_text()
    assert "| replay_http:" in summary and "## Targets" in summary and "| WAL at the end of each scenario" in summary
