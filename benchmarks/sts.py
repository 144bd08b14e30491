"""STS Spearman (x100) of LENS (lexicon, its own dense vector) against all-MiniLM-L6-v2, in one run.

    python benchmarks/sts.py --model default --sets stsbenchmark --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SETS = {"stsbenchmark": "stsbenchmark/stsbenchmark.tsv.gz", "sick-r": "sick-r/sick.tsv.gz"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="default")
    p.add_argument("--sets", default="stsbenchmark", help=f"comma-separated, from {sorted(SETS)}")
    p.add_argument("--split", default="test")
    p.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "sts")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "sts")
    args = p.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from lens.eval.sts import evaluate_sts, lens_pair_encoder
    from lens.dense import DenseEncoder
    from lens.encoder import LensEncoder

    lens = LensEncoder.from_pretrained(args.model)
    minilm = DenseEncoder.from_pretrained()
    rows = []
    for name in args.sets.split(","):
        path = args.data / SETS[name]
        encoded: list = []  # the set's LENS vectors, encoded once (output="both") for lexicon and dense

        def both(s1, s2):
            if not encoded:
                encoded.append(lens_pair_encoder(lens, output="both")(s1, s2))
            return encoded[0]

        systems = {
            "minilm": lambda a, b: (minilm.encode(a, show_progress_bar=False), minilm.encode(b, show_progress_bar=False)),
            "lens-lexicon": lambda a, b: (both(a, b)[0].lexicon, both(a, b)[1].lexicon),
            "lens-dense": lambda a, b: (both(a, b)[0].dense, both(a, b)[1].dense),
        }
        for system, fn in systems.items():
            t = time.perf_counter()
            r = evaluate_sts(fn, path, args.split)
            rows.append({"set": name, "split": args.split, "system": system, "spearman": r["spearman"],
                         "pairs": r["pairs"], "seconds": time.perf_counter() - t})
            print(json.dumps(rows[-1]), flush=True)
    from lens.eval.beir import command_line
    from lens.eval.report import write_benchmark

    command = command_line()
    meta = {"command": command, "model": args.model, "rows": rows, "load_avg_1min_after": os.getloadavg()[0]}
    lines = ["# STS: Spearman x 100 (cosine of the pair's vectors)", "", "```bash", command, "```", "",
             f"LENS model: `{args.model}`. sentence1 is encoded as a query behind \"Retrieve semantically similar "
             "text\", sentence2 as a document; MiniLM encodes both plainly.", "",
             "| set | split | system | Spearman | pairs | seconds |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['set']} | {r['split']} | {r['system']} | {r['spearman']:.1f} | {r['pairs']} | {r['seconds']:.0f} |"
              for r in rows]
    print(write_benchmark(args.out, meta, lines), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
