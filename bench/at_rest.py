"""Bytes per stored tool use at rest, before and after retention: ``.venv/bin/python bench/at_rest.py``.

What a user's data dir holds after importing their past sessions, measured the way they
would make it:

1. a fresh data dir and a worker as shipped (offline compressor, the minilm embedder),
   but with its hourly retention off (``raw_retention_days`` 0) for this first stage: the
   corpus is months old, and its first round, a minute after the start, would prune it
   before the first measure;
2. ``sessionmem backfill CORPUS`` (the command line); then wait until every event is
   stored and every document has its vector, and 15 s more, so the checkpointer truncates
   the WAL of an idle database as it does for a user; sizes taken with the worker
   running, then once more after it stopped (the vector index saved);
3. the worker again, ``sessionmem prune --older-than 0 --vacuum`` (backfilled
   observations keep their transcript's time, all of it past: every raw payload goes);
   the same sizes.

"Bytes per tool use" is (database + WAL + vector index) ÷ stored observations. The
database is broken down by table with SQLite's ``dbstat``. Writes ``at_rest.json`` in
``--out`` (default ``bench/results/at-rest-<timestamp>``) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import apsw

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sampler import WalWatcher, data_dir_bytes  # noqa: E402

from sessionmem.testing.worker_process import WorkerProcess, start_worker  # noqa: E402

DEFAULT_CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "corpus" / "transcripts"
IDLE_S = 15.0  # longer than the checkpointer's idle time (10 s): the WAL of an idle database is truncated
# Tables of the database, grouped for the breakdown (FTS5 keeps each index in shadow tables).
GROUPS = {"journal_payloads": "raw events (journal_payloads)", "journal": "journal", "observations": "observations",
          "observations_fts": "observations full-text index", "observation_files": "observation_files",
          "user_prompts": "prompts", "prompts_fts": "prompts full-text index", "session_summaries": "summaries",
          "summaries_fts": "summaries full-text index", "sessions": "sessions"}


def sessionmem(*args: str, data_dir: Path) -> str:
    """Run a ``sessionmem`` command as a user would, against the worker of ``data_dir``."""
    command = [sys.executable, "-m", "sessionmem", *args, "--data-dir", str(data_dir)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONMEM_", "ANTHROPIC_"))}
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=3600)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({result.returncode}): {result.stderr[-2000:]}")
    return result.stdout


def by_table(database: Path) -> dict[str, int]:
    """Bytes of each group of tables and indexes (``dbstat``), largest first."""
    connection = apsw.Connection(str(database), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = connection.execute(
            "SELECT coalesce(m.tbl_name, d.name), sum(d.pgsize) FROM dbstat d"
            " LEFT JOIN sqlite_master m ON m.name = d.name GROUP BY d.name").fetchall()
        free = connection.execute("PRAGMA freelist_count").fetchone()[0] * \
            connection.execute("PRAGMA page_size").fetchone()[0]
    finally:
        connection.close()
    groups: dict[str, int] = {"free pages": free}
    for table, size in rows:
        key = next((label for prefix, label in sorted(GROUPS.items(), key=lambda item: -len(item[0]))
                    if table == prefix or table.startswith(prefix + "_")), "other")
        groups[key] = groups.get(key, 0) + size
    return dict(sorted(groups.items(), key=lambda item: -item[1]))


def counts(database: Path) -> dict[str, int]:
    connection = apsw.Connection(str(database), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return {name: connection.execute(sql).fetchone()[0] for name, sql in {
            "observations": "SELECT count(*) FROM observations",
            "prompts": "SELECT count(*) FROM user_prompts",
            "summaries": "SELECT count(*) FROM session_summaries",
            "sessions": "SELECT count(*) FROM sessions",
            "journal_events": "SELECT count(*) FROM journal",
            "raw_payloads": "SELECT count(*) FROM journal j JOIN journal_payloads p ON p.id = j.id"
                            " WHERE j.kind = 'observation' AND json_type(CAST(p.payload AS TEXT), '$.pruned') IS NULL",
        }.items()}
    finally:
        connection.close()


def settle(worker: WorkerProcess) -> dict[str, Any]:
    """Wait until every event is stored and every document has its vector, then idle past the checkpointer's wait."""
    worker.wait_idle(timeout=3600)
    debug = worker.wait_indexed(timeout=3600)
    time.sleep(IDLE_S)
    return debug


