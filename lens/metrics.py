"""Retrieval metrics over qrels and runs: nDCG@10, Recall@100 and MRR@10, through ``pytrec_eval`` (trec_eval).

A *run* is ``{query id: {doc id: score}}`` (higher score = better); *qrels* are ``{query id: {doc id: grade}}``.

Conventions (those of trec_eval and BEIR's evaluation):

- a document is relevant when its grade is > 0 (``relevance_level=1``); nDCG uses the grades themselves as gains
  (linear gain, discount ``log2(rank + 1)``), so graded qrels (Cranfield's 1-4) count as graded;
- a run is ordered by score, ties broken by document id in *descending* order (trec_eval's rule);
- MRR@10 is trec_eval's ``recip_rank`` on the run cut to its top 10 (same order), i.e. ``1/rank`` of the first
  relevant document within the top 10, else 0;
- the mean is over the queries of the qrels: a query the run does not answer (absent or no hits) scores 0 on
  every measure. Queries in the run but not in the qrels are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

__all__ = ["MEASURES", "Evaluation", "drop_self_hits", "evaluate", "mean_scores", "truncate_run"]

Run = Mapping[str, Mapping[str, float]]
Qrels = Mapping[str, Mapping[str, int]]

# our name -> (pytrec_eval measure to request, key in its output, run cut-off applied before evaluating)
MEASURES: dict[str, tuple[str, str, int | None]] = {
    "ndcg@10": ("ndcg_cut.10", "ndcg_cut_10", None),
    "recall@100": ("recall.100", "recall_100", None),
    "mrr@10": ("recip_rank", "recip_rank", 10),
}


@dataclass
class Evaluation:
    """Mean of each measure over the qrels' queries, and every query's values."""

    mean: dict[str, float]
    per_query: dict[str, dict[str, float]]


def ranked(hits: Mapping[str, float]) -> list[tuple[str, float]]:
    """A query's hits in trec_eval's order: score descending, ties by document id descending."""
    by_id = sorted(hits.items(), key=lambda kv: kv[0], reverse=True)
    return sorted(by_id, key=lambda kv: -float(kv[1]))  # stable: equal scores keep id-descending order


def truncate_run(run: Run, k: int) -> dict[str, dict[str, float]]:
    """Each query's top ``k`` hits (trec_eval's order), as a new run."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return {q: dict(ranked(hits)[:k]) for q, hits in run.items()}


def drop_self_hits(run: Run) -> dict[str, dict[str, float]]:
    """The run without any hit whose document id equals its query id (the ArguAna convention:
    a query is itself a corpus document and must not be retrieved). Returns a new run."""
    return {q: {d: s for d, s in hits.items() if d != q} for q, hits in run.items()}


def _check(qrels: Qrels, run: Run) -> None:
    if not qrels:
        raise ValueError("qrels are empty: nothing to evaluate")
    for q, hits in run.items():
        if not isinstance(hits, Mapping):
            raise TypeError(f"run[{q!r}] must be a mapping doc id -> score, got {type(hits).__name__}")


def evaluate(qrels: Qrels, run: Run, measures: tuple[str, ...] = tuple(MEASURES)) -> Evaluation:
    """Evaluate ``run`` against ``qrels`` on ``measures`` (names of :data:`MEASURES`)."""
    from lens.extras import require

    pytrec_eval = require("pytrec_eval", "eval", what="retrieval metrics", package="pytrec-eval-terrier")

    unknown = [m for m in measures if m not in MEASURES]
    if unknown:
        raise ValueError(f"unknown measure {unknown[0]!r}; valid: {', '.join(MEASURES)}")
    _check(qrels, run)
    qrels_ = {str(q): {str(d): int(g) for d, g in docs.items()} for q, docs in qrels.items()}
    # pytrec_eval wants str -> str -> float; only queries of the qrels that have hits are passed
    run_ = {str(q): {str(d): float(s) for d, s in hits.items()} for q, hits in run.items() if q in qrels_ and hits}
    per_query = {q: {m: 0.0 for m in measures} for q in qrels_}
    by_cut: dict[int | None, list[str]] = {}
    for m in measures:
        by_cut.setdefault(MEASURES[m][2], []).append(m)
    for cut, names in by_cut.items():
        r = run_ if cut is None else truncate_run(run_, cut)
        evaluator = pytrec_eval.RelevanceEvaluator(qrels_, {MEASURES[m][0] for m in names})
        for q, values in evaluator.evaluate(r).items():
            for m in names:
                per_query[q][m] = float(values[MEASURES[m][1]])
    return Evaluation(mean_scores(per_query, measures), per_query)


def mean_scores(per_query: Mapping[str, Mapping[str, float]], measures: tuple[str, ...] = tuple(MEASURES)) -> dict[str, float]:
    """Arithmetic mean of each measure over all queries in ``per_query`` (0.0 for none)."""
    n = len(per_query)
    return {m: (sum(v[m] for v in per_query.values()) / n if n else 0.0) for m in measures}
