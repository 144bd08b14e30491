"""Retrieval metrics over qrels and runs, through ``pytrec_eval`` (trec_eval): nDCG@10, Recall@100 and MRR@10 (what
a benchmark saves), and nDCG@100, Recall@10 / @1000, P@10 and MAP on request (:data:`MEASURES`).

A *run* is ``{query id: {doc id: score}}`` (higher score = better); *qrels* are ``{query id: {doc id: grade}}``.

Conventions (trec_eval's; BEIR's evaluation shares the first three):

- a document is relevant when its grade is > 0 (``relevance_level=1``); nDCG uses the grades themselves as gains
  (linear gain, discount ``log2(rank + 1)``), so graded qrels (Cranfield's 1-4) count as graded;
- a run is ordered by score, ties broken by document id in *descending* order (trec_eval's rule);
- MRR@10 is trec_eval's ``recip_rank`` on the run cut to its top 10 (same order), i.e. ``1/rank`` of the first
  relevant document within the top 10, else 0;
- the mean is over the queries of the qrels: a query the run does not answer (absent or no hits) scores 0 on
  every measure (``trec_eval -c``; BEIR's ``EvaluateRetrieval.evaluate`` averages over the answered queries only,
  which scores a system that leaves queries unanswered higher). Queries in the run but not in the qrels are
  ignored.

Below those, the measures of tasks posed as ranking a few candidates per query (``lens.ateb``: multiple choice,
label documents, preference pairs, an answer pool, pair classification), as pure numpy functions, and the exact
score of a random ranker beside each (``random_*``). Scores there are one array per query, aligned with that
query's candidates; ``gold`` is the position of the correct candidate in it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

__all__ = ["DEFAULT_MEASURES", "MEASURES", "Evaluation", "PairedTest", "average_precision", "choice_accuracy",
           "choice_correct", "drop_self_hits", "evaluate", "gold_ranks", "mean_scores", "ndcg_at_10_of_rank",
           "paired_test", "pool_ndcg_at_10", "random_average_precision", "random_choice_accuracy", "random_ndcg_at_10",
           "truncate_run"]

Run = Mapping[str, Mapping[str, float]]
Qrels = Mapping[str, Mapping[str, int]]

# our name -> (pytrec_eval measure to request, key in its output, run cut-off applied before evaluating)
MEASURES: dict[str, tuple[str, str, int | None]] = {
    "ndcg@10": ("ndcg_cut.10", "ndcg_cut_10", None),
    "recall@100": ("recall.100", "recall_100", None),
    "mrr@10": ("recip_rank", "recip_rank", 10),
    "ndcg@100": ("ndcg_cut.100", "ndcg_cut_100", None),
    "recall@10": ("recall.10", "recall_10", None),
    "recall@1000": ("recall.1000", "recall_1000", None),
    "p@10": ("P.10", "P_10", None),
    "map": ("map", "map", None),  # over the whole run: cut it (``truncate_run``) for MAP@k
}
DEFAULT_MEASURES = ("ndcg@10", "recall@100", "mrr@10")  # BEIR's headline measure, and what a benchmark saves


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


def require_metrics():
    """The trec_eval bindings :func:`evaluate` uses, or ``MissingExtraError`` naming the ``eval`` extra: a benchmark
    calls it before it loads a model, so a missing extra costs no encoding."""
    from lens.extras import require

    return require("pytrec_eval", "eval", what="retrieval metrics", package="pytrec-eval-terrier")


def evaluate(qrels: Qrels, run: Run, measures: tuple[str, ...] = DEFAULT_MEASURES) -> Evaluation:
    """Evaluate ``run`` against ``qrels`` on ``measures`` (names of :data:`MEASURES`)."""
    pytrec_eval = require_metrics()

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


def mean_scores(per_query: Mapping[str, Mapping[str, float]],
                measures: tuple[str, ...] = DEFAULT_MEASURES) -> dict[str, float]:
    """Arithmetic mean of each measure over all queries in ``per_query`` (0.0 for none)."""
    n = len(per_query)
    return {m: (sum(v[m] for v in per_query.values()) / n if n else 0.0) for m in measures}


# ------------------------------------------------------------------------------- candidates ranked per query
def _per_query(scores_per_query: Sequence[Sequence[float]], gold: Sequence[int]) -> list[np.ndarray]:
    """Check the shapes: one non-empty 1-D score array per query, a gold position inside each, finite scores."""
    if len(scores_per_query) != len(gold):
        raise ValueError(f"{len(scores_per_query)} score lists but {len(gold)} gold positions; give one per query")
    if not len(gold):
        raise ValueError("no queries: nothing to evaluate")
    out = []
    for i, (s, g) in enumerate(zip(scores_per_query, gold)):
        s = np.asarray(s, dtype=np.float64)
        if s.ndim != 1 or not len(s):
            raise ValueError(f"query {i}: expected a non-empty 1-D array of candidate scores, got shape {s.shape}")
        if not np.isfinite(s).all():
            raise ValueError(f"query {i}: scores hold NaN or inf")
        if isinstance(g, bool) or not 0 <= int(g) < len(s) or int(g) != g:
            raise ValueError(f"query {i}: gold position {g!r} is not an index into its {len(s)} candidates")
        out.append(s)
    return out


def gold_ranks(scores_per_query: Sequence[Sequence[float]], gold: Sequence[int]) -> np.ndarray:
    """1-based rank of each query's gold candidate, counting a tie against it: ``1 + #{other candidates scoring
    >= gold's}``. A scorer that cannot tell the gold answer from another gets no credit for the tie (a constant
    scorer ranks every gold candidate last), so it can never beat chance by giving equal scores."""
    arrays = _per_query(scores_per_query, gold)
    return np.array([int((s >= s[int(g)]).sum()) for s, g in zip(arrays, gold)], dtype=np.int64)  # gold counts itself


def choice_correct(scores_per_query: Sequence[Sequence[float]], gold: Sequence[int]) -> np.ndarray:
    """Per query, whether the gold candidate scores strictly above every other (a tie is wrong)."""
    return gold_ranks(scores_per_query, gold) == 1


def choice_accuracy(scores_per_query: Sequence[Sequence[float]], gold: Sequence[int]) -> float:
    """Share of queries whose gold candidate scores strictly highest. Ties count as wrong: two candidates with the
    same score (e.g. both all-zero vectors, or two texts BM25 cannot tell apart) give no answer."""
    return float(choice_correct(scores_per_query, gold).mean())


def ndcg_at_10_of_rank(ranks: Sequence[int] | np.ndarray) -> np.ndarray:
    """Each query's nDCG@10 with one relevant candidate (gain 1) at 1-based ``ranks``: ``1 / log2(rank + 1)`` when
    the rank is at most 10, else 0. The ideal DCG is 1, so no normalisation is needed."""
    ranks = np.asarray(ranks, dtype=np.float64)
    return np.where(ranks <= 10, 1.0 / np.log2(ranks + 1.0), 0.0)


def pool_ndcg_at_10(scores_per_query: Sequence[Sequence[float]], gold: Sequence[int]) -> float:
    """Mean nDCG@10 with one relevant candidate per query (``ndcg_at_10_of_rank`` of its rank, ties against it:
    ``gold_ranks``)."""
    return float(ndcg_at_10_of_rank(gold_ranks(scores_per_query, gold)).mean())


def average_precision(scores: Sequence[float], labels: Sequence[int]) -> float:
    """Average precision of a threshold-free binary decision (MTEB's pair classification): pairs sorted by score,
    ``sum over distinct thresholds of (recall gained) x (precision there)``. Tied scores form one threshold, so a
    constant scorer gets the positive rate. Labels are 0/1; at least one must be 1."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels)
    if s.ndim != 1 or s.shape != y.shape or not len(s):
        raise ValueError(f"scores {s.shape} and labels {y.shape} must be equal-length, non-empty 1-D arrays")
    if not np.isin(y, (0, 1)).all():
        raise ValueError("labels must be 0 or 1")
    if not np.isfinite(s).all():
        raise ValueError("scores hold NaN or inf")
    y = y.astype(np.int64)
    positives = int(y.sum())
    if positives == 0:
        raise ValueError("average precision needs at least one positive label")
    order = np.argsort(-s, kind="stable")
    s, y = s[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(s) != 0), len(s) - 1]  # the last pair of each run of equal scores
    tp = np.cumsum(y)[last]
    precision = tp / (last + 1.0)
    recall_gain = np.diff(np.r_[0, tp]) / positives
    return float((recall_gain * precision).sum())


