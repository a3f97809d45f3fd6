"""The retrieval metrics of one query, and their means over a set of queries with 95 % bootstrap intervals.

Per query, from the first :data:`DEPTH` results and the relevant observations:

- ``recall@k``: relevant among the first k ÷ min(k, relevant) (capped, so a query with
  40 relevant observations can reach 1.0);
- ``mrr``: 1 / rank of the first relevant result, 0 when none is in the first 10;
- ``ndcg@10``: binary gains, DCG = Σ 1 / log2(rank + 1) over the relevant results in
  the first 10, divided by the best DCG possible (every one of the first min(10,
  relevant) relevant).

Intervals are percentile bootstraps: the queries resampled with replacement
:data:`ROUNDS` times, from a fixed seed (the same queries, the same interval). A
difference between two rankings (:func:`paired_difference`) resamples the per-query
differences, which is what "is hybrid better than fts on these queries" asks.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

CUTOFFS = (5, 10)
DEPTH = max(CUTOFFS)
METRICS = ("recall@5", "recall@10", "mrr", "ndcg@10")
ROUNDS = 2000
SEED = 1
_DISCOUNTS = [1.0 / math.log2(rank + 1) for rank in range(1, DEPTH + 1)]


def query_metrics(found: Sequence[int], relevant: Collection[int]) -> tuple[float, ...]:
    """:data:`METRICS` of one ranking (best first) against its relevant ids."""
    top = list(found[:DEPTH])
    hits = [row_id in relevant for row_id in top]
    recalls = tuple(sum(hits[:k]) / min(k, len(relevant)) for k in CUTOFFS)
    first = next((rank for rank, hit in enumerate(hits, start=1) if hit), None)
    dcg = sum(discount for discount, hit in zip(_DISCOUNTS, hits) if hit)
    ideal = sum(_DISCOUNTS[: min(DEPTH, len(relevant))])
    return (*recalls, 1.0 / first if first else 0.0, dcg / ideal)


def first_relevant_rank(found: Sequence[int], relevant: Collection[int]) -> int | None:
    return next((rank for rank, row_id in enumerate(found[:DEPTH], start=1) if row_id in relevant), None)


def _resamples(n: int) -> np.ndarray:
    """``ROUNDS`` × ``n`` query indices, the same for every call with the same ``n``."""
    return np.random.default_rng(SEED).integers(0, n, size=(ROUNDS, n))


def summary(rows: Sequence[Sequence[float]]) -> dict[str, Any]:
    """Means of :data:`METRICS` over the queries' ``rows`` and each one's 95 % interval (``interval``)."""
    values = np.asarray(rows, dtype=float).reshape(-1, len(METRICS))
    n = len(values)
    if not n:
        return {"queries": 0, **dict.fromkeys(METRICS, 0.0), "interval": {name: [0.0, 0.0] for name in METRICS}}
    means = values[_resamples(n)].mean(axis=1)  # ROUNDS x metrics
    low, high = np.percentile(means, [2.5, 97.5], axis=0)
    mean = values.mean(axis=0)
    return {"queries": n, **{name: round(float(mean[i]), 4) for i, name in enumerate(METRICS)},
            "interval": {name: [round(float(low[i]), 4), round(float(high[i]), 4)] for i, name in enumerate(METRICS)}}


def paired_difference(ours: Sequence[Sequence[float]], other: Sequence[Sequence[float]],
                      metrics: Sequence[str] = METRICS) -> dict[str, list[float]]:
    """Per metric: the mean of ``ours - other`` (per query, paired) and its 95 % interval, ``[mean, low, high]``."""
    differences = np.asarray(ours, dtype=float).reshape(-1, len(METRICS)) - np.asarray(
        other, dtype=float).reshape(-1, len(METRICS))
    n = len(differences)
    result = {}
    for name in metrics:
        column = differences[:, METRICS.index(name)]
        if not n:
            result[name] = [0.0, 0.0, 0.0]
            continue
        means = column[_resamples(n)].mean(axis=1)
        low, high = np.percentile(means, [2.5, 97.5])
        result[name] = [round(float(column.mean()), 4), round(float(low), 4), round(float(high), 4)]
    return result


def summaries(scores: Mapping[str, Mapping[str, Sequence[float]]], ids: Sequence[str],
              names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """:func:`summary` of each ranking in ``names`` over the queries ``ids`` (those it ranked).

    ``scores[query id][ranking name]`` holds that query's :data:`METRICS`.
    """
    return {name: summary([scores[i][name] for i in ids if name in scores[i]]) for name in names
            if any(name in scores[i] for i in ids)}
