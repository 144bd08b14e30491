"""MNTP warm-up (LLM2Vec, BehnamGhader et al. 2024): adapt a decoder pretrained causal to bidirectional attention.

A decoder that suddenly attends both ways has never seen a future token; LLM2Vec first trains it, with LoRA, to
predict masked tokens from both sides ("masked next-token prediction": the token masked at position i is predicted
by the output at i - 1, the position that predicted it as a causal LM). Contrastive training then starts from the
merged result. Here the classes are the LENS clusters (the target is the masked token's cluster, scored by the
model's cluster head), so the warm-up trains exactly the outputs the lexicon pools; the head itself stays frozen.

``MNTPWarmup(config, out).run()`` (``lens mntp``) writes a standalone LENS directory: bidirectional attention, the
LoRA weights merged into a bundled backbone (``lens.encoder.LensEncoder.save_pretrained``), the clusters
unchanged, plus ``mntp_config.json``, ``mntp_log.csv`` and the run's last ``checkpoint/``. ``lens train --model
OUT`` continues from it.
The texts are the documents (positives and negatives) of training files: never an evaluation corpus.

At scale it runs as ``lens train`` does: under ``torchrun`` / ``accelerate launch`` each rank takes a contiguous
slice of every step's batch (``lens.train.distributed``) and the LoRA gradients are averaged, so N ranks take
exactly one process's step; ``micro_batch_size`` and ``gradient_checkpointing`` fit a 7B decoder's batch in
memory. Every ``checkpoint_every`` steps rank 0 writes ``OUT/checkpoint`` (``lens.train.checkpoint``) and
``resume=True`` continues from it. A step's texts and masks are functions of the seed and the step alone, so a
resumed run, on any number of ranks, takes the steps an uninterrupted one would.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from lens.atomic import read_json, write_json
from lens.inputs import encode_texts, pad_batch, special_ids
from lens.layers import embed, upper
from lens.train import losses as L
from lens.train.checkpoint import discard_checkpoint, load_checkpoint, save_checkpoint
from lens.train.config import ALL_PROJECTIONS
from lens.train.data import read_examples, seeded_subset
from lens.train.distributed import all_reduce_gradients, all_reduce_mean, check_same, init_from_env, shard_slice
from lens.train.stopping import StopRule

logger = logging.getLogger(__name__)

MNTP_FORMAT_VERSION = 1
MNTP_CONFIG_NAME = "mntp_config.json"
MNTP_LOG_NAME = "mntp_log.csv"
CHECKPOINT_DIR = "checkpoint"
# settings a resumed run may change: they do not change what a step computes
RESUMABLE_CHANGES = {"threads", "device", "checkpoint_every", "micro_batch_size", "gradient_checkpointing", "notes"}
MASK_FALLBACK = "_"  # LLM2Vec's mask for tokenizers without a mask token (Llama, Mistral; SmolLM2 too)


@dataclass
class MNTPConfig:
    """An MNTP warm-up run (saved as ``mntp_config.json`` beside the model it writes)."""

    data: list[str]  # training JSONL(.gz) files: their distinct documents are the texts
    model: str = "default"  # a LENS clustering directory without an adapter (`lens cluster-vocab`)
    steps: int = 100
    batch_size: int = 8
    max_length: int = 128  # tokens per text, BOS and EOS included
    mask_rate: float = 0.2  # LLM2Vec's rate for Llama-class models
    lr: float = 2e-4
    warmup_steps: int = 10
    max_grad_norm: float = 1.0
    lora_r: int = 32
    lora_alpha: int = 64
    max_texts: int | None = 20_000  # a seeded sample of the documents (None: all)
    seed: int = 0
    checkpoint_every: int = 100  # steps between checkpoints (resume=True continues from the last)
    micro_batch_size: int | None = None  # texts per forward on a rank (None: its whole slice); same gradients
    gradient_checkpointing: bool = False  # recompute each layer in the backward pass (memory for time)
    notes: list[str] = field(default_factory=list)  # for people: what the run is for, how to run it
    threads: int | None = None
    device: str | None = None  # default: cuda when present
    format_version: int = MNTP_FORMAT_VERSION

    def __post_init__(self) -> None:
        if not self.data:
            raise ValueError("MNTP needs training files (data): their documents are the texts it masks")
        if self.steps < 1 or self.batch_size < 1 or self.max_length < 4:
            raise ValueError(f"steps and batch_size must be >= 1 and max_length >= 4, got {self.steps}, "
                             f"{self.batch_size}, {self.max_length}")
        if self.checkpoint_every < 1 or (self.micro_batch_size is not None and self.micro_batch_size < 1):
            raise ValueError(f"checkpoint_every and micro_batch_size must be >= 1, got {self.checkpoint_every}, "
                             f"{self.micro_batch_size}")
        if not 0.0 < self.mask_rate < 1.0:
            raise ValueError(f"mask_rate must be in (0, 1), got {self.mask_rate}")
        if self.format_version > MNTP_FORMAT_VERSION:
            raise ValueError(f"{MNTP_CONFIG_NAME} format {self.format_version} is newer than this LENS reads "
                             f"({MNTP_FORMAT_VERSION}); upgrade lexlens")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "MNTPConfig":
        unknown = set(d) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown MNTP settings {sorted(unknown)}")
        return cls(**d)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "MNTPConfig":
        return cls.from_dict(read_json(path, "MNTP config"))


def mntp_texts(paths: list[str], max_texts: int | None, seed: int) -> list[str]:
    """The distinct documents (positives, then negatives) of training files, a seeded sample of ``max_texts``."""
    texts = list(dict.fromkeys(t for p in paths for e in read_examples(p) for t in (e.positive, *e.negatives)))
    texts = [t for t in texts if t.strip()]
    if not texts:
        raise ValueError(f"no document text in {paths}")
    return seeded_subset(texts, max_texts, seed)


def mask_token_id(tokenizer) -> int:
    """The tokenizer's mask token, else LLM2Vec's ``_`` (a single token in Llama-family vocabularies)."""
    if tokenizer.mask_token_id is not None:
        return int(tokenizer.mask_token_id)
    ids = tokenizer(MASK_FALLBACK, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise ValueError(f"this tokenizer has no mask token and {MASK_FALLBACK!r} is not one token; MNTP needs one")
    return int(ids[0])


def step_seed(seed: int, step: int) -> int:
    """The seed of a step's masks: a function of the run's seed and the step alone (so resuming draws the same)."""
    return (seed * 1_000_003 + step) % (2 ** 63)


def check_run_target(out: Path) -> Path:
    """``lens.model_dir.check_model_target``, except that a directory holding an unfinished MNTP run (its config
    and checkpoint) is this run's own and may be resumed or replaced."""
    from lens.model_dir import check_model_target

    if (out / CHECKPOINT_DIR).is_dir() and (out / MNTP_CONFIG_NAME).is_file():
        return out
    return check_model_target(out)


