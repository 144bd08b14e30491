"""Development judges for training runs: cheap measures on data no run trains on, never a test split.

- ``RerankSet``: queries held out of a BEIR *train* split (``lens.train.data.holdout_queries``, the queries that
  ``lens data beir --holdout`` leaves out), each with the pool of its BM25 top ``depth`` documents. A model
  reranks every pool; nDCG@10 is measured on the split's qrels. Reranking a fixed pool costs one encode per pool
  document instead of the whole corpus, and BM25's own order is the baseline of the same pools.
- ``sts_split``: an STS split's pairs (STS-B *dev*), scored by Spearman in ``lens.eval.sts``.

- ``RetrievalSet``: queries and a whole corpus for full retrieval on development data:
  ``holdout_retrieval_set`` (the held-out queries of a BEIR *train* split against the whole corpus) and
  ``pairs_retrieval_set`` (held-out training pairs: their positives and negatives are the corpus).

Both take vectors from any encoder, so a training study can judge a model straight from its trainer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from lens.corpus import Document, load_beir, read_jsonl
from lens.metrics import evaluate

__all__ = ["RerankSet", "RetrievalSet", "holdout_rerank_set", "holdout_retrieval_set", "pairs_retrieval_set",
           "rerank_ndcg", "retrieval_ndcg", "top_run"]


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


@dataclass
class RetrievalSet:
    """Development queries (id -> text), the corpus they are searched in, their qrels and the LENS instruction."""

    name: str
    docs: list[Document]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    instruction: str | None
    source: str  # where it came from, for a report


def holdout_retrieval_set(beir_dir: str | os.PathLike, fraction: float = 0.2, split: str = "train",
                          name: str | None = None) -> RetrievalSet:
    """The queries of ``split`` that ``holdout_queries(qids, fraction)`` holds out of training (those with a judged
    positive), against the whole corpus."""
    from lens.instructions import get_instruction
    from lens.train.data import holdout_queries

    if split == "test":
        raise ValueError("a development judge never reads a test split; use the train split's held-out queries")
    corpus, queries, qrels = load_beir(beir_dir, split)
    base = os.path.basename(os.path.normpath(beir_dir))
    held = holdout_queries(sorted(q for q in qrels if any(g > 0 for g in qrels[q].values())), fraction)
    if not held:
        raise ValueError(f"{beir_dir}: no {split} query is held out at fraction {fraction}")
    return RetrievalSet(name or f"{base}-heldout", corpus, {q: queries[q] for q in held}, {q: qrels[q] for q in held},
                        get_instruction(base), f"{base} {split} queries held out of training (fraction {fraction}), "
                        "whole corpus")


def pairs_retrieval_set(path: str | os.PathLike, max_queries: int | None = None,
                        name: str | None = None) -> RetrievalSet:
    """Training-format pairs (``query``, ``positive``, ``negative`` or ``negatives``) as a retrieval set: each row a
    query whose positive is relevant; the corpus is every distinct positive and negative text."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} not found: run `make train-data-mixture` first (it writes mixture-val/)")
    rows = [r for _, r in read_jsonl(path)][:max_queries]
    ids: dict[str, str] = {}  # text -> doc id, first come

    def doc_id(text: str) -> str:
        return ids.setdefault(text, f"p{len(ids)}")

    queries, qrels, instruction = {}, {}, None
    for i, r in enumerate(rows):
        queries[f"q{i}"] = r["query"]
        qrels[f"q{i}"] = {doc_id(r["positive"]): 1}
        for n in r.get("negatives") or ([r["negative"]] if r.get("negative") else []):
            doc_id(n)
        instruction = instruction or r.get("instruction")
    base = os.path.basename(path).split(".")[0]
    return RetrievalSet(name or f"{base}-val", [Document(i, t) for t, i in ids.items()], queries, qrels, instruction,
                        f"{os.path.basename(path)}: {len(rows)} held-out queries; corpus = their positives and "
                        "negatives")


def top_run(scores: np.ndarray, query_ids: list[str], doc_ids: list[str], k: int = 1000) -> dict[str, dict[str, float]]:
    """Each query's top ``k`` documents (rows of ``scores``: queries x documents) as a run."""
    k = min(k, scores.shape[1])
    top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    return {q: {doc_ids[j]: float(scores[i, j]) for j in top[i]} for i, q in enumerate(query_ids)}


def retrieval_ndcg(rs: RetrievalSet, scores: np.ndarray, k: int = 1000) -> float:
    """nDCG@10 of full retrieval: ``scores`` has a row per query of ``rs.queries`` (in order), a column per
    document of ``rs.docs``."""
    if scores.shape != (len(rs.queries), len(rs.docs)):
        raise ValueError(f"expected scores of shape ({len(rs.queries)}, {len(rs.docs)}), got {scores.shape}")
    run = top_run(scores, list(rs.queries), [d.id for d in rs.docs], k)
    return evaluate(rs.qrels, run, ("ndcg@10",)).mean["ndcg@10"]
