"""Hard negatives mined by a LENS model instead of BM25 (``lens data beir --miner MODEL``).

A model trained one stage ranks the corpus for each training query; ``beir_pairs`` then samples negatives from
ranks 3-30 of that ranking (skipping the top, where unjudged relevant documents sit), as ANCE and GTE re-mine
with the model being trained. The corpus is encoded once per call.
"""

from __future__ import annotations

import logging

import numpy as np

logger = logging.getLogger(__name__)

__all__ = ["encoder_miner"]


def encoder_miner(encoder, instruction: str | None = None, batch_size: int = 16, show_progress_bar: bool | None = None):
    """A ``beir_pairs`` miner: ``(query texts, document texts) -> (queries x documents)`` cosine scores from
    ``encoder`` (a ``LensEncoder``), queries behind ``instruction`` (None: the model's default)."""

    def miner(query_texts: list[str], doc_texts: list[str]) -> np.ndarray:
        logger.info("mining with the model: %d documents, %d queries", len(doc_texts), len(query_texts))
        d = encoder.encode_documents(doc_texts, batch_size=batch_size, show_progress_bar=show_progress_bar)
        q = encoder.encode_queries(query_texts, instruction=instruction, batch_size=batch_size,
                                   show_progress_bar=show_progress_bar)
        return np.asarray(q, dtype=np.float32) @ np.asarray(d, dtype=np.float32).T

    return miner
