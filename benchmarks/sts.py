"""STS Spearman (x100) of LENS (lexicon, its own dense vector) against all-MiniLM-L6-v2, in one run.

    python benchmarks/sts.py --model default --sets stsbenchmark --threads 2

``--pairing symmetric`` (the default; MTEB's protocol) encodes both sentences as queries behind the STS instruction;
``asymmetric`` encodes sentence2 as a document (the protocol of the earlier results). Give both, comma-separated,
to compare them in one run.
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

from lens.eval.sts import STS_FILES as SETS  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="default")
    p.add_argument("--sets", default="stsbenchmark", help=f"comma-separated, from {sorted(SETS)}")
    p.add_argument("--split", default="test")
    p.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "sts")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--pairing", default="symmetric", help="comma-separated, from symmetric, asymmetric")
    p.add_argument("--instruction", default=None,
                   help='the LENS query instruction (default: STS_INSTRUCTION, "Retrieve semantically similar text")')
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "sts")
    args = p.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from lens.eval.sts import PAIRINGS, STS_INSTRUCTION, lens_pair_encoder, load_sts, sts_score
    from lens.dense import DenseEncoder
    from lens.encoder import LensEncoder

    pairings = args.pairing.split(",")
    unknown = [x for x in pairings if x not in PAIRINGS]
    if unknown:
        p.error(f"unknown --pairing {', '.join(unknown)}; choose from {', '.join(PAIRINGS)}")
    instruction = STS_INSTRUCTION if args.instruction is None else args.instruction
    lens = LensEncoder.from_pretrained(args.model)
    minilm = DenseEncoder.from_pretrained()
    rows = []

    def add(name: str, system: str, pairing: str, a, b, gold, started: float) -> None:
        rows.append({"set": name, "split": args.split, "system": system, "pairing": pairing,
                     "spearman": sts_score(a, b, gold), "pairs": len(gold),
                     "seconds": time.perf_counter() - started})
        print(json.dumps(rows[-1]), flush=True)

    for name in args.sets.split(","):
        s1, s2, gold = load_sts(args.data / SETS[name], args.split)  # read once per set
        t = time.perf_counter()
        add(name, "minilm", "-", minilm.encode(s1, show_progress_bar=False), minilm.encode(s2, show_progress_bar=False),
            gold, t)
        for pairing in pairings:  # LENS encodes each pairing once (output="both"): lexicon and dense share it
            t = time.perf_counter()
            a, b = lens_pair_encoder(lens, output="both", pairing=pairing, instruction=instruction)(s1, s2)
            add(name, "lens-lexicon", pairing, a.lexicon, b.lexicon, gold, t)
            add(name, "lens-dense", pairing, a.dense, b.dense, gold, time.perf_counter())
    from lens.cmdline import command_line
    from lens.eval.report import write_benchmark

    command = command_line()
    meta = {"command": command, "model": args.model, "instruction": instruction, "rows": rows,
            "load_avg_1min_after": os.getloadavg()[0]}
    lines = ["# STS: Spearman x 100 (cosine of the pair's vectors)", "", "```bash", command, "```", "",
             f"LENS model: `{args.model}`. Pairing `symmetric` encodes both sentences as queries behind \"{instruction}\""
             + (" (MTEB's protocol)" if instruction == STS_INSTRUCTION else " (not MTEB's STS instruction)")
             + "; `asymmetric` encodes sentence2 as a document. MiniLM "
             "encodes both plainly. Seconds include encoding (a pairing's lexicon row encodes, its dense row reuses).",
             "", "| set | split | system | pairing | Spearman | pairs | seconds |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['set']} | {r['split']} | {r['system']} | {r['pairing']} | {r['spearman']:.1f} | {r['pairs']} | "
              f"{r['seconds']:.0f} |" for r in rows]
    print(write_benchmark(args.out, meta, lines), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
