"""What a metadata filter costs a search (``HybridIndex.search(filter=...)``, ``lens search --filter``).

Synthetic documents at the hybrid width (lexicon 4000 + dense 384, as ``benchmarks/scale.py`` makes them) with the
metadata a build stores (title, a 300-character snippet) plus a ``bucket`` field 0-99, in a ``flat``, an ``ivf`` and
an ``hnsw`` index. Filters keep 1%, 10% and 50% of the documents (``bucket`` in the first 1, 10 or 50 values).
Measured in one process, one query per call as a server would: the SQLite scan that finds the matching documents
(its first call, then a call it remembers), and queries per second with and without the filter, as a ratio to the
unfiltered search of the same index in the same run; recall@10 of the filtered search against exact search over
the matching documents (numpy), which is 1 for ``flat`` by construction and shows what IVF's ``nprobe`` and HNSW's
graph walk miss under a filter.

    python benchmarks/filter_speed.py --docs 50000
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lens.cmdline import command_line  # noqa: E402
from lens.eval.report import add_markdown_only_arguments, markdown_only, write_benchmark  # noqa: E402
from lens.train.report import machine_description  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARES = (1, 10, 50)  # percent of the documents a filter keeps
KINDS = ("flat", "ivf", "hnsw")


def make_index(kind: str, data, n: int, seed: int):
    """An index of ``n`` synthetic documents of ``data`` with build-like metadata; ``bucket`` = i % 100."""
    from scale import DENSE, LEXICON

    from index import HybridIndex

    index = HybridIndex(LEXICON, DENSE, kind)
    rng = np.random.default_rng(seed)
    words = np.array("cell gene protein cancer drug dose mouse brain blood risk treatment wing flow".split())
    for first, lex, dense in data.docs(n, 0, n):
        ids = [f"doc{i}" for i in range(first, first + len(lex))]
        meta = [{"title": f"document {i}", "snippet": " ".join(rng.choice(words, 50))[:300], "bucket": i % 100}
                for i in range(first, first + len(lex))]
        index.add(ids, lex, dense, metadata=meta)
    if kind == "ivf":
        index.set_search_options(nprobe=16)
    return index


def measure(index, data, vectors: np.ndarray, n_queries: int) -> dict:
    """One index's row; ``vectors``: the documents' stored vectors (:func:`stored_vectors`), the recall reference."""
    from index.metadata import check_filter

    q_lex, q_dense = data.queries(n_queries)
    row = {"documents": len(index), "index": index.index_type}

    def qps(flt) -> float:
        index.search(q_lex[0], q_dense[0], k=10, filter=flt)  # warm: FAISS threads, the filter's scan
        start = time.perf_counter()
        for i in range(n_queries):
            index.search(q_lex[i], q_dense[i], k=10, filter=flt)
        return n_queries / (time.perf_counter() - start)

    row["qps_unfiltered"] = qps(None)
    row["recall_unfiltered"] = recall(index, q_lex, q_dense, None, 100, vectors)
    for share in SHARES:
        flt = {"bucket": list(range(share))}
        checked = check_filter(flt)
        index._docs._matches.clear()  # forget earlier calls' matches (private: a benchmark of them), so this scans
        start = time.perf_counter()
        allowed = index._docs.matching(checked)
        scan = time.perf_counter() - start
        start = time.perf_counter()
        index._docs.matching(checked)
        remembered = time.perf_counter() - start
        entry = {"matching": int(len(allowed)), "scan_s": scan, "remembered_s": remembered, "qps": qps(flt)}
        entry["qps_ratio"] = entry["qps"] / row["qps_unfiltered"]
        entry["recall@10"] = recall(index, q_lex, q_dense, flt, share, vectors)
        row[f"{share}%"] = entry
    return row


def stored_vectors(data, n: int) -> np.ndarray:
    """The documents' stored vectors (normalised parts, concatenated), made again from the same seed."""
    from index.vectors import document_vectors

    return np.vstack([document_vectors(lex, dense) for _, lex, dense in data.docs(n, 0, n)])


def recall(index, q_lex, q_dense, flt, share, vectors) -> float:
    """recall@10 of the filtered search against exact scores over the matching documents."""
    from index.vectors import query_vectors

    keep = np.flatnonzero(np.arange(len(index)) % 100 < share)
    qv = query_vectors(q_lex, q_dense, np.full(len(q_lex), 0.5), np.full(len(q_lex), 0.5))
    exact = qv @ vectors[keep].T
    hits = index.search(q_lex, q_dense, k=10, filter=flt)
    found = 0
    for i, h in enumerate(hits):
        truth = {f"doc{keep[j]}" for j in np.argsort(-exact[i])[:10]}
        found += len(truth & set(h.ids))
    return found / (min(10, len(keep)) * len(hits))


def render(results: dict) -> list[str]:
    meta = results["_meta"]
    lines = ["# Metadata filters: cost per search", "", f"- Command: `{meta['command']}`",
             f"- Machine: {meta['machine']}; one query per search call, k 10, weights 0.5/0.5",
             f"- {meta['docs']:,} synthetic documents (lexicon 4000 + dense 384, `benchmarks/scale.py`'s generator) "
             "with a build's metadata (title, 300-character snippet) and `bucket` = i % 100; a filter keeps the "
             "first 1, 10 or 50 buckets. ivf: nlist from the data, nprobe 16. hnsw: m 32, ef_search 64; a filter "
             "that leaves fewer matches than the widened walk computes distances for is scored exactly "
             "(`index.store.hnsw_filter_is_exact`).", "",
             "| index | filter keeps | matching docs | SQLite scan s (first call) | remembered s | QPS | "
             "QPS / unfiltered | recall@10 vs exact over the matches |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for kind in KINDS:
        row = results.get(kind)
        if row is None:
            continue
        lines.append(f"| {kind} | everything (no filter) | {row['documents']:,} | - | - | "
                     f"{row['qps_unfiltered']:.1f} | 1.00 | {row['recall_unfiltered']:.3f} |")
        for share in SHARES:
            e = row[f"{share}%"]
            lines.append(f"| {kind} | {share}% | {e['matching']:,} | {e['scan_s']:.3f} | {e['remembered_s']:.6f} | "
                         f"{e['qps']:.1f} | {e['qps_ratio']:.2f} | {e['recall@10']:.3f} |")
    for note in meta.get("notes") or []:
        lines += ["", f"- {note}"]
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--docs", type=int, default=50_000)
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="FAISS OpenMP threads (default: FAISS's)")
    add_markdown_only_arguments(p, output=ROOT / "benchmarks" / "results" / "filter_speed")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if markdown_only(args, args.output, render):
        return 0
    import faiss

    if args.threads:
        faiss.omp_set_num_threads(args.threads)
    from scale import Synthetic

    data = Synthetic(args.seed, chunk=10_000)
    vectors = stored_vectors(data, args.docs)  # made once: every index holds the same documents
    results = {}
    for kind in KINDS:
        index = make_index(kind, data, args.docs, args.seed)
        results[kind] = measure(index, data, vectors, args.queries)
        del index
    results["_meta"] = {"command": command_line(), "docs": args.docs, "queries": args.queries,
                        "notes": args.note, "machine": machine_description()}
    print(write_benchmark(args.output, results, render(results)), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
