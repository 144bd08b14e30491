"""How lexical is a lexicon vector? Exact match against expansion, per set (``lens bench lexicality``).

A LENS lexicon vector weighs the clusters of the text's own tokens (exact match: what BM25 scores) and other
clusters (expansion). For each set and system this measures, over the queries and the whole corpus:

- the share of a vector's weight on its own tokens' clusters (``index.vectors.mass_share``), for queries (the
  query text; its instruction is never pooled) and documents, and how many of a query's 10 heaviest clusters are
  its own;
- nDCG@10 of retrieval over the whole corpus with the query vector whole (the ``lens-lexicon`` system), cut to its
  own clusters (exact match only) and with its own clusters removed (expansion only).

``--splade`` adds SPLADE-tiny (the learned-sparse peer; its dimensions are vocabulary ids) as the reference of a
learned-sparse model trained to match terms. Document vectors come from the benchmark's embedding cache, so after a
``lens bench beir`` run of the same model this encodes only the queries.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from index.vectors import mass_share, support_mask
from lens.cmdline import command_line, positive_int
from lens.eval.report import add_markdown_only_arguments, add_result_overwrite_argument, markdown_only, write_benchmark

logger = logging.getLogger(__name__)

__all__ = ["Space", "VARIANTS", "add_arguments", "lens_space", "measure", "render", "run", "splade_space"]

VARIANTS = ("full", "exact", "expansion")  # the query vector whole, on its own clusters only, without them
TOP = 10


@dataclass
class Space:
    """One system's sparse space: how it embeds queries and documents (non-negative, one row per text) and which
    dimensions a text's own tokens are (the first ``max_tokens`` tokens, as its encoder reads them)."""

    name: str
    dim: int
    queries: Callable[[list[str], str], np.ndarray]  # (texts, instruction) -> (n, dim)
    documents: Callable[[list[str]], np.ndarray]  # texts -> (n, dim)
    token_dims: Callable[[str], np.ndarray]  # a text -> the dimensions of its tokens
    describe: str


def lens_space(resource) -> Space:
    """A ``lens.eval.systems.LensResource``'s lexicon: dimensions are clusters, a token's is its cluster."""
    from lens.inputs import encode_model_texts, text_ids

    enc = resource.encoder
    assignment = np.asarray(enc.assignment)

    def queries(texts, instruction):
        return np.asarray(enc.encode_queries(texts, instruction=instruction, output="lexicon", batch_size=16,
                                             show_progress_bar=False), dtype=np.float32)

    def token_dims(text):  # the tokens the encoder pools, as it cuts them (lens.inputs)
        items = encode_model_texts(enc.tokenizer, enc.config, [text], enc.max_seq_length)
        return assignment[np.asarray(text_ids(items[0]), dtype=np.int64)]

    c = enc.config
    return Space(f"lens-lexicon ({resource.model_path})", enc.num_clusters, queries,
                 lambda texts: resource.documents(texts).arrays["lexicon"], token_dims,
                 f"LENS {resource.model_path}: k={c.num_clusters}, {c.attention} attention, {c.pooling} pooling, "
                 f"documents cut at {enc.max_seq_length} tokens")


def splade_space(resource) -> Space:
    """A ``lens.eval.systems.SpladeResource``'s vectors: dimensions are its vocabulary's ids."""
    from lens.peers import padded_to_csr

    enc = resource.encoder

    def documents(texts):
        vecs = resource.documents(texts).arrays
        return padded_to_csr(vecs["indices"], vecs["values"], enc.vocab_size).toarray()

    def token_dims(text):
        ids = enc.tokenizer(text, add_special_tokens=False, truncation=True, max_length=enc.max_seq_length)
        return np.asarray(ids["input_ids"], dtype=np.int64)

    return Space("splade-tiny", enc.vocab_size,
                 lambda texts, instruction: np.asarray(enc.encode(texts, show_progress_bar=False), dtype=np.float32),
                 documents, token_dims, f"{enc.name}, documents cut at {enc.max_seq_length} tokens, no instruction")


def _ranking(scores: np.ndarray, ids: list[str], depth: int) -> dict[str, float]:
    """The ``depth`` best documents with a positive score, as a run entry."""
    hits = np.flatnonzero(scores > 0)
    if len(hits) > depth:
        hits = hits[np.argpartition(-scores[hits], depth - 1)[:depth]]
    return {ids[i]: float(scores[i]) for i in hits}


