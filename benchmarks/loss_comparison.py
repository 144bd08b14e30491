"""InfoNCE vs pointwise BCE vs graded BCE on the same data and step budget (the companion papers' comparison).

Each loss trains the same starting model (LoRA on the top layers + the cluster head, over one shared prefix cache)
for the same steps on the same batches of STS-Benchmark *train* pairs (graded 0-5), then STS-B *test* Spearman of
the lexicon vectors is measured, with the untrained model as the baseline row. InfoNCE and BCE see every pair as
a positive; graded BCE turns the label r into the target 0.7 + 0.3 r/5 (0 for r = 0). A loss named ``NAME:siglip``
starts its BCE bias at SigLIP's -log(N-1) instead of the trainer's fitted start (``TrainConfig.bias_init``).

    lens cluster-vocab --clusters 4000 --out .cache/lens-train/smollm2-k4000   # the untrained start (once)
    python benchmarks/loss_comparison.py --steps 60 --pairs 1920 --threads 2
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from _common import REPO as ROOT, RESULTS, data_dir, write_results
from lens.cli_args import Parser

LOSSES = ("infonce", "bce", "bce-graded", "bce:siglip", "bce-graded:siglip")


def main() -> int:
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("--sts", type=Path, default=data_dir() / "sts/stsbenchmark/stsbenchmark.tsv.gz")
    p.add_argument("--model", default=str(ROOT / ".cache" / "lens-train" / "smollm2-k4000"),
                   help="an untrained clustering (`lens cluster-vocab --clusters 4000 --out DIR`; what make train-default makes)")
    p.add_argument("--losses", default=",".join(LOSSES))
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--pairs", type=int, default=1920, help="STS-B train pairs used (a seeded subset)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lora-layers", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0, help="the training seed (batch order, LoRA start); all rows share it")
    p.add_argument("--eval-split", default="test", choices=("dev", "test"),
                   help="the STS-B split judged (dev for studies that choose a loss; test for the first comparison)")
    p.add_argument("--prefix-cache", type=Path, default=ROOT / ".cache" / "lens-train" / "prefix-loss-comparison")
    p.add_argument("--out", type=Path, default=RESULTS / "loss_comparison")
    args = p.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from lens.eval.sts import STS_INSTRUCTION, evaluate_sts
    from lens.train.config import StageConfig, TrainConfig
    from lens.train.data import sts_pairs, write_examples
    from lens.train.trainer import Trainer

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "stsb-train.jsonl"
        write_examples(data, sts_pairs(args.sts, split="train"))
        for loss in ["untrained", *args.losses.split(",")]:
            name, _, bias_init = loss.partition(":")
            cfg = TrainConfig(
                stages=[StageConfig("sts", [str(data)], loss="infonce" if loss == "untrained" else name,
                                    steps=args.steps, max_examples=args.pairs)],
                model=args.model, lora_layers=args.lora_layers, batch_size=args.batch_size, lr=args.lr,
                warmup_steps=5, eval_every=0, checkpoint_every=10**9, threads=args.threads, device="cpu",
                instructions={"sts": STS_INSTRUCTION}, seed=args.seed,
                **({"bias_init": bias_init} if bias_init else {}),
            )
            t = time.perf_counter()
            trainer = Trainer(cfg, Path(tmp) / loss.replace(":", "-"), prefix_cache_dir=args.prefix_cache)
            train_s, losses = 0.0, []
            if loss != "untrained":
                t0 = time.perf_counter()
                while trainer.step < len(trainer.plan):
                    losses.append(trainer.train_step()["loss"])
                train_s = time.perf_counter() - t0
            result = evaluate_sts(lambda a, b: (trainer.encode(a, STS_INSTRUCTION), trainer.encode(b)),
                                  args.sts, args.eval_split)
            rows.append({"loss": loss, "steps": trainer.step, f"stsb_{args.eval_split}_spearman": result["spearman"],
                         "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
                         "train_s": train_s, "total_s": time.perf_counter() - t})
            print(json.dumps(rows[-1]), flush=True)
    from lens.cmdline import command_line

    command = command_line()
    meta = {"command": command, "steps": args.steps, "pairs": args.pairs, "batch_size": args.batch_size,
            "lora_layers": args.lora_layers, "lr": args.lr, "seed": args.seed, "eval_split": args.eval_split,
            "load_avg_1min_after": os.getloadavg()[0], "rows": rows}
    lines = ["# Loss comparison: InfoNCE vs BCE vs graded BCE", "", "```bash", command, "```", "",
             f"Same start (the untrained default clustering), same {args.steps} steps of the same batches "
             f"({args.batch_size} STS-B train pairs each, from {args.pairs} pairs), LoRA r=32 on the top "
             f"{args.lora_layers} layers + the cluster head, lr {args.lr}, seed {args.seed}. "
             f"Metric: STS-B {args.eval_split} Spearman x 100 of "
             "the lexicon vectors (sentence1 as a query behind the STS instruction, sentence2 as a document). "
             "BCE rows start their bias fitted to the first batch (-log(N-1) - 20 x its mean cosine); `:siglip` "
             "rows at SigLIP's -log(N-1).", "",
             f"| loss | steps | STS-B {args.eval_split} Spearman | first -> last batch loss | train s |", "|---|---|---|---|---|"]
    for r in rows:
        fl = "-" if r["first_loss"] is None else f"{r['first_loss']:.3f} -> {r['last_loss']:.3f}"
        lines.append(f"| {r['loss']} | {r['steps']} | {r[f'stsb_{args.eval_split}_spearman']:.1f} | {fl} | {r['train_s']:.0f} |")
    print(write_results(args.out, meta, lines), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
