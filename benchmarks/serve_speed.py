"""What answering over HTTP costs (``lens serve``): latency and throughput of ``POST /search`` against the same
searches called in the process (``SearchService.search``), in one run on one index.

The index is built once from a corpus with the shipped default (LENS lexicon + MiniLM, idf and a BM25 part, as
``lens index build`` makes it) and cached under ``--cache-dir``. After a warm-up pass over the queries, each is searched alone, in
the process and through a server on a free local port (Python's ``urllib``, a new connection per request, as a
simple client does), the two taking turns query by query; then ``--clients`` threads send the same queries at
once, whose queries the server encodes in shared batches (``lens.serve.QueryBatcher``). Reported: the median
and 95th percentile latency and queries per second, and each HTTP figure as a ratio to the in-process one.

    python benchmarks/serve_speed.py --corpus adi --threads 2
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path

from _common import REPO as ROOT, add_data_dir_argument, data_dir, finish, start
from lens.cli_args import Parser


def timings(call, queries: list[str], repeat: int) -> list[float]:
    """Seconds per call of ``call(query)``, every query ``repeat`` times, one after another."""
    return interleaved([call], queries, repeat)[0]


def interleaved(calls, queries: list[str], repeat: int) -> list[list[float]]:
    """Seconds per call of each of ``calls`` on every query ``repeat`` times, the calls taking turns on each query,
    so that a machine's drift over the run falls on all of them alike."""
    out: list[list[float]] = [[] for _ in calls]
    for _ in range(repeat):
        for q in queries:
            for call, times in zip(calls, out):
                start = time.perf_counter()
                call(q)
                times.append(time.perf_counter() - start)
    return out


def summary(seconds: list[float], wall: float | None = None) -> dict:
    ordered = sorted(seconds)
    return {"requests": len(seconds), "p50_ms": 1000 * statistics.median(ordered),
            "p95_ms": 1000 * ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
            "qps": len(seconds) / (wall if wall is not None else sum(seconds))}


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url + "/search", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def concurrent(url: str, queries: list[str], clients: int, k: int) -> dict:
    """Every query sent by each of ``clients`` threads at once; latencies of all, throughput over the wall time."""
    seconds: list[float] = []
    lock = threading.Lock()

    def client(offset: int) -> None:
        mine = timings(lambda q: post(url, {"query": q, "k": k}), queries[offset:] + queries[:offset], 1)
        with lock:
            seconds.extend(mine)

    threads = [threading.Thread(target=client, args=(i * len(queries) // clients,)) for i in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return summary(seconds, time.perf_counter() - start)


def render(results: dict) -> list[str]:
    meta = results["_meta"]
    lines = ["# Serving over HTTP: what `lens serve` adds to a search", "", f"- Command: `{meta['command']}`",
             f"- Machine: {meta['machine']}",
             f"- Index: {meta['documents']:,} documents of `{meta['corpus']}` (`lens index build` with the shipped "
             f"default: {meta.get('parts', 'LENS lexicon + MiniLM')}, flat); {meta['queries']} of its queries, each "
             f"searched alone {meta['repeat']}x, k {meta['k']}."
             " In process: `SearchService.search`; HTTP: `POST /search` to a `lens.serve` server on 127.0.0.1, a "
             "new connection per request (urllib).", "",
             "| path | requests | p50 ms | p95 ms | QPS | QPS / in process |", "|---|---:|---:|---:|---:|---:|"]
    base = results["in_process"]["qps"]
    for key, name in (("in_process", "in process, one at a time"), ("http", "HTTP, one at a time"),
                      ("http_concurrent", f"HTTP, {meta['clients']} clients at once")):
        r = results[key]
        lines.append(f"| {name} | {r['requests']} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {r['qps']:.1f} | "
                     f"{r['qps'] / base:.2f} |")
    for note in meta.get("notes") or []:
        lines += ["", f"- {note}"]
    return lines


def add_search_arguments(p: argparse.ArgumentParser, cache: str) -> None:
    """The arguments of a search timing over one corpus's index (this script's and remote_search.py's)."""
    p.add_argument("--corpus", default="adi", help="a corpus for lens index build (a BEIR or classic set's name "
                                                   "under --data-dir, or a path); its queries are searched")
    add_data_dir_argument(p)
    p.add_argument("--queries", type=int, default=30, help="how many of its queries")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("-k", type=int, default=10)
    p.add_argument("--cache-dir", type=Path, default=ROOT / ".cache" / "lens-bench" / cache)
    p.add_argument("--threads", type=int, default=None)


def corpus_and_queries(args: argparse.Namespace) -> tuple[Path, list[str]]:
    """The corpus ``--corpus`` names and its first ``--queries`` queries; torch's threads set to ``--threads``."""
    import torch

    from lens.corpus import load_queries
    from lens.eval.beir import resolve_dataset

    if args.threads:
        torch.set_num_threads(args.threads)
    corpus = resolve_dataset(args.corpus, data_dir(args.data_dir))
    return corpus, list(load_queries(corpus).values())[: args.queries]


def built_index(corpus: str | Path, out: Path) -> Path:
    """``lens index build`` of ``corpus`` into ``out`` with the shipped default, unless ``out`` holds it already."""
    from lens.cli import main as lens_main

    if not (out / "manifest.json").is_file():
        code = lens_main(["-q", "index", "build", "--corpus", str(corpus), "--output", str(out)])
        if code:
            raise SystemExit(f"lens index build failed ({code})")
    return out


def main(argv=None) -> int:
    p = Parser(description=__doc__.split("\n")[0])
    add_search_arguments(p, "serve")
    p.add_argument("--clients", type=int, default=4)
    args = start(p, argv, "serve_speed", render, level=logging.WARNING, fmt=None)
    if args is None:  # --markdown-only
        return 0
    from lens.serve import SearchService, make_server

    corpus, queries = corpus_and_queries(args)
    index_dir = built_index(corpus, args.cache_dir / Path(str(args.corpus)).name)
    service = SearchService(index_dir)
    for q in queries:  # warm: the first pass at each input length is slow (allocations), and FAISS's threads
        service.search({"query": q, "k": args.k})
    server = make_server(service, "127.0.0.1", 0)
    url = "http://127.0.0.1:%d" % server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        post(url, {"query": queries[0], "k": args.k})
        local, http = interleaved([lambda q: service.search({"query": q, "k": args.k}),
                                   lambda q: post(url, {"query": q, "k": args.k})], queries, args.repeat)
        results = {"in_process": summary(local), "http": summary(http)}
        results["http_concurrent"] = concurrent(url, queries, args.clients, args.k)
    finally:
        server.shutdown()
        server.server_close()
    index = service.searcher.index
    parts = "LENS lexicon + MiniLM" + (", idf" if index.idf else "") + (
        ", its BM25 part at weight 0.1 (searched with its default weights)" if getattr(index, "has_bm25", False) else "")
    return finish(args, results, render, corpus=str(args.corpus), documents=len(index), parts=parts,
                  queries=len(queries), repeat=args.repeat, clients=args.clients, k=args.k)


if __name__ == "__main__":
    sys.exit(main())
