"""``--sweep``: the search under other settings, chosen on the tune half, judged on the held-out half.

A :class:`Setting` is one named variant of the search: a mode, what it changes (for the
table and the JSON), and a small function that builds the search with that change for
the length of a ``with`` block. :data:`FAMILIES` lists the functions that make the
settings; a new fusion adds its own family (its parameters as module constants patched
by :func:`patched`, or as ``SearchService`` options) and is swept beside the others.

Every setting runs over the tune half; per mode, the best on the tune half by
:data:`CRITERION` and the shipped search are then run over the held-out half: the
held-out figures of a chosen row are what a choice may claim.

Resource handling:
    :func:`patched` puts every module constant back when its block ends, however it ends.
    Nothing else may search while a patched setting runs (the sweep runs alone).
"""

from __future__ import annotations

import importlib
import itertools
import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

from eval_metrics import summary
from eval_queries import HELD_OUT, TUNE, Query
from eval_report import METRIC_TITLES, NO_SHARED_WORDS, scores_of
from eval_search import RememberingEmbedder, rank

from sessionmem.records import RankedKey
from sessionmem.search.hybrid import SearchMode, SearchService

# How the best setting of a mode is chosen on the tune half: the mean of these metrics.
CRITERION = ("recall@5", "recall@10", "mrr")


@dataclass(frozen=True)
class SearchParts:
    """What a search is built from: the worker's store and vector index, and an embedder."""

    store: Any
    index: Any
    embedder: Any


@dataclass(frozen=True)
class Setting:
    mode: SearchMode
    parameters: Mapping[str, Any]  # what differs from the shipped search ({}: the shipped search itself)
    apply: Callable[[SearchParts], AbstractContextManager[SearchService]] = field(compare=False)

    @property
    def name(self) -> str:
        if not self.parameters:
            return f"{self.mode.value} (shipped)"
        shown = ", ".join(f"{key.rsplit('.', 1)[-1]}={_shown(value)}" for key, value in self.parameters.items())
        return f"{self.mode.value}: {shown}"


def _shown(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_shown(v) for v in value) + ")"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def patched(mode: SearchMode, constants: Mapping[str, Any] | None = None, **service_options: Any) -> Setting:
    """The shipped ``SearchService`` (with ``service_options``), module constants replaced while it runs.

    ``constants`` maps a constant's dotted name under ``sessionmem`` (``"search.hybrid.WORDS_WEIGHT"``) to its value
    for the run; the name must be the one the code reads at search time (a module global, not a copy
    imported elsewhere).
    """
    constants = dict(constants or {})

    @contextmanager
    def apply(parts: SearchParts) -> Iterator[SearchService]:
        saved = []
        try:
            for dotted, value in constants.items():
                module_name, _, name = dotted.rpartition(".")
                module = importlib.import_module(f"sessionmem.{module_name}")
                if not hasattr(module, name):
                    raise AttributeError(f"sweep: sessionmem.{dotted} does not exist")
                saved.append((module, name, getattr(module, name)))
                setattr(module, name, value)
            yield SearchService(parts.store, parts.index, parts.embedder, **service_options)
        finally:
            for module, name, value in reversed(saved):
                setattr(module, name, value)

    return Setting(mode, {**constants, **service_options}, apply)


def shipped() -> list[Setting]:
    return [patched(mode) for mode in SearchMode]


def full_text_budgets() -> list[Setting]:
    """The full-text row budget (``storage.sqlite.fulltext.MATCH_BUDGET``; 10⁹: none)."""
    return [patched(SearchMode.FTS, {"storage.sqlite.fulltext.MATCH_BUDGET": budget})
            for budget in (250, 500, 1000, 2000, 4000, 10**9)]


def vector_cut_offs() -> list[Setting]:
    """The cosine distance beyond which a vector candidate is dropped."""
    return [patched(SearchMode.VECTOR, {"search.hybrid.MAX_VECTOR_DISTANCE": distance})
            for distance in (0.8, 0.9, 1.0)]


class ReciprocalRankFusion:
    """The fusion search shipped before score fusion (for comparison): a document's score is the sum of
    ``weight / (k + rank)`` over the rankings it is in (``held`` is not used)."""

    def __init__(self, k: int, weights: tuple[float, float] = (1.0, 1.0)) -> None:
        self.k, self.weights = k, weights

    def __repr__(self) -> str:
        return f"rrf(k={self.k}, weights={self.weights[0]:g}/{self.weights[1]:g})"

    def __call__(self, words: Sequence[RankedKey], meaning: Sequence[RankedKey],
                 held: Mapping[tuple[str, int], float]) -> list[tuple[str, int, float]]:
        scores: dict[tuple[str, int], float] = {}
        for weight, ranking in zip(self.weights, (words, meaning)):
            for place, key in enumerate(ranking, start=1):
                name = (key.kind, key.row_id)
                scores[name] = scores.get(name, 0.0) + weight / (self.k + place)
        ordered = sorted(scores.items(), key=lambda item: item[1], reverse=True)
        return [(kind, row_id, score) for (kind, row_id), score in ordered]


def rrf_fusions() -> list[Setting]:
    """Reciprocal rank fusion (what search shipped before): its constant, the weights of (words, meaning),
    the vector cut-off."""
    return [patched(SearchMode.HYBRID, {"search.hybrid.fuse": ReciprocalRankFusion(k, weights),
                                        "search.hybrid.MAX_VECTOR_DISTANCE": distance})
            for k, weights, distance in itertools.product((5, 10, 20, 60), ((1.0, 1.0), (1.0, 0.5), (0.5, 1.0)),
                                                          (0.8, 0.9, 1.0))]


