"""Memory and time of ``lens encode``'s writing: every vector held until one write at the end (``write_export``, what
``lens encode`` did before it wrote a chunk at a time) against a chunk at a time (``lens.encode_job.encode_to_file``).

    python benchmarks/encode_memory.py --texts 20000 --clusters 8000 --nonzero 700

The model is left out on purpose: a stand-in encoder (``Stub``) gives each text a seeded random non-negative vector
of ``--clusters`` weights with ``--nonzero`` of them non-zero (the shipped default: k 8000, about 700 non-zeros a
document), in microseconds, so what is measured is what the export path holds and costs beside whatever model
runs. Each path and format runs in a child process of its own: its wall seconds and the peak resident memory
(``VmHWM``) above the start. Both paths write the same bytes (checked).

Writes ``benchmarks/results/encode_memory.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import RESULTS, machine, proc_memory, run_child, script_command, write_results
from lens.cli_args import Parser

OUT = RESULTS / "encode_memory"
PATHS = {"whole": "every vector held, one write (write_export)", "chunked": "a chunk at a time (encode_to_file)"}
FORMATS = ("npy", "qdrant")


class Stub:
    """An encoder that stands in for the model: text i's vector is seeded by its text (the same in every run)."""

    quantize = None

    def __init__(self, clusters: int, nonzero: int) -> None:
        self.clusters, self.nonzero = clusters, nonzero

    def fingerprint(self) -> dict:
        return {"stub": [self.clusters, self.nonzero]}

    def encode_documents(self, texts, **kwargs) -> np.ndarray:
        out = np.zeros((len(texts), self.clusters), dtype=np.float32)
        for i, t in enumerate(texts):
            rng = np.random.default_rng(int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8).digest(), "little"))
            cols = rng.choice(self.clusters, size=self.nonzero, replace=False)
            out[i, cols] = rng.random(self.nonzero, dtype=np.float32) + 1e-3
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def child(path: str, fmt: str, texts: int, clusters: int, nonzero: int, chunk: int) -> dict:
    import torch  # noqa: F401 - what encode_to_file imports (lens.sharding), loaded before the start for both paths
    from tqdm.auto import tqdm  # noqa: F401

    import lens.sharding  # noqa: F401
    from lens.encode_job import TextRecord, encode_to_file
    from lens.export import write_export

    stub, labels = Stub(clusters, nonzero), [f"c{c}" for c in range(clusters)]
    docs = [TextRecord(f"d{i}", f"text {i}") for i in range(texts)]
    out = Path(tempfile.mkdtemp(dir=Path(path).parent)) / f"out.{'npy' if fmt == 'npy' else 'jsonl'}"
    hwm0, start = proc_memory("VmHWM"), time.perf_counter()
    if path.endswith("whole"):
        vectors = stub.encode_documents([d.full_text for d in docs])
        write_export(out, fmt, vectors, [d.id for d in docs], labels)
    else:
        encode_to_file(stub, docs, out, fmt, labels=labels, chunk_size=chunk, show_progress_bar=False)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "peak_rss_bytes": proc_memory("VmHWM") - hwm0, "bytes": out.stat().st_size,
            "sha256": hashlib.sha256(out.read_bytes()).hexdigest()}


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def render(meta: dict) -> list[str]:
    lines = ["# lens encode's writing: every vector held against a chunk at a time", "",
             f"Command: `{meta['command']}`", "",
             f"{meta['texts']:,} texts, each a vector of {meta['clusters']:,} weights with {meta['nonzero']} "
             "non-zero, from a stand-in encoder (the model left out: what is measured is the export path). Each "
             f"run in a child process of its own; the chunked path writes {meta['chunk']:,} texts at a time. Peak: "
             "resident memory (VmHWM) above the child's start.", "",
             "| format | path | seconds | peak memory | file |", "|---|---|---:|---:|---:|"]
    for fmt in meta["formats"]:
        for path, label in PATHS.items():
            r = meta["runs"][fmt][path]
            lines.append(f"| {fmt} | {label} | {r['seconds']:.1f} | {_mb(r['peak_rss_bytes'])} | {_mb(r['bytes'])} |")
    lines += [""]
    for fmt in meta["formats"]:
        whole, chunked = meta["runs"][fmt]["whole"], meta["runs"][fmt]["chunked"]
        lines.append(f"- {fmt}: a chunk at a time against whole (ratio): peak memory "
                     f"{chunked['peak_rss_bytes'] / max(whole['peak_rss_bytes'], 1):.3f}x, time "
                     f"{chunked['seconds'] / whole['seconds']:.2f}x; the same file (sha256 equal: "
                     f"{chunked['sha256'] == whole['sha256']}).")
    m = meta["machine"]
    lines += ["", f"Machine: {m.get('cpu', '?')}, {m.get('cores', '?')} cores, Python {m.get('python', '?')}."]
    return lines


def main(argv: list[str] | None = None) -> int:
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--texts", type=int, default=20_000)
    p.add_argument("--clusters", type=int, default=8000)
    p.add_argument("--nonzero", type=int, default=700)
    p.add_argument("--chunk", type=int, default=1024, help="texts per chunk of the chunked path")
    p.add_argument("--formats", default=",".join(FORMATS), help=f"comma-separated, of {', '.join(FORMATS)}")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--path", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.path, args.child, args.texts, args.clusters, args.nonzero, args.chunk)))
        return 0
    formats = [f for f in args.formats.split(",") if f]
    if not formats or set(formats) - set(FORMATS):
        p.error(f"--formats takes {', '.join(FORMATS)}")
    if min(args.texts, args.clusters, args.nonzero, args.chunk) < 1 or args.nonzero > args.clusters:
        p.error("--texts, --clusters, --nonzero and --chunk must be positive, --nonzero at most --clusters")
    cache = Path(__file__).resolve().parents[1] / ".cache"
    runs: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(dir=cache if cache.is_dir() else None) as tmp:
        for fmt in formats:
            runs[fmt] = {path: run_child(__file__, fmt, "--path", str(Path(tmp) / path), "--texts", str(args.texts),
                                         "--clusters", str(args.clusters), "--nonzero", str(args.nonzero),
                                         "--chunk", str(args.chunk))
                         for path in PATHS}
            if runs[fmt]["whole"]["sha256"] != runs[fmt]["chunked"]["sha256"]:
                raise SystemExit(f"{fmt}: the two paths wrote different files")
    meta = {"command": script_command(argv, "benchmarks/encode_memory.py"), "texts": args.texts,
            "clusters": args.clusters, "nonzero": args.nonzero, "chunk": args.chunk, "formats": formats,
            "runs": runs, "machine": machine()}
    print(write_results(args.out, meta, render(meta)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
