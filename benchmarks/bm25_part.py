"""The index's BM25 part (``index.bm25_part``): its memory, load and query time against bm25s's own index, whole
and split into shards that score with their summed statistics.

    python benchmarks/bm25_part.py --corpus ../shared/data/beir/scifact --copies 1,10,40 --shards 4

Since an index keeps a BM25 part by default, its cost has to be known beside the vectors'. The part keeps every
document's term ids (for exact additions, removals and saves) and a term-major table of each term's documents and
counts (its scorer, built at load); bm25s, the project's BM25 baseline (``lens.bm25.BM25Index``), precomputes every
(term, document) score instead. For each size (the corpus repeated ``--copies`` times under new ids, so the
statistics and the query work grow as in a larger corpus of the same kind), this measures, in this process:

* the bytes each holds (numpy arrays' ``nbytes``; the part's terms are flat arrays, ``index.rows.RowBlocks``: term
  ids, offsets and labels), per document;
* the time to build the part from tokenised texts, and to read a saved ``bm25.npz`` (verified as a load does), whole
  and to search only (``scorer_only``, as a read-only index load: the scorer and the labels, not the terms);
* every query's scores (the set's queries, tokenised once): the part's scores of the documents holding a query
  term (``sparse_scores``, what a search uses) and of every document (``scores``) against bm25s's every document:
  the largest difference relative to the query's best score, and the mean time per query;
* the same part split into ``--shards`` parts of contiguous documents, each scoring with the statistics of all
  (``lens.bm25.BM25Stats.total``, sparse): the largest difference from the whole part, and the mean time per query.

Writes ``benchmarks/results/bm25_part.json`` and ``.md``.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import RESULTS, data_dir, machine, script_command, write_results
from lens.cli_args import Parser

OUT = RESULTS / "bm25_part"


def _part_bytes(part) -> dict:
    post = part._index()
    return {"terms": int(part._rows.nbytes),
            "scorer": int(post.indptr.nbytes + post.rows.nbytes + post.tf.nbytes + post.lengths.nbytes)}


def _bm25s_bytes(index) -> int:
    s = index.retriever.scores
    return int(s["data"].nbytes + s["indices"].nbytes + s["indptr"].nbytes)


def _time_queries(score, terms: list[list[str]]) -> tuple[float, list[np.ndarray]]:
    start = time.perf_counter()
    out = [score(t) for t in terms]
    return (time.perf_counter() - start) / max(len(terms), 1), out


def _dense(part, rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    out = np.zeros(len(part), dtype=np.float32)
    out[rows] = values
    return out


def measure(texts: list[str], queries: list[str], shards: int) -> dict:
    from index.bm25_part import BM25_FILE, BM25Part
    from index.manifest import file_record, verify_stream
    from lens.bm25 import BM25Index, BM25Stats, tokenize

    terms = tokenize(texts)
    q_terms = [t for t in tokenize(queries) if t]
    n = len(texts)
    start = time.perf_counter()
    part = BM25Part.empty()
    part.add_terms(terms, np.arange(n))
    part._index()
    built = time.perf_counter() - start
    reference = BM25Index(texts)

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / BM25_FILE
        part.write(path)
        record = file_record(path)
        start = time.perf_counter()
        with open(path, "rb") as f:
            verify_stream(f, path, record)
            BM25Part.read(f, path, part.manifest_entry())
        read = time.perf_counter() - start
        start = time.perf_counter()
        with open(path, "rb") as f:
            verify_stream(f, path, record)
            BM25Part.read(f, path, part.manifest_entry(), scorer_only=True)
        read_lean = time.perf_counter() - start
        file_bytes = path.stat().st_size

    sparse_q, _ = _time_queries(part.sparse_scores, q_terms)
    part_q, got = _time_queries(part.scores, q_terms)
    ref_q, want = _time_queries(reference.scores, q_terms)
    diff = max((float(np.abs(g - w).max() / max(w.max(), 1e-9)) for g, w in zip(got, want)), default=0.0)

    bounds = np.linspace(0, n, shards + 1).astype(int)
    pieces = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        piece = BM25Part.empty()
        piece.add_terms(terms[a:b], np.arange(a, b))
        piece._index()
        pieces.append(piece)

    def sharded(t):
        stats = BM25Stats.total([p.stats(t) for p in pieces])
        return [p.sparse_scores(t, stats) for p in pieces]

    shard_q, split = _time_queries(sharded, q_terms)
    split = [np.concatenate([_dense(p, r, v) for p, (r, v) in zip(pieces, each)]) for each in split]
    shard_diff = max((float(np.abs(s - g).max() / max(g.max(), 1e-9)) for s, g in zip(split, got)), default=0.0)
    return {"documents": n, "terms": int(sum(len(t) for t in terms)), "queries": len(q_terms),
            "part_bytes": _part_bytes(part), "bm25s_bytes": _bm25s_bytes(reference), "file_bytes": file_bytes,
            "part_build_s": built, "read_s": read, "read_scorer_only_s": read_lean,
            "part_query_ms": part_q * 1e3, "part_sparse_query_ms": sparse_q * 1e3, "bm25s_query_ms": ref_q * 1e3, "max_rel_diff": diff,
            "shards": shards, "sharded_query_ms": shard_q * 1e3, "sharded_max_rel_diff": shard_diff}


def _per_doc(b: float, n: int) -> str:
    return f"{b / 1e6:,.1f} MB ({b / n:,.0f} B/doc)"


def render(meta: dict) -> list[str]:
    lines = ["# The index's BM25 part against bm25s's index", "", f"Command: `{meta['command']}`", "",
             f"Corpus: `{meta['corpus']}` repeated under new ids; its test queries. Bytes: numpy arrays (the part's "
             "terms: flat arrays of term ids, offsets and labels). bm25s: `lens.bm25.BM25Index`, the benchmark's BM25 "
             "(precomputed scores). Build: the part from tokenised texts. Query, mean over the queries: "
             "the part's scores of the documents holding a query term (what a search uses), and every document's "
             "score from the part and from bm25s. diff: largest |part - bm25s| over a query's best "
             f"score. Sharded: {meta['runs'][0]['shards']} parts, each scoring with their summed statistics "
             "(diff against the whole part).", "",
             "| documents | terms | part: terms | part: scorer | bm25s: scores | bm25.npz | build part (s) "
             "| read bm25.npz: whole / to search only (s) | query: part sparse / part every doc / bm25s (ms) | diff "
             "| sharded sparse query (ms) | sharded diff |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in meta["runs"]:
        n, pb = r["documents"], r["part_bytes"]
        lines.append(
            f"| {n:,} | {r['terms']:,} | {_per_doc(pb['terms'], n)} | {_per_doc(pb['scorer'], n)} | "
            f"{_per_doc(r['bm25s_bytes'], n)} | {_per_doc(r['file_bytes'], n)} | {r['part_build_s']:.2f} | "
            f"{r['read_s']:.2f} / {r['read_scorer_only_s']:.2f} | {r['part_sparse_query_ms']:.2f} / "
            f"{r['part_query_ms']:.2f} / {r['bm25s_query_ms']:.2f} | "
            f"{r['max_rel_diff']:.1e} | {r['sharded_query_ms']:.2f} | {r['sharded_max_rel_diff']:.1e} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", default=None, help="a BEIR directory (default: ../shared/data/beir/scifact)")
    p.add_argument("--copies", default="1,10,40", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    from lens.corpus import load_corpus, load_queries

    corpus = Path(args.corpus) if args.corpus else data_dir() / "beir" / "scifact"
    texts = [d.full_text for d in load_corpus(corpus)]
    queries = list(load_queries(corpus).values())
    runs = []
    for copies in args.copies:
        runs.append(measure(texts * copies, queries, args.shards))
        print(render({"command": "", "corpus": str(corpus), "runs": runs})[-1], flush=True)
    meta = {"command": script_command(argv, "benchmarks/bm25_part.py"), "corpus": str(corpus), "runs": runs,
            "machine": machine()}
    print(write_results(args.out, meta, render(meta)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
