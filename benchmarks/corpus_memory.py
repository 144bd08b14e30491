"""Memory and time of the corpus an index build holds: loaded into memory (``lens.corpus.load_corpus``) against read
where it lies (``lens.corpus.CorpusFile``, what ``lens index build`` and ``lens index add`` open a .jsonl as), plain
and gzipped.

    python benchmarks/corpus_memory.py --docs 200000 --chars 1000

Writes a JSONL corpus of ``--docs`` synthetic documents (an id, a six-word title, a ``--chars``-character text and a
source each) and a gzipped copy, and opens them each way in a child process of its own: wall time and the resident
memory (``VmRSS``) the open adds, then one pass over every document's text a chunk of ``--chunk`` at a time
(``lens.corpus.DocumentTexts``, as a build hands texts to the encoder) with its time and the peak (``VmHWM``) above
the start. Every build and every torchrun rank opens its corpus (a rank encodes its share of it), so the RSS added is
what each holds for the corpus before any model. The file was just written, so its pages were in the OS cache: a cold disk is not measured.

Writes ``benchmarks/results/corpus_memory.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import RESULTS, machine, proc_memory, run_child, script_command, write_results
from lens.cli_args import Parser

OUT = RESULTS / "corpus_memory"
MODES = {"loaded": "loaded into memory (load_corpus)", "in-place": "read where it lies (CorpusFile)",
         "in-place-gz": "gzipped, read where it lies (CorpusFile)"}


def write_corpus(path: Path, docs: int, chars: int, seed: int = 0, chunk: int = 10_000) -> None:
    rng = np.random.default_rng(seed)
    words = np.array(["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), size=rng.integers(3, 10)))
                      for _ in range(5000)])
    with open(path, "w", encoding="utf-8") as f:
        for start in range(0, docs, chunk):
            n = min(chunk, docs - start)
            picks = rng.integers(0, len(words), size=(n, 6 + chars // 5))
            f.writelines(json.dumps({"_id": f"doc{i:09d}", "title": " ".join(words[p[:6]]),
                                     "text": " ".join(words[p[6:]])[:chars], "source": f"s{i % 8}"}) + "\n"
                         for i, p in zip(range(start, start + n), picks))


def child(path: Path, docs: int, mode: str, chunk: int) -> dict:
    from lens.corpus import CorpusFile, DocumentTexts, load_corpus

    rss0, hwm0 = proc_memory("VmRSS"), proc_memory("VmHWM")
    start = time.perf_counter()
    if mode == "in-place-gz":
        path = path.with_name(path.name + ".gz")
    corpus = load_corpus(path) if mode == "loaded" else CorpusFile.scan(path)
    open_s = time.perf_counter() - start
    open_rss = proc_memory("VmRSS") - rss0
    assert len(corpus) == docs
    texts = DocumentTexts(corpus)
    start, chars = time.perf_counter(), 0
    for a in range(0, docs, chunk):
        chars += sum(len(t) for t in texts[a : a + chunk])
    return {"open_s": open_s, "open_rss_bytes": open_rss, "pass_s": time.perf_counter() - start, "chars": chars,
            "peak_rss_bytes": proc_memory("VmHWM") - hwm0, "rss_after_bytes": proc_memory("VmRSS") - rss0}


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def render(meta: dict) -> list[str]:
    loaded, lean = (meta["opens"][MODES[m]] for m in ("loaded", "in-place"))
    packed = meta["opens"].get(MODES["in-place-gz"])
    lines = ["# The corpus a build holds: loaded into memory against read where it lies", "",
             f"Command: `{meta['command']}`", "",
             f"{meta['docs']:,} synthetic documents (an id, a six-word title, a {meta['chars']:,}-character text and "
             f"a source each); the .jsonl is {meta['file_bytes']:,} B ({meta['file_bytes'] / meta['docs']:,.0f} "
             "B/doc). Each open in a child process of its own: its seconds and the resident memory it added, then "
             f"one pass over every text, {meta['chunk']:,} documents at a time, as a build hands them to the "
             "encoder (seconds, peak RSS above the start, RSS after). The file's pages were in the OS cache.", "",
             "| corpus | open s | RSS added by the open | text pass s | peak above start | RSS after the pass |",
             "|---|---|---|---|---|---|"]
    for mode, r in meta["opens"].items():
        lines.append(f"| {mode} | {r['open_s']:.2f} | {_mb(r['open_rss_bytes'])} | {r['pass_s']:.2f} | "
                     f"{_mb(r['peak_rss_bytes'])} | {_mb(r['rss_after_bytes'])} |")
    lines += ["", f"Read where it lies against loaded (ratio): RSS added by the open "
              f"{lean['open_rss_bytes'] / max(loaded['open_rss_bytes'], 1):.3f}x "
              f"({lean['open_rss_bytes'] / meta['docs']:.1f} against {loaded['open_rss_bytes'] / meta['docs']:.0f} "
              f"B/doc), peak {lean['peak_rss_bytes'] / max(loaded['peak_rss_bytes'], 1):.3f}x, open time "
              f"{lean['open_s'] / loaded['open_s']:.2f}x, text pass {lean['pass_s'] / loaded['pass_s']:.2f}x."]
    if packed is not None:
        lines += ["", f"Gzipped ({meta.get('gz_bytes', 0):,} B), read where it lies against the plain file read so "
                  f"(ratio): RSS added by the open {packed['open_rss_bytes'] / max(lean['open_rss_bytes'], 1):.2f}x, "
                  f"peak {packed['peak_rss_bytes'] / max(lean['peak_rss_bytes'], 1):.2f}x, open time "
                  f"{packed['open_s'] / lean['open_s']:.2f}x, text pass {packed['pass_s'] / lean['pass_s']:.2f}x "
                  "(one forward pass of decompression)."]
    lines += ["", f"Machine: {meta['machine'].get('cpu', '?')}, {meta['machine'].get('cores', '?')} cores, Python "
              f"{meta['machine'].get('python', '?')}."]
    return lines


def main(argv: list[str] | None = None) -> int:
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--docs", type=int, default=200_000)
    p.add_argument("--chars", type=int, default=1000, help="characters of text per document")
    p.add_argument("--chunk", type=int, default=256, help="documents per slice of the text pass")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--child", choices=sorted(MODES), help=argparse.SUPPRESS)
    p.add_argument("--path", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.path, args.docs, args.child, args.chunk)))
        return 0
    if args.docs < 1 or args.chars < 1 or args.chunk < 1:
        p.error("--docs, --chars and --chunk must be positive")
    with tempfile.TemporaryDirectory(dir=Path(__file__).resolve().parents[1] / ".cache"
                                     if (Path(__file__).resolve().parents[1] / ".cache").is_dir() else None) as tmp:
        path = Path(tmp) / "corpus.jsonl"
        write_corpus(path, args.docs, args.chars)
        with open(path, "rb") as src, gzip.open(path.with_name(path.name + ".gz"), "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst)
        gz_bytes = path.with_name(path.name + ".gz").stat().st_size
        opens = {}
        for mode, label in MODES.items():
            opens[label] = run_child(__file__, mode, "--path", str(path), "--docs", str(args.docs), "--chunk",
                                     str(args.chunk))
        file_bytes = path.stat().st_size
    if len({r["chars"] for r in opens.values()}) != 1:
        raise SystemExit(f"the opens read different texts: {opens}")
    meta = {"command": script_command(argv, "benchmarks/corpus_memory.py"), "docs": args.docs, "chars": args.chars,
            "chunk": args.chunk, "file_bytes": file_bytes, "gz_bytes": gz_bytes, "opens": opens,
            "machine": machine()}
    print(write_results(args.out, meta, render(meta)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
