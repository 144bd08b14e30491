"""Top-m pruning of LENS document lexicon vectors against unpruned: bytes per document and nDCG@10 / Recall@100.

    python benchmarks/top_m.py --dataset scifact --m 64,128,256,512          # results/top_m.json + top_m.md
    python benchmarks/top_m.py --dataset adi --results /tmp/topm-adi         # a tiny set: /tmp/topm-adi.{json,md}

For each m (and unpruned) the harness's own ``lens-lexicon`` and ``lens-hybrid`` systems (``lens.eval.systems``) are
built on a flat ``index.HybridIndex`` with ``top_m=m``, exactly what ``lens index build --top-m m`` stores, and
evaluated by the BEIR runner's ``evaluate_system`` (pytrec_eval). Queries are not pruned, as in the index. Document
vectors come from the benchmark's embedding cache under the same keys as ``benchmarks/beir.py``, so after a beir.py
run on the same model and set no document is encoded; queries are encoded one at a time as beir.py does (it caches
none), once per run, and shared by every m.

Bytes per document, for each m: (a) the saved flat index directory / N (measured; FAISS flat stores dense float32
rows, so it does not shrink with m), (b) a CSR store of the non-zeros (arithmetic: ``csr_bytes``), (c) the JSON lines
that ``lens encode --format qdrant --top-m m`` writes (measured: ``lens.export.write_export`` on the same vectors).
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import add_data_dir_argument, data_dir, write_results

from lens.cmdline import int_list
from lens.eval.systems import LensHybrid, LensLexicon

logger = logging.getLogger(__name__)

DEFAULT_M = (64, 128, 256, 512)
DEFAULT_RESULTS = Path("benchmarks") / "results" / "top_m"
DENSE = ("minilm", "none")  # the hybrid's dense side: MiniLM as in lens-hybrid, or no hybrid at all


# ------------------------------------------------------------------------------------------- systems
class TopM:
    """Mixin for the harness's LENS systems: the same flat ``HybridIndex``, built with ``top_m`` (None: unpruned)."""

    def __init__(self, *args, top_m: int | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.top_m = top_m
        self.name = f"{self.name} top-{top_m}" if top_m else self.name

    def _index(self, ids, lexicon, dense, weights=None, fingerprint=None):
        from index import HybridIndex

        t0 = time.perf_counter()
        index = HybridIndex(lexicon.shape[1], None if dense is None else dense.shape[1], "flat", weights=weights,
                            fingerprint=fingerprint, top_m=self.top_m)
        index.add(ids, lexicon=lexicon, dense=dense)
        return index, time.perf_counter() - t0


class PrunedLexicon(TopM, LensLexicon):
    pass


class PrunedHybrid(TopM, LensHybrid):
    pass


class SharedQueries:
    """A harness resource (``LensResource``, ``MiniLMResource``) whose ``query`` runs once per distinct arguments,
    so every m searches with the same query vectors; everything else is the resource's own."""

    def __init__(self, resource):
        self.resource, self.memo = resource, {}

    def __getattr__(self, name):
        return getattr(self.resource, name)

    def query(self, *args):
        if args not in self.memo:
            self.memo[args] = self.resource.query(*args)
        return self.memo[args]


# ------------------------------------------------------------------------------------------- run
def run(args: argparse.Namespace) -> int:
    from index.vectors import prune_top_m
    from lens.cmdline import command_line
    from lens.eval.beir import DEFAULT_CACHE_DIR, evaluate_system, load_dataset
    from lens.eval.systems import DEFAULT_DEPTH, Resources
    from lens.export import LABEL_TOKENS, cluster_labels
    from lens.instructions import lookup

    command = command_line()
    data = load_dataset(args.dataset, args.split, data=data_dir(args.data_dir))
    instruction = lookup(data.name)
    cache_dir = Path(args.cache_dir or DEFAULT_CACHE_DIR)
    resources = Resources(model=args.model, cache_root=cache_dir, lens_batch_size=args.lens_batch_size)
    lens, minilm = SharedQueries(resources.lens), SharedQueries(resources.minilm)
    ids = [d.id for d in data.docs]
    lexicon = lens.documents([d.full_text for d in data.docs]).arrays["lexicon"]  # the systems reuse this memo
    enc = lens.encoder
    labels = cluster_labels([enc.cluster_tokens(c, LABEL_TOKENS) for c in range(enc.num_clusters)])  # as lens encode
    rows = []
    for m in [None, *args.m]:
        vectors = lexicon if m is None else prune_top_m(lexicon, m)  # what lens encode --top-m m exports
        row = {"m": m, **sparse_sizes(vectors, ids, labels)}
        systems = {"lexicon": PrunedLexicon(lens, instruction.text, top_m=m)}
        if args.dense == "minilm":
            systems["hybrid"] = PrunedHybrid(lens, minilm, instruction.text, args.weights, top_m=m)
        for part, system in systems.items():
            s = evaluate_system(system, data, DEFAULT_DEPTH, drop_self=data.name == "arguana", threads=args.threads,
                                query_threads=args.query_threads)["summary"]
            system.release()
            row[part] = {"ndcg@10": s["ndcg@10"], "recall@100": s["recall@100"], "mrr@10": s["mrr@10"],
                         "index_bytes_per_doc": s["index_bytes"] / len(ids), "description": s["description"]}
            logger.info("m=%s %s: nDCG@10 %.4f", m or "unpruned", part, s["ndcg@10"])
        rows.append(row)
    add_ratios(rows)
    meta = {"command": command, "dataset": data.name, "split": data.split, "model": args.model,
            "docs": len(ids), "queries": len(data.queries), "num_clusters": enc.num_clusters,
            "instruction": instruction.text, "instruction_source": instruction.source, "dense": args.dense,
            "weights_hybrid": list(args.weights), "depth": DEFAULT_DEPTH, "cache_dir": str(cache_dir),
            "lens_fingerprint": enc.fingerprint(), "rows": rows}
    print(write_results(args.results, meta, markdown(meta)), end="")
    return 0


def sparse_sizes(vectors: np.ndarray, ids: list[str], labels: list[str]) -> dict:
    """Non-zeros per document, and the bytes per document of a CSR store and of the qdrant export of ``vectors``."""
    from lens.export import write_export

    nonzeros = np.count_nonzero(vectors > 0, axis=1)
    with tempfile.TemporaryDirectory(prefix="lens-top-m-") as tmp:
        path = Path(tmp) / "docs.jsonl"
        write_export(path, "qdrant", vectors, ids, labels)
        qdrant = path.stat().st_size
    return {"nonzeros_mean": float(nonzeros.mean()), "nonzeros_max": int(nonzeros.max()),
            "csr_bytes_per_doc": csr_bytes(nonzeros, vectors.shape[1]) / len(ids),
            "qdrant_bytes_per_doc": qdrant / len(ids)}


def add_ratios(rows: list[dict]) -> None:
    """``ratio``: each row's bytes per document over the unpruned row's (the first)."""
    base = rows[0]
    for row in rows:
        row["ratio"] = {key: row[key] / base[key] for key in ("csr_bytes_per_doc", "qdrant_bytes_per_doc")}
        for part in ("lexicon", "hybrid"):
            if part in row:
                row["ratio"][f"{part}_index_bytes_per_doc"] = (row[part]["index_bytes_per_doc"]
                                                              / base[part]["index_bytes_per_doc"])


def markdown(meta: dict) -> list[str]:
    hybrid = meta["dense"] != "none"
    lines = [f"# Top-m pruning of LENS document vectors: {meta['dataset']} ({meta['split']})", "",
             "Reproduce:", "", "```bash", meta["command"], "```", "",
             f"LENS model `{meta['model']}` (k = {meta['num_clusters']}); {meta['docs']} documents, {meta['queries']} "
             f"queries; query instruction ({meta['instruction_source']}): \"{meta['instruction']}\". Each document "
             "keeps its m heaviest lexicon weights; queries are not pruned (as `lens index build --top-m m`)."
             + (f" Hybrid: LENS lexicon + MiniLM, weights (lex, dense) = {tuple(meta['weights_hybrid'])}, as "
                "`lens-hybrid` in `benchmarks/beir.py`." if hybrid else ""), "",
             "| m | non-zeros / doc (mean, max) | lexicon nDCG@10 | lexicon R@100 | hybrid nDCG@10 | hybrid R@100 |",
             "|---|---|---|---|---|---|"]
    for r in meta["rows"]:
        h = r.get("hybrid", {})
        lines.append(f"| {r['m'] or 'unpruned'} | {r['nonzeros_mean']:.1f}, {r['nonzeros_max']} | "
                     f"{r['lexicon']['ndcg@10']:.4f} | {r['lexicon']['recall@100']:.4f} | "
                     f"{_num(h.get('ndcg@10'))} | {_num(h.get('recall@100'))} |")
    lines += ["", "Bytes per document (ratio to unpruned in brackets):", "",
              "| m | FAISS flat index, lexicon | FAISS flat index, hybrid | CSR store | qdrant export |",
              "|---|---|---|---|---|"]
    for r in meta["rows"]:
        ratio = r["ratio"]
        cells = [_bytes(r[p]["index_bytes_per_doc"], ratio[f"{p}_index_bytes_per_doc"]) if p in r else "–"
                 for p in ("lexicon", "hybrid")]
        cells += [_bytes(r["csr_bytes_per_doc"], ratio["csr_bytes_per_doc"]),
                  _bytes(r["qdrant_bytes_per_doc"], ratio["qdrant_bytes_per_doc"])]
        lines.append(f"| {r['m'] or 'unpruned'} | " + " | ".join(cells) + " |")
    lines += ["", "## How these were measured", "",
              "- nDCG@10, Recall@100: pytrec_eval through the BEIR runner's `evaluate_system`, on a flat "
              f"`index.HybridIndex` built with `top_m=m`, {meta['depth']} hits per query. The unpruned row is the "
              "`lens-lexicon` / `lens-hybrid` of `benchmarks/beir.py` on the same cached vectors.",
              "- FAISS flat index: the bytes of the saved index directory (FAISS file, ids, manifest) / documents, "
              "measured. **It does not shrink with m**: a flat FAISS index stores every document as a dense float32 "
              "row (k lexicon columns, plus 384 MiniLM columns for the hybrid); pruning only writes zeros into it.",
              "- CSR store: arithmetic on the measured non-zeros: per non-zero a float32 weight (4 B) and a uint16 "
              "cluster id (2 B; uint32 past 65,536 clusters), plus one int64 row pointer (8 B) per document (and one more for the matrix).",
              "- qdrant export: the size of the JSON lines file `lens encode --format qdrant --top-m m` writes "
              "(`lens.export.write_export` on the same pruned unit vectors: ids, indices, shortest float32 "
              "decimals) / documents, measured.",
              f"- Document vectors: the benchmark embedding cache (`{meta['cache_dir']}`), keys as `benchmarks/beir.py`."]
    return lines


def _num(v) -> str:
    return "–" if v is None else f"{v:.4f}"


def _bytes(v: float, ratio: float) -> str:
    return f"{v:,.0f} ({ratio:.2f})"


# ------------------------------------------------------------------------------------------- CLI
m_list = int_list("--m", example="64,128")


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    from lens.cmdline import positive_int
    from lens.eval.beir import DEFAULT_CACHE_DIR, add_thread_arguments, weights_arg

    parser.add_argument("--dataset", default="scifact", help="a BEIR directory or a name under DATA_DIR/{beir,classic}")
    add_data_dir_argument(parser)
    parser.add_argument("--split", default="test", help="qrels split to evaluate (default: test)")
    parser.add_argument("--model", default="default", help="LENS model directory or 'default'")
    parser.add_argument("--m", type=m_list, default=list(DEFAULT_M),
                        help=f"lexicon weights kept per document, comma-separated (default {','.join(map(str, DEFAULT_M))})")
    parser.add_argument("--dense", choices=DENSE, default="minilm", help="hybrid's dense side (none: lexicon only)")
    parser.add_argument("--weights", type=weights_arg, default=(0.5, 0.5), help="hybrid weights LEX,DENSE (0.5,0.5)")
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS,
                        help=f"output path without suffix: writes .json and .md (default {DEFAULT_RESULTS})")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help=f"embedding cache (default: {DEFAULT_CACHE_DIR} in the working directory)")
    parser.add_argument("--lens-batch-size", type=positive_int, default=4,
                        help="LENS documents per forward pass when a document is not cached")
    add_thread_arguments(parser)
    return parser


# ------------------------------------------------------------------------------------------- pure functions
def csr_bytes(nonzeros: np.ndarray, dim: int) -> int:
    """Bytes of a CSR matrix with ``nonzeros[i]`` entries in row i and ``dim`` columns: a float32 value and a column
    id per entry (uint16 while ``dim`` <= 65536, else uint32) and ``len(nonzeros) + 1`` int64 row pointers."""
    nonzeros = np.asarray(nonzeros, dtype=np.int64)
    if nonzeros.ndim != 1 or (nonzeros < 0).any() or (nonzeros > dim).any():
        raise ValueError(f"nonzeros must be one count per row, each in 0..{dim}, got {nonzeros!r}")
    id_bytes = 2 if dim <= 2**16 else 4
    return int(nonzeros.sum()) * (4 + id_bytes) + 8 * (len(nonzeros) + 1)


if __name__ == "__main__":
    from lens.eval import script_main

    sys.exit(script_main("__main__", __doc__.split("\n")[0]))
