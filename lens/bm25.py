"""The one BM25 set-up: bm25s with Lucene's scoring, an English Snowball stemmer and English stopwords.

The benchmark's ``bm25`` baseline and the hard-negative miner of ``lens data beir`` both use ``BM25Index``, so
training negatives come from exactly the ranking the baseline is scored on; an index's BM25 part
(``index.bm25_part``) scores with :func:`lucene_idf` and :func:`saturated_tf`, the same formula over statistics that
its shards can add up. bm25s and PyStemmer are core dependencies, imported at first use.
"""

from __future__ import annotations

import logging
import os
from typing import NamedTuple, Sequence

import numpy as np

__all__ = ["BM25_CONFIG", "BM25Index", "BM25Stats", "lucene_idf", "saturated_tf", "tokenize"]

BM25_CONFIG = {"method": "lucene", "k1": 1.5, "b": 0.75, "stemmer": "english (PyStemmer)", "stopwords": "en (bm25s)"}


class BM25Stats(NamedTuple):
    """What BM25 needs of a corpus to score one query: its documents, their total length in terms, and each query
    term's document frequency (one per term, in the query's order). Corpora kept apart (an index's shards) add up
    (:meth:`total`), so each part scores its documents as one corpus of them all would."""

    documents: int
    length: int
    df: np.ndarray

    @classmethod
    def total(cls, parts: Sequence["BM25Stats"]) -> "BM25Stats":
        """The statistics of the parts' corpora taken together (the same query's terms in each)."""
        if not parts:
            raise ValueError("BM25Stats.total needs at least one part")
        return cls(sum(p.documents for p in parts), sum(p.length for p in parts),
                   np.sum([np.asarray(p.df, dtype=np.int64) for p in parts], axis=0))


def lucene_idf(df: np.ndarray, documents: int) -> np.ndarray:
    """BM25's inverse document frequency as Lucene (and bm25s's ``lucene`` method) computes it:
    ``log(1 + (N - df + 0.5) / (df + 0.5))`` (float64), never negative."""
    df = np.asarray(df, dtype=np.float64)
    return np.log1p((documents - df + 0.5) / (df + 0.5))


def saturated_tf(tf: np.ndarray, doc_length: np.ndarray, avg_length: float) -> np.ndarray:
    """BM25's term-frequency part with :data:`BM25_CONFIG`'s ``k1`` and ``b`` (Lucene's form, without the constant
    ``k1 + 1``): ``tf / (tf + k1 * (1 - b + b * |d| / avg |d|))`` (float64)."""
    k1, b = BM25_CONFIG["k1"], BM25_CONFIG["b"]
    tf = np.asarray(tf, dtype=np.float64)
    return tf / (tf + k1 * (1.0 - b + b * np.asarray(doc_length, dtype=np.float64) / avg_length))


def _modules():
    """(bm25s, an English stemmer), imported at first use (``import lens`` stays light)."""
    import bm25s
    import Stemmer as stemmer_mod
    logging.getLogger("bm25s").setLevel(logging.WARNING)  # bm25s sets itself to DEBUG on import
    return bm25s, stemmer_mod.Stemmer("english")


def tokenize(texts: Sequence[str]) -> list[list[str]]:
    """Each text's BM25 terms, in order: bm25s's tokeniser with English stopwords and the Snowball stemmer (the
    terms ``BM25Index`` indexes and searches with)."""
    bm25s, stemmer = _modules()
    return bm25s.tokenize(list(texts), stopwords="en", stemmer=stemmer, show_progress=False, return_ids=False)


class BM25Index:
    """An in-memory BM25 index over texts; ``search`` gives the top-k row indices and scores (score > 0 only)."""

    def __init__(self, texts: Sequence[str]):
        bm25s, self._stemmer = _modules()
        self._bm25s = bm25s
        self.retriever = bm25s.BM25(method=BM25_CONFIG["method"], k1=BM25_CONFIG["k1"], b=BM25_CONFIG["b"])
        self.size = len(texts)
        if self.size == 0:
            raise ValueError("BM25Index needs at least one text")
        self.retriever.index(self._tokenize(list(texts)), show_progress=False)

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
