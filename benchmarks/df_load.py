"""Memory and time of loading an index's idf part (``index.df_part``, ``df.npz``) with its rows and read-only.

    python benchmarks/df_load.py --docs 200000 --nonzeros 762 --clusters 8000

A saved index built with idf keeps every document's non-zero lexicon clusters, so that additions and removals keep
the counts exact. Searching needs the counts alone: ``HybridIndex.load(read_only=True)`` (how ``lens search`` and
``lens serve`` load an index) reads ``df.npz``'s ``df`` array instead of its rows. This writes one ``df.npz`` of
``--docs`` synthetic documents with ``--nonzeros`` distinct random clusters each (762: SciFact's mean non-zeros
under the default, ``docs/scale.md``) and reads it back in child processes of their own, each way, after its
checksum is verified as a load does: wall time, the peak of Python-visible allocations during the read
(``tracemalloc``, which numpy reports its arrays to; the modules a first read imports are imported before) and what
stays allocated after it. The read-only load keeps the counts, 8 bytes a cluster at any size; the full load keeps
the rows, which grow with the documents.

Writes ``benchmarks/results/df_load.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import RESULTS, machine, run_child, script_command, write_results
from lens.cli_args import Parser

OUT = RESULTS / "df_load"


def write_part(path: Path, docs: int, nonzeros: int, clusters: int, seed: int = 0, chunk: int = 5000) -> None:
    """A df.npz of ``docs`` rows of ``nonzeros`` distinct clusters each, as ``DocFrequencyPart.write`` saves it."""
    from index.df_part import DocFrequencyPart

    part = DocFrequencyPart(clusters)
    rng = np.random.default_rng(seed)
    for start in range(0, docs, chunk):
        n = min(chunk, docs - start)
        picks = np.argpartition(rng.random((n, clusters), dtype=np.float32), nonzeros, axis=1)[:, :nonzeros]
        part.add_rows([np.sort(r) for r in picks], np.arange(start, start + n))
    part.write(path)


def child(path: Path, documents: int, clusters: int, counts_only: bool) -> dict:
    """Read ``path`` one way in this process (verified first, as ``HybridIndex.load`` verifies every file)."""
    import tracemalloc

    from index.df_part import DF_PART_VERSION, DocFrequencyPart
    from index.manifest import file_record, verify_stream

    record = file_record(path)
    entry = {"version": DF_PART_VERSION, "file": path.name, "dim": clusters, "documents": documents}
    with open(path, "rb") as f, np.load(f) as z:  # the modules a first read imports, kept out of the measurement
        z.files
    tracemalloc.start()
    start = time.perf_counter()
    with open(path, "rb") as f:
        verify_stream(f, path, record)
        part = DocFrequencyPart.read(f, path, entry, clusters, counts_only=counts_only)
    seconds = time.perf_counter() - start
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(part) == documents and int(part.df.sum()) > 0
    return {"seconds": seconds, "traced_peak_bytes": peak, "retained_bytes": current, "df_sum": int(part.df.sum())}


def _size(n: float) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 1e6 else f"{n / 1e3:,.1f} KB"


def render(meta: dict) -> list[str]:
    lines = ["# Loading the idf part (`df.npz`): with its rows and read-only", "",
             f"Command: `{meta['command']}`", "",
             f"{meta['docs']:,} synthetic documents, {meta['nonzeros']} non-zero clusters each of {meta['clusters']}; "
             f"`df.npz` {meta['file_bytes']:,} B ({meta['file_bytes'] / meta['docs']:.0f} B/doc). Each read in a "
             "child process of its own, after its checksum is verified. traced peak / retained: Python-visible "
             "allocations (tracemalloc) at their peak during the read and after it.", "",
             "| load | seconds | traced peak | retained | retained per document |",
             "|---|---|---|---|---|"]
    for mode, r in meta["loads"].items():
        lines.append(f"| {mode} | {r['seconds']:.2f} | {_size(r['traced_peak_bytes'])} | "
                     f"{_size(r['retained_bytes'])} | {r['retained_bytes'] / meta['docs']:,.1f} B |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--docs", type=int, default=200_000)
    p.add_argument("--nonzeros", type=int, default=762)
    p.add_argument("--clusters", type=int, default=8000)
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--child", choices=["rows", "counts"], help=argparse.SUPPRESS)
    p.add_argument("--path", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.path, args.docs, args.clusters, args.child == "counts")))
        return 0
    if not 0 < args.nonzeros <= args.clusters:
        p.error(f"--nonzeros must be within 1..--clusters ({args.clusters}), got {args.nonzeros}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "df.npz"
        write_part(path, args.docs, args.nonzeros, args.clusters)
        loads = {}
        for label, mode in (("with its rows (read_only=False)", "rows"), ("counts only (read_only=True)", "counts")):
            loads[label] = run_child(__file__, mode, "--path", str(path), "--docs", str(args.docs), "--nonzeros",
                                     str(args.nonzeros), "--clusters", str(args.clusters))
        file_bytes = path.stat().st_size
    sums = {r["df_sum"] for r in loads.values()}
    if sums != {args.docs * args.nonzeros}:
        raise SystemExit(f"the two loads counted {sums}, expected {args.docs * args.nonzeros}")
    meta = {"command": script_command(argv, "benchmarks/df_load.py"), "docs": args.docs, "nonzeros": args.nonzeros,
            "clusters": args.clusters, "file_bytes": file_bytes, "loads": loads, "machine": machine()}
    print(write_results(args.out, meta, render(meta)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
