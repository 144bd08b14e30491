"""Memory and time of an index's document table (``index.metadata.DocTable``, ``docs.sqlite``) copied into memory
and read in place.

    python benchmarks/doc_table_load.py --docs 500000 --snippet 300

``docs.sqlite`` holds every document's id and metadata; ``lens index build`` stores each document's title and the
first 300 characters of its text there (``lens.indexing.SNIPPET_CHARS``). An index loaded to be changed copies the
table into memory; one loaded to search (``HybridIndex.load(read_only=True)``: ``lens search``, ``lens serve``)
queries the file where it lies. This writes one table of ``--docs`` synthetic documents (ids ``doc000000123``, a
title of six words, a ``--snippet``-character text and one of eight sources) and reads it back in child processes
of their own, each way, after its checksum is verified as a load does: wall time of the load, the process's resident
memory (``VmRSS``) it adds and its peak (``VmHWM``) above the start, then what a search asks of the table: the ids
and metadata of 10 random hits (``fetch``, as every search does; median over ``--queries``) and one metadata filter
(``matching``: the first one scans the table). The file was just written, so the operating system has its pages
cached: reads from a cold disk are not measured.

Writes ``benchmarks/results/doc_table_load.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import RESULTS, machine, proc_memory, run_child, script_command, write_results
from lens.cli_args import Parser

OUT = RESULTS / "doc_table_load"
SOURCES = 8
HITS = 10
MODES = {"copy": "copied into memory (read_only=False)", "in-place": "read in place (read_only=True)"}


def write_table(path: Path, docs: int, snippet: int, seed: int = 0, chunk: int = 20_000) -> None:
    """A docs.sqlite of ``docs`` rows with a title, a text of ``snippet`` characters and a source each."""
    from index.metadata import DocTable, encode_metadata

    rng = np.random.default_rng(seed)
    words = np.array(["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), size=rng.integers(3, 10)))
                      for _ in range(5000)])
    table = DocTable()
    for start in range(0, docs, chunk):
        n = min(chunk, docs - start)
        ids = [f"doc{i:09d}" for i in range(start, start + n)]
        picks = rng.integers(0, len(words), size=(n, 6 + snippet // 5))
        metas = [encode_metadata({"title": " ".join(words[p[:6]]), "text": " ".join(words[p[6:]])[:snippet],
                                  "source": f"s{i % SOURCES}"}, d) for i, (d, p) in enumerate(zip(ids, picks))]
        with table.transaction():
            table.insert(range(start, start + n), ids, metas)
    table.save(path)


def child(path: Path, docs: int, in_place: bool, queries: int) -> dict:
    """Load ``path`` one way in this process (verified first, as ``HybridIndex.load`` verifies every file), then
    answer what a search asks of it."""
    from index.manifest import file_record, verify_stream
    from index.metadata import DocTable, check_filter

    record = file_record(path)
    small = DocTable()  # SQLite and the JSON module warmed up before the baseline
    small.insert([0], ["x"], ['{"source": "s0"}'])
    small.matching(check_filter({"source": "s0"}))
    rss0, hwm0 = proc_memory("VmRSS"), proc_memory("VmHWM")
    start = time.perf_counter()
    with open(path, "rb") as f:
        verify_stream(f, path, record)
        table = DocTable.read(f, path, in_place=in_place)
    seconds = time.perf_counter() - start
    loaded_rss, peak = proc_memory("VmRSS") - rss0, proc_memory("VmHWM") - hwm0
    assert len(table) == docs and table.read_only == in_place
    rng = np.random.default_rng(1)
    fetch_ms = []
    for _ in range(queries):
        hits = rng.integers(0, docs, size=HITS)
        t = time.perf_counter()
        got = table.fetch(hits)
        fetch_ms.append((time.perf_counter() - t) * 1e3)
        assert len(got) == len(set(hits.tolist()))
    t = time.perf_counter()
    matched = table.matching(check_filter({"source": "s3"}))
    filter_s = time.perf_counter() - t
    return {"seconds": seconds, "loaded_rss_bytes": loaded_rss, "peak_rss_bytes": peak,
            "fetch_ms_p50": float(np.median(fetch_ms)), "fetch_ms_p95": float(np.percentile(fetch_ms, 95)),
            "filter_scan_s": filter_s, "filter_matches": int(len(matched)),
            "rss_after_queries_bytes": proc_memory("VmRSS") - rss0}


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def render(meta: dict) -> list[str]:
    copy, lean = (meta["loads"][MODES[m]] for m in ("copy", "in-place"))
    lines = ["# Loading the document table (`docs.sqlite`): copied into memory and read in place", "",
             f"Command: `{meta['command']}`", "",
             f"{meta['docs']:,} synthetic documents (a six-word title, a {meta['snippet']}-character text and a "
             f"source each, as `lens index build` stores them); `docs.sqlite` {meta['file_bytes']:,} B "
             f"({meta['file_bytes'] / meta['docs']:,.0f} B/doc). Each load in a child process of its own, after its "
             "checksum is verified. RSS: resident memory the load added (and after the queries), peak: `VmHWM` "
             f"above the start. fetch: ids and metadata of {HITS} random hits, {meta['queries']:,} times; filter: one "
             "metadata filter matching an eighth of the documents (its first use scans the table). The file's pages "
             "were in the OS cache (just written).", "",
             "| load | seconds | RSS added | peak above start | RSS after queries | fetch p50 ms | fetch p95 ms | "
             "filter scan s |", "|---|---|---|---|---|---|---|---|"]
    for mode, r in meta["loads"].items():
        lines.append(f"| {mode} | {r['seconds']:.2f} | {_mb(r['loaded_rss_bytes'])} | {_mb(r['peak_rss_bytes'])} | "
                     f"{_mb(r['rss_after_queries_bytes'])} | {r['fetch_ms_p50']:.3f} | {r['fetch_ms_p95']:.3f} | "
                     f"{r['filter_scan_s']:.2f} |")
    lines += ["", "Read in place against copied (ratio): load time "
              f"{lean['seconds'] / copy['seconds']:.2f}x, RSS after the queries "
              f"{lean['rss_after_queries_bytes'] / max(copy['rss_after_queries_bytes'], 1):.3f}x, fetch p50 "
              f"{lean['fetch_ms_p50'] / copy['fetch_ms_p50']:.2f}x, filter scan "
              f"{lean['filter_scan_s'] / copy['filter_scan_s']:.2f}x."]
    return lines


def main(argv: list[str] | None = None) -> int:
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--docs", type=int, default=500_000)
    p.add_argument("--snippet", type=int, default=300, help="characters of text per document's metadata")
    p.add_argument("--queries", type=int, default=2000, help="fetches of random hits timed per load")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--child", choices=sorted(MODES), help=argparse.SUPPRESS)
    p.add_argument("--path", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.path, args.docs, args.child == "in-place", args.queries)))
        return 0
    if args.docs < HITS or args.snippet < 0 or args.queries < 1:
        p.error(f"--docs must be at least {HITS}, --snippet at least 0 and --queries at least 1")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "docs.sqlite"
        write_table(path, args.docs, args.snippet)
        loads = {}
        for mode, label in MODES.items():
            loads[label] = run_child(__file__, mode, "--path", str(path), "--docs", str(args.docs), "--queries",
                                     str(args.queries))
        file_bytes = path.stat().st_size
    matches = {r["filter_matches"] for r in loads.values()}
    if len(matches) != 1:
        raise SystemExit(f"the two loads matched {matches} documents for the same filter")
    meta = {"command": script_command(argv, "benchmarks/doc_table_load.py"), "docs": args.docs,
            "snippet": args.snippet, "queries": args.queries, "file_bytes": file_bytes, "loads": loads,
            "machine": machine()}
    print(write_results(args.out, meta, render(meta)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
