"""benchmarks/hybrid_weights.py: every row against scores computed here from the same vectors; its saved notes."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from bench_helpers import load_script

from index.vectors import balanced_weights
from lens.corpus import Document
from lens.eval.dev import RetrievalSet
from lens.metrics import evaluate


@pytest.fixture(scope="module")
def hw():
    return load_script("hybrid_weights")


class FakeResource:
    """Vectors by text, as the harness's resources give them (documents through ``documents``, queries through
    ``encoder``)."""

    def __init__(self, table: dict[str, np.ndarray], key: str):
        self.table, self.key = table, key
        self.encoder = SimpleNamespace(encode_queries=self._queries, encode=self._queries)

    def _queries(self, texts, **kw):
        return np.stack([self.table[t] for t in texts])

    def documents(self, texts):
        return SimpleNamespace(arrays={self.key: np.stack([self.table[t] for t in texts])})


def dev_set(hw, n_docs=30, n_queries=8, seed=0):
    rng = np.random.default_rng(seed)
    docs = [Document(f"d{i}", f"text {i}") for i in range(n_docs)]
    queries = {f"q{i}": f"query {i}" for i in range(n_queries)}
    qrels = {f"q{i}": {f"d{i}": 1, f"d{i + n_queries}": 2} for i in range(n_queries)}
    texts = [d.text for d in docs] + list(queries.values())
    lex = {t: np.abs(rng.normal(size=12)) * (rng.random(12) < 0.5) + 1e-3 for t in texts}
    dense = {t: rng.normal(size=5) for t in texts}
    return RetrievalSet("tiny", docs, queries, qrels, "Find it", "made up"), lex, dense


def ndcg_of(dev, scores):
    ids = [d.id for d in dev.docs]
    run = {q: {ids[j]: float(s) for j, s in enumerate(row)} for q, row in zip(dev.queries, scores)}
    return evaluate(dev.qrels, run, ("ndcg@10",)).mean["ndcg@10"]


def unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_every_lens_row_is_its_weighted_cosine(hw):
    dev, lex, dense = dev_set(hw)
    out = hw.study(dev, FakeResource(lex, "lexicon"), FakeResource(dense, "vectors"), [0.0, 0.3, 1.0])
    docs = [d.text for d in dev.docs]
    queries = list(dev.queries.values())
    cos_lex = unit(np.stack([lex[q] for q in queries])) @ unit(np.stack([lex[t] for t in docs])).T
    cos_dense = unit(np.stack([dense[q] for q in queries])) @ unit(np.stack([dense[t] for t in docs])).T
    rows = out["ndcg@10"]
    assert rows["lens w_lex=1"] == pytest.approx(ndcg_of(dev, cos_lex))
    assert rows["lens w_lex=0"] == pytest.approx(ndcg_of(dev, cos_dense)) == pytest.approx(rows["minilm"])
    assert rows["lens w_lex=0.3"] == pytest.approx(ndcg_of(dev, 0.3 * cos_lex + 0.7 * cos_dense))
    w = balanced_weights(np.stack([lex[t] for t in docs]), np.stack([dense[t] for t in docs]))
    assert out["balanced_weights"] == pytest.approx(list(w))
    assert rows["lens balanced"] == pytest.approx(ndcg_of(dev, w[0] * cos_lex + w[1] * cos_dense))
    z = 0.3 * cos_lex / cos_lex.std(axis=1, keepdims=True) + 0.7 * cos_dense / cos_dense.std(axis=1, keepdims=True)
    assert rows["lens z-score w_lex=0.3"] == pytest.approx(ndcg_of(dev, z))
    assert "lens z-score w_lex=1" not in rows  # one part alone: the fixed row already says it
    assert {"bm25", "bm25+minilm", "bm25+minilm-rrf"} <= set(rows)


def test_markdown_only_keeps_notes_and_needs_the_json(hw, tmp_path):
    out = tmp_path / "hw"
    with pytest.raises(SystemExit, match="run without --markdown-only"):
        hw.main(["--markdown-only", "--output", str(out)])
    results = {"tiny": {"source": "made up", "queries": 1, "documents": 2, "balanced_weights": [0.6, 0.4],
                        "ndcg@10": {"bm25": 0.5, "lens balanced": 0.75},
                        "mean per-query std of cosines over the corpus": {"lexicon": 0.05, "dense": 0.1}},
               "_meta": {"command": "python benchmarks/hybrid_weights.py", "model": "default", "machine": "cpu"}}
    out.with_suffix(".json").write_text(json.dumps(results))
    assert hw.main(["--markdown-only", "--output", str(out), "--note", "checked once"]) == 0
    md = out.with_suffix(".md").read_text()
    assert "| lens balanced | 0.7500 | 0.7500 |" in md and "- checked once" in md
    assert json.loads(out.with_suffix(".json").read_text())["_meta"]["notes"] == ["checked once"]
