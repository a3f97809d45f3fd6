"""How fast the vector index catches up after ``sessionmem backfill``: this tree against another commit, A B A B.

    .venv/bin/python bench/catch_up.py --baseline REV [--projects NAME,...] [--rounds 2] [--out FILE]

What one run does (bench/README.md holds the latest figures):

1. A real worker process (``sessionmem serve``, the offline compressor, the default
   embedder) starts on a fresh data dir: this tree's, or the ``--baseline`` commit's
   (its files taken with ``git archive`` into a temporary folder and laid out as
   installed, :func:`tools.layout.stage`, first on ``PYTHONPATH``; the same virtualenv).
2. The corpus (``--corpus``, every project or those ``--projects`` names) is sent to it
   as ``sessionmem backfill`` sends it (:func:`sessionmem.replay.backfill.backfill`, 4
   sessions at a time) and the time the last event was accepted is noted.
3. ``/debug`` is polled every ``POLL_S`` until the journal is empty, no session works
   and the index is ``ready`` with nothing pending: the index has **caught up**. Figures:
   minutes from the last accepted event until then, documents embedded in that time
   and their rate (**documents/s**), the whole backfill's time, and the peak resident
   memory of the worker and of its embedding process (``/proc``, sampled alike).

Runs alternate (baseline, this tree, baseline, this tree, ...) so that a busy machine
slows both alike; the summary gives medians and the ratio of the medians.

``--texts`` also times the embedder alone, in this process: texts of about 8, 64 and 256
tokens (one at a time, one thread; the medians of interleaved repetitions), the shipped
model's graph as the baseline ran it against this tree's embedder. The figure that does not depend on how busy the machine is: documents per CPU-second
of the embedding process (``documents_per_embedder_cpu_second``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from json_out import write_json  # noqa: E402

from sessionmem.protocol.client_settings import ClientConfig  # noqa: E402
from sessionmem.replay.backfill import backfill  # noqa: E402
from sessionmem.testing.worker_process import WORKING_STATES, WorkerProcess, start_worker  # noqa: E402
from tools.layout import stage  # noqa: E402

DEFAULT_CORPUS = REPO.parent / "shared" / "corpus" / "transcripts"
POLL_S = 0.25
TIMEOUT_S = 3600.0


def _rss_mb(pid: int | None) -> float:
    if not pid:
        return 0.0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _cpu_seconds(pid: int | None) -> float:
    """User and system CPU time of process ``pid`` so far (0 if it is gone)."""
    if not pid:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def baseline_tree(rev: str, into: Path) -> Path:
    """The files of commit ``rev`` in ``into``, laid out as installed; the folder to put first on ``PYTHONPATH``."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return stage(into, "bench")


def corpus_root(corpus: Path, projects: list[str], into: Path) -> Path:
    """``corpus`` itself, or a folder of links to the projects named (a substring of the folder's name each)."""
    if not projects:
        return corpus
    root = into / "corpus"
    root.mkdir()
    for folder in sorted(corpus.iterdir()):
        if any(name in folder.name for name in projects):
            # Links to the files, in folders of their own: the transcripts' walk does not follow a linked folder.
            for path in sorted(folder.rglob("*")):
                if path.is_file():
                    (root / path.relative_to(corpus)).parent.mkdir(parents=True, exist_ok=True)
                    (root / path.relative_to(corpus)).symlink_to(path.resolve())
    if not any(root.iterdir()):
        raise SystemExit(f"no project of {corpus} matches {projects}")
    return root


class Watcher(threading.Thread):
    """Polls ``/debug`` and ``/proc`` while the backfill runs and the index catches up."""

    def __init__(self, worker: WorkerProcess) -> None:
        super().__init__(daemon=True)
        self.worker = worker
        self.stop = threading.Event()
        self.samples: list[dict[str, Any]] = []
        self.peak_worker_mb = self.peak_embedder_mb = 0.0
        self.embedder_pid: int | None = None

    def run(self) -> None:
        started = time.monotonic()
        while not self.stop.is_set():
            try:
                debug = self.worker.get("/debug")
            except (OSError, AssertionError):
                debug = None
            if debug is not None:
                index, embedder = debug["index"], debug["embedder"]
                busy = debug["sessions"]["queued"] or any(a["state"] in WORKING_STATES for a in debug["actors"])
                self.samples.append({"t": time.monotonic() - started, "pending": index["pending"],
                                     "added": index["added"], "state": index["state"],
                                     "journal": debug["journal"]["pending"], "busy": bool(busy),
                                     "embedded": (embedder.get("background") or {}).get("texts", 0)})
                self.embedder_pid = embedder.get("backgroundPid") or self.embedder_pid
                self.peak_embedder_mb = max(self.peak_embedder_mb, _rss_mb(embedder.get("backgroundPid")))
            self.peak_worker_mb = max(self.peak_worker_mb, _rss_mb(self.worker.pid))
            self.stop.wait(POLL_S)

    def caught_up(self) -> bool:
        last = self.samples[-1] if self.samples else None
        return bool(last and last["journal"] == 0 and not last["busy"] and last["state"] == "ready"
                    and last["pending"] == 0)


