"""Speed, memory and recall of the hybrid vector store (index.HybridIndex) against raw FAISS.

One run:
1. generates topic-structured random vectors of the real hybrid width (lexicon 4000 + dense 384),
2. builds a raw ``faiss.IndexFlatIP`` on exactly the vectors the store keeps (``document_vectors``) and
   a ``HybridIndex`` of type flat, and compares batched QPS, single-query latency and memory,
3. builds hnsw, ivf, sq8 and fp16 stores and measures build time, recall@k against flat, QPS,
   latency and memory.

Writes JSON (``--out``) and a markdown table beside it (same name, ``.md``).

Memory: "index bytes" is the size of the written files (``faiss.write_index`` for raw FAISS; for the
store ``index.faiss`` + ``docs.sqlite`` from ``HybridIndex.save``). "RSS delta" is VmRSS from
/proc/self/status after building minus before; "peak extra" is VmHWM (reset through
/proc/self/clear_refs) during the build minus VmRSS before it, i.e. the build's transient overhead too.
"""

from __future__ import annotations

import datetime as dt
import gc
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np
from _common import machine as machine_facts, write_results

from index import HybridIndex
from index.vectors import document_vectors, query_vectors
from lens.cli_args import Parser

logger = logging.getLogger("speed_index")


# ---- measurement helpers --------------------------------------------------------------------------


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def rss_mb() -> float:
    return _status_kb("VmRSS") / 1024


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False if not permitted."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_mb() -> float:
    return _status_kb("VmHWM") / 1024


class MemoryMeter:
    """RSS before/after and peak during a block (MB)."""

    def __enter__(self) -> "MemoryMeter":
        gc.collect()
        self.peak_ok = reset_peak()
        self.before = rss_mb()
        return self

    def __exit__(self, *exc) -> None:
        self.after = rss_mb()
        self.peak = peak_mb() if self.peak_ok else float("nan")

    def report(self) -> dict:
        return {
            "rss_delta_mb": round(self.after - self.before, 1),
            "peak_extra_mb": round(self.peak - self.before, 1) if self.peak_ok else None,
        }


def best_of(fns: dict, repeats: int, budget_s: float) -> dict[str, float]:
    """Best wall time of each ``fns[name]()`` over up to ``repeats`` rounds (fewer once ``budget_s`` is
    spent). Rounds interleave the functions, so background load hits them alike."""
    best = {name: float("inf") for name in fns}
    start = time.perf_counter()
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
        if time.perf_counter() - start > budget_s:
            break
    return best


def latencies_ms(fns: dict, n: int) -> dict[str, dict]:
    """p50/p95 of single-query calls ``fns[name](i)`` for i < n, interleaved like :func:`best_of`."""
    for fn in fns.values():
        fn(0)  # warm-up
    ts: dict[str, list[float]] = {name: [] for name in fns}
    for i in range(n):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn(i)
            ts[name].append((time.perf_counter() - t0) * 1000)
    return {
        name: {
            "latency_p50_ms": round(float(np.percentile(v, 50)), 3),
            "latency_p95_ms": round(float(np.percentile(v, 95)), 3),
        }
        for name, v in ts.items()
    }


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def dir_bytes(path: Path) -> dict:
    files = {p.name: p.stat().st_size for p in path.iterdir() if p.is_file()}
    return {"files": files, "index_bytes": files.get("index.faiss", 0) + files.get("docs.sqlite", 0)}


# ---- data -----------------------------------------------------------------------------------------


def structured(n: int, dl: int, dd: int, topics: int, seed: int, proto_seed: int, chunk: int = 8192):
    """Topic-structured vectors, filled chunk by chunk into preallocated float32 arrays.

    Lexicon: ``log1p(relu(proto[t] + 0.7 * noise - 1.2))`` where each topic prototype has 60 active
    dims valued U(1, 3): non-negative and sparse-ish (~60 topic + ~4% noise dims non-zero), like
    a lexicon embedding. Dense: ``proto_dense[t] + noise`` (gaussian). Prototypes come from
    ``proto_seed`` so documents and queries share topics.
    """
    prng = np.random.default_rng(proto_seed)
    proto_l = np.zeros((topics, dl), dtype=np.float32)
    for t in range(topics):
        proto_l[t, prng.choice(dl, size=60, replace=False)] = prng.uniform(1, 3, size=60)
    proto_d = prng.standard_normal((topics, dd), dtype=np.float32)
    rng = np.random.default_rng(seed)
    topic = rng.integers(0, topics, size=n)
    lex = np.empty((n, dl), dtype=np.float32)
    den = np.empty((n, dd), dtype=np.float32)
    for s in range(0, n, chunk):
        e = min(s + chunk, n)
        block = rng.standard_normal((e - s, dl), dtype=np.float32)
        block *= 0.7
        block += proto_l[topic[s:e]]
        block -= 1.2
        np.maximum(block, 0, out=block)
        np.log1p(block, out=lex[s:e])
        den[s:e] = proto_d[topic[s:e]] + rng.standard_normal((e - s, dd), dtype=np.float32)
    return lex, den


