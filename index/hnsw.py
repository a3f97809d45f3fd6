"""The hnswlib index and its file: labels, capacity, deletions, an atomic save, a checked load.

We use the ``chroma-hnswlib`` distribution of hnswlib (``import hnswlib``, the same C++
library and Python API): PyPI's ``hnswlib`` is a source distribution that needs a C++
compiler at install time, ``chroma-hnswlib`` has manylinux wheels.

A document (``kind``, ``row_id``) is the label ``row_id * 4 + code(kind)``, so labels of
different kinds never collide and a label tells which row it is.

Files, in the data dir: ``vectors.json`` names the index file of the last save and
says what it holds (the embedding model, dimensions, the file's size and checksum,
deleted labels); the index file, ``vectors.<n>.hnsw``, is in hnswlib's own format. A
save writes a new index file, fsyncs it, then replaces ``vectors.json`` atomically
(write, fsync, rename): that rename is the moment the new save counts. A crash at any
point leaves the description naming a whole file, the old one or the new one; files
it does not name (a save cut off) are removed by the next save.

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
from collections.abc import Callable
from pathlib import Path

import hnswlib
import msgspec
import numpy as np

from sessionmem.records import DOCUMENT_KINDS

DESCRIPTION_FILE = "vectors.json"
INDEX_FILES = "vectors.*.hnsw"
FORMAT = 3
# Graph parameters. M=16 and ef_construction=100: ~0.97 recall@10 on MiniLM vectors at
# ef=64 while an add stays well under a millisecond (bench/search.py measures both).
M = 16
EF_CONSTRUCTION = 100
EF_SEARCH = 64
# A kind-filtered query asks again with hnswlib's filter when fewer than 1 in this many of the
# unfiltered answer are of that kind (HnswIndex.nearest).
CROWDED_SHARE = 4
INITIAL_CAPACITY = 1024

_CODES = {kind: code for code, kind in enumerate(DOCUMENT_KINDS)}
_KINDS = dict(enumerate(DOCUMENT_KINDS))


def label_of(kind: str, row_id: int) -> int:
    return row_id * 4 + _CODES[kind]


def key_of(label: int) -> tuple[str, int]:
    return _KINDS[label % 4], label // 4


class IndexDescription(msgspec.Struct, frozen=True):
    format: int
    index_file: str  # vectors.<n>.hnsw, in the same directory
    model_id: str
    dimensions: int
    index_bytes: int  # the size of vectors.hnsw when this description was written
    checksum: int  # its CRC-32: hnswlib trusts the sizes in its file's header, and a damaged one crashes it
    vectors: int  # live vectors
    deleted: list[int]  # labels marked deleted
    saved_at: float


class HnswIndex:
    """A cosine hnswlib index of unit vectors; see the module docstring."""

    def __init__(self, dimensions: int, model_id: str, *, capacity: int = INITIAL_CAPACITY) -> None:
        self.dimensions = dimensions
        self.model_id = model_id
        self._index = hnswlib.Index(space="cosine", dim=dimensions)
        self._index.init_index(max_elements=max(capacity, 16), ef_construction=EF_CONSTRUCTION, M=M)
        self._index.set_num_threads(1)
        self._deleted: set[int] = set()

    # -- contents ---------------------------------------------------------------------

    @property
    def vectors(self) -> int:
        """Live vectors (deleted ones excluded)."""
        return self._index.get_current_count() - len(self._deleted)

    @property
    def capacity(self) -> int:
        return self._index.get_max_elements()

    def labels(self) -> set[int]:
        """The labels of the live vectors."""
        return set(self._index.get_ids_list()) - self._deleted

    def add(self, labels: np.ndarray, vectors: np.ndarray) -> None:
        """Add (or replace) vectors; the capacity grows first when it would run out."""
        if len(labels) == 0:
            return
        needed = self._index.get_current_count() + len(labels)
        if needed > self.capacity:
            self._index.resize_index(max(needed, self.capacity * 2))
        for label in self._deleted.intersection(int(label) for label in labels):
            self._index.unmark_deleted(label)  # a row id used again: its new vector replaces the old
            self._deleted.discard(label)
        self._index.add_items(vectors, labels, num_threads=1)

    def remove(self, labels: list[int]) -> None:
        present = set(self._index.get_ids_list())
        for label in labels:
            if label in present and label not in self._deleted:
                self._index.mark_deleted(label)
                self._deleted.add(label)

    def nearest(self, vector: np.ndarray, k: int, *, kind: str | None = None) -> list[tuple[int, float]]:
        """The ``k`` (at most: what the index holds) nearest labels and their cosine distances, nearest first.

        ``kind``: only documents of that kind. The index is asked without a filter first:
        hnswlib calls a filter back in Python for every candidate it weighs (0.94 ms against
        0.08 ms for 200 of 115,000 vectors). Only when fewer than ``k // CROWDED_SHARE`` of
        the answer are of that kind (the neighbourhood is crowded by documents of other kinds,
        such as one prompt stored many times) is it asked again with the filter.
        """
        k = min(k, self.vectors)
        if k <= 0:
            return []
        found = self._knn(vector, k)
        if kind is None:
            return found
        code = _CODES[kind]

        def accept(label: int) -> bool:
            return label % 4 == code

        wanted = [(label, distance) for label, distance in found if accept(label)]
        if len(wanted) >= k // CROWDED_SHARE:
            return wanted
        while k >= 1:
            try:
                return self._knn(vector, k, accept)
            except RuntimeError:  # fewer than k of that kind: hnswlib then returns nothing, not fewer
                k //= 2
        return []

    def _knn(self, vector: np.ndarray, k: int, accept: Callable[[int], bool] | None = None
             ) -> list[tuple[int, float]]:
        self._index.set_ef(max(EF_SEARCH, k))  # hnswlib does not save ef: set for every query
        labels, distances = self._index.knn_query(vector.reshape(1, -1), k=k, num_threads=1, filter=accept)
        return [(int(label), float(distance)) for label, distance in zip(labels[0], distances[0])]

    def vector_of(self, label: int) -> np.ndarray | None:
        if label in self._deleted:
            return None
        try:
            return np.asarray(self._index.get_items([label])[0], dtype=np.float32)
        except RuntimeError:  # "Label not found"
            return None

    # -- files ------------------------------------------------------------------------

    def save(self, directory: Path) -> int:
        """Write the index and switch the description to it (see the module docstring); returns its bytes."""
        index_file = f"vectors.{time.time_ns()}.hnsw"
        index_path = directory / index_file
        self._index.save_index(str(index_path))
        os.chmod(index_path, 0o600)
        _fsync(index_path)
        size, checksum = _size_and_checksum(index_path)
        description = IndexDescription(FORMAT, index_file, self.model_id, self.dimensions, size, checksum,
                                       self.vectors, sorted(self._deleted), time.time())
        temporary = directory / (DESCRIPTION_FILE + ".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, msgspec.json.encode(description))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, directory / DESCRIPTION_FILE)
        _fsync(directory)  # the rename
        for stale in directory.glob(INDEX_FILES):
            if stale.name != index_file:
                stale.unlink(missing_ok=True)
        return size

    @staticmethod
    def current_file(directory: Path) -> Path | None:
        """The index file the description names, if there is a readable description."""
        try:
            description = msgspec.json.decode((directory / DESCRIPTION_FILE).read_bytes(), type=IndexDescription)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            return None
        return directory / description.index_file

    @classmethod
    def load(cls, directory: Path, dimensions: int, model_id: str) -> tuple[HnswIndex | None, str]:
        """The saved index, or ``None`` and why it cannot be used."""
        description_path = directory / DESCRIPTION_FILE
        if not description_path.exists():
            return None, "no saved index"
        try:
            description = msgspec.json.decode(description_path.read_bytes(), type=IndexDescription)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            return None, f"unreadable {DESCRIPTION_FILE}: {exc}"
        if description.format != FORMAT:
            return None, f"index format {description.format}, expected {FORMAT}"
        if description.model_id != model_id or description.dimensions != dimensions:
            return None, (f"index of {description.model_id} ({description.dimensions} dimensions); the embedder is "
                          f"{model_id} ({dimensions})")
        index_path = directory / description.index_file
        if "/" in description.index_file or not index_path.is_file():
            return None, f"the index file {description.index_file!r} is missing"
        if index_path.stat().st_size != description.index_bytes:
            return None, "index file and description do not match (a save was cut off)"
        # Never hand hnswlib a damaged file: it reads its header's sizes on trust (a
        # segmentation fault, not an exception). ~0.2 s for 100,000 vectors.
        if _size_and_checksum(index_path)[1] != description.checksum:
            return None, "index file damaged (its checksum does not match)"
        index = cls(dimensions, model_id, capacity=16)
        try:
            index._index.load_index(str(index_path), max_elements=0)
        except (RuntimeError, ValueError, MemoryError) as exc:
            return None, f"corrupt index file: {exc}"
        index._index.set_num_threads(1)
        index._deleted = set(description.deleted)
        if index.vectors != description.vectors:
            return None, f"index holds {index.vectors} vectors, its description says {description.vectors}"
        return index, ""


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
