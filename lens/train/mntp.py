"""MNTP warm-up (LLM2Vec, BehnamGhader et al. 2024): adapt a decoder pretrained causal to bidirectional attention.

A decoder that suddenly attends both ways has never seen a future token; LLM2Vec first trains it, with LoRA, to
predict masked tokens from both sides ("masked next-token prediction": the token masked at position i is predicted
by the output at i - 1, the position that predicted it as a causal LM). Contrastive training then starts from the
merged result. Here the classes are the LENS clusters (the target is the masked token's cluster, scored by the
model's cluster head), so the warm-up trains exactly the outputs the lexicon pools; the head itself stays frozen.

``MNTPWarmup(config, out).run()`` (``lens mntp``) writes a standalone LENS directory: bidirectional attention, the
LoRA weights merged into a bundled backbone (``lens.encoder.LensEncoder.save_pretrained``), the clusters
unchanged, plus ``mntp_config.json`` and ``mntp_log.csv``. ``lens train --model OUT`` continues from it.
The texts are the documents (positives and negatives) of training files: never an evaluation corpus.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from lens.atomic import read_json, write_json
from lens.inputs import encode_texts, pad_batch, special_ids
from lens.train import losses as L
from lens.train.config import ALL_PROJECTIONS
from lens.train.data import read_examples, seeded_subset

logger = logging.getLogger(__name__)

MNTP_FORMAT_VERSION = 1
MNTP_CONFIG_NAME = "mntp_config.json"
MNTP_LOG_NAME = "mntp_log.csv"
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
    threads: int | None = None
    device: str | None = None  # default: cuda when present
    format_version: int = MNTP_FORMAT_VERSION

    def __post_init__(self) -> None:
        if not self.data:
            raise ValueError("MNTP needs training files (data): their documents are the texts it masks")
        if self.steps < 1 or self.batch_size < 1 or self.max_length < 4:
            raise ValueError(f"steps and batch_size must be >= 1 and max_length >= 4, got {self.steps}, "
                             f"{self.batch_size}, {self.max_length}")
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


class MNTPWarmup:
    """Runs an ``MNTPConfig`` and writes the warmed model to ``out`` (see the module docstring)."""

    def __init__(self, config: MNTPConfig, out: str | os.PathLike, show_progress_bar: bool = True):
        from peft import LoraConfig, get_peft_model

        from lens.encoder import LensEncoder
        from lens.model_dir import check_model_target
        from lens.train.trainer import lora_target_names

        self.config, self.out, self.show_progress_bar = config, check_model_target(out), show_progress_bar
        if config.threads:
            torch.set_num_threads(config.threads)
        device = config.device or ("cuda" if torch.cuda.is_available() else "cpu")
        torch.manual_seed(config.seed)
        self.encoder = LensEncoder.from_pretrained(config.model, attention="bidirectional", device=device)
        if self.encoder.config.adapter is not None:
            raise ValueError(f"{config.model} holds a trained adapter; MNTP starts from a clustering directory "
                             "(`lens cluster-vocab`) or a merged one (`lens merge`)")
        self.device = torch.device(device)
        model = self.encoder.model
        for p in model.parameters():
            p.requires_grad_(False)
        lora = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=0.0, bias="none",
                          target_modules=lora_target_names(model.decoder, ALL_PROJECTIONS, 0))
        self.peft = get_peft_model(model.decoder, lora)  # LoRA injected into the decoder in place
        self.params = [p for p in model.decoder.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=config.lr, weight_decay=0.0)
        self.texts = mntp_texts(config.data, config.max_texts, config.seed)
        self.mask_id = mask_token_id(self.encoder.tokenizer)
        self.assignment = torch.as_tensor(self.encoder.assignment, device=self.device)
        self.generator = torch.Generator(device=self.device).manual_seed(config.seed)
        logger.info("MNTP: %d texts, %d steps of %d, mask rate %.2f (mask id %d), LoRA r=%d on every layer",
                    len(self.texts), config.steps, config.batch_size, config.mask_rate, self.mask_id, config.lora_r)

    def batches(self):
        """The texts of each step: seeded passes over the texts, each in a new order."""
        cfg, rng = self.config, np.random.default_rng(self.config.seed)
        order: list[int] = []
        for _ in range(cfg.steps):
            while len(order) < cfg.batch_size:
                order += rng.permutation(len(self.texts)).tolist()
            yield [self.texts[i] for i in order[:cfg.batch_size]]
            order = order[cfg.batch_size:]

    def loss(self, texts: list[str]) -> tuple[torch.Tensor, float]:
        """MNTP loss of a batch, and the share of masked tokens whose cluster ranks first."""
        tok = self.encoder.tokenizer
        batch = pad_batch(encode_texts(tok, texts, self.config.max_length), tok.pad_token_id)
        ids, att = batch["input_ids"].to(self.device), batch["attention_mask"].to(self.device)
        maskable = batch["pool_mask"].to(self.device).bool() & (ids != special_ids(tok)[1])  # the text, not EOS
        corrupted, targets = L.mask_tokens(ids, maskable, self.config.mask_rate, self.mask_id, self.generator)
        clusters = torch.where(targets == L.IGNORE, targets, self.assignment[targets.clamp(min=0)])
        model = self.encoder.model
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.device.type == "cuda"):
            logits = model.head(model.hidden_states(corrupted, att))
        loss = L.masked_next_token_loss(logits, clusters)
        with torch.no_grad():
            hit = logits[:, :-1].argmax(-1) == clusters[:, 1:]
            accuracy = float(hit[clusters[:, 1:] != L.IGNORE].float().mean())
        return loss, accuracy

    def run(self) -> Path:
        """Train, merge the LoRA weights into the backbone and write the model; returns its directory."""
        from lens.atomic import DirectoryLock
        from lens.train.report import write_log
        from lens.train.trainer import learning_rate_factor

        cfg = self.config
        rows = []
        self.encoder.model.decoder.train()
        bar = tqdm(self.batches(), total=cfg.steps, desc="MNTP", disable=not self.show_progress_bar)
        for step, texts in enumerate(bar):
            t = time.perf_counter()
            lr = cfg.lr * learning_rate_factor(step, cfg.steps, cfg.warmup_steps)
            for g in self.optimizer.param_groups:
                g["lr"] = lr
            loss, accuracy = self.loss(texts)
            loss.backward()
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm))
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            rows.append({"step": step + 1, "loss": float(loss.detach()), "accuracy": accuracy, "lr": lr,
                         "grad_norm": grad_norm, "step_s": time.perf_counter() - t})
            bar.set_postfix(loss=f"{rows[-1]['loss']:.3f}", acc=f"{accuracy:.3f}")
        self.encoder.model.decoder.eval()
        self.peft.merge_and_unload()  # the decoder's LoRA layers become plain, merged linear layers
        self.encoder.adapter_merged = True  # so save_pretrained writes the merged backbone beside the clusters
        with DirectoryLock(self.out, "model directory"):
            self.encoder.save_pretrained(self.out)
            write_json(self.out / MNTP_CONFIG_NAME, cfg.to_dict())
            write_log(self.out / MNTP_LOG_NAME, rows)
        logger.info("MNTP: loss %.3f -> %.3f, masked-cluster accuracy %.3f -> %.3f; wrote %s", rows[0]["loss"],
                    rows[-1]["loss"], rows[0]["accuracy"], rows[-1]["accuracy"], self.out)
        return self.out
