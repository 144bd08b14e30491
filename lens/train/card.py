"""The model card (README.md) written beside a trained model: what was trained, on what, how long, where."""

from __future__ import annotations

import math
import os
import platform
import shlex
import sys
from collections import Counter
from pathlib import Path

from lens._io import atomic_write_bytes


def machine_description() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{cpu}, {os.cpu_count()} cores, {gpu}; torch {torch.__version__}, {torch.get_num_threads()} threads"


def write_model_card(path: Path, trainer, rows: list[dict], command: str | None = None) -> None:
    cfg = trainer.config
    command = command or " ".join(shlex.quote(a) for a in [Path(sys.argv[0]).name, *sys.argv[1:]])
    val = [r["val_loss"] for r in rows if isinstance(r.get("val_loss"), float) and not math.isnan(r["val_loss"])]
    lines = [
        "# LENS model card", "",
        f"A LENS lexicon embedder fine-tuned with `lens train` from `{cfg.model}` "
        f"(backbone `{trainer.encoder.config.backbone}`, k = {trainer.encoder.config.num_clusters} clusters).", "",
        "## How it was made", "", "```bash", command, "```", "",
        f"- Training config: `train_config.json` (beside this card); curves: `train_log.csv`, `curves.png`.",
        f"- LoRA r={cfg.lora_r}, alpha={cfg.lora_alpha}, dropout {cfg.lora_dropout}, on "
        f"{'every layer' if cfg.lora_layers is None else f'the top {cfg.lora_layers} layers'} "
        f"({', '.join(cfg.lora_targets)}); cluster head {'trained' if cfg.train_head else 'frozen'}.",
        f"- Optimiser: AdamW, lr {cfg.lr}, warm-up {cfg.warmup_steps} steps then linear decay; temperature "
        f"{cfg.temperature}; query/document lengths {cfg.query_max_length}/{cfg.doc_max_length} tokens in training; "
        f"the model encodes up to {cfg.max_length or trainer.encoder.config.max_length} tokens.",
        f"- Steps: {trainer.step}; prefix cache {getattr(trainer, 'cache_seconds', 0):.0f} s (computed in this run), "
        f"training steps {sum(float(r['step_s']) for r in rows):.0f} s.",
        f"- Final batch loss {rows[-1]['loss']:.3f}" + (f"; validation InfoNCE {val[0]:.3f} -> {val[-1]:.3f}" if val else "")
        + ".",
        f"- Hardware: {machine_description()}.", "",
        "## Data (training splits and weak pairs only; never a test split)", "",
        "| stage | loss | batch | file | examples by task |", "|---|---|---|---|---|",
    ]
    for stage, examples in zip(cfg.stages, trainer.data):
        tasks = ", ".join(f"{t} {n}" for t, n in sorted(Counter(e.task for e in examples).items()))
        lines.append(f"| {stage.name} | {stage.loss} | {stage.batch_size or cfg.batch_size} | "
                     f"{'<br>'.join(stage.data)} | {tasks} |")
    if cfg.val_data:
        lines += ["", f"Validation: {', '.join(cfg.val_data)} (first {cfg.val_examples} examples)."]
    atomic_write_bytes(path / "README.md", ("\n".join(lines) + "\n").encode())
