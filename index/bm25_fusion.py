"""Three-part scores (lexicon + dense + BM25) of a hybrid index with a BM25 part: pure functions over numpy arrays.

A document's score is ``w_lex * cos_lex + w_dense * cos_dense + w_bm25 * bm25 / max_bm25``: its vector score (one
inner product of the weighted query vector with its stored vector, ``index.vectors``) plus its BM25 score divided
by the largest BM25 score among the query's candidates. The candidates are the union of the vector index's top
``depth`` and BM25's top ``depth``, so BM25's best document is always among them and ``max_bm25`` is the query's
best BM25 score over the documents searched: the BM25 part lies in [0, 1], 0 for a document without a query term.
Dividing by the maximum (not min-max) keeps that 0 meaning "no query term" whatever the other candidates are. The
shards of one index pass the maximum over all of them (``bm25_max``), so their fused scores compare.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from .vectors import check_weight_range, weight_pair

__all__ = ["DEFAULT_DEPTH", "bm25_top", "candidate_union", "fuse", "normalise_bm25", "query_weights", "sparse_lookup",
           "split_weights"]

DEFAULT_DEPTH = 100  # candidates taken from each of the vector index and BM25, at least k
# BM25's weight when a search of an index with a BM25 part names no weights (``lens.search.Searcher``, ``lens search``,
# ``lens serve``): beside the index's own (lexicon, dense) pair, 0.5 / 0.5 by default. Chosen on issue 39's
# development suite with the shipped model and its text rule (benchmarks/results/index_bm25.md, index_bm25-mpnet.md:
# of 0.05-0.5, 0.1 is the best or within 0.002 of it on ADI and MEDLINE with MiniLM and on MEDLINE with mpnet, within
# 0.007 on Cranfield, which wants more BM25, and the smallest weight at which the mpnet index is above mpnet and the
# BM25+MiniLM fusions on all three sets; docs/studies.md).
DEFAULT_BM25_WEIGHT = 0.1


def split_weights(weights: Any, what: str = "weights") -> tuple[Any, float]:
    """``(the vector weights as given, w_bm25)``: a pair or text ``LEX,DENSE`` gives ``(it, 0.0)``; three values
    ``LEX,DENSE,BM25`` (finite, >= 0, not all 0) give ``((LEX, DENSE), BM25)``; None stays ``(None, 0.0)``.
    An array of one pair per query is passed through with ``w_bm25`` 0."""
    if weights is None:
        return None, 0.0
    if isinstance(weights, (Mapping, set, frozenset)):  # no order to read LEX, DENSE, BM25 from
        raise ValueError(_weights_error(what, weights))
    parts = weights.split(",") if isinstance(weights, str) else weights
    if isinstance(weights, str) and len(parts) == 2:  # text LEX,DENSE: the numbers, checked by weight_pair later
        try:
            return (float(parts[0]), float(parts[1])), 0.0
        except ValueError:
            raise ValueError(_weights_error(what, weights)) from None
    if isinstance(weights, str) and len(parts) != 3:
        raise ValueError(_weights_error(what, weights))
    arr = np.asarray(parts, dtype=object)
    if arr.ndim != 1 or len(arr) != 3:
        return weights, 0.0
    try:
        w = tuple(float(x) for x in arr)
    except (TypeError, ValueError):
        w = ()
    if len(w) != 3 or not all(math.isfinite(x) and x >= 0 for x in w) or not any(w):
        raise ValueError(_weights_error(what, weights))
    check_weight_range(w, what, weights)
    return (w[0], w[1]), w[2]


WEIGHT_FORMS = "two or three numbers LEX,DENSE[,BM25]"  # what query weights may be (CLI, lens serve, Python)


def _weights_error(what: str, weights: Any) -> str:
    """The message for three query weights that are not usable (``weight_pair``'s for the rest)."""
    return f"{what} must be {WEIGHT_FORMS} (finite, >= 0, not all 0) such as 0.5,0.5 or 0.4,0.3,0.3; got {weights!r}"


def query_weights(value: Any, what: str = "weights") -> tuple[float, ...]:
    """A user's query weights: ``LEX,DENSE`` or ``LEX,DENSE,BM25`` (text or a sequence), each finite and >= 0, not
    all 0; a BM25 weight of 0 gives the pair, so the search is exactly the two-part one. A negative pair gets
    ``index.vectors.weight_pair``'s error (what 0 means instead); anything else that is not two or three such
    numbers, one error naming both forms."""
    pair, w_bm25 = split_weights(value, what)
    return (*pair, w_bm25) if w_bm25 > 0 else weight_pair(pair, what, WEIGHT_FORMS)


def normalise_bm25(scores: np.ndarray, top: float | None = None) -> np.ndarray:
    """BM25 scores divided by their maximum, or by ``top`` when given (float64; in [0, 1] when ``top`` is at least
    their maximum); all zeros when the divisor is not positive."""
    s = np.asarray(scores, dtype=np.float64)
    top = s.max(initial=0.0) if top is None else float(top)
    return s / top if top > 0 else np.zeros_like(s)


def bm25_top(scores: np.ndarray, depth: int, keep: np.ndarray | None = None) -> np.ndarray:
    """Row indices of the ``depth`` best positive ``scores`` (among the rows where ``keep`` is True, if given),
    best first, ties by row."""
    s = np.asarray(scores, dtype=np.float64)
    ok = s > 0 if keep is None else (s > 0) & keep
    rows = np.flatnonzero(ok)
    if len(rows) > depth:
        rows = rows[np.argpartition(-s[rows], depth - 1)[:depth]]
    return rows[np.lexsort((rows, -s[rows]))]


def sparse_lookup(keys: np.ndarray, values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The value of each of ``wanted`` in the sparse vector ``(keys ascending, values)``, 0 where it has none
    (float64): a candidate's BM25 score from the scores of the documents holding a query term."""
    keys, wanted = np.asarray(keys), np.asarray(wanted)
    out = np.zeros(len(wanted), dtype=np.float64)
    if len(keys) and len(wanted):
        at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
        hit = keys[at] == wanted
        out[hit] = np.asarray(values)[at[hit]]
    return out


def candidate_union(*labels: np.ndarray) -> np.ndarray:
    """The distinct labels of the given lists, sorted (int64)."""
    parts = [np.asarray(x, dtype=np.int64).ravel() for x in labels]
    return np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)


def fuse(labels: np.ndarray, vector_scores: np.ndarray, bm25_scores: np.ndarray, w_bm25: float,
         k: int, bm25_max: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The top ``k`` of the candidates ``labels`` by ``vector_scores + w_bm25 * normalise_bm25(bm25_scores,
    bm25_max)`` (best first, ties by label): ``(labels, float32 scores)``. ``bm25_max``: the BM25 maximum over
    every document searched (default: over these candidates, which hold it when they hold BM25's top)."""
    if bm25_max is not None and bm25_max < np.max(bm25_scores, initial=0.0):
        raise ValueError(f"bm25_max {bm25_max} is below the candidates' best BM25 score {np.max(bm25_scores)}")
    labels = np.asarray(labels, dtype=np.int64)
    vec = np.asarray(vector_scores, dtype=np.float64)
    bm = np.asarray(bm25_scores, dtype=np.float64)
    if not (labels.shape == vec.shape == bm.shape and labels.ndim == 1):
        raise ValueError(f"fuse needs one vector and one BM25 score per label, got shapes {labels.shape}, "
                         f"{vec.shape}, {bm.shape}")
    fused = vec + float(w_bm25) * normalise_bm25(bm, bm25_max)
    order = np.lexsort((labels, -fused))[:k]
    return labels[order], fused[order].astype(np.float32)
