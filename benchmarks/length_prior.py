"""A document-length prior on the LENS lexicon (pivoted length normalisation), swept on the suite (issue 39).

    python benchmarks/length_prior.py --sets adi,cranfield,medline --gammas 0,0.1,0.2,0.3,0.5 --threads 2

Cosine scores divide each document's lexicon by its norm, which grows with its length (more positions, more clusters
above zero), so long documents lose against short ones whatever they hold; BM25 softens its length normalisation
(b = 0.75) and Singhal et al.'s pivoted normalisation exists for the same reason in the vector-space model. A
search-time lever that needs no training: multiply each document's lexicon score by ``(L_d / mean L)^gamma``, with
``L_d`` its length in BM25 terms (``lens.bm25.tokenize``: what BM25 normalises by). On the cached vectors of the
suite's runs (``--quantize int8`` by default), every document scored exactly, queries weighed by the corpus's idf as
an index searches them. Per set and gamma: nDCG@10 of the lexicon, of the hybrid with MiniLM (the prior on its
lexicon part) and of the index's three-part score (the hybrid plus BM25 at 0.1 over its maximum, as ``lens search``
on a built index); each against gamma 0 paired per query (``lens.metrics.paired_test``).

Writes ``benchmarks/results/length_prior.json`` and ``.md``.
"""

from __future__ import annotations

import sys

import numpy as np
from _common import (RESULTS, add_suite_study_arguments, idf_lexicons, run_suite_study, set_label,
                     study_set_data)
from lens.cli_args import Parser

OUT = RESULTS / "length_prior"
SEARCHES = ("lexicon", "hybrid", "index")


def _per_query(qrels, scores: np.ndarray, qids, ids) -> dict[str, float]:
    from lens.eval.dev import top_run
    from lens.metrics import evaluate

    run = top_run(scores, qids, ids, 100)
    return {q: v["ndcg@10"] for q, v in evaluate(qrels, run, ("ndcg@10",)).per_query.items()}


def study_set(name: str, args, resources) -> dict:
    from index.bm25_fusion import DEFAULT_BM25_WEIGHT
    from lens.bm25 import BM25Index, tokenize
    from lens.metrics import paired_test

    data, ids, texts, qids, qtexts, lens = study_set_data(name, args, resources)
    docs, idf, queries = idf_lexicons(data, texts, qtexts, lens)
    dense = (resources.minilm.encoder.encode(qtexts, batch_size=32, show_progress_bar=False)
             @ resources.minilm.documents(texts).arrays["vectors"].T)
    bm25 = BM25Index(texts)
    bm = np.stack([bm25.scores(t) for t in tokenize(qtexts)]).astype(np.float64)
    bm_norm = bm / np.maximum(bm.max(axis=1, keepdims=True), 1e-12)
    lengths = np.array([max(len(t), 1) for t in tokenize(texts)], dtype=np.float64)
    lex = queries @ docs.T
    label = set_label(name, data.name)
    row = {"set": label, "documents": len(ids), "queries": len(qids), "mean_length": float(lengths.mean()),
           "gammas": []}
    base = None
    for gamma in args.gammas:
        prior = (lengths / lengths.mean()) ** gamma
        lex_g = lex * prior
        hybrid = 0.5 * lex_g + 0.5 * dense
        scored = {"lexicon": lex_g, "hybrid": hybrid, "index": hybrid + DEFAULT_BM25_WEIGHT * bm_norm}
        per = {s: _per_query(data.qrels, scored[s], qids, ids) for s in SEARCHES}
        got = {"gamma": gamma, **{s: float(np.mean(list(per[s].values()))) for s in SEARCHES}}
        if base is None:
            base = per
        else:
            for s in SEARCHES:
                t = paired_test([per[s][q] for q in base[s]], [base[s][q] for q in base[s]])
                got[f"{s}_vs_0"] = {"diff": t.diff, "wins": t.wins, "losses": t.losses,
                                    "p_randomization": t.p_randomization}
        row["gammas"].append(got)
        print(f"{label} {got}", flush=True)
    return row


def render(meta: dict) -> list[str]:
    lines = ["# A document-length prior on the lexicon, on the suite", "", f"Command: `{meta['command']}`", "",
             f"Model: `{meta['model']}`, {meta['quantize'] or 'float32'}; nDCG@10 on the test qrels, every document "
             "scored exactly; queries weighed by the corpus's idf. Lexicon score x (L_d / mean L)^gamma, L_d the "
             "document's BM25 terms; hybrid: 0.5 that + 0.5 MiniLM cosine; index: the hybrid + 0.1 BM25 / max (a "
             "built index's default search). In brackets: against gamma 0, paired per query (difference, queries "
             "better / worse, p of the randomization test). One run.", "",
             "| set | mean L | gamma | lexicon | hybrid | index |", "|---|---|---|---|---|---|"]

    def cell(g, s):
        t = g.get(f"{s}_vs_0")
        extra = f" ({t['diff']:+.3f}, {t['wins']}/{t['losses']}, p {t['p_randomization']:.2g})" if t else ""
        return f"{g[s]:.3f}{extra}"

    for r in meta["rows"]:
        for g in r["gammas"]:
            lines.append(f"| {r['set']} | {r['mean_length']:.0f} | {g['gamma']} | " +
                         " | ".join(cell(g, s) for s in SEARCHES) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--gammas", default="0,0.1,0.2,0.3,0.5", type=lambda s: [float(x) for x in s.split(",")])
    add_suite_study_arguments(p, OUT)
    args = p.parse_args(argv)
    if args.gammas[0] != 0:
        p.error("--gammas must start with 0 (the baseline every other gamma is paired against)")
    return run_suite_study(args, argv, "benchmarks/length_prior.py", study_set, render)


if __name__ == "__main__":
    sys.exit(main())
