"""Semantic textual similarity: Spearman correlation between gold scores and the cosine of each pair's vectors.

The sets are gzipped TSVs with ``sentence1, sentence2, score, split`` (STS-Benchmark, SICK-R). STS is a symmetric
task: as in MTEB (and ``lens.integrations.mteb``), both sentences are encoded as queries behind the STS instruction
(``pairing="symmetric"``, the default); ``pairing="asymmetric"`` encodes ``sentence2`` as a document instead, the
protocol of this package's earlier STS results. The score is the cosine of the two (lexicon, dense or hybrid) vectors.
"""

from __future__ import annotations

import os
from typing import Callable

import numpy as np

from index.vectors import l2_normalize
from lens.corpus import read_sts

STS_INSTRUCTION = "Retrieve semantically similar text"
PAIRINGS = ("symmetric", "asymmetric")


def load_sts(path: str | os.PathLike, split: str = "test") -> tuple[list[str], list[str], np.ndarray]:
    """(sentence1s, sentence2s, gold scores) of one split, through ``lens.corpus.read_sts``."""
    pairs = read_sts(path, split)
    return pairs.sentence1, pairs.sentence2, np.asarray(pairs.scores, dtype=np.float64)


def pair_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine of two (N, d) matrices (a zero row gives 0)."""
    return np.einsum("ij,ij->i", l2_normalize(np.asarray(a)), l2_normalize(np.asarray(b))).astype(np.float64)


def spearman(pred: np.ndarray, gold: np.ndarray) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(pred, gold).statistic)


def sts_score(a: np.ndarray, b: np.ndarray, gold: np.ndarray) -> float:
    """Spearman x 100 between ``gold`` and the row-wise cosine of the pair matrices ``a`` and ``b``."""
    return 100 * spearman(pair_cosines(a, b), gold)


def evaluate_sts(encode_pairs: Callable[[list[str], list[str]], tuple[np.ndarray, np.ndarray]],
                 path: str | os.PathLike, split: str = "test") -> dict:
    """Spearman x 100 of one STS split; ``encode_pairs(s1s, s2s)`` returns the two vector matrices."""
    s1, s2, gold = load_sts(path, split)
    a, b = encode_pairs(s1, s2)
    return {"spearman": sts_score(a, b, gold), "pairs": len(gold), "split": split}


def lens_pair_encoder(encoder, output: str = "lexicon", instruction: str = STS_INSTRUCTION, batch_size: int = 32,
                      pairing: str = "symmetric"):
    """``encode_pairs`` for a LensEncoder: both sentences as queries behind ``instruction`` (``"symmetric"``), or
    sentence2 as a document (``"asymmetric"``)."""
    if pairing not in PAIRINGS:
        raise ValueError(f"unknown STS pairing {pairing!r}; choose one of {', '.join(PAIRINGS)}")

    def encode_pairs(s1: list[str], s2: list[str]):
        kw = dict(batch_size=batch_size, output=output, show_progress_bar=False)
        first = encoder.encode_queries(s1, instruction=instruction, **kw)
        if pairing == "symmetric":
            return first, encoder.encode_queries(s2, instruction=instruction, **kw)
        return first, encoder.encode_documents(s2, **kw)

    return encode_pairs
