"""lens.eval.lexicality (`lens bench lexicality`): exact-match shares and the exact / expansion query variants."""

from __future__ import annotations

import json

import numpy as np
import pytest
from bench_helpers import write_beir

from lens.eval.beir import load_dataset
from lens.eval.lexicality import Space, measure, render

# one dimension per word of the tiny set; each query adds weight on one other word (its expansion)
EXPANSION = {"q1": "trial", "q2": "mouse", "q3": "protein"}
EXPANSION_WEIGHT = 1.5


def word_space(data) -> Space:
    texts = [d.full_text for d in data.docs] + list(data.queries.values())
    vocab = {w: i for i, w in enumerate(sorted({w for t in texts for w in t.lower().split()}))}
    by_text = {t: q for q, t in data.queries.items()}

    def dims(text):
        return np.array([vocab[w] for w in text.lower().split()], dtype=np.int64)

    def bag(text):
        v = np.zeros(len(vocab), dtype=np.float32)
        v[dims(text)] = 1.0
        return v

    def queries(texts, instruction):
        rows = []
        for t in texts:
            v = bag(t)
            if by_text[t] in EXPANSION:
                v[vocab[EXPANSION[by_text[t]]]] = EXPANSION_WEIGHT
            rows.append(v)
        return np.stack(rows)

    return Space("words", len(vocab), queries, lambda texts: np.stack([bag(t) for t in texts]), dims, "a bag of words")


def test_measure_separates_exact_match_from_expansion(tmp_path):
    data = load_dataset(write_beir(tmp_path / "tiny"))
    r = measure(word_space(data), data, "unused")
    # exact only: q1 -> d1 and q2 -> d2 (relevant), q3's words are in no document
    assert r["ndcg@10_exact"] == pytest.approx(2 / 3)
    # expansion only: q1 -> d5 and q2 -> d4 (not relevant), q3 -> d3 (relevant)
    assert r["ndcg@10_expansion"] == pytest.approx(1 / 3)
    assert r["ndcg@10_full"] == pytest.approx(1.0)  # own words outweigh the expansion
    shares = []
    for q, text in data.queries.items():
        own = len(set(text.lower().split()))
        extra = EXPANSION_WEIGHT if q in EXPANSION else 0.0
        shares.append(own / (own + extra))
    assert r["query_exact_share"] == pytest.approx(np.mean(shares))
    assert r["doc_exact_share"] == pytest.approx(1.0)  # documents are their own bags
    assert r["query_top10_own"] == pytest.approx(np.mean([len(set(t.lower().split())) for t in data.queries.values()]))


def test_lens_full_variant_is_the_lens_lexicon_system(tmp_path, tiny_lens_dir):
    from lens.cli import main

    ds = write_beir(tmp_path / "tiny")
    cache, out = tmp_path / "cache", tmp_path / "lexicality"
    assert main(["bench", "beir", str(ds), "--systems", "lens-lexicon", "--model", str(tiny_lens_dir),
                 "--output-dir", str(tmp_path / "beir"), "--cache-dir", str(cache), "--no-plot"]) == 0
    beir = json.loads((tmp_path / "beir" / "tiny" / "results.json").read_text())
    assert main(["bench", "lexicality", str(ds), "--model", str(tiny_lens_dir), "--cache-dir", str(cache),
                 "--output", str(out)]) == 0
    saved = json.loads(out.with_suffix(".json").read_text())
    r = saved["sets"]["tiny"]["systems"][f"lens-lexicon ({tiny_lens_dir})"]
    assert r["ndcg@10_full"] == pytest.approx(beir["systems"]["lens-lexicon"]["ndcg@10"], abs=1e-6)
    for key in ("query_exact_share", "doc_exact_share"):
        assert 0.0 <= r[key] <= 1.0
    md = out.with_suffix(".md").read_text()
    assert md == "\n".join(render(saved)) + "\n" and "| lens-lexicon (" in md
    assert saved["_meta"]["lens_precision"] == {str(tiny_lens_dir): "float32 on cpu"}
    # the precision is chosen as for lens bench beir, and recorded
    assert main(["bench", "lexicality", str(ds), "--model", str(tiny_lens_dir), "--cache-dir", str(cache),
                 "--output", str(tmp_path / "bf16"), "--device", "cpu", "--dtype", "bfloat16"]) == 0
    bf16 = json.loads((tmp_path / "bf16.json").read_text())
    assert bf16["_meta"]["lens_precision"] == {str(tiny_lens_dir): "bfloat16 on cpu"}
    assert "bfloat16 on cpu" in (tmp_path / "bf16.md").read_text()
    # --markdown-only keeps the measurements and adds a note
    assert main(["bench", "lexicality", "--output", str(out), "--markdown-only", "--note", "read it"]) == 0
    assert "- read it" in out.with_suffix(".md").read_text()


def test_queries_only_and_a_collapsed_model(tmp_path):
    data = load_dataset(write_beir(tmp_path / "tiny"))
    space = word_space(data)
    r = measure(space, data, "unused", documents=False)
    assert r["query_exact_share"] == pytest.approx(measure(space, data, "unused")["query_exact_share"])
    assert r["doc_exact_share"] is None and r["ndcg@10_full"] is None
    # a model whose vectors are all zero (a collapsed run) has no share to report, and the table says so
    collapsed = Space("zero", space.dim, lambda texts, i: np.zeros((len(texts), space.dim), np.float32),
                      lambda texts: np.zeros((len(texts), space.dim), np.float32), space.token_dims, "zeros")
    z = measure(collapsed, data, "unused")
    assert z["query_exact_share"] is None and z["doc_exact_share"] is None and z["ndcg@10_full"] == 0.0
    results = {"_meta": {"command": "lens bench lexicality", "systems": {"zero": "zeros"}},
               "sets": {"tiny": {"queries": 3, "documents": 5, "systems": {"zero": z}}}}
    own = f"{z['query_own_dims']:.1f}"
    assert f"| zero | - | 0.0 | 0 | {own} | - | 0 | 0.000 | 0.000 | 0.000 |" in "\n".join(render(results))
    results["_meta"]["queries_only"] = True
    results["sets"]["tiny"]["systems"] = {"words": r}
    md = "\n".join(render(results))
    row = f"| words | {r['query_exact_share']:.3f} | {r['query_top10_own']:.1f} | {r['query_nonzeros']:.0f} | {own} |"
    assert row in md
    assert "doc exact share" not in md and "Queries only" in md
