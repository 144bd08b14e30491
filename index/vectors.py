"""Vector maths for the hybrid store: pure functions over numpy arrays.

A hybrid document is stored as one FAISS vector ``[lex_unit ; dense_unit]`` (each part L2-normalised on
its own) and a query as ``[w_lex * lex_unit ; w_dense * dense_unit]``. Their inner product is then
exactly ``w_lex * cos_lex + w_dense * cos_dense``, so one inner-product index serves any weighting
chosen at query time, without re-indexing.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

__all__ = [
    "BALANCED",
    "as_matrix",
    "balanced_weights",
    "cosine_spread",
    "check_dim",
    "check_finite",
    "check_positive_int",
    "cluster_idf",
    "document_vectors",
    "l2_normalize",
    "mass_share",
    "mean_weights",
    "query_vectors",
    "resolve_weights",
    "support_mask",
    "weight_pair",
    "weights_spec",
]

# Rows whose norm is at or below this are treated as zero: dividing by it would overflow float32.
_TINY = float(np.finfo(np.float32).tiny)
_MAX_LISTED = 10


def as_matrix(x: Any, what: str) -> np.ndarray:
    """Return ``x`` as a 2-D array (a 1-D input becomes one row), without copying when possible.

    Accepts numpy arrays, nested lists, CPU/GPU torch tensors (dense or sparse) and SciPy sparse matrices such as
    ``encode(..., convert_to="sparse")`` gives (duck-typed, so neither is imported here; sparse inputs are made
    dense: the index stores dense rows). The dtype is left as is: callers convert to contiguous float32 chunk by
    chunk, so a large float64 input is never copied whole.
    """
    if x is None:
        raise ValueError(f"{what} vectors are missing")
    if hasattr(x, "toarray") and hasattr(x, "nnz"):  # SciPy sparse
        x = x.toarray()
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch.Tensor: bf16/fp16 and GPU need a cast
        x = x.detach()
        if getattr(x, "is_sparse", False) or str(getattr(x, "layout", "torch.strided")) != "torch.strided":
            x = x.to_dense()
        if str(getattr(x, "dtype", "")) not in ("torch.float32", "torch.float64"):
            x = x.float()
        x = x.cpu().numpy()
    arr = np.asarray(x)
    if arr.dtype.kind not in "fiub":
        raise ValueError(f"{what} vectors must be numeric, got dtype {arr.dtype}")
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ValueError(f"{what} vectors must be 1-D (one vector) or 2-D (rows), got shape {arr.shape}")
    return arr


def check_dim(x: np.ndarray, expected: int, what: str) -> None:
    """Raise ValueError unless ``x`` has ``expected`` columns."""
    if x.shape[1] != expected:
        raise ValueError(
            f"{what} vectors have {x.shape[1]} columns but this index was built with {expected}"
        )


def check_positive_int(value: Any, name: str, meaning: str | None = None) -> None:
    """Raise ValueError unless ``value`` is an integer >= 1 (a numpy one too; not a bool), naming ``name`` and, in
    brackets, what it counts (``meaning``)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer{f' ({meaning})' if meaning else ''}, got {value!r}")


def check_finite(x: np.ndarray, what: str, row_offset: int = 0) -> None:
    """Raise ValueError naming the rows of ``x`` that hold NaN or inf (indices shifted by ``row_offset``)."""
    x = np.asarray(x)
    if x.dtype.kind != "f":
        return
    bad = ~np.isfinite(x).all(axis=1) if x.ndim == 2 else np.atleast_1d(~np.isfinite(x).all())
    if bad.any():
        rows = (np.flatnonzero(bad) + row_offset).tolist()
        listed = ", ".join(map(str, rows[:_MAX_LISTED]))
        more = f" and {len(rows) - _MAX_LISTED} more" if len(rows) > _MAX_LISTED else ""
        raise ValueError(f"{what} vectors contain NaN or inf in row(s) {listed}{more}")


