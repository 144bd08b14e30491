"""The own-token floor (LensConfig.term_floor, lens.pooling.term_floor) swept on the development suite (issue 39).

    python benchmarks/term_floor.py --sets adi,cranfield,medline --floors 0,0.1,0.2,0.3,0.5 --threads 2

A floor f gives each cluster of a text's own tokens at least f x the vector's heaviest weight (merged by max, so
expansion stays). It commutes with L2 normalisation, so it is applied here to the cached unit vectors of the
`lens bench beir` run of the same model (`--quantize int8` by default: the suite's setting; documents are read from
the cache and encoded only if absent), exactly as the encoder applies it to the pooled weights. Per set and floor:
nDCG@10 of the lexicon, of the lexicon with the query's own clusters removed (expansion only), the own-token share
of the queries' weight (`index.vectors.mass_share`, as `lens bench lexicality`), the hybrid with MiniLM (0.5/0.5 on
cosines, as lens-hybrid) and that hybrid fused with BM25 (min-max 0.5/0.5, as lens-hybrid+bm25); BM25 and
bm25+minilm beside them. No training: what the rule alone does to the shipped model.

`--sides queries` floors the queries alone (documents as the model pools them), a rule an index could apply at
query time without re-encoding its corpus; `--sides documents` floors the documents alone (queries as the model
pools them), which keeps a misspelt query word's clusters where the model put them.

`--idf` then weighs every query's lexicon by its clusters' BM25 idf over the set's documents (`lens search --idf`:
`index.vectors.cluster_idf` of the stored, floored vectors' non-zero clusters), in the product's order: the encoder
floors both sides, the index weighs the query; so the same table reads for an index searched that way.
"""

from __future__ import annotations

import sys

import numpy as np
from _common import RESULTS, add_suite_study_arguments, run_suite_study, set_label, study_set_data
from lens.cli_args import Parser

OUT = RESULTS / "term_floor"
DEPTH = 100


def _ndcg(qrels, run) -> float:
    from lens.metrics import evaluate

    return evaluate(qrels, run, ("ndcg@10",)).mean["ndcg@10"]


def _paired(qrels, run_a, run_b) -> dict[str, float]:
    """Run a against run b over the same queries (``lens.metrics.paired_test`` of their nDCG@10 per query)."""
    from lens.metrics import evaluate, paired_test

    a, b = (evaluate(qrels, r, ("ndcg@10",)).per_query for r in (run_a, run_b))
    t = paired_test([a[q]["ndcg@10"] for q in a], [b[q]["ndcg@10"] for q in a])
    return {"diff": t.diff, "wins": t.wins, "losses": t.losses, "p_ttest": t.p_ttest,
            "p_randomization": t.p_randomization}


def _fuse(runs, method: str = "minmax") -> dict[str, dict[str, float]]:
    from index.fusion import get_fusion

    fuse = get_fusion(method)
    out = {}
    for q in runs[0]:
        got_ids, scores = fuse([r[q] for r in runs], weights=[0.5, 0.5], limit=DEPTH)
        out[q] = {i: float(s) for i, s in zip(got_ids, scores)}
    return out


