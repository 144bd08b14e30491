"""Pseudo-relevance feedback (Rocchio) on the LENS lexicon and hybrid, against BM25 with RM3, on the suite (issue 39).

    python benchmarks/feedback.py --sets adi,cranfield,medline --fb-docs 3,5,10 --betas 0.25,0.5,1 --threads 2

A query-time lever that needs no training: search, take the top ``n`` documents as relevant, move the query toward
their mean vector, search again. On the cached vectors of the suite's runs (``--quantize int8`` by default, the
suite's setting), every document scored exactly, queries weighed by the corpus's idf as an index searches them
(``lens search --idf``, the default of a built index):

* lexicon: q' = unit(q + beta * unit(idf * mean of the top n documents' lexicons)), the first pass the lexicon's;
* hybrid: the same on both parts (the dense part without idf), the first pass the hybrid's (0.5 / 0.5 cosines, as
  lens-hybrid), and the second pass the hybrid of the two moved queries;
* BM25 with RM3, the classic feedback baseline that the lexicon's feedback has to be judged against (Anserini's
  defaults: 10 feedback documents, 10 expansion terms, the original query at weight 0.5; the relevance model from
  each feedback document's term frequencies weighed by its normalised BM25 score), every term scored by the same
  bm25s index as ``bm25``.

One run each, no paired test. Writes ``benchmarks/results/feedback.json`` and ``.md``.
"""

from __future__ import annotations

import sys
from collections import Counter

import numpy as np
from _common import (RESULTS, add_suite_study_arguments, idf_lexicons, run_suite_study, set_label,
                     study_set_data)
from lens.cli_args import Parser

OUT = RESULTS / "feedback"
DEPTH = 100  # hits kept per query


def _ndcg(qrels, scores, qids, ids) -> float:
    from lens.eval.dev import top_run
    from lens.metrics import evaluate

    return evaluate(qrels, top_run(scores, qids, ids, k=DEPTH), ("ndcg@10",)).mean["ndcg@10"]


def _top(scores: np.ndarray, n: int) -> np.ndarray:
    """Each row's ``n`` best columns (ties by column order)."""
    return np.argsort(-scores, axis=1, kind="stable")[:, :n]


def rocchio(queries: np.ndarray, docs: np.ndarray, top: np.ndarray, beta: float,
            weights: np.ndarray | None = None) -> np.ndarray:
    """unit(q + beta * unit(weights * mean of each query's ``top`` documents)): Rocchio's positive term with
    unit parts (``weights``: the corpus's idf on the lexicon; None on the dense part)."""
    from index.vectors import l2_normalize

    centroid = docs[top].mean(axis=1)
    if weights is not None:
        centroid = centroid * weights
    return l2_normalize(queries + beta * l2_normalize(centroid))


def rm3_scores(bm25, query_terms: list[list[str]], doc_terms: list[list[str]], fb_docs: int = 10,
               fb_terms: int = 10, original_weight: float = 0.5) -> np.ndarray:
    """BM25 with RM3 feedback, every document scored: the first pass's top ``fb_docs`` documents give the relevance
    model P(t|R) = sum_d P(t|d) P(d|q) (P(t|d): term frequency over length; P(d|q): the document's BM25 score over
    the feedback documents' sum); its ``fb_terms`` best terms, normalised, are mixed with the query's own term
    frequencies (``original_weight``) and every term is scored by ``bm25`` and summed with its weight."""
    out = np.zeros((len(query_terms), bm25.size), np.float32)
    term_scores: dict[str, np.ndarray] = {}

    def score(t: str) -> np.ndarray:
        if t not in term_scores:
            term_scores[t] = bm25.scores([t])
        return term_scores[t]

    for i, terms in enumerate(query_terms):
        if not terms:
            continue
        first = sum(score(t) for t in terms)
        top = np.argsort(-first, kind="stable")[:fb_docs]
        top = top[first[top] > 0]
        if not len(top):
            out[i] = first
            continue
        p_doc = first[top] / first[top].sum()
        model: Counter = Counter()
        for d, p in zip(top, p_doc):
            counts, length = Counter(doc_terms[d]), max(len(doc_terms[d]), 1)
            for t, c in counts.items():
                model[t] += p * c / length
        expansion = dict(model.most_common(fb_terms))
        total = sum(expansion.values())
        original = Counter(terms)
        weights = {t: original_weight * c / len(terms) for t, c in original.items()}
        for t, w in expansion.items():
            weights[t] = weights.get(t, 0.0) + (1 - original_weight) * w / total
        out[i] = sum(w * score(t) for t, w in weights.items())
    return out