class MNTPWarmup:
    """Runs an ``MNTPConfig`` and writes the warmed model to ``out`` (see the module docstring)."""

    def __init__(self, config: MNTPConfig, out: str | os.PathLike, show_progress_bar: bool = True):
        from peft import LoraConfig, get_peft_model

        from lens.encoder import LensEncoder
        from lens.train.trainer import lora_target_names

        self.config, self.out = config, check_run_target(Path(out))
        self.dist = init_from_env(config.device)
        if config.batch_size < self.dist.world_size:
            raise ValueError(f"batch_size {config.batch_size} is smaller than the {self.dist.world_size} processes "
                             "sharing it; raise batch_size or launch fewer processes")
        self.show_progress_bar = show_progress_bar and self.dist.is_main
        if config.threads:
            torch.set_num_threads(config.threads)
        self.device = self.dist.device
        torch.manual_seed(config.seed)  # the LoRA start: the same on every rank
        # float32 weights on every device (bf16 through autocast on CUDA): the merged result is saved exactly, as
        # `lens merge` saves; weights loaded in bf16 would round the update away and fail the LM-head check
        self.encoder = LensEncoder.from_pretrained(config.model, attention="bidirectional", device=str(self.device),
                                                   dtype=torch.float32)
        if self.encoder.config.convention != "lens":  # the paper's checkpoints tokenise and pool their own way
            raise ValueError(f"{config.model} is a model of the {self.encoder.config.convention!r} convention (a released "
                             "checkpoint); training tokenises and pools the LENS way: start from `lens cluster-vocab`")
        if self.encoder.config.adapter is not None:
            raise ValueError(f"{config.model} holds a trained adapter; MNTP starts from a clustering directory "
                             "(`lens cluster-vocab`) or a merged one (`lens merge`)")
        model = self.encoder.model
        for p in model.parameters():
            p.requires_grad_(False)
        lora = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=0.0, bias="none",
                          target_modules=lora_target_names(model.decoder, ALL_PROJECTIONS, 0))
        self.peft = get_peft_model(model.decoder, lora)  # LoRA injected into the decoder in place
        self.params = [p for p in model.decoder.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=config.lr, weight_decay=0.0)
        self.texts = mntp_texts(config.data, config.max_texts, config.seed)
        self.order = self._order()
        self.mask_id = mask_token_id(self.encoder.tokenizer)
        self.assignment = torch.as_tensor(self.encoder.assignment, device=self.device)
        self.generator = torch.Generator(device=self.device).manual_seed(config.seed)
        self.step = 0
        logger.info("MNTP: %d texts, %d steps of %d, mask rate %.2f (mask id %d), LoRA r=%d on every layer",
                    len(self.texts), config.steps, config.batch_size, config.mask_rate, self.mask_id, config.lora_r)

    def _order(self) -> np.ndarray:
        """Text indices of the whole run: seeded passes over the texts, each in a new order, cut into steps."""
        cfg, rng = self.config, np.random.default_rng(self.config.seed)
        need = cfg.steps * cfg.batch_size
        passes = [rng.permutation(len(self.texts)) for _ in range(math.ceil(need / len(self.texts)))]
        return np.concatenate(passes)[:need]

    def step_texts(self, step: int) -> list[str]:
        """The texts of step ``step`` (0-based), the same on every rank and in every run with this config."""
        b = self.config.batch_size
        return [self.texts[i] for i in self.order[step * b:(step + 1) * b]]

    def _masked(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(corrupted ids, attention mask, target clusters or ``IGNORE``) of the texts, masks drawn from
        ``self.generator`` over the whole batch (so every rank draws what one process would)."""
        tok = self.encoder.tokenizer
        batch = pad_batch(encode_texts(tok, texts, self.config.max_length,
                                       normalization=self.encoder.config.text_normalization), tok.pad_token_id)
        ids, att = batch["input_ids"].to(self.device), batch["attention_mask"].to(self.device)
        maskable = batch["pool_mask"].to(self.device).bool() & (ids != special_ids(tok)[1])  # the text, not EOS
        corrupted, targets = L.mask_tokens(ids, maskable, self.config.mask_rate, self.mask_id, self.generator)
        clusters = torch.where(targets == L.IGNORE, targets, self.assignment[targets.clamp(min=0)])
        return corrupted, att, clusters

    def _logits(self, ids: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        """Cluster logits (B, L, k) of the corrupted ids through the decoder attending both ways."""
        model = self.encoder.model
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.device.type == "cuda"):
            hidden = upper(model.decoder, embed(model.decoder, ids), att, 0,
                           checkpoint=self.config.gradient_checkpointing)
            return model.head(hidden)

    @staticmethod
    def _hits(logits: torch.Tensor, clusters: torch.Tensor) -> int:
        """Masked tokens whose cluster the logits one position to the left rank first."""
        target = clusters[:, 1:]
        return int(((logits[:, :-1].argmax(-1) == target) & (target != L.IGNORE)).sum())

    def loss(self, texts: list[str]) -> tuple[torch.Tensor, float]:
        """MNTP loss of a batch in this process (masks from ``self.generator``), and the share of masked tokens
        whose cluster ranks first."""
        ids, att, clusters = self._masked(texts)
        logits = self._logits(ids, att)
        loss = L.masked_next_token_loss(logits, clusters)
        return loss, self._hits(logits.detach(), clusters) / int((clusters[:, 1:] != L.IGNORE).sum())

    def _micro_batches(self, rows: slice) -> list[slice]:
        size = self.config.micro_batch_size or max(1, rows.stop - rows.start)
        return [slice(i, min(i + size, rows.stop)) for i in range(rows.start, rows.stop, size)]

    def train_step(self) -> dict:
        """One optimiser step on the step's batch: this rank's slice in micro-batches, each scaled so that the
        ranks' averaged gradient is the gradient of the mean loss over the whole batch's masked tokens."""
        from lens.train.trainer import learning_rate_factor

        cfg, ctx, t = self.config, self.dist, time.perf_counter()
        lr = cfg.lr * learning_rate_factor(self.step, cfg.steps, cfg.warmup_steps)
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        texts = self.step_texts(self.step)
        self.generator.manual_seed(step_seed(cfg.seed, self.step))
        ids, att, clusters = self._masked(texts)
        total = int((clusters[:, 1:] != L.IGNORE).sum())
        loss_sum, hits = 0.0, 0
        for rows in self._micro_batches(shard_slice(len(texts), ctx.rank, ctx.world_size)):
            width = int(att[rows].sum(dim=1).max())  # right padding: columns past it are padding in these rows
            logits = self._logits(ids[rows, :width], att[rows, :width])
            part = L.masked_next_token_loss(logits, clusters[rows, :width], reduction="sum")
            (part * (ctx.world_size / total)).backward()
            loss_sum += float(part.detach())
            hits += self._hits(logits.detach(), clusters[rows, :width])
        all_reduce_gradients(self.params, ctx)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        world = ctx.world_size
        return {"step": self.step, "loss": all_reduce_mean(loss_sum, ctx) * world / total,
                "accuracy": all_reduce_mean(hits, ctx) * world / total, "lr": lr, "grad_norm": grad_norm,
                "step_s": time.perf_counter() - t}

    def save_checkpoint(self) -> None:
        """Rank 0 writes ``OUT/checkpoint`` and the run's config (the state is the same on every rank); the others
        wait."""
        if self.dist.is_main:
            self.out.mkdir(parents=True, exist_ok=True)
            write_json(self.out / MNTP_CONFIG_NAME, self.config.to_dict())  # marks the directory as this run's
            save_checkpoint(self.out / CHECKPOINT_DIR, peft_model=self.peft, optimizer=self.optimizer, step=self.step,
                            plan_length=self.config.steps, world_size=self.dist.world_size)
        self.dist.barrier()

    def load_checkpoint(self) -> None:
        """Continue from ``OUT/checkpoint``, refusing one written with settings that change what a step does."""
        saved = MNTPConfig.load(self.out / MNTP_CONFIG_NAME).to_dict()
        changed = sorted(k for k, v in self.config.to_dict().items()
                         if k not in RESUMABLE_CHANGES and saved.get(k) != v)
        if changed:
            raise ValueError(f"{self.out} holds a run with other settings ({', '.join(changed)}); resume it with its "
                             f"own {MNTP_CONFIG_NAME}, or write to a new directory")
        self.step = load_checkpoint(self.out / CHECKPOINT_DIR, peft_model=self.peft, optimizer=self.optimizer,
                                    plan_length=self.config.steps, device=self.device)

    def run(self, resume: bool = False, stop: StopRule | None = None) -> Path:
        """Train (from ``OUT/checkpoint`` when ``resume``), merge the LoRA weights into the backbone and write the
        model; returns its directory. Distributed, every rank runs this and rank 0 alone writes. With ``stop``, a
        time limit or SIGTERM ends it early at a step boundary, checkpoint written (``TrainingStopped``)."""
        from lens.atomic import DirectoryLock
        from lens.train.report import read_log, write_log

        cfg, main = self.config, self.dist.is_main
        rows: list[dict] = []
        if resume and (self.out / CHECKPOINT_DIR).is_dir():
            self.load_checkpoint()
            rows = [r for r in read_log(self.out / MNTP_LOG_NAME) if int(r["step"]) <= self.step] if main else []
            logger.info("MNTP: resumed at step %d of %d", self.step, cfg.steps)
        elif resume:
            logger.warning("no MNTP checkpoint in %s; starting from step 0", self.out)
        elif main:
            discard_checkpoint(self.out / CHECKPOINT_DIR)
        check_same(self.step, self.dist, f"the step to start from (does every rank see {self.out}?)")
        self.encoder.model.decoder.train()
        bar = tqdm(total=cfg.steps, initial=self.step, desc="MNTP", disable=not self.show_progress_bar)

        def checkpoint() -> None:
            if main:
                write_log(self.out / MNTP_LOG_NAME, rows)
            self.save_checkpoint()

        with stop if stop is not None else contextlib.nullcontext(), bar:
            while self.step < cfg.steps:
                rows.append(self.train_step())
                bar.set_postfix(loss=f"{rows[-1]['loss']:.3f}", acc=f"{rows[-1]['accuracy']:.3f}")
                bar.update(1)
                due = self.step % cfg.checkpoint_every == 0 or self.step == cfg.steps
                if stop is not None:
                    stop.after_step(self.step, cfg.steps, due, checkpoint, self.out / CHECKPOINT_DIR, self.dist)
                elif due:
                    checkpoint()
        self.encoder.model.decoder.eval()
        self.peft.merge_and_unload()  # the decoder's LoRA layers become plain, merged linear layers
        self.encoder.adapter_merged = True  # so save_pretrained writes the merged backbone beside the clusters
        self.encoder.adapter_sha256 = None  # new weights: identified by their own hash, not as the start's merge
        if main:
            with DirectoryLock(self.out, "model directory"):
                self.encoder.save_pretrained(self.out, keep_existing=True)  # the checkpoint and log stay beside it
                write_json(self.out / MNTP_CONFIG_NAME, cfg.to_dict())
                write_log(self.out / MNTP_LOG_NAME, rows)
            if rows:
                logger.info("MNTP: loss %.3f -> %.3f, masked-cluster accuracy %.3f -> %.3f; wrote %s",
                            rows[0]["loss"], rows[-1]["loss"], rows[0]["accuracy"], rows[-1]["accuracy"], self.out)
        self.dist.barrier()
        return self.out

    def close(self, wait: bool = True) -> None:
        """Leave the process group this run joined (``lens mntp`` calls it at the end; ``wait=False`` after a
        failure, see ``DistributedContext.close``)."""
        self.dist.close(wait)