def l2_normalize(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """L2-normalise the rows of ``x`` into float32; zero (or denormal-norm) rows stay zero, never NaN.

    Norms are accumulated in float64 so that float32 inputs with very small or large entries still
    normalise accurately. ``out`` (float32, same shape) may be given to avoid an allocation, e.g. a
    slice of a wider output; it may be ``x`` itself.
    """
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"l2_normalize expects a 2-D array of rows, got shape {x.shape}")
    norms = np.sqrt(np.einsum("ij,ij->i", x, x, dtype=np.float64))
    ok = norms > _TINY
    scale = np.zeros_like(norms)
    np.divide(1.0, norms, out=scale, where=ok)
    if out is None:
        out = np.empty(x.shape, dtype=np.float32)
    elif out.shape != x.shape or out.dtype != np.float32:
        raise ValueError(f"out must be float32 with shape {x.shape}, got {out.dtype} {out.shape}")
    np.multiply(x, scale.astype(np.float32)[:, None], out=out, casting="unsafe")
    return out


def _rows(parts: list[np.ndarray | None]) -> int:
    present = [p for p in parts if p is not None]
    if not present:
        raise ValueError("at least one of the lexicon or dense vectors must be given")
    n = present[0].shape[0]
    if any(p.shape[0] != n for p in present):
        shapes = " vs ".join(str(p.shape[0]) for p in present)
        raise ValueError(f"lexicon and dense vectors must have the same number of rows, got {shapes}")
    return n


def document_vectors(lexicon: np.ndarray | None, dense: np.ndarray | None) -> np.ndarray:
    """Stored vectors ``[lex / |lex| ; dense / |dense|]`` as one contiguous float32 array.

    Either part may be None (lexicon-only or dense-only index); the output then holds only the other.
    """
    parts = [as_matrix(p, name) if p is not None else None for p, name in ((lexicon, "lexicon"), (dense, "dense"))]
    n = _rows(parts)
    widths = [p.shape[1] if p is not None else 0 for p in parts]
    out = np.empty((n, sum(widths)), dtype=np.float32)
    col = 0
    for p, w in zip(parts, widths):
        if p is not None:
            l2_normalize(p, out=out[:, col : col + w])
            col += w
    return out


WEIGHT_RANGE = (1e-9, 1e9)  # a non-zero weight's magnitude: scores are float32, so 1e-300 vanishes and 1e154 overflows


def check_weight_range(w: Sequence[float], what: str, given: Any) -> None:
    """Refuse a non-zero weight outside ``WEIGHT_RANGE`` (weights are relative: scale them all alike)."""
    low, high = WEIGHT_RANGE
    if any(x != 0 and not low <= x <= high for x in w):
        raise ValueError(f"{what}: each non-zero weight must lie between {low:g} and {high:g}, got {given!r}; only "
                         "their ratios matter, so scale them alike (e.g. 0.5,0.5)")


def weight_pair(weights: Any, what: str = "weights", forms: str = "two numbers LEX,DENSE") -> tuple[float, float]:
    """``(w_lex, w_dense)`` from a pair or from text such as ``"0.7,0.3"``: finite, >= 0, not both 0. ``forms``
    names what the caller accepts in the error (``index.bm25_fusion.query_weights``: a third, BM25's)."""
    parts = weights.split(",") if isinstance(weights, str) else weights
    try:
        w = tuple(float(x) for x in parts)
    except (TypeError, ValueError):
        w = ()
    if len(w) == 2 and all(math.isfinite(x) for x in w) and min(w) < 0:
        raise ValueError(f"{what}: negative weights are not supported (got {weights!r}); each weight is >= 0 and "
                         "0 turns that part off, e.g. 1,0 for the lexicon alone")
    if len(w) != 2 or not all(math.isfinite(x) and x >= 0 for x in w) or w == (0.0, 0.0):
        raise ValueError(f"{what} must be {forms} (finite, >= 0, not all 0) such as 0.5,0.5; got {weights!r}")
    check_weight_range(w, what, weights)
    return w


BALANCED = "balanced"  # the weights spec that ``balanced_weights`` resolves from the documents
BALANCED_ROWS = 2048  # documents a spread is measured over
BALANCED_QUERIES = 256  # of them, the ones used as queries


def cosine_spread(x: np.ndarray, queries: int = BALANCED_QUERIES, seed: int = 0) -> float:
    """Mean, over ``queries`` rows of ``x`` taken as queries, of the standard deviation of their cosines to the
    other rows: how far this part of a score moves one query's documents apart. 0.0 for fewer than 3 nonzero rows.
    """
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1)
    x = x[norms > _TINY] / norms[norms > _TINY, None]
    n = x.shape[0]
    if n < 3:
        return 0.0
    rows = np.random.default_rng(seed).permutation(n)[: min(queries, n)]
    cos = (x[rows] @ x.T).astype(np.float64)
    cos[np.arange(len(rows)), rows] = np.nan  # a query's cosine to itself is not a score it ever ranks
    return float(np.mean(np.nanstd(cos, axis=1)))