def _mean(shares: np.ndarray) -> float | None:
    """Mean over the rows with weight; None when no row has any (a collapsed model's all-zero vectors)."""
    shares = shares[~np.isnan(shares)]
    return float(shares.mean()) if shares.size else None


def measure(space: Space, data, instruction: str, depth: int = 100, documents: bool = True) -> dict:
    """The exact-match shares and the three query variants' nDCG@10 of ``space`` on ``data`` (a BEIR dataset);
    ``documents=False`` measures the queries only (no document is encoded; the document columns are None)."""
    from lens.metrics import evaluate

    qids = list(data.queries)
    qtexts = [data.queries[q] for q in qids]
    q = space.queries(qtexts, instruction)
    own_q = support_mask([space.token_dims(t) for t in qtexts], space.dim)
    heaviest = np.argsort(-q, axis=1)[:, :TOP]
    rows = np.arange(len(qids))[:, None]
    top_own = (own_q[rows, heaviest] & (q[rows, heaviest] > 0)).sum(axis=1)
    out = {"describe": space.describe, "query_exact_share": _mean(mass_share(q, own_q)),
           "query_top10_own": float(top_own.mean()), "query_nonzeros": float((q > 0).sum(axis=1).mean()),
           "query_own_dims": float(own_q.sum(axis=1).mean()), "doc_exact_share": None, "doc_nonzeros": None,
           **{f"ndcg@10_{v}": None for v in VARIANTS}}
    if not documents:
        return out
    dtexts, doc_ids = [d.full_text for d in data.docs], [d.id for d in data.docs]
    d = space.documents(dtexts)
    own_d = support_mask([space.token_dims(t) for t in dtexts], space.dim)
    out.update(doc_exact_share=_mean(mass_share(d, own_d)), doc_nonzeros=float((d > 0).sum(axis=1).mean()))
    variants = {"full": q, "exact": np.where(own_q, q, 0), "expansion": np.where(own_q, 0, q)}
    for name, v in variants.items():
        scores = v @ d.T
        run_ = {qid: _ranking(scores[i], doc_ids, depth) for i, qid in enumerate(qids)}
        out[f"ndcg@10_{name}"] = evaluate(data.qrels, run_, ("ndcg@10",)).mean["ndcg@10"]
    return out


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


# the table's columns: (header, key, format); the document columns are left out of a --queries-only run
QUERY_COLUMNS = [("query exact share", "query_exact_share", ".3f"), (f"query top-{TOP} own", "query_top10_own", ".1f"),
                 ("query nonzeros", "query_nonzeros", ".0f"), ("query own dimensions", "query_own_dims", ".1f")]
DOCUMENT_COLUMNS = [("doc exact share", "doc_exact_share", ".3f"), ("doc nonzeros", "doc_nonzeros", ".0f"),
                    ("nDCG@10 full", "ndcg@10_full", ".3f"), ("exact only", "ndcg@10_exact", ".3f"),
                    ("expansion only", "ndcg@10_expansion", ".3f")]