def study_set(name: str, args, resources) -> dict:
    from index.vectors import cluster_idf, l2_normalize, mass_share, support_mask
    from lens.bm25 import BM25Index, tokenize
    from lens.eval.dev import top_run
    from lens.inputs import encode_texts, text_ids
    from lens.instructions import lookup
    from lens.pooling import term_floor

    data, ids, texts, qids, qtexts, lens = study_set_data(name, args, resources)
    instruction = lookup(data.name).text
    docs = lens.documents(texts).arrays["lexicon"]
    enc = lens.encoder
    rule = enc.config.text_normalization

    def own(batch: list[str]) -> list[np.ndarray]:
        return [enc.assignment[np.asarray(text_ids(it), dtype=np.int64)]
                for it in encode_texts(enc.tokenizer, batch, enc.max_seq_length, normalization=rule)]

    doc_own, q_own = own(texts), own(qtexts)
    queries = enc.encode_queries(qtexts, instruction=instruction, batch_size=16, show_progress_bar=False)
    dense = getattr(resources, args.dense)  # the index's dense part: MiniLM (the default) or mpnet (--dense mpnet)
    dense_d = dense.documents(texts).arrays["vectors"]
    dense_q = dense.encoder.encode(qtexts, batch_size=32, show_progress_bar=False)
    dense_run = top_run(dense_q @ dense_d.T, qids, ids, k=DEPTH)
    bm25 = BM25Index(texts)
    # every document's BM25 over the query's max: the BM25 part of a saved index (index.bm25_fusion), exact here
    bm25_all = np.stack([bm25.scores(t) for t in tokenize(qtexts)])
    bm25_max = bm25_all / np.maximum(bm25_all.max(axis=1, keepdims=True), 1e-12)
    bm25_run = {}
    for q, (rows, scores) in zip(qids, bm25.search(qtexts, DEPTH)):
        bm25_run[q] = {ids[int(r)]: float(s) for r, s in zip(rows, scores)}
    label = set_label(name, data.name)
    row = {"set": label, "documents": len(ids), "queries": len(qids), "bm25": _ndcg(data.qrels, bm25_run),
           "dense": _ndcg(data.qrels, dense_run), "bm25+dense": _ndcg(data.qrels, _fuse([bm25_run, dense_run])),
           "floors": {}}
    q_mask = support_mask([np.asarray(c)[np.asarray(c) >= 0] for c in q_own], docs.shape[1])
    first_index_runs = None  # the first floor's index runs: each later floor's are paired against them
    for f in args.floors:
        d = l2_normalize(term_floor(docs, doc_own, f)) if f > 0 and args.sides != "queries" else docs
        q = l2_normalize(term_floor(queries, q_own, f)) if f > 0 and args.sides != "documents" else queries
        if args.idf:  # as HybridIndex.search(idf=True) over the floored documents the index stores: the (floored)
            # query's weights times the corpus's idf, then normalised
            q = l2_normalize(q * cluster_idf((d > 0).sum(axis=0), d.shape[0]))
        lex = q @ d.T
        lex_run = top_run(lex, qids, ids, k=DEPTH)
        expansion = np.where(q_mask, 0.0, q).astype(np.float32) @ d.T
        hybrid = 0.5 * lex + 0.5 * (dense_q @ dense_d.T)
        hybrid_run = top_run(hybrid, qids, ids, k=DEPTH)
        # a saved index's three parts: 0.5 cos_lex + 0.5 cos_dense + w BM25/max (lens search --weights 0.5,0.5,w)
        index_runs = {str(w): top_run(hybrid + w * bm25_max, qids, ids, k=DEPTH) for w in args.bm25_weights}
        row["floors"][str(f)] = {
            "lexicon": _ndcg(data.qrels, lex_run),
            "expansion_only": _ndcg(data.qrels, top_run(expansion, qids, ids, k=DEPTH)),
            "query_own_share": float(np.nanmean(mass_share(q, q_mask))),
            "hybrid": _ndcg(data.qrels, hybrid_run),
            "hybrid+bm25": _ndcg(data.qrels, _fuse([hybrid_run, bm25_run])),
            "index_bm25": {w: _ndcg(data.qrels, run) for w, run in index_runs.items()},
            # the index's BM25 part against the hybrid without it, query by query
            "index_bm25_vs_hybrid": {w: _paired(data.qrels, run, hybrid_run) for w, run in index_runs.items()},
        }
        if first_index_runs is None:
            first_index_runs = index_runs
        else:  # the index's search with this floor against the first floor's, query by query
            row["floors"][str(f)]["index_vs_first_floor"] = {
                w: _paired(data.qrels, run, first_index_runs[w]) for w, run in index_runs.items()}
        print(f"{data.name} floor {f}: {row['floors'][str(f)]}", flush=True)
    return row


def _p(p: float) -> str:
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def _paired_table(meta: dict, key: str, what: str, column: str) -> list[str]:
    """The paired tests stored under ``key`` of each set and floor, one column per BM25 weight (none: no lines)."""
    cells = [(r, f, m[key]) for r in meta["rows"] for f, m in r["floors"].items() if key in m]
    if not cells:
        return []
    lines = ["", f"{what}, paired over the same queries (`lens.metrics.paired_test`): nDCG@10 difference, queries "
             "better / worse, p of the randomization and t tests.", "",
             "| set | floor | " + " | ".join(column.format(w=w) for w in meta["bm25_weights"]) + " |",
             "|---|---|" + "---|" * len(meta["bm25_weights"])]
    for r, f, tests in cells:
        lines.append(f"| {r['set']} | {f} | " + " | ".join(
            f"{c['diff']:+.3f} ({c['wins']}/{c['losses']}; p {_p(c['p_randomization'])} / {_p(c['p_ttest'])})"
            for c in (tests[str(w)] for w in meta["bm25_weights"])) + " |")
    return lines


