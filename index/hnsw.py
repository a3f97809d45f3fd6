"""The HNSW vector index and its files: one graph per document kind, labels, capacity, deletions,
an atomic save, a checked load.

The graphs are Spotify's ``voyager`` (hnswlib's C++ algorithm, maintained, with wheels for
Linux x86_64 and arm64, macOS x86_64 and arm64 and Windows, one abi3 wheel for every
CPython from 3.12). The hnswlib distributions ship no wheel for Python 3.13 or later.
bench/vector_index_choice.py measures the two side by side (bench/README.md).

A document (``kind``, ``row_id``) is the label ``row_id * 4 + code(kind)``, so labels of
different kinds never collide and a label tells which row it is.

**One graph per kind.** Observations, summaries and prompts each have their own HNSW
graph. A query for one kind (SessionStart asks for observations only) walks that graph
alone: exact and as fast as an unfiltered query. In one shared graph it would need a
filter on every candidate the search weighs (hnswlib's called back into Python: 1.6 ms
against 0.3 ms at 100,000 observations; voyager has none), and copies of one prompt
could crowd the neighbourhood. A query for every kind asks the three graphs and keeps
the ``k`` nearest of their answers.

**A project's documents.** A search with a project filter asks for the nearest of the
project's own documents (:meth:`HnswIndex.nearest_of_rows`, given their row ids). In a
large store a graph's nearest are mostly other projects', so the graph is asked for
``k`` divided by the project's share of it (and a quarter more), and again for four
times as many if that left fewer than ``k`` of the project's. When the project has
fewer than :data:`EXACT_PER_ASKED` times as many documents as the graph would be asked
for, each of them is compared with the query instead: exact, and cheaper (at 100,000
observations, a project of 1,000 takes 0.3 ms of CPU where the graph asked for 7,500
would take ~10 ms). For the comparison every graph keeps its vectors again in one
float32 matrix found by row id (:class:`_Rows`, +1.5 KB a document): asking the graph
for them one by one would cost a call each. The matrix is in the order of the row ids
(sorted when loaded; new documents come last), so a project's documents lie in runs,
a session's each, multiplied where they lie.

Files, in the data dir: ``vectors.json`` names the graph files of the last save and
says what they hold (the embedding model, dimensions, each file's size and checksum,
deleted labels); each graph file, ``vectors.<n>.<kind>.hnsw``, is in voyager's own
format. A save writes new graph files, syncs them to the disk (``F_FULLFSYNC`` on macOS:
:func:`~sessionmem.protocol.oskit.sync_file`), then replaces ``vectors.json`` atomically
(write, sync, rename, sync the directory): that rename is the moment the new save counts. A
crash at any point leaves the description naming whole files, the old ones or the new
ones; files it does not name (a save cut off, an older format's) are removed by the
next save. An index saved by hnswlib (formats 3 and 4) cannot be read by voyager: it is
refused with that reason, and the owner rebuilds it from the database.

Resource handling:
    Not thread-safe by our rules (an add beside a query was a crash in hnswlib, and
    voyager's graph is the same code): one owner calls it, one call at a time
    (:mod:`sessionmem.index.actor` runs every call on one worker thread).

Error handling:
    :meth:`HnswIndex.load` never raises for a bad file: it returns why it could not
    use it (missing, corrupt, another model, dimension or format), and the owner
    rebuilds. A file is checked (size, CRC-32) before voyager reads it: voyager checks
    its header, but a damaged byte in a graph's links crashes the process (SIGSEGV).
"""

from __future__ import annotations

import os
import time
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import msgspec
import numpy as np
import voyager

from sessionmem.protocol.oskit import sync_directory, sync_file
from sessionmem.records import DOCUMENT_KINDS

DESCRIPTION_FILE = "vectors.json"
INDEX_FILES = "vectors.*.hnsw"
FORMAT = 5  # one voyager graph per kind
HNSWLIB_FORMATS = (3, 4)  # saved by hnswlib (3: every kind in one graph; 4: a graph per kind)

