"""Fusing several ranked result lists ("runs") into one: pure functions.

Contract, shared by every fusion function: a *run* is a mapping ``doc_id -> score`` where a higher
score is better (e.g. ``dict(zip(result.ids, result.scores))`` from a :class:`~index.store.SearchResult`,
see :func:`as_run`). Functions return ``(ids, scores)``: ids ranked best first, scores a float64 array
of the fused scores. Ties in the fused score are broken by id (ascending) so the output never depends
on dict order.
"""

from __future__ import annotations

import math
from typing import Callable, Mapping, Sequence

import numpy as np

__all__ = ["FUSION", "as_run", "get_fusion", "minmax_fusion", "rrf"]

Run = Mapping[str, float]


def as_run(result: object) -> dict[str, float]:
    """Turn anything with ``ids`` and ``scores`` (e.g. a SearchResult) into a run."""
    ids, scores = getattr(result, "ids"), getattr(result, "scores")
    return {str(i): float(s) for i, s in zip(ids, scores)}


def _check_runs(runs: Sequence[Run]) -> list[Run]:
    runs = list(runs)
    for r, run in enumerate(runs):
        if not isinstance(run, Mapping):
            raise ValueError(f"run {r} must be a mapping doc_id -> score, got {type(run).__name__}")
        for doc_id, score in run.items():
            if not math.isfinite(float(score)):
                raise ValueError(f"run {r} has a non-finite score {score!r} for id {doc_id!r}")
    return runs


def _check_weights(weights: Sequence[float] | None, n_runs: int) -> np.ndarray:
    """One weight per run (default 1 each); they must be finite, >= 0 and not all zero."""
    if weights is None:
        return np.ones(n_runs)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n_runs,):
        raise ValueError(f"got {w.size} weights for {n_runs} runs; give one weight per run")
    if not np.isfinite(w).all() or (w < 0).any() or (n_runs and w.sum() <= 0):
        raise ValueError(f"weights must be finite, >= 0 and not all zero, got {w.tolist()}")
    return w


def _ranked(fused: dict[str, float], limit: int | None) -> tuple[list[str], np.ndarray]:
    order = sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))
    if limit is not None:
        if limit < 0:
            raise ValueError(f"limit must be >= 0 or None, got {limit}")
        order = order[:limit]
    return [k for k, _ in order], np.array([v for _, v in order], dtype=np.float64)


def _competition_ranks(run: Run) -> dict[str, int]:
    """1-based ranks by descending score; tied scores share the best rank (1, 2, 2, 4)."""
    ranks: dict[str, int] = {}
    prev, rank = None, 0
    for pos, (doc_id, score) in enumerate(sorted(run.items(), key=lambda kv: -float(kv[1])), start=1):
        if score != prev:
            rank, prev = pos, score
        ranks[doc_id] = rank
    return ranks


def rrf(
    runs: Sequence[Run],
    weights: Sequence[float] | None = None,
    k: float = 60.0,
    limit: int | None = None,
) -> tuple[list[str], np.ndarray]:
    """Reciprocal rank fusion: ``score(d) = sum_r w_r / (k + rank_r(d))`` over the runs containing d.

    Ranks are 1-based by descending score within each run (ties share the best rank), so only the
    order of a run's scores matters, not their scale. Weights default to 1 per run (plain RRF); given
    weights are used as they are (not rescaled). ``k`` (>= 0) damps the advantage of the top ranks.
    """
    runs = _check_runs(runs)
    if not (isinstance(k, (int, float)) and math.isfinite(k) and k >= 0):
        raise ValueError(f"k must be a finite number >= 0, got {k!r}")
    w = _check_weights(weights, len(runs))
    fused: dict[str, float] = {}
    for run, wr in zip(runs, w):
        for doc_id, rank in _competition_ranks(run).items():
            fused[doc_id] = fused.get(doc_id, 0.0) + wr / (k + rank)
    return _ranked(fused, limit)


def _minmax(run: Run) -> dict[str, float]:
    """Scale a run's scores to [0, 1]; a run whose scores are all equal maps every id to 1.0."""
    if not run:
        return {}
    values = [float(s) for s in run.values()]
    lo, hi = min(values), max(values)
    if hi == lo:
        return {doc_id: 1.0 for doc_id in run}
    return {doc_id: (float(s) - lo) / (hi - lo) for doc_id, s in run.items()}


def minmax_fusion(
    runs: Sequence[Run],
    weights: Sequence[float] | None = None,
    limit: int | None = None,
) -> tuple[list[str], np.ndarray]:
    """Convex combination of per-run min-max-normalised scores.

    Each run is rescaled to [0, 1] (best = 1, worst = 0). A run whose scores are all equal (including
    a run with a single hit) gives its ids 1.0: they are all that run's best, and a one-hit run should
    still count. An id absent from a run gets 0 for that run. Weights default to equal and are
    rescaled to sum to 1, so fused scores lie in [0, 1].
    """
    runs = _check_runs(runs)
    w = _check_weights(weights, len(runs))
    w = w / w.sum() if len(w) else w
    fused: dict[str, float] = {}
    for run, wr in zip(runs, w):
        for doc_id, s in _minmax(run).items():
            fused[doc_id] = fused.get(doc_id, 0.0) + wr * s
    return _ranked(fused, limit)


FusionFn = Callable[..., "tuple[list[str], np.ndarray]"]

FUSION: dict[str, FusionFn] = {"rrf": rrf, "minmax": minmax_fusion}


def get_fusion(name: str) -> FusionFn:
    """Look up a fusion function by name; the error lists the valid names."""
    try:
        return FUSION[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown fusion {name!r}; valid choices: {', '.join(sorted(FUSION))}") from None
