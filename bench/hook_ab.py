"""Time the PostToolUse hook side by side (A/B, interleaved): two source trees, or file recall on and off.

    python bench/hook_ab.py OTHER_TREE [--runs N]
    python bench/hook_ab.py --recall [--runs N]
    python bench/hook_ab.py --consolidating [--observations N] [--runs N]

Hooks run with ``python -S``, as Claude Code runs them, on a genuine payload,
alternating, so a noisy machine slows both alike. Prints the median and p95 wall time
of each and of a bare ``python -S -c pass``.

``--recall`` runs this tree's hook against two workers: one where the file the tool
touched has a past in another session and every run is a new session, so the worker
looks it up *and* the hook prints it every time (file-aware recall's worst case); one
with ``file_recall`` off.

``--consolidating`` builds a store of N observations (a project's sessions reading, running and editing
the same few things, so a third of them are near-duplicates) that the consolidation pass has not seen,
copies it, and runs this tree's hook against two workers on the copies: one whose consolidation pass
works through the store meanwhile (it starts with the whole store behind), one with the pass off. It
checks that the pass was still working at the last run (else the runs did not all overlap it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import trio  # noqa: E402

from sessionmem.storage.export_records import ObservationRecord, SessionRecord  # noqa: E402
from sessionmem.storage.sqlite.store import open_sqlite_store  # noqa: E402
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


def recall_ab(runs: int) -> None:
    event = json.loads(payload(0))
    path = event["tool_input"].get("file_path") or event["tool_input"].get("notebook_path")
    if event["tool_name"] not in ("Read", "Edit", "Write", "MultiEdit") or not path:
        raise SystemExit(f"the fixture's PostToolUse is {event['tool_name']}, not a file tool")
    with tempfile.TemporaryDirectory() as on_dir, tempfile.TemporaryDirectory() as off_dir:
        workers = {"recall on": start_worker(Path(on_dir), env={"SESSIONMEM_COMPRESSOR": "offline",
                                                                  "SESSIONMEM_EMBEDDER": "none"}),
                   "recall off": start_worker(Path(off_dir), env={"SESSIONMEM_COMPRESSOR": "offline",
                                                                    "SESSIONMEM_EMBEDDER": "none",
                                                                    "SESSIONMEM_FILE_RECALL": "0"})}
        try:
            env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONMEM_")}
            entry = [sys.executable, "-S", str(REPO / "hooks" / "entry.py"), "PostToolUse"]
            edit = {**event, "session_id": "earlier", "tool_name": "Edit", "tool_use_id": "toolu_earlier",
                    "tool_input": {"file_path": path, "old_string": "a = 1", "new_string": "a = 2"}}
            for worker in workers.values():
                run(entry, json.dumps(edit).encode(), {**env, "SESSIONMEM_DATA_DIR": str(worker.data_dir)})
                worker.wait_idle()
            times: dict[str, list[float]] = {name: [] for name in [*workers, "python -S -c pass"]}
            printed = 0
            for n in range(runs):
                stdin = json.dumps({**event, "session_id": f"ab-{n}", "tool_use_id": f"toolu_ab_{n}"}).encode()
                for name, worker in workers.items():
                    hook_env = {**env, "SESSIONMEM_DATA_DIR": str(worker.data_dir)}
                    times[name].append(run(entry, stdin, hook_env))
                times["python -S -c pass"].append(run([sys.executable, "-S", "-c", "pass"], b"", env))
            last = subprocess.run(entry, input=json.dumps({**event, "session_id": "check"}).encode(),
                                  env={**env, "SESSIONMEM_DATA_DIR": str(workers["recall on"].data_dir)},
                                  capture_output=True, check=True)
            printed = len(last.stdout)
        finally:
            for worker in workers.values():
                worker.stop()
    for name, values in times.items():
        print(f"{name}: {summary(values)} ({len(values)} runs)")
    print(f"a recalling hook prints {printed} bytes of additionalContext")


def _seeded_store(path: Path, observations: int) -> None:
    """A store of ``observations`` observations in sessions of 40, none consolidated yet (imported: the
    pass starts on a worker's start)."""
    def records(session: int) -> list[object]:
        name, at = f"seed-{session}", 1_700_000_000.0 + session * 3600
        rows: list[object] = [SessionRecord(claude_session_id=name, project="/repo", created_at=at)]
        for n in range(40):
            file = f"/repo/src/module_{(session + n) % 25}.py"
            kind = n % 3
            rows.append(ObservationRecord(
                claude_session_id=name, project="/repo", prompt_number=1, tool_use_id=f"{name}-{n}",
                created_at=at + n, tool_name=("Read", "Bash", "Edit")[kind],
                type=("discovery", "discovery", "change")[kind],
                title=(f"Read {file}", "Ran `make test`", f"Edited {file} (-1 +2 lines)")[kind],
                facts=([f"{file} has {100 + n} lines"], ["command: make test", "exit status 0", "output: 40 passed"],
                       [f"changed line {session * 40 + n}"])[kind],
                files_read=[file] if kind == 0 else [], files_modified=[file] if kind == 2 else []))
        return rows

    async def build() -> None:
        async with open_sqlite_store(path / "sessionmem.db") as store:
            for session in range(observations // 40):
                await store.import_records(records(session))

    path.mkdir(parents=True)
    trio.run(build)


def consolidating_ab(observations: int, runs: int) -> None:
    event = json.loads(payload(0))
    with tempfile.TemporaryDirectory() as temporary:
        seeded = Path(temporary) / "seeded"
        _seeded_store(seeded, observations)
        dirs = {"consolidating": Path(temporary) / "on", "consolidation off": Path(temporary) / "off"}
        for target in dirs.values():
            shutil.copytree(seeded, target)
        base_env = {"SESSIONMEM_COMPRESSOR": "offline", "SESSIONMEM_EMBEDDER": "none"}
        workers = {"consolidating": start_worker(dirs["consolidating"], env=base_env),
                   "consolidation off": start_worker(dirs["consolidation off"],
                                                     env={**base_env, "SESSIONMEM_CONSOLIDATION": "0"})}
        try:
            env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONMEM_")}
            entry = [sys.executable, "-S", str(REPO / "hooks" / "entry.py"), "PostToolUse"]
            times: dict[str, list[float]] = {name: [] for name in [*workers, "python -S -c pass"]}
            before = workers["consolidating"].get("/debug")["consolidation"]
            for n in range(runs):
                stdin = json.dumps({**event, "session_id": f"ab-{n}", "tool_use_id": f"toolu_ab_{n}"}).encode()
                for name, worker in workers.items():
                    times[name].append(run(entry, stdin, {**env, "SESSIONMEM_DATA_DIR": str(worker.data_dir)}))
                times["python -S -c pass"].append(run([sys.executable, "-S", "-c", "pass"], b"", env))
            after = workers["consolidating"].get("/debug")["consolidation"]
        finally:
            for worker in workers.values():
                worker.stop()
    for name, values in times.items():
        print(f"{name}: {summary(values)} ({len(values)} runs)")
    print(f"the pass during the runs: {after['consolidated'] - before['consolidated']} observations consolidated in "
          f"{after['batches'] - before['batches']} batches, {after['behind']} still behind at the last run, "
          f"{after['hidden']} merged or superseded in all")
    if after["behind"] == 0:
        print("the pass caught up before the last run: give --observations more")


def compiled(tree: Path) -> Path:
    """``tree``, its hook's modules compiled to bytecode as ``make bytecode`` does: a hook from a tree without
    it compiles them on every run (PYTHONDONTWRITEBYTECODE, say), twice its time, timed as the tree's own."""
    import compileall

    for folder in ("hooks", "sessionmem"):
        compileall.compile_dir(str(tree / folder), quiet=1)
    return tree


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("other", type=Path, nargs="?", help="another source tree (a git worktree of another commit)")
    parser.add_argument("--recall", action="store_true", help="file recall on against off, this tree")
    parser.add_argument("--consolidating", action="store_true",
                        help="a worker whose consolidation pass is working, against one with it off, this tree")
    parser.add_argument("--observations", type=int, default=100_000, help="--consolidating: the store's size")
    parser.add_argument("--runs", type=int, default=150)
    args = parser.parse_args()
    if args.consolidating:
        consolidating_ab(args.observations, args.runs)
        return
    if args.recall:
        recall_ab(args.runs)
        return
    if args.other is None:
        parser.error("give OTHER_TREE, or --recall")
    with tempfile.TemporaryDirectory() as data_dir:
        worker = start_worker(Path(data_dir), env={"SESSIONMEM_COMPRESSOR": "offline"})
        try:
            env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONMEM_")}
            env["SESSIONMEM_DATA_DIR"] = data_dir
            trees = {"this tree": compiled(REPO), str(args.other): compiled(args.other.resolve())}
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
