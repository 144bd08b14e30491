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

__all__ = ["BM25_CONFIG", "BM25Index", "tokenize"]

BM25_CONFIG = {"method": "lucene", "k1": 1.5, "b": 0.75, "stemmer": "english (PyStemmer)", "stopwords": "en (bm25s)"}


def _modules():
    """(bm25s, an English stemmer), loaded through the ``eval`` extra."""
    bm25s = require("bm25s", "eval", what="BM25")
    stemmer_mod = require("Stemmer", "eval", what="BM25", package="PyStemmer")
    logging.getLogger("bm25s").setLevel(logging.WARNING)  # bm25s sets itself to DEBUG on import
    return bm25s, stemmer_mod.Stemmer("english")


def tokenize(texts: Sequence[str]) -> list[list[str]]:
    """Each text's BM25 terms, in order: bm25s's tokeniser with English stopwords and the Snowball stemmer (the
    terms ``BM25Index`` indexes and searches with)."""
    bm25s, stemmer = _modules()
    return bm25s.tokenize(list(texts), stopwords="en", stemmer=stemmer, show_progress=False, return_ids=False)


class BM25Index:
    """An in-memory BM25 index over texts; ``search`` gives the top-k row indices and scores (score > 0 only)."""

    def __init__(self, texts: Sequence[str] | None, *, _token_ids=None):
        bm25s, self._stemmer = _modules()
        self._bm25s = bm25s
        self.retriever = bm25s.BM25(method=BM25_CONFIG["method"], k1=BM25_CONFIG["k1"], b=BM25_CONFIG["b"])
        if _token_ids is not None:  # from_token_ids
            ids, vocab = _token_ids
            self.size = len(ids)
            corpus = bm25s.tokenization.Tokenized(ids=ids, vocab=vocab)
        else:
            self.size = len(texts)
            corpus = None if self.size == 0 else self._tokenize(list(texts))
        if self.size == 0:
            raise ValueError("BM25Index needs at least one text")
        self.retriever.index(corpus, show_progress=False)

    @classmethod
    def from_token_ids(cls, ids: Sequence[Sequence[int]], vocab: dict[str, int]) -> "BM25Index":
        """The index of documents given as term ids (``vocab``: term -> id) of :func:`tokenize`'s terms: the same
        scores as ``BM25Index`` of their texts, without the texts (an index's saved BM25 part)."""
        return cls(None, _token_ids=([list(map(int, d)) for d in ids], dict(vocab)))

    def scores(self, terms: Sequence[str]) -> np.ndarray:
        """Every document's BM25 score (float32, one per row) for a query's terms (:func:`tokenize`); terms not in
        the index add nothing, and a query with none scores every document 0."""
        known = self.retriever.get_tokens_ids(list(terms))
        if not known:
            return np.zeros(self.size, dtype=np.float32)
        return np.asarray(self.retriever.get_scores_from_ids(known), dtype=np.float32)

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
