"""Small seeded random corpora (BEIR-style JSONL) written on the fly, for the indexing, scale and reliability tests
and for benchmarks/reliability.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np

# words the tiny test tokenizer knows (conftest.WORDS holds them all)
WORDS = "cell gene protein cancer patients drug dose mouse brain blood risk treatment".split()


def write_corpus(path: Path, n: int, prefix: str = "d", seed: int = 0, words: Sequence[str] = WORDS,
                 lengths: tuple[int, int] = (2, 9)) -> Path:
    """``n`` documents ``{prefix}0`` .. : the title is ``words[i]`` in turn, the text ``lengths[0]`` to
    ``lengths[1] - 1`` words drawn with ``seed``. Returns ``path``."""
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for i in range(n):
            text = " ".join(rng.choice(words, size=int(rng.integers(*lengths))))
            f.write(json.dumps({"_id": f"{prefix}{i}", "title": words[i % len(words)], "text": text}) + "\n")
    return path
