"""What a metadata filter costs a search (``HybridIndex.search(filter=...)``, ``lens search --filter``).

Synthetic documents at the hybrid width (lexicon 4000 + dense 384, as ``benchmarks/scale.py`` makes them) with the
metadata a build stores (title, a 300-character snippet) plus a ``bucket`` field 0-99, in a ``flat``, an ``ivf`` and
an ``hnsw`` index. Filters keep 1%, 10% and 50% of the documents (``bucket`` in the first 1, 10 or 50 values).
Measured in one process, one query per call as a server would: what finding the matching documents costs (a
first filter on the field scans the SQLite table, a second builds the field's index, later ones look it up, a
repeated one is remembered; also for larger tables alone, ``--table-docs``), and queries per second with and without
the filter, as a ratio to the unfiltered search of the same index in the same run; recall@10 of the filtered search
against exact search over the matching documents (numpy), which is 1 for ``flat`` by construction and shows what
IVF's ``nprobe`` and HNSW's graph walk miss under a filter.

    python benchmarks/filter_speed.py --docs 50000 --table-docs 1000000
"""

from __future__ import annotations

import logging
import sys
import time

import numpy as np
from _common import finish, start
from lens.cli_args import Parser

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
    row["recall_unfiltered"], row["truth_rank_unfiltered"] = recall(index, q_lex, q_dense, None, 100, vectors)
    for share in SHARES:
        flt = {"bucket": list(range(share))}
        entry = {**lookup_costs(index.doc_table, share), "qps": qps(flt)}
        entry["qps_ratio"] = entry["qps"] / row["qps_unfiltered"]
        entry["recall@10"], entry["truth_rank"] = recall(index, q_lex, q_dense, flt, share, vectors)
        row[f"{share}%"] = entry
    return row


def lookup_costs(table, share: int) -> dict:
    """Seconds to find the documents of a filter keeping ``share`` buckets in ``table`` (a ``DocTable``): the
    first filter on the field (a scan), a second value of it (the field's index built, then looked up), a third
    (an index lookup), and the first again (remembered). Starts from a table that has seen no filter."""
    from index.metadata import check_filter

    table._filtered.clear()  # private: forget earlier filters, their matches and the field index (a benchmark of them)
    table._changed()
    filters = [check_filter({"bucket": [(b + (share + 1) * i) % 100 for b in range(share)]}) for i in range(3)]
    times = []
    for flt in filters + filters[:1]:
        start = time.perf_counter()
        found = table.matching(flt)
        times.append(time.perf_counter() - start)
    field_index = table._fields.get("bucket")  # private: the benchmark reports its size
    return {"matching": int(len(found)), "scan_s": times[0], "index_build_s": times[1], "indexed_s": times[2],
            "remembered_s": times[3], "field_index_mb": None if field_index is None else field_index.nbytes / 1e6}


def table_row(n: int, seed: int) -> dict:
    """:func:`lookup_costs` on a document table alone (no vectors) of ``n`` documents with a build's metadata."""
    from index.metadata import DocTable, encode_metadata

    rng = np.random.default_rng(seed)
    words = np.array("cell gene protein cancer drug dose mouse brain blood risk treatment wing flow".split())
    table = DocTable()
    with table.transaction():
        for first in range(0, n, 50_000):
            ids = range(first, min(n, first + 50_000))
            table.insert(ids, [f"doc{i}" for i in ids],
                         [encode_metadata({"title": f"document {i}", "snippet": " ".join(rng.choice(words, 50))[:300],
                                           "bucket": i % 100}, f"doc{i}") for i in ids])
    return {"documents": n, **{f"{share}%": lookup_costs(table, share) for share in SHARES}}


def stored_vectors(data, n: int) -> np.ndarray:
    """The documents' stored vectors (normalised parts, concatenated), made again from the same seed."""
    from index.vectors import document_vectors

    return np.vstack([document_vectors(lex, dense) for _, lex, dense in data.docs(n, 0, n)])