def score_fusions() -> list[Setting]:
    """Score fusion (``search.hybrid.fuse``): the weight of words, the rank where a list's standing is 0,
    how many full-text candidates have their share of the query's words read (0: not weighed), and
    meaning's standing relative to its list (``None``) or above a similarity floor."""
    return [patched(SearchMode.HYBRID, {"search.hybrid.WORDS_WEIGHT": weight,
                                        "search.hybrid.STANDING_REFERENCE": reference,
                                        "search.hybrid.WORDS_HELD_DEPTH": depth,
                                        "search.hybrid.MEANING_FLOOR": floor})
            for weight, reference, depth, floor in itertools.product(
                (0.3, 0.4, 0.5, 0.6, 0.7), (20, 50), (0, 20), (None, 0.1, 0.2))]


FAMILIES: tuple[Callable[[], list[Setting]], ...] = (shipped, full_text_budgets, vector_cut_offs, rrf_fusions,
                                                         score_fusions)


def settings() -> list[Setting]:
    return [setting for family in FAMILIES for setting in family()]


def smoke_settings() -> list[Setting]:
    """The first and the last setting of every family (all of :func:`shipped`): each way a family changes the
    search runs, at both ends of its grid, in a few seconds instead of the whole grid's minutes."""
    chosen = []
    for family in FAMILIES:
        made = family()
        chosen += made if family is shipped or len(made) <= 2 else [made[0], made[-1]]
    return chosen


def _figures(queries: Sequence[Query], rankings: Any, mode: str) -> dict[str, Any]:
    scores = scores_of(queries, rankings)
    return {"all": summary([scores[q.id][mode] for q in queries]),
            "no_shared_words": summary([scores[q.id][mode] for q in queries if not q.shares_words])}


def _merit(row: Mapping[str, Any]) -> float:
    return statistics.fmean(row[TUNE]["all"][m] for m in CRITERION)


async def sweep(parts: SearchParts, queries: Sequence[Query], swept: Sequence[Setting] | None = None
                ) -> dict[str, Any]:
    """Every setting of ``swept`` (default: :func:`settings`) over the tune half of ``queries``; per mode, the
    shipped and the best also over the held-out half. Each query is embedded once for the whole sweep."""
    if not isinstance(parts.embedder, RememberingEmbedder):
        parts = SearchParts(parts.store, parts.index, RememberingEmbedder(parts.embedder))
    tune = [q for q in queries if q.half == TUNE]
    held_out = [q for q in queries if q.half == HELD_OUT]
    rows = []
    swept = list(swept) if swept is not None else settings()
    for setting in swept:
        with setting.apply(parts) as search:
            rankings = await rank(search, tune, (setting.mode,), baselines=False)
        rows.append({"name": setting.name, "mode": setting.mode.value, "parameters": _plain(setting.parameters),
                     TUNE: _figures(tune, rankings, setting.mode.value)})
    chosen: dict[int, list[str]] = {}
    for mode in SearchMode:
        indices = [i for i, row in enumerate(rows) if row["mode"] == mode.value]
        if not indices:
            continue
        best = max(indices, key=lambda i: _merit(rows[i]))  # the first of equals: the shipped one
        chosen.setdefault(best, []).append(f"best {mode.value} on the tune half")
        for i in indices:
            if not rows[i]["parameters"]:
                chosen.setdefault(i, []).append("shipped")
    for i, reasons in sorted(chosen.items()):
        setting = swept[i]
        with setting.apply(parts) as search:
            rankings = await rank(search, held_out, (setting.mode,), baselines=False)
        rows[i]["chosen"] = reasons
        rows[i][HELD_OUT] = _figures(held_out, rankings, setting.mode.value)
    return {"criterion": f"mean of {', '.join(CRITERION)} over the tune half", "tune_queries": len(tune),
            "held_out_queries": len(held_out), "rows": rows}


def sweep_table(result: Mapping[str, Any]) -> str:
    """One row per setting: the tune half's figures; the held-out half's for the chosen rows."""
    metrics = ("recall@5", "recall@10", "mrr", "ndcg@10")
    tune_columns = [f"tune: {METRIC_TITLES[metrics[0]]}", *(METRIC_TITLES[m] for m in metrics[1:]),
                    f"{NO_SHARED_WORDS}: R@10", "MRR"]
    held_columns = [f"held-out: {METRIC_TITLES[metrics[0]]}", *(METRIC_TITLES[m] for m in metrics[1:])]
    columns = ["setting", *tune_columns, *held_columns, "chosen"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in result["rows"]:
        tune, unshared = row[TUNE]["all"], row[TUNE]["no_shared_words"]
        cells = [row["name"], *(f"{tune[m]:.3f}" for m in metrics)]
        cells += [f"{unshared['recall@10']:.3f}", f"{unshared['mrr']:.3f}"] if unshared["queries"] else ["–", "–"]
        held = row.get(HELD_OUT)
        cells += [f"{held['all'][m]:.3f}" for m in metrics] if held else ["–"] * len(metrics)
        cells.append(", ".join(row.get("chosen", [])))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _plain(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """``parameters`` as JSON can hold them: a value JSON cannot (a fusion function) as its ``repr``."""
    return {key: value if value is None or isinstance(value, (bool, int, float, str, tuple, list)) else repr(value)
            for key, value in parameters.items()}
