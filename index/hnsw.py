"""The hnswlib index and its files: one graph per document kind, labels, capacity, deletions,
an atomic save, a checked load.

We use the ``chroma-hnswlib`` distribution of hnswlib (``import hnswlib``, the same C++
library and Python API): PyPI's ``hnswlib`` is a source distribution that needs a C++
compiler at install time, ``chroma-hnswlib`` has manylinux wheels.

A document (``kind``, ``row_id``) is the label ``row_id * 4 + code(kind)``, so labels of
different kinds never collide and a label tells which row it is.

**One graph per kind.** Observations, summaries and prompts each have their own hnswlib
graph. A query for one kind (SessionStart asks for observations only) walks that graph
alone: exact and as fast as an unfiltered query. In one shared graph it would be
asked with hnswlib's filter, which calls back into Python for every candidate it
weighs -- 1.6 ms against 0.3 ms at 100,000 observations, and needed whenever copies of
one prompt crowd the neighbourhood. A query for every kind asks the three graphs and
keeps the ``k`` nearest of their answers.

**A few documents, exactly.** A search of a small project in a large store asks for the
nearest of the project's own documents (:meth:`HnswIndex.nearest_among`): each of them
is compared with the query (a matrix product), not found by walking a graph full of
other projects' vectors. hnswlib hands a stored vector back as a Python list (~16 µs
each), so the vectors it has handed back are kept, up to :data:`VECTOR_CACHE` of them,
the least recently used dropped first, and forgotten when their label is added or
removed again.

Files, in the data dir: ``vectors.json`` names the graph files of the last save and
says what they hold (the embedding model, dimensions, each file's size and checksum,
deleted labels); each graph file, ``vectors.<n>.<kind>.hnsw``, is in hnswlib's own
format. A save writes new graph files, fsyncs them, then replaces ``vectors.json``
atomically (write, fsync, rename): that rename is the moment the new save counts. A
crash at any point leaves the description naming whole files, the old ones or the new
ones; files it does not name (a save cut off) are removed by the next save. An index
saved in one graph (format 3) is split by kind when loaded, nothing embedded again.

Resource handling:
    Not thread-safe, by hnswlib's own rules (concurrent add and query can crash the
    process): one owner calls it, one call at a time (:mod:`sessionmem.index.actor`
    runs every call on one worker thread).

Error handling:
    :meth:`HnswIndex.load` never raises for a bad file: it returns why it could not
    use it (missing, corrupt, another model or dimension), and the owner rebuilds.
"""

from __future__ import annotations

import os
import time
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import hnswlib
import msgspec
import numpy as np

from sessionmem.records import DOCUMENT_KINDS

DESCRIPTION_FILE = "vectors.json"
INDEX_FILES = "vectors.*.hnsw"
FORMAT = 4
ONE_GRAPH_FORMAT = 3  # every kind in one graph: loaded, then split
# Graph parameters. M=16 and ef_construction=100: ~0.97 recall@10 on MiniLM vectors at
# ef=64 while an add stays well under a millisecond (bench/search_latency.py measures both).
M = 16
EF_CONSTRUCTION = 100
EF_SEARCH = 64
INITIAL_CAPACITY = 1024
# Stored vectors kept for nearest_among, at most (384 float32: 1.5 KB each, ~12 MB in all).
VECTOR_CACHE = 8192
MIGRATION_CHUNK = 2048  # vectors copied at a time from a one-graph index

_CODES = {kind: code for code, kind in enumerate(DOCUMENT_KINDS)}
_KINDS = dict(enumerate(DOCUMENT_KINDS))


def label_of(kind: str, row_id: int) -> int:
    return row_id * 4 + _CODES[kind]


def key_of(label: int) -> tuple[str, int]:
    return kind_of(label), label // 4


def kind_of(label: int) -> str:
    return _KINDS[label % 4]


class GraphFile(msgspec.Struct, frozen=True):
    index_file: str  # vectors.<n>.<kind>.hnsw, in the same directory
    index_bytes: int  # its size when the description was written
    checksum: int  # its CRC-32: hnswlib trusts the sizes in its file's header, and a damaged one crashes it
    vectors: int  # live vectors
    deleted: list[int]  # labels marked deleted


