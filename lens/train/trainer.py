"""The training loop: LoRA (PEFT) on a LENS model's decoder, the cluster head optionally trained, one task per batch.

CPU feasibility comes from ``lora_layers``: with LoRA on the top N layers only, the lower layers are frozen, so
their output is computed once per text (``PrefixCache``) and each step runs only the top N layers forward and
backward. With ``lora_layers=None`` every layer is trained and nothing is cached (the paper's setup, for GPUs).

A run writes into its output directory: ``checkpoint/`` (the latest state, replaced atomically every
``checkpoint_every`` steps; ``resume=True`` continues from it and takes exactly the step an uninterrupted run
would), ``train_log.csv`` and ``curves.png``, and finally the trained LENS model itself (``config.json``,
``clusters.safetensors`` holding the trained head, ``clusters.tsv``, ``adapter/`` in PEFT's format).
"""

from __future__ import annotations

import csv
import logging
import math
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from lens._io import atomic_dir, atomic_write_bytes, read_json, write_json
from lens.inputs import Encoded, encode_texts, pad_batch
from lens.layers import embed, num_layers, upper
from lens.pooling import shift_left
from lens.train import losses as L
from lens.train.config import TrainConfig
from lens.train.data import TrainExample, read_examples, task_batches
from lens.train.prefix import PrefixCache

logger = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoint"
LOG_NAME = "train_log.csv"
CURVES_NAME = "curves.png"
TRAIN_CONFIG_NAME = "train_config.json"
ADAPTER_DIR = "adapter"


@dataclass
class Step:
    """One planned optimiser step: its stage and the example indices of its batch."""

    stage: int
    batch: list[int]


def plan_steps(config: TrainConfig, data: list[list[TrainExample]]) -> list[Step]:
    """Every step of every stage, fixed by the seed, so a resumed run takes the same batches."""
    plan: list[Step] = []
    for si, (stage, examples) in enumerate(zip(config.stages, data)):
        bs = stage.batch_size or config.batch_size
        if len(examples) < 2:
            raise ValueError(f"stage {stage.name!r} has {len(examples)} example(s); in-batch negatives need >= 2")
        per_epoch = len(task_batches(examples, bs, config.seed))
        total = stage.steps if stage.steps is not None else max(1, math.ceil(stage.epochs * per_epoch))
        batches: list[list[int]] = []
        epoch = 0
        while len(batches) < total:
            batches += [b for b in task_batches(examples, bs, config.seed + 1000 * si + epoch) if len(b) >= 2]
            epoch += 1
        plan += [Step(si, b) for b in batches[:total]]
    return plan


def lora_target_names(decoder: nn.Module, targets: list[str], first_layer: int) -> list[str]:
    """Full names of the ``targets`` projections in layers ``first_layer`` and up (names like ``layers.7.mlp.up_proj``)."""
    names = []
    for i, layer in enumerate(decoder.layers):
        if i < first_layer:
            continue
        for name, _ in layer.named_modules():
            if name.rsplit(".", 1)[-1] in targets:
                names.append(f"layers.{i}.{name}")
    if not names:
        raise ValueError(f"no module named {targets} in the decoder's layers; set lora_targets to its projection names")
    return names


def learning_rate_factor(step: int, total: int, warmup: int) -> float:
    """Linear warm-up over ``warmup`` steps, then linear decay to 0 at ``total``."""
    if warmup and step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))


