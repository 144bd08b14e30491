"""LENS vector store: FAISS hybrid (lexicon + dense) index with string ids, metadata and safe persistence.

Main entry point: :class:`HybridIndex`. Index types live in :data:`INDEX_TYPES` (flat, hnsw, ivf, sq8,
fp16), result fusion in :data:`FUSION` (rrf, minmax).
"""

from .factory import INDEX_TYPES, get_index_type
from .fusion import FUSION, as_run, get_fusion, minmax_fusion, rrf
from .manifest import FingerprintMismatchError
from .store import HybridIndex, SearchResult

__all__ = [
    "FUSION",
    "INDEX_TYPES",
    "FingerprintMismatchError",
    "HybridIndex",
    "SearchResult",
    "as_run",
    "get_fusion",
    "get_index_type",
    "minmax_fusion",
    "rrf",
]
