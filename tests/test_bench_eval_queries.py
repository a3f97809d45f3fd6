"""The retrieval evaluation's parts that need no replay: the written query format, the split and the metrics."""

from __future__ import annotations

import importlib
import json
import math
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURE_QUERIES = REPO / "tests" / "fixtures" / "eval-queries.jsonl"


def bench_module(name: str) -> ModuleType:
    if str(REPO / "bench") not in sys.path:
        sys.path.insert(0, str(REPO / "bench"))
    return importlib.import_module(name)


def line(**changes: Any) -> str:
    query = {"id": "vsla-001", "project": "vsla", "category": "failure",
             "query": "which benchmark crashed because the matrix was never freed",
             "answers": ["toolu_01AbC"], "why": "the valgrind run"}
    query.update(changes)
    return json.dumps({k: v for k, v in query.items() if v is not None})


def load(tmp_path: Path, *lines: str, name: str = "vsla.jsonl") -> list[Any]:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return bench_module("eval_queries").load_written([path])


def test_the_fixture_queries_follow_the_format() -> None:
    queries = bench_module("eval_queries").load_written([FIXTURE_QUERIES], file_named_after_project=False)
    assert len(queries) == len(FIXTURE_QUERIES.read_text().splitlines()) >= 10
    assert {q.query.category for q in queries} == set(bench_module("eval_queries").WRITTEN_CATEGORIES)


def test_a_well_formed_file_loads_with_each_line_located(tmp_path: Path) -> None:
    located = load(tmp_path, line(), "", line(id="vsla-002", category="paraphrase", answers=["a", "b"]))
    assert [(item.query.id, item.where) for item in located] == [
        ("vsla-001", f"{tmp_path / 'vsla.jsonl'}:1"), ("vsla-002", f"{tmp_path / 'vsla.jsonl'}:3")]


@pytest.mark.parametrize(("bad", "message"), [
    (line(category="question"), "Invalid enum value 'question' - at `$.category`"),
    (line(answer=["x"]), "unknown field `answer`"),
    (line(answers=[]), "Expected `array` of length >= 1 - at `$.answers`"),
    (line(answers=[str(n) for n in range(9)]), "Expected `array` of length <= 8 - at `$.answers`"),
    (line(why=None), "Object missing required field `why`"),
    (line(id="vsla-17"), "at `$.id`"),
    (line(id="templar-001"), "the id must be 'vsla', a dash and three digits"),
    (line(project="templar", id="templar-001"), "project 'templar' in vsla.jsonl"),
    (line(query="leak"), "the query has 1 words (3 to 20)"),
    (line(query="what did toolu_01AbC do there"), "the query names a tool use id"),
    (line(answers=["a", "a"]), "an answer is listed twice"),
    ('{"id": "vsla-001",', "not a JSON object"),
])
def test_a_faulty_line_is_refused_naming_its_file_and_line(tmp_path: Path, bad: str, message: str) -> None:
    with pytest.raises(bench_module("eval_queries").QueryFileError) as raised:
        load(tmp_path, line(id="vsla-000"), bad)
    assert str(raised.value).startswith(f"{tmp_path / 'vsla.jsonl'}:2: ")
    assert message in str(raised.value)


def test_an_id_used_twice_is_refused_naming_both_places(tmp_path: Path) -> None:
    (tmp_path / "vsla.jsonl").write_text(line() + "\n")
    (tmp_path / "other.jsonl").write_text(line(query="where did the sparse matrix leak show up") + "\n")
    queries = bench_module("eval_queries")
    with pytest.raises(queries.QueryFileError) as raised:
        queries.load_written(queries.query_files([tmp_path]), file_named_after_project=False)
    assert str(raised.value) == (f"{tmp_path / 'vsla.jsonl'}:1: id 'vsla-001' is already used at "
                                 f"{tmp_path / 'other.jsonl'}:1")


def test_check_reports_a_faulty_file_and_fails(tmp_path: Path) -> None:
    (tmp_path / "vsla.jsonl").write_text(line(category="question") + "\n")
    result = subprocess.run([sys.executable, str(REPO / "bench" / "retrieval.py"), "--check", "--queries",
                             str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert f"{tmp_path / 'vsla.jsonl'}:1: Invalid enum value 'question'" in result.stderr


def test_halves_depend_on_the_id_alone_and_split_neighbours() -> None:
    half_of = bench_module("eval_queries").half_of
    ids = [f"vsla-{n:03d}" for n in range(200)]
    halves = [half_of(i) for i in ids]
    assert halves == [half_of(i) for i in ids] and set(halves) == {"tune", "held_out"}
    # Neighbours (2k, 2k+1) are never in the same half: a project's queries split evenly.
    assert all(halves[n] != halves[n + 1] for n in range(0, 200, 2))
    assert half_of("prompt:vsla:abc:3") != half_of("prompt:vsla:abc:2")
    assert half_of("no-number") in ("tune", "held_out")


def test_metrics_of_one_ranking() -> None:
    metrics = bench_module("eval_metrics")
    assert metrics.METRICS == ("recall@5", "recall@10", "mrr", "ndcg@10")
    # Relevant 7 and 9, found at ranks 2 and 6.
    recall5, recall10, mrr, ndcg = metrics.query_metrics([1, 7, 2, 3, 4, 9, 5], {7, 9})
    assert (recall5, recall10, mrr) == (0.5, 1.0, 0.5)
    assert ndcg == pytest.approx((1 / math.log2(3) + 1 / math.log2(7)) / (1 + 1 / math.log2(3)))
    # Recall is capped by what can fit; nothing within ten counts nothing.
    assert metrics.query_metrics(list(range(1, 11)), set(range(1, 41)))[:2] == (1.0, 1.0)
    assert metrics.query_metrics(list(range(1, 20)), {15}) == (0.0, 0.0, 0.0, 0.0)


def test_bootstrap_intervals_hold_the_mean_and_are_reproducible() -> None:
    metrics = bench_module("eval_metrics")
    rows = [metrics.query_metrics([n % 3, 1, 2], {1}) for n in range(30)]
    first, second = metrics.summary(rows), metrics.summary(rows)
    assert first == second and first["queries"] == 30
    for name in metrics.METRICS:
        low, high = first["interval"][name]
        assert low <= first[name] <= high
    same = metrics.paired_difference(rows, rows)
    assert all(value == [0.0, 0.0, 0.0] for value in same.values())
    better = metrics.paired_difference([(1.0, 1.0, 1.0, 1.0)] * 30, rows, ("mrr",))
    assert better["mrr"][1] > 0  # every query better: the whole interval above zero
