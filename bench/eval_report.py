"""The figures of one evaluation, half by half and subset by subset, and their markdown tables.

A half's report (:func:`half_report`) holds the metrics of every ranking over all its
queries, the no-shared-words subset, each category and each project, and hybrid's
paired difference with each other mode. The tables are what bench/README.md shows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from eval_metrics import METRICS, first_relevant_rank, paired_difference, query_metrics, summaries
from eval_queries import CATEGORIES, HALVES, PROMPT, WRITTEN, Query
from eval_search import BASELINES, MODE_NAMES, Rankings

BOTH = "both"  # the two halves together (in the JSON only)
HALF_TITLES = {"tune": "Tune half", "held_out": "Held-out half", BOTH: "Both halves"}
METRIC_TITLES = {"recall@5": "R@5", "recall@10": "R@10", "mrr": "MRR", "ndcg@10": "nDCG@10"}
DIFFERENCE_METRICS = ("recall@5", "recall@10", "mrr")
NO_SHARED_WORDS = "no shared words"
Scores = dict[str, dict[str, tuple[float, ...]]]  # query id -> ranking name -> METRICS


def scores_of(queries: Iterable[Query], rankings: Rankings) -> Scores:
    return {q.id: {name: query_metrics(found, q.relevant) for name, found in rankings[q.id].items()}
            for q in queries}


def half_report(queries: Sequence[Query], scores: Scores, names: Sequence[str] = (*MODE_NAMES, *BASELINES)
                ) -> dict[str, Any]:
    """Metrics of ``queries`` (one half, or any set) by subset; hybrid minus each other mode, paired."""

    def of(keep: Callable[[Query], bool]) -> dict[str, Any]:
        return summaries(scores, [q.id for q in queries if keep(q)], names)

    hybrid, others = MODE_NAMES[0], MODE_NAMES[1:]
    ranked = [q.id for q in queries]
    return {
        "counts": {"queries": len(queries), PROMPT: sum(q.source == PROMPT for q in queries),
                   WRITTEN: sum(q.source == WRITTEN for q in queries),
                   "no_shared_words": sum(not q.shares_words for q in queries),
                   "by_category": {c: sum(q.category == c for q in queries) for c in CATEGORIES}},
        "all": of(lambda q: True),
        "no_shared_words": of(lambda q: not q.shares_words),
        "by_source": {source: of(lambda q, s=source: q.source == s) for source in (PROMPT, WRITTEN)},
        "by_category": {c: of(lambda q, c=c: q.category == c) for c in CATEGORIES},
        "by_project": {p: of(lambda q, p=p: q.project == p) for p in sorted({q.project for q in queries})},
        "hybrid_minus": {other: paired_difference([scores[i][hybrid] for i in ranked],
                                                  [scores[i][other] for i in ranked], DIFFERENCE_METRICS)
                         for other in others if ranked and all(hybrid in scores[i] and other in scores[i]
                                                               for i in ranked)},
    }


def by_half(queries: Sequence[Query], scores: Scores, names: Sequence[str] = (*MODE_NAMES, *BASELINES)
            ) -> dict[str, Any]:
    """:func:`half_report` of each half, and of both together."""
    report = {half: half_report([q for q in queries if q.half == half], scores, names) for half in HALVES}
    report[BOTH] = half_report(queries, scores, names)
    return report


def per_query(queries: Iterable[Query], rankings: Rankings) -> list[dict[str, Any]]:
    """What each query found: the ranks (within the first 10) of its relevant results, per ranking."""
    return [{"id": q.id, "half": q.half, "source": q.source, "category": q.category, "project": q.project,
             "query": q.text[:200], "relevant": len(q.relevant), "shares_words": q.shares_words,
             "hits": {name: [rank for rank, row_id in enumerate(found, start=1) if row_id in q.relevant]
                      for name, found in rankings[q.id].items()},
             "first_relevant": {name: first_relevant_rank(found, q.relevant)
                                for name, found in rankings[q.id].items()}}
            for q in queries]


def cell(figures: Mapping[str, Any], metric: str) -> str:
    low, high = figures["interval"][metric]
    return f"{figures[metric]:.3f} ({low:.3f}..{high:.3f})"


def _head(first: Sequence[str]) -> list[str]:
    columns = [*first, *(METRIC_TITLES[m] for m in METRICS)]
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def modes_table(report: Mapping[str, Any]) -> str:
    """Rows: the rankings; columns: queries and each metric with its 95 % interval."""
    lines = _head(("ranking", "queries"))
    for name, figures in report["all"].items():
        scope = "" if figures["queries"] == report["counts"]["queries"] else " (prompt-derived)"
        lines.append(f"| {name} | {figures['queries']}{scope} | "
                     + " | ".join(cell(figures, m) for m in METRICS) + " |")
    return "\n".join(lines)


def subsets_table(report: Mapping[str, Any], group: str, *, names: Sequence[str] = MODE_NAMES) -> str:
    """Rows: each subset of ``group`` (``by_category`` with the no-shared-words subset, or ``by_project``)
    times each mode."""
    subsets = dict(report[group])
    if group == "by_category":
        subsets[NO_SHARED_WORDS] = report["no_shared_words"]
    lines = _head((group.removeprefix("by_"), "ranking"))
    for subset, by_name in subsets.items():
        for name in names:
            figures = by_name.get(name)
            if figures and figures["queries"]:
                lines.append(f"| {subset} ({figures['queries']}) | {name} | "
                             + " | ".join(cell(figures, m) for m in METRICS) + " |")
    return "\n".join(lines)


def differences(report: Mapping[str, Any]) -> str:
    """One line per other mode: hybrid minus it, paired, with 95 % intervals."""
    return "\n".join(
        f"hybrid − {other} (paired, {report['counts']['queries']} queries): " + ", ".join(
            f"{METRIC_TITLES[m]} {mean:+.3f} ({low:+.3f}..{high:+.3f})" for m, (mean, low, high) in figures.items())
        for other, figures in report["hybrid_minus"].items())


def describe(report: Mapping[str, Any]) -> str:
    counts = report["counts"]
    return (f"{counts['queries']} queries ({counts[WRITTEN]} written, {counts[PROMPT]} prompt-derived; "
            f"{counts['no_shared_words']} sharing no word with their answers)")
