"""LENS vector store: FAISS hybrid (lexicon + dense) index with string ids, metadata and safe persistence.

Main entry points: :class:`HybridIndex`, and :func:`load_index` for a saved directory of either layout (one index
or shards). Index types live in :data:`INDEX_TYPES` (flat, hnsw, ivf, sq8,
fp16), result fusion in :data:`FUSION` (rrf, minmax).

The names below load on first use, so ``import index.vectors`` (the maths, used by ``lens``) does not pay for
FAISS and SQLite.
"""

import importlib

__all__ = [
    "FUSION",
    "INDEX_TYPES",
    "FingerprintMismatchError",
    "HybridIndex",
    "SearchResult",
    "as_run",
    "get_fusion",
    "get_index_type",
    "load_index",
    "minmax_fusion",
    "rrf",
]

_HOME = {
    "FUSION": "fusion", "as_run": "fusion", "get_fusion": "fusion", "minmax_fusion": "fusion", "rrf": "fusion",
    "INDEX_TYPES": "factory", "get_index_type": "factory",
    "FingerprintMismatchError": "manifest",
    "HybridIndex": "store", "SearchResult": "store",
    "load_index": "loading",
}


def __getattr__(name: str):
    if name in _HOME:
        return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
