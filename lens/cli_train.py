"""`lens train`, `lens mntp` and `lens merge`: the commands that make and fold model weights (their parsers are
in ``lens.cli``). Heavy imports happen inside each command."""

from __future__ import annotations

import argparse
import sys
import time


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
    except TrainingStopped as e:
        if loop.dist.is_main:
            print(f"lens {command}: {e} (after {time.perf_counter() - start:.0f} s)", file=sys.stderr)
        return EXIT_RESUMABLE
    finally:
        loop.close()
    if loop.dist.is_main:
        print(done(out, time.perf_counter() - start))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from lens.train.config import StageConfig, TrainConfig
    from lens.train.trainer import Trainer

    if args.config is not None:
        from lens.atomic import read_json

        raw = read_json(args.config, "training config")
    elif args.data:
        raw = {"stages": [{"name": "train", "data": [str(p) for p in args.data]}]}
    else:
        raise ValueError("give --config FILE or --data FILE [FILE ...]")
    for flag, key in (("model", "model"), ("lora_layers", "lora_layers"), ("batch_size", "batch_size"),
                      ("lr", "lr"), ("seed", "seed"), ("threads", "threads"), ("device", "device"),
                      ("cache_chunk", "cache_chunk")):
        if getattr(args, flag) is not None:
            raw[key] = getattr(args, flag)
    config = TrainConfig.from_dict(raw, source=str(args.config or "command line"))
    if args.config is None or args.loss or args.steps or args.epochs:
        for stage in config.stages:
            stage.loss = args.loss or stage.loss
            stage.steps = args.steps if args.steps is not None else stage.steps
            stage.epochs = args.epochs if args.epochs is not None else stage.epochs
            StageConfig.loss_weights(stage)
    start = time.perf_counter()
    trainer = Trainer(config, args.out, prefix_cache_dir=args.prefix_cache)  # joins torchrun's process group
    return _run_loop(trainer, lambda: trainer.train(resume=args.resume, stop=_stop_rule(args, start)), start,
              lambda out, s: f"trained {trainer.step} steps in {s:.0f} s; model in {out} "
                             f"(LensEncoder.from_pretrained({str(out)!r}))", args.command)


def cmd_mntp(args: argparse.Namespace) -> int:
    from lens.train.mntp import MNTP_CONFIG_NAME, MNTPConfig, MNTPWarmup

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
    start = time.perf_counter()
    warmup = MNTPWarmup(MNTPConfig.from_dict(raw), args.out, show_progress_bar=True)  # -q hides bars
    return _run_loop(warmup, lambda: warmup.run(resume=args.resume, stop=_stop_rule(args, start)), start,
              lambda out, s: f"MNTP warm-up done in {s:.0f} s; bidirectional model in {out}: continue with "
                             f"`lens train --model {out} ...`", args.command)


def cmd_merge(args: argparse.Namespace) -> None:
    from lens.atomic import DirectoryLock
    from lens.encoder import LensEncoder
    from lens.model_dir import check_model_target

    check_model_target(args.out)
    with DirectoryLock(args.out, "model directory"):
        enc = LensEncoder.from_pretrained(args.model)
        if enc.config.adapter is None:
            raise ValueError(f"{args.model} has no adapter to merge; it is already standalone")
        enc.save_pretrained(args.out)
    print(f"wrote {args.out}: merged backbone in {args.out / 'backbone'}; load it with "
          f"LensEncoder.from_pretrained({str(args.out)!r})")