class _Common(msgspec.Struct, frozen=True):
    """What every format's description says."""

    format: int
    model_id: str
    dimensions: int


class IndexDescription(_Common, frozen=True):
    graphs: dict[str, GraphFile]  # by document kind
    saved_at: float


class _OneGraphDescription(GraphFile, frozen=True):
    """Format 3: one graph of every kind, described by the same fields as a graph of ours, and the common ones."""

    format: int
    model_id: str
    dimensions: int


class _Graph:
    """One hnswlib graph (cosine) and the labels marked deleted in it."""

    def __init__(self, dimensions: int, capacity: int = INITIAL_CAPACITY, *, empty: bool = True) -> None:
        self.index = hnswlib.Index(space="cosine", dim=dimensions)
        if empty:  # else load() fills it (init_index first would make hnswlib warn and throw it away)
            self.index.init_index(max_elements=max(capacity, 16), ef_construction=EF_CONSTRUCTION, M=M)
            self.index.set_num_threads(1)
        self.deleted: set[int] = set()

    @classmethod
    def load(cls, path: Path, dimensions: int, size: int, checksum: int, deleted: list[int]) -> _Graph:
        """The graph in ``path``; ``ValueError`` saying why if it is not the one described."""
        if not path.is_file():
            raise ValueError(f"the index file {path.name!r} is missing")
        if path.stat().st_size != size:
            raise ValueError("index file and description do not match (a save was cut off)")
        # Never hand hnswlib a damaged file: it reads its header's sizes on trust (a
        # segmentation fault, not an exception). ~0.2 s for 100,000 vectors.
        if _size_and_checksum(path)[1] != checksum:
            raise ValueError("index file damaged (its checksum does not match)")
        graph = cls(dimensions, empty=False)
        try:
            graph.index.load_index(str(path), max_elements=0)
        except (RuntimeError, ValueError, MemoryError) as exc:
            raise ValueError(f"corrupt index file: {exc}") from None
        graph.index.set_num_threads(1)
        graph.deleted = set(deleted)
        return graph

    @property
    def vectors(self) -> int:
        return self.index.get_current_count() - len(self.deleted)

    @property
    def capacity(self) -> int:
        return self.index.get_max_elements()

    def labels(self) -> set[int]:
        return set(self.index.get_ids_list()) - self.deleted

    def add(self, labels: np.ndarray, vectors: np.ndarray) -> None:
        needed = self.index.get_current_count() + len(labels)
        if needed > self.capacity:
            self.index.resize_index(max(needed, self.capacity * 2))
        for label in self.deleted.intersection(int(label) for label in labels):
            self.index.unmark_deleted(label)  # a row id used again: its new vector replaces the old
            self.deleted.discard(label)
        self.index.add_items(vectors, labels, num_threads=1)

    def remove(self, labels: list[int]) -> None:
        present = set(self.index.get_ids_list())
        for label in labels:
            if label in present and label not in self.deleted:
                self.index.mark_deleted(label)
                self.deleted.add(label)

    def nearest(self, vector: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The labels and cosine distances of the ``k`` nearest (at most: what it holds), nearest first."""
        k = min(k, self.vectors)
        if k <= 0:
            return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.float32)
        self.index.set_ef(max(EF_SEARCH, k))  # hnswlib does not save ef: set for every query
        labels, distances = self.index.knn_query(vector.reshape(1, -1), k=k, num_threads=1)
        return labels[0], distances[0]

    def vector_of(self, label: int) -> np.ndarray | None:
        if label in self.deleted:
            return None
        try:
            return np.asarray(self.index.get_items([label])[0], dtype=np.float32)
        except RuntimeError:  # "Label not found"
            return None


class HnswIndex:
    """Cosine hnswlib graphs of unit vectors, one per document kind; see the module docstring."""

    def __init__(self, dimensions: int, model_id: str, *, capacity: int = INITIAL_CAPACITY) -> None:
        self.dimensions = dimensions
        self.model_id = model_id
        self._graphs = {kind: _Graph(dimensions, capacity) for kind in DOCUMENT_KINDS}
        self.from_old_format = False  # loaded from a one-graph save: save it anew
        self._stored: OrderedDict[int, np.ndarray] = OrderedDict()  # label -> its vector, least recent first

    # -- contents ---------------------------------------------------------------------

    @property
    def vectors(self) -> int:
        """Live vectors (deleted ones excluded)."""
        return sum(graph.vectors for graph in self._graphs.values())

    def vectors_by_kind(self) -> dict[str, int]:
        return {kind: graph.vectors for kind, graph in self._graphs.items()}

    @property
    def capacity(self) -> int:
        return sum(graph.capacity for graph in self._graphs.values())

    def labels(self) -> set[int]:
        """The labels of the live vectors."""
        return set().union(*(graph.labels() for graph in self._graphs.values()))

    def add(self, labels: np.ndarray, vectors: np.ndarray) -> None:
        """Add (or replace) vectors; a graph's capacity grows first when it would run out."""
        self._forget(labels)
        codes = np.asarray(labels, dtype=np.uint64) % 4
        for kind, graph in self._graphs.items():
            mine = codes == _CODES[kind]
            if mine.any():
                graph.add(labels[mine], vectors[mine])

    def remove(self, labels: list[int]) -> None:
        self._forget(labels)
        for kind, graph in self._graphs.items():
            mine = [label for label in labels if kind_of(label) == kind]
            if mine:
                graph.remove(mine)

    def nearest(self, vector: np.ndarray, k: int, *, kind: str | None = None) -> list[tuple[int, float]]:
        """The ``k`` (at most: what the index holds) nearest labels and their cosine distances, nearest first;
        ``kind``: only documents of that kind (its graph alone is asked)."""
        if kind is not None:
            labels, distances = self._graphs[kind].nearest(vector, k)
        else:
            answers = [graph.nearest(vector, k) for graph in self._graphs.values()]
            labels = np.concatenate([answer[0] for answer in answers])
            distances = np.concatenate([answer[1] for answer in answers])
            nearest = np.argsort(distances, kind="stable")[:k]
            labels, distances = labels[nearest], distances[nearest]
        return list(zip(labels.tolist(), distances.tolist()))

    def vector_of(self, label: int) -> np.ndarray | None:
        return self._graphs[kind_of(label)].vector_of(label)

    def nearest_among(self, vector: np.ndarray, labels: Sequence[int], k: int) -> list[tuple[int, float]]:
        """The ``k`` of ``labels`` nearest to ``vector``, with their cosine distances, nearest first: every
        one compared (labels without a vector are left out)."""
        known, rows = [], []
        for label in labels:
            stored = self._stored_vector(int(label))
            if stored is not None:
                known.append(int(label))
                rows.append(stored)
        if not rows:
            return []
        query = np.asarray(vector, dtype=np.float32)
        distances = 1.0 - np.stack(rows) @ (query / (np.linalg.norm(query) or 1.0))
        nearest = np.argsort(distances, kind="stable")[:k]
        return [(known[i], float(distances[i])) for i in nearest.tolist()]

    def _stored_vector(self, label: int) -> np.ndarray | None:
        stored = self._stored.get(label)
        if stored is not None:
            self._stored.move_to_end(label)
            return stored
        stored = self.vector_of(label)  # as hnswlib keeps it: normalized, for the cosine space
        if stored is not None:
            self._stored[label] = stored
            if len(self._stored) > VECTOR_CACHE:
                self._stored.popitem(last=False)
        return stored

    def _forget(self, labels: Sequence[int] | np.ndarray) -> None:
        if self._stored:
            for label in labels:
                self._stored.pop(int(label), None)

    # -- files ------------------------------------------------------------------------

    def save(self, directory: Path) -> int:
        """Write the graphs and switch the description to them (see the module docstring); returns their bytes."""
        stamp = time.time_ns()
        graphs: dict[str, GraphFile] = {}
        for kind, graph in self._graphs.items():
            index_file = f"vectors.{stamp}.{kind}.hnsw"
            index_path = directory / index_file
            graph.index.save_index(str(index_path))
            os.chmod(index_path, 0o600)
            _fsync(index_path)
            size, checksum = _size_and_checksum(index_path)
            graphs[kind] = GraphFile(index_file, size, checksum, graph.vectors, sorted(graph.deleted))
        description = IndexDescription(FORMAT, self.model_id, self.dimensions, graphs, time.time())
        temporary = directory / (DESCRIPTION_FILE + ".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, msgspec.json.encode(description))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, directory / DESCRIPTION_FILE)
        _fsync(directory)  # the rename
        named = {graph.index_file for graph in graphs.values()}
        for stale in directory.glob(INDEX_FILES):
            if stale.name not in named:
                stale.unlink(missing_ok=True)
        return sum(graph.index_bytes for graph in graphs.values())

    @staticmethod
    def current_files(directory: Path) -> list[Path]:
        """The graph files the description names, if there is a readable description."""
        try:
            description = msgspec.json.decode((directory / DESCRIPTION_FILE).read_bytes(), type=IndexDescription)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            return []
        return [directory / graph.index_file for graph in description.graphs.values()]

    @classmethod
    def load(cls, directory: Path, dimensions: int, model_id: str) -> tuple[HnswIndex | None, str]:
        """The saved index, or ``None`` and why it cannot be used."""
        description_path = directory / DESCRIPTION_FILE
        if not description_path.exists():
            return None, "no saved index"
        try:
            raw = description_path.read_bytes()
            common = msgspec.json.decode(raw, type=_Common)
            if common.format not in (FORMAT, ONE_GRAPH_FORMAT):
                return None, f"index format {common.format}, expected {FORMAT}"
            if common.model_id != model_id or common.dimensions != dimensions:
                return None, (f"index of {common.model_id} ({common.dimensions} dimensions); the embedder is "
                              f"{model_id} ({dimensions})")
            if common.format == ONE_GRAPH_FORMAT:
                return cls._split(directory, msgspec.json.decode(raw, type=_OneGraphDescription), dimensions,
                                  model_id)
            description = msgspec.json.decode(raw, type=IndexDescription)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            return None, f"unreadable {DESCRIPTION_FILE}: {exc}"
        except ValueError as exc:  # a graph file that is not the one described
            return None, str(exc)
        if set(description.graphs) != set(DOCUMENT_KINDS):
            return None, f"{DESCRIPTION_FILE} names graphs of {sorted(description.graphs)}"
        index = cls(dimensions, model_id, capacity=16)
        for kind, described in description.graphs.items():
            try:
                graph = _read_graph(directory, described, dimensions)
            except ValueError as exc:
                return None, str(exc)
            if graph.vectors != described.vectors:
                return None, f"the {kind} graph holds {graph.vectors} vectors, its description says {described.vectors}"
            index._graphs[kind] = graph
        return index, ""

    @classmethod
    def _split(cls, directory: Path, description: _OneGraphDescription, dimensions: int,
               model_id: str) -> tuple[HnswIndex | None, str]:
        """An index saved in one graph of every kind (format 3), split into a graph per kind.

        ``ValueError`` if its file is not the one described."""
        old = _read_graph(directory, description, dimensions)
        labels = np.array(sorted(old.labels()), dtype=np.uint64)
        index = cls(dimensions, model_id, capacity=16)
        for start in range(0, len(labels), MIGRATION_CHUNK):  # get_items answers in Python floats
            chunk = labels[start : start + MIGRATION_CHUNK]
            index.add(chunk, np.asarray(old.index.get_items(chunk), dtype=np.float32))
        if index.vectors != description.vectors:
            return None, f"index holds {index.vectors} vectors, its description says {description.vectors}"
        index.from_old_format = True
        return index, ""


def _read_graph(directory: Path, described: GraphFile, dimensions: int) -> _Graph:
    """The graph file ``described`` names, in ``directory``; ``ValueError`` saying why it is not usable."""
    if "/" in described.index_file:
        raise ValueError(f"the index file {described.index_file!r} is not in {directory}")
    return _Graph.load(directory / described.index_file, dimensions, described.index_bytes, described.checksum,
                       described.deleted)


def _size_and_checksum(path: Path) -> tuple[int, int]:
    size = checksum = 0
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            size += len(chunk)
            checksum = zlib.crc32(chunk, checksum)
    return size, checksum


def _fsync(path: Path) -> None:
    """Flush a file, or a directory's entries, to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
