"""Exact scores of chosen documents against query vectors, from the vectors a FAISS index stores.

Used where candidates come from elsewhere than the FAISS search (the BM25 part's top documents, ``index.store``):
each candidate's vector score is the inner product of the weighted query vector with its stored vector, as an
unfiltered search would score it (for ``sq8`` / ``fp16`` the stored vector is the decoded one, as FAISS scores it).
"""

from __future__ import annotations

import faiss
import numpy as np

__all__ = ["stored_scores"]


def stored_scores(index: faiss.Index, queries: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """``(n_queries, len(labels))`` float32 inner products of ``queries`` with the stored vectors of the documents
    whose FAISS labels are ``labels`` (each must be in the index)."""
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    labels = np.asarray(labels, dtype=np.int64)
    out = np.zeros((queries.shape[0], len(labels)), dtype=np.float32)
    if not len(labels):
        return out
    if isinstance(index, faiss.IndexIDMap):
        inner = faiss.downcast_index(index.index)
        if isinstance(inner, faiss.IndexHNSW):
            inner = faiss.downcast_index(inner.storage)  # the graph's vectors, at the same positions
        id_map = faiss.rev_swig_ptr(index.id_map.data(), index.ntotal)
        pos = np.flatnonzero(np.isin(id_map, labels))
        found = id_map[pos]
        order = np.argsort(found)
        where = np.searchsorted(found[order], labels)
        if len(found) != len(np.unique(labels)) or not np.array_equal(found[order][where], labels):
            raise KeyError("some candidate documents are not in the FAISS index")
        vectors = inner.reconstruct_batch(pos[order][where])
        return np.ascontiguousarray(queries @ vectors.T, dtype=np.float32)
    ivf = faiss.extract_index_ivf(index)  # IVF: every list probed, only the labels scored
    uniq = np.unique(labels)
    params = faiss.SearchParametersIVF(sel=faiss.IDSelectorBatch(uniq), nprobe=ivf.nlist)
    scores, got = index.search(queries, len(uniq), params=params)
    for row in range(queries.shape[0]):
        keep = got[row] >= 0
        if keep.sum() != len(uniq):
            raise KeyError("some candidate documents are not in the FAISS index")
        lookup = dict(zip(got[row][keep].tolist(), scores[row][keep].tolist()))
        out[row] = [lookup[int(x)] for x in labels]
    return out
