"""Semantic textual similarity: Spearman correlation between gold scores and the cosine of each pair's vectors.

The sets are gzipped TSVs with ``sentence1, sentence2, score, split`` (STS-Benchmark, SICK-R). STS is a symmetric
task: as in MTEB (and ``lens.integrations.mteb``), both sentences are encoded as queries behind the STS instruction
(``pairing="symmetric"``, the default); ``pairing="asymmetric"`` encodes ``sentence2`` as a document instead, the
protocol of this package's earlier STS results. The score is the cosine of the two (lexicon, dense or hybrid) vectors.
"""

from __future__ import annotations

import os
import re
from typing import Callable

import numpy as np

from index.vectors import l2_normalize
from lens.corpus import read_sts

STS_INSTRUCTION = "Retrieve semantically similar text"
PAIRINGS = ("symmetric", "asymmetric")
# the STS sets of ``shared/data/sts``, by name: their files under that directory
STS_FILES = {"stsbenchmark": "stsbenchmark/stsbenchmark.tsv.gz", "sick-r": "sick-r/sick.tsv.gz"}
# Shape-based strata of STS pairs (``pair_stratum``), standing in for STS-B's genres, whose labels the shared files
# do not carry: image captions, news headlines, questions, and the rest (forum posts and news prose).
STRATA = ("caption-like", "headline-like", "question", "other")
_DETERMINER = re.compile(r"^(a|an|the|two|three|four|several|some|many|one)\b", re.IGNORECASE)
_WORD = re.compile(r"[a-z0-9]+")
_SENTENCE_END = re.compile(r"[.!?\"')]$")  # a sentence's closing punctuation, or a quote or bracket after it
CAPTION_MAX_WORDS = 15


def load_sts(path: str | os.PathLike, split: str = "test", *, judged: bool = False
             ) -> tuple[list[str], list[str], np.ndarray]:
    """(sentence1s, sentence2s, gold scores) of one split, through ``lens.corpus.read_sts``. ``judged``: the split
    is to be scored, so gold scores that give no rank correlation (one pair, or all equal) are refused."""
    pairs = read_sts(path, split)
    if judged and len(set(pairs.scores)) < 2:
        raise ValueError(f"{path}: split {split!r} has {len(pairs)} pair(s), all scored {pairs.scores[0]:g}: a rank "
                         "correlation needs pairs with different gold scores")
    return pairs.sentence1, pairs.sentence2, np.asarray(pairs.scores, dtype=np.float64)


def pair_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine of two (N, d) matrices (a zero row gives 0)."""
    return np.einsum("ij,ij->i", l2_normalize(np.asarray(a)), l2_normalize(np.asarray(b))).astype(np.float64)


def spearman(pred: np.ndarray, gold: np.ndarray) -> float:
    """Spearman's rank correlation; NaN where either side is constant (no ranking to correlate)."""
    from scipy.stats import spearmanr

    pred, gold = np.asarray(pred, dtype=np.float64), np.asarray(gold, dtype=np.float64)
    if len(pred) < 2 or np.ptp(pred) == 0 or np.ptp(gold) == 0:
        return float("nan")
    return float(spearmanr(pred, gold).statistic)


def sts_score(a: np.ndarray, b: np.ndarray, gold: np.ndarray) -> float:
    """Spearman x 100 between ``gold`` and the row-wise cosine of the pair matrices ``a`` and ``b``."""
    return 100 * spearman(pair_cosines(a, b), gold)


def evaluate_sts(encode_pairs: Callable[[list[str], list[str]], tuple[np.ndarray, np.ndarray]],
                 path: str | os.PathLike, split: str = "test") -> dict:
    """Spearman x 100 of one STS split; ``encode_pairs(s1s, s2s)`` returns the two vector matrices."""
    s1, s2, gold = load_sts(path, split, judged=True)
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


def pair_stratum(sentence1: str, sentence2: str) -> str:
    """The stratum (``STRATA``) of one pair, from the shape of its two sentences.

    ``question`` when either ends with "?"; ``caption-like`` when both begin with a determiner or number ("A man
    is ...", "Two dogs ...") and are at most ``CAPTION_MAX_WORDS`` words, as image captions are;
    ``headline-like`` when neither ends in sentence punctuation, as news headlines do; ``other`` for the rest.
    """
    a, b = sentence1.strip(), sentence2.strip()
    if a.endswith("?") or b.endswith("?"):
        return "question"
    if all(_DETERMINER.match(t) and len(t.split()) <= CAPTION_MAX_WORDS for t in (a, b)):
        return "caption-like"
    if not any(_SENTENCE_END.search(t) for t in (a, b)):
        return "headline-like"
    return "other"


def word_overlap(sentence1: str, sentence2: str) -> float:
    """Jaccard overlap of the two sentences' lowercased word sets (0 for two empty sentences): the score of a
    model that matches words and nothing else."""
    a, b = set(_WORD.findall(sentence1.lower())), set(_WORD.findall(sentence2.lower()))
    return len(a & b) / len(a | b) if a | b else 0.0


def spearman_by_stratum(pred: np.ndarray, gold: np.ndarray, strata: list[str],
                        min_pairs: int = 10) -> dict[str, tuple[int, float]]:
    """``{stratum: (pairs, Spearman x 100)}`` over the pairs of each stratum, in ``STRATA`` order, plus ``"all"``;
    a stratum with fewer than ``min_pairs`` pairs gets NaN (a correlation over a handful of pairs says nothing)."""
    pred, gold = np.asarray(pred, dtype=np.float64), np.asarray(gold, dtype=np.float64)
    if not (len(pred) == len(gold) == len(strata)):
        raise ValueError(f"pred, gold and strata must be equally long, got {len(pred)}, {len(gold)}, {len(strata)}")
    labels = np.asarray(strata)
    out: dict[str, tuple[int, float]] = {}
    for name in (*STRATA, "all"):
        rows = np.ones(len(labels), bool) if name == "all" else labels == name
        n = int(rows.sum())
        if n:
            out[name] = (n, 100 * spearman(pred[rows], gold[rows]) if n >= min_pairs else float("nan"))
    return out