def study_set(name: str, args, resources) -> dict:
    from lens.bm25 import BM25Index, tokenize

    data, ids, texts, qids, qtexts, lens = study_set_data(name, args, resources)
    docs, idf, queries = idf_lexicons(data, texts, qtexts, lens)
    dense_d = resources.minilm.documents(texts).arrays["vectors"]
    dense_q = resources.minilm.encoder.encode(qtexts, batch_size=32, show_progress_bar=False)
    bm25 = BM25Index(texts)
    q_terms, d_terms = tokenize(qtexts), tokenize(texts)
    bm25_first = np.stack([bm25.scores(t) for t in q_terms])
    lex = queries @ docs.T
    hybrid = 0.5 * lex + 0.5 * (dense_q @ dense_d.T)

    def minmax(s: np.ndarray) -> np.ndarray:
        lo, hi = s.min(axis=1, keepdims=True), s.max(axis=1, keepdims=True)
        return (s - lo) / np.maximum(hi - lo, 1e-12)

    label = set_label(name, data.name)
    row = {"set": label, "documents": len(ids), "queries": len(qids),
           "bm25": _ndcg(data.qrels, bm25_first, qids, ids),
           "bm25+rm3": _ndcg(data.qrels, rm3_scores(bm25, q_terms, d_terms), qids, ids),
           "bm25+minilm": _ndcg(data.qrels, 0.5 * minmax(bm25_first) + 0.5 * minmax(dense_q @ dense_d.T), qids, ids),
           "lexicon": _ndcg(data.qrels, lex, qids, ids), "hybrid": _ndcg(data.qrels, hybrid, qids, ids),
           "feedback": []}
    for n in args.fb_docs:
        lex_top, hyb_top = _top(lex, n), _top(hybrid, n)
        for beta in args.betas:
            q_lex = rocchio(queries, docs, lex_top, beta, idf)
            h_lex, h_dense = rocchio(queries, docs, hyb_top, beta, idf), rocchio(dense_q, dense_d, hyb_top, beta)
            got = {"fb_docs": n, "beta": beta,
                   "lexicon": _ndcg(data.qrels, q_lex @ docs.T, qids, ids),
                   "hybrid": _ndcg(data.qrels, 0.5 * (h_lex @ docs.T) + 0.5 * (h_dense @ dense_d.T), qids, ids)}
            row["feedback"].append(got)
            print(f"{label} {got}", flush=True)
    return row


def render(meta: dict) -> list[str]:
    lines = ["# Pseudo-relevance feedback on the lexicon and the hybrid, against BM25 with RM3", "",
             f"Command: `{meta['command']}`", "",
             f"Model: `{meta['model']}`, {meta['quantize'] or 'float32'}; nDCG@10 on the test qrels, every document "
             "scored exactly; LENS queries weighed by the corpus's idf (as a built index searches). lexicon / hybrid "
             "with feedback: Rocchio, the top n documents of the lexicon's (hybrid's) first pass, beta the weight of "
             "their unit centroid (the hybrid moves both parts). bm25+rm3: Anserini's defaults (10 documents, 10 "
             "terms, original weight 0.5). One run, no paired test.", "",
             "| set | n | beta | lexicon | lexicon + feedback | hybrid | hybrid + feedback | bm25 | bm25+rm3 | "
             "bm25+minilm |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in meta["rows"]:
        for f in r["feedback"]:
            lines.append(f"| {r['set']} | {f['fb_docs']} | {f['beta']} | {r['lexicon']:.3f} | {f['lexicon']:.3f} | "
                         f"{r['hybrid']:.3f} | {f['hybrid']:.3f} | {r['bm25']:.3f} | {r['bm25+rm3']:.3f} | "
                         f"{r['bm25+minilm']:.3f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    floats = lambda s: [float(x) for x in s.split(",")]  # noqa: E731
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--fb-docs", default="3,5,10", type=lambda s: [int(x) for x in s.split(",")],
                   help="feedback documents n (the first pass's top n)")
    p.add_argument("--betas", default="0.25,0.5,1", type=floats, help="weights of the feedback centroid")
    add_suite_study_arguments(p, OUT)
    args = p.parse_args(argv)
    if min(args.fb_docs) < 1 or min(args.betas) < 0:
        p.error("--fb-docs must be at least 1 and --betas at least 0")
    return run_suite_study(args, argv, "benchmarks/feedback.py", study_set, render)


if __name__ == "__main__":
    sys.exit(main())
