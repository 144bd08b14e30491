"""Semantic textual similarity: Spearman correlation between gold scores and the cosine of each pair's vectors.

The sets are gzipped TSVs with ``sentence1, sentence2, score, split`` (STS-Benchmark, SICK-R). Following the
paper's asymmetric use of instructions, ``sentence1`` is encoded as a query behind the STS instruction and
``sentence2`` as a document; the score is the cosine of the two (lexicon, dense or hybrid) vectors.
"""

from __future__ import annotations

import csv
import gzip
import io
import os
from typing import Callable

import numpy as np

STS_INSTRUCTION = "Retrieve semantically similar text"


def load_sts(path: str | os.PathLike, split: str = "test") -> tuple[list[str], list[str], np.ndarray]:
    """(sentence1s, sentence2s, gold scores) of one split; a clear error for a missing file or split."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no STS file at {path}; expected a .tsv.gz with sentence1, sentence2, score, split")
    with gzip.open(path, "rt", encoding="utf-8", newline="") if str(path).endswith(".gz") else open(
            path, encoding="utf-8", newline="") as f:
        text = f.read()
    rows = list(csv.DictReader(io.StringIO(text), delimiter="\t", quoting=csv.QUOTE_NONE))
    missing = {"sentence1", "sentence2", "score", "split"} - set(rows[0] if rows else {})
    if missing:
        raise ValueError(f"{path} lacks column(s) {sorted(missing)}")
    rows = [r for r in rows if r["split"] == split]
    if not rows:
        raise ValueError(f"{path} has no rows of split {split!r}")
    return [r["sentence1"] for r in rows], [r["sentence2"] for r in rows], np.array([float(r["score"]) for r in rows])


def pair_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine of two (N, d) matrices (a zero row gives 0)."""
    na = np.linalg.norm(a, axis=1)
    nb = np.linalg.norm(b, axis=1)
    return np.einsum("ij,ij->i", a, b) / np.where(na * nb > 0, na * nb, 1.0)


def spearman(pred: np.ndarray, gold: np.ndarray) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(pred, gold).statistic)


def evaluate_sts(encode_pairs: Callable[[list[str], list[str]], tuple[np.ndarray, np.ndarray]],
                 path: str | os.PathLike, split: str = "test") -> dict:
    """Spearman x 100 of one STS split; ``encode_pairs(s1s, s2s)`` returns the two vector matrices."""
    s1, s2, gold = load_sts(path, split)
    a, b = encode_pairs(s1, s2)
    return {"spearman": 100 * spearman(pair_cosines(a, b), gold), "pairs": len(gold), "split": split}


def lens_pair_encoder(encoder, output: str = "lexicon", instruction: str = STS_INSTRUCTION, batch_size: int = 32):
    """``encode_pairs`` for a LensEncoder: sentence1 as a query behind ``instruction``, sentence2 as a document."""
    def encode_pairs(s1: list[str], s2: list[str]):
        kw = dict(batch_size=batch_size, output=output, show_progress_bar=False)
        return encoder.encode_queries(s1, instruction=instruction, **kw), encoder.encode_documents(s2, **kw)

    return encode_pairs
