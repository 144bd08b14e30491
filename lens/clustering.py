"""KMeans over the rows of the LM head: each cluster of related tokens becomes one embedding dimension.

The artefact is a token -> cluster ``assignment`` (-1 for tokens left out) and ``centroids``, each the exact
mean of its members' output embeddings. No cluster is empty: after KMeans, an empty cluster takes the member
farthest from its centroid out of the largest cluster.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import numpy as np
from tqdm.auto import tqdm

logger = logging.getLogger(__name__)


@dataclass
class Clustering:
    centroids: np.ndarray  # (K, H) float32: mean of each cluster's rows
    assignment: np.ndarray  # (V,) int64: cluster of each token, -1 for excluded tokens
    objective: list[float]  # KMeans objective after each iteration

    @property
    def sizes(self) -> np.ndarray:
        return np.bincount(self.assignment[self.assignment >= 0], minlength=len(self.centroids))


def centroids_from_assignment(matrix: np.ndarray, assignment: np.ndarray, k: int) -> np.ndarray:
    """Mean row of each cluster -> (k, H) float32 (zeros for an empty cluster)."""
    keep = assignment >= 0
    sums = np.zeros((k, matrix.shape[1]), dtype=np.float64)
    np.add.at(sums, assignment[keep], matrix[keep])
    counts = np.bincount(assignment[keep], minlength=k)[:, None]
    return (sums / np.maximum(counts, 1)).astype(np.float32)


def nearest_centroid(x: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Index of the L2-nearest centroid of each row of ``x`` (exact, via a FAISS flat index)."""
    import faiss

    index = faiss.IndexFlatL2(centroids.shape[1])
    index.add(np.ascontiguousarray(centroids, dtype=np.float32))
    _, idx = index.search(np.ascontiguousarray(x, dtype=np.float32), 1)
    return idx[:, 0].astype(np.int64)


def fill_empty_clusters(x: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """Give each empty cluster one row: the row farthest from its centroid in the currently largest cluster."""
    labels = labels.copy()
    sizes = np.bincount(labels, minlength=k)
    for c in np.flatnonzero(sizes == 0):
        donor = int(np.argmax(sizes))
        if sizes[donor] < 2:
            raise ValueError(f"cannot fill {int((sizes == 0).sum())} empty clusters: too few distinct rows")
        members = np.flatnonzero(labels == donor)
        centre = x[members].mean(axis=0)
        far = members[int(np.argmax(((x[members] - centre) ** 2).sum(axis=1)))]
        labels[far] = c
        sizes[donor] -= 1
        sizes[c] = 1
    return labels


def _faiss_steps(x: np.ndarray, k: int, iterations: int, seed: int) -> Callable[[np.ndarray | None], tuple]:
    import faiss

    def step(init: np.ndarray | None):
        km = faiss.Kmeans(
            x.shape[1], k, niter=1, seed=seed, max_points_per_centroid=1 << 30, min_points_per_centroid=1,
            verbose=False,
        )
        km.train(x, init_centroids=init)
        return km.centroids, float(km.obj[-1])

    return step


def _sklearn_steps(x: np.ndarray, k: int, iterations: int, seed: int) -> Callable[[np.ndarray | None], tuple]:
    from sklearn.cluster import KMeans

    def step(init: np.ndarray | None):
        km = KMeans(k, init="k-means++" if init is None else init, n_init=1, max_iter=1, random_state=seed)
        km.fit(x)
        return km.cluster_centers_.astype(np.float32), float(km.inertia_)

    return step


BACKENDS = {"faiss": _faiss_steps, "sklearn": _sklearn_steps}


def cluster_rows(
    matrix: np.ndarray,
    k: int,
    *,
    iterations: int = 20,
    seed: int = 0,
    backend: str = "faiss",
    exclude: np.ndarray | list[int] | None = None,
    show_progress_bar: bool = False,
) -> Clustering:
    """KMeans (Lloyd, L2) on the rows of ``matrix`` (V, H), leaving out the row indices in ``exclude``."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown clustering backend {backend!r}; valid: {sorted(BACKENDS)}")
    matrix = np.ascontiguousarray(matrix, dtype=np.float32)
    if matrix.ndim != 2:
        raise ValueError(f"expected a (vocab, hidden) matrix, got shape {matrix.shape}")
    if not np.isfinite(matrix).all():
        raise ValueError("the LM-head matrix has NaN or inf values; the backbone's weights are damaged")
    keep = np.ones(len(matrix), dtype=bool)
    if exclude is not None and len(exclude):
        keep[np.asarray(exclude, dtype=np.int64)] = False
    x = matrix[keep]
    if not 1 <= k <= len(x):
        raise ValueError(f"number of clusters must be between 1 and the {len(x)} clustered tokens, got {k}")
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")

    step = BACKENDS[backend](x, k, iterations, seed)
    centroids, objective = None, []
    bar = tqdm(range(iterations), desc=f"kmeans k={k} ({backend})", disable=not show_progress_bar)
    for _ in bar:
        centroids, obj = step(centroids)
        objective.append(obj)
        bar.set_postfix(objective=f"{obj:.4g}")

    labels = fill_empty_clusters(x, nearest_centroid(x, centroids), k)
    assignment = np.full(len(matrix), -1, dtype=np.int64)
    assignment[keep] = labels
    return Clustering(centroids_from_assignment(matrix, assignment, k), assignment, objective)


def identity_clustering(matrix: np.ndarray, exclude: np.ndarray | list[int] | None = None) -> Clustering:
    """No clustering: each kept token is its own cluster (the paper's unclustered-vocabulary baseline)."""
    matrix = np.ascontiguousarray(matrix, dtype=np.float32)
    keep = np.ones(len(matrix), dtype=bool)
    if exclude is not None and len(exclude):
        keep[np.asarray(exclude, dtype=np.int64)] = False
    assignment = np.full(len(matrix), -1, dtype=np.int64)
    assignment[keep] = np.arange(int(keep.sum()))
    return Clustering(matrix[keep].copy(), assignment, [0.0])


def size_summary(sizes: np.ndarray) -> dict[str, float]:
    """Spread of cluster sizes, for the closing summary."""
    return {
        "min": int(sizes.min()),
        "median": float(np.median(sizes)),
        "mean": float(sizes.mean()),
        "max": int(sizes.max()),
        "singletons": int((sizes == 1).sum()),
        "empty": int((sizes == 0).sum()),
    }


_ESCAPES = {c: f"\\x{c:02x}" for c in [*range(32), 127, 0x85, 0x2028, 0x2029]} | {ord("\\"): "\\\\", ord('"'): '\\"', 9: "\\t", 10: "\\n", 13: "\\r"}


def token_repr(tokenizer, token_id: int) -> str:
    """A token as readable text: decoded, double-quoted, with control characters escaped (one line, no tabs)."""
    return '"' + tokenizer.decode([token_id]).translate(_ESCAPES) + '"'


def clusters_tsv(assignment: np.ndarray, k: int, tokenizer) -> str:
    """``cluster<TAB>size<TAB>tokens`` per cluster, members in token-id order, for people to read."""
    members: list[list[int]] = [[] for _ in range(k)]
    for tok, c in enumerate(assignment.tolist()):
        if c >= 0:
            members[c].append(tok)
    lines = ["cluster\tsize\ttokens"]
    for c, toks in enumerate(members):
        lines.append(f"{c}\t{len(toks)}\t" + " ".join(token_repr(tokenizer, t) for t in toks))
    return "\n".join(lines) + "\n"
