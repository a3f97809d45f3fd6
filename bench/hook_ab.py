"""Time the PostToolUse hook of two source trees side by side, against one worker (A/B, interleaved).

    python bench/hook_ab.py OTHER_TREE [--runs N]

Both trees' ``hooks/entry.py`` run with ``python -S``, as Claude Code runs them, on the
same genuine payload, alternating, so a noisy machine slows both alike. Prints the
median and p95 wall time of each and of a bare ``python -S -c pass``.
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
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sessionmem.testing.worker_process import start_worker  # noqa: E402


def payload(n: int) -> bytes:
    fixture = REPO / "tests" / "fixtures" / "payloads-2.1.328.jsonl"
    for line in fixture.read_text().splitlines():
        event = json.loads(line)
        if event["hook_event_name"] == "PostToolUse":
            return json.dumps({**event, "tool_use_id": f"toolu_ab_{n}"}).encode()
    raise SystemExit("no PostToolUse payload in the fixture")


def run(command: list[str], stdin: bytes, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, input=stdin, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - started) * 1000


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    return f"median {statistics.median(ordered):.1f} ms, p95 {ordered[int(0.95 * len(ordered))]:.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("other", type=Path, help="another source tree (a git worktree of another commit)")
    parser.add_argument("--runs", type=int, default=150)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        worker = start_worker(Path(data_dir), env={"SESSIONMEM_COMPRESSOR": "offline"})
        try:
            env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONMEM_")}
            env["SESSIONMEM_DATA_DIR"] = data_dir
            trees = {"this tree": REPO, str(args.other): args.other.resolve()}
            times: dict[str, list[float]] = {name: [] for name in [*trees, "python -S -c pass"]}
            for n in range(args.runs):
                for name, tree in trees.items():
                    times[name].append(run([sys.executable, "-S", str(tree / "hooks" / "entry.py"), "PostToolUse"],
                                           payload(n), env))
                times["python -S -c pass"].append(run([sys.executable, "-S", "-c", "pass"], b"", env))
            worker.wait_idle()
            stored = len(worker.get("/api/observations?limit=500")["observations"])
        finally:
            worker.stop()
    for name, values in times.items():
        print(f"{name}: {summary(values)} ({len(values)} runs)")
    print(f"observations stored: {stored} of {2 * args.runs} hook runs (the two trees send the same tool use ids)")


if __name__ == "__main__":
    main()
