"""The development judge: held-out train queries reranked within their BM25 pools (no test split read)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lens.eval.dev import holdout_rerank_set, holdout_retrieval_set, pairs_retrieval_set, rerank_ndcg  # noqa: E402
from lens.train.data import holdout_queries  # noqa: E402


@pytest.fixture
def beir_dir(tmp_path):
    """40 queries 'topic i', each judging the one document about topic i; 40 more distractor documents."""
    d = tmp_path / "toy"
    (d / "qrels").mkdir(parents=True)
    docs = [{"_id": f"d{i}", "title": "", "text": f"topic{i} study of topic{i} and shared words"} for i in range(40)]
    docs += [{"_id": f"x{i}", "text": f"topic{i} mentioned once among shared words"} for i in range(40)]
    (d / "corpus.jsonl").write_text("".join(json.dumps(x) + "\n" for x in docs))
    (d / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": f"topic{i}"}) + "\n"
                                             for i in range(40)))
    (d / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(40)))
    return d


def test_rerank_set_holds_out_the_training_holdout(beir_dir):
    rs = holdout_rerank_set(beir_dir, 0.5, depth=5)
    assert rs.query_ids == holdout_queries(sorted(f"q{i}" for i in range(40)), 0.5)
    for q, pool in zip(rs.query_ids, rs.pools):
        ids = {rs.doc_ids[r] for r in pool}
        assert len(pool) <= 5 and f"d{q[1:]}" in ids and f"x{q[1:]}" in ids
    assert rs.bm25_ndcg() == pytest.approx(1.0)  # the judged document repeats the term: BM25 ranks it first
    with pytest.raises(ValueError, match="test split"):
        holdout_rerank_set(beir_dir, 0.5, split="test")


def test_rerank_ndcg_follows_the_vectors(beir_dir):
    rs = holdout_rerank_set(beir_dir, 0.5, depth=5)
    dim = len(rs.doc_ids)
    docs = np.eye(dim)
    gold = np.eye(dim)[[rs.doc_ids.index(f"d{q[1:]}") for q in rs.query_ids]]
    other = np.eye(dim)[[rs.doc_ids.index(f"x{q[1:]}") for q in rs.query_ids]]
    assert rerank_ndcg(rs, gold, docs) == pytest.approx(1.0)
    assert rerank_ndcg(rs, other + 0.5 * gold, docs) == pytest.approx(1 / np.log2(3))  # the judged one second
    with pytest.raises(ValueError, match="expected"):
        rerank_ndcg(rs, gold[:1], docs)


def test_retrieval_set_is_the_held_out_queries_against_the_whole_corpus(beir_dir):
    rs = holdout_retrieval_set(beir_dir, 0.5)
    assert list(rs.queries) == holdout_queries(sorted(f"q{i}" for i in range(40)), 0.5)
    assert len(rs.docs) == 80 and rs.name == "toy-heldout"
    assert all(rs.qrels[q] == {f"d{q[1:]}": 1} for q in rs.queries)
    with pytest.raises(ValueError, match="test split"):
        holdout_retrieval_set(beir_dir, 0.5, split="test")


def test_pairs_retrieval_set_dedupes_texts(tmp_path):
    import gzip

    rows = [{"query": "a?", "positive": "P1", "negatives": ["P2"], "instruction": "Given a question, find"},
            {"query": "b?", "positive": "P2", "negatives": ["P1", "P3"]},
            {"query": "c?", "positive": "P3", "negative": "P4"}]
    path = tmp_path / "squad.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    rs = pairs_retrieval_set(path)
    text = {d.id: d.text for d in rs.docs}
    assert sorted(text.values()) == ["P1", "P2", "P3", "P4"] and rs.name == "squad-val"
    assert [text[next(iter(rs.qrels[q]))] for q in rs.queries] == ["P1", "P2", "P3"]
    assert rs.instruction == "Given a question, find"
    assert len(pairs_retrieval_set(path, 2).queries) == 2
    with pytest.raises(FileNotFoundError, match="make train-data-mixture"):
        pairs_retrieval_set(tmp_path / "missing.jsonl.gz")
