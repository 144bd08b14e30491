"""Training studies (issue 10): variants of one small run, each at the same step budget, judged on data no run
trains on.

Every variant is the base run (`BASE`) with a few settings changed (`VARIANTS`). Each trains on the mixture built
by `make train-data-mixture` with at most `--per-task` examples of each task, then is judged from its trainer
(through the frozen-prefix cache, so only the trained layers run again):

- ``scifact_ndcg``: nDCG@10 of the lexicon reranking BM25's top 20 for SciFact *train* queries held out of the
  mixture (``lens data beir --holdout 0.2`` leaves out exactly these); documents at 256 tokens, as the shipped model
  encodes them. ``bm25`` is the pools' own order.
- ``scifact_hybrid``: the same pools reranked by the hybrid score ``0.5 cos_lex + 0.5 cos_MiniLM`` (the index's
  default), what a variant trained for the hybrid (the ``hybrid`` loss) should lift.
- ``stsb_dev``: STS-B *dev* Spearman x 100 of the lexicon cosine (sentence 1 as a query behind the STS instruction).
- ``val_loss``: InfoNCE over fixed batches of the 2% of each new set's queries held out (``mixture-val``).

No test split and no evaluation corpus is trained on. Results land in ``<output>.json`` after every variant (a rerun
skips the variants already there; ``--force`` judges them again, keeping a finished run's timings) and in
``<output>.md``. A variant stopped midway resumes from its last checkpoint (every 50 steps, under
``--work``/runs/<variant>).

    python benchmarks/training_study.py --steps 150 --threads 2
    python benchmarks/training_study.py --variants base,causal --steps 150
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import logging
import time
from pathlib import Path

from _common import (REPO, add_data_dir_argument, data_dir, script_command, write_markdown as write_markdown_file,
                     write_results)
from lens.eval.report import output_file
from lens.cli_args import Parser

logger = logging.getLogger("training_study")

MIXTURE = ["squad", "tweeteval", "clinc150", "banking77", "trec-qc", "snli-cad", "nq-qed", "wikiqa",
           "pubmedqa-labeled", "scifact-train"]
# Issue 11: the retrieval sets alone, and with the label-augmented classification / NLI sets (`make
# train-data-labels`: label text + explanation + id as positives, other labels as negatives) in their place.
RETRIEVAL = ["squad", "nq-qed", "wikiqa", "pubmedqa-labeled", "scifact-train"]
# The same sets with MiniLM's cosines as teacher scores (`make train-data-teacher`: a seeded 1000 per task).
TEACHER = ["teacher/" + s for s in RETRIEVAL]
LABELS = ["labels/tweeteval", "labels/clinc150", "labels/banking77", "labels/trec-qc", "labels/snli-cad"]
SHIPPED = {"attention": "causal", "lr": 1e-3, "head_lr": 2e-3, "loss": "infonce+0.2*flops"}

BASE = {
    "clusters": 4000, "attention": "bidirectional",  # the starting model directory (study-specific)
    "lora_layers": 8, "lr": 5e-4, "head_lr": 1e-3, "warmup_steps": 10, "batch_size": 16, "temperature": 0.02,
    "query_max_length": 64, "doc_max_length": 128, "max_length": 256, "loss": "infonce", "max_negatives": 1,
    "mixture": MIXTURE,  # files under --data/mixture ("<dir>/<set>": under --data/<dir>)
    "mntp_steps": 0,  # an MNTP warm-up of the starting model first (bidirectional only; lens.train.mntp)
    "bias_init": "fitted",  # the BCE bias's start (TrainConfig.bias_init)
    "logit_position": "next",  # which position's logits stand for a token (LensConfig.logit_position; starting model)
    "term_channel": False,  # the explicit term channel (LensConfig.term_channel; starting model)
    "start": "clusters",  # "clusters": a fresh `lens cluster-vocab` of the backbone; "default": the shipped model, merged
    "train_head": True,
}
MNTP_DATA = "mixture/squad"  # its documents (Wikipedia paragraphs of the training part) are the masked texts

# name -> (what it changes, overrides of BASE). The order runs the variants sharing the base's prefix cache first.
VARIANTS: dict[str, tuple[str, dict]] = {
    "base": ("bidirectional, top 8 layers, k 4000, lr 5e-4, docs 128 tokens, InfoNCE", {}),
    "lr-2e-4": ("learning rate 2e-4 (head 4e-4)", {"lr": 2e-4, "head_lr": 4e-4}),
    "lr-1e-3": ("learning rate 1e-3 (head 2e-3)", {"lr": 1e-3, "head_lr": 2e-3}),
    "k2000": ("2000 clusters", {"clusters": 2000}),
    "k8000": ("8000 clusters", {"clusters": 8000}),
    "flops-2": ("InfoNCE + 2 x FLOPS on the unit vectors (sparsity)", {"loss": "infonce+2*flops"}),
    "flops-0.2": ("InfoNCE + 0.2 x FLOPS on the unit vectors (sparsity)", {"loss": "infonce+0.2*flops"}),
    "bce": ("InfoNCE + 0.5 x pointwise BCE (learned bias)", {"loss": "infonce+0.5*bce"}),
    "negatives-3": ("3 hard negatives where the data has them", {"max_negatives": 3}),
    "docs-256": ("documents cut at 256 tokens in training", {"doc_max_length": 256}),
    "causal": ("causal attention (as SmolLM2 was pretrained)", {"attention": "causal"}),
    "causal-lr-1e-3": ("causal attention and learning rate 1e-3 (head 2e-3)",
                       {"attention": "causal", "lr": 1e-3, "head_lr": 2e-3}),
    "layers-16": ("top 16 layers trained", {"lora_layers": 16}),
    "layers-all": ("all 30 layers trained", {"lora_layers": None}),
    "retrieval-only": ("shipped settings (causal, lr 1e-3, 0.2 x FLOPS); retrieval sets only, no classification "
                       "or NLI data", {**SHIPPED, "mixture": RETRIEVAL}),
    "label-augmented": ("shipped settings; retrieval sets + label-augmented classification and NLI (label text + "
                        "explanation + id)", {**SHIPPED, "mixture": RETRIEVAL + LABELS}),
    "retrieval-only-k2000": ("retrieval-only with 2000 clusters", {**SHIPPED, "mixture": RETRIEVAL, "clusters": 2000}),
    "retrieval-only-k8000": ("retrieval-only with 8000 clusters", {**SHIPPED, "mixture": RETRIEVAL, "clusters": 8000}),
    "retrieval-only-docs-256": ("retrieval-only with documents cut at 256 tokens in training",
                                {**SHIPPED, "mixture": RETRIEVAL, "doc_max_length": 256}),
    "retrieval-only-layers-16": ("retrieval-only with the top 16 layers trained",
                                 {**SHIPPED, "mixture": RETRIEVAL, "lora_layers": 16}),
    "retrieval-only-k8000-lr-5e-4": ("retrieval-only-k8000 with half the learning rate: 5e-4 (head 1e-3)",
                                     {**SHIPPED, "mixture": RETRIEVAL, "clusters": 8000, "lr": 5e-4,
                                      "head_lr": 1e-3}),
    "retrieval-only-k8000-lr-2e-3": ("retrieval-only-k8000 with twice the learning rate: 2e-3 (head 4e-3)",
                                     {**SHIPPED, "mixture": RETRIEVAL, "clusters": 8000, "lr": 2e-3,
                                      "head_lr": 4e-3}),
    "retrieval-only-k8000-docs-256": ("retrieval-only-k8000 with documents cut at 256 tokens in training",
                                      {**SHIPPED, "mixture": RETRIEVAL, "clusters": 8000, "doc_max_length": 256}),
    "retrieval-only-k8000-layers-all": ("retrieval-only-k8000 with all 30 layers trained (the shipped GPU run's "
                                        "setting; no frozen prefix to cache)",
                                        {**SHIPPED, "mixture": RETRIEVAL, "clusters": 8000, "lora_layers": None}),
    "retrieval-only-bce-teacher": ("retrieval-only + 0.5 x pointwise BCE with graded targets from MiniLM's cosines "
                                   "(BiXSE-style, learned bias started at SigLIP's -log(N-1))",
                                   {**SHIPPED, "mixture": TEACHER, "loss": "infonce+0.2*flops+0.5*bce-teacher",
                                    "bias_init": "siglip"}),
    "retrieval-only-k8000-bce-teacher": ("retrieval-only-k8000 + 0.5 x the same teacher-graded BCE, its bias started "
                                         "at -log(N-1) less 20 x the first batch's mean cosine (bias_init fitted)",
                                         {**SHIPPED, "mixture": TEACHER, "clusters": 8000,
                                          "loss": "infonce+0.2*flops+0.5*bce-teacher"}),
    "retrieval-only-k8000-remined": ("retrieval-only-k8000 with SciFact's hard negatives re-mined by the shipped "
                                     "default (ranks 3-30 of its int8 ranking; `make train-data-remined`) instead of "
                                     "BM25's", {**SHIPPED, "clusters": 8000,
                                                "mixture": RETRIEVAL[:-1] + ["remined/scifact-train"]}),
    "retrieval-only-k8000-hybrid": ("retrieval-only-k8000 trained for the hybrid: InfoNCE over 0.5 cos_lex + 0.5 "
                                    "cos_MiniLM (MiniLM frozen) instead of the lexicon's cosine",
                                    {**SHIPPED, "mixture": RETRIEVAL, "clusters": 8000, "loss": "hybrid+0.2*flops"}),
    "retrieval-only-k8000-infonce-hybrid": ("retrieval-only-k8000 with both: InfoNCE on the lexicon + InfoNCE on the "
                                            "hybrid score",
                                            {**SHIPPED, "mixture": RETRIEVAL, "clusters": 8000,
                                             "loss": "infonce+hybrid+0.2*flops"}),
    "retrieval-only-k8000-exact": ("retrieval-only-k8000 + 1 x the exact loss (the share of each vector's weight off "
                                   "the clusters of its own tokens: `lens bench lexicality`'s exact share, rewarded)",
                                   {**SHIPPED, "mixture": RETRIEVAL, "clusters": 8000,
                                    "loss": "infonce+0.2*flops+exact"}),
    "retrieval-only-k8000-exact-0.2": ("retrieval-only-k8000-exact with the exact loss at weight 0.2 instead of 1",
                                       {**SHIPPED, "mixture": RETRIEVAL, "clusters": 8000,
                                        "loss": "infonce+0.2*flops+0.2*exact"}),
    "retrieval-only-k8000-own-position": ("retrieval-only-k8000 pooling each token's own logits instead of the "
                                          "position before it (logit_position 'own': under causal attention the "
                                          "position has seen its token and can keep it; issue 39's exact terms)",
                                          {**SHIPPED, "mixture": RETRIEVAL, "clusters": 8000,
                                           "logit_position": "own"}),
    "retrieval-only-k8000-term-channel": ("retrieval-only-k8000 with the explicit term channel: each of a text's own "
                                          "tokens' clusters gets a learned weight log1p(relu(w . h + b)) from the "
                                          "token's own position, merged by max with the expansion (uniCOIL-style; "
                                          "issue 39's exact terms)",
                                          {**SHIPPED, "mixture": RETRIEVAL, "clusters": 8000, "term_channel": True}),
    "retrieval-only-k8000-term-channel-no-flops": ("retrieval-only-k8000-term-channel without the FLOPS term (InfoNCE "
                                                   "alone), which priced the expansion away once the channel supplied "
                                                   "the own clusters", {**SHIPPED, "mixture": RETRIEVAL,
                                                                        "clusters": 8000, "term_channel": True,
                                                                        "loss": "infonce"}),
    "retrieval-only-k8000-bm25": ("retrieval-only-k8000 + 1 x BM25 distillation (the bm25 loss: KL from BM25's "
                                  "softmax over each query's in-batch candidates, scores over the row's highest at "
                                  "temperature 0.05, to the lexicon's; issue 39's exact terms)",
                                  {**SHIPPED, "mixture": RETRIEVAL, "clusters": 8000,
                                   "loss": "infonce+0.2*flops+bm25"}),
    "retrieval-only-k8000-term-channel-bm25": ("retrieval-only-k8000-term-channel + 1 x BM25 distillation (the two "
                                               "exact-term levers together: the channel gives each own token a "
                                               "learnt weight, BM25's ranking of the in-batch candidates teaches "
                                               "how much)", {**SHIPPED, "mixture": RETRIEVAL, "clusters": 8000,
                                                             "term_channel": True,
                                                             "loss": "infonce+0.2*flops+bm25"}),
    "default-term-channel-only": ("the shipped default (merged) with the term channel added and trained alone: "
                                  "decoder and head frozen (lora_layers 0), InfoNCE on the retrieval sets; the "
                                  "expansion is the default's, only each own token's weight is learnt",
                                  {**SHIPPED, "mixture": RETRIEVAL, "start": "default", "term_channel": True,
                                   "lora_layers": 0, "train_head": False, "loss": "infonce"}),
    "retrieval-only-k8000-bidirectional-mntp": ("retrieval-only-k8000 with bidirectional attention after an MNTP "
                                                "warm-up (LLM2Vec; `lens mntp`: 100 steps of 8 SQuAD paragraphs, "
                                                "20% of tokens masked, LoRA on every layer, merged)",
                                                {**SHIPPED, "mixture": RETRIEVAL, "clusters": 8000,
                                                 "attention": "bidirectional", "mntp_steps": 100}),
    "retrieval-only-k8000-bidirectional-mntp1000": ("retrieval-only-k8000-bidirectional-mntp with a warm-up 10x as "
                                                    "long (1000 MNTP steps of 8 SQuAD paragraphs)",
                                                    {**SHIPPED, "mixture": RETRIEVAL, "clusters": 8000,
                                                     "attention": "bidirectional", "mntp_steps": 1000}),
}

JUDGE_DOC_LENGTH = 256
MODEL_ROW = "model:"  # a saved model's row in the results: "model:<path>"
SEED_ROW = "@seed"  # a variant trained with another --seed: "<variant>@seed<N>" (seed 0 keeps the bare name)


def row_name(variant: str, seed: int) -> str:
    """The results row (and run directory) of ``variant`` trained with ``seed``."""
    return variant if seed == 0 else f"{variant}{SEED_ROW}{seed}"


def variant_of(row: str) -> str:
    """The variant a results row was trained as (``row_name``'s inverse)."""
    return row.split(SEED_ROW)[0]


def parse_args(argv=None) -> argparse.Namespace:
    p = Parser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated names of VARIANTS")
    p.add_argument("--steps", type=int, default=150, help="optimiser steps per variant (the same for all)")
    p.add_argument("--per-task", type=int, default=2000, help="examples kept per task (seeded)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", type=Path, default=REPO / ".cache/lens-train", help="where make train-data-mixture wrote")
    add_data_dir_argument(p)
    p.add_argument("--work", type=Path, default=REPO / ".cache/lens-study", help="models and prefix caches")
    p.add_argument("--output", type=Path, default=REPO / "benchmarks/results/training_study")
    p.add_argument("--judge-queries", type=int, default=100, help="held-out SciFact train queries judged")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--force", action="store_true", help="rerun variants already in the results")
    p.add_argument("--no-untrained", action="store_true", help="skip the untrained starting model's row")
    p.add_argument("--models", default="",
                   help="comma-separated saved models (e.g. default) judged as they are, beside the variants")
    return p.parse_args(argv)


def start_model(work: Path, clusters: int, attention: str, mntp_steps: int = 0, data: Path | None = None,
                threads: int | None = None, logit_position: str = "next", term_channel: bool = False) -> Path:
    """The clustering directory a variant starts from (made once), MNTP-warmed when ``mntp_steps``, pooling the
    logits at ``logit_position``, with the term channel when ``term_channel``."""
    start = _start_model(work, clusters, attention, mntp_steps, data, threads)
    if logit_position == "next" and not term_channel:
        return start
    suffix = "".join(["" if logit_position == "next" else f"-{logit_position}", "-terms" if term_channel else ""])
    return config_copy(start, start.with_name(f"{start.name}{suffix}"), logit_position=logit_position,
                       term_channel=term_channel)


def config_copy(source: Path, target: Path, **settings) -> Path:
    """``target``: a copy of the model directory ``source`` (made once) whose config.json has ``settings``."""
    if not (target / "config.json").is_file():
        import shutil

        from lens.config import LensConfig

        shutil.copytree(source, target, dirs_exist_ok=True)
        config = LensConfig.load(target)
        for name, value in settings.items():
            setattr(config, name, value)
        config.save(target)
    return target


def shipped_start(work: Path, term_channel: bool = False) -> Path:
    """The shipped default with its adapter merged (made once), with the term channel when ``term_channel``: a
    starting model for training on top of it."""
    from lens.encoder import LensEncoder

    merged = work / "default-merged"
    if not (merged / "config.json").is_file():
        LensEncoder.from_pretrained("default").save_pretrained(merged)
    return config_copy(merged, work / "default-merged-terms", term_channel=True) if term_channel else merged


def _start_model(work: Path, clusters: int, attention: str, mntp_steps: int = 0, data: Path | None = None,
                 threads: int | None = None) -> Path:
    from lens.vocab import cluster_vocab

    out = work / f"smollm2-k{clusters}"
    if not (out / "config.json").is_file():
        cluster_vocab(out, "default", clusters)
    if mntp_steps:
        from lens.train.mntp import MNTPConfig, MNTPWarmup

        if attention != "bidirectional":
            raise SystemExit("an MNTP warm-up is for bidirectional attention; drop mntp_steps or the causal setting")
        warm = work / f"smollm2-k{clusters}-mntp{mntp_steps}"
        if not (warm / "config.json").is_file():
            texts = data / f"{MNTP_DATA}.jsonl.gz"
            MNTPWarmup(MNTPConfig(data=[str(texts)], model=str(out), steps=mntp_steps, threads=threads),
                       warm).run(resume=True)
        return warm
    if attention == "bidirectional":
        return out
    from lens.encoder import LensEncoder

    other = work / f"smollm2-k{clusters}-{attention}"
    if not (other / "config.json").is_file():
        LensEncoder.from_pretrained(out, attention=attention).save_pretrained(other)
    return other


def train_config(settings: dict, model: Path, data: Path, val_file: Path, steps: int, seed: int, per_task: int,
                 threads: int | None):
    from lens.train.config import TrainConfig

    files = [data / f"{s if '/' in s else 'mixture/' + s}.jsonl.gz" for s in settings["mixture"]]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise SystemExit(f"missing training files {missing}: run `make train-data-mixture train-data-labels "
                         "train-data-teacher train-data-remined` first")
    stage = {"name": "mixture", "data": [str(f) for f in files],
             "loss": settings["loss"], "steps": steps, "max_negatives": settings["max_negatives"],
             "max_per_task": per_task}
    keys = ("lora_layers", "lr", "head_lr", "warmup_steps", "batch_size", "temperature", "query_max_length",
            "doc_max_length", "max_length", "bias_init", "train_head")
    return TrainConfig.from_dict({
        "model": str(model), "stages": [stage], "seed": seed, "threads": threads, "val_data": [str(val_file)],
        "val_examples": 10**6, "checkpoint_every": min(steps, 50), "eval_every": steps,
        **{k: settings[k] for k in keys}})


def validation_file(data: Path, out: Path, per_set: int = 32) -> Path:
    """The first ``per_set`` held-out examples of each new set, in one file (fixed, so every variant sees it)."""
    from lens.train.data import read_examples, write_examples

    examples = []
    for path in sorted((data / "mixture-val").glob("*.jsonl.gz")):
        examples += read_examples(path)[:per_set]
    if not examples:
        raise SystemExit(f"no held-out examples under {data / 'mixture-val'}: run `make train-data-mixture` first")
    write_examples(out, examples)
    return out


def dense_pools(rerank):
    """MiniLM's vectors of the judged queries (bare) and pool documents, for the hybrid judge (encoded once)."""
    from lens.dense import DenseEncoder

    minilm = DenseEncoder.from_pretrained("minilm")
    return minilm.encode(rerank.query_texts), minilm.encode(rerank.doc_texts)


def judge(encode, rerank, sts, dense, validate=None) -> dict:
    """The development measures of a model: ``encode(texts, instruction=None, max_length=None)`` gives its unit
    lexicon vectors (queries when an instruction is given); ``dense`` is ``dense_pools(rerank)``; ``validate()``
    its validation loss (a trainer's)."""
    from index.vectors import document_vectors, query_vectors
    from lens.eval.dev import rerank_ndcg
    from lens.eval.sts import STS_INSTRUCTION, sts_score
    from lens.instructions import get_instruction

    t = time.perf_counter()
    q = encode(rerank.query_texts, instruction=get_instruction("scifact"))
    d = encode(rerank.doc_texts, max_length=JUDGE_DOC_LENGTH)
    s1 = encode(sts[0], instruction=STS_INSTRUCTION)
    s2 = encode(sts[1])
    hybrid = rerank_ndcg(rerank, query_vectors(q, dense[0], 0.5, 0.5), document_vectors(d, dense[1]))
    return {"scifact_ndcg": rerank_ndcg(rerank, q, d), "scifact_hybrid": hybrid,
            "stsb_dev": sts_score(s1, s2, sts[2]),
            "doc_nonzero": float((d > 0).sum(axis=1).mean()), "doc_dims": int(d.shape[1]),
            "val_loss": validate() if validate else None, "judge_s": time.perf_counter() - t}


def judge_model(path: str, rerank, sts, dense) -> dict:
    """A saved LENS model (e.g. the shipped ``default``) on the same judges; no validation loss (no trainer)."""
    from lens.encoder import LensEncoder

    encoder = LensEncoder.from_pretrained(path)
    encoder.max_seq_length = JUDGE_DOC_LENGTH

    def encode(texts, instruction=None, max_length=None):
        if instruction is None:
            return encoder.encode_documents(texts, batch_size=16)
        return encoder.encode_queries(texts, instruction=instruction, batch_size=16)

    return {"variant": MODEL_ROW + path, **judge(encode, rerank, sts, dense)}


TIMINGS = ("steps", "threads", "start_s", "setup_s", "train_s", "step_s", "cache_s")


def keep_timings(row: dict, previous: dict | None) -> dict:
    """``row`` with ``previous``'s timings when the run was already finished (a forced re-judge resumes at the last
    step and trains nothing, so its own times would say a step took no time)."""
    if previous and row["train_s"] < 0.05 * previous.get("train_s", 0):
        return {**row, **{k: previous[k] for k in TIMINGS if k in previous}}
    return row


def run_variant(name: str, settings: dict, args, rerank, sts, dense, val_file: Path, steps: int,
                previous: dict | None = None) -> dict:
    """Train (or resume) a variant and judge it; a finished run judged again keeps ``previous``'s timings."""
    from lens.train.trainer import Trainer

    t0 = time.perf_counter()
    if settings["start"] == "default":
        model = shipped_start(args.work, settings["term_channel"])
    else:
        model = start_model(args.work, settings["clusters"], settings["attention"], settings["mntp_steps"], args.data,
                            args.threads, settings["logit_position"], settings["term_channel"])
    start_s = time.perf_counter() - t0
    config = train_config(settings, model, args.data, val_file, max(steps, 1), args.seed, args.per_task, args.threads)
    split = "all" if settings["lora_layers"] is None else settings["lora_layers"]
    cache = args.work / f"prefix-{settings['attention']}-{split}"  # the states are keyed by the model too
    out = args.work / "runs" / row_name(name, args.seed)
    t0 = time.perf_counter()
    trainer = Trainer(config, out, prefix_cache_dir=cache if settings["lora_layers"] is not None else None)
    setup_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    if steps:
        trainer.train(resume=True)
    train_s = time.perf_counter() - t1
    row = {"variant": name, "seed": args.seed, "steps": steps, "threads": args.threads, "start_s": start_s,
           "setup_s": setup_s, "train_s": train_s,
           "step_s": train_s / steps if steps else None, "cache_s": trainer.cache_seconds}
    row = keep_timings(row, previous)
    row.update(judge(trainer.encode, rerank, sts, dense, trainer.validate))
    del trainer
    gc.collect()
    return row


def _number(value: float | None) -> str:
    return "not measured in these runs" if value is None else f"{value:.4f}"


def write_markdown(results: dict, path: Path, command: str) -> str:
    """The table alone at ``path`` (the results file unchanged); returns it."""
    text = "\n".join(markdown_lines(results, command)) + "\n"
    write_markdown_file(path, text)
    return text


def markdown_lines(results: dict, command: str) -> list[str]:
    base = results.get("base")
    commands = results.get("_meta", {}).get("commands") or [command]
    lines = [
        "# Training studies (issues 10 and 11)", "",
        *(["Command:", "", f"`{command}`"] if len(commands) == 1 else
          ["Commands (each added the rows it names; rows from other invocations are kept):", "",
           *[f"- `{c}`" for c in commands]]), "",
        f"Each variant: {results.get('_meta', {}).get('steps')} steps of batch 16 (one task per batch) on the mixture "
        f"(`make train-data-mixture`, at most {results.get('_meta', {}).get('per_task')} examples per task), "
        "changing only what its row says. Judged on data no run trains on:",
        "- **SciFact held-out**: nDCG@10 of the lexicon reranking BM25's top 20 for "
        f"{results.get('_meta', {}).get('judge_queries')} SciFact *train* queries held out of the mixture "
        f"(BM25's own order of the same pools: {results.get('_meta', {}).get('bm25_ndcg', float('nan')):.4f});",
        "- **hybrid**: the same pools reranked by 0.5 cos_lex + 0.5 cos_MiniLM (the index's default weights; "
        f"MiniLM alone on the pools: {_number(results.get('_meta', {}).get('minilm_ndcg'))}; rows "
        "judged before this column show -);",
        "- **STS-B dev**: Spearman x 100 of the lexicon cosine;",
        "- **val loss**: InfoNCE over fixed batches of each new set's held-out 2% (lower is better).", "",
        "| variant | changes | SciFact held-out nDCG@10 | hybrid (0.5/0.5 with MiniLM) | STS-B dev | val loss | "
        "nonzero dims / doc | s/step (threads) | prefix cache s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        if name.startswith("_"):
            continue
        if variant_of(name) in VARIANTS:
            what = VARIANTS[variant_of(name)][0] + (f" (seed {r['seed']})" if r.get("seed") else "")
        elif name.startswith(MODEL_ROW):
            what = f"a saved model ({name.removeprefix(MODEL_ROW)}), judged as it is: no training here"
        else:
            what = "the clustered backbone before any training (k 4000)"
        delta = "" if base is None or name == "base" else f" ({r['scifact_ndcg'] - base['scifact_ndcg']:+.4f})"
        step = f"{r['step_s']:.2f} ({r.get('threads') or '-'})" if r.get("step_s") else "-"
        nonzero = f"{r['doc_nonzero']:.0f} of {r['doc_dims']}" if "doc_nonzero" in r else "-"
        val = "-" if r.get("val_loss") is None else f"{r['val_loss']:.3f}"
        cache = "-" if r.get("cache_s") is None else f"{r['cache_s']:.0f}"
        hybrid = f"{r['scifact_hybrid']:.4f}" if "scifact_hybrid" in r else "-"
        lines.append(f"| {name} | {what} | {r['scifact_ndcg']:.4f}{delta} | {hybrid} | {r['stsb_dev']:.1f} | "
                     f"{val} | {nonzero} | {step} | {cache} |")
    lines += seed_spread(results)
    notes = [f"- **{name}**: {r['note']}" for name, r in results.items() if not name.startswith("_") and r.get("note")]
    lines += ["", "Notes (added to a row's `note` in the results file after reading its run):", *notes] if notes else []
    lines += ["", "Hardware: this machine's CPU (2 cores, AVX2), float32. Most variants ran one seed: read their "
              "differences against the run-to-run spread over seeds (`training_study_300.md`: at 300 steps, three "
              "seeds of one variant span 0.06 nDCG on the SciFact held-out judge, 0.013 in the hybrid column and 4 "
              "STS-B points). s/step is wall time and depends on what "
              "else ran on the machine (a 2-thread run sharing the cores slows several-fold): compare quality, not "
              "times, across rows. The results file keeps every row; rows come from earlier invocations of the same "
              "script with other --variants/--threads (see the threads column)."]
    return lines


def seed_spread(results: dict) -> list[str]:
    """Markdown lines with the spread over seeds of each variant trained with more than one: the run-to-run noise
    the single-seed rows should be read against."""
    seeds: dict[str, list[dict]] = {}
    for name, r in results.items():
        if variant_of(name) in VARIANTS:
            seeds.setdefault(variant_of(name), []).append(r)
    lines = []
    for variant, rows in seeds.items():
        if len(rows) < 2:
            continue
        parts = []
        for key, label, digits in (("scifact_ndcg", "SciFact held-out", 4), ("scifact_hybrid", "hybrid", 4),
                                   ("stsb_dev", "STS-B dev", 1), ("val_loss", "val loss", 3)):
            values = [r[key] for r in rows if r.get(key) is not None]
            if len(values) == len(rows):
                parts.append(f"{label} {min(values):.{digits}f} to {max(values):.{digits}f} "
                             f"(range {max(values) - min(values):.{digits}f})")
        lines.append(f"- **{variant}** over seeds {sorted(r.get('seed', 0) for r in rows)}: " + "; ".join(parts))
    return ["", "Run-to-run spread (the same variant, other `--seed`s: data sample, batch order, LoRA start):",
            *lines] if lines else []


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    import torch

    from lens.atomic import read_json
    from lens.eval.dev import holdout_rerank_set, rerank_ndcg
    from lens.eval.sts import load_sts

    if args.threads:
        torch.set_num_threads(args.threads)
    names = [n for n in args.variants.split(",") if n]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}; choose from {', '.join(VARIANTS)}")
    shared = data_dir(args.data_dir)
    args.work.mkdir(parents=True, exist_ok=True)
    rerank = holdout_rerank_set(shared / "beir" / "scifact", 0.2, depth=20, max_queries=args.judge_queries)
    sts = load_sts(shared / "sts" / "stsbenchmark" / "stsbenchmark.tsv.gz", "dev")
    val_file = validation_file(args.data, args.work / "validation.jsonl.gz")
    dense = dense_pools(rerank)
    json_path = output_file(args.output, ".json")
    results = read_json(json_path, "study results") if json_path.is_file() else {}
    command = script_command(argv, __file__)
    commands = list(results.get("_meta", {}).get("commands") or [])  # the invocations that added rows
    results["_meta"] = {"steps": args.steps, "per_task": args.per_task, "judge_queries": len(rerank.query_ids),
                        "judge_docs": len(rerank.doc_ids), "bm25_ndcg": rerank.bm25_ndcg(), "seed": args.seed,
                        "minilm_ndcg": rerank_ndcg(rerank, *dense), "commands": commands}
    todo = ([] if args.no_untrained else [("untrained", BASE, 0)]) + [
        (n, {**copy.deepcopy(BASE), **VARIANTS[n][1]}, args.steps) for n in names]
    todo += [(MODEL_ROW + m, None, 0) for m in args.models.split(",") if m]
    for name, settings, steps in todo:
        key = row_name(name, args.seed) if name in VARIANTS else name
        if key in results and not args.force:
            logger.info("%s: already measured, skipped", key)
            continue
        logger.info("%s: %s", key, json.dumps(settings))
        results[key] = (judge_model(name.removeprefix(MODEL_ROW), rerank, sts, dense) if settings is None else
                        run_variant(name, settings, args, rerank, sts, dense, val_file, steps, results.get(key)))
        logger.info("%s: %s", key, results[key])
        if command not in commands:
            commands.append(command)
        write_results(args.output, results, markdown_lines(results, command))
    print(write_markdown(results, output_file(args.output, ".md"), command))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
