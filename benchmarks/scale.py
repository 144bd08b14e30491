"""Scale of the hybrid store: 1M synthetic documents built as 4 shards, for flat, sq8 and ivf-ondisk.

For each index type this measures, in child processes of their own (so each one's peak memory is its own):

* build: the index written shard by shard the way ``lens index build --shards 4`` writes it (flat / sq8: four
  shard indexes through ``index.shards.ShardWriter``, sq8 trained once; ivf-ondisk: trained once, each shard's
  inverted lists spilled to disk and the four parts merged into one memory-mapped file): wall time and peak RSS
  (``ru_maxrss`` of the child, which counts FAISS's own allocations that tracemalloc cannot see);
* index bytes on disk (every file of the saved directory);
* search: load time (checksums included), QPS for a batch of queries and one query at a time, recall@10 against
  exact search (numpy over the same stored vectors, ``index.vectors``), and the peak RSS of the searching child.

Data: ``--docs`` documents (default 1M) of the real hybrid width, generated chunk by chunk from a seed so any chunk
can be made again in any process: lexicon ``log1p(relu(topic prototype + 0.7 * noise - 1.2))`` (non-negative,
~60 topic + ~4% noise dims of 4000 non-zero) and dense ``topic prototype + noise`` (384); queries are drawn the same
way from other seeds, so they share topics with the documents.

Writes ``benchmarks/results/scale.json`` and ``scale.md`` (``--results`` to write elsewhere), the command line at
the top. Try it small first: ``python benchmarks/scale.py --docs 20000``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import RESULTS, machine, write_results
from lens.cli_args import Parser

LEXICON, DENSE = 4000, 384
TOPICS = 2000
KINDS = ("flat", "sq8", "ivf-ondisk")
WEIGHTS = (0.5, 0.5)


# ---- data -----------------------------------------------------------------------------------------


class Synthetic:
    """Topic-structured documents (and queries), chunk ``i`` always the same for the same seed."""

    def __init__(self, seed: int, chunk: int) -> None:
        prng = np.random.default_rng([seed, 0])
        self.proto_l = np.zeros((TOPICS, LEXICON), dtype=np.float32)
        for t in range(TOPICS):
            self.proto_l[t, prng.choice(LEXICON, size=60, replace=False)] = prng.uniform(1, 3, size=60)
        self.proto_d = prng.standard_normal((TOPICS, DENSE), dtype=np.float32)
        self.seed, self.chunk = seed, chunk

    def rows(self, stream: int, i: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(lexicon, dense) of ``n`` rows, the ``i``-th block of ``stream`` (1: documents, 2: queries)."""
        rng = np.random.default_rng([self.seed, stream, i])
        topic = rng.integers(0, TOPICS, size=n)
        lex = rng.standard_normal((n, LEXICON), dtype=np.float32)
        lex *= 0.7
        lex += self.proto_l[topic]
        lex -= 1.2
        np.maximum(lex, 0, out=lex)
        np.log1p(lex, out=lex)
        dense = self.proto_d[topic] + rng.standard_normal((n, DENSE), dtype=np.float32)
        return lex, dense

    def docs(self, total: int, start: int, stop: int):
        """(first row, lexicon, dense) blocks covering documents ``start`` to ``stop`` of ``total``."""
        for i in range(start // self.chunk, math.ceil(stop / self.chunk)):
            a = i * self.chunk
            lex, dense = self.rows(1, i, min(self.chunk, total - a))
            lo, hi = max(start, a) - a, min(stop, a + len(lex)) - a
            yield a + lo, lex[lo:hi], dense[lo:hi]

    def queries(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        return self.rows(2, 0, n)


def doc_ids(first: int, n: int) -> list[str]:
    return [f"doc{i}" for i in range(first, first + n)]


# ---- the child processes --------------------------------------------------------------------------


def peak_rss_mb() -> float:
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / 1024 / (1024 if sys.platform == "darwin" else 1)  # bytes on macOS, KiB on Linux


def child_build(cfg: dict, kind: str) -> dict:
    from index import HybridIndex
    from index.factory import get_index_type
    from index.shards import ShardWriter
    from lens.atomic import atomic_dir
    from lens.train.distributed import shard_slice

    data, n, shards = Synthetic(cfg["seed"], cfg["chunk"]), cfg["docs"], cfg["shards"]
    out, work = Path(cfg["work"]) / kind, Path(cfg["work"]) / f"{kind}.parts"
    work.mkdir(exist_ok=True)
    t0 = time.perf_counter()
    options = {"nlist": cfg["nlist"], "nprobe": cfg["nprobe"]} if kind == "ivf-ondisk" else {}
    template = HybridIndex(LEXICON, DENSE, kind, weights=WEIGHTS, **options)
    if get_index_type(kind).needs_training:
        plan = get_index_type(kind).training_plan(template.index_options, n)
        sample = [block for block in data.docs(n, 0, min(n, plan.train_size))]  # the first chunks: random already
        template.train(np.concatenate([b[1] for b in sample]), np.concatenate([b[2] for b in sample]))
        del sample
    train_s = time.perf_counter() - t0
    parts = [shard_slice(n, s, shards) for s in range(shards)]

    def fill(index, part):
        for first, lex, dense in data.docs(n, part.start, part.stop):
            index.add(doc_ids(first, len(lex)), lex, dense)

    if kind == "ivf-ondisk":
        for s, part in enumerate(parts):
            fill(template, part)
            if s + 1 < len(parts):
                template.spill(work / f"part-{s}.faiss")
        template.save(out)
    else:
        with atomic_dir(out, what="index") as tmp:
            writer = ShardWriter(tmp)
            for part in parts:
                shard = template.clone_empty()
                fill(shard, part)
                writer.add(shard)
                del shard
            writer.finish()
    build_s = time.perf_counter() - t0
    shutil.rmtree(work, ignore_errors=True)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return {"build_s": build_s, "train_s": train_s, "build_peak_rss_mb": peak_rss_mb(), "bytes_on_disk": size}


def child_search(cfg: dict, kind: str) -> dict:
    from index import load_index

    q_lex, q_dense = Synthetic(cfg["seed"], cfg["chunk"]).queries(cfg["queries"])
    truth = json.loads((Path(cfg["work"]) / "truth.json").read_text())
    t0 = time.perf_counter()
    index = load_index(Path(cfg["work"]) / kind)  # a single or sharded directory
    load_s = time.perf_counter() - t0
    if kind == "ivf-ondisk":
        index.set_search_options(nprobe=cfg["nprobe"])
    index.search(q_lex[:10], q_dense[:10], k=10)  # warm-up
    times = []
    for _ in range(3):
        t = time.perf_counter()
        hits = index.search(q_lex, q_dense, k=10)
        times.append(time.perf_counter() - t)
    single = min(len(q_lex), 100)
    t = time.perf_counter()
    for i in range(single):
        index.search(q_lex[i], q_dense[i], k=10)
    single_s = time.perf_counter() - t
    recall = float(np.mean([len(set(h.ids) & set(tr)) / 10 for h, tr in zip(hits, truth)]))
    return {"load_s": load_s, "qps_batch": len(q_lex) / min(times), "qps_single": single / single_s,
            "recall_at_10": recall, "search_peak_rss_mb": peak_rss_mb()}


def child_truth(cfg: dict) -> dict:
    """Exact top-10 of every query over all documents (numpy, the store's own vector maths)."""
    from index.vectors import document_vectors, query_vectors

    data, n = Synthetic(cfg["seed"], cfg["chunk"]), cfg["docs"]
    q_lex, q_dense = data.queries(cfg["queries"])
    qv = query_vectors(q_lex, q_dense, *WEIGHTS)
    best_s = np.full((len(qv), 10), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(qv), 10), dtype=np.int64)
    t0 = time.perf_counter()
    for first, lex, dense in data.docs(n, 0, n):
        scores = qv @ document_vectors(lex, dense).T
        s = np.concatenate([best_s, scores], axis=1)
        i = np.concatenate([best_i, np.arange(first, first + len(lex))[None, :].repeat(len(qv), 0)], axis=1)
        top = np.argpartition(-s, 9, axis=1)[:, :10]
        best_s, best_i = np.take_along_axis(s, top, 1), np.take_along_axis(i, top, 1)
    (Path(cfg["work"]) / "truth.json").write_text(json.dumps([[f"doc{i}" for i in row] for row in best_i.tolist()]))
    return {"truth_s": time.perf_counter() - t0}


def run_child(cfg_path: Path, role: str) -> dict:
    """Run ``role`` ("truth", "build:KIND", "search:KIND") in a fresh process; its JSON result."""
    proc = subprocess.run([sys.executable, __file__, "--child", role, "--config", str(cfg_path)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{role} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---- the report -----------------------------------------------------------------------------------


def default_nlist(n: int) -> int:
    """Lists for ivf-ondisk: about 4 sqrt(n), at most 1024 (k-means on 4384-wide vectors is the cost) and n / 40."""
    return max(1, min(1024, round(4 * math.sqrt(n)), n // 40))


def markdown(r: dict) -> str:
    c = r["config"]
    lines = [
        f"# Scale: {c['docs']:,} synthetic documents in {c['shards']} shards",
        "",
        f"- Command: `{r['command']}`",
        f"- Date: {r['date']}; machine: {r['machine']}; FAISS {r['faiss']} with {r['threads']} threads",
        f"- Data: lexicon {LEXICON} (non-negative, ~60 topic + ~4% noise dims non-zero) + dense {DENSE}, "
        f"{TOPICS} topics, seed {c['seed']}; {c['queries']} queries; weights {WEIGHTS}",
        f"- ivf-ondisk: nlist {c['nlist']}, nprobe {c['nprobe']}; exact top-10 took {r['truth_s']:.1f} s (numpy)",
        "- Peak RSS is `ru_maxrss` of the child process that built (or loaded and searched) the index; it counts "
        "FAISS's allocations and the resident pages of memory-mapped files.",
        "",
        "| index | build s | build peak RSS MiB | on disk MB (10^6 B) | load s | search peak RSS MiB | QPS (batch) | "
        "QPS (one query) | recall@10 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in r["rows"]:
        lines.append(
            f"| {row['index']} | {row['build_s']:.1f} | {row['build_peak_rss_mb']:.0f} | "
            f"{row['bytes_on_disk'] / 1e6:.0f} | {row['load_s']:.1f} | {row['search_peak_rss_mb']:.0f} | "
            f"{row['qps_batch']:.0f} | {row['qps_single']:.1f} | {row['recall_at_10']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from lens.cmdline import command_line

    argv = list(sys.argv[1:] if argv is None else argv)
    p = Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("--docs", type=int, default=1_000_000)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--queries", type=int, default=200, help="queries searched and checked against exact search")
    p.add_argument("--kinds", default=",".join(KINDS), help=f"index types to measure (default {','.join(KINDS)})")
    p.add_argument("--nlist", type=int, default=None, help="ivf-ondisk lists (default about 4 sqrt(docs), <= 1024)")
    p.add_argument("--nprobe", type=int, default=32)
    p.add_argument("--chunk", type=int, default=10_000, help="documents generated at a time")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work", type=Path, default=None, help="where the indexes are written (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the indexes (default: each is removed once measured)")
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--config", type=Path, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.child is not None:  # one measurement, in a process of its own
        cfg = json.loads(args.config.read_text())
        role, _, kind = args.child.partition(":")
        result = {"truth": lambda: child_truth(cfg), "build": lambda: child_build(cfg, kind),
                  "search": lambda: child_search(cfg, kind)}[role]()
        print(json.dumps(result))
        return 0

    import faiss

    kinds = [k for k in args.kinds.split(",") if k]
    bad = sorted(set(kinds) - set(KINDS))
    if bad or not kinds:
        p.error(f"--kinds: give some of {', '.join(KINDS)} (got {args.kinds!r})")
    if args.docs < 1 or not 1 <= args.shards <= args.docs or args.queries < 1:
        p.error("--docs and --queries must be >= 1, and --shards between 1 and --docs")
    work = Path(tempfile.mkdtemp(prefix="lens-scale-", dir=args.work))
    cfg = {"docs": args.docs, "shards": args.shards, "queries": args.queries, "chunk": args.chunk,
           "seed": args.seed, "nlist": args.nlist or default_nlist(args.docs), "nprobe": args.nprobe,
           "work": str(work)}
    cfg_path = work / "config.json"
    cfg_path.write_text(json.dumps(cfg))
    command = command_line([__file__, *argv])
    print(f"{command}\nwork directory: {work}", flush=True)
    try:
        truth = run_child(cfg_path, "truth")
        rows = []
        for kind in kinds:
            row = {"index": kind, "shards": args.shards, **run_child(cfg_path, f"build:{kind}")}
            row.update(run_child(cfg_path, f"search:{kind}"))
            rows.append(row)
            print(json.dumps(row), flush=True)
            if not args.keep:
                shutil.rmtree(work / kind, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    m = machine()
    result = {"command": command, "date": dt.datetime.now().isoformat(timespec="seconds"),
              "machine": f"{m['arch']}, {m['cores']} CPUs, {m['system']} {m['release']}",
              "faiss": faiss.__version__, "threads": faiss.omp_get_max_threads(), "config": cfg,
              "truth_s": truth["truth_s"], "rows": rows}
    print(write_results(args.results / "scale", result, markdown(result), sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
