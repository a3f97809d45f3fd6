"""The vector index's library, side by side: voyager (what index/hnsw.py uses) against chroma-hnswlib (before).

    .venv/bin/python bench/vector_index_choice.py [--sizes 10000,100000] [--rounds 1] [--work DIR]

**Vectors.** Real MiniLM vectors, scaled up as ``bench/search_latency.py`` scales them: up to
``--texts`` real texts (the corpus transcripts' messages and tool results, else the docs'
paragraphs) are embedded by the shipped embedder; vector ``i`` of a store of ``N`` is real
vector ``i mod R`` and real vector ``(7919 i + 13) mod R`` mixed 0.8 : 0.2, plus Gaussian
noise of norm 0.35, renormalized (cosine ~0.9 to the first). The queries are 300 stored
vectors perturbed the same way; the truth is exact cosine over the whole store.

**Measured**, each library and size in a fresh process (so resident memory is the
library's alone), the libraries alternating within each size: the build (vectors added
1,000 at a time on one thread: vectors per second), resident memory the graph added,
its file's size, the load time of that file, recall@10 against the truth, and the
median query latency (k=10, ``ef`` as index/hnsw.py sets it, one thread). voyager uses
the parameters of index/hnsw.py (``M``, ``EF_CONSTRUCTION``, ``EF_SEARCH``) unless
``--m``/``--ef-construction``/``--ef`` say otherwise, chroma-hnswlib those it was used
with (:data:`HNSWLIB_PARAMETERS`) unless ``--same-parameters``.

chroma-hnswlib is in the ``bench`` extra only where it installs (Python before 3.13);
without it the bench measures voyager alone and says so.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sampler import _rss_mb  # noqa: E402

from sessionmem.index.hnsw import EF_CONSTRUCTION, EF_SEARCH, M  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO.parent / "shared" / "corpus" / "transcripts"
NARRATIVE_STRIDE = 7919  # as bench/search_latency.py mixes two real vectors
NOISE = 0.35
QUERIES = 300
ADD_CHUNK = 1000
LIBRARIES = ("chroma-hnswlib", "voyager")
HNSWLIB_PARAMETERS = (16, 100, 64)  # M, ef_construction, ef: index/hnsw.py's with hnswlib


def _texts(corpus: Path, limit: int) -> list[str]:
    """Up to ``limit`` distinct texts of 80 to 2,000 characters: the corpus's messages and tool results, else the
    docs' paragraphs."""
    found: dict[str, None] = {}

    def collect(value: Any) -> None:
        if isinstance(value, str):
            if 80 <= len(value) <= 2000:
                found.setdefault(value)
        elif isinstance(value, dict):
            for key in ("text", "content", "message"):
                if key in value:
                    collect(value[key])
        elif isinstance(value, list):
            for item in value:
                collect(item)

    for path in sorted(corpus.rglob("*.jsonl")) if corpus.is_dir() else []:
        for line in path.read_text(errors="replace").splitlines():
            try:
                collect(json.loads(line))
            except ValueError:
                continue
    if len(found) < limit:
        for page in sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md", REPO / "bench" / "README.md"]:
            for paragraph in page.read_text().split("\n\n"):
                if len(paragraph) >= 80:
                    found.setdefault(paragraph[:2000])
    texts = list(found)
    step = max(1, len(texts) // limit)
    return texts[::step][:limit]


def _unit(vectors: np.ndarray) -> np.ndarray:
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def real_vectors(work: Path, corpus: Path, limit: int) -> np.ndarray:
    """The embedded texts (cached in ``work``)."""
    cached = work / f"real-{limit}.npy"
    if cached.exists():
        return np.load(cached)
    from sessionmem.embed.minilm import MiniLMEmbedder

    texts = _texts(corpus, limit)
    embedder = MiniLMEmbedder()
    started = time.perf_counter()
    vectors = np.concatenate([embedder.embed(texts[at:at + 32]) for at in range(0, len(texts), 32)])
    print(f"embedded {len(texts)} real texts in {time.perf_counter() - started:.0f} s", flush=True)
    np.save(cached, vectors.astype(np.float32))
    return vectors


def store(real: np.ndarray, size: int, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """``size`` vectors made from the real ones, and the queries (module docstring)."""
    rng = np.random.default_rng(seed)
    ids = np.arange(size)
    mixed = 0.8 * real[ids % len(real)] + 0.2 * real[(NARRATIVE_STRIDE * ids + 13) % len(real)]
    dimensions = real.shape[1]
    vectors = _unit(_unit(mixed) + rng.normal(0, NOISE / np.sqrt(dimensions), mixed.shape))
    picked = vectors[rng.choice(size, size=QUERIES, replace=False)]
    queries = _unit(picked + rng.normal(0, NOISE / np.sqrt(dimensions), picked.shape))
    return vectors, queries


# -- one library, one size: run in a process of its own -------------------------------------------


def measure(library: str, vectors_path: Path, queries_path: Path, truth_path: Path, m: int, ef_construction: int,
            ef: int) -> dict[str, Any]:
    vectors = np.load(vectors_path)
    queries, truth = np.load(queries_path), np.load(truth_path)
    count, dimensions = vectors.shape
    labels = np.arange(count, dtype=np.uint64) * np.uint64(4)  # as index/hnsw.py labels observations
    file = vectors_path.parent / f"{library}.graph"
    if library == "voyager":
        import voyager

        index: Any = voyager.Index(voyager.Space.Cosine, num_dimensions=dimensions, M=m,
                                   ef_construction=ef_construction, max_elements=1024,
                                   storage_data_type=voyager.StorageDataType.Float32)
        rss_before = _rss_mb_self()
        started = time.perf_counter()
        for at in range(0, count, ADD_CHUNK):
            needed = index.num_elements + ADD_CHUNK
            if needed > index.max_elements:  # capacity doubled, as index/hnsw.py grows it
                index.resize(max(needed, index.max_elements * 2))
            index.add_items(vectors[at:at + ADD_CHUNK], ids=labels[at:at + ADD_CHUNK].tolist(), num_threads=1)
        built = time.perf_counter() - started

        def query(vector: np.ndarray) -> np.ndarray:
            return index.query(vector, k=10, num_threads=1, query_ef=ef)[0]

        index.save(str(file))
        started = time.perf_counter()
        voyager.Index.load(str(file))
        loaded = time.perf_counter() - started
    else:
        import hnswlib

        index = hnswlib.Index(space="cosine", dim=dimensions)
        index.init_index(max_elements=1024, ef_construction=ef_construction, M=m)
        index.set_num_threads(1)
        rss_before = _rss_mb_self()
        started = time.perf_counter()
        for at in range(0, count, ADD_CHUNK):
            needed = index.get_current_count() + ADD_CHUNK
            if needed > index.get_max_elements():
                index.resize_index(max(needed, index.get_max_elements() * 2))
            index.add_items(vectors[at:at + ADD_CHUNK], labels[at:at + ADD_CHUNK], num_threads=1)
        built = time.perf_counter() - started
        index.set_ef(ef)

        def query(vector: np.ndarray) -> np.ndarray:
            return index.knn_query(vector.reshape(1, -1), k=10, num_threads=1)[0][0]

        index.save_index(str(file))
        started = time.perf_counter()
        hnswlib.Index(space="cosine", dim=dimensions).load_index(str(file), max_elements=0)
        loaded = time.perf_counter() - started
    rss_after = _rss_mb_self()
    hits, latencies = 0, []
    for vector, exact in zip(queries, truth):
        started = time.perf_counter()
        found = query(vector)
        latencies.append(time.perf_counter() - started)
        hits += len(set(np.asarray(found).tolist()) & set(labels[exact].tolist()))
    size = file.stat().st_size
    file.unlink()
    return {"library": library, "vectors": count, "add_per_second": round(count / built),
            "graph_rss_mib": round(rss_after - rss_before, 1), "file_mib": round(size / 2**20, 1),
            "load_seconds": round(loaded, 3), "recall_at_10": round(hits / (10 * len(queries)), 4),
            "query_ms_p50": round(statistics.median(latencies) * 1000, 3)}


def _rss_mb_self() -> float:
    import os

    return _rss_mb(os.getpid())


def available(library: str) -> bool:
    module = {"voyager": "voyager", "chroma-hnswlib": "hnswlib"}[library]
    return subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True).returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--texts", type=int, default=2000, help="real texts embedded for the vectors")
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--work", type=Path, help="keeps the embedded texts for another run")
    parser.add_argument("--m", type=int, default=M)
    parser.add_argument("--ef-construction", type=int, default=EF_CONSTRUCTION)
    parser.add_argument("--ef", type=int, default=EF_SEARCH)
    parser.add_argument("--same-parameters", action="store_true", help="chroma-hnswlib with voyager's parameters")
    parser.add_argument("--libraries", default=",".join(LIBRARIES), help="of " + ", ".join(LIBRARIES))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--measure", nargs=4, help=argparse.SUPPRESS)  # library vectors queries truth: the child
    arguments = parser.parse_args()
    if arguments.measure:
        library, *paths = arguments.measure
        print(json.dumps(measure(library, *map(Path, paths), arguments.m, arguments.ef_construction,
                                 arguments.ef)))
        return
    asked = arguments.libraries.split(",")
    libraries = [library for library in LIBRARIES if library in asked and available(library)]
    for missing in sorted(set(asked) - set(libraries)):
        print(f"{missing} is not installed (the bench extra installs chroma-hnswlib before Python 3.13): "
              "measuring without it", flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        work = arguments.work or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        real = real_vectors(work, arguments.corpus, arguments.texts)
        mine = (arguments.m, arguments.ef_construction, arguments.ef)
        parameters = {"voyager": mine, "chroma-hnswlib": mine if arguments.same_parameters else HNSWLIB_PARAMETERS}
        print(f"{len(real)} real vectors of {real.shape[1]} dimensions; M, ef_construction, ef: "
              + "; ".join(f"{library} {parameters[library]}" for library in libraries), flush=True)
        results: list[dict[str, Any]] = []
        for size in [int(size) for size in arguments.sizes.split(",")]:
            vectors, queries = store(real, size)
            truth = np.argsort(-(queries @ vectors.T), axis=1)[:, :10]
            paths = [Path(scratch) / name for name in ("vectors.npy", "queries.npy", "truth.npy")]
            for path, array in zip(paths, (vectors, queries, truth)):
                np.save(path, array)
            for round_ in range(arguments.rounds):
                for library in libraries if round_ % 2 == 0 else libraries[::-1]:
                    m, ef_construction, ef = parameters[library]
                    child = subprocess.run(
                        [sys.executable, __file__, "--measure", library, *map(str, paths), "--m", str(m),
                         "--ef-construction", str(ef_construction), "--ef", str(ef)],
                        capture_output=True, text=True, check=True)
                    result = json.loads(child.stdout.strip().splitlines()[-1])
                    results.append(result)
                    print(json.dumps(result), flush=True)
    print("\n| vectors | library | recall@10 | query p50 ms | adds/s | graph RSS MiB | file MiB | load s |")
    print("|---|---|---|---|---|---|---|---|")
    for size in sorted({result["vectors"] for result in results}):
        for library in libraries:
            mine = [result for result in results if result["vectors"] == size and result["library"] == library]
            if not mine:
                continue
            figures = {key: round(statistics.median(result[key] for result in mine), 4)
                       for key in ("recall_at_10", "query_ms_p50", "add_per_second", "graph_rss_mib", "file_mib",
                                   "load_seconds")}
            print(f"| {size:,} | {library} | {figures['recall_at_10']} | {figures['query_ms_p50']} | "
                  f"{figures['add_per_second']:,.0f} | {figures['graph_rss_mib']} | {figures['file_mib']} | "
                  f"{figures['load_seconds']} |")
    if arguments.out:
        arguments.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
