"""FAISS calls the store makes: a search restricted to allowed ids (exact types stay exact, approximate ones look
further under a narrow filter) and index files written and read with errors a user can act on."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import faiss
import numpy as np

__all__ = ["faiss_search", "filtered_breadth", "hnsw_filter_is_exact", "read_faiss", "write_faiss"]


def filtered_breadth(breadth: int, total: int, allowed: int, cap: int) -> int:
    """How far an approximate search looks under a filter that keeps ``allowed`` of ``total`` documents: its
    unfiltered ``breadth`` (IVF lists probed, HNSW candidates kept) scaled by ``total / allowed``, at most ``cap``."""
    return int(min(cap, max(breadth, -(-breadth * total // max(allowed, 1)))))


def hnsw_filter_is_exact(ef_search: int, m: int, total: int, allowed: int) -> bool:
    """Whether a filtered HNSW search should score the ``allowed`` matching documents exactly instead of walking
    the graph. A walk with ``ef`` candidates computes about ``ef * m`` distances (``m``: the graph's links per
    node; measured with ``faiss.cvar.hnsw_stats``: 0.4-0.6 x ``ef * 2m`` on level 0), and under a filter ``ef`` is
    widened by :func:`filtered_breadth`; scoring the matches costs one distance each. So a filter that leaves no
    more documents than the widened walk would compute distances for is searched exactly: faster and without
    loss (``benchmarks/filter_speed.py``)."""
    return allowed <= filtered_breadth(ef_search, total, allowed, total) * m


def faiss_search(index: faiss.Index, queries: np.ndarray, k: int,
                 allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``index.search``, but for an ``IndexIDMap`` the inner index is searched and labels are mapped
    here through a zero-copy view of the id map. Same results; it skips the IDMap's own OpenMP region,
    which costs a scheduler time slice per call on a busy machine (visible in single-query latency).

    ``allowed``: the only labels (int ids) that may be returned, given to FAISS as an ``IDSelector`` so that the
    search itself skips the others. Exact types stay exact. The approximate ones look further in proportion to
    what the filter leaves out (:func:`filtered_breadth`): IVF probes ``nprobe * ntotal / len(allowed)`` lists and
    HNSW keeps ``efSearch * ntotal / len(allowed)`` candidates (each capped), so that they meet about as many
    matching documents as an unfiltered search meets documents. HNSW scores the matches exactly instead, from the
    graph's own flat storage, when they are fewer than that walk's distance computations
    (:func:`hnsw_filter_is_exact`): a narrow filter makes the walk visit most of the graph."""
    if not isinstance(index, faiss.IndexIDMap):
        if allowed is None:
            return index.search(queries, k)
        selector = faiss.IDSelectorBatch(allowed)
        ivf = faiss.extract_index_ivf(index)
        nprobe = filtered_breadth(ivf.nprobe, ivf.ntotal, len(allowed), ivf.nlist)
        return index.search(queries, k, params=faiss.SearchParametersIVF(sel=selector, nprobe=nprobe))
    inner = faiss.downcast_index(index.index)
    id_map = faiss.rev_swig_ptr(index.id_map.data(), index.ntotal)
    if allowed is None:
        scores, pos = inner.search(queries, k)
    else:  # the inner index numbers its vectors 0..n-1: select those positions, as a bitmap
        bitmap = np.packbits(np.isin(id_map, allowed), bitorder="little")
        selector = faiss.IDSelectorBitmap(index.ntotal, faiss.swig_ptr(bitmap))
        if isinstance(inner, faiss.IndexHNSW):
            hnsw = inner.hnsw
            ef = filtered_breadth(hnsw.efSearch, index.ntotal, len(allowed), index.ntotal)
            if hnsw_filter_is_exact(hnsw.efSearch, hnsw.nb_neighbors(1), index.ntotal, len(allowed)):
                inner = faiss.downcast_index(inner.storage)  # the graph's vectors, at the same positions
                params = faiss.SearchParameters(sel=selector)
            else:
                params = faiss.SearchParametersHNSW(sel=selector, efSearch=max(ef, k))
        else:
            params = faiss.SearchParameters(sel=selector)
        scores, pos = inner.search(queries, k, params=params)
    labels = np.where(pos >= 0, id_map[np.maximum(pos, 0)], -1)
    return scores, labels


_FAISS_ERRNO = {os.strerror(code): code for code in
                (errno.ENOSPC, errno.EFBIG, errno.EACCES, errno.EPERM, errno.EROFS, errno.EIO,
                 getattr(errno, "EDQUOT", errno.ENOSPC))}


def write_faiss(index: faiss.Index, path: Path, write=None) -> None:
    """``faiss.write_index`` (or ``write()``), its write errors turned into an ``OSError`` with the errno whose
    text they quote."""
    try:
        write() if write is not None else faiss.write_index(index, str(path))
    except RuntimeError as e:
        text = str(e)
        if not any(s in text for s in ("write error", "could not open", "could not mmap", "ftruncate", "resize")):
            raise
        code = next((c for message, c in _FAISS_ERRNO.items() if message in text), errno.EIO)
        raise OSError(code, f"FAISS could not write the index ({text.splitlines()[-1]})", str(path)) from e


def read_faiss(f, path: Path, io_flags: int = 0) -> faiss.Index:
    """Parse an index file already open as ``f`` (checksummed by the caller)."""
    f.seek(0)
    try:
        return faiss.read_index(faiss.PyCallbackIOReader(f.read), io_flags)
    except RuntimeError as e:
        raise ValueError(f"index file {path} could not be read by FAISS ({e}); rebuild the index") from e
