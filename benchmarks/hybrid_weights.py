"""Which weights should ``lens-hybrid`` use? A development study, never a test split (issue 10).

``lens-hybrid`` scores a document ``w_lex cos_lex + w_dense cos_dense`` (``index.HybridIndex``; LENS lexicon and
MiniLM dense). Only the ratio of the two weights changes a ranking, so the sweep sets ``w_dense = 1 - w_lex``. Each
weight is judged by nDCG@10 of full retrieval (top 1000) on queries that no shipped model trains on:

- ``scifact-heldout``: the SciFact *train* queries that ``lens data beir --holdout 0.2`` keeps out of the training
  mixture (``lens.train.data.holdout_queries``), against the whole corpus (SciFact's test queries are never read);
- ``squad-val``: the 2% of SQuAD queries held out of the mixture (``make train-data-mixture`` writes them to
  ``mixture-val/squad.jsonl.gz``); the corpus is every positive and same-article negative paragraph of those rows.

Their documents are not new to the model: the default trained on SciFact's other train queries against the same
corpus, and SQuAD paragraphs repeat across questions. Both sets favour the trained lexicon over MiniLM, more than
collections from other domains do; the notes in the results say what that did to the choice (``--note`` adds one).

Beside the fixed weights: ``lens balanced``, the weights ``index.vectors.balanced_weights`` takes from the corpus
(each part weighted inversely to the spread of its cosines, documents standing in for queries; ``lens index build
--weights balanced``), and ``lens z-score``, each query's own spreads over the corpus (which a build cannot know; the
upper reference of the idea). The same run scores BM25, MiniLM and the two BM25+MiniLM fusions of ``lens bench beir``
on the same queries, so a weight can be compared with the peers it must beat. Document vectors come from the cache
(``.cache/lens-bench``), so a corpus that ``lens bench beir`` encoded before costs nothing here.

    python benchmarks/hybrid_weights.py --threads 2
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
from _common import REPO as ROOT, add_dev_study_arguments, data_dir, dev_study_encoders, finish, start

from index.fusion import get_fusion
from index.vectors import balanced_weights, l2_normalize
from lens.eval.dev import RetrievalSet, holdout_retrieval_set, pairs_retrieval_set, retrieval_ndcg, top_run
from lens.metrics import evaluate
from lens.cli_args import Parser

logger = logging.getLogger("hybrid_weights")
DEFAULT_GRID = (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0)
DEPTH = 1000


def dev_sets(data_dir: Path, fraction: float, squad_val: Path, squad_queries: int | None) -> list[RetrievalSet]:
    return [holdout_retrieval_set(data_dir / "beir" / "scifact", fraction),
            pairs_retrieval_set(squad_val, squad_queries, name="squad-val")]


def study(dev: RetrievalSet, lens, minilm, grid) -> dict:
    from lens.bm25 import BM25Index

    qids = list(dev.queries)
    qtexts = [dev.queries[q] for q in qids]
    doc_ids = [d.id for d in dev.docs]
    texts = [d.full_text for d in dev.docs]
    t0 = time.perf_counter()
    d_lex = lens.documents(texts).arrays["lexicon"]
    d_dense = minilm.documents(texts).arrays["vectors"]
    q_lex = l2_normalize(lens.encoder.encode_queries(qtexts, instruction=dev.instruction, output="lexicon",
                                                     batch_size=16, show_progress_bar=False))
    q_dense = l2_normalize(minilm.encoder.encode(qtexts, batch_size=64, show_progress_bar=False))
    logger.info("%s: vectors in %.0fs", dev.name, time.perf_counter() - t0)
    cos_lex, cos_dense = q_lex @ l2_normalize(d_lex).T, q_dense @ l2_normalize(d_dense).T

    rows = {}
    bm25 = BM25Index(texts).search(qtexts, DEPTH)
    runs = {"bm25": {q: {doc_ids[int(j)]: float(s) for j, s in zip(*bm25[i])} for i, q in enumerate(qids)},
            "minilm": top_run(cos_dense, qids, doc_ids)}
    for name, method, weights in (("bm25+minilm", "minmax", [0.5, 0.5]), ("bm25+minilm-rrf", "rrf", None)):
        fuse = get_fusion(method)
        runs[name] = {}
        for q in qids:
            ids, scores = fuse([runs["bm25"][q], runs["minilm"][q]], weights=weights, limit=DEPTH)
            runs[name][q] = {i: float(s) for i, s in zip(ids, scores)}
    for name, run in runs.items():
        rows[name] = evaluate(dev.qrels, run, ("ndcg@10",)).mean["ndcg@10"]
    for w in grid:
        rows[f"lens w_lex={w:g}"] = retrieval_ndcg(dev, w * cos_lex + (1.0 - w) * cos_dense)
    w_bal = balanced_weights(d_lex, d_dense)  # what `lens index build --weights balanced` sets
    rows["lens balanced"] = retrieval_ndcg(dev, w_bal[0] * cos_lex + w_bal[1] * cos_dense)
    # Each component divided by the spread of its cosines over the corpus, per query (z-score fusion; the mean
    # shift is the same for every document of a query, so this is a query-side weight: 1 / std).
    z_lex = cos_lex / np.maximum(cos_lex.std(axis=1, keepdims=True), 1e-12)
    z_dense = cos_dense / np.maximum(cos_dense.std(axis=1, keepdims=True), 1e-12)
    for w in grid:
        if 0.0 < w < 1.0:
            rows[f"lens z-score w_lex={w:g}"] = retrieval_ndcg(dev, w * z_lex + (1.0 - w) * z_dense)
    spread = {"lexicon": float(np.mean(np.std(cos_lex, axis=1))), "dense": float(np.mean(np.std(cos_dense, axis=1)))}
    return {"source": dev.source, "queries": len(qids), "documents": len(doc_ids), "ndcg@10": rows,
            "balanced_weights": list(w_bal),
            "mean per-query std of cosines over the corpus": spread}


def render(results: dict) -> list[str]:
    sets = [s for s in results if not s.startswith("_")]
    meta = results["_meta"]
    names = list(results[sets[0]]["ndcg@10"])
    lines = ["# lens-hybrid weights on development sets (issue 10)", "",
             f"Command: `{meta['command']}`", "",
             "nDCG@10 of full retrieval (top 1000). `lens w_lex=w` scores `w cos_lex + (1 - w) cos_MiniLM` (w = 1: the "
             "lexicon alone, w = 0: MiniLM alone); `lens balanced` takes its weights from the corpus "
             "(`index.vectors.balanced_weights`, the default of `lens index build` and `lens bench beir`): "
             + ", ".join(f"{s} ({results[s]['balanced_weights'][0]:.3f}, {results[s]['balanced_weights'][1]:.3f})"
                         for s in sets)
             + "; `lens z-score w_lex=w` divides each part by the spread of that query's cosines over the corpus. "
             "The peers are `lens bench beir`'s systems on the same queries. No test split is read.", "",
             "| system | " + " | ".join(sets) + " | mean |", "|---|" + "---|" * (len(sets) + 1)]
    for n in names:
        vals = [results[s]["ndcg@10"][n] for s in sets]
        lines.append(f"| {n} | " + " | ".join(f"{v:.4f}" for v in vals) + f" | {np.mean(vals):.4f} |")
    lines += ["", "Sets:"] + [f"- **{s}** ({results[s]['queries']} queries, {results[s]['documents']} documents): "
                              f"{results[s]['source']}" for s in sets]
    if meta.get("notes"):
        lines += ["", "Notes:"] + [f"- {n}" for n in meta["notes"]]
    lines += ["", "Mean over queries of the standard deviation of each cosine over the corpus (how far a weight moves "
              "a ranking): " + "; ".join(
                  f"{s}: lexicon {results[s]['mean per-query std of cosines over the corpus']['lexicon']:.4f}, "
                  f"MiniLM {results[s]['mean per-query std of cosines over the corpus']['dense']:.4f}" for s in sets),
              "", f"LENS model: `{meta['model']}`. Hardware: {meta['machine']}."]
    return lines


def main(argv=None) -> int:
    p = Parser(description=__doc__.split("\n")[0])
    add_dev_study_arguments(p)
    p.add_argument("--squad-val", type=Path, default=ROOT / ".cache" / "lens-train" / "mixture-val" / "squad.jsonl.gz")
    p.add_argument("--squad-queries", type=int, default=None, help="keep the first N SQuAD val queries")
    p.add_argument("--grid", default=",".join(f"{w:g}" for w in DEFAULT_GRID), help="w_lex values, comma-separated")
    args = start(p, argv, "hybrid_weights", render)
    if args is None:  # --markdown-only
        return 0
    grid = [float(w) for w in args.grid.split(",")]
    lens, minilm = dev_study_encoders(args)
    results = {}
    for dev in dev_sets(data_dir(args.data_dir), args.fraction, args.squad_val, args.squad_queries):
        results[dev.name] = study(dev, lens, minilm, grid)
        logger.info("%s: %s", dev.name, json.dumps(results[dev.name]["ndcg@10"]))
    return finish(args, results, render, model=args.model)


if __name__ == "__main__":
    sys.exit(main())
