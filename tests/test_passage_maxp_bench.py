"""benchmarks/passage_maxp.py: a document's score is its best passage's, against a naive loop."""

from __future__ import annotations

import numpy as np
import pytest
from bench_helpers import load_script


@pytest.fixture(scope="module")
def pm():
    return load_script("passage_maxp")


def test_each_document_scores_as_its_best_passage(pm):
    rng = np.random.default_rng(0)
    counts = [1, 3, 2, 1, 4]
    scores = rng.standard_normal((3, sum(counts)))
    starts = np.cumsum([0] + counts[:-1])
    want = np.array([[row[a:a + n].max() for a, n in zip(starts, counts)] for row in scores])
    np.testing.assert_array_equal(pm.max_per_document(scores, starts), want)
