"""SessionStart's context side by side: this tree's worker against another tree's, on copies of one store.

    .venv/bin/python bench/context_ab.py OTHER_PYTHON [--corpus DIR] [--transcripts 40] [--rounds 3] [--runs 200]
    .venv/bin/python bench/context_ab.py OTHER_PYTHON --store DATA_DIR [--by-meaning] [--rounds 3] [--runs 200]
    .venv/bin/python bench/context_ab.py OTHER_PYTHON --store DATA_DIR --while-consolidating

``OTHER_PYTHON`` is the interpreter of another tree's install: a virtualenv with that tree installed
(``git worktree add ../base e133b3d && python3 -m venv ../base-venv && ../base-venv/bin/pip install -e
../base``). The other tree's worker (offline compressor, vectors off) builds the store: the first
``--transcripts`` transcripts of the corpus through its own ``sessionmem backfill``; or ``--store`` names a
data dir built before (``bench/search_latency.py --work DIR`` leaves its 100,000 observations in
``DIR/scale``), copied for each tree. The data dir is copied while no worker runs, and this tree's worker
opens the copy.

Then, after one unmeasured block of each (this tree's migrates its copy, as an upgrade does, and
checkpoints it when it stops), **blocks** alternate, ``--rounds`` times (this tree's first, then the
other's first, and so on): each starts that tree's worker on its copy, asks the biggest project's SessionStart context as the hook asks it
(``GET /api/context/inject?project=P&session=S&source=startup&cwd=D`` through the hook's own client, a
connection each, a new session each time) ``--runs`` times after 20 unmeasured, and stops the worker. ``D``
is a project folder holding a CLAUDE.md (:data:`CLAUDE_MD`), and the workers' Claude config dir one of
their own: a tree that reads what Claude Code's own memory says (``search/already_said.py``) reads it.
``--by-meaning`` asks ``GET /api/context/inject?project=P&source=compact`` instead, ranked by the meaning of
the project's latest prompt, as ``bench/search_latency.py`` does: the embedder on, each block waiting for
the index to load first (both trees must open the store and its index as they are: a tree older than the
store's schema refuses it).
A tree with a consolidation pass (``storage/consolidator.py``) is measured once its pass has gone through
the store (each block waits for it); ``--while-consolidating`` measures it working instead: before each of
this tree's blocks its pass's work is forgotten (:func:`unconsolidate`), so it starts over from the first
observation as on an upgrade, and each block says how far it still was from done at its end.
Figures: per tree, the median over its blocks of their p50 and p95, the ratio of the p50s (this tree
÷ the other), and the context's size in characters.

Resource handling:
    Every worker is stopped when its block ends; the data dirs are under a temporary folder, removed
    on the way out (``--keep`` keeps it).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

import apsw

sys.path.insert(0, str(Path(__file__).resolve().parent))

from json_out import write_json  # noqa: E402

from sessionmem.protocol import client as hook_client  # noqa: E402
from sessionmem.protocol import routes  # noqa: E402
from sessionmem.replay.convert import transcript_files  # noqa: E402
from sessionmem.testing.worker_process import start_worker  # noqa: E402

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "transcripts"  # beside the checkout
WORKER_ENV = {"SESSIONMEM_COMPRESSOR": "offline", "SESSIONMEM_EMBEDDER": "none"}
WARM_UP = 20
CLAUDE_MD = """# Project notes

