"""Teacher scores for training examples: a dense encoder's cosine of each query to its positive and negatives.

BiXSE trains its pointwise loss on graded relevance; where no human grade exists a teacher can give one. The
scores land in ``TrainExample.teacher`` (``[positive] + negatives``), which ``bce-teacher`` turns into soft
targets and ``kl`` distils. The query is scored without its instruction: the default teacher (all-MiniLM-L6-v2)
was trained without instructions.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Protocol, Sequence

import numpy as np

from lens.train.data import TrainExample

logger = logging.getLogger(__name__)

__all__ = ["TextEncoder", "add_teacher_scores"]


class TextEncoder(Protocol):
    def encode(self, texts: list[str], batch_size: int = ..., show_progress_bar: bool | None = ...) -> np.ndarray:
        """(N, dim) unit vectors."""


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
    vectors = np.asarray(encoder.encode(texts, batch_size=batch_size), dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors = vectors / np.maximum(norms, 1e-12)  # cosine whatever the encoder's normalisation
    row = {t: i for i, t in enumerate(texts)}
    out = []
    for e in examples:
        docs = [row[t] for t in (e.positive, *e.negatives)]
        scores = vectors[docs] @ vectors[row[e.query]]
        out.append(dataclasses.replace(e, teacher=[round(float(s), 6) for s in scores]))
    return out
