"""What a training run reports: the step log (``train_log.csv``), the loss curves (``curves.png``) and the model
card (``README.md``: what was trained, on what, how long, where)."""

from __future__ import annotations

import csv
import io
import logging
import math
import os
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from lens.atomic import atomic_write_bytes
from lens.cmdline import command_line

logger = logging.getLogger(__name__)

LOG_NAME = "train_log.csv"
CURVES_NAME = "curves.png"
CARD_NAME = "README.md"


def machine_description() -> str:
    import torch

    from lens.host import cpu_name

    cpu = cpu_name()

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{cpu}, {os.cpu_count()} cores, {gpu}; torch {torch.__version__}, {torch.get_num_threads()} threads"


def model_card(cfg, *, backbone: str, num_clusters: int, max_length: int, steps: int, cache_seconds: float | None,
               stage_examples, rows: list[dict], command: str | None = None, world_size: int = 1) -> str:
    """The model card's Markdown: the command, the settings of ``cfg`` (a ``TrainConfig``), the data per stage;
    ``world_size`` is the number of data-parallel processes (torchrun), named when above one; ``cache_seconds`` is
    None when the run had no frozen-prefix cache."""
    command = command or command_line(sys.argv)
    val = [r["val_loss"] for r in rows if isinstance(r.get("val_loss"), float) and not math.isnan(r["val_loss"])]
    lines = [
        "# LENS model card", "",
        f"A LENS lexicon embedder fine-tuned with `lens train` from `{cfg.model}` "
        f"(backbone `{backbone}`, k = {num_clusters} clusters).", "",
        "## How it was made", "", "```bash", command, "```", "",
        f"- Training config: `train_config.json` (beside this card); curves: `{LOG_NAME}`, `{CURVES_NAME}`.",
        (f"- No LoRA: the decoder frozen (lora_layers 0); cluster head {'trained' if cfg.train_head else 'frozen'}."
         if cfg.lora_layers == 0 else
         f"- LoRA r={cfg.lora_r}, alpha={cfg.lora_alpha}, dropout {cfg.lora_dropout}, on "
         f"{'every layer' if cfg.lora_layers is None else f'the top {cfg.lora_layers} layers'} "
         f"({', '.join(cfg.lora_targets)}); cluster head {'trained' if cfg.train_head else 'frozen'}."),
        f"- Optimiser: AdamW, lr {cfg.lr}, warm-up {cfg.warmup_steps} steps then linear decay; temperature "
        f"{cfg.temperature}; query/document lengths {cfg.query_max_length}/{cfg.doc_max_length} tokens in training; "
        f"the model encodes up to {max_length} tokens.",
        *([f"- Data parallel: {world_size} processes (torchrun), each encoding a slice of every global batch; "
            "embeddings all-gathered, gradients averaged."] if world_size > 1 else []),
        *([f"- Cached contrastive loss (GradCache), chunks of {cfg.cache_chunk} texts."]
          if cfg.cache_chunk else []),
        f"- Steps: {steps}; "
        + ("no prefix cache (no frozen layers), " if cache_seconds is None else
           f"prefix cache {cache_seconds:.0f} s (computed in this run), ") +
        f"training steps {sum(float(r['step_s']) for r in rows):.0f} s.",
        f"- Final batch loss {rows[-1]['loss']:.3f}" if rows else "- No step was taken.",
    ]
    if rows and val:
        lines[-1] += f"; validation InfoNCE {val[0]:.3f} -> {val[-1]:.3f}"
    lines[-1] += "."
    lines += [
        f"- Hardware: {machine_description()}.", "",
        "## Data (training splits and weak pairs only; never a test split)", "",
        "| stage | loss | batch | file | examples by task |", "|---|---|---|---|---|",
    ]
    for stage, examples in zip(cfg.stages, stage_examples):
        tasks = ", ".join(f"{t} {n}" for t, n in sorted(Counter(e.task for e in examples).items()))
        lines.append(f"| {stage.name} | {stage.loss} | {stage.batch_size or cfg.batch_size} | "
                     f"{'<br>'.join(stage.data)} | {tasks} |")
    if cfg.val_data:
        lines += ["", f"Validation: {', '.join(cfg.val_data)} (first {cfg.val_examples} examples)."]
    return "\n".join(lines) + "\n"


def write_log(path: Path, rows: list[dict]) -> None:
    """The step log as CSV (one row per step, columns in first-seen order), atomically."""
    fields: list[str] = []
    for r in rows:
        fields += [k for k in r if k not in fields]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    atomic_write_bytes(path, buf.getvalue().encode())


def read_log(path: Path) -> list[dict]:
    """The rows ``write_log`` wrote (numbers parsed), or [] without a log."""
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return [{k: _number(v) if k not in ("stage", "task") else v for k, v in r.items()} for r in csv.DictReader(f)]


def _number(v: str):
    if v == "":
        return v
    try:
        return int(v)
    except ValueError:
        return float(v)


def plot_curves(rows: list[dict], path: Path) -> bool:
    """Training loss (raw and smoothed) and validation loss against the step, as a PNG; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.info("matplotlib is not installed; skipping %s", path.name)
        return False
    if not rows:
        return False
    steps = np.array([float(r["step"]) for r in rows])
    loss = np.array([float(r["loss"]) for r in rows])
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, loss, alpha=0.3, label="train loss")
    w = max(1, len(loss) // 20)
    if len(loss) >= w:
        ax.plot(steps[w - 1:], np.convolve(loss, np.ones(w) / w, mode="valid"), label=f"train loss ({w}-step mean)")
    val = [(float(r["step"]), float(r["val_loss"])) for r in rows if r.get("val_loss") not in (None, "")
           and not math.isnan(float(r["val_loss"]))]
    if val:
        ax.plot(*zip(*val), "o-", label="validation loss (InfoNCE)")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return True