- Run the tests with `python3 -m pytest -q` before every commit.
- Build the wheel with `make wheel`; the docs with `make docs`.
- Use uv, not pip, to install packages into the project venv.
- Migrations live in `migrations/`; never edit one that has shipped.
"""


def build_store(other_python: str, corpus: Path, transcripts: int, data_dir: Path) -> None:
    """The other tree's worker and its own ``sessionmem backfill`` of the corpus's first ``transcripts``."""
    chosen = Path(tempfile.mkdtemp(prefix="context-ab-corpus-"))
    try:
        for path in transcript_files(corpus)[:transcripts]:
            shutil.copy(path, chosen / path.name)
        with start_worker(data_dir, env=WORKER_ENV, python=other_python, timeout=120) as worker:
            subprocess.run([other_python, "-m", "sessionmem", "backfill", "--data-dir", str(data_dir), "--no-wait",
                            str(chosen)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=chosen)  # not this checkout's
            worker.wait_idle(timeout=600)
    finally:
        shutil.rmtree(chosen, ignore_errors=True)


def biggest_project(data_dir: Path) -> tuple[str, int]:
    connection = apsw.Connection(str(data_dir / "sessionmem.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        row = connection.execute("SELECT project, count(*) FROM observations GROUP BY project"
                                 " ORDER BY 2 DESC LIMIT 1").fetchone()
    finally:
        connection.close()
    if row is None:
        raise SystemExit("the store holds no observation: is the corpus empty?")
    return str(row[0]), int(row[1])


CONSOLIDATION_TABLES = ("observation_links", "duplicate_groups", "consolidation_heads", "memory_told", "memory_used",
                        "observation_use", "consolidation_cursor")


def unconsolidate(data_dir: Path) -> None:
    """Forget what a consolidation pass did in ``data_dir`` (a tree that has one): it starts again from the first
    observation when a worker next opens the store."""
    connection = apsw.Connection(str(data_dir / "sessionmem.db"))
    try:
        present = {str(name) for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        with connection:
            for table in CONSOLIDATION_TABLES:
                if table in present:
                    connection.execute(f"DELETE FROM {table}")
    finally:
        connection.close()


def block(python: str, data_dir: Path, project: str, runs: int, label: str, cwd: Path, *,
          by_meaning: bool = False, settled: bool = True) -> dict[str, Any]:
    """One worker of ``python`` on ``data_dir``: the context asked ``runs`` times as the hook asks it, from
    ``cwd`` (beside which its Claude config dir is); ``by_meaning``: ranked by the meaning of the project's
    latest prompt instead (``source=compact``, the embedder on and the index loaded first). ``settled``: a
    worker with a consolidation pass first waits for it to go through the store (else it works meanwhile)."""
    times: list[float] = []
    size = 0
    behind = 0
    env = {**WORKER_ENV, "CLAUDE_CONFIG_DIR": str(cwd.with_name("claude-config"))}
    if by_meaning:
        del env["SESSIONMEM_EMBEDDER"]
    with start_worker(data_dir, env=env, python=python, timeout=120) as worker:
        if by_meaning:
            worker.wait_until(lambda: (d := worker.get(routes.DEBUG))["index"]["state"] == "ready"
                              and not d["index"]["pending"] and d["embedder"]["embedder"]["loaded"], timeout=600)
        if settled and "consolidation" in worker.get(routes.DEBUG):
            worker.wait_consolidated(timeout=900)
        for n in range(WARM_UP + runs):
            query = ({"project": project, "source": "compact"} if by_meaning else
                     {"project": project, "session": f"ab-{label}-{n}", "source": "startup", "cwd": str(cwd)})
            path = routes.CONTEXT + "?" + urllib.parse.urlencode(query)
            started = time.perf_counter()
            reply = hook_client.request("127.0.0.1", worker.port, "GET", path, timeout=10, token=worker.token)
            elapsed = time.perf_counter() - started
            if reply.status != 200:
                raise RuntimeError(f"GET {path} -> {reply.status}")
            if n >= WARM_UP:
                times.append(elapsed * 1000)
            size = len(reply.body)
        behind = worker.get(routes.DEBUG).get("consolidation", {}).get("behind", 0)
    times.sort()
    return {"p50": statistics.median(times), "p95": times[int(0.95 * len(times))], "chars": size, "behind": behind}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("other_python", help="the interpreter of another tree's install")
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--transcripts", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--keep", action="store_true", help="keep the data dirs")
    parser.add_argument("--store", type=Path, help="a data dir to copy for each tree, instead of building one")
    parser.add_argument("--by-meaning", action="store_true",
                        help="ranked by the meaning of the project's latest prompt (source=compact, vectors on)")
    parser.add_argument("--while-consolidating", action="store_true",
                        help="this tree's consolidation pass starts over before each of its blocks and works "
                             "meanwhile (else each block waits for it first)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="context-ab-"))
    try:
        other_dir, this_dir = work / "other", work / "this"
        if args.store:
            shutil.copytree(args.store, other_dir, ignore=shutil.ignore_patterns("*.log", "spool", "worker.*"))
        else:
            build_store(args.other_python, args.corpus, args.transcripts, other_dir)
        for name in ("worker.json", "worker.instance.lock"):
            (other_dir / name).unlink(missing_ok=True)
        shutil.copytree(other_dir, this_dir)
        project, observations = biggest_project(other_dir)
        cwd = work / "project"
        cwd.mkdir()
        (cwd / "CLAUDE.md").write_text(CLAUDE_MD)
        trees = {"this tree": (sys.executable, this_dir), "other tree": (args.other_python, other_dir)}
        for name, (python, data_dir) in trees.items():  # unmeasured: this tree's migrates its copy, as an upgrade
            block(python, data_dir, project, 10, f"warm-{name[:5]}", cwd, by_meaning=args.by_meaning)
        blocks: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
        for round_number in range(args.rounds):
            order = list(trees) if round_number % 2 == 0 else list(reversed(trees))  # A B, B A: no side always first
            for name in order:
                python, data_dir = trees[name]
                if args.while_consolidating and name == "this tree":
                    unconsolidate(data_dir)
                blocks[name].append(block(python, data_dir, project, args.runs, f"{round_number}-{name[:5]}", cwd,
                                          by_meaning=args.by_meaning, settled=not args.while_consolidating))
        figures = {name: {"p50_ms": round(statistics.median(b["p50"] for b in found), 2),
                          "p95_ms": round(statistics.median(b["p95"] for b in found), 2),
                          "blocks_p50_ms": [round(b["p50"], 2) for b in found], "chars": found[-1]["chars"],
                          "consolidation_behind_at_end": [b["behind"] for b in found]}
                   for name, found in blocks.items()}
        ratio = figures["this tree"]["p50_ms"] / figures["other tree"]["p50_ms"]
        for name, figure in figures.items():
            print(f"{name}: p50 {figure['p50_ms']} ms, p95 {figure['p95_ms']} ms (blocks {figure['blocks_p50_ms']}),"
                  f" {figure['chars']:,} characters of context; observations its consolidation pass had not reached"
                  f" at each block's end: {figure['consolidation_behind_at_end']}")
        print(f"this tree ÷ other tree, p50: {ratio:.3f}; project {project} of {observations:,} observations, "
              f"{args.rounds} rounds of {args.runs}")
        write_json({"project": project, "observations": observations, "figures": figures,
                    "ratio_p50": round(ratio, 3), "rounds": args.rounds, "runs": args.runs}, args.out)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