def balanced_weights(lexicon: np.ndarray, dense: np.ndarray, max_rows: int = BALANCED_ROWS,
                     queries: int = BALANCED_QUERIES, seed: int = 0) -> tuple[float, float]:
    """``(w_lex, w_dense)``, summing to 1, that give the two parts of a hybrid score the same spread.

    Each weight is inversely proportional to its part's :func:`cosine_spread` over the documents (rows of
    ``lexicon`` and ``dense``, the same documents in the same order; a seeded sample of ``max_rows`` of them, with
    ``queries`` of those as queries). Documents stand in for queries, which a build does not have. Why: the
    lexicon's cosines spread about half as much as MiniLM's, so equal weights give the dense part twice the say.
    Equal say is better only where the lexicon is not the weaker part (``benchmarks/results/hybrid_weights.md``),
    hence an option (``lens index build --weights balanced``), not the default. Gives (0.5, 0.5) when either part
    has no spread (nothing to balance: fewer than 3 documents, or identical ones).
    """
    lexicon, dense = np.asarray(lexicon), np.asarray(dense)
    if lexicon.ndim != 2 or dense.ndim != 2 or lexicon.shape[0] != dense.shape[0]:
        raise ValueError(f"balanced_weights needs the same documents' lexicon (N, k) and dense (N, d) vectors, got "
                         f"shapes {lexicon.shape} and {dense.shape}")
    if lexicon.shape[0] > max_rows:
        pick = np.sort(np.random.default_rng(seed).choice(lexicon.shape[0], size=max_rows, replace=False))
        lexicon, dense = lexicon[pick], dense[pick]
    s_lex, s_dense = cosine_spread(lexicon, queries, seed), cosine_spread(dense, queries, seed)
    if not (s_lex > 0 and s_dense > 0):
        return (0.5, 0.5)
    return (s_dense / (s_lex + s_dense), s_lex / (s_lex + s_dense))


def mean_weights(pairs: Sequence[Sequence[float]], counts: Sequence[int]) -> tuple[float, float]:
    """The mean of weight pairs, each counted ``counts`` times (documents): the default of indexes merged into one.
    Equal pairs give that pair exactly; with no documents at all, the plain mean."""
    pairs = [weight_pair(p) for p in pairs]
    if not pairs:
        raise ValueError("mean_weights needs at least one weight pair")
    if len(set(pairs)) == 1:
        return pairs[0]
    c = np.asarray(counts, dtype=np.float64)
    if c.shape != (len(pairs),) or (c < 0).any():
        raise ValueError(f"mean_weights needs one count >= 0 per pair, got {list(counts)} for {len(pairs)} pairs")
    c = c if c.sum() > 0 else np.ones(len(pairs))
    w = (np.asarray(pairs) * c[:, None]).sum(axis=0) / c.sum()
    return (float(w[0]), float(w[1]))


def weights_spec(value: Any, what: str = "weights") -> tuple[float, float] | str:
    """A weights option as given: ``"balanced"`` (any case) or a pair (``weight_pair``'s checks and errors)."""
    if isinstance(value, str) and value.strip().lower() == BALANCED:
        return BALANCED
    return weight_pair(value, what)


def resolve_weights(weights: Any, lexicon: np.ndarray | None, dense: np.ndarray | None) -> tuple[float, float] | None:
    """A weights spec as a pair: None stays None (the index default), ``"balanced"`` is :func:`balanced_weights`
    of the documents (a hybrid needs both parts; one part alone keeps its default), anything else ``weight_pair``."""
    if weights is None:
        return None
    if weights_spec(weights) == BALANCED:
        return balanced_weights(lexicon, dense) if lexicon is not None and dense is not None else None
    return weight_pair(weights)


def _weights(w: float | np.ndarray, n: int, what: str) -> np.ndarray:
    w = np.asarray(w, dtype=np.float64)
    if w.ndim == 0:
        w = np.full(n, float(w))
    if w.shape != (n,):
        raise ValueError(f"{what} must be a scalar or have one value per query ({n}), got shape {w.shape}")
    if not np.isfinite(w).all() or (w < 0).any():
        raise ValueError(f"{what} must be finite and >= 0, got {w.tolist()}")
    return w


