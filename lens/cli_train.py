"""`lens train`, `lens mntp` and `lens merge`: the commands that make and fold model weights, and their parsers
(``register``). Heavy imports happen inside each command."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from lens.cli_args import LazyChoices, add_overwrite_argument
from lens.cmdline import positive_float, positive_int


def _stop_rule(args: argparse.Namespace, start: float):
    """The ``StopRule`` of a training command: SIGTERM always, ``--time-limit`` counted from the command's start."""
    from lens.train.stopping import StopRule

    return StopRule(args.time_limit, start=start, clock=time.perf_counter)


def add_time_limit_argument(p: argparse.ArgumentParser) -> None:
    def duration(value: str) -> float:
        from lens.train.stopping import parse_duration

        try:
            return parse_duration(value)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    p.add_argument("--time-limit", type=duration, default=None, metavar="T",
                   help="stop cleanly before T (90s, 9m, 1.5h, HH:MM:SS; a bare number is minutes) from the command's "
                        "start: checkpoint written, exit status 75; --resume continues. SIGTERM stops the same way")


def _run_loop(loop, run, start: float, done, command: str) -> int:
    """Run a training loop (``Trainer``, ``MNTPWarmup``) to its end, leave torchrun's process group even when it
    fails, and print ``done(out_dir, seconds)`` once: on the main process. A run stopped early with its checkpoint
    (time limit, SIGTERM) says so and returns ``EXIT_RESUMABLE``."""
    from lens.train.stopping import EXIT_RESUMABLE, TrainingStopped

    try:
        out = run()
    except TrainingStopped as e:  # every rank stopped at the same step
        loop.close()
        if loop.dist.is_main:
            print(f"lens {command}: {e} (after {time.perf_counter() - start:.0f} s)", file=sys.stderr)
        return EXIT_RESUMABLE
    except BaseException:
        loop.close(wait=False)  # the other ranks may be inside a collective: leave without waiting for them
        raise
    loop.close()
    if loop.dist.is_main:
        print(done(out, time.perf_counter() - start))
    return 0


def _require_model(raw: dict, start: str) -> None:
    """A run names its start: the shipped default is trained already, no start by itself."""
    if "model" not in raw:
        raise ValueError(f"give --model START (or \"model\" in --config): {start}")


def _check_resume_or_overwrite(resume: bool, overwrite: bool) -> None:
    if resume and overwrite:
        raise ValueError("--resume continues the run in --out and --overwrite starts it again: give one of them")


def cmd_train(args: argparse.Namespace) -> int:
    from lens.train.config import StageConfig, TrainConfig, resolve_extends
    from lens.train.trainer import Trainer

    if args.config is not None and args.data:
        raise ValueError("--data makes a one-stage run without --config; with --config the stages name their data: "
                         "edit the config's \"data\" lists (or an \"extends\" variant of it)")
    if args.steps is not None and args.epochs is not None:
        raise ValueError("give --steps N (optimiser steps per stage) or --epochs E (passes over each stage's data), "
                         "not both")
    if args.config is not None:
        raw = resolve_extends(args.config)
    elif args.data:
        raw = {"stages": [{"name": "train", "data": [str(p) for p in args.data]}]}
    else:
        raise ValueError("give --config FILE or --data FILE [FILE ...]")
    for flag, key in (("model", "model"), ("lora_layers", "lora_layers"), ("batch_size", "batch_size"),
                      ("lr", "lr"), ("seed", "seed"), ("threads", "threads"), ("device", "device"),
                      ("cache_chunk", "cache_chunk")):
        if getattr(args, flag) is not None:
            raw[key] = getattr(args, flag)
    _require_model(raw, "a `lens cluster-vocab` directory to train a new model (`lens cluster-vocab --model default "
                        "--clusters 8000 --out START`), or the shipped default merged to train on top of it "
                        "(`lens merge default --out START`)")
    config = TrainConfig.from_dict(raw, source=str(args.config or "command line"))
    for stage in config.stages:  # a flag overrides every stage's own value too, and train_config.json records it
        stage.loss = args.loss or stage.loss
        if args.steps is not None:
            stage.steps = args.steps
        if args.epochs is not None:
            stage.steps, stage.epochs = None, args.epochs
        if args.batch_size is not None:
            stage.batch_size = None
        if args.lr is not None:
            stage.lr = None
        StageConfig.loss_weights(stage)
    _check_train_out(args.out, config.model, resume=args.resume, overwrite=args.overwrite)
    _check_device(config.device)
    start = time.perf_counter()
    trainer = Trainer(config, args.out, prefix_cache_dir=args.prefix_cache)  # joins torchrun's process group

    def done(out, s: float) -> str:
        if trainer.start_step == trainer.step:
            return (f"{out} was already complete (step {trainer.step} of {trainer.step}): nothing to train; model in "
                    f"{out} (LensEncoder.from_pretrained({str(out)!r}))")
        return f"trained {trainer.step} steps in {s:.0f} s; model in {out} (LensEncoder.from_pretrained({str(out)!r}))"

    try:
        return _run_loop(trainer, lambda: trainer.train(resume=args.resume, stop=_stop_rule(args, start)), start,
                         done, args.command)
    except KeyboardInterrupt:
        step = _checkpoint_step_of(args.out)
        if step is None:
            raise
        raise KeyboardInterrupt(f"{args.out / 'checkpoint'} holds step {step}: run the same command with --resume "
                                "to continue") from None