class Trainer:
    """Fine-tunes a LENS model directory according to a ``TrainConfig``; see the module docstring."""

    def __init__(self, config: TrainConfig, output_dir: str | os.PathLike, *, prefix_cache_dir=None,
                 show_progress_bar: bool = True):
        self.config = config
        self.output_dir = Path(output_dir)
        self.prefix_cache_dir = Path(prefix_cache_dir) if prefix_cache_dir else None
        self.show_progress_bar = show_progress_bar
        self._setup()

    # ------------------------------------------------------------------------------------------------ setup
    def _setup(self) -> None:
        from peft import LoraConfig, get_peft_model

        from lens.encoder import LensEncoder

        cfg = self.config
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        device = cfg.device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.device = torch.device(device)
        self.bf16 = cfg.bf16 if cfg.bf16 is not None else self.device.type == "cuda"
        self.checkpointing = (cfg.gradient_checkpointing if cfg.gradient_checkpointing is not None
                              else self.device.type == "cuda")
        torch.manual_seed(cfg.seed)
        self.encoder = LensEncoder.from_pretrained(cfg.model, backbone=cfg.backbone, device=device)
        if self.encoder.config.adapter is not None:
            raise ValueError(f"{cfg.model} already holds a trained adapter; start from a clustering directory "
                             "(`lens cluster-vocab`) or merge it first (`lens merge`)")
        self.model = self.encoder.model
        self.tokenizer = self.encoder.tokenizer
        decoder = self.model.decoder
        n = num_layers(decoder)
        k = cfg.lora_layers or n
        if k > n:
            raise ValueError(f"lora_layers={k} but the backbone has {n} layers")
        self.split = n - k
        for p in self.model.parameters():
            p.requires_grad_(False)
        lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout, bias="none",
                          target_modules=lora_target_names(decoder, cfg.lora_targets, self.split))
        self.peft_model = get_peft_model(decoder, lora)  # injects LoRA into `decoder` in place
        self.decoder = decoder
        self.model.head.weight.requires_grad_(cfg.train_head)
        self.bias = nn.Parameter(torch.zeros((), device=self.device))
        self._load_data()
        groups = [{"params": [p for p in self.decoder.parameters() if p.requires_grad], "lr": cfg.lr,
                   "weight_decay": cfg.weight_decay, "name": "lora"}]
        if cfg.train_head:
            groups.append({"params": [self.model.head.weight], "lr": cfg.head_lr or cfg.lr,
                           "weight_decay": cfg.weight_decay, "name": "head"})
        if any("bce" in s.loss for s in cfg.stages):
            groups.append({"params": [self.bias], "lr": cfg.bias_lr, "weight_decay": 0.0, "name": "bias"})
        for g in groups:
            g["base_lr"] = g["lr"]
        self.optimizer = torch.optim.AdamW(groups)
        self.step = 0
        trainable = sum(p.numel() for g in groups for p in g["params"])
        logger.info("training %d parameters: LoRA r=%d on layers %d-%d of %d, head %s; %d steps",
                    trainable, cfg.lora_r, self.split, n - 1, n, "trained" if cfg.train_head else "frozen",
                    len(self.plan))

    def _instruction(self, ex: TrainExample) -> str:
        return ex.instruction or self.config.instructions.get(ex.task) or self.encoder.config.default_instruction

    def _load_data(self) -> None:
        cfg = self.config
        self.data = []
        for si, stage in enumerate(cfg.stages):
            examples = [e for path in stage.data for e in read_examples(path)]
            if stage.max_examples is not None and stage.max_examples < len(examples):
                keep = np.sort(np.random.default_rng(cfg.seed + si).permutation(len(examples))[: stage.max_examples])
                examples = [examples[i] for i in keep]
            self.data.append(examples)
        self.val = [e for path in cfg.val_data for e in read_examples(path)][: cfg.val_examples]
        self.plan = plan_steps(cfg, self.data)
        self.cache: PrefixCache | None = None
        self._items: dict[tuple[str, str], Encoded] = {}
        every = [e for d in self.data for e in d] + self.val
        template = self.encoder.config.query_template
        by_prompt: dict[str, set[str]] = {}
        for e in every:
            by_prompt.setdefault(template.format(instruction=self._instruction(e)), set()).add(e.query)
        for prompt, queries in by_prompt.items():
            qs = sorted(queries)
            for q, item in zip(qs, encode_texts(self.tokenizer, qs, cfg.query_max_length, prompt)):
                self._items[(prompt, q)] = item
        docs = sorted({t for e in every for t in (e.positive, *self._negatives(e))})
        for d, item in zip(docs, encode_texts(self.tokenizer, docs, cfg.doc_max_length)):
            self._items[("", d)] = item
        if self.split:
            fp = self.encoder.config.clustering.lm_head_sha256
            namespace = f"{self.encoder.config.backbone}|{fp}|{self.encoder.config.attention}"
            cache_dir = self.prefix_cache_dir or (self.output_dir / "prefix-cache")
            self.cache = PrefixCache(self.decoder, self.split, namespace, cache_dir)
            had = len(self.cache)
            t = time.perf_counter()
            done = self.cache.fill(list(self._items.values()), self.tokenizer.pad_token_id,
                                   show_progress_bar=self.show_progress_bar)
            self.cache_seconds = time.perf_counter() - t
            logger.info("prefix cache: %d sequences computed in %.0f s (%d were cached)", done, self.cache_seconds, had)

    def _negatives(self, ex: TrainExample, max_negatives: int | None = None) -> list[str]:
        """``ex``'s hard negatives that any stage uses (cut to ``max_negatives`` when given)."""
        caps = [s.max_negatives for s in self.config.stages]
        cap = None if None in caps else max(caps)
        if max_negatives is not None:
            cap = max_negatives if cap is None else min(cap, max_negatives)
        return ex.negatives if cap is None else ex.negatives[:cap]

    # ------------------------------------------------------------------------------------------------ forward
    def _lexicon(self, items: list[Encoded]) -> Tensor:
        """Unnormalised lexicon vectors of ``items`` with gradients through the trained layers and head."""
        if self.cache is not None:
            hidden, att, pool = self.cache.batch(items, torch.float32, self.device)
        else:
            b = pad_batch(items, self.tokenizer.pad_token_id)
            att, pool = b["attention_mask"].to(self.device), b["pool_mask"].to(self.device)
            hidden = embed(self.decoder, b["input_ids"].to(self.device))
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            h = upper(self.decoder, hidden, att, self.split, checkpoint=self.checkpointing)
            mask = shift_left(pool * att)
            return self.model._pool(h, self.model.head.weight, mask, self.model.chunk_elements).float()

    def batch_loss(self, examples: list[TrainExample], weights: dict[str, float],
                   max_negatives: int | None) -> tuple[Tensor, dict[str, float]]:
        """The weighted loss of one batch and each term's value."""
        cfg = self.config
        template = self.encoder.config.query_template
        q_items = [self._items[(template.format(instruction=self._instruction(e)), e.query)] for e in examples]
        doc_texts, positive_index, counts = [], [], []
        for e in examples:
            negs = self._negatives(e, max_negatives)
            positive_index.append(len(doc_texts))
            doc_texts += [e.positive, *negs]
            counts.append(1 + len(negs))
        q = self._lexicon(q_items)
        d = self._lexicon([self._items[("", t)] for t in doc_texts])
        pidx = torch.tensor(positive_index, device=q.device)
        scores = L.cosine_scores(q, d)
        # a copy of query i's positive elsewhere in the batch is not a negative for i
        valid = torch.tensor([[doc_texts[j] != e.positive or j == positive_index[i] for j in range(len(doc_texts))]
                              for i, e in enumerate(examples)], device=q.device)
        terms: dict[str, Tensor] = {}
        for name in weights:
            if name == "infonce":
                terms[name] = L.info_nce(scores, pidx, cfg.temperature, valid)
            elif name == "gte":
                terms[name] = L.improved_info_nce(q, d, pidx, cfg.temperature, valid)
            elif name in ("bce", "bce-graded"):
                labels = max_label = None
                if name == "bce-graded":
                    max_label = examples[0].max_score or 1.0
                    labels = torch.tensor([e.score if e.score is not None else max_label for e in examples])
                targets = L.binary_targets(pidx, len(doc_texts), labels, max_label, cfg.graded_floor).to(q.device)
                terms[name] = L.pairwise_bce(scores, targets, cfg.bce_scale, self.bias, valid)
            elif name == "kl":
                if any(e.teacher is None for e in examples):
                    raise ValueError("loss 'kl' needs teacher scores on every example of its stage")
                teacher = torch.full_like(scores, 0.0)
                own = torch.zeros_like(valid)
                for i, (e, n) in enumerate(zip(examples, counts)):
                    teacher[i, positive_index[i]: positive_index[i] + n] = torch.tensor(e.teacher[:n])
                    own[i, positive_index[i]: positive_index[i] + n] = True
                terms[name] = L.kl_distillation(scores, teacher, cfg.temperature, valid=own)
        loss = sum(weights[n] * t for n, t in terms.items())
        return loss, {n: float(t.detach()) for n, t in terms.items()}

    # ------------------------------------------------------------------------------------------------ training
    def _set_lr(self, step: int) -> float:
        stage = self.config.stages[self.plan[step].stage]
        factor = learning_rate_factor(step, len(self.plan), self.config.warmup_steps)
        scale = (stage.lr / self.config.lr) if stage.lr else 1.0
        for g in self.optimizer.param_groups:
            g["lr"] = g["base_lr"] * factor * (scale if g["name"] != "bias" else 1.0)
        return self.optimizer.param_groups[0]["lr"]

    def train_step(self) -> dict:
        """One optimiser step (``grad_accum`` micro-batches) of the plan; returns its log row."""
        cfg = self.config
        plan = self.plan[self.step]
        stage = cfg.stages[plan.stage]
        weights = stage.loss_weights()
        if self.step == 0 or self.plan[self.step - 1].stage != plan.stage:
            if "bce" in weights or "bce-graded" in weights:  # -log(N-1) for this stage's N candidates per query
                bs = stage.batch_size or cfg.batch_size
                negs = stage.max_negatives if stage.max_negatives is not None else int(
                    np.mean([len(e.negatives) for e in self.data[plan.stage]]))
                with torch.no_grad():
                    self.bias.fill_(L.initial_bias(max(2, bs * (1 + negs))))
        lr = self._set_lr(self.step)
        t = time.perf_counter()
        self.decoder.train()
        examples = [self.data[plan.stage][i] for i in plan.batch]
        micro = np.array_split(np.arange(len(examples)), min(cfg.grad_accum, len(examples) // 2 or 1))
        total, parts = 0.0, {}
        for idx in micro:
            loss, terms = self.batch_loss([examples[i] for i in idx], weights, stage.max_negatives)
            (loss / len(micro)).backward()
            total += float(loss.detach()) / len(micro)
            for n, v in terms.items():
                parts[n] = parts.get(n, 0.0) + v / len(micro)
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm))
        bias = float(self.bias.detach())  # the value this step's loss used
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        row = {"step": self.step, "stage": stage.name, "task": examples[0].task, "loss": total, "lr": lr,
               "grad_norm": grad_norm, "bias": bias, "step_s": time.perf_counter() - t}
        row.update({f"loss_{n}": v for n, v in parts.items()})
        return row

    @torch.no_grad()
    def encode(self, texts: list[str], instruction: str | None = None, batch_size: int = 64) -> np.ndarray:
        """Unit lexicon vectors of ``texts`` as the model stands now (queries when ``instruction`` is given).

        Goes through the prefix cache, so evaluating during or between runs costs only the trained layers.
        """
        self.decoder.eval()
        if instruction is None:
            items = encode_texts(self.tokenizer, texts, self.config.doc_max_length)
        else:
            prompt = self.encoder.config.query_template.format(instruction=instruction)
            items = encode_texts(self.tokenizer, texts, self.config.query_max_length, prompt)
        if self.cache is not None:
            self.cache.fill(items, self.tokenizer.pad_token_id, show_progress_bar=self.show_progress_bar)
        out = []
        for s in range(0, len(items), batch_size):
            out.append(torch.nn.functional.normalize(self._lexicon(items[s: s + batch_size]), dim=-1).cpu().numpy())
        return np.concatenate(out)

    @torch.no_grad()
    def validate(self) -> float:
        """Mean InfoNCE loss over the validation examples (fixed batches), or NaN without validation data."""
        if not self.val:
            return float("nan")
        self.decoder.eval()
        batches = [b for b in task_batches(self.val, self.config.batch_size, seed=12345) if len(b) >= 2]
        values = [float(self.batch_loss([self.val[i] for i in b], {"infonce": 1.0}, None)[0]) for b in batches]
        return float(np.mean(values))

    def train(self, resume: bool = False) -> Path:
        """Run the plan (from the checkpoint when ``resume``), then save the trained model; returns its path."""
        from tqdm.auto import tqdm

        self.output_dir.mkdir(parents=True, exist_ok=True)
        self.config.save(self.output_dir / TRAIN_CONFIG_NAME)
        log_path = self.output_dir / LOG_NAME
        rows: list[dict] = []
        if resume and (self.output_dir / CHECKPOINT_DIR).is_dir():
            self.load_checkpoint(self.output_dir / CHECKPOINT_DIR)
            rows = [r for r in _read_log(log_path) if int(r["step"]) <= self.step]
            logger.info("resumed at step %d of %d", self.step, len(self.plan))
        elif resume:
            logger.warning("no checkpoint in %s; starting from step 0", self.output_dir)
        bar = tqdm(total=len(self.plan), initial=self.step, desc="Training", unit="step",
                   disable=not self.show_progress_bar)
        while self.step < len(self.plan):
            row = self.train_step()
            if self.config.eval_every and (self.step % self.config.eval_every == 0 or self.step == len(self.plan)):
                row["val_loss"] = self.validate()
            rows.append(row)
            bar.set_postfix(loss=f"{row['loss']:.3f}", stage=row["stage"])
            bar.update(1)
            if self.step % self.config.checkpoint_every == 0 or self.step == len(self.plan):
                _write_log(log_path, rows)
                self.save_checkpoint(self.output_dir / CHECKPOINT_DIR)
        bar.close()
        _write_log(log_path, rows)
        plot_curves(rows, self.output_dir / CURVES_NAME)
        self.save_model(self.output_dir, rows)
        return self.output_dir

    # ------------------------------------------------------------------------------------------------ state
    def save_checkpoint(self, path: Path) -> None:
        """Adapter, head, bias, optimiser moments, RNG and step, as safetensors + JSON (no pickles)."""
        from peft import get_peft_model_state_dict
        from safetensors.torch import save

        tensors = {f"adapter.{k}": v.detach().cpu().contiguous()
                   for k, v in get_peft_model_state_dict(self.peft_model).items()}
        tensors["head"] = self.model.head.weight.detach().cpu().contiguous()
        tensors["bias"] = self.bias.detach().cpu().reshape(1)
        tensors["rng"] = torch.get_rng_state()
        state = self.optimizer.state_dict()
        for idx, st in state["state"].items():
            for name, value in st.items():
                tensors[f"optim.{idx}.{name}"] = torch.as_tensor(value).detach().cpu().contiguous()
        groups = [{k: v for k, v in g.items() if k != "params"} | {"params": g["params"]} for g in state["param_groups"]]
        with atomic_dir(path) as tmp:
            atomic_write_bytes(tmp / "state.safetensors", save(tensors))
            write_json(tmp / "state.json", {"step": self.step, "param_groups": groups, "plan_length": len(self.plan)})

    def load_checkpoint(self, path: Path) -> None:
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        meta = read_json(path / "state.json", "checkpoint state")
        if meta["plan_length"] != len(self.plan):
            raise ValueError(f"{path} was written for a plan of {meta['plan_length']} steps, this config makes "
                             f"{len(self.plan)}; resume with the same config and data")
        tensors = load_file(path / "state.safetensors")
        adapter = {k[len("adapter."):]: v for k, v in tensors.items() if k.startswith("adapter.")}
        set_peft_model_state_dict(self.peft_model, adapter)
        with torch.no_grad():
            self.model.head.weight.copy_(tensors["head"])
            self.bias.copy_(tensors["bias"][0])
        torch.set_rng_state(tensors["rng"])
        state: dict = {"state": {}, "param_groups": meta["param_groups"]}
        for key, value in tensors.items():
            if key.startswith("optim."):
                _, idx, name = key.split(".", 2)
                state["state"].setdefault(int(idx), {})[name] = value.to(self.device) if name != "step" else value
        self.optimizer.load_state_dict(state)
        self.step = int(meta["step"])

    def save_model(self, path: Path, rows: list[dict]) -> None:
        """The trained LENS directory: config (adapter named), trained head, clusters.tsv, PEFT adapter."""
        from safetensors.numpy import save

        from lens.clustering import clusters_tsv
        from lens.config import CLUSTERS_NAME, CLUSTERS_TSV

        config = self.encoder.config
        config.adapter = ADAPTER_DIR
        if self.config.max_length is not None:
            config.max_length = self.config.max_length
        config.extra = dict(config.extra, training={
            "steps": self.step, "stages": [s.name for s in self.config.stages], "lora_layers": self.config.lora_layers,
            "train_head": self.config.train_head, "final_loss": rows[-1]["loss"] if rows else None,
            "train_config": TRAIN_CONFIG_NAME,
        })
        head = self.model.head.weight.detach().float().cpu().numpy()
        blob = save({"assignment": self.encoder.assignment.astype(np.int32),
                     "centroids": np.ascontiguousarray(head.astype(np.float16 if self.config.train_head else np.float32))})
        tmp_adapter = path / f".{ADAPTER_DIR}.tmp"
        if tmp_adapter.exists():
            shutil.rmtree(tmp_adapter)
        self.peft_model.save_pretrained(tmp_adapter)
        final_adapter = path / ADAPTER_DIR
        if final_adapter.exists():
            shutil.rmtree(final_adapter)
        os.replace(tmp_adapter, final_adapter)
        atomic_write_bytes(path / CLUSTERS_NAME, blob)
        atomic_write_bytes(path / CLUSTERS_TSV,
                           clusters_tsv(self.encoder.assignment, config.num_clusters, self.tokenizer).encode())
        from lens.train.card import write_model_card

        write_model_card(path, self, rows)
        config.save(path)  # last: the directory is a loadable LENS model only once everything is there


def _write_log(path: Path, rows: list[dict]) -> None:
    import io

    fields: list[str] = []
    for r in rows:
        fields += [k for k in r if k not in fields]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    atomic_write_bytes(path, buf.getvalue().encode())


def _read_log(path: Path) -> list[dict]:
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
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return True