# ---- benchmark ------------------------------------------------------------------------------------


def recall_at_k(truth: list[list[str]], results) -> float:
    k = len(truth[0]) if truth else 0
    return float(np.mean([len(set(t) & set(r.ids)) / max(len(t), 1) for t, r in zip(truth, results)])) if k else 0.0


def machine() -> dict:
    """The shared machine facts under this report's keys, with FAISS's and numpy's."""
    m = machine_facts()
    return {
        "nproc": m["cores"],
        "faiss_threads": faiss.omp_get_max_threads(),
        "cpu": m["cpu"],
        "mem_total_gb": m["mem_total_gb"],
        "python": m["python"],
        "numpy": np.__version__,
        "faiss": faiss.__version__,
        "faiss_compile": faiss.get_compile_options().strip(),
        "platform": m["platform"],
    }


def main(argv: list[str] | None = None) -> dict:
    from lens.cmdline import command_line

    ap = Parser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="documents")
    ap.add_argument("--lexicon-dim", type=int, default=4000)
    ap.add_argument("--dense-dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--topics", type=int, default=500, help="topics of the synthetic data")
    ap.add_argument("--types", default="hnsw,ivf,sq8,fp16", help="approximate types to compare with flat")
    ap.add_argument("--repeats", type=int, default=3, help="batched-search repeats (best is kept)")
    ap.add_argument("--latency-queries", type=int, default=100, help="single queries timed for latency")
    ap.add_argument("--budget-s", type=float, default=60.0, help="stop repeating a batched search after this")
    ap.add_argument("--out", default="benchmarks/results/speed_index.json")
    ap.add_argument("--workdir", default=None, help="where to save indexes for sizes (default: a temp dir)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    command = command_line(None if argv is None else [__file__, *argv])
    out = Path(args.out)
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="speed_index-"))
    work.mkdir(parents=True, exist_ok=True)
    dl, dd, k = args.lexicon_dim, args.dense_dim, args.k
    report: dict = {
        "command": command,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "params": vars(args),
        "data": (
            f"{args.topics} topics; lexicon = log1p(relu(topic prototype (60 active dims, U(1,3)) + 0.7*N(0,1) - 1.2)), "
            "non-negative and sparse-ish; dense = gaussian topic prototype + N(0,1); queries drawn the same way "
            "(other seed, same prototypes). Weights 0.5/0.5."
        ),
    }
    try:
        t0 = time.perf_counter()
        lex, den = structured(args.n, dl, dd, args.topics, args.seed, proto_seed=args.seed + 1000)
        qlex, qden = structured(args.queries, dl, dd, args.topics, args.seed + 1, proto_seed=args.seed + 1000)
        ids = [f"doc{i:07d}" for i in range(args.n)]
        nz = float((lex[: min(args.n, 2000)] > 0).mean())
        report["data_stats"] = {"lexicon_nonzero_fraction": round(nz, 4), "generate_s": round(time.perf_counter() - t0, 1)}
        logger.info("data: %d x (%d + %d), lexicon nonzero %.3f", args.n, dl, dd, nz)
        qv = query_vectors(qlex, qden, 0.5, 0.5)  # what the store sends to FAISS

        # ---- raw FAISS flat vs store flat ----
        with MemoryMeter() as mm:
            t0 = time.perf_counter()
            raw = faiss.IndexFlatIP(dl + dd)
            for s in range(0, args.n, 4096):
                raw.add(document_vectors(lex[s : s + 4096], den[s : s + 4096]))
            raw_build = time.perf_counter() - t0
        raw_path = work / "raw.faiss"
        faiss.write_index(raw, str(raw_path))
        raw_res: dict = {"build_s": round(raw_build, 2), "index_bytes": raw_path.stat().st_size, **mm.report()}
        raw_path.unlink()
        logger.info("raw flat built: %s", raw_res)

        with MemoryMeter() as mm:
            t0 = time.perf_counter()
            flat = HybridIndex(dl, dd, "flat")
            flat.add(ids, lex, den)
            flat_build = time.perf_counter() - t0
        flat_res: dict = {"build_s": round(flat_build, 2), **mm.report()}
        t0 = time.perf_counter()
        flat.save(work / "flat")
        flat_res["save_s"] = round(time.perf_counter() - t0, 2)
        flat_res.update(dir_bytes(work / "flat"))
        t0 = time.perf_counter()
        loaded = HybridIndex.load(work / "flat")
        flat_res["load_s"] = round(time.perf_counter() - t0, 2)
        del loaded
        gc.collect()
        shutil.rmtree(work / "flat")
        report["load_avg_before_flat_search"] = load_avg()
        best = best_of(
            {"raw": lambda: raw.search(qv, k), "store": lambda: flat.search(qlex, qden, k=k)},
            args.repeats,
            2 * args.budget_s,
        )
        raw_res["qps"] = round(args.queries / best["raw"], 1)
        flat_res["qps"] = round(args.queries / best["store"], 1)
        lat = latencies_ms(
            {
                "raw": lambda i: raw.search(qv[i : i + 1], k),
                "store": lambda i: flat.search(qlex[i], qden[i], k=k),
            },
            args.latency_queries,
        )
        raw_res.update(lat["raw"])
        flat_res.update(lat["store"])
        report["load_avg_after_flat_search"] = load_avg()
        _, raw_labels = raw.search(qv, k)
        logger.info("raw flat: %s", raw_res)
        truth_res = flat.search(qlex, qden, k=k)
        truth = [r.ids for r in truth_res]
        same = np.mean([r.ids == [ids[j] for j in raw_labels[i]] for i, r in enumerate(truth_res)])
        logger.info("store flat: %s", flat_res)
        report["flat"] = {
            "raw_faiss": raw_res,
            "store": flat_res,
            "ratio_store_over_raw": {
                "qps": round(flat_res["qps"] / raw_res["qps"], 3),
                "latency_p50": round(flat_res["latency_p50_ms"] / raw_res["latency_p50_ms"], 3),
                "index_bytes": round(flat_res["index_bytes"] / raw_res["index_bytes"], 4),
                "rss_delta": round(flat_res["rss_delta_mb"] / raw_res["rss_delta_mb"], 4),
            },
            "identical_top_k_fraction": float(same),
            "goals": {"qps_ratio_min": 0.9, "memory_ratio_max": 1.1},
        }
        raw = flat = None  # free them (not `del`: the timing lambdas above still name them)
        gc.collect()
        _write(out, report)

        # ---- approximate / compressed types ----
        variants = {"hnsw": [{"ef_search": 64}, {"ef_search": 128}], "ivf": [{"nprobe": 16}, {"nprobe": 64}]}
        report["types"] = []
        for name in [t for t in args.types.split(",") if t]:
            with MemoryMeter() as mm:
                t0 = time.perf_counter()
                store = HybridIndex(dl, dd, name)
                store.add(ids, lex, den)
                build = time.perf_counter() - t0
            base = {"build_s": round(build, 1), **mm.report()}
            store.save(work / name)
            base.update(dir_bytes(work / name))
            shutil.rmtree(work / name)
            for variant in variants.get(name, [{}]):
                report.setdefault("load_avg_during_types", []).append(load_avg())
                store.set_search_options(**variant)
                t = best_of({"store": lambda: store.search(qlex, qden, k=k)}, args.repeats, args.budget_s)["store"]
                row = {
                    "type": name,
                    "options": store.index_options,
                    f"recall@{k}": round(recall_at_k(truth, store.search(qlex, qden, k=k)), 4),
                    "qps": round(args.queries / t, 1),
                    **latencies_ms({"s": lambda i: store.search(qlex[i], qden[i], k=k)}, args.latency_queries)["s"],
                    **base,
                }
                logger.info("%s: %s", name, row)
                report["types"].append(row)
                _write(out, report)
            store = None  # free it before the next type is built
            gc.collect()
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    _write(out, report)
    return report