def _check_device(device: str | None) -> None:
    """A named device checked as `lens bench --device` checks it (``cuda`` without a GPU: one line, no assert)."""
    if device is not None:
        from lens.sharding import check_devices

        check_devices([device])


def _checkpoint_step_of(out: Path) -> int | None:
    """The step of the checkpoint a training run left in ``out`` (``lens.train.checkpoint.checkpoint_step``)."""
    from lens.train.checkpoint import checkpoint_step
    from lens.train.trainer import CHECKPOINT_DIR

    return checkpoint_step(out / CHECKPOINT_DIR)


def _check_train_out(out: Path, model: str, *, resume: bool, overwrite: bool) -> None:
    """``lens train``'s --out: never its own --model or a user's folder; a run's checkpoint only with --resume
    (continue) or --overwrite (start again); a finished model (or any LENS model) only with --overwrite."""
    from lens.config import CONFIG_NAME
    from lens.model_dir import check_model_output, check_not_input
    from lens.train.trainer import CHECKPOINT_DIR, PREFIX_CACHE_DIR, TRAIN_CONFIG_NAME

    _check_resume_or_overwrite(resume, overwrite)
    check_not_input(out, [model])
    if not ((out / CHECKPOINT_DIR).is_dir() or (out / TRAIN_CONFIG_NAME).is_file()):  # not a training run's folder
        left = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
        if left == [PREFIX_CACHE_DIR]:  # a run stopped before its first checkpoint, while its prefix cache filled
            if resume or overwrite:
                return
            raise FileExistsError(f"{out} holds what a run stopped before its first checkpoint left ({', '.join(left)})"
                                  ": pass --resume to continue it (a prefix cache is reused), --overwrite to start "
                                  "again, or choose a new --out")
        check_model_output(out, overwrite=overwrite, keeps_others=True)  # --resume too: it starts a run here
        return
    if resume or overwrite:
        return
    if (out / CONFIG_NAME).is_file():
        raise FileExistsError(f"{out} holds a finished trained model: pass --overwrite to train again over it, or "
                              "choose a new --out")
    step = _checkpoint_step_of(out)
    if step is not None:
        raise FileExistsError(f"{out} holds a checkpoint at step {step} of an interrupted run: pass --resume to "
                              "continue it, --overwrite to start again, or choose a new --out")


