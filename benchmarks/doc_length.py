"""How long should a document be when LENS encodes it? A development study of ``max_seq_length`` (issue 10).

The shipped default encodes at most 256 tokens (``max_length`` in its config.json; it trained on 128-token
documents), which cuts about two thirds of SciFact's abstracts. Each length here encodes the whole SciFact corpus again
and is judged by nDCG@10 of full retrieval (top 1000) for the SciFact *train* queries held out of training
(``lens.eval.dev.holdout_retrieval_set``; no test split is read): the lexicon, the model's own dense vector, and the
hybrid with MiniLM at equal weights (MiniLM stays at its own 256-token limit). Document vectors go through the
benchmark cache (``.cache/lens-bench``; the length is part of its key), so the shipped length is free after a
``lens bench beir`` run on SciFact, and an interrupted run resumes.

    python benchmarks/doc_length.py --lengths 256,512 --threads 2
"""

from __future__ import annotations

import json
import logging
import sys
import time

import numpy as np
from _common import add_dev_study_arguments, data_dir, dev_study_encoders, finish, start

from index.vectors import l2_normalize
from lens.cmdline import int_list
from lens.eval.dev import RetrievalSet, holdout_retrieval_set, retrieval_ndcg
from lens.cli_args import Parser

logger = logging.getLogger("doc_length")


length_list = int_list("--lengths", minimum=16, example="256,512")  # token counts


def study(dev: RetrievalSet, lens, minilm, lengths: list[int]) -> dict:
    """One row per length: nDCG@10 of lexicon, LENS dense and hybrid; truncated documents; encode seconds."""
    texts = [d.full_text for d in dev.docs]
    qtexts = list(dev.queries.values())
    q = lens.encoder.encode_queries(qtexts, instruction=dev.instruction, output="both", batch_size=16,
                                    show_progress_bar=False)
    q_lex, q_dense = l2_normalize(q.lexicon), l2_normalize(q.dense)
    q_minilm = l2_normalize(minilm.encoder.encode(qtexts, batch_size=64, show_progress_bar=False))
    cos_minilm = q_minilm @ l2_normalize(minilm.documents(texts).arrays["vectors"]).T
    tokens = np.array([len(lens.encoder.tokenizer(t)["input_ids"]) for t in texts])
    rows = {}
    for length in lengths:
        lens.encoder.max_seq_length = length  # part of the cache's key and of the resource's memo
        t0 = time.perf_counter()
        docs = lens.documents(texts)
        seconds = time.perf_counter() - t0
        cos_lex = q_lex @ l2_normalize(docs.arrays["lexicon"]).T
        rows[str(length)] = {
            "lexicon": retrieval_ndcg(dev, cos_lex),
            "lens-dense": retrieval_ndcg(dev, q_dense @ l2_normalize(docs.arrays["dense"]).T),
            "hybrid": retrieval_ndcg(dev, 0.5 * cos_lex + 0.5 * cos_minilm),
            # a document longer than the limit once BOS/EOS are added (the encoder's own count is per call)
            "truncated": int((tokens + 2 > length).sum()),
            "encode_s": seconds if docs.encoded else None,
            "docs_per_s": docs.rate,
            "docs_per_s_source": docs.rate_source,
        }
        logger.info("max_seq_length %d: %s", length, json.dumps(rows[str(length)]))
    return {"source": dev.source, "queries": len(qtexts), "documents": len(texts),
            "minilm": retrieval_ndcg(dev, cos_minilm), "lengths": rows,
            "tokens_p50_p90_max": [float(np.percentile(tokens, 50)), float(np.percentile(tokens, 90)),
                                   int(tokens.max())]}


def render(results: dict) -> list[str]:
    meta = results["_meta"]
    lines = ["# LENS document length on development data (issue 10)", "", f"Command: `{meta['command']}`", ""]
    for name, r in results.items():
        if name.startswith("_"):
            continue
        p50, p90, top = r["tokens_p50_p90_max"]
        lines += [f"**{name}**: {r['source']}; {r['queries']} queries, {r['documents']} documents (tokens p50 "
                  f"{p50:.0f}, p90 {p90:.0f}, max {top}). nDCG@10 of full retrieval; hybrid = 0.5 LENS lexicon + "
                  f"0.5 MiniLM (MiniLM alone: {r['minilm']:.4f}).", "",
                  "| max_seq_length | lexicon | LENS dense | hybrid | documents cut | docs/s |",
                  "|---|---|---|---|---|---|"]
        for length, row in r["lengths"].items():
            rate = f"{row['docs_per_s']:.2f}" if row.get("docs_per_s") else "-"
            lines.append(f"| {length} | {row['lexicon']:.4f} | {row['lens-dense']:.4f} | {row['hybrid']:.4f} | "
                         f"{row['truncated']} | {rate} |")
        lines.append("")
    if meta.get("notes"):
        lines += ["Notes:"] + [f"- {n}" for n in meta["notes"]] + [""]
    lines += [f"docs/s: encoding the corpus at that length ({meta['machine']}; as measured when the vectors were "
              "first encoded and cached). LENS model: " + f"`{meta['model']}`" + (
                  f", {meta['quantize']} linear layers" if meta.get("quantize") else ", float32") + "."]
    return lines


def main(argv=None) -> int:
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--lengths", type=length_list, default=[256, 512], help="max_seq_length values (default 256,512)")
    p.add_argument("--quantize", default=None, help="int8: encode with int8 linear layers (faster, cached apart)")
    add_dev_study_arguments(p)
    args = start(p, argv, "doc_length", render)
    if args is None:  # --markdown-only
        return 0
    lens, minilm = dev_study_encoders(args, quantize=args.quantize)
    dev = holdout_retrieval_set(data_dir(args.data_dir) / "beir" / "scifact", args.fraction)
    results = {dev.name: study(dev, lens, minilm, args.lengths)}
    return finish(args, results, render, model=args.model, quantize=args.quantize)


if __name__ == "__main__":
    sys.exit(main())