def random_choice_accuracy(n_candidates: Sequence[int]) -> float:
    """Expected ``choice_accuracy`` of scores drawn at random (no ties): the mean of ``1 / candidates``."""
    n = np.asarray(n_candidates, dtype=np.float64)
    if not len(n) or (n < 1).any():
        raise ValueError("expected one candidate count >= 1 per query")
    return float((1.0 / n).mean())


def random_ndcg_at_10(n_candidates: Sequence[int]) -> float:
    """Expected ``pool_ndcg_at_10`` of a random order: the gold candidate is equally likely at each rank 1..N,
    so per query ``(1/N) sum_{r=1}^{min(N,10)} 1/log2(r+1)``, exactly; the mean over queries."""
    n = np.asarray(n_candidates, dtype=np.int64)
    if not len(n) or (n < 1).any():
        raise ValueError("expected one candidate count >= 1 per query")
    gains = np.cumsum([1.0 / math.log2(r + 1) for r in range(1, 11)])
    return float(np.mean(gains[np.minimum(n, 10) - 1] / n))


def random_average_precision(labels: Sequence[int]) -> float:
    """The chance level of ``average_precision``: the positive rate (a constant scorer's AP exactly, and what a
    random order's AP tends to as pairs grow)."""
    y = np.asarray(labels)
    if not len(y) or not np.isin(y, (0, 1)).all():
        raise ValueError("labels must be a non-empty sequence of 0/1")
    return float(y.mean())


