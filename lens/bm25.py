"""The one BM25 set-up: bm25s with Lucene's scoring, an English Snowball stemmer and English stopwords.

The benchmark's ``bm25`` baseline and the hard-negative miner of ``lens data beir`` both use ``BM25Index``, so
training negatives come from exactly the ranking the baseline is scored on. Needs the ``eval`` extra.
"""

from __future__ import annotations

import logging
import os
from typing import Sequence

import numpy as np

from lens.extras import require

__all__ = ["BM25_CONFIG", "BM25Index"]

BM25_CONFIG = {"method": "lucene", "k1": 1.5, "b": 0.75, "stemmer": "english (PyStemmer)", "stopwords": "en (bm25s)"}


class BM25Index:
    """An in-memory BM25 index over texts; ``search`` gives the top-k row indices and scores (score > 0 only)."""

    def __init__(self, texts: Sequence[str]):
        bm25s = require("bm25s", "eval", what="BM25")
        stemmer_mod = require("Stemmer", "eval", what="BM25", package="PyStemmer")
        logging.getLogger("bm25s").setLevel(logging.WARNING)  # bm25s sets itself to DEBUG on import
        self._bm25s = bm25s
        self._stemmer = stemmer_mod.Stemmer("english")
        self.size = len(texts)
        if self.size == 0:
            raise ValueError("BM25Index needs at least one text")
        self.retriever = bm25s.BM25(method=BM25_CONFIG["method"], k1=BM25_CONFIG["k1"], b=BM25_CONFIG["b"])
        self.retriever.index(self._tokenize(list(texts)), show_progress=False)

    def _tokenize(self, texts: list[str], **kw):
        return self._bm25s.tokenize(texts, stopwords="en", stemmer=self._stemmer, show_progress=False, **kw)

    def search(self, queries: Sequence[str], k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query, (row indices, scores) of its top ``k`` texts with a positive score, best first.

        A query of stopwords only (no token left) retrieves nothing.
        """
        tokens = self._tokenize(list(queries), return_ids=False)
        k = min(k, self.size)
        empty = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32))
        out = [empty] * len(tokens)
        live = [i for i, t in enumerate(tokens) if t]
        if live:
            docs, scores = self.retriever.retrieve([tokens[i] for i in live], k=k, show_progress=False, n_threads=1)
            for row, i in enumerate(live):
                keep = scores[row] > 0
                out[i] = (np.asarray(docs[row][keep], dtype=np.int64), np.asarray(scores[row][keep]))
        return out

    def save(self, directory: str | os.PathLike) -> None:
        """bm25s's own saved form (used to measure the index's size on disk)."""
        self.retriever.save(directory)