def render(results: dict) -> list[str]:
    meta = results["_meta"]
    queries_only = bool(meta.get("queries_only"))
    columns = QUERY_COLUMNS + ([] if queries_only else DOCUMENT_COLUMNS)
    lines = ["# How lexical is the lexicon? Exact match against expansion", "", "```bash", meta["command"], "```", "",
             "Per system: the share of a vector's weight on the clusters (SPLADE: word pieces) of the text's own "
             "tokens (exact match), for queries (instruction not pooled) and documents; how many of a query's "
             f"{TOP} heaviest dimensions are its own; mean nonzeros; how many dimensions a query's own tokens "
             "have (their share of all dimensions is the exact share of a vector spread evenly). Then nDCG@10 over "
             "the whole corpus with the query vector whole, cut to its own tokens' dimensions (exact), and with them "
             "removed (expansion). "
             "Documents are whole in every column."
             + (" Queries only (`--queries-only`): no document was encoded." if queries_only else ""), ""]
    for name, s in results["sets"].items():
        lines += [f"**{name}** ({s['queries']} queries, {s['documents']} documents)", "",
                  "| system | " + " | ".join(c[0] for c in columns) + " |", "|---" * (len(columns) + 1) + "|"]
        for system, r in s["systems"].items():
            lines.append(f"| {system} | " + " | ".join(_fmt(r[key], spec) for _, key, spec in columns) + " |")
        lines.append("")
    lines += ["Systems: " + "; ".join(f"{k}: {v}" for k, v in meta["systems"].items()) + "."]
    if meta.get("lens_precision"):  # runs before 2026-11-28 did not record it (float32 on this CPU)
        lines += ["", "LENS weights: " + "; ".join(f"{k} {v}" for k, v in meta["lens_precision"].items()) + "."]
    notes = meta.get("notes") or []
    return lines + (["", "Notes:", *[f"- {n}" for n in notes]] if notes else [])


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the options of ``lens bench lexicality`` (and ``benchmarks/lexicality.py``) to ``parser``."""
    from lens.eval.beir import DATA_DIR_HELP, DEFAULT_CACHE_DIR, add_data_argument, add_lens_device_arguments

    parser.add_argument("datasets", nargs="*", default=["scifact", "cranfield", "medline"],
                        help="BEIR-layout sets (names or paths; default scifact cranfield medline), test split: "
                             + DATA_DIR_HELP)
    parser.add_argument("--model", default="default",
                        help="LENS model(s), comma-separated names or directories (default: default)")
    parser.add_argument("--splade", action="store_true", help="also measure SPLADE-tiny (needs the peers extra)")
    parser.add_argument("--queries-only", action="store_true",
                        help="measure the queries' exact-match share only: encodes no document (cheap for many models)")
    parser.add_argument("--depth", type=positive_int, default=100, help="documents kept per query")
    parser.add_argument("--threads", type=positive_int, default=None, help="torch threads")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR,
                        help=f"embedding cache shared with `lens bench beir` (default {DEFAULT_CACHE_DIR})")
    add_data_argument(parser)
    add_lens_device_arguments(parser)
    add_markdown_only_arguments(parser, output="benchmarks/results/lexicality")
    add_result_overwrite_argument(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    if markdown_only(args, args.output, render):
        return 0
    from lens.eval.beir import lens_device, load_dataset, machine_info, precision_name, torch_threads
    from lens.eval.systems import LensResource, SpladeResource
    from lens.instructions import get_instruction

    from lens.eval.beir import check_layout, resolve_dataset

    models = [m for m in args.model.split(",") if m]
    if not models:
        raise ValueError("--model is empty: give a LENS model name or directory (e.g. default)")
    from lens.eval.report import check_benchmark_target, require_bench_extras

    require_bench_extras(plot=False)  # its nDCG columns: a missing extra fails before any encoding
    check_benchmark_target(args.output, overwrite=args.overwrite)  # a user's file, or an earlier result
    paths = [resolve_dataset(name, args.data_dir) for name in args.datasets]  # every set found before a model loads
    for path in paths:
        check_layout(path, "test")
    device, dtype = lens_device(args), getattr(args, "dtype", None)
    resources = [LensResource(m, cache_root=args.cache_dir, show_progress_bar=True, device=device, dtype=dtype)
                 for m in models]
    spaces = [lens_space(r) for r in resources]
    if args.splade:
        spaces.append(splade_space(SpladeResource(cache_root=args.cache_dir)))
    sets = {}
    with torch_threads(args.threads):
        for path in paths:
            data = load_dataset(path)
            instruction = get_instruction(data.name)
            systems = {}
            for space in spaces:
                logger.info("%s on %s", space.name, data.name)
                systems[space.name] = measure(space, data, instruction, args.depth,
                                                  documents=not args.queries_only)
            sets[data.name] = {"queries": len(data.queries), "documents": len(data.docs), "instruction": instruction,
                               "systems": systems}
    command = getattr(args, "bench_command_line", None) or command_line()
    meta = {"command": command, "models": models, "machine": machine_info(), "depth": args.depth,
            "lens_precision": {r.model_path: f"{precision_name(r.encoder)} on {r.encoder.device}" for r in resources},
            "queries_only": args.queries_only, "systems": {s.name: s.describe for s in spaces},
            "notes": list(args.note)}
    results = {"_meta": meta, "sets": sets}
    print(write_benchmark(args.output, results, render(results), overwrite=args.overwrite))
    return 0