# ------------------------------------------------------------------------------------------ paired tests
@dataclass(frozen=True)
class PairedTest:
    """Two systems' per-query values on the same queries: means, their difference (a - b), how many queries each
    wins, and two-sided p-values of a paired t-test and of a paired randomization (sign-flip) test."""

    n: int
    mean_a: float
    mean_b: float
    diff: float
    wins: int
    ties: int
    losses: int
    p_ttest: float
    p_randomization: float


def paired_test(a: Sequence[float], b: Sequence[float], resamples: int = 10_000, seed: int = 0) -> PairedTest:
    """Is system a's mean different from b's over the same queries (``a[i]``, ``b[i]`` one query)? The tests IR
    papers use (Smucker et al., CIKM 2007): scipy's paired t-test, and its permutation test swapping each query's
    two values (exact when ``2**n <= resamples``, else ``resamples`` seeded draws). Identical values give p = 1."""
    from scipy import stats

    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1 or len(x) < 2 or not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError(f"paired_test needs two equal-length 1-d sequences of >= 2 finite values (one per query), "
                         f"got shapes {x.shape} and {y.shape}")
    d = x - y
    if not d.any():
        p_t = p_r = 1.0
    else:
        p_t = float(stats.ttest_rel(x, y).pvalue) if d.std() > 0 else 0.0  # a constant nonzero gap: no doubt
        p_r = float(stats.permutation_test((x, y), lambda u, v, axis: np.mean(u - v, axis=axis), vectorized=True,
                                           permutation_type="samples", n_resamples=resamples,
                                           random_state=np.random.default_rng(seed)).pvalue)
    return PairedTest(n=len(d), mean_a=float(x.mean()), mean_b=float(y.mean()), diff=float(d.mean()),
                      wins=int((d > 0).sum()), ties=int((d == 0).sum()), losses=int((d < 0).sum()),
                      p_ttest=min(p_t, 1.0), p_randomization=min(p_r, 1.0))