# Graph parameters. M=16, ef_construction=200, ef=64: recall@10 1.0 at 100,000 MiniLM-like vectors
# whatever the graph's random seed, where ef_construction=100 gave 0.994-1.0 by seed (hnswlib the
# same, seed for seed: the same algorithm); an add takes ~0.3 ms, beside the ~10 ms or more of
# embedding its text (bench/vector_index_choice.py, bench/README.md).
M = 16
EF_CONSTRUCTION = 200
EF_SEARCH = 64
INITIAL_CAPACITY = 1024
# Comparing one vector with the query costs about a twelfth of what each nearest asked of a
# graph does (CPU at 100,000 observations: a project of 7,500 compared in 0.7 ms, its rows
# in runs; a graph asked for 1,000 in 1.5 ms, and asked again a third of the time): a
# project is compared one by one unless it has more than this many times as many
# documents as the graph would be asked for.
EXACT_PER_ASKED = 12
# Rows multiplied by the query at a time: OpenBLAS runs a larger matrix-vector product on
# several threads, which on a busy 2-core machine waits for a core (7,500 rows: 0.6 ms in
# blocks of 1,024, 12 ms median in one product; bench/search_latency.py, 2 cores).
PRODUCT_ROWS = 1024
# Rows a run of consecutive rows needs on average to be multiplied where it lies rather than gathered
# (a gather copies each row: 1.3 of the 1.9 ms CPU for a project of 7,500 observations).
RUN_ROWS = 32
GRAPH_MARGIN = 1.25  # the graph is asked k / share x this, so that one ask is nearly always enough

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
    checksum: int  # its CRC-32: voyager trusts the links in its file, and a damaged one crashes it
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


