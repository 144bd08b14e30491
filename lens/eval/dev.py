"""Development judges for training runs: cheap measures on data no run trains on, never a test split.

- ``RerankSet``: queries held out of a BEIR *train* split (``lens.train.data.holdout_queries``, the queries that
  ``lens data beir --holdout`` leaves out), each with the pool of its BM25 top ``depth`` documents. A model
  reranks every pool; nDCG@10 is measured on the split's qrels. Reranking a fixed pool costs one encode per pool
  document instead of the whole corpus, and BM25's own order is the baseline of the same pools.
- ``sts_split``: an STS split's pairs (STS-B *dev*), scored by Spearman in ``lens.eval.sts``.

Both take vectors from any encoder, so a training study can judge a model straight from its trainer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from lens.corpus import load_beir
from lens.metrics import evaluate

__all__ = ["RerankSet", "holdout_rerank_set", "rerank_ndcg"]


@dataclass
class RerankSet:
    """Held-out queries, the union of their pools' documents, and each pool as rows of ``doc_texts``."""

    name: str
    query_ids: list[str]
    query_texts: list[str]
    doc_ids: list[str]
    doc_texts: list[str]
    pools: list[np.ndarray]  # per query: rows of doc_texts, BM25 order
    bm25_scores: list[np.ndarray]  # per query: BM25 score of each pool row
    qrels: dict[str, dict[str, int]]

    def run(self, scores: list[np.ndarray]) -> dict[str, dict[str, float]]:
        """``{query id: {doc id: score}}`` from one score per pool row."""
        return {q: {self.doc_ids[int(r)]: float(s) for r, s in zip(pool, sc)}
                for q, pool, sc in zip(self.query_ids, self.pools, scores)}

    def bm25_ndcg(self) -> float:
        """nDCG@10 of BM25's own order of the pools (the baseline every reranker starts from)."""
        return evaluate(self.qrels, self.run(self.bm25_scores), ("ndcg@10",)).mean["ndcg@10"]


def holdout_rerank_set(beir_dir: str | os.PathLike, fraction: float = 0.2, depth: int = 20,
                       max_queries: int | None = None, split: str = "train") -> RerankSet:
    """The queries of ``split`` that ``holdout_queries(qids, fraction)`` holds out of training, with BM25 pools.

    Only queries with a judged positive count. ``max_queries`` keeps the first ones in id order.
    """
    from lens.bm25 import BM25Index
    from lens.train.data import holdout_queries

    if split == "test":
        raise ValueError("a development judge never reads a test split; use the train split's held-out queries")
    corpus, queries, qrels = load_beir(beir_dir, split)
    qids = sorted(q for q in qrels if any(g > 0 for g in qrels[q].values()))
    held = holdout_queries(qids, fraction)[:max_queries]
    if not held:
        raise ValueError(f"{beir_dir}: no {split} query is held out at fraction {fraction}")
    texts = [d.full_text for d in corpus]
    hits = BM25Index(texts).search([queries[q] for q in held], depth)
    rows = sorted({int(i) for idx, _ in hits for i in idx})
    row_of = {r: j for j, r in enumerate(rows)}
    return RerankSet(
        name=os.path.basename(os.path.normpath(beir_dir)), query_ids=held, query_texts=[queries[q] for q in held],
        doc_ids=[corpus[r].id for r in rows], doc_texts=[texts[r] for r in rows],
        pools=[np.array([row_of[int(i)] for i in idx], dtype=np.int64) for idx, _ in hits],
        bm25_scores=[np.asarray(s, dtype=np.float64) for _, s in hits],
        qrels={q: qrels[q] for q in held})


def rerank_ndcg(rerank: RerankSet, query_vectors: np.ndarray, doc_vectors: np.ndarray) -> float:
    """nDCG@10 of the pools ordered by the dot product of the (unit) query and document vectors."""
    if len(query_vectors) != len(rerank.query_ids) or len(doc_vectors) != len(rerank.doc_ids):
        raise ValueError(f"expected {len(rerank.query_ids)} query and {len(rerank.doc_ids)} document vectors, got "
                         f"{len(query_vectors)} and {len(doc_vectors)}")
    scores = [doc_vectors[pool] @ query_vectors[i] for i, pool in enumerate(rerank.pools)]
    return evaluate(rerank.qrels, rerank.run(scores), ("ndcg@10",)).mean["ndcg@10"]