def query_vectors(
    lexicon: np.ndarray | None,
    dense: np.ndarray | None,
    w_lex: float | np.ndarray,
    w_dense: float | np.ndarray,
) -> np.ndarray:
    """Query vectors ``[w_lex * lex / |lex| ; w_dense * dense / |dense|]`` as contiguous float32.

    Their inner product with :func:`document_vectors` rows is ``w_lex * cos_lex + w_dense * cos_dense``.
    Weights are scalars or one value per query; a part that is None is left out (and its weight unused).
    """
    out = document_vectors(lexicon, dense)
    n = out.shape[0]
    col = 0
    for p, w, name in ((lexicon, w_lex, "w_lex"), (dense, w_dense, "w_dense")):
        if p is None:
            continue
        width = as_matrix(p, name).shape[1]
        out[:, col : col + width] *= _weights(w, n, name).astype(np.float32)[:, None]
        col += width
    return out


def prune_top_m(x: np.ndarray, m: int) -> np.ndarray:
    """Keep the ``m`` largest entries of each row of ``x`` (N, D) and zero the rest (top-m pruning).

    Meant for non-negative lexicon vectors: a sparse store then holds at most ``m`` (index, weight) pairs per
    document. Ties at the m-th value are broken by position (``argpartition``), so exactly ``min(m, D)`` entries
    survive per row (fewer where a row has fewer non-zeros). Returns a new float32 array; ``x`` is untouched.
    """
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"prune_top_m takes a 2-D (N, D) matrix, got shape {x.shape}")
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
        raise ValueError(f"m must be a positive integer (entries kept per row), got {m!r}")
    out = np.zeros(x.shape, dtype=np.float32)
    if m >= x.shape[1]:
        out[:] = x
        return out
    keep = np.argpartition(-x, m - 1, axis=1)[:, :m]
    rows = np.arange(x.shape[0])[:, None]
    out[rows, keep] = x[rows, keep]
    return out


def support_mask(ids_per_row: Sequence[Sequence[int]], dim: int) -> np.ndarray:
    """(rows, dim) bool: True at each row's ids, e.g. the clusters of a text's own tokens (its exact-match terms)."""
    out = np.zeros((len(ids_per_row), dim), dtype=bool)
    for i, ids in enumerate(ids_per_row):
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= dim):
            raise ValueError(f"row {i} has an id outside [0, {dim}): {ids.min()}..{ids.max()}")
        out[i, ids] = True
    return out


def mass_share(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per row of the non-negative ``x`` (N, D), the share of its weight (L1 mass) that sits where ``mask`` (N, D)
    is True; NaN for a row with no weight. With ``support_mask`` of a text's own tokens: how much of a lexicon
    vector is exact match and how much is expansion."""
    x, mask = np.asarray(x, dtype=np.float64), np.asarray(mask, dtype=bool)
    if x.shape != mask.shape or x.ndim != 2:
        raise ValueError(f"mass_share takes two (N, D) arrays of one shape, got {x.shape} and {mask.shape}")
    if (x < 0).any():
        raise ValueError("mass_share takes non-negative weights (lexicon or SPLADE vectors)")
    total = x.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, (x * mask).sum(axis=1) / total, np.nan)


def cluster_idf(df: np.ndarray, n: int) -> np.ndarray:
    """BM25's (Lucene's) inverse document frequency of each lexicon cluster, ``ln(1 + (n - df + 0.5) / (df +
    0.5))`` (float32), from ``df`` (how many of the ``n`` documents weigh each cluster above zero).

    A query's lexicon weights times this (``lens search --idf``) favour the clusters that are rare in *this*
    corpus, as BM25 does: the model's weights were learnt on its training domains, where a cluster common in the
    user's corpus (``flow`` in aeronautics) may have been a rare, telling one."""
    df = np.asarray(df)
    if df.ndim != 1 or (df.size and (df.min() < 0 or df.max() > n)):
        raise ValueError(f"df must be one count per cluster between 0 and n = {n}")
    d = df.astype(np.float64)
    return np.log1p((n - d + 0.5) / (d + 0.5)).astype(np.float32)