def one_run(name: str, root: Path, data_dir: Path, pythonpath: Path | None) -> dict[str, Any]:
    env = {"SESSIONMEM_COMPRESSOR": "offline"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    worker = start_worker(data_dir, env=env, timeout=120)
    started_as = worker.get("/debug")["index"]["modelId"]
    print(f"catch_up: {name}: worker {worker.pid}, model {started_as}", file=sys.stderr)
    try:
        watcher = Watcher(worker)
        watcher.start()
        config = ClientConfig({"SESSIONMEM_DATA_DIR": str(data_dir)})
        started = time.monotonic()
        report = backfill(root, config, workers=4)
        accepted = time.monotonic()
        added_at_accept = worker.get("/debug")["index"]["added"]
        cpu_at_accept = _cpu_seconds(watcher.embedder_pid)
        deadline = accepted + TIMEOUT_S
        while not watcher.caught_up():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name}: the index did not catch up within {TIMEOUT_S:.0f} s")
            time.sleep(POLL_S)
        done = time.monotonic()
        embedder_cpu = _cpu_seconds(watcher.embedder_pid) - cpu_at_accept
        watcher.stop.set()
        watcher.join()
        debug = worker.get("/debug")
    finally:
        worker.stop(timeout=60)
    index = debug["index"]
    after = index["added"] - added_at_accept
    catch_up = done - accepted
    return {"name": name, "events_sent": report.sent, "accepted": report.accepted, "lost": report.lost,
            "backfill_seconds": round(accepted - started, 1), "catch_up_seconds": round(catch_up, 1),
            "catch_up_minutes": round(catch_up / 60, 2), "documents": index["added"],
            "documents_after_backfill": after, "documents_per_second": round(after / catch_up, 1),
            "embedder_cpu_seconds": round(embedder_cpu, 1),
            "documents_per_embedder_cpu_second": round(after / embedder_cpu, 1) if embedder_cpu else None,
            "total_seconds": round(done - started, 1), "vectors": index["vectors"],
            "model_id": index["modelId"], "peak_worker_rss_mb": round(watcher.peak_worker_mb),
            "peak_embedder_rss_mb": round(watcher.peak_embedder_mb),
            "idle_chunks": index.get("idleChunks"), "embedder": debug["embedder"].get("background")}


def text_times(rounds: int) -> dict[str, dict[str, float]]:
    """ms per text, one at a time, one thread: the shipped graph (as the baseline ran it) and this tree's embedder."""
    from sessionmem.embed import minilm

    current = minilm.MiniLMEmbedder(threads=1)
    shipped = minilm.MiniLMEmbedder(threads=1, variant=minilm.SHIPPED)
    sentence = ("The worker journals every event in SQLite before it answers the hook, and replays the journal "
                "after a crash so that nothing is lost. ")
    words = sentence.split()
    texts = {"short (~8 tokens)": " ".join(words[:6]), "medium (~64 tokens)": " ".join((words * 4)[:52]),
             "long (256 tokens)": sentence * 12}
    embedders = {"baseline": shipped, "this tree": current}
    times: dict[str, dict[str, list[float]]] = {label: {name: [] for name in embedders} for label in texts}
    for embedder in embedders.values():
        embedder.embed(list(texts.values()))  # load, and warm up
    for _ in range(rounds):
        for label, text in texts.items():
            repeat = 40 if "short" in label else 10 if "medium" in label else 4
            for name, embedder in embedders.items():
                started = time.perf_counter()
                for _ in range(repeat):
                    embedder.embed([text])
                times[label][name].append((time.perf_counter() - started) / repeat * 1000)
    for embedder in embedders.values():
        embedder.close()
    return {label: {name: round(statistics.median(values), 2) for name, values in by_name.items()}
            for label, by_name in times.items()}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    by_name: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        by_name.setdefault(run["name"], []).append(run)
    medians = {name: {key: statistics.median(r[key] for r in rs) for key in (
        "catch_up_seconds", "catch_up_minutes", "documents_per_second", "documents_after_backfill",
        "backfill_seconds", "total_seconds", "peak_worker_rss_mb", "peak_embedder_rss_mb",
        "documents_per_embedder_cpu_second")}
        for name, rs in by_name.items()}
    result: dict[str, Any] = {"medians": medians}
    if {"baseline", "this tree"} <= medians.keys():
        base, new = medians["baseline"], medians["this tree"]
        result["speed-up, documents/s"] = round(new["documents_per_second"] / base["documents_per_second"], 2)
        result["catch-up time ratio"] = round(base["catch_up_seconds"] / new["catch_up_seconds"], 2)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", help="a commit to compare with (omitted: this tree alone)")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="transcripts, one folder per project")
    parser.add_argument("--projects", default="", help="comma-separated project folders (substrings); default all")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each, alternating (default 2)")
    parser.add_argument("--texts", type=int, default=0, metavar="ROUNDS",
                        help="also time the embedder per text, this many interleaved rounds")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    args = parser.parse_args()
    result: dict[str, Any] = {"command": " ".join(sys.argv), "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                              "baseline": args.baseline, "cores": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="sessionmem-catch-up-") as temporary:
        work = Path(temporary)
        root = corpus_root(args.corpus.resolve(), [p for p in args.projects.split(",") if p], work)
        # Workers start here: `python -m` puts the current directory first on sys.path, and a checkout's own
        # `sessionmem/` folder there would shadow the baseline's tree on PYTHONPATH.
        os.chdir(work)
        trees: list[tuple[str, Path | None]] = [("this tree", None)]
        if args.baseline:
            (work / "baseline").mkdir()
            trees.insert(0, ("baseline", baseline_tree(args.baseline, work / "baseline")))
        runs = []
        for number in range(args.rounds):
            for name, pythonpath in trees:
                data_dir = work / f"data-{number}-{name.replace(' ', '-')}"
                run = one_run(name, root, data_dir, pythonpath)
                print(json.dumps(run), file=sys.stderr)
                runs.append(run)
        result["runs"] = runs
        result["summary"] = summary(runs)
    if args.texts:
        result["ms_per_text_one_thread"] = text_times(args.texts)
    print(json.dumps(result["summary"], indent=2))
    if "ms_per_text_one_thread" in result:
        print(json.dumps(result["ms_per_text_one_thread"], indent=2))
    write_json(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
