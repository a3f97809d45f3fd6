"""The vector index: the HNSW graphs (voyager), their files and rules (hnsw.py), and the actor that keeps it in step
with SQLite."""

from __future__ import annotations

import json
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio
import voyager

from sessionmem.index.hnsw import DESCRIPTION_FILE, HnswIndex, _stored_vectors, key_of, label_of
from sessionmem.testing.harness import InProcessWorker, open_worker

DIMENSIONS = 16


def unit_vectors(count: int, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(count, DIMENSIONS)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def labels(*keys: tuple[str, int]) -> np.ndarray:
    return np.array([label_of(kind, row_id) for kind, row_id in keys], dtype=np.uint64)


def test_nearest_of_a_kind_when_another_kind_crowds_the_neighbourhood() -> None:
    """One prompt stored 300 times fills the nearest places: observations are still found, nearest first
    (each kind has its own graph)."""
    rng = np.random.default_rng(3)
    focus = unit_vectors(1, seed=9)[0]
    copies = focus + 0.01 * rng.normal(size=(300, DIMENSIONS)).astype(np.float32)
    others = unit_vectors(120, seed=10)
    index = HnswIndex(DIMENSIONS, "m")
    index.add(labels(*(("prompt", i) for i in range(1, 301))), copies)
    index.add(labels(*(("observation", i) for i in range(1, 121))), others)
    assert {key_of(label)[0] for label, _ in index.nearest(focus, 100)} == {"prompt"}
    found = index.nearest(focus, 100, kind="observation")
    assert len(found) == 100 and {key_of(label)[0] for label, _ in found} == {"observation"}
    # The same as brute force over the observations (cosine distance), nearest first.
    distances = 1 - (others / np.linalg.norm(others, axis=1, keepdims=True)) @ (focus / np.linalg.norm(focus))
    expected = [label_of("observation", int(i) + 1) for i in np.argsort(distances)[:10]]
    assert [label for label, _ in found[:10]] == expected
    # Asking for more than the index holds of that kind gives all it has, never an error.
    fewer = index.nearest(focus, 200, kind="observation")
    assert len(fewer) == 120 and {key_of(label)[0] for label, _ in fewer} == {"observation"}
    assert index.vectors_by_kind() == {"observation": 120, "summary": 0, "prompt": 300}
    # Every kind: the nearest of the three graphs' answers, nearest first.
    mixed = index.nearest(others[0], 5)
    assert mixed[0][0] == label_of("observation", 1) and [d for _, d in mixed] == sorted(d for _, d in mixed)


def test_labels_name_kind_and_row() -> None:
    for key in [("observation", 1), ("summary", 1), ("prompt", 1), ("observation", 2**40)]:
        assert key_of(label_of(*key)) == key
    assert len({label_of(kind, 7) for kind in ("observation", "summary", "prompt")}) == 3


def test_a_saved_index_loads_whole(tmp_path: Path) -> None:
    index = HnswIndex(DIMENSIONS, "model-a")
    vectors = unit_vectors(50)
    index.add(labels(*[("observation", n) for n in range(1, 51)]), vectors)
    index.add(labels(("summary", 1), ("prompt", 1)), unit_vectors(2, seed=5))
    index.remove([label_of("observation", 7)])
    index.save(tmp_path)  # an earlier save, replaced by the next
    (tmp_path / "vectors.1.observation.hnsw").write_bytes(b"what a save cut off leaves")
    size = index.save(tmp_path)
    saved = sorted(tmp_path.glob("vectors.*.hnsw"))  # the old files are gone
    assert saved == sorted(HnswIndex.current_files(tmp_path)) and len(saved) == 3
    assert sum(path.stat().st_size for path in saved) == size
    assert all(path.stat().st_mode & 0o777 == 0o600 for path in saved)
    assert (tmp_path / DESCRIPTION_FILE).stat().st_mode & 0o777 == 0o600

    loaded, reason = HnswIndex.load(tmp_path, DIMENSIONS, "model-a")
    assert loaded is not None and reason == ""
    assert loaded.vectors == 51 and label_of("observation", 7) not in loaded.labels()
    assert loaded.vectors_by_kind() == {"observation": 49, "summary": 1, "prompt": 1}
    nearest = loaded.nearest(vectors[2], 3)
    assert key_of(nearest[0][0]) == ("observation", 3) and nearest[0][1] < 1e-5
    assert all(key_of(label) != ("observation", 7) for label, _ in loaded.nearest(vectors[6], 51))


def write_hnswlib_save(directory: Path, format_: int) -> list[Path]:
    """What the hnswlib versions saved: format 3, every kind in one graph file; format 4, a file per kind; each
    file in hnswlib's layout (no "VOYA" header: its first field is the offset of level 0), described whole."""
    directory.mkdir(parents=True, exist_ok=True)
    header = np.array([0, 64, 3, 104, 96, 32], dtype="<u8").tobytes()  # offset, capacity, count, sizes of a record

    def graph_file(name: str, deleted: list[int]) -> dict[str, Any]:
        data = header + bytes(range(256)) * 2
        (directory / name).write_bytes(data)
        return {"index_file": name, "index_bytes": len(data), "checksum": zlib.crc32(data), "vectors": 3,
                "deleted": deleted}

    common = {"format": format_, "model_id": "model-a", "dimensions": DIMENSIONS, "saved_at": 1.0}
    if format_ == 3:
        description = {**common, **graph_file("vectors.7.hnsw", [])}
    else:
        description = {**common, "graphs": {kind: graph_file(f"vectors.7.{kind}.hnsw", [])
                                            for kind in ("observation", "summary", "prompt")}}
    (directory / DESCRIPTION_FILE).write_bytes(json.dumps(description).encode())
    return sorted(directory.glob("vectors.7*.hnsw"))


@pytest.mark.parametrize("format_", [3, 4])
def test_an_index_saved_by_hnswlib_is_refused_and_its_files_go_at_the_next_save(tmp_path: Path, format_: int) -> None:
    """voyager cannot read hnswlib's files: they are never handed to it (the owner rebuilds from the database)."""
    old_files = write_hnswlib_save(tmp_path, format_)
    assert HnswIndex.load(tmp_path, DIMENSIONS, "model-a") == (None, f"saved by hnswlib (index format {format_}): rebuilt")
    assert HnswIndex.current_files(tmp_path) == [] or format_ == 4
    index = HnswIndex(DIMENSIONS, "model-a")
    index.add(labels(("observation", 1)), unit_vectors(1))
    index.save(tmp_path)
    assert not any(path.exists() for path in old_files) and len(HnswIndex.current_files(tmp_path)) == 3
    loaded, reason = HnswIndex.load(tmp_path, DIMENSIONS, "model-a")
    assert loaded is not None and reason == "" and loaded.vectors == 1


@pytest.mark.parametrize("damage", ["other model", "other dimensions", "cut-off save", "corrupt file",
                                    "a damaged link", "cut to half, the size described", "another format",
                                    "no description", "no index file"])
def test_a_damaged_or_foreign_index_is_refused_with_a_reason(tmp_path: Path, damage: str) -> None:
    index = HnswIndex(DIMENSIONS, "model-a")
    index.add(labels(*[("summary", n) for n in range(1, 21)]), unit_vectors(20))
    index.save(tmp_path)
    index_file = next(path for path in HnswIndex.current_files(tmp_path) if ".summary." in path.name)
    model, dimensions = "model-a", DIMENSIONS
    if damage == "other model":
        model = "model-b"
    elif damage == "other dimensions":
        dimensions = 32
    elif damage == "cut-off save":
        with open(index_file, "r+b") as file:
            file.truncate(1000)
    elif damage == "corrupt file":
        data = bytearray(index_file.read_bytes())
        data[:64] = b"\xff" * 64  # the header
        index_file.write_bytes(bytes(data))
    elif damage == "a damaged link":  # of a level-0 record: voyager reads it on trust (a segmentation fault)
        data = bytearray(index_file.read_bytes())
        data[200:208] = b"\xff" * 8
        index_file.write_bytes(bytes(data))
    elif damage == "cut to half, the size described":
        data = index_file.read_bytes()
        index_file.write_bytes(data[: len(data) // 2].ljust(len(data), b"\0"))
    elif damage == "another format":
        description = json.loads((tmp_path / DESCRIPTION_FILE).read_bytes())
        (tmp_path / DESCRIPTION_FILE).write_bytes(json.dumps({**description, "format": 99}).encode())
    elif damage == "no index file":
        index_file.unlink()
    else:
        (tmp_path / DESCRIPTION_FILE).unlink()
    loaded, reason = HnswIndex.load(tmp_path, dimensions, model)
    assert loaded is None and reason
    if damage in ("corrupt file", "a damaged link", "cut to half, the size described"):
        assert reason == "index file damaged (its checksum does not match)"
    assert HnswIndex.load(tmp_path / "elsewhere", DIMENSIONS, "model-a") == (None, "no saved index")


def test_capacity_grows_and_k_is_clamped() -> None:
    index = HnswIndex(DIMENSIONS, "m", capacity=16)
    vectors = unit_vectors(300)
    for start in range(0, 300, 50):
        index.add(labels(*[("prompt", n) for n in range(start + 1, start + 51)]), vectors[start:start + 50])
    assert index.vectors == 300 and index.capacity >= 300
    assert len(index.nearest(vectors[0], 10_000)) == 300  # k beyond what it holds: all of it, no error
    assert HnswIndex(DIMENSIONS, "m").nearest(vectors[0], 5) == []


def test_a_removed_document_can_come_back_with_a_new_vector() -> None:
    index = HnswIndex(DIMENSIONS, "m")
    old, new = unit_vectors(2, seed=1)
    index.add(labels(("observation", 1)), old[None])
    index.remove([label_of("observation", 1)])
    assert index.vectors == 0 and index.nearest(old, 1) == []
    index.add(labels(("observation", 1)), new[None])
    assert index.vectors == 1
    ((label, distance),) = index.nearest(new, 1)
    assert key_of(label) == ("observation", 1) and distance < 1e-5


def test_a_vector_added_again_replaces_the_old_one_in_the_graph_and_after_a_reload(tmp_path: Path) -> None:
    """voyager updates a label added again in place (and undeletes it): the graph and the kept rows both hold the
    new vector, once, and a save and load keep it so."""
    index = HnswIndex(DIMENSIONS, "m")
    vectors = unit_vectors(60, seed=4)
    index.add(labels(*[("summary", n) for n in range(1, 51)]), vectors[:50])
    replaced, removed_then_back = label_of("summary", 5), label_of("summary", 6)
    index.remove([removed_then_back])
    index.add(np.array([replaced, removed_then_back], dtype=np.uint64), vectors[50:52])
    index.save(tmp_path)
    loaded, reason = HnswIndex.load(tmp_path, DIMENSIONS, "m")
    assert loaded is not None, reason
    for searched in (index, loaded):
        assert searched.vectors == 50 and searched.capacity >= 50
        for label, vector, old in ((replaced, vectors[50], vectors[4]), (removed_then_back, vectors[51], vectors[5])):
            assert searched.nearest(vector, 1) == [(label, pytest.approx(0.0, abs=1e-5))]
            assert searched.vector_of(label) == pytest.approx(vector, abs=1e-6)
            assert label not in [found for found, _ in searched.nearest(old, 1)]
        assert len(searched.nearest(vectors[0], 100)) == 50  # each label once


def test_a_query_the_graph_cannot_fill_is_answered_by_comparing_every_vector(monkeypatch: pytest.MonkeyPatch) -> None:
    """voyager raises RecallError when its search finds fewer than k live vectors (a sparse graph, most of it
    deleted): the index compares every kept vector instead, and answers exactly."""
    monkeypatch.setattr("sessionmem.index.hnsw.M", 2)  # a graph sparse enough to be cut apart by deletions
    monkeypatch.setattr("sessionmem.index.hnsw.EF_CONSTRUCTION", 2)
    index = HnswIndex(DIMENSIONS, "m")
    vectors = unit_vectors(400, seed=1)
    index.add(labels(*[("observation", n) for n in range(1, 401)]), vectors)
    index.remove([label_of("observation", n) for n in range(13, 401)])
    query = unit_vectors(1, seed=2)[0]
    with pytest.raises(voyager.RecallError):
        index._graphs["observation"].index.query(query, k=12, num_threads=1, query_ef=64)
    found = index.nearest(query, 12, kind="observation")
    distances = 1.0 - vectors[:12] @ query
    assert [label for label, _ in found] == [label_of("observation", int(i) + 1) for i in np.argsort(distances)]
    assert [d for _, d in found] == pytest.approx(sorted(distances), abs=1e-5)
    assert [label for label, _ in index.nearest(query, 12)] == [label for label, _ in found]  # every kind


def test_an_index_with_an_empty_graph_saves_and_loads(tmp_path: Path) -> None:
    """A kind with no document yet (voyager cannot load a graph it saved empty) or with every one removed."""
    index = HnswIndex(DIMENSIONS, "m")
    index.save(tmp_path)
    loaded, reason = HnswIndex.load(tmp_path, DIMENSIONS, "m")
    assert loaded is not None and reason == "" and loaded.vectors == 0 and loaded.nearest(unit_vectors(1)[0], 3) == []
    loaded.add(labels(("prompt", 1), ("prompt", 2)), unit_vectors(2))
    loaded.remove([label_of("prompt", 1), label_of("prompt", 2)])
    loaded.add(labels(("observation", 1)), unit_vectors(1, seed=3))
    loaded.save(tmp_path)
    again, reason = HnswIndex.load(tmp_path, DIMENSIONS, "m")
    assert again is not None and reason == ""
    assert again.vectors_by_kind() == {"observation": 1, "summary": 0, "prompt": 0}
    assert again.nearest(unit_vectors(1)[0], 3, kind="prompt") == [] and again.labels() == {label_of("observation", 1)}


def test_nearest_among_compares_each_of_a_few_documents() -> None:
    """A small project's documents among many: exactly the nearest of them, with hnswlib's own distances."""
    index = HnswIndex(DIMENSIONS, "m")
    vectors = unit_vectors(400)
    keys = [("observation", n) for n in range(1, 401)]
    index.add(labels(*keys), vectors)
    query = unit_vectors(1, seed=9)[0]
    few = [label_of(*key) for key in keys[::40]] + [label_of("observation", 999)]  # one without a vector
    found = index.nearest_among(query, few, 3)
    distances = 1.0 - vectors[::40] @ query
    assert [label for label, _ in found] == [few[i] for i in np.argsort(distances)[:3]]
    assert [d for _, d in found] == pytest.approx(sorted(distances)[:3], abs=1e-5)
    # The same distances as the graph gives, and every one of them when k is larger.
    ((label, distance),) = index.nearest(vectors[40], 1)
    assert index.nearest_among(vectors[40], few, 1) == [(label, pytest.approx(distance, abs=1e-5))]
    assert len(index.nearest_among(query, few, 100)) == 10
    # A document's vector replaced is compared anew (not from what was kept of it).
    index.add(labels(keys[0]), query[None])
    assert index.nearest_among(query, few, 1)[0] == (label_of(*keys[0]), pytest.approx(0.0, abs=1e-5))
    index.remove([label_of(*keys[0])])
    assert label_of(*keys[0]) not in [label for label, _ in index.nearest_among(query, few, 100)]


def _projects_index(seed: int = 3) -> tuple[HnswIndex, np.ndarray, np.ndarray, dict[str, dict[str, np.ndarray]]]:
    """3,000 documents of three kinds in a big (60 %), a medium (15 %) and small projects (1 % each): the
    index, every label, its vector, and each project's row ids by kind."""
    rng = np.random.default_rng(seed)
    keys = ([("observation", n) for n in range(1, 2401)] + [("summary", n) for n in range(1, 301)]
            + [("prompt", n) for n in range(1, 301)])
    vectors = unit_vectors(len(keys), seed=seed)
    index = HnswIndex(DIMENSIONS, "m")
    for start in range(0, len(keys), 500):  # added as the actor adds: a chunk at a time
        index.add(labels(*keys[start:start + 500]), vectors[start:start + 500])
    names = ["big"] * 60 + ["medium"] * 15 + [f"small-{n}" for n in range(25)]
    owner = rng.choice(names, size=len(keys))
    projects: dict[str, dict[str, np.ndarray]] = {}
    for (kind, row_id), project in zip(keys, owner):
        projects.setdefault(str(project), {}).setdefault(kind, []).append(row_id)  # type: ignore[arg-type]
    rows = {project: {kind: np.array(ids, dtype=np.int64) for kind, ids in by_kind.items()}
            for project, by_kind in projects.items()}
    return index, labels(*keys), vectors, rows


def _true_nearest(query: np.ndarray, all_labels: np.ndarray, vectors: np.ndarray, rows: dict[str, np.ndarray],
                  k: int) -> list[tuple[int, float]]:
    """Brute force: every document of ``rows`` compared, nearest first (ties: the lower label)."""
    wanted = {label_of(kind, int(row_id)) for kind, ids in rows.items() for row_id in ids}
    mine = np.array([int(label) in wanted for label in all_labels])
    distances = 1.0 - vectors[mine] @ query
    order = np.lexsort((all_labels[mine], distances))[:k]
    return [(int(all_labels[mine][i]), float(distances[i])) for i in order]


def test_a_projects_nearest_are_the_true_nearest_of_its_own_documents(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compared one by one: the brute-force answer, exactly; through the graph (a project that is a large
    share of it): never another project's, and its nearest as well as the graph finds any."""
    index, all_labels, vectors, projects = _projects_index()
    queries = unit_vectors(20, seed=11)
    # Rows that follow each other (a session's) are multiplied where they lie: the same answers.
    projects["sessions"] = {"observation": np.concatenate([np.arange(100, 400), np.arange(900, 1000), [1500]]),
                            "prompt": np.arange(1, 40)}
    # A small project is compared one by one as it is; any project when told to.
    for project, one_by_one in (("small-3", None), ("sessions", None), ("medium", 10**9), ("big", 10**9)):
        if one_by_one:
            monkeypatch.setattr("sessionmem.index.hnsw.EXACT_PER_ASKED", one_by_one)
        for query in queries:
            found = index.nearest_of_rows(query, projects[project], 10)
            truth = _true_nearest(query, all_labels, vectors, projects[project], 10)
            assert [label for label, _ in found] == [label for label, _ in truth], project
            assert [d for _, d in found] == pytest.approx([d for _, d in truth], abs=1e-5)
    monkeypatch.setattr("sessionmem.index.hnsw.EXACT_PER_ASKED", 0)  # through the graph, whatever the share
    for project in ("big", "small-3"):
        members = {label_of(kind, int(row_id)) for kind, ids in projects[project].items() for row_id in ids}
        recalled = 0
        for query in queries:
            found = index.nearest_of_rows(query, projects[project], 10)
            truth = dict(_true_nearest(query, all_labels, vectors, projects[project], 10))
            assert len(found) == min(10, len(members)) and {label for label, _ in found} <= members, project
            recalled += len(truth.keys() & {label for label, _ in found})
        assert recalled / (len(truth) * len(queries)) >= 0.9, project


def test_the_vectors_kept_for_comparison_follow_adds_removals_and_a_reload(tmp_path: Path) -> None:
    index, all_labels, vectors, projects = _projects_index(seed=5)
    replaced = label_of("observation", 7)
    index.add(np.array([replaced], dtype=np.uint64), unit_vectors(1, seed=6))
    index.remove([label_of("observation", 8), label_of("prompt", 3)])
    index.save(tmp_path)
    loaded, reason = HnswIndex.load(tmp_path, DIMENSIONS, "m")
    assert loaded is not None, reason
    graph_of = {kind: voyager.Index.load(str(next(tmp_path.glob(f"vectors.*.{kind}.hnsw"))))
                for kind in ("observation", "prompt")}
    for label in (replaced, label_of("observation", 9), label_of("prompt", 4)):
        stored = graph_of[key_of(label)[0]].get_vector(label)
        assert loaded.vector_of(label) == pytest.approx(np.asarray(stored), abs=1e-6)
    assert loaded.vector_of(label_of("observation", 8)) is None and loaded.vector_of(label_of("prompt", 3)) is None
    query = unit_vectors(1, seed=12)[0]
    for project in ("big", "small-3"):
        before = index.nearest_of_rows(query, projects[project], 10)
        assert loaded.nearest_of_rows(query, projects[project], 10) == [
            (label, pytest.approx(distance, abs=1e-6)) for label, distance in before]
        assert label_of("observation", 8) not in dict(loaded.nearest_of_rows(query, projects[project], 3000))


def test_vectors_added_newest_first_are_compared_in_the_order_of_their_ids_after_a_reload(tmp_path: Path) -> None:
    """Catch-up adds the newest first: a reload keeps the vectors in the order of their ids, runs intact."""
    index = HnswIndex(DIMENSIONS, "m")
    vectors = unit_vectors(600, seed=8)
    for start in range(600, 0, -50):  # the newest fifty first
        keys = [("observation", n) for n in range(start - 49, start + 1)]
        index.add(labels(*keys), vectors[start - 50:start])
    index.save(tmp_path)
    loaded, reason = HnswIndex.load(tmp_path, DIMENSIONS, "m")
    assert loaded is not None, reason
    rows = {"observation": np.concatenate([np.arange(20, 300), np.arange(410, 460)])}
    all_labels = labels(*[("observation", n) for n in range(1, 601)])
    query = unit_vectors(1, seed=13)[0]
    truth = _true_nearest(query, all_labels, vectors, rows, 10)
    for searched in (index, loaded):
        assert searched.nearest_of_rows(query, rows, 10) == [(label, pytest.approx(d, abs=1e-5)) for label, d in truth]
    assert loaded.vector_of(label_of("observation", 33)) == pytest.approx(vectors[32], abs=1e-6)


def test_the_vectors_are_read_from_the_graph_when_its_file_is_not_laid_out_as_expected(tmp_path: Path) -> None:
    """The vectors are read from the file's level-0 records for speed; anything unexpected in them falls back to
    asking the graph."""
    index = HnswIndex(DIMENSIONS, "m")
    vectors = unit_vectors(20, seed=2)
    index.add(labels(*[("summary", n) for n in range(1, 21)]), vectors)
    index.remove([label_of("summary", 2)])
    index.save(tmp_path)
    path = next(tmp_path.glob("vectors.*.summary.hnsw"))
    graph = voyager.Index.load(str(path))
    odd = tmp_path / "odd"
    odd.write_bytes(b"VOYA" + b"\0" * 400)  # not the graph's layout
    for source in (path, odd, None):
        found, kept = _stored_vectors(graph, source, DIMENSIONS, {label_of("summary", 2)})
        order = np.argsort(found)
        assert found[order].tolist() == [label_of("summary", n) for n in range(1, 21) if n != 2]
        assert kept[order] == pytest.approx(np.delete(vectors, 1, axis=0), abs=1e-6)


# -- the actor, with the real store and the real embedder ------------------------------------------

PROJECT_CWD = "/home/me/shop"


async def remember(worker: InProcessWorker, session: str, prompt: str, tools: list[tuple[str, dict[str, Any]]]) -> None:
    await worker.post("/api/sessions/init", {"claudeSessionId": session, "cwd": PROJECT_CWD, "prompt": prompt})
    for number, (tool, tool_input) in enumerate(tools):
        await worker.post("/api/sessions/observations", {
            "claudeSessionId": session, "cwd": PROJECT_CWD, "tool_name": tool, "tool_input": tool_input,
            "tool_response": "done", "tool_use_id": f"{session}-{number}"})
    await worker.post("/api/sessions/summarize", {"claudeSessionId": session, "cwd": PROJECT_CWD,
                                                  "last_assistant_message": f"Done: {prompt}."})
    await worker.wait_idle()
    with trio.fail_after(60):
        await worker.services.index.caught_up()


async def index_stats(worker: InProcessWorker) -> dict[str, Any]:
    return (await worker.debug())["index"]


async def test_the_index_follows_every_commit_and_comes_back_after_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with open_worker(data, embedder="minilm", batch_quiet_s=0.05) as worker:
        await remember(worker, "s1", "make checkout refuse an empty cart", [
            ("Edit", {"file_path": f"{PROJECT_CWD}/cart.py", "old_string": "pass", "new_string": "raise Empty"}),
            ("Bash", {"command": "pytest tests/test_cart.py", "description": "run the cart tests"})])
        stats = await index_stats(worker)
        # a prompt, two observations, a summary: each stored row has its vector
        assert stats["state"] == "ready" and stats["vectors"] == 4 and stats["pending"] == 0
        assert stats["added"] == 4 and stats["modelId"].startswith("all-MiniLM-L6-v2")
        assert stats["vectorsByKind"] == {"observation": 2, "summary": 1, "prompt": 1}
    # the shutdown saved it
    assert len(HnswIndex.current_files(data / "index")) == 3

    async with open_worker(data, embedder="minilm", batch_quiet_s=0.05) as worker:
        await remember(worker, "s2", "show prices with two decimals", [
            ("Edit", {"file_path": f"{PROJECT_CWD}/price.py", "old_string": "{}", "new_string": "{:.2f}"})])
        stats = await index_stats(worker)
        assert stats["vectors"] == 7 and stats["added"] == 3  # loaded four, embedded only the new three
        assert stats["rebuilds"] == 0

    index_file = next(path for path in HnswIndex.current_files(data / "index") if ".observation." in path.name)
    index_file.write_bytes(b"not an index")
    async with open_worker(data, embedder="minilm", batch_quiet_s=0.05) as worker:
        with trio.fail_after(60):
            await worker.services.index.caught_up()
        stats = await index_stats(worker)
        assert stats["rebuilds"] == 1 and "match" in stats["lastRebuildReason"]  # size no longer matches
        assert stats["vectors"] == 7 and stats["added"] == 7
        found = await worker.get("/api/search?q=shopping+basket+cannot+be+empty&mode=vector&limit=3")
        assert found["vectors"] == "used" and "cart" in " ".join(r["title"] + r["snippet"] for r in found["results"])


async def test_an_index_saved_by_hnswlib_is_rebuilt_from_the_database_nothing_lost(tmp_path: Path) -> None:
    """A data dir of the hnswlib versions: its index is refused, every stored document embedded again from its text
    in SQLite, and the next save leaves only the new files."""
    data = tmp_path / "data"
    async with open_worker(data, embedder="minilm", batch_quiet_s=0.05) as worker:
        await remember(worker, "s1", "make checkout refuse an empty cart", [
            ("Edit", {"file_path": f"{PROJECT_CWD}/cart.py", "old_string": "pass", "new_string": "raise Empty"})])
        model = (await index_stats(worker))["modelId"]
    for path in (data / "index").iterdir():
        path.unlink()
    old_files = write_hnswlib_save(data / "index", 4)
    description = json.loads((data / "index" / DESCRIPTION_FILE).read_bytes())
    (data / "index" / DESCRIPTION_FILE).write_bytes(json.dumps({**description, "model_id": model, "dimensions": 384}).encode())

    async with open_worker(data, embedder="minilm", batch_quiet_s=0.05) as worker:
        with trio.fail_after(60):
            await worker.services.index.caught_up()
        stats = await index_stats(worker)
        assert stats["rebuilds"] == 1 and stats["lastRebuildReason"] == "saved by hnswlib (index format 4): rebuilt"
        assert stats["vectors"] == 3 and stats["added"] == 3 and stats["state"] == "ready"
        found = await worker.get("/api/search?q=shopping+basket+cannot+be+empty&mode=vector&limit=3")
        assert found["vectors"] == "used" and "cart" in " ".join(r["title"] + r["snippet"] for r in found["results"])
    assert not any(path.exists() for path in old_files) and len(HnswIndex.current_files(data / "index")) == 3
    async with open_worker(data, embedder="minilm", batch_quiet_s=0.05) as worker:
        with trio.fail_after(60):
            await worker.services.index.caught_up()
        stats = await index_stats(worker)
        assert stats["rebuilds"] == 0 and stats["vectors"] == 3 and stats["added"] == 0


async def test_a_busy_index_answers_at_once_and_search_falls_back_to_words(tmp_path: Path) -> None:
    async with open_worker(tmp_path / "data", embedder="minilm", batch_quiet_s=0.05) as worker:
        await remember(worker, "s1", "rename the invoice module", [
            ("Edit", {"file_path": f"{PROJECT_CWD}/invoice.py", "old_string": "a", "new_string": "b"})])
        index = worker.services.index
        async with index._lane:  # what a save of a large index does for about a second
            with trio.fail_after(2):
                found = await worker.get("/api/search?q=invoice&limit=5")
        assert found["vectors"] == "busy" and found["results"]
        assert all(result["matchedBy"] == ["words"] for result in found["results"])
        assert (await index_stats(worker))["busyQueries"] == 1


async def test_a_search_says_how_much_meaning_cannot_find_yet(tmp_path: Path) -> None:
    async with open_worker(tmp_path / "data", embedder="minilm", batch_quiet_s=0.05) as worker:
        await remember(worker, "s1", "rename the invoice module", [
            ("Edit", {"file_path": f"{PROJECT_CWD}/invoice.py", "old_string": "a", "new_string": "b"})])
        assert (await worker.get("/api/search?q=invoice&limit=5"))["unembedded"] == 0
        index = worker.services.index
        index._quiet_s = index._max_yield_s = 30.0  # the next chunk waits, as while hooks keep arriving
        await worker.post("/api/sessions/init", {"claudeSessionId": "s2", "cwd": PROJECT_CWD,
                                                 "prompt": "split the invoice module"})
        await worker.wait_idle()
        with trio.fail_after(10):
            while index.pending == 0:
                await trio.sleep(0.02)
        found = await worker.get("/api/search?q=invoice&limit=5")
        assert found["vectors"] == "used" and found["unembedded"] == 1
        assert (await worker.get("/api/search?q=invoice&mode=fts"))["unembedded"] == 0  # meaning not asked


async def test_vectors_off_means_words_only(tmp_path: Path) -> None:
    async with open_worker(tmp_path / "data", embedder="none", batch_quiet_s=0.05) as worker:
        await remember(worker, "s1", "add a discount code field", [
            ("Edit", {"file_path": f"{PROJECT_CWD}/discount.py", "old_string": "a", "new_string": "b"})])
        stats = await index_stats(worker)
        assert stats["state"] == "off" and stats["vectors"] == 0
        hybrid = await worker.get("/api/search?q=discount")
        assert hybrid["vectors"] == "off" and hybrid["results"]
        assert (await worker.get("/api/search?q=discount&mode=vector"))["results"] == []
        assert not list((tmp_path / "data" / "index").glob("vectors*"))


async def test_an_unusable_index_directory_leaves_the_worker_searching_by_words(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "index").write_text("a file where the index directory should be")
    async with open_worker(data, embedder="minilm", batch_quiet_s=0.05) as worker:
        await store_some(worker)
        stats = await index_stats(worker)
        assert stats["state"] == "failed" and "index" in stats["lastError"] and stats["failures"] == 1
        found = await worker.get("/api/search?q=invoice")
        assert found["results"] and found["vectors"] == "failed"  # no index: words only


async def store_some(worker: InProcessWorker) -> None:
    await worker.post("/api/sessions/init", {"claudeSessionId": "s", "cwd": PROJECT_CWD, "prompt": "invoice totals"})
    await worker.post("/api/sessions/observations", {
        "claudeSessionId": "s", "cwd": PROJECT_CWD, "tool_name": "Edit", "tool_use_id": "t",
        "tool_input": {"file_path": f"{PROJECT_CWD}/invoice.py", "old_string": "a", "new_string": "b"}})
    await worker.wait_idle()


class CountingEmbedder:
    """Unit vectors, and when each chunk ran (trio time)."""

    name = "counting"
    model_id = "counting@1"
    dimensions = DIMENSIONS

    def __init__(self, seconds_per_chunk: float = 0.0) -> None:
        self.chunks_at: list[float] = []
        self.texts: list[list[str]] = []
        self.threads: list[int | None] = []
        self.seconds_per_chunk = seconds_per_chunk
        self.token = trio.lowlevel.current_trio_token()

    def embed(self, texts: list[str], *, threads: int | None = None) -> np.ndarray:
        self.chunks_at.append(trio.from_thread.run_sync(trio.current_time, trio_token=self.token))
        self.texts.append(list(texts))
        self.threads.append(threads)
        time.sleep(self.seconds_per_chunk)
        return unit_vectors(len(texts), seed=len(self.chunks_at))

    def statistics(self) -> Any:
        return None

    def close(self) -> None:
        pass


# How long the database must be quiet before catching up goes on: writes come every 20 ms, and on a
# busy machine one can be late by far more than that without the database being quiet.
QUIET_S = 0.5


class SteadyWrites:
    """A journal write every 20 ms while started: a database that is never quiet for long."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self._on = False
        self._written = 0

    def start(self, nursery: trio.Nursery) -> None:
        self._on = True
        nursery.start_soon(self._write)

    def stop(self) -> None:
        self._on = False

    async def _write(self) -> None:
        from sessionmem.events import ObservationEvent

        while self._on:
            await self._store.accept_event(
                ObservationEvent("busy", "proj", tool_name="Read", tool_use_id=f"t{self._written}"), lambda e: None)
            self._written += 1
            await trio.sleep(0.02)


async def test_catching_up_waits_while_the_database_takes_writes(tmp_path: Path) -> None:
    from sessionmem.embed.service import EmbedderService
    from sessionmem.events import InitEvent
    from sessionmem.index.actor import VectorIndex
    from sessionmem.storage.sqlite.store import open_sqlite_store

    async with open_sqlite_store(tmp_path / "db.sqlite") as store:
        for n in range(40):  # forty prompts: stored as they are accepted, each a document
            await store.accept_init(InitEvent(f"s{n}", "proj", prompt=f"prompt {n}"), lambda e: None)
        embedder = CountingEmbedder()
        index = VectorIndex(store, EmbedderService(embedder), tmp_path / "index", chunk=8,
                            quiet_s=QUIET_S, max_yield_s=60)
        writes = SteadyWrites(store)  # hooks arriving

        async with trio.open_nursery() as nursery:
            writes.start(nursery)
            await nursery.start(index.run)
            await trio.sleep(1.0)
            assert embedder.chunks_at == []  # nothing embedded while writes went on
            writes.stop()
            quiet_from = trio.current_time()
            with trio.fail_after(30):
                await index.caught_up()
            stats = index.statistics()
            assert stats.vectors == 40 and len(embedder.chunks_at) == 5
            assert embedder.chunks_at[0] >= quiet_from + QUIET_S and stats.yields == 1  # then one after the other
            # A steady stream of writes delays a chunk by at most max_yield_s.
            index._max_yield_s = 0.3
            writes.start(nursery)
            for n in range(8):
                await store.accept_init(InitEvent(f"later{n}", "proj", prompt=f"later {n}"), lambda e: None)
            began = trio.current_time()
            with trio.fail_after(30):
                await index.caught_up()
            assert stats.vectors + 8 == index.statistics().vectors and embedder.chunks_at[-1] - began < 2
            writes.stop()
            nursery.cancel_scope.cancel()


async def test_what_is_stored_while_catching_up_waits_goes_first_and_counts_as_pending(tmp_path: Path) -> None:
    from sessionmem.embed.service import EmbedderService
    from sessionmem.events import InitEvent
    from sessionmem.index.actor import VectorIndex
    from sessionmem.storage.sqlite.store import open_sqlite_store

    async with open_sqlite_store(tmp_path / "db.sqlite") as store:
        embedder = CountingEmbedder()
        index = VectorIndex(store, EmbedderService(embedder), tmp_path / "index", chunk=4,
                            quiet_s=QUIET_S, max_yield_s=60)
        writes = SteadyWrites(store)  # a backfill: catching up waits all along

        async def prompts(label: str) -> None:
            for n in range(4):
                await store.accept_init(InitEvent(f"{label}{n}", "proj", prompt=f"{label} {n}"), lambda e: None)
            await trio.sleep(0.3)

        async with trio.open_nursery() as nursery:
            await nursery.start(index.run)
            with trio.fail_after(30):
                await index.caught_up()
            writes.start(nursery)
            await prompts("first")
            assert index.statistics().pending == 4 and embedder.texts == []  # waiting for a quiet moment
            await prompts("second")
            writes.stop()
            with trio.fail_after(30):
                await index.caught_up()
            assert index.statistics().vectors == 8
            assert [text.split()[0] for text in embedder.texts[0]] == ["second"] * 4  # the newest first
            nursery.cancel_scope.cancel()


async def test_catching_up_takes_two_threads_only_while_the_worker_is_idle(tmp_path: Path) -> None:
    from sessionmem.embed.service import EmbedderService
    from sessionmem.events import InitEvent
    from sessionmem.index.actor import VectorIndex
    from sessionmem.storage.sqlite.store import open_sqlite_store

    async with open_sqlite_store(tmp_path / "db.sqlite") as store:
        for n in range(8):
            await store.accept_init(InitEvent(f"s{n}", "proj", prompt=f"prompt {n}"), lambda e: None)
        embedder = CountingEmbedder(seconds_per_chunk=0.2)
        index = VectorIndex(store, EmbedderService(embedder), tmp_path / "index", chunk=2, quiet_s=0.05,
                            max_yield_s=0.3, idle_s=0.5)
        writes = SteadyWrites(store)
        async with trio.open_nursery() as nursery:
            await nursery.start(index.run)
            with trio.fail_after(30):
                await index.caught_up()
            # The first chunk saw the writes of the store for the first time; four chunks of 0.2 s later
            # nothing had been written or searched for more than idle_s.
            assert len(embedder.threads) == 4 and embedder.threads[0] == 1 and embedder.threads[-1] == 2
            idle = index.statistics().idle_chunks
            assert idle == embedder.threads.count(2) >= 1

            writes.start(nursery)  # hooks arriving: one thread for every chunk
            for n in range(4):
                await store.accept_init(InitEvent(f"later{n}", "proj", prompt=f"later {n}"), lambda e: None)
            with trio.fail_after(30):
                await index.caught_up()
            writes.stop()
            assert embedder.threads[4:] == [1, 1] and index.statistics().idle_chunks == idle
            nursery.cancel_scope.cancel()
