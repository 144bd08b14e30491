"""The training loop: LoRA (PEFT) on a LENS model's decoder, the cluster head optionally trained, one task per batch.

CPU feasibility comes from ``lora_layers``: with LoRA on the top N layers only, the lower layers are frozen, so
their output is computed once per text (``PrefixCache``) and each step runs only the top N layers forward and
backward. With ``lora_layers=None`` every layer is trained and nothing is cached (the paper's setup, for GPUs).

``Trainer`` is the loop; it delegates the loss to ``lens.train.objectives``, the resumable state to
``lens.train.checkpoint``, the log, curves and card to ``lens.train.report``, and the model directory to
``lens.model_dir``. A run writes into its output directory: ``checkpoint/`` (every ``checkpoint_every`` steps;
``resume=True`` continues from it and takes exactly the step an uninterrupted run would), ``train_log.csv``,
``curves.png``, and finally the trained LENS model itself (``config.json`` naming ``adapter/``, the trained head
in ``clusters.safetensors``, a model card), written atomically beside the run's other files.

Under ``torchrun`` / ``accelerate launch`` the same loop runs in every process (``lens.train.distributed``): each
rank encodes its slice of the planned global batch, the embeddings are all-gathered with gradients, every rank
computes the global loss and the gradients are averaged, so a step equals one process's step on the global batch.
Rank 0 alone writes the checkpoint, the log, the curves and the model. ``cache_chunk`` switches on the cached
contrastive loss (``lens.train.gradcache``): a big batch with the activation memory of one chunk.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from index.vectors import l2_normalize
from lens.atomic import read_json
from lens.inputs import Encoded, encode_model_texts, pad_batch, query_prompt, text_ids
from lens.layers import embed, num_layers
from lens.train import losses as L
from lens.train.checkpoint import checkpoint_config, discard_checkpoint, load_checkpoint, save_checkpoint
from lens.train.config import TrainConfig, resume_changes
from lens.train.data import TrainExample, plan_steps, read_examples, sample_examples, task_batches
from lens.train.distributed import (
    DistributedContext, all_reduce_gradients, check_same, gather_pieces, init_from_env, rank_seed, shard_sizes,
    shard_slice,
)
from lens.train.gradcache import GradCache
from lens.train.objectives import BatchLayout, Objective, batch_layout, needs_bm25, needs_dense
from lens.train.prefix import PrefixCache
from lens.train.stopping import StopRule
from lens.train.report import CARD_NAME, CURVES_NAME, LOG_NAME, model_card, plot_curves, read_log, write_log

logger = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoint"
TRAIN_CONFIG_NAME = "train_config.json"
PREFIX_CACHE_DIR = "prefix-cache"  # OUT/prefix-cache, unless --prefix-cache names another place
ADAPTER_DIR = "adapter"


DEAD_STEPS = 10  # steps in a row with no gradient before the trainer warns of a collapse


def lora_target_names(decoder: nn.Module, targets: list[str], first_layer: int) -> list[str]:
    """Full names of the ``targets`` projections in layers ``first_layer`` and up (names like ``layers.7.mlp.up_proj``)."""
    names, missed = [], set()
    for i, layer in enumerate(decoder.layers):
        if i < first_layer:
            continue
        for name, module in layer.named_modules():
            if name.rsplit(".", 1)[-1] in targets:
                names.append(f"layers.{i}.{name}")
            elif isinstance(module, nn.Linear):
                missed.add(name.rsplit(".", 1)[-1])
    if not names:
        raise ValueError(f"no module named {targets} in the decoder's layers; set lora_targets to its projection names")
    if missed:  # e.g. Phi-3's fused qkv_proj and gate_up_proj: half the layer would train, silently
        logger.warning("LoRA adapts %s; these linear layers of the decoder get no adapter: %s (add them to "
                       "lora_targets to train them too)", ", ".join(sorted({n.rsplit(".", 1)[-1] for n in names})),
                       ", ".join(sorted(missed)))
    return names


def inputs_sha256(fingerprint: dict, stages: list[list[TrainExample]], val: list[TrainExample]) -> str:
    """sha256 of what a run trains on: the start model's fingerprint and each stage's sampled examples (with the
    validation ones), so a resume on changed data files or another start model is refused."""
    h = hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode("utf-8"))
    for examples in (*stages, val):
        h.update(b"\x1e")
        for e in examples:
            h.update(json.dumps(e.to_json(), sort_keys=True, ensure_ascii=False).encode("utf-8", "surrogatepass"))
            h.update(b"\n")
    return h.hexdigest()


def frozen_decoder_dtype(device_type: str, bf16: bool) -> torch.dtype:
    """The dtype a training run keeps its frozen decoder weights in: bfloat16 on CUDA under bf16 autocast (half the
    memory of a 7B backbone; autocast computes in bfloat16 either way), else float32. Trained weights are float32
    everywhere."""
    return torch.bfloat16 if bf16 and device_type == "cuda" else torch.float32


def learning_rate_factor(step: int, total: int, warmup: int) -> float:
    """Linear warm-up over ``warmup`` steps, then linear decay to 0 at ``total``."""
    if warmup and step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))


def _warn_low_graded_positives(stage, examples: list[TrainExample]) -> None:
    """A contrastive loss takes every example's positive as relevant, whatever its grade: say so when a stage's
    examples are graded under half their scale (STS pairs rated unrelated) and no loss of the stage reads grades."""
    weights = stage.loss_weights()
    if "bce-graded" in weights or not {"infonce", "gte", "hybrid"} & set(weights):
        return
    low = sum(e.score is not None and bool(e.max_score) and e.score < e.max_score / 2 for e in examples)
    if low:
        logger.warning("stage %r: %d of %d examples are graded under half their max_score, yet %s takes each "
                       "positive as relevant: drop them (`lens data sts --min-score`) or add a graded loss "
                       "(e.g. infonce+0.5*bce-graded)", stage.name, low, len(examples), stage.loss)


class Trainer:
    """Fine-tunes a LENS model directory according to a ``TrainConfig``; see the module docstring."""

    def __init__(self, config: TrainConfig, output_dir: str | os.PathLike, *, prefix_cache_dir=None,
                 show_progress_bar: bool = True, distributed: DistributedContext | None = None):
        self.config = config
        self.output_dir = Path(output_dir)
        self.prefix_cache_dir = Path(prefix_cache_dir) if prefix_cache_dir else None
        self.dist = distributed if distributed is not None else init_from_env(config.device)
        self.show_progress_bar = show_progress_bar and self.dist.is_main
        self.step = 0
        self.start_step = 0  # the step train() started from (a resumed run's checkpoint's)
        self.cache: PrefixCache | None = None
        self.cache_seconds = 0.0
        self._items: dict[tuple[str, str], Encoded] = {}
        self._zero_grad_steps = 0
        self._setup()

    # ------------------------------------------------------------------------------------------------ setup
    def _setup(self) -> None:
        from peft import LoraConfig, get_peft_model

        from lens.encoder import LensEncoder

        cfg = self.config
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.device = self.dist.device
        device = str(self.device)
        self.bf16 = cfg.bf16 if cfg.bf16 is not None else self.device.type == "cuda"
        self.checkpointing = (cfg.gradient_checkpointing if cfg.gradient_checkpointing is not None
                              else self.device.type == "cuda")
        torch.manual_seed(cfg.seed)
        # every weight loads in float32: the trained ones (LoRA, head, term channel) stay there as AdamW's master
        # copies (a 1e-4 step on a bfloat16 head leaves about three in four of its values unchanged); with bf16
        # autocast on CUDA only the frozen decoder is cast down, for memory (``frozen_decoder_dtype``)
        self.encoder = LensEncoder.from_pretrained(cfg.model, backbone=cfg.backbone, device=device,
                                                   dtype=torch.float32)
        if self.encoder.config.convention != "lens":  # the paper's checkpoints tokenise and pool their own way
            raise ValueError(f"{cfg.model} is a model of the {self.encoder.config.convention!r} convention (a released "
                             "checkpoint); training tokenises and pools the LENS way: start from `lens cluster-vocab`")
        if self.encoder.config.adapter is not None:
            raise ValueError(f"{cfg.model} already holds a trained adapter; start from a clustering directory "
                             "(`lens cluster-vocab`) or merge it first (`lens merge`)")
        self.model = self.encoder.model
        self.tokenizer = self.encoder.tokenizer
        decoder = self.model.decoder
        frozen = frozen_decoder_dtype(self.device.type, self.bf16)
        if frozen != torch.float32:
            decoder.to(frozen)  # LoRA, injected below, keeps float32 weights (PEFT upcasts its adapters)
            self.model.upcast_logits = True  # as a half-precision load pools: log1p(relu) in float32
        n = num_layers(decoder)
        k = n if cfg.lora_layers is None else cfg.lora_layers
        if k > n:
            raise ValueError(f"lora_layers={k} but the backbone has {n} layers")
        if k == 0 and not cfg.train_head and self.model.term is None:
            raise ValueError("lora_layers=0 with train_head false leaves nothing to train: train the head, give "
                             "LoRA layers, or start from a model with the term channel (term_channel in config.json)")
        self.split = n - k
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.peft_model = None  # lora_layers=0: the decoder stays frozen, only the head / term channel train
        if k:
            lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout, bias="none",
                              target_modules=lora_target_names(decoder, cfg.lora_targets, self.split))
            self.peft_model = get_peft_model(decoder, lora)  # injects LoRA into `decoder` in place
        self.decoder = decoder
        self.model.head.weight.requires_grad_(cfg.train_head)
        self.bias = nn.Parameter(torch.zeros((), device=self.device))
        self._load_data()
        dense = self._dense_peer() if any(needs_dense(s.loss_weights()) for s in cfg.stages) else None
        bm25 = self._bm25_scores() if any(needs_bm25(s.loss_weights()) for s in cfg.stages) else None
        self.objectives = [Objective(s.loss, temperature=cfg.temperature, bce_scale=cfg.bce_scale,
                                     graded_floor=cfg.graded_floor, teacher_center=cfg.teacher_center,
                                     teacher_width=cfg.teacher_width, dense=dense,
                                     hybrid_weights=tuple(cfg.hybrid_weights), bm25=bm25) for s in cfg.stages]
        self.validation_objective = Objective("infonce", temperature=cfg.temperature, bce_scale=cfg.bce_scale,
                                              graded_floor=cfg.graded_floor)
        groups = []
        if self.peft_model is not None:
            groups.append({"params": [p for p in self.decoder.parameters() if p.requires_grad], "lr": cfg.lr,
                           "weight_decay": cfg.weight_decay, "name": "lora"})
        head_lr = cfg.head_lr or cfg.lr
        if cfg.train_head:
            groups.append({"params": [self.model.head.weight], "lr": head_lr,
                           "weight_decay": cfg.weight_decay, "name": "head"})
        if self.model.term is not None:  # the term channel (LensConfig.term_channel): the head's rate unless told
            self.model.term.requires_grad_(True)
            groups.append({"params": list(self.model.term.parameters()), "lr": cfg.term_lr or head_lr,
                           "weight_decay": 0.0, "name": "term"})
        if any(o.uses_bias for o in self.objectives):
            groups.append({"params": [self.bias], "lr": cfg.bias_lr, "weight_decay": 0.0, "name": "bias"})
        for g in groups:
            g["base_lr"] = g["lr"]
        self.optimizer = torch.optim.AdamW(groups)
        self.gradcache = GradCache(self._lexicon, cfg.cache_chunk) if cfg.cache_chunk else None
        trainable = sum(p.numel() for g in groups for p in g["params"])
        where = f"LoRA r={cfg.lora_r} on layers {self.split}-{n - 1} of {n}" if k else f"no LoRA ({n} layers frozen)"
        logger.info("training %d parameters: %s, head %s%s; %d steps%s%s",
                    trainable, where, "trained" if cfg.train_head else "frozen",
                    ", term channel" if self.model.term is not None else "",
                    len(self.plan), f"; {self.dist.world_size} processes" if self.dist.enabled else "",
                    f"; cached loss, chunks of {cfg.cache_chunk}" if cfg.cache_chunk else "")

    def _dense_peer(self):
        """The frozen dense encoder whose cosines the ``hybrid`` loss adds (every rank scores the global batch)."""
        from lens.dense import DenseEncoder
        from lens.train.teacher import PeerCosines

        logger.info("hybrid loss: dense peer %s, weights %s", self.config.hybrid_peer, self.config.hybrid_weights)
        return PeerCosines(DenseEncoder.from_pretrained(self.config.hybrid_peer, device=str(self.device)))

    def _bm25_scores(self):
        """BM25 over every document the run's stages hold (their sampled examples' positives and negatives), the
        statistics the ``bm25`` loss's teacher scores with (every rank builds the same index)."""
        from lens.train.teacher import BM25Scores

        scorer = BM25Scores(t for stage in self.data for e in stage for t in (e.positive, *e.negatives))
        logger.info("bm25 loss: indexed %d documents of the training data", len(scorer.rows))
        return scorer

    def _instruction(self, ex: TrainExample) -> str:
        """An example's instruction: its own, else its task's in the config, else the model's default; ``""`` is no
        instruction, as ``LensEncoder.encode_queries(instruction="")`` reads it."""
        if ex.instruction is not None:
            return ex.instruction
        task = self.config.instructions.get(ex.task)
        return task if task is not None else self.encoder.config.default_instruction

    def _query_prompt(self, instruction: str) -> str | None:
        """The prompt of a query under ``instruction``, by the encoder's one rule (``lens.inputs.query_prompt``: an
        instruction in the template's form is not wrapped twice; ``""``: none)."""
        return query_prompt(self.encoder.config.query_template, instruction)

    def _load_data(self) -> None:
        cfg = self.config
        self.data = []
        for si, stage in enumerate(cfg.stages):
            examples = [e for path in stage.data for e in read_examples(path)]
            self.data.append(sample_examples(examples, cfg.seed + si, stage.max_per_task, stage.max_examples))
            _warn_low_graded_positives(stage, self.data[-1])
        self.val = [e for path in cfg.val_data for e in read_examples(path)][: cfg.val_examples]
        self.plan = plan_steps(cfg, self.data)
        self._stage_spans: dict[int, tuple[int, int]] = {}  # stage -> (its first step, its steps): consecutive
        for i, step in enumerate(self.plan):
            first, count = self._stage_spans.get(step.stage, (i, 0))
            self._stage_spans[step.stage] = (first, count + 1)
        self.inputs_sha256 = inputs_sha256(self.encoder.fingerprint(), self.data, self.val)
        # only the texts the planned steps and the validation use: a short run over a big mixture caches little
        every = [self.data[step.stage][i] for step in self.plan for i in step.batch] + self.val
        by_prompt: dict[str, set[str]] = {}
        config = self.encoder.config  # tokenised as the model reads its texts (rule, echo): train on what it encodes
        for e in every:
            by_prompt.setdefault(self._query_prompt(self._instruction(e)), set()).add(e.query)
        for prompt, queries in by_prompt.items():
            qs = sorted(queries)
            for q, item in zip(qs, encode_model_texts(self.tokenizer, config, qs, cfg.query_max_length, prompt)):
                self._items[(prompt, q)] = item
        docs = sorted({t for e in every for t in (e.positive, *self._negatives(e))})
        for d, item in zip(docs, encode_model_texts(self.tokenizer, config, docs, cfg.doc_max_length)):
            self._items[("", d)] = item
        if self.split:
            fp = self.encoder.config.clustering.lm_head_sha256
            namespace = f"{self.encoder.config.backbone}|{fp}|{self.encoder.config.attention}"
            if self.encoder.bundled_sha256:  # a bundled backbone: its weights, not only its path, key the states
                namespace += f"|{self.encoder.bundled_sha256}"
            cache_dir = self.prefix_cache_dir or (self.output_dir / PREFIX_CACHE_DIR)
            self.cache = PrefixCache(self.decoder, self.split, namespace, cache_dir)
            had = len(self.cache)
            t = time.perf_counter()
            needed = list(self._items.values()) if not self.dist.enabled else self._rank_items()
            done = self.cache.fill(needed, self.tokenizer.pad_token_id, show_progress_bar=self.show_progress_bar)
            self.cache_seconds = time.perf_counter() - t
            logger.info("prefix cache: %d sequences computed in %.0f s (%d were cached)", done, self.cache_seconds, had)

    def _rank_items(self) -> list[Encoded]:
        """The sequences this rank encodes: its slices of every planned (micro-)batch and validation batch.

        Distributed, each rank fills the prefix cache with these only (about 1/world of the texts) and writes
        its own uniquely named shards; ``lens.train.prefix`` names them by content, so ranks never clash.
        """
        cfg = self.config
        batches = []
        for step in self.plan:
            examples = [self.data[step.stage][i] for i in step.batch]
            batches += [([examples[i] for i in idx], cfg.stages[step.stage].max_negatives)
                        for idx in self._micro_batches(len(examples))]
        batches += [([self.val[i] for i in b], None) for b in self._validation_batches()]
        mine: dict[int, Encoded] = {}
        for examples, max_negatives in batches:
            _, q_items, d_items = self._batch_items(examples, max_negatives, layout=False)
            for it in self._mine(q_items) + self._mine(d_items):
                mine[id(it)] = it
        return list(mine.values())

    def _negatives(self, ex: TrainExample, max_negatives: int | None = None) -> list[str]:
        """``ex``'s hard negatives that any stage uses (cut to ``max_negatives`` when given)."""
        caps = [s.max_negatives for s in self.config.stages]
        cap = None if None in caps else max(caps)
        if max_negatives is not None:
            cap = max_negatives if cap is None else min(cap, max_negatives)
        return ex.negatives if cap is None else ex.negatives[:cap]

    # ------------------------------------------------------------------------------------------------ forward
    def _forward(self, items: list[Encoded]):
        """``LensModel`` output for ``items``, with gradients through the trained layers and head when enabled.

        With a prefix cache the frozen layers' output is read from it; otherwise the decoder runs from its
        embeddings. Either way the model's own ``forward_from_layer`` does the rest.
        """
        b = pad_batch(items, self.tokenizer.pad_token_id)  # right-padded, as the cache's hidden states
        ids, att, pool = (b[k].to(self.device) for k in ("input_ids", "attention_mask", "pool_mask"))
        if self.cache is not None:
            # float32 states under autocast; without it, the decoder's own dtype (float32: frozen_decoder_dtype)
            dtype = torch.float32 if self.bf16 else next(self.decoder.parameters()).dtype
            hidden = self.cache.hidden(items, dtype, self.device)
        else:
            hidden = embed(self.decoder, ids)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            return self.model.forward_from_layer(hidden, att, pool, self.split, checkpoint=self.checkpointing,
                                                 input_ids=ids)

    def _lexicon(self, items: list[Encoded]) -> Tensor:
        """(n, K) float32 lexicon vectors of ``items``; (0, K) for none (a rank whose slice is empty)."""
        if not items:
            return torch.zeros(0, self.model.num_clusters, device=self.device)
        return self._forward(items).lexicon.float()

    def _batch_items(self, examples: list[TrainExample], max_negatives: int | None,
                     layout: bool = True) -> tuple[BatchLayout | None, list[Encoded], list[Encoded]]:
        """A batch's layout (unless ``layout`` is False), its query items and its document items, in order."""
        def negatives(e: TrainExample) -> list[str]:
            return self._negatives(e, max_negatives)

        q_items = [self._items[(self._query_prompt(self._instruction(e)), e.query)] for e in examples]
        if layout:
            lay = batch_layout(examples, negatives)
            return lay, q_items, [self._items[("", t)] for t in lay.doc_texts]
        # batch_layout's documents, without its (B, D) mask: each query's positive, then its negatives
        return None, q_items, [self._items[("", t)] for e in examples for t in (e.positive, *negatives(e))]

    def _mine(self, items: list[Encoded]) -> list[Encoded]:
        """This rank's contiguous slice of a batch's items (all of them in one process)."""
        if not self.dist.enabled:
            return items
        return items[shard_slice(len(items), self.dist.rank, self.dist.world_size)]

    def _global(self, q: Tensor, d: Tensor, num_queries: int, num_docs: int) -> tuple[Tensor, Tensor]:
        """The global batch's (queries, documents) from this rank's slices, gathered with gradients in one
        collective (queries and documents stacked, so the backward's collectives cannot be reordered)."""
        if not self.dist.enabled:
            return q, d
        nq, nd = shard_sizes(num_queries, self.dist.world_size), shard_sizes(num_docs, self.dist.world_size)
        pieces = gather_pieces(torch.cat([q, d]), [a + b for a, b in zip(nq, nd)])
        return torch.cat([p[:a] for p, a in zip(pieces, nq)]), torch.cat([p[a:] for p, a in zip(pieces, nq)])

    def batch_loss(self, examples: list[TrainExample], objective: Objective,
                   max_negatives: int | None) -> tuple[Tensor, dict[str, float]]:
        """The objective's loss of one batch and each term's value (distributed: this rank encodes its slice and
        the loss is the global batch's, the same on every rank)."""
        layout, q_items, d_items = self._batch_items(examples, max_negatives)
        q = self._lexicon(self._mine(q_items))
        d = self._lexicon(self._mine(d_items))
        own = self._own_clusters(q_items, d_items) if objective.uses_own else None
        return objective(*self._global(q, d, len(q_items), len(d_items)), layout, examples, self.bias, own)

    def _own_clusters(self, q_items: list[Encoded], d_items: list[Encoded]) -> tuple[Tensor, Tensor]:
        """(queries', documents') bool masks (n, K) of the clusters of each item's pooled text tokens (EOS and the
        instruction left out): the own dimensions of the ``exact`` loss, for the whole (global) batch."""
        assignment = self.encoder.assignment

        def masks(items: list[Encoded]) -> Tensor:
            out = np.zeros((len(items), self.encoder.num_clusters), dtype=bool)
            for i, it in enumerate(items):
                clusters = assignment[text_ids(it)]
                out[i, clusters[clusters >= 0]] = True
            return torch.from_numpy(out).to(self.device)

        return masks(q_items), masks(d_items)

    def _backward(self, examples: list[TrainExample], objective: Objective, max_negatives: int | None,
                  divide_by: int) -> tuple[Tensor, dict[str, float]]:
        """Accumulate the gradients of one (micro-)batch's loss / ``divide_by``; returns the loss and its terms."""
        if self.gradcache is None:
            loss, terms = self.batch_loss(examples, objective, max_negatives)
            (loss / divide_by).backward()
            return loss, terms
        layout, q_items, d_items = self._batch_items(examples, max_negatives)

        own = self._own_clusters(q_items, d_items) if objective.uses_own else None

        def loss_of(q: Tensor, d: Tensor) -> tuple[Tensor, dict[str, float]]:
            return objective(*self._global(q, d, len(q_items), len(d_items)), layout, examples, self.bias, own)

        return self.gradcache.backward(self._mine(q_items), self._mine(d_items), loss_of, divide_by)

    def _micro_batches(self, n: int) -> list[np.ndarray]:
        """``grad_accum`` micro-batches of a batch of ``n`` (each at least 2 examples: in-batch negatives)."""
        return np.array_split(np.arange(n), min(self.config.grad_accum, n // 2 or 1))

    def _trainable(self) -> list[Tensor]:
        return [p for g in self.optimizer.param_groups for p in g["params"]]

    def accumulate_gradients(self, examples: list[TrainExample], objective: Objective,
                             max_negatives: int | None) -> tuple[float, dict[str, float]]:
        """Forward and backward of one batch: leaves in ``.grad`` the gradient one process gets on the whole batch
        (averaged over the ranks when distributed; see ``lens.train.distributed``); returns the loss (the mean of
        the micro-batches') and each term's value."""
        micro = self._micro_batches(len(examples))
        total, parts = 0.0, {}
        for idx in micro:
            loss, terms = self._backward([examples[i] for i in idx], objective, max_negatives, len(micro))
            total += float(loss.detach()) / len(micro)
            for n, v in terms.items():
                parts[n] = parts.get(n, 0.0) + v / len(micro)
        all_reduce_gradients(self._trainable(), self.dist)
        return total, parts

    # ------------------------------------------------------------------------------------------------ training
    def _set_lr(self, step: int) -> float:
        index = self.plan[step].stage
        stage = self.config.stages[index]
        if self.config.lr_schedule == "stage":  # the stage's own warm-up and decay (its steps are consecutive)
            first, count = self._stage_spans[index]
            factor = learning_rate_factor(step - first, count, self.config.warmup_steps)
        else:
            factor = learning_rate_factor(step, len(self.plan), self.config.warmup_steps)
        scale = (stage.lr / self.config.lr) if stage.lr else 1.0
        for g in self.optimizer.param_groups:
            g["lr"] = g["base_lr"] * factor * (scale if g["name"] != "bias" else 1.0)
        return self.optimizer.param_groups[0]["lr"]

    def _reset_bias(self, stage_index: int, examples: list[TrainExample]) -> None:
        """At a stage's start: the BCE bias to -log(N-1) for this stage's N candidates per query, less bce_scale x
        the mean cosine of ``examples`` (the stage's first batch; its first micro-batch) when ``bias_init`` is
        "fitted" (``lens.train.losses.fitted_bias``)."""
        cfg, stage = self.config, self.config.stages[stage_index]
        bs = stage.batch_size or cfg.batch_size
        negs = stage.max_negatives if stage.max_negatives is not None else int(
            np.mean([len(e.negatives) for e in self.data[stage_index]]))
        n = max(2, bs * (1 + negs))
        value = L.initial_bias(n)
        if cfg.bias_init == "fitted":
            first = [examples[i] for i in self._micro_batches(len(examples))[0]]
            layout, q_items, d_items = self._batch_items(first, stage.max_negatives)
            was_training = self.decoder.training
            self.decoder.eval()  # no dropout: the same start on every rank and after a resume
            with torch.no_grad():
                q, d = self._global(self._lexicon(self._mine(q_items)), self._lexicon(self._mine(d_items)),
                                    len(q_items), len(d_items))
                value = L.fitted_bias(n, L.cosine_scores(q, d), cfg.bce_scale,
                                      torch.tensor(layout.valid, device=q.device))
            self.decoder.train(was_training)
        with torch.no_grad():
            self.bias.fill_(value)
        logger.info("stage %r: BCE bias starts at %.3f (%s)", stage.name, value, cfg.bias_init)

    def train_step(self) -> dict:
        """One optimiser step (``grad_accum`` micro-batches) of the plan; returns its log row."""
        cfg = self.config
        plan = self.plan[self.step]
        stage = cfg.stages[plan.stage]
        objective = self.objectives[plan.stage]
        examples = [self.data[plan.stage][i] for i in plan.batch]
        if objective.uses_bias and (self.step == 0 or self.plan[self.step - 1].stage != plan.stage):
            self._reset_bias(plan.stage, examples)
        lr = self._set_lr(self.step)
        t = time.perf_counter()
        self.decoder.train()
        if self.dist.enabled:  # dropout differs per rank, and depends on the step only (resumable on any ranks)
            torch.manual_seed(rank_seed(cfg.seed, self.dist.rank, self.step))
        total, parts = self.accumulate_gradients(examples, objective, stage.max_negatives)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self._trainable(), cfg.max_grad_norm))
        bias = float(self.bias.detach())  # the value this step's loss used
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        row = {"step": self.step, "stage": stage.name, "task": examples[0].task, "loss": total, "lr": lr,
               "grad_norm": grad_norm, "bias": bias, "step_s": time.perf_counter() - t}
        row.update({f"loss_{n}": v for n, v in parts.items()})
        self._watch_gradient(grad_norm)
        return row

    def _watch_gradient(self, grad_norm: float) -> None:
        """Warn once when steps in a row get no gradient at all: every lexicon vector of the batches is zero
        (``log1p(relu)`` of all-negative logits), a collapse training cannot leave."""
        self._zero_grad_steps = self._zero_grad_steps + 1 if grad_norm == 0.0 else 0
        if self._zero_grad_steps == DEAD_STEPS:
            logger.warning("no gradient for %d steps in a row (up to step %d): the lexicon vectors have collapsed "
                           "to zero and training cannot recover. Lower the flops weight or the learning rate, or "
                           "keep an infonce term on the lexicon itself, and start again from a checkpoint before "
                           "it (train_log.csv: grad_norm)", DEAD_STEPS, self.step)

    @torch.no_grad()
    def encode(self, texts: list[str], instruction: str | None = None, batch_size: int = 64,
               max_length: int | None = None) -> np.ndarray:
        """Unit lexicon vectors of ``texts`` as the model stands now (queries when ``instruction`` is given).

        Runs the encoder's own loop (``lens.encoder.encode_items``) through the prefix cache, so evaluating
        during or between runs costs only the trained layers. ``max_length`` defaults to the training lengths.
        """
        from lens.encoder import encode_items

        self.decoder.eval()
        config = self.encoder.config
        if instruction is None:
            items = encode_model_texts(self.tokenizer, config, texts, max_length or self.config.doc_max_length)
        else:
            items = encode_model_texts(self.tokenizer, config, texts, max_length or self.config.query_max_length,
                                       self._query_prompt(instruction))
        if self.cache is not None:
            self.cache.fill(items, self.tokenizer.pad_token_id, show_progress_bar=self.show_progress_bar)
        lexicon, _ = encode_items(items, self._forward, self.model.num_clusters, self.decoder.config.hidden_size,
                                  batch_size)
        return l2_normalize(lexicon)

    @torch.no_grad()
    def validate(self) -> float:
        """Mean InfoNCE loss over the validation examples (fixed batches), or NaN without validation data."""
        if not self.val:
            return float("nan")
        self.decoder.eval()
        values = [float(self.batch_loss([self.val[i] for i in b], self.validation_objective, None)[0])
                  for b in self._validation_batches()]
        return float(np.mean(values))

    def _validation_batches(self) -> list[list[int]]:
        if not self.val:
            return []
        return [b for b in task_batches(self.val, self.config.batch_size, seed=12345) if len(b) >= 2]

    def train(self, resume: bool = False, stop: StopRule | None = None) -> Path:
        """Run the plan (from the checkpoint when ``resume``), then save the trained model; returns its path.

        Distributed, every rank runs this; rank 0 alone writes, and every rank reads the checkpoint to resume
        (so the output directory must be on a filesystem they all see). With ``stop`` (``lens.train.stopping``),
        a time limit or SIGTERM ends the run early at a step boundary: the checkpoint is written and
        ``TrainingStopped`` raised, and ``resume=True`` continues from there.
        """
        from tqdm.auto import tqdm

        main = self.dist.is_main
        saved, checkpoint_dir = self.output_dir / TRAIN_CONFIG_NAME, self.output_dir / CHECKPOINT_DIR
        if resume and checkpoint_dir.is_dir():  # the settings the checkpoint was made with (else the run's file)
            recorded = checkpoint_config(checkpoint_dir)
            if recorded is None and saved.is_file():
                recorded = read_json(saved, "training config")
            changes = resume_changes(recorded, self.config) if recorded is not None else []
            if changes:
                raise ValueError(f"{self.output_dir} holds a run with other settings ({'; '.join(changes)}); resume "
                                 "it with its own settings, or train to a new --out")
        if main:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            if not resume:
                discard_checkpoint(checkpoint_dir)
            self.config.save(self.output_dir / TRAIN_CONFIG_NAME)
        log_path = self.output_dir / LOG_NAME
        rows: list[dict] = []
        if resume and (self.output_dir / CHECKPOINT_DIR).is_dir():
            self.load_checkpoint(self.output_dir / CHECKPOINT_DIR)
            rows = [r for r in read_log(log_path) if int(r["step"]) <= self.step] if main else []
            logger.info("resumed at step %d of %d", self.step, len(self.plan))
            self.start_step = self.step
        elif resume:
            logger.warning("no checkpoint in %s; starting from step 0", self.output_dir)
        check_same(self.step, self.dist, f"the step to start from (does every rank see {self.output_dir}?)")
        bar = tqdm(total=len(self.plan), initial=self.step, desc="Training", unit="step",
                   disable=not self.show_progress_bar)

        def checkpoint() -> None:
            if main:
                write_log(log_path, rows)
            self.save_checkpoint(self.output_dir / CHECKPOINT_DIR)

        with stop if stop is not None else contextlib.nullcontext(), bar:
            while self.step < len(self.plan):
                row = self.train_step()
                if self.val and self.config.eval_every and (self.step % self.config.eval_every == 0
                                                            or self.step == len(self.plan)):
                    row["val_loss"] = self.validate()
                rows.append(row)
                bar.set_postfix(loss=f"{row['loss']:.3f}", lr=f"{row['lr']:.2g}", stage=row["stage"])
                bar.update(1)
                due = self.step % self.config.checkpoint_every == 0 or self.step == len(self.plan)
                if stop is not None:
                    stop.after_step(self.step, len(self.plan), due, checkpoint, self.output_dir / CHECKPOINT_DIR,
                                    self.dist)
                elif due:
                    checkpoint()
        if main:
            write_log(log_path, rows)
            plot_curves(rows, self.output_dir / CURVES_NAME)
        self.save_model(self.output_dir, rows)
        return self.output_dir

    def close(self, wait: bool = True) -> None:
        """Leave the process group this trainer joined (``lens train`` calls it at the end; ``wait=False`` after a
        failure, see ``DistributedContext.close``)."""
        self.dist.close(wait)

    # ------------------------------------------------------------------------------------------------ state
    def save_checkpoint(self, path: Path) -> None:
        """Rank 0 writes the checkpoint (the state is the same on every rank); the others wait for it."""
        if self.dist.is_main:
            save_checkpoint(path, peft_model=self.peft_model, head=self.model.head.weight, bias=self.bias,
                            optimizer=self.optimizer, step=self.step, plan_length=len(self.plan),
                            world_size=self.dist.world_size, extra=self._extra_state(),
                            inputs_sha256=self.inputs_sha256, config=self.config.to_dict())
        self.dist.barrier()

    def load_checkpoint(self, path: Path) -> None:
        self.step = load_checkpoint(path, peft_model=self.peft_model, head=self.model.head.weight, bias=self.bias,
                                    optimizer=self.optimizer, plan_length=len(self.plan), device=self.device,
                                    extra=self._extra_state(), inputs_sha256=self.inputs_sha256)

    def _extra_state(self) -> dict[str, Tensor]:
        """Trained tensors beyond the adapter, head and bias: the term channel's, when the model has one."""
        term = self.model.term
        return {} if term is None else {"term.weight": term.weight, "term.bias": term.bias}

    def save_model(self, path: Path, rows: list[dict]) -> None:
        """The trained LENS directory (config naming the adapter, trained head, clusters.tsv, PEFT adapter, card),
        written atomically by ``lens.model_dir`` while the run's checkpoint and logs stay beside it. Distributed,
        rank 0 writes it and the others wait."""
        if not self.dist.is_main:
            self.dist.barrier()
            return
        self._write_model(path, rows)
        self.dist.barrier()

    def _save_adapter(self, dest: Path) -> None:
        """PEFT's adapter files, without the empty model-card template PEFT adds (the LENS card sits one level up)."""
        self.peft_model.save_pretrained(dest)
        (Path(dest) / "README.md").unlink(missing_ok=True)

    def _write_model(self, path: Path, rows: list[dict]) -> None:
        from lens.config import LensConfig
        from lens.model_dir import write_model_dir

        config = LensConfig.from_dict(self.encoder.config.to_dict())
        config.adapter = ADAPTER_DIR if self.peft_model is not None else None
        if self.config.max_length is not None:
            config.max_length = self.config.max_length
        config.extra = dict(config.extra, training={
            "steps": self.step, "stages": [s.name for s in self.config.stages], "lora_layers": self.config.lora_layers,
            "train_head": self.config.train_head, "final_loss": rows[-1]["loss"] if rows else None,
            "train_config": TRAIN_CONFIG_NAME,
            # what it trained on: the start model's fingerprint and every stage's examples (inputs_sha256)
            "inputs_sha256": self.inputs_sha256,
        })
        card = model_card(self.config, backbone=self.encoder.config.backbone, num_clusters=config.num_clusters,
                          max_length=config.max_length, steps=self.step,
                          cache_seconds=self.cache_seconds if self.cache is not None else None,
                          stage_examples=self.data, rows=rows, world_size=self.dist.world_size)
        write_model_dir(path, config, self.encoder.assignment, self.model.head.weight.detach().float().cpu().numpy(),
                        self.tokenizer, centroids_dtype=np.float16 if self.config.train_head else np.float32,
                        adapter=self._save_adapter if self.peft_model is not None else None,
                        files={CARD_NAME: card.encode("utf-8")}, keep_existing=True, term=self.model.term_vector())
