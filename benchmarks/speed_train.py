"""Training step time on this machine: every-layer LoRA (the baseline) against top-N LoRA over cached lower layers.

One step = batch of B queries (query tokens after the instruction) and their B positives (document tokens), InfoNCE
with in-batch negatives, forward + backward + AdamW, real SmolLM2 and SciFact train pairs. Each variant is timed
over ``--steps`` steps after one untimed warm-up step, in one process, one after another (never concurrently). The
prefix cache's one-off cost (the frozen layers run once per text) is reported per text.

    python benchmarks/speed_train.py --data .cache/lens-train/scifact-train.jsonl.gz --threads 2
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from _common import RESULTS, machine, write_results
from lens.cli_args import Parser


def run_variant(name, data, args, lora_layers, bf16, cache_dir):
    from lens.train.config import StageConfig, TrainConfig
    from lens.train.trainer import Trainer

    cfg = TrainConfig(stages=[StageConfig("s", [str(data)], loss="infonce", steps=args.steps + 1, max_negatives=0)],
                      model=args.model, lora_layers=lora_layers, batch_size=args.batch_size, bf16=bf16,
                      doc_max_length=args.doc_tokens + 2, query_max_length=args.query_tokens + 40, eval_every=0,
                      checkpoint_every=10**9, threads=args.threads, device="cpu")
    with tempfile.TemporaryDirectory() as out:
        t = time.perf_counter()
        trainer = Trainer(cfg, out, prefix_cache_dir=cache_dir, show_progress_bar=False)
        setup = time.perf_counter() - t
        n_texts = len(trainer._items)
        cache_s = getattr(trainer, "cache_seconds", 0.0)
        trainer.plan = [trainer.plan[0]] * len(trainer.plan)  # the same batch each step: equal work per step
        trainer.train_step()  # warm-up
        times = [trainer.train_step()["step_s"] for _ in range(args.steps)]
    return {"variant": name, "lora_layers": lora_layers or "all", "bf16": bf16, "step_s_median": statistics.median(times),
            "step_s": times, "setup_s": setup, "cache_s_per_text": cache_s / n_texts if cache_s else 0.0,
            "texts": n_texts}


def main() -> int:
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--model", default="default")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--query-tokens", type=int, default=32)
    p.add_argument("--doc-tokens", type=int, default=192)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--top-layers", default="4,8")
    p.add_argument("--bf16", action="store_true", help="also time bf16 autocast for the first top-N variant")
    p.add_argument("--out", type=Path, default=RESULTS / "speed_train")
    args = p.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from lens.train.data import read_examples, write_examples

    examples = read_examples(args.data)[: args.batch_size]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "batch.jsonl"
        write_examples(data, examples)
        rows.append(run_variant("every layer (baseline)", data, args, None, False, None))
        print(json.dumps(rows[-1]), flush=True)
        for i, n in enumerate(int(x) for x in args.top_layers.split(",")):
            rows.append(run_variant(f"top {n} layers, cached prefix", data, args, n, False, Path(tmp) / f"c{n}"))
            print(json.dumps(rows[-1]), flush=True)
            if args.bf16 and i == 0:
                rows.append(run_variant(f"top {n} layers, cached prefix, bf16 autocast", data, args, n, True,
                                        Path(tmp) / f"c{n}"))
                print(json.dumps(rows[-1]), flush=True)
    base = rows[0]["step_s_median"]
    for r in rows:
        r["speedup"] = base / r["step_s_median"]
    from lens.cmdline import command_line

    command, m = command_line(), machine()
    meta = {"command": command, "machine": f"{m['processor']}, {m['cores']} cores",
            "load_avg_1min_after": os.getloadavg()[0], "batch_size": args.batch_size,
            "query_tokens": args.query_tokens, "doc_tokens": args.doc_tokens, "threads": args.threads, "rows": rows}
    lines = ["# Training step time (CPU)", "", "```bash", command, "```", "",
             f"Batch {args.batch_size} queries ({args.query_tokens} tokens after the instruction) + {args.batch_size} "
             f"positives ({args.doc_tokens} tokens), InfoNCE with in-batch negatives, forward + backward + AdamW, "
             f"SmolLM2-135M (30 layers), {args.threads} threads, median of {args.steps} steps after a warm-up. "
             f"Load average after the run: {meta['load_avg_1min_after']:.2f}.", "",
             "| variant | step s (median) | speed-up vs baseline | one-off prefix cache s/text |", "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['step_s_median']:.2f} | {r['speedup']:.1f}x | {r['cache_s_per_text']:.3f} |")
    print(write_results(args.out, meta, lines), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
