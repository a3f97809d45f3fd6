"""Hybrid search's fusion (search/hybrid.py ``fuse``): the promises it makes whatever the two rankings are."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from sessionmem.records import OBSERVATION, RankedKey
from sessionmem.search import hybrid
from sessionmem.search.hybrid import fuse


def ranking(scores: list[float], ids: list[int]) -> list[RankedKey]:
    """A retriever's answer: ``ids`` best first, with ``scores`` sorted to match (higher is better)."""
    return [RankedKey(OBSERVATION, row_id, score) for row_id, score in zip(ids, sorted(scores, reverse=True))]


def ids_of(fused: list[tuple[str, int, float]]) -> list[int]:
    return [row_id for _, row_id, _ in fused]


scores = st.lists(st.floats(min_value=0.01, max_value=60.0), min_size=1, max_size=80)
similarities = st.lists(st.floats(min_value=-1.0, max_value=1.0), min_size=1, max_size=80)


def distinct_ids(size: int, draw: st.DrawFn) -> list[int]:
    """``size`` different row ids."""
    return draw(st.lists(st.integers(1, 200), min_size=size, max_size=size, unique=True))


@st.composite
def two_rankings(draw: st.DrawFn) -> tuple[list[RankedKey], list[RankedKey], dict[tuple[str, int], float]]:
    words_scores, meaning_scores = draw(scores), draw(similarities)
    words = ranking(words_scores, distinct_ids(len(words_scores), draw))
    meaning = ranking(meaning_scores, distinct_ids(len(meaning_scores), draw))
    held = {(key.kind, key.row_id): draw(st.sampled_from([0.0, 0.25, 0.5, 1.0]))
            for key in words[: hybrid.WORDS_HELD_DEPTH]}
    return words, meaning, held


@given(two_rankings())
def test_scores_run_from_1_to_0_and_never_rise_down_the_list(rankings: tuple) -> None:
    fused = fuse(*rankings)
    values = [score for _, _, score in fused]
    assert all(0.0 <= value <= 1.0 for value in values)
    assert values == sorted(values, reverse=True)
    words, meaning, _ = rankings
    assert sorted(ids_of(fused)) == sorted({key.row_id for key in words + meaning})  # each once, none lost


@given(two_rankings())
def test_one_side_empty_keeps_the_others_order_exactly(rankings: tuple) -> None:
    words, meaning, held = rankings
    assert ids_of(fuse(words, [], held)) == [key.row_id for key in words]
    assert ids_of(fuse([], meaning, {})) == [key.row_id for key in meaning]


@given(two_rankings())
def test_first_in_both_holding_every_word_is_first(rankings: tuple) -> None:
    words, meaning, held = rankings
    meaning = [words[0], *(key for key in meaning if key.row_id != words[0].row_id)]
    meaning = ranking([key.score for key in meaning], [key.row_id for key in meaning])
    held[(OBSERVATION, words[0].row_id)] = 1.0
    assert ids_of(fuse(words, meaning, held))[0] == words[0].row_id


def test_a_match_of_one_word_of_a_long_question_yields_to_meaning() -> None:
    """Words' best holds one word of eight; meaning's best is close: meaning's comes first."""
    words = ranking([30.0, 12.0, 11.0, 10.0], [1, 2, 3, 4])
    meaning = ranking([0.62, 0.41, 0.40, 0.39], [9, 8, 7, 6])
    held = {(OBSERVATION, row_id): 1 / 8 for row_id in (1, 2, 3, 4)}
    assert ids_of(fuse(words, meaning, held))[0] == 9


def test_a_match_of_every_word_keeps_first_when_meaning_is_flat() -> None:
    """Words' best holds every word and stands far above the rest; meaning finds nothing that stands out."""
    words = ranking([40.0, 9.0, 8.5, 8.0], [1, 2, 3, 4])
    meaning = ranking([0.31, 0.30, 0.30, 0.29, 0.29], [9, 8, 7, 6, 5])
    held = {(OBSERVATION, 1): 1.0, **{(OBSERVATION, row_id): 0.5 for row_id in (2, 3, 4)}}
    assert ids_of(fuse(words, meaning, held))[0] == 1


@given(scores, st.randoms(use_true_random=False), st.integers(0, 50), st.integers(1, 100))
def test_more_candidates_leave_the_first_results_alone(words_scores: list[float], rng: random.Random, longer: int,
                                                       extra: int) -> None:
    """A deeper page asks each side for more candidates: those past the reference rank change nothing above."""
    words = ranking(words_scores, list(range(1, len(words_scores) + 1)))
    held = {(key.kind, key.row_id): 0.5 for key in words[: hybrid.WORDS_HELD_DEPTH]}
    similarities = [rng.uniform(0.0, 1.0) for _ in range(hybrid.STANDING_REFERENCE + longer)]
    meaning = ranking(similarities, list(range(500, 500 + len(similarities))))
    deeper = meaning + ranking([-0.5] * extra, list(range(1000, 1000 + extra)))
    shallow = [item for item in fuse(words, meaning, held) if item[2] > 0]
    assert fuse(words, deeper, held)[: len(shallow)] == shallow


def test_the_docs_state_the_fusion_the_code_runs() -> None:
    """docs/search.md's "How hybrid ranks" gives the constants: they must be these."""
    from pathlib import Path

    docs = (Path(__file__).resolve().parent.parent / "docs" / "search.md").read_text()
    weight = hybrid.WORDS_WEIGHT
    assert (f"`{weight:g} × words standing × share of words held + {1 - weight:g} × meaning standing`"
            in " ".join(docs.split()))
    assert f"down to 0 at its {hybrid.STANDING_REFERENCE}th" in " ".join(docs.split())
    assert f"read for the first {hybrid.WORDS_HELD_DEPTH}," in " ".join(docs.split())
    assert hybrid.MEANING_FLOOR is None  # the docs describe meaning's standing relative to its list