def render(meta: dict) -> list[str]:
    dense = meta.get("dense", "minilm")
    idf = " Queries weighed by the corpus's idf (`--idf`, as `lens search --idf`)." if meta.get("idf") else ""
    if meta.get("sides", "both") == "queries":
        idf += " The floor on queries alone (`--sides queries`): documents as the model pools them."
    elif meta.get("sides", "both") == "documents":
        idf += " The floor on documents alone (`--sides documents`): queries as the model pools them."
    lines = ["# Own-token floor (`term_floor`), untrained, on the development suite", "",
             f"Command: `{meta['command']}`", "", f"Model: `{meta['model']}`, {meta['quantize'] or 'float32'}; "
             f"nDCG@10 on the test qrels; share = mean share of a query's lexicon weight on its own tokens' clusters.{idf}",
             f"Dense part: {dense}. hybrid: 0.5 cos_lex + 0.5 cos_dense (lens-hybrid); hybrid+bm25: its min-max fusion with BM25 "
             "(lens-hybrid+bm25); index +BM25 w: a saved index's three-part score with BM25 weight w "
             "(0.5 cos_lex + 0.5 cos_dense + w BM25/max over the corpus).", "",
             "| set | floor | lexicon | expansion only | query own share | hybrid | hybrid+bm25 | "
             + " | ".join(f"index +BM25 {w}" for w in meta["bm25_weights"]) + f" | bm25 | {dense} | bm25+{dense} |",
             "|---|---|---|---|---|---|---|" + "---|" * len(meta["bm25_weights"]) + "---|---|---|"]
    for r in meta["rows"]:
        for f, m in r["floors"].items():
            idx = " | ".join(f"{m['index_bm25'][str(w)]:.3f}" for w in meta["bm25_weights"])
            lines.append(f"| {r['set']} | {f} | {m['lexicon']:.3f} | {m['expansion_only']:.3f} | "
                         f"{m['query_own_share']:.3f} | {m['hybrid']:.3f} | {m['hybrid+bm25']:.3f} | {idx} | "
                         f"{r['bm25']:.3f} | {r['dense']:.3f} | {r['bm25+dense']:.3f} |")
    first = next(iter(meta["rows"][0]["floors"])) if meta["rows"] else "0"
    lines += _paired_table(meta, "index_bm25_vs_hybrid", "The index's BM25 part against the hybrid without it",
                           "+BM25 {w} vs hybrid")  # runs written before the paired tests were added have none
    lines += _paired_table(meta, "index_vs_first_floor", f"The index's three-part score with each floor against "
                           f"floor {first}", "index +BM25 {w} vs floor " + first)
    return lines


def main(argv: list[str] | None = None) -> int:
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--floors", default="0,0.1,0.2,0.3,0.5", type=lambda s: [float(x) for x in s.split(",")])
    p.add_argument("--bm25-weights", default="0.25,0.5,1", type=lambda s: [float(x) for x in s.split(",")],
                   help="BM25 weights w of the index's three-part score 0.5 cos_lex + 0.5 cos_dense + w BM25/max")
    p.add_argument("--dense", default="minilm", choices=["minilm", "mpnet"],
                   help="the dense part of the hybrid and of the index (mpnet: `make peers`, as lens index build "
                        "--dense mpnet)")
    p.add_argument("--idf", action="store_true",
                   help="weigh each query's lexicon by the corpus's idf of its clusters (lens search --idf)")
    p.add_argument("--sides", default="both", choices=["both", "queries", "documents"],
                   help="floor queries and documents (both: as the encoder applies LensConfig.term_floor), or one "
                        "side alone, the other as the model pools it")
    add_suite_study_arguments(p, OUT)
    args = p.parse_args(argv)
    return run_suite_study(args, argv, "benchmarks/term_floor.py", study_set, render, dense=args.dense,
                           idf=args.idf, bm25_weights=args.bm25_weights, sides=args.sides)


if __name__ == "__main__":
    sys.exit(main())