def cmd_mntp(args: argparse.Namespace) -> int:
    from lens.train.mntp import CHECKPOINT_DIR, MNTP_CONFIG_NAME, MNTPConfig, MNTPWarmup

    saved = args.out / MNTP_CONFIG_NAME
    if args.config is None and args.resume and saved.is_file():
        args.config = saved  # `lens mntp --out DIR --resume` continues the run DIR holds
    raw = MNTPConfig.load(args.config).to_dict() if args.config is not None else {}
    for key in ("model", "steps", "batch_size", "max_length", "mask_rate", "lr", "max_texts", "seed", "threads",
                "device", "checkpoint_every", "micro_batch_size"):
        if getattr(args, key) is not None:
            raw[key] = getattr(args, key)
    if args.gradient_checkpointing:
        raw["gradient_checkpointing"] = True
    if args.data:
        raw["data"] = [str(p) for p in args.data]
    if not raw.get("data"):
        raise ValueError("give --data FILE [FILE ...] (training files: their documents are the texts) or --config")
    _require_model(raw, "a `lens cluster-vocab` directory (`lens cluster-vocab --model default --clusters 8000 "
                        "--out START`)")
    _check_resume_or_overwrite(args.resume, args.overwrite)
    if not ((args.out / CHECKPOINT_DIR).is_dir() and saved.is_file()):  # not an MNTP run's folder
        from lens.model_dir import check_model_output

        check_model_output(args.out, [raw["model"]], overwrite=args.overwrite, keeps_others=True)
    elif not (args.resume or args.overwrite):  # a run of its own, finished or not: continued or replaced when asked
        from lens.train.checkpoint import checkpoint_step

        step = checkpoint_step(args.out / CHECKPOINT_DIR)
        raise FileExistsError(f"{args.out} holds an MNTP run (checkpoint at step {step}): pass --resume to continue "
                              "it, --overwrite to start again, or choose a new --out")
    _check_device(raw.get("device"))
    start = time.perf_counter()
    warmup = MNTPWarmup(MNTPConfig.from_dict(raw), args.out, show_progress_bar=True)  # -q hides bars
    return _run_loop(warmup, lambda: warmup.run(resume=args.resume, stop=_stop_rule(args, start)), start,
              lambda out, s: f"MNTP warm-up done in {s:.0f} s; bidirectional model in {out}: continue with "
                             f"`lens train --model {out} ...`", args.command)


def cmd_merge(args: argparse.Namespace) -> None:
    from lens.atomic import DirectoryLock
    from lens.encoder import LensEncoder
    from lens.model_dir import check_model_output

    check_model_output(args.out, [args.model, args.onto], overwrite=args.overwrite)
    for flag, on in (("--term-channel", args.term_channel), ("--echo", args.echo)):
        if on and args.onto is not None:
            raise ValueError(f"{flag} writes a start for training (`lens merge MODEL --out START {flag}`, then "
                             "`lens train --model START`); drop --onto")
    if args.onto is not None:
        from lens.model_dir import stack_model_dirs

        with DirectoryLock(args.out, "model directory"):
            stack_model_dirs(args.model, args.onto, args.out, fraction=args.fraction, rank=args.rank)
        part = "" if args.fraction == 1 else f"; the weights {args.fraction:g} of the way from {args.onto}'s, head too"
        if args.rank is not None:
            part += f"; cut to rank {args.rank}"
        print(f"wrote {args.out}: {args.onto}'s backbone reference and one adapter ({args.onto}'s and {args.model}'s "
              f"stacked{part}); load it with LensEncoder.from_pretrained({str(args.out)!r})")
        return
    if args.fraction != 1 or args.rank is not None:
        raise ValueError("--fraction and --rank apply to two adapters stacked: give the model MODEL was trained from "
                         "with --onto")
    import torch

    with DirectoryLock(args.out, "model directory"):
        # float32 on every device: CUDA's default bfloat16 would round the merged weights (and the LM head, whose
        # hash the clusters are checked against, so the merged model could not be loaded or trained on)
        enc = LensEncoder.from_pretrained(args.model, dtype=torch.float32)
        if enc.config.adapter is None:
            setting = "term_channel" if args.term_channel else "echo" if args.echo else None
            hint = (f"; to turn on {setting}, copy it and set \"{setting}\": true in the copy's config.json"
                    if setting else "")
            raise ValueError(f"{args.model} has no adapter to merge; it is already standalone{hint}")
        if args.term_channel:
            if enc.config.term_channel:
                raise ValueError(f"{args.model} has a term channel already; drop --term-channel")
            enc.config.term_channel = True  # untrained: `lens train` starts it as any new model's channel
        if args.echo:
            if enc.config.echo:
                raise ValueError(f"{args.model} reads its texts with echo already; drop --echo")
            if enc.config.convention != "lens":
                raise ValueError(f"--echo needs the LENS convention; {args.model} uses {enc.config.convention!r}")
            enc.config.echo = True  # the weights as they are: `lens train` adapts them to the echoed input
        enc.save_pretrained(args.out)
    print(f"wrote {args.out}: merged backbone in {args.out / 'backbone'}; load it with "
          f"LensEncoder.from_pretrained({str(args.out)!r})")