class _Rows:
    """A graph's vectors again, normalized as the graph keeps them, one float32 row each, found by row id:
    what exact comparison reads (see the module docstring)."""

    def __init__(self, dimensions: int) -> None:
        self.matrix = np.empty((0, dimensions), dtype=np.float32)
        self.used = 0  # rows of the matrix written so far (live or dropped)
        self.live = 0
        self.row_of = np.full(0, -1, dtype=np.int64)  # row id -> its row of the matrix; -1: none

    def put(self, row_ids: np.ndarray, vectors: np.ndarray) -> None:
        """Keep ``vectors`` for ``row_ids`` (replacing what they had; of a row id given twice, the last)."""
        row_ids = np.asarray(row_ids, dtype=np.int64)
        if not len(row_ids):
            return
        # The last of each row id: unique over the reversed ids finds its first occurrence there.
        unique, first_reversed = np.unique(row_ids[::-1], return_index=True)
        vectors = np.asarray(vectors, dtype=np.float32)[len(row_ids) - 1 - first_reversed]
        vectors = vectors / (np.linalg.norm(vectors, axis=1, keepdims=True) + np.float32(1e-30))
        if unique[-1] >= len(self.row_of):
            grown = np.full(max(int(unique[-1]) + 1, len(self.row_of) * 5 // 4 + 1024), -1, dtype=np.int64)
            grown[: len(self.row_of)] = self.row_of
            self.row_of = grown
        rows = self.row_of[unique]
        new = rows < 0
        added = int(new.sum())
        if self.used + added > len(self.matrix):
            grown_matrix = np.empty((max(self.used + added, len(self.matrix) * 5 // 4 + 1024), self.matrix.shape[1]),
                                    dtype=np.float32)
            grown_matrix[: self.used] = self.matrix[: self.used]
            self.matrix = grown_matrix
        rows[new] = np.arange(self.used, self.used + added)
        self.used += added
        self.live += added
        self.row_of[unique] = rows
        self.matrix[rows] = vectors

    def drop(self, row_ids: Sequence[int]) -> None:
        ids = np.asarray(row_ids, dtype=np.int64)
        ids = ids[ids < len(self.row_of)]
        self.live -= int((self.row_of[ids] >= 0).sum())
        self.row_of[ids] = -1
        if self.used - self.live > max(1024, self.live):  # mostly dropped rows: keep the live ones only
            live_ids = np.flatnonzero(self.row_of >= 0)
            self.matrix = self.matrix[self.row_of[live_ids]]
            self.row_of[live_ids] = np.arange(len(live_ids))
            self.used = self.live = len(live_ids)

    def vector(self, row_id: int) -> np.ndarray | None:
        row = int(self.row_of[row_id]) if row_id < len(self.row_of) else -1
        return self.matrix[row].copy() if row >= 0 else None

    def distances(self, query: np.ndarray, row_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The cosine distances of ``query`` (a unit vector) to those of ``row_ids`` that have a vector:
        (those row ids, their distances)."""
        row_ids = np.asarray(row_ids, dtype=np.int64)
        rows = np.full(len(row_ids), -1, dtype=np.int64)
        inside = (row_ids >= 0) & (row_ids < len(self.row_of))
        rows[inside] = self.row_of[row_ids[inside]]
        known = rows >= 0
        row_ids, rows = row_ids[known], rows[known]
        similarity = np.empty(len(rows), dtype=np.float32)
        # A project's documents come in runs of rows (a session's, kept in the order of their ids):
        # long runs are multiplied where they lie, short ones gathered first.
        starts = np.flatnonzero(np.diff(rows, prepend=-2) != 1)
        if len(rows) >= RUN_ROWS * len(starts):
            for start, end in zip(starts.tolist(), [*starts[1:].tolist(), len(rows)]):
                first = int(rows[start])
                for block in range(start, end, PRODUCT_ROWS):
                    stop = min(end, block + PRODUCT_ROWS)
                    similarity[block:stop] = self.matrix[first + block - start : first + stop - start] @ query
        else:
            for start in range(0, len(rows), PRODUCT_ROWS):
                similarity[start : start + PRODUCT_ROWS] = self.matrix[rows[start : start + PRODUCT_ROWS]] @ query
        return row_ids, 1.0 - similarity

    @classmethod
    def of_graph(cls, index: voyager.Index, path: Path, dimensions: int, deleted: set[int]) -> _Rows:
        """The vectors of a graph loaded from ``path``, its deleted labels left out."""
        rows = cls(dimensions)
        if index.num_elements:
            labels, vectors = _stored_vectors(index, path, dimensions, deleted)  # normalized already, one per label
            ids = (labels // np.uint64(4)).astype(np.int64)
            if np.any(ids[1:] < ids[:-1]):  # in the order of their ids: a session's rows follow each other
                order = np.argsort(ids, kind="stable")
                ids, vectors = ids[order], vectors[order]
            rows.row_of = np.full(int(ids.max(initial=0)) + 1, -1, dtype=np.int64)
            rows.row_of[ids] = np.arange(len(ids))
            rows.matrix, rows.used, rows.live = vectors, len(ids), len(ids)
        return rows


# voyager's file: its metadata ("VOYA", version 1, dimensions, space, storage type, max norm,
# order-preserving transform), then hnswlib's header (six size_t -- among them the count, the size
# of a record and where its vector and label lie -- two 32-bit ints, three size_t, a double, a
# size_t), then every element's level-0 record: its links, its vector, its label.
_METADATA = np.dtype([("magic", "S4"), ("version", "<i4"), ("dimensions", "<i4"), ("space", "u1"),
                      ("storage", "u1"), ("max_norm", "<f4"), ("transform", "u1")])
_GRAPH_HEADER = np.dtype([("offset_level0", "<u8"), ("max_elements", "<u8"), ("count", "<u8"),
                          ("size_data_per_element", "<u8"), ("label_offset", "<u8"), ("offset_data", "<u8"),
                          ("max_level", "<i4"), ("enter_point", "<u4"), ("max_m", "<u8"), ("max_m0", "<u8"),
                          ("m", "<u8"), ("mult", "<f8"), ("ef_construction", "<u8")])


def _stored_vectors(index: voyager.Index, path: Path | None, dimensions: int,
                    deleted: set[int]) -> tuple[np.ndarray, np.ndarray]:
    """Every live label of a graph and its vector as the graph stores it (normalized, float32).

    Read straight from the level-0 records of the file the graph was loaded from (``path``,
    checked already), ~0.02 s for 100,000; from the graph's own ``get_vectors`` (~0.25 s)
    if the file is not laid out as expected (a sample of both must agree).
    """
    count, width = index.num_elements, dimensions * 4
    try:
        if path is None:
            raise ValueError("no file")
        metadata = np.fromfile(path, dtype=_METADATA, count=1)[0]
        if metadata["magic"] != b"VOYA" or int(metadata["version"]) != 1 or int(metadata["dimensions"]) != dimensions:
            raise ValueError("not a voyager file of version 1")
        header = np.fromfile(path, dtype=_GRAPH_HEADER, count=1, offset=_METADATA.itemsize)[0]
        per, at, label_at = (int(header[name]) for name in ("size_data_per_element", "offset_data", "label_offset"))
        if int(header["count"]) != count or at + width > per or label_at + 8 > per:
            raise ValueError("unexpected header")
        raw = np.memmap(path, dtype=np.uint8, mode="r", offset=_METADATA.itemsize + _GRAPH_HEADER.itemsize,
                        shape=(count, per))
        vectors = np.ascontiguousarray(raw[:, at : at + width]).view(np.float32)
        labels = np.ascontiguousarray(raw[:, label_at : label_at + 8]).view(np.uint64).ravel()
        del raw
        if deleted:
            live = np.isin(labels, np.fromiter(deleted, dtype=np.uint64, count=len(deleted)), invert=True)
            labels, vectors = labels[live], vectors[live]
        picked = np.linspace(0, len(labels) - 1, num=min(8, len(labels)), dtype=np.int64)
        if np.allclose(index.get_vectors(labels[picked].tolist()), vectors[picked], atol=1e-6):
            return labels, vectors
    except (OSError, KeyError, ValueError, TypeError, RuntimeError, IndexError):
        pass
    labels = np.array(sorted(set(index.ids) - deleted), dtype=np.uint64)
    return labels, np.asarray(index.get_vectors(labels.tolist()), dtype=np.float32).reshape(-1, dimensions)


class _Graph:
    """One HNSW graph (voyager, cosine, float32), the labels marked deleted in it, and its vectors again
    (:class:`_Rows`)."""

    def __init__(self, kind: str, dimensions: int, capacity: int = INITIAL_CAPACITY, *,
                 index: voyager.Index | None = None, deleted: set[int] | None = None) -> None:
        self.code = np.uint64(_CODES[kind])
        self.index = index if index is not None else voyager.Index(
            voyager.Space.Cosine, num_dimensions=dimensions, M=M, ef_construction=EF_CONSTRUCTION,
            max_elements=max(capacity, 16), storage_data_type=voyager.StorageDataType.Float32)
        self.deleted: set[int] = deleted or set()
        self.rows = _Rows(dimensions)

    @classmethod
    def load(cls, kind: str, path: Path, dimensions: int, described: GraphFile) -> _Graph:
        """The graph in ``path``, as ``described``; ``ValueError`` saying why if it is not that one."""
        size, checksum, deleted = described.index_bytes, described.checksum, described.deleted
        if not path.is_file():
            raise ValueError(f"the index file {path.name!r} is missing")
        if path.stat().st_size != size:
            raise ValueError("index file and description do not match (a save was cut off)")
        # Never hand voyager a damaged file: it checks its header, but reads the links of its
        # graph on trust (a damaged one is a segmentation fault, not an exception). ~0.05 s for
        # 100,000 vectors.
        if _size_and_checksum(path)[1] != checksum:
            raise ValueError("index file damaged (its checksum does not match)")
        if not described.vectors and not deleted:
            # voyager saves a graph that never held a vector, but refuses to load it (its entry point is -1).
            return cls(kind, dimensions)
        try:
            index = voyager.Index.load(str(path))
        except (RuntimeError, ValueError, MemoryError, OSError) as exc:
            raise ValueError(f"corrupt index file: {exc}") from None
        if (index.space != voyager.Space.Cosine or index.num_dimensions != dimensions
                or index.storage_data_type != voyager.StorageDataType.Float32):
            raise ValueError(f"the index file {path.name!r} is not a cosine float32 graph of {dimensions} dimensions")
        graph = cls(kind, dimensions, index=index, deleted=set(deleted))
        graph.rows = _Rows.of_graph(index, path, dimensions, graph.deleted)
        return graph

    @property
    def vectors(self) -> int:
        return int(self.index.num_elements) - len(self.deleted)

    @property
    def capacity(self) -> int:
        return int(self.index.max_elements)

    def labels(self) -> set[int]:
        return set(self.index.ids) - self.deleted  # voyager's ids include the deleted ones

    def add(self, labels: np.ndarray, vectors: np.ndarray) -> None:
        needed = self.index.num_elements + len(labels)
        if needed > self.capacity:  # voyager would grow to exactly what is needed, at every add
            self.index.resize(max(needed, self.capacity * 2))
        # A label added again (a row id used again after its deletion, or a vector replaced) is
        # updated in place, and undeleted.
        self.index.add_items(np.ascontiguousarray(vectors, dtype=np.float32),
                             ids=np.asarray(labels, dtype=np.uint64).tolist(), num_threads=1)
        self.deleted.difference_update(int(label) for label in labels)
        self.rows.put(np.asarray(labels, dtype=np.uint64) // 4, vectors)

    def remove(self, labels: list[int]) -> None:
        present = set(self.index.ids)
        for label in labels:
            if label in present and label not in self.deleted:
                self.index.mark_deleted(label)
                self.deleted.add(label)
        self.rows.drop([label // 4 for label in labels])

    def nearest(self, vector: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The labels and cosine distances of the ``k`` nearest (at most: what it holds), nearest first."""
        k = min(k, self.vectors)
        if k <= 0:
            return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.float32)
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        try:
            labels, distances = self.index.query(query, k=k, num_threads=1, query_ef=max(EF_SEARCH, k))
        except voyager.RecallError:
            # The graph found fewer than k live vectors (deletions can cut a sparse graph apart):
            # every vector compared instead.
            unit = query / (np.linalg.norm(query) or np.float32(1.0))
            ids, found = self.rows.distances(unit, np.flatnonzero(self.rows.row_of >= 0))
            order = np.lexsort((ids, found))[:k]
            return ids[order].astype(np.uint64) * np.uint64(4) + self.code, found[order]
        return labels, distances

    def vector_of(self, label: int) -> np.ndarray | None:
        return self.rows.vector(label // 4)

    def nearest_of(self, query: np.ndarray, row_ids: np.ndarray, k: int, *,
                   exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """The row ids and distances of the ``k`` nearest of ``row_ids`` (ascending; those without a vector
        left out), nearest first: from the graph when they are a large enough share of it (module
        docstring) unless ``exact``, else each compared (ties: the lower row id first)."""
        if not exact and len(row_ids) and self.vectors:
            ask = min(self.vectors, int(np.ceil(k * GRAPH_MARGIN * self.vectors / len(row_ids))))
            while ask * EXACT_PER_ASKED < len(row_ids):
                labels, distances = self.nearest(query, ask)
                ids = (labels // np.uint64(4)).astype(np.int64)
                at = np.minimum(np.searchsorted(row_ids, ids), len(row_ids) - 1)
                member = row_ids[at] == ids
                if member.sum() >= k or ask >= self.vectors:
                    return ids[member][:k], distances[member][:k]
                ask = min(self.vectors, ask * 4)
        ids, distances = self.rows.distances(query, row_ids)
        if k < len(ids):  # the k nearest, and any as near as the k-th (ties are ordered below)
            kth = distances[np.argpartition(distances, k - 1)[k - 1]]
            near = distances <= kth
            ids, distances = ids[near], distances[near]
        order = np.lexsort((ids, distances))[:k]
        return ids[order], distances[order]


class HnswIndex:
    """Cosine HNSW graphs of unit vectors, one per document kind; see the module docstring."""

    def __init__(self, dimensions: int, model_id: str, *, capacity: int = INITIAL_CAPACITY) -> None:
        self.dimensions = dimensions
        self.model_id = model_id
        self._graphs = {kind: _Graph(kind, dimensions, capacity) for kind in DOCUMENT_KINDS}

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
        codes = np.asarray(labels, dtype=np.uint64) % 4
        for kind, graph in self._graphs.items():
            mine = codes == _CODES[kind]
            if mine.any():
                graph.add(labels[mine], vectors[mine])

    def remove(self, labels: list[int]) -> None:
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
        wanted = np.asarray(labels, dtype=np.uint64)
        rows = {kind: np.unique((wanted[wanted % np.uint64(4) == np.uint64(code)] // np.uint64(4)).astype(np.int64))
                for kind, code in _CODES.items()}
        return self._nearest(vector, rows, k, exact=True)

    def nearest_of_rows(self, vector: np.ndarray, rows: Mapping[str, np.ndarray], k: int) -> list[tuple[int, float]]:
        """The ``k`` nearest of the documents ``rows`` names (row ids by kind, each ascending), with their
        cosine distances, nearest first: a project's documents, found as the module docstring says."""
        return self._nearest(vector, rows, k, exact=False)

    def _nearest(self, vector: np.ndarray, rows: Mapping[str, np.ndarray], k: int, *,
                 exact: bool) -> list[tuple[int, float]]:
        query = np.asarray(vector, dtype=np.float32)
        query = query / (np.linalg.norm(query) or np.float32(1.0))
        found_labels, found_distances = [], []
        for kind, row_ids in rows.items():
            if len(row_ids) and k > 0:
                ids, distances = self._graphs[kind].nearest_of(query, row_ids, k, exact=exact)
                found_labels.append(ids.astype(np.uint64) * np.uint64(4) + np.uint64(_CODES[kind]))
                found_distances.append(distances)
        if not found_labels:
            return []
        labels, distances = np.concatenate(found_labels), np.concatenate(found_distances)
        nearest = np.lexsort((labels, distances))[:k]
        return list(zip(labels[nearest].tolist(), distances[nearest].tolist()))

    # -- files ------------------------------------------------------------------------

    def save(self, directory: Path) -> int:
        """Write the graphs and switch the description to them (see the module docstring); returns their bytes."""
        stamp = time.time_ns()
        graphs: dict[str, GraphFile] = {}
        for kind, graph in self._graphs.items():
            index_file = f"vectors.{stamp}.{kind}.hnsw"
            index_path = directory / index_file
            graph.index.save(str(index_path))
            os.chmod(index_path, 0o600)
            _sync(index_path)
            size, checksum = _size_and_checksum(index_path)
            graphs[kind] = GraphFile(index_file, size, checksum, graph.vectors, sorted(graph.deleted))
        description = IndexDescription(FORMAT, self.model_id, self.dimensions, graphs, time.time())
        temporary = directory / (DESCRIPTION_FILE + ".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, msgspec.json.encode(description))
            sync_file(fd)
        finally:
            os.close(fd)
        os.replace(temporary, directory / DESCRIPTION_FILE)
        sync_directory(str(directory))  # the rename
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
            if common.format in HNSWLIB_FORMATS:
                return None, f"saved by hnswlib (index format {common.format}): rebuilt"
            if common.format != FORMAT:
                return None, f"index format {common.format}, expected {FORMAT}"
            if common.model_id != model_id or common.dimensions != dimensions:
                return None, (f"index of {common.model_id} ({common.dimensions} dimensions); the embedder is "
                              f"{model_id} ({dimensions})")
            description = msgspec.json.decode(raw, type=IndexDescription)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            return None, f"unreadable {DESCRIPTION_FILE}: {exc}"
        if set(description.graphs) != set(DOCUMENT_KINDS):
            return None, f"{DESCRIPTION_FILE} names graphs of {sorted(description.graphs)}"
        index = cls(dimensions, model_id, capacity=16)
        for kind, described in description.graphs.items():
            try:
                graph = _read_graph(directory, kind, described, dimensions)
            except ValueError as exc:
                return None, str(exc)
            if graph.vectors != described.vectors:
                return None, f"the {kind} graph holds {graph.vectors} vectors, its description says {described.vectors}"
            index._graphs[kind] = graph
        return index, ""


def _read_graph(directory: Path, kind: str, described: GraphFile, dimensions: int) -> _Graph:
    """The graph file ``described`` names, in ``directory``; ``ValueError`` saying why it is not usable."""
    if "/" in described.index_file:
        raise ValueError(f"the index file {described.index_file!r} is not in {directory}")
    return _Graph.load(kind, directory / described.index_file, dimensions, described)


def _size_and_checksum(path: Path) -> tuple[int, int]:
    size = checksum = 0
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            size += len(chunk)
            checksum = zlib.crc32(chunk, checksum)
    return size, checksum


def _sync(path: Path) -> None:
    """Flush a file voyager wrote to disk (:func:`~sessionmem.protocol.oskit.sync_file`)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        sync_file(fd)
    finally:
        os.close(fd)
