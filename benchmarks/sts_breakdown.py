"""Where a model's STS Spearman comes from: LENS lexicon against all-MiniLM-L6-v2 and plain word overlap, per
stratum of pairs (captions, headlines, questions, the rest) and split.

    python benchmarks/sts_breakdown.py --splits dev,test --threads 2

STS-B's genre labels (captions, news, forums) are not in the shared file, so pairs are grouped by their shape
(``lens.eval.sts.pair_stratum``). LENS encodes both sentences as queries behind the STS instruction (MTEB's
protocol, as ``benchmarks/sts.py``); MiniLM encodes them plainly; ``word overlap`` is the Jaccard overlap of the two
sentences' words (``lens.eval.sts.word_overlap``), the score of a model that matches words and nothing else.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lens.eval.sts import STS_FILES as SETS  # noqa: E402
from lens.eval.report import add_markdown_only_arguments, markdown_only, write_benchmark  # noqa: E402

SYSTEMS = ("lens-lexicon", "minilm", "word-overlap")


def render(results: dict) -> list[str]:
    meta = results["_meta"]
    lines = ["# STS by stratum: Spearman x 100 per group of pairs", "", "```bash", meta["command"], "```", "",
             f"LENS model: `{meta['model']}` (lexicon; both sentences as queries behind \"Retrieve semantically "
             "similar text\"). Strata by the pairs' shape (`lens.eval.sts.pair_stratum`; the set's genre labels are "
             "not in the shared file): *question* if a sentence ends with ?, *caption-like* if both begin with a "
             "determiner or number and have at most 15 words (image captions), *headline-like* if neither ends in "
             "sentence punctuation (news headlines), *other* for the rest (forum posts, news prose). *word overlap* "
             "is the Jaccard overlap of the two sentences' words. A stratum under 10 pairs has no correlation.", "",
             "| set | split | stratum | pairs | LENS lexicon | MiniLM | word overlap | LENS - MiniLM |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results["rows"]:
        lens, minilm = r["lens-lexicon"], r["minilm"]
        gap = None if lens is None or minilm is None else lens - minilm
        lines.append(f"| {r['set']} | {r['split']} | {r['stratum']} | {r['pairs']} | {_fmt(lens)} | {_fmt(minilm)} | "
                     f"{_fmt(r['word-overlap'])} | {_fmt(gap, sign=True)} |")
    notes = meta.get("notes") or []
    return lines + (["", "Notes:", *[f"- {n}" for n in notes]] if notes else [])


def _fmt(v: float | None, sign: bool = False) -> str:
    if v is None:  # too few pairs for a correlation
        return "–"
    return f"{v:+.1f}" if sign else f"{v:.1f}"


def _number(v: float) -> float | None:
    """NaN (a stratum too small for a correlation) as None: JSON has no NaN."""
    return None if v != v else v


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="default")
    p.add_argument("--sets", default="stsbenchmark", help=f"comma-separated, from {sorted(SETS)}")
    p.add_argument("--splits", default="dev,test", help="comma-separated splits, each judged apart")
    p.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "sts")
    p.add_argument("--threads", type=int, default=2)
    add_markdown_only_arguments(p, output=ROOT / "benchmarks" / "results" / "sts_breakdown")
    args = p.parse_args(argv)
    if markdown_only(args, args.output, render):
        return 0
    unknown = [s for s in args.sets.split(",") if s not in SETS]
    if unknown:
        p.error(f"unknown --sets {', '.join(unknown)}; choose from {', '.join(sorted(SETS))}")
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    from lens.cmdline import command_line
    from lens.dense import DenseEncoder
    from lens.encoder import LensEncoder
    from lens.eval.sts import lens_pair_encoder, load_sts, pair_cosines, pair_stratum, spearman_by_stratum, word_overlap

    lens = LensEncoder.from_pretrained(args.model)
    minilm = DenseEncoder.from_pretrained()
    rows, started = [], time.perf_counter()
    for name in args.sets.split(","):
        for split in args.splits.split(","):
            s1, s2, gold = load_sts(args.data / SETS[name], split)
            strata = [pair_stratum(a, b) for a, b in zip(s1, s2)]
            scores = {"lens-lexicon": pair_cosines(*lens_pair_encoder(lens)(s1, s2)),
                      "minilm": pair_cosines(minilm.encode(s1, show_progress_bar=False),
                                             minilm.encode(s2, show_progress_bar=False)),
                      "word-overlap": np.array([word_overlap(a, b) for a, b in zip(s1, s2)])}
            by_system = {system: spearman_by_stratum(scores[system], gold, strata) for system in SYSTEMS}
            for stratum, (n, _) in by_system["minilm"].items():
                rows.append({"set": name, "split": split, "stratum": stratum, "pairs": n,
                             **{system: _number(by_system[system][stratum][1]) for system in SYSTEMS}})
                print(rows[-1], flush=True)
    meta = {"command": command_line(), "model": args.model, "seconds": time.perf_counter() - started,
            "load_avg_1min_after": os.getloadavg()[0], "notes": list(args.note)}
    results = {"_meta": meta, "rows": rows}
    print(write_benchmark(args.output, results, render(results)), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