# ---------------------------------------------------------------------------------------------- parsers
def _loss_expression(value: str) -> str:
    from lens.train.objectives import parse_loss

    try:
        parse_loss(value, where="--loss")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def register(subparsers) -> None:
    """Add ``train``, ``mntp`` and ``merge`` to ``lens``'s subcommands."""
    t = subparsers.add_parser("train", help="fine-tune a LENS model (LoRA + cluster head) on JSONL pairs; runs "
                                            "unchanged under torchrun / accelerate launch (data parallel)")
    t.add_argument("--config", type=Path, default=None,
                   help="a training config JSON (stages, LoRA, optimiser; lens/train/config.py names every field); "
                        "the flags below override it, every stage's own value included")
    t.add_argument("--out", required=True, type=Path, help="output directory: the trained LENS model + logs")
    t.add_argument("--model", default=None,
                   help="the LENS directory to start from: a `lens cluster-vocab` directory, or a trained model "
                        "merged by `lens merge` (required unless --config names it)")
    t.add_argument("--data", nargs="+", default=None, help="JSONL(.gz) training files (one stage, without --config)")
    loss = t.add_argument("--loss", type=_loss_expression, default=None,
                          help="a loss name (%(names)s) or a weighted sum such as infonce+0.5*bce")
    loss.names = LazyChoices("lens.train.objectives:OBJECTIVES")
    t.add_argument("--steps", type=positive_int, default=None,
                   help="optimiser steps of each stage (default: --epochs, or the config's)")
    t.add_argument("--epochs", type=positive_float, default=None,
                   help="passes over each stage's data (default 1; replaces a stage's steps)")
    t.add_argument("--lora-layers", type=int, default=None,
                   help="train the top N layers only (cache the rest; much faster on a CPU); 0: no LoRA, the decoder "
                        "frozen (only the head, or the term channel with train_head false in --config, trains); "
                        "default: every layer")
    t.add_argument("--batch-size", type=positive_int, default=None,
                   help="examples per step, in-batch negatives included (default 16; replaces every stage's own)")
    t.add_argument("--lr", type=positive_float, default=None,
                   help="LoRA's learning rate (default 1e-4; replaces every stage's own)")
    t.add_argument("--seed", type=int, default=None, help="the batches' and initialisation's seed (default 0)")
    t.add_argument("--threads", type=positive_int, default=None, help="CPU threads (default: torch's)")
    t.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present; under torchrun "
                                                   "each process takes cuda:LOCAL_RANK)")
    t.add_argument("--cache-chunk", type=positive_int, default=None, metavar="N",
                   help="cached contrastive loss (GradCache): embed N texts at a time, so a big batch needs the "
                        "activation memory of N texts only")
    t.add_argument("--prefix-cache", type=Path, default=None,
                   help="where to keep the frozen layers' outputs (default: OUT/prefix-cache); share it between runs")
    t.add_argument("--resume", action="store_true",
                   help="continue from OUT/checkpoint (with the same settings; --time-limit, --threads, --device and "
                        "--cache-chunk may change)")
    add_overwrite_argument(t, "a trained model or an interrupted run's checkpoint")
    add_time_limit_argument(t)
    t.set_defaults(func=cmd_train)

    w = subparsers.add_parser("mntp", help="MNTP warm-up (LLM2Vec): adapt the decoder to bidirectional attention "
                                           "by predicting masked tokens' clusters, before `lens train` (torchrun: "
                                           "data parallel)")
    w.add_argument("--out", required=True, type=Path, help="directory to write: the warmed, merged LENS model")
    w.add_argument("--model", default=None,
                   help="the `lens cluster-vocab` directory to start from (required unless --config names it)")
    w.add_argument("--data", nargs="+", type=Path, default=None,
                   help="training JSONL(.gz) files; their distinct documents are the masked texts")
    w.add_argument("--config", type=Path, default=None, help="an mntp_config.json; the flags override it")
    w.add_argument("--steps", type=positive_int, default=None, help="optimiser steps (default 100)")
    w.add_argument("--batch-size", type=positive_int, default=None, help="texts per step (default 8)")
    w.add_argument("--max-length", type=positive_int, default=None, help="tokens per text (default 128)")
    w.add_argument("--mask-rate", type=float, default=None, help="share of a text's tokens masked (default 0.2)")
    w.add_argument("--lr", type=float, default=None, help="LoRA learning rate (default 2e-4)")
    w.add_argument("--max-texts", type=positive_int, default=None, help="a seeded sample of the documents (20000)")
    w.add_argument("--seed", type=int, default=None)
    w.add_argument("--threads", type=positive_int, default=None)
    w.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present; under torchrun each "
                                                  "process takes cuda:LOCAL_RANK)")
    w.add_argument("--checkpoint-every", type=positive_int, default=None, help="steps between checkpoints (100)")
    w.add_argument("--resume", action="store_true",
                   help="continue from OUT/checkpoint (with OUT's saved settings unless --config is given)")
    w.add_argument("--micro-batch-size", type=positive_int, default=None,
                   help="texts per forward on a process (default: its whole share of the batch); same gradients")
    w.add_argument("--gradient-checkpointing", action="store_true",
                   help="recompute each layer in the backward pass: less memory, more time (large backbones)")
    add_overwrite_argument(w)
    add_time_limit_argument(w)
    w.set_defaults(func=cmd_mntp)

    m = subparsers.add_parser("merge", help="fold a trained model's LoRA adapter into a standalone directory")
    m.add_argument("model", help="a trained LENS directory (with adapter/)")
    m.add_argument("--out", required=True, type=Path, help="directory to write: merged backbone + clusters + config")
    m.add_argument("--onto", default=None, metavar="ONTO",
                   help="MODEL was trained from ONTO merged (`lens merge ONTO`, then `lens train`): write instead "
                        "ONTO's backbone reference and one adapter, the two stacked exactly (rank r1 + r2), with "
                        "MODEL's head and settings (the small form, e.g. over the packaged GGUF)")
    m.add_argument("--fraction", type=float, default=1.0, metavar="F",
                   help="with --onto: the model F of the way from ONTO's weights to MODEL's (adapter update and "
                        "cluster head alike; weight-space ensembling as in WiSE-FT), e.g. 0.5 to keep part of what "
                        "a continuation gained and part of what it lost; default 1 (MODEL itself)")
    m.add_argument("--rank", type=positive_int, default=None, metavar="R",
                   help="with --onto: write the stacked adapter at rank R instead of r1 + r2, each module's update "
                        "cut to its best rank-R approximation (truncated SVD; the energy kept is recorded in "
                        "config.json), so it keeps the size of one adapter trained at rank R; default exact")
    m.add_argument("--term-channel", action="store_true",
                   help="write the merged model with an untrained explicit term channel (each of a text's own "
                        "tokens' clusters gets a learned weight, merged by max with the expansion; docs/encoding.md), "
                        "a start for `lens train --model OUT` to train it with the decoder and head")
    m.add_argument("--echo", action="store_true",
                   help="write the merged model reading its texts with echo (each text twice, the second copy "
                        "pooled; lens.inputs), a start for `lens train --model OUT` to adapt it to that input")
    add_overwrite_argument(m)
    m.set_defaults(func=cmd_merge)
