"""Teacher scores for training examples: a dense encoder's cosine of each query to its positive and negatives.

BiXSE trains its pointwise loss on graded relevance; where no human grade exists a teacher can give one. The
scores land in ``TrainExample.teacher`` (``[positive] + negatives``), which ``bce-teacher`` turns into soft
targets and ``kl`` distils. The query is scored without its instruction: the default teacher (all-MiniLM-L6-v2)
was trained without instructions. ``PeerCosines`` gives the same cosines for a whole batch while training, for the
``hybrid`` loss (each distinct text encoded once). ``BM25Scores`` gives a batch's BM25 scores, for the ``bm25``
loss (the lexicon distils BM25's in-batch ranking, to learn exact match), with the statistics of the documents the
run trains on.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Iterable, Protocol, Sequence

import numpy as np

from lens.train.data import TrainExample

logger = logging.getLogger(__name__)

__all__ = ["BM25Scores", "PeerCosines", "TextEncoder", "add_teacher_scores"]


class TextEncoder(Protocol):
    def encode(self, texts: list[str], batch_size: int = ..., show_progress_bar: bool | None = ...) -> np.ndarray:
        """(N, dim) unit vectors."""


def _unit_vectors(encoder: TextEncoder, texts: list[str], batch_size: int, progress: bool | None = None) -> np.ndarray:
    vectors = np.asarray(encoder.encode(texts, batch_size=batch_size, show_progress_bar=progress), dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)  # cosine whatever the encoder's normalisation


class PeerCosines:
    """A frozen dense encoder's cosines of queries to documents, ``(query texts, doc texts) -> (B, D)``; each
    distinct text is encoded once and kept (a training run revisits its paragraphs and label texts)."""

    def __init__(self, encoder: TextEncoder, batch_size: int = 64):
        self.encoder = encoder
        self.batch_size = batch_size
        self._vectors: dict[str, np.ndarray] = {}

    def vectors(self, texts: Sequence[str]) -> np.ndarray:
        new = [t for t in dict.fromkeys(texts) if t not in self._vectors]
        if new:
            self._vectors.update(zip(new, _unit_vectors(self.encoder, new, self.batch_size, progress=False)))
        return np.stack([self._vectors[t] for t in texts])

    def __call__(self, queries: Sequence[str], docs: Sequence[str]) -> np.ndarray:
        return self.vectors(queries) @ self.vectors(docs).T


class BM25Scores:
    """BM25's scores of queries against documents, ``(query texts, doc texts) -> (B, D)``, from an index of
    ``corpus`` (``lens.bm25.BM25Index``: the baseline's own scoring, so its document frequencies and lengths are
    the corpus's); every document scored must be one of ``corpus``'s texts."""

    def __init__(self, corpus: Iterable[str]):
        from lens.bm25 import BM25Index  # the eval extra (bm25s), needed only by the bm25 loss

        self.rows = {t: i for i, t in enumerate(dict.fromkeys(corpus))}
        if not self.rows:
            raise ValueError("BM25Scores needs at least one document")
        self.index = BM25Index(list(self.rows))
        self._terms: dict[str, list[str]] = {}

    def __call__(self, queries: Sequence[str], docs: Sequence[str]) -> np.ndarray:
        from lens.bm25 import tokenize

        missing = [d for d in docs if d not in self.rows]
        if missing:
            raise ValueError(f"{len(missing)} document(s) are not in the BM25 corpus (first: {missing[0][:60]!r}); "
                             "build BM25Scores over every document the batches hold")
        new = [q for q in dict.fromkeys(queries) if q not in self._terms]
        if new:
            self._terms.update(zip(new, tokenize(new)))
        columns = np.fromiter((self.rows[d] for d in docs), dtype=np.int64, count=len(docs))
        out = np.zeros((len(queries), len(docs)), dtype=np.float32)
        for i, q in enumerate(queries):
            out[i] = self.index.scores(self._terms[q])[columns]
        return out


def add_teacher_scores(examples: Sequence[TrainExample], encoder: TextEncoder,
                       batch_size: int = 64) -> list[TrainExample]:
    """Copies of ``examples`` whose ``teacher`` holds the cosine of the query to ``[positive] + negatives``.

    Each distinct text is encoded once (label descriptions and paragraphs repeat across examples). An example's
    existing teacher scores are replaced.
    """
    texts = list(dict.fromkeys(t for e in examples for t in (e.query, e.positive, *e.negatives)))
    if not texts:
        return []
    logger.info("teacher: encoding %d distinct texts of %d examples", len(texts), len(examples))
    vectors = _unit_vectors(encoder, texts, batch_size)
    row = {t: i for i, t in enumerate(texts)}
    out = []
    for e in examples:
        docs = [row[t] for t in (e.positive, *e.negatives)]
        scores = vectors[docs] @ vectors[row[e.query]]
        out.append(dataclasses.replace(e, teacher=[round(float(s), 6) for s in scores]))
    return out