def _write(out: Path, report: dict) -> None:
    write_results(out, report, markdown(report), sort_keys=False)


def _mb(b: int) -> str:
    return f"{b / 1024**2:,.0f}"


def markdown(r: dict) -> str:
    m, p = r["machine"], r["params"]
    lines = [
        "# Hybrid index speed and memory",
        "",
        f"- Command: `{r['command']}`",
        f"- Date: {r['date']}",
        f"- Machine: {m['nproc']} CPUs ({m['cpu']}), {m['mem_total_gb']} GiB RAM, FAISS threads {m['faiss_threads']}",
        f"- Software: faiss {m['faiss']} ({m['faiss_compile']}), numpy {m['numpy']}, Python {m['python']}",
        f"- Data: {p['n']:,} documents x ({p['lexicon_dim']} lexicon + {p['dense_dim']} dense) float32, "
        f"{p['queries']} queries, k={p['k']}, seed {p['seed']}. {r['data']}",
        f"  Lexicon non-zero fraction: {r.get('data_stats', {}).get('lexicon_nonzero_fraction')}.",
        "- QPS: batched search of all queries, best of up to "
        f"{p['repeats']} runs. Latency: {p['latency_queries']} single-query calls. Store timings include query "
        "normalisation and id/metadata lookup.",
        "- Memory: index bytes = written file sizes (raw: faiss.write_index; store: index.faiss + docs.sqlite). "
        "RSS delta = VmRSS after build - before (/proc/self/status); peak extra = VmHWM during build - VmRSS before.",
        f"- Load average (1/5/15 min) around the flat search timings: {r.get('load_avg_before_flat_search')} -> "
        f"{r.get('load_avg_after_flat_search')}; raw and store runs are interleaved so background load hits both alike.",
        "",
    ]
    if "flat" in r:
        f = r["flat"]
        raw, st, ratio = f["raw_faiss"], f["store"], f["ratio_store_over_raw"]
        lines += [
            "## Flat: HybridIndex vs raw faiss.IndexFlatIP (same vectors)",
            "",
            "| | build s | QPS | p50 ms | p95 ms | index MiB | RSS delta MiB | peak extra MiB |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for label, x in (("raw IndexFlatIP", raw), ("HybridIndex flat", st)):
            lines.append(
                f"| {label} | {x['build_s']} | {x['qps']} | {x['latency_p50_ms']} | {x['latency_p95_ms']} | "
                f"{_mb(x['index_bytes'])} | {x['rss_delta_mb']:,.0f} | {x['peak_extra_mb']} |"
            )
        lines += [
            f"| **store / raw** | | **{ratio['qps']}x** | {ratio['latency_p50']}x | | **{ratio['index_bytes']}x** | "
            f"{ratio['rss_delta']}x | |",
            "",
            f"Goals: QPS ratio >= 0.9, memory ratio <= 1.1. Top-{p['k']} identical to raw FAISS for "
            f"{f['identical_top_k_fraction'] * 100:.1f}% of queries. Store save {st.get('save_s')} s, "
            f"load (with sha256 check) {st.get('load_s')} s.",
            "",
        ]
    if r.get("types"):
        k = p["k"]
        lines += [
            f"## Index types (recall@{k} against flat)",
            "",
            f"| type | options | build s | recall@{k} | QPS | p50 ms | index MiB | RSS delta MiB | peak extra MiB |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for t in r["types"]:
            opts = ", ".join(f"{a}={b}" for a, b in t["options"].items() if b is not None)
            lines.append(
                f"| {t['type']} | {opts} | {t['build_s']} | {t[f'recall@{k}']} | {t['qps']} | {t['latency_p50_ms']} | "
                f"{_mb(t['index_bytes'])} | {t['rss_delta_mb']:,.0f} | {t['peak_extra_mb']} |"
            )
        lines += [
            "",
            "Build time includes training (ivf k-means, sq8 ranges) and normalisation. Variants of one type share "
            "its build (search options change without re-indexing), hence the repeated build/memory columns.",
            f"Load average (1/5/15 min) while timing these: {r.get('load_avg_during_types')}: other jobs shared "
            "the CPUs, so absolute QPS/latency here are noisier than the interleaved flat comparison above.",
            "Recall depends on the data: these synthetic topics are well separated, which favours ivf (whole "
            "topics fall in few lists); real embeddings may give lower recall at the same settings.",
        ]
        ivf = next((t for t in r["types"] if t["type"] == "ivf"), None)
        if ivf:
            extra = ivf["rss_delta_mb"] - ivf["index_bytes"] / 1024**2
            lines.append(
                f"ivf's RSS delta exceeds its file size by {extra:,.0f} MiB: memory the process kept after k-means "
                "training and list growth, not index data (the file holds the whole index)."
            )
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