def snapshot(data_dir: Path, observations: int) -> dict[str, Any]:
    sizes = data_dir_bytes(data_dir)
    stored = sizes["db"] + sizes["wal"] + sizes["index"]
    return {**sizes, "db_wal_index": stored, "per_tool_use": round(stored / observations, 1) if observations else 0}


def stage(worker: WorkerProcess, data_dir: Path) -> dict[str, Any]:
    """Sizes with the worker running and idle, then after it stopped."""
    settle(worker)
    running = counts(data_dir / "sessionmem.db")
    result = {"counts": running, "running": snapshot(data_dir, running["observations"])}
    worker.stop()
    result["stopped"] = snapshot(data_dir, running["observations"])
    result["tables"] = by_table(data_dir / "sessionmem.db")
    return result


def start(data_dir: Path, *, retention: bool) -> WorkerProcess:
    env = {"SESSIONMEM_COMPRESSOR": "offline"}
    if not retention:
        env["SESSIONMEM_RAW_RETENTION_DAYS"] = "0"
    return start_worker(data_dir, env=env, timeout=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="transcripts to backfill")
    parser.add_argument("--out", type=Path, help="report folder (default bench/results/at-rest-<timestamp>)")
    args = parser.parse_args(argv)
    out = args.out or Path(__file__).resolve().parent / "results" / time.strftime("at-rest-%Y%m%d-%H%M%S")
    data_dir = out / "data"
    if data_dir.exists():
        parser.error(f"{data_dir} exists: the measure needs a fresh data dir")
    out.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip() or "unknown"
    report: dict[str, Any] = {"corpus": str(args.corpus), "commit": commit,
                              "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}

    worker = start(data_dir, retention=False)
    try:
        with WalWatcher(data_dir) as wal:
            began = time.monotonic()
            report["backfill_output"] = sessionmem("backfill", str(args.corpus), data_dir=data_dir).strip()[-2000:]
            report["backfill_seconds"] = round(time.monotonic() - began, 1)
            report["before"] = stage(worker, data_dir)
        report["before"]["wal_peak"] = wal.peak_bytes
        worker = start(data_dir, retention=True)
        with WalWatcher(data_dir) as wal:
            report["prune_output"] = sessionmem("prune", "--older-than", "0", "--vacuum", data_dir=data_dir).strip()
            report["after"] = stage(worker, data_dir)
        report["after"]["wal_peak"] = wal.peak_bytes
    finally:
        worker.stop()
    (out / "at_rest.json").write_text(json.dumps(report, indent=2))

    before, after = report["before"], report["after"]
    print(f"corpus {args.corpus}: {before['counts']['observations']:,} tool uses stored "
          f"({before['counts']['journal_events']:,} events), backfill {report['backfill_seconds']} s")
    print("| | database | WAL (peak) | vector index | bytes per tool use |")
    print("|---|---|---|---|---|")
    for label, figures in (("after backfill", before), ("after `prune --older-than 0 --vacuum`", after)):
        stopped, running = figures["stopped"], figures["running"]
        print(f"| {label} | {stopped['db']:,} | {running['wal']:,} ({figures['wal_peak']:,}) | {stopped['index']:,} "
              f"| {stopped['per_tool_use']:,.0f} |")
    for label, figures in (("before", before), ("after", after)):
        print(f"{label}: " + ", ".join(f"{name} {size / 2**20:.1f} MiB" for name, size in figures["tables"].items()))
    print(f"report: {out / 'at_rest.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