def recall(index, q_lex, q_dense, flt, share, vectors) -> tuple[float, float]:
    """recall@10 of the filtered search against exact scores over the matching documents, and the mean rank those
    exact top-10 documents hold in the unfiltered exact ranking (how far out an approximate search must look)."""
    from index.vectors import query_vectors

    keep = np.flatnonzero(np.arange(len(index)) % 100 < share)
    qv = query_vectors(q_lex, q_dense, np.full(len(q_lex), 0.5), np.full(len(q_lex), 0.5))
    every = qv @ vectors.T
    hits = index.search(q_lex, q_dense, k=10, filter=flt)
    found, ranks = 0, []
    for i, h in enumerate(hits):
        top = keep[np.argsort(-every[i, keep])[:10]]
        found += len({f"doc{j}" for j in top} & set(h.ids))
        ranks += [int((every[i] > every[i, j]).sum()) + 1 for j in top]
    return found / (min(10, len(keep)) * len(hits)), float(np.mean(ranks))


def render(results: dict) -> list[str]:
    meta = results["_meta"]
    lines = ["# Metadata filters: cost per search", "", f"- Command: `{meta['command']}`",
             f"- Machine: {meta['machine']}; one query per search call, k 10, weights 0.5/0.5",
             f"- {meta['docs']:,} synthetic documents (lexicon 4000 + dense 384, `benchmarks/scale.py`'s generator) "
             "with a build's metadata (title, 300-character snippet) and `bucket` = i % 100; a filter keeps the "
             "first 1, 10 or 50 buckets. ivf: nlist from the data, nprobe 16. hnsw: m 32, ef_search 64; a filter "
             "that leaves fewer matches than the widened walk computes distances for is scored exactly "
             "(`index.faiss_ops.hnsw_filter_is_exact`).", "",
             "| index | filter keeps | matching docs | QPS | QPS / unfiltered | recall@10 vs exact over the matches "
             "| their mean rank unfiltered |", "|---|---|---:|---:|---:|---:|---:|"]
    for kind in KINDS:
        row = results.get(kind)
        if row is None:
            continue
        lines.append(f"| {kind} | everything (no filter) | {row['documents']:,} | "
                     f"{row['qps_unfiltered']:.1f} | 1.00 | {row['recall_unfiltered']:.3f} | "
                     f"{_rank(row.get('truth_rank_unfiltered'))} |")
        for share in SHARES:
            e = row[f"{share}%"]
            lines.append(f"| {kind} | {share}% | {e['matching']:,} | {e['qps']:.1f} | {e['qps_ratio']:.2f} | "
                         f"{e['recall@10']:.3f} | {_rank(e.get('truth_rank'))} |")
    lines += ["", "The last column: the mean rank, in the unfiltered exact ranking of every document, of the exact "
              "top 10 among the matches (1-10 when unfiltered): how far out an approximate search must look.",
              "", "Finding the matching documents (`DocTable.matching`), seconds: the first filter on a field "
              "scans the SQLite table; a second value of the field builds the field's index in memory "
              "(`index.metadata.FieldIndex`) and looks it up; later values are index lookups; a filter searched "
              "again is remembered.", "",
              "| documents | filter keeps | matching docs | first filter (scan) | second (index built) | "
              "third (indexed) | again (remembered) | field index MB |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for row in [results[k] for k in KINDS[:1] if k in results] + results.get("tables", []):
        for share in SHARES:
            e = row[f"{share}%"]
            mb = e.get("field_index_mb")
            lines.append(f"| {row['documents']:,} | {share}% | {e['matching']:,} | {e['scan_s']:.4f} | "
                         f"{e['index_build_s']:.4f} | {e['indexed_s']:.6f} | {e['remembered_s']:.6f} | "
                         f"{'-' if mb is None else f'{mb:.1f}'} |")
    for note in meta.get("notes") or []:
        lines += ["", f"- {note}"]
    return lines


def _rank(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def main(argv=None) -> int:
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--docs", type=int, default=50_000)
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="FAISS OpenMP threads (default: FAISS's)")
    p.add_argument("--table-docs", default="", help="comma-separated sizes of document tables (no vectors) whose "
                                                    "lookup costs are measured too, e.g. 1000000")
    args = start(p, argv, "filter_speed", render, level=logging.WARNING, fmt=None)
    if args is None:  # --markdown-only
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
    results["tables"] = [table_row(int(n), args.seed) for n in args.table_docs.split(",") if n.strip()]
    return finish(args, results, render, docs=args.docs, queries=args.queries)


if __name__ == "__main__":
    sys.exit(main())
