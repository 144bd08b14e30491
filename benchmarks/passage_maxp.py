"""Documents indexed whole or as passages ranked by their best one (MaxP), on the suite (issue 39).

    python benchmarks/passage_maxp.py --sets adi,cranfield,medline --words 100 --overlap 20 --threads 2

The shipped default reads 256 tokens of a text and cuts 28-29% of Cranfield's and MEDLINE's documents
(``benchmarks/results/passage_length.md``); a cut document is matched on its beginning alone. Here each set is
searched twice, every document (or passage) scored exactly, over the cached vectors of the suite's runs (``--quantize
int8`` by default): as its documents, and as the passages ``lens data passages`` makes of them (``lens.corpus
.split_passages``), a document scored by its best passage (``lens search --collapse document``). Per search: the
lexicon with queries weighed by the corpus's idf (the passages' idf for the passages), the hybrid with MiniLM
(0.5 / 0.5), the index's default search (the hybrid + 0.1 x BM25 over its maximum, BM25 over the same units) and
BM25 alone; the passages' nDCG@10 paired per query with the documents' (``lens.metrics.paired_test``).

Writes ``benchmarks/results/passage_maxp.json`` and ``.md``.
"""

from __future__ import annotations

import sys

import numpy as np
from _common import (RESULTS, add_suite_study_arguments, idf_lexicons, run_suite_study, set_label,
                     study_set_data)
from lens.cli_args import Parser

OUT = RESULTS / "passage_maxp"
SEARCHES = ("lexicon", "hybrid", "index", "bm25")


def _per_query(qrels, scores: np.ndarray, qids, ids) -> dict[str, float]:
    from lens.eval.dev import top_run
    from lens.metrics import evaluate

    run = top_run(scores, qids, ids, 100)
    return {q: v["ndcg@10"] for q, v in evaluate(qrels, run, ("ndcg@10",)).per_query.items()}


def searches(data, texts: list[str], qtexts: list[str], lens, minilm) -> dict[str, np.ndarray]:
    """The (queries x texts) scores of each search over ``texts`` (documents or passages), as an index of them
    scores: the lexicon weighed by their idf, the hybrid, the hybrid + BM25 at the default weight, BM25."""
    from index.bm25_fusion import DEFAULT_BM25_WEIGHT
    from lens.bm25 import BM25Index, tokenize

    docs, _, queries = idf_lexicons(data, texts, qtexts, lens)
    lex = queries @ docs.T
    dense = minilm.encoder.encode(qtexts, batch_size=32, show_progress_bar=False) @ minilm.documents(
        texts).arrays["vectors"].T
    bm25 = BM25Index(texts)
    bm = np.stack([bm25.scores(t) for t in tokenize(qtexts)]).astype(np.float64)
    hybrid = 0.5 * lex + 0.5 * dense
    return {"lexicon": lex, "hybrid": hybrid,
            "index": hybrid + DEFAULT_BM25_WEIGHT * bm / np.maximum(bm.max(axis=1, keepdims=True), 1e-12),
            "bm25": bm}


def max_per_document(scores: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Each document's best passage score: the max over each run of columns starting at ``starts`` (a document's
    passages are consecutive)."""
    return np.maximum.reduceat(scores, starts, axis=1)


def study_set(name: str, args, resources) -> dict:
    from lens.corpus import split_passages
    from lens.metrics import paired_test

    data, ids, texts, qids, qtexts, lens = study_set_data(name, args, resources)
    passages = [split_passages(d, args.words, args.overlap) for d in data.docs]
    starts = np.cumsum([0] + [len(p) for p in passages[:-1]])
    ptexts = [p.full_text for ps in passages for p in ps]
    whole = searches(data, texts, qtexts, lens, resources.minilm)
    parts = searches(data, ptexts, qtexts, lens, resources.minilm)
    label = set_label(name, data.name)
    row = {"set": label, "documents": len(ids), "passages": len(ptexts),
           "split": int(sum(len(p) > 1 for p in passages)), "queries": len(qids), "searches": {}}
    for s in SEARCHES:
        a = _per_query(data.qrels, whole[s], qids, ids)
        b = _per_query(data.qrels, max_per_document(parts[s], starts), qids, ids)
        t = paired_test([b[q] for q in a], [a[q] for q in a])
        row["searches"][s] = {"documents": float(np.mean(list(a.values()))),
                              "passages": float(np.mean(list(b.values()))),
                              "diff": t.diff, "wins": t.wins, "losses": t.losses,
                              "p_randomization": t.p_randomization, "p_ttest": t.p_ttest}
        print(f"{label} {s} {row['searches'][s]}", flush=True)
    return row


def render(meta: dict) -> list[str]:
    lines = ["# Documents whole or as passages (MaxP), on the suite", "", f"Command: `{meta['command']}`", "",
             f"Model: `{meta['model']}`, {meta['quantize'] or 'float32'}; passages of {meta['words']} words, "
             f"{meta['overlap']} shared (`lens data passages`), a document scored by its best passage; nDCG@10 on "
             "the test qrels, every document or passage scored exactly. lexicon: queries weighed by the idf of the "
             "units searched; hybrid: 0.5 lexicon + 0.5 MiniLM cosine; index: the hybrid + 0.1 BM25 / max (a built "
             "index's default search); bm25: BM25 alone over the same units. Cells: documents -> passages "
             "(difference, queries better / worse, p of the randomization test). One run.", "",
             "| set | documents | passages (documents split) | " + " | ".join(SEARCHES) + " |",
             "|---|---|---|" + "---|" * len(SEARCHES)]
    for r in meta["rows"]:
        cells = [f"{c['documents']:.3f} -> {c['passages']:.3f} ({c['diff']:+.3f}, {c['wins']}/{c['losses']}, "
                 f"p {c['p_randomization']:.2g})" for c in (r["searches"][s] for s in SEARCHES)]
        lines.append(f"| {r['set']} | {r['documents']} | {r['passages']} ({r['split']}) | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--words", type=int, default=100, help="words per passage (default 100, lens data passages')")
    p.add_argument("--overlap", type=int, default=20, help="words shared by neighbouring passages (default 20)")
    add_suite_study_arguments(p, OUT)
    args = p.parse_args(argv)
    return run_suite_study(args, argv, "benchmarks/passage_maxp.py", study_set, render, words=args.words,
                           overlap=args.overlap)


if __name__ == "__main__":
    sys.exit(main())
