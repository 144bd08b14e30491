"""Data-parallel training and the cached contrastive loss, on the tiny random Llama.

Two CPU processes over gloo take one step on a global batch and get the loss and the LoRA, head and bias
gradients of one process on that batch, for every registered objective; the cached loss (GradCache) equals the
plain loss; a checkpoint written by two ranks resumes on one; one rank's time limit stops both at the same step;
only rank 0 writes; the MNTP warm-up on two ranks takes one process's steps. The worker processes run this
very file as a script (``__main__`` below) with torchrun's environment variables set, and build their trainers
from the same saved tiny LENS directory as the tests; one launch runs every distributed scenario.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

Q = ["cancer drug trial", "gene expression in mouse", "protein level in blood", "brain cells",
     "clinical treatment risk", "high dose response", "new method analysis", "human disease study"]
P = ["the drug trial in cancer patients", "mouse gene expression levels", "blood protein levels increase",
     "cells of the human brain", "risk of clinical treatment", "response to a high dose",
     "analysis using a new method", "a study of human disease"]
WORKER_TIMEOUT = 600


# ------------------------------------------------------------------------------------------------ shared helpers
def _write_data(directory: Path) -> Path:
    """Examples every objective can train on: a hard negative, a graded label and teacher scores."""
    from lens.train.data import TrainExample, write_examples

    ex = [TrainExample(q, p, negatives=[P[(i + 3) % len(P)]], score=float(1 + i % 5), max_score=5.0,
                       teacher=[2.0, 0.5 - 0.1 * i], task="toy") for i, (q, p) in enumerate(zip(Q, P))]
    path = directory / "toy.jsonl"
    write_examples(path, ex)
    (directory / "val.jsonl").write_text((directory / "toy.jsonl").read_text())
    return path


def _config(model: str | Path, data: str | Path, dense: str | Path | None = None, **kw):
    """The tiny run's config; ``dense`` (a tiny BERT directory) is the ``hybrid`` loss's peer."""
    from lens.train.config import StageConfig, TrainConfig

    loss, steps = kw.pop("loss", "infonce"), kw.pop("steps", 4)
    stage = {k: kw.pop(k) for k in ("max_examples", "max_negatives") if k in kw}
    base = dict(model=str(model), stages=[StageConfig("s1", [str(data)], loss=loss, steps=steps, **stage)], lora_r=4,
                lora_alpha=8, batch_size=4, lr=5e-3, checkpoint_every=2, eval_every=0, doc_max_length=16,
                query_max_length=32, seed=3, device="cpu")
    if kw.pop("two_stages", False):
        base["stages"] = [StageConfig("a", [str(data)], loss="infonce", steps=2),
                          StageConfig("b", [str(data)], loss="bce", steps=2)]
    if dense is not None:
        base["hybrid_peer"] = str(dense)
    base.update(kw)
    return TrainConfig(**base)


def _gradients(trainer) -> tuple[float, dict[str, float], dict[str, torch.Tensor]]:
    """Loss, terms and the trainable parameters' gradients of the first planned step (no optimiser step)."""
    step = trainer.plan[0]
    examples = [trainer.data[step.stage][i] for i in step.batch]
    objective = trainer.objectives[step.stage]
    if objective.uses_bias:
        trainer._reset_bias(step.stage, examples)
    trainer.decoder.train()
    loss, terms = trainer.accumulate_gradients(examples, objective, trainer.config.stages[step.stage].max_negatives)
    grads = {n: p.grad.detach().clone() for n, p in trainer.decoder.named_parameters()
             if p.requires_grad and p.grad is not None}
    grads["head"] = trainer.model.head.weight.grad.detach().clone()
    if trainer.bias.grad is not None:
        grads["bias"] = trainer.bias.grad.detach().clone().reshape(1)
    return loss, terms, grads


def _lora_state(trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.decoder.state_dict().items() if "lora" in k} | {
        "head": trainer.model.head.weight.detach().clone()}


# name -> (config of the 2-rank job, what it does). "grads": one step's gradients; "resume": 2 steps then a
# checkpoint; "train": a whole run through Trainer.train(), recording which rank wrote what.
GRAD_JOBS = {
    **{f"grads-{loss}": dict(loss=loss, lora_layers=1) for loss in ("infonce", "bce")},  # per-rank batch 2
    **{f"grads-{loss}": dict(loss=loss, batch_size=5) for loss in ("gte", "bce-graded", "bce-teacher", "kl")},  # 3 + 2
    "grads-flops": dict(loss="infonce+0.2*flops", lora_layers=1),
    "grads-hybrid": dict(loss="infonce+hybrid", batch_size=5, hybrid_weights=[0.7, 0.3]),  # peer: the tiny BERT
    "grads-exact": dict(loss="infonce+exact", batch_size=5, cache_chunk=1),  # global masks, uneven split, GradCache
    "grads-bm25": dict(loss="infonce+bm25", batch_size=5),  # every rank scores the global batch with BM25
    "grads-infonce-full": dict(loss="infonce"),  # every layer trained, no prefix cache
    "grads-cached": dict(loss="infonce+0.5*bce", cache_chunk=1, gradient_checkpointing=True),
    "grads-tiny-batch": dict(loss="infonce", batch_size=2, max_examples=3),  # 1 query and 2 documents per rank
}
RESUME_JOB = dict(two_stages=True, lora_layers=1)


def test_every_registered_objective_has_a_two_rank_gradient_job():
    from lens.train.objectives import OBJECTIVES, parse_loss

    covered = {name for kw in GRAD_JOBS.values() for name in parse_loss(kw["loss"])}
    assert set(OBJECTIVES) <= covered
TRAIN_JOB = dict(lora_layers=1, eval_every=2, steps=3)
# the MNTP warm-up: 5 texts a step split 3 + 2, rank 0's 3 in micro-batches of 2 + 1, a checkpoint at step 2
MNTP_JOB = dict(steps=3, batch_size=5, max_length=16, lora_r=4, lora_alpha=8, lr=1e-2, warmup_steps=0, seed=1,
                checkpoint_every=2, device="cpu")


def _mntp_config(model: str | Path, data: str | Path, **kw):
    from lens.train.mntp import MNTPConfig

    return MNTPConfig(data=[str(data)], model=str(model), **{**MNTP_JOB, **kw})


# ------------------------------------------------------------------------------------------------ the worker
def _worker(spec_path: str) -> None:
    """One rank of the 2-process launch: runs every job of the spec, writes its results under spec["out"]."""
    import torch.distributed as dist
    from safetensors.torch import save_file

    import lens.train.trainer as trainer_module
    from lens.train.distributed import all_reduce_gradients, gather_with_grad, init_from_env
    from lens.train.trainer import Trainer

    spec = json.loads(Path(spec_path).read_text())
    out, rank = Path(spec["out"]), int(os.environ["RANK"])
    results: dict = {}

    ctx = init_from_env("cpu")  # a rank with no rows still joins the gather's backward and the all-reduce
    x = (torch.arange(6.0).reshape(3, 2) if rank == 0 else torch.zeros(0, 2)).requires_grad_()
    g = gather_with_grad(x)
    (g ** 2).sum().backward()
    used, unused = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))
    used.grad = torch.full((2,), 2.0) if rank == 0 else None
    all_reduce_gradients([used, unused], ctx)
    results["gather"] = {"rows": g.shape[0], "grad": x.grad.tolist(), "used": used.grad.tolist(),
                         "unused": unused.grad is None}
    for name, kw in GRAD_JOBS.items():
        t = Trainer(_config(spec["model"], spec["data"], spec["dense"], **kw), out / name, show_progress_bar=False)
        loss, terms, grads = _gradients(t)
        save_file({k: v.contiguous() for k, v in grads.items()}, str(out / f"{name}-rank{rank}.safetensors"))
        results[name] = {"loss": loss, "terms": terms}

    t = Trainer(_config(spec["model"], spec["data"], **RESUME_JOB), out / "resume", show_progress_bar=False)
    results["resume"] = [t.train_step()["loss"] for _ in range(2)]
    t.save_checkpoint(out / "resume" / "checkpoint")

    from lens.train.stopping import StopRule, TrainingStopped

    # rank 1 alone runs out of time after the first step; rank 0 has no limit
    rule = StopRule(1e-9 if rank == 1 else None, sigterm=False)
    try:
        Trainer(_config(spec["model"], spec["data"], **RESUME_JOB), out / "stop", show_progress_bar=False).train(
            stop=rule)
        results["stop"] = None
    except TrainingStopped as e:
        results["stop"] = {"step": e.step, "reason": e.reason}

    writes: list[str] = []  # what this rank wrote through the trainer's writers

    def recording(name, fn):
        def wrapper(*a, **k):
            writes.append(name)
            return fn(*a, **k)
        return wrapper

    for name in ("save_checkpoint", "write_log", "plot_curves"):
        setattr(trainer_module, name, recording(name, getattr(trainer_module, name)))
    Trainer._write_model = recording("model", Trainer._write_model)
    cfg = _config(spec["model"], spec["data"], val_data=[spec["val"]], **TRAIN_JOB)
    cfg.save = recording("train_config", cfg.save)
    Trainer(cfg, out / "train", prefix_cache_dir=out / "shared-cache", show_progress_bar=False).train()
    results["writes"] = writes

    import lens.train.mntp as mntp_module
    import lens.train.report as report_module
    from lens.encoder import LensEncoder

    writes = []
    mntp_module.save_checkpoint = recording("save_checkpoint", mntp_module.save_checkpoint)
    report_module.write_log = recording("write_log", report_module.write_log)
    LensEncoder.save_pretrained = recording("model", LensEncoder.save_pretrained)
    mntp_module.MNTPWarmup(_mntp_config(spec["model"], spec["data"], micro_batch_size=2), out / "mntp",
                           show_progress_bar=False).run()
    results["mntp_writes"] = writes
    (out / f"results-rank{rank}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(spec: dict, directory: Path, world: int = 2) -> None:
    """Run the worker in ``world`` processes with the environment torchrun gives them."""
    spec_path = directory / "spec.json"
    spec_path.write_text(json.dumps(spec))
    port = _free_port()
    procs, logs = [], []
    for rank in range(world):
        env = dict(os.environ, WORLD_SIZE=str(world), RANK=str(rank), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", TOKENIZERS_PARALLELISM="false")
        log = open(directory / f"rank{rank}.log", "w")
        logs.append(log)
        procs.append(subprocess.Popen([sys.executable, __file__, str(spec_path)], env=env, stdout=log,
                                      stderr=subprocess.STDOUT))
    deadline = time.monotonic() + WORKER_TIMEOUT
    try:
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
    if any(p.returncode != 0 for p in procs):
        text = "\n".join(f"--- rank {r} (exit {p.returncode})\n{(directory / f'rank{r}.log').read_text()[-4000:]}"
                         for r, p in enumerate(procs))
        pytest.fail(f"the distributed workers failed:\n{text}")


# ------------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def data_file(tmp_path_factory) -> Path:
    return _write_data(tmp_path_factory.mktemp("dist-data"))


@pytest.fixture(scope="module")
def two_ranks(tiny_lens_dir, tiny_bert_dir, data_file, tmp_path_factory) -> Path:
    """The directory of one 2-process launch that ran every job."""
    out = tmp_path_factory.mktemp("two-ranks")
    _launch({"model": str(tiny_lens_dir), "dense": str(tiny_bert_dir), "data": str(data_file),
             "val": str(data_file.parent / "val.jsonl"), "out": str(out)}, out)
    return out


def _results(directory: Path, rank: int) -> dict:
    return json.loads((directory / f"results-rank{rank}.json").read_text())


def _assert_same_gradients(got: dict, want: dict, tol: float = 1e-5) -> None:
    """Every gradient within ``tol`` of the reference, scaled by the tensor's largest entry when above 1 (the
    head's gradients reach ~30, where float32 sums in another order differ by ~1e-5)."""
    assert set(got) == set(want)
    for k in want:
        scale = max(1.0, float(want[k].abs().max()))
        diff = float((got[k] - want[k]).abs().max())
        assert diff <= tol * scale, f"{k}: largest difference {diff:.3g} > {tol} x {scale:.3g}"


# ------------------------------------------------------------------------------------------------ unit tests
def test_shard_slice_tiles_the_batch():
    from lens.train.distributed import shard_sizes, shard_slice

    for n in range(0, 12):
        for world in (1, 2, 3, 5):
            parts = [list(range(n))[shard_slice(n, r, world)] for r in range(world)]
            assert sum(parts, []) == list(range(n))  # contiguous, in rank order, nothing twice
            assert [len(p) for p in parts] == shard_sizes(n, world)
            assert shard_sizes(n, world) == [len(a) for a in np.array_split(np.arange(n), world)]
    with pytest.raises(ValueError, match="rank"):
        shard_slice(4, 2, 2)


def test_single_process_context(monkeypatch):
    from lens.train.distributed import all_reduce_mean, check_same, init_from_env, rank_seed

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    ctx = init_from_env("cpu")
    assert (ctx.world_size, ctx.rank, ctx.is_main, ctx.enabled, ctx.backend) == (1, 0, True, False, None)
    assert all_reduce_mean(2.5, ctx) == 2.5
    check_same(3, ctx, "anything")
    ctx.barrier()
    ctx.close()
    assert len({rank_seed(0, r, s) for r in range(4) for s in range(50)}) == 200
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "7")
    with pytest.raises(ValueError, match="RANK"):
        init_from_env("cpu")


def test_prefix_shards_are_named_by_content(tiny_lens_dir, data_file, tmp_path):
    """Two writers that open one cache directory at once (two ranks) never write the same shard name for
    different contents, so neither loses the other's shard: the name is a hash of the shard's keys."""
    from lens.train.prefix import PrefixCache
    from lens.train.trainer import Trainer

    t = Trainer(_config(tiny_lens_dir, data_file, lora_layers=1), tmp_path / "t", show_progress_bar=False)
    items, pad = list(t._items.values()), t.tokenizer.pad_token_id
    a, b = (PrefixCache(t.decoder, t.split, "ns", tmp_path / "shared") for _ in range(2))  # both see no shard
    a.fill(items[:3], pad, show_progress_bar=False)
    b.fill(items[3:], pad, show_progress_bar=False)
    assert len(list((tmp_path / "shared").glob("shard-*.safetensors"))) == 2
    assert PrefixCache(t.decoder, t.split, "ns", tmp_path / "shared").fill(items, pad, show_progress_bar=False) == 0
    PrefixCache(t.decoder, t.split, "ns", tmp_path / "alone").fill(items[:3], pad, show_progress_bar=False)
    assert {p.name for p in (tmp_path / "alone").iterdir()} < {p.name for p in (tmp_path / "shared").iterdir()}


# ------------------------------------------------------------------------------------------------ the cached loss
@pytest.mark.parametrize("lora_layers,chunk,checkpointing", [(None, 1, True), (1, 3, False)])
@pytest.mark.parametrize("loss", ["infonce", "bce", "gte"])
def test_cached_loss_equals_the_plain_loss(tiny_lens_dir, data_file, tmp_path, lora_layers, chunk, checkpointing,
                                           loss):
    from lens.train.trainer import Trainer

    kw = dict(loss=loss, lora_layers=lora_layers, gradient_checkpointing=checkpointing, batch_size=5)
    plain = _gradients(Trainer(_config(tiny_lens_dir, data_file, **kw), tmp_path / "p", show_progress_bar=False))
    cached = _gradients(Trainer(_config(tiny_lens_dir, data_file, cache_chunk=chunk, **kw), tmp_path / "c",
                                show_progress_bar=False))
    assert cached[0] == pytest.approx(plain[0], rel=1e-5)
    assert cached[1] == pytest.approx(plain[1], rel=1e-5)
    _assert_same_gradients(cached[2], plain[2])


def test_cached_loss_with_micro_batches(tiny_lens_dir, data_file, tmp_path):
    """grad_accum micro-batches (each with its own negatives) compose with the cached loss."""
    from lens.train.trainer import Trainer

    kw = dict(loss="infonce", batch_size=8, grad_accum=2, lora_layers=1)
    plain = _gradients(Trainer(_config(tiny_lens_dir, data_file, **kw), tmp_path / "p", show_progress_bar=False))
    cached = _gradients(Trainer(_config(tiny_lens_dir, data_file, cache_chunk=2, **kw), tmp_path / "c",
                                show_progress_bar=False))
    assert cached[0] == pytest.approx(plain[0], rel=1e-5)
    _assert_same_gradients(cached[2], plain[2])


def test_cached_loss_replays_dropout(tiny_lens_dir, data_file, tmp_path):
    """With dropout, each chunk's second pass draws the masks of its first: the gradients are those of the loss
    at the embeddings that were computed (the reference embeds the chunks with gradients, in the same order)."""
    from lens.train.gradcache import GradCache
    from lens.train.trainer import Trainer

    t = Trainer(_config(tiny_lens_dir, data_file, lora_dropout=0.5, batch_size=5), tmp_path / "o",
                show_progress_bar=False)
    t.decoder.train()
    examples = [t.data[0][i] for i in t.plan[0].batch]
    layout, q_items, d_items = t._batch_items(examples, None)

    def loss_of(q, d):
        return t.objectives[0](q, d, layout, examples, t.bias)

    params = [p for p in t.decoder.parameters() if p.requires_grad] + [t.model.head.weight]
    torch.manual_seed(11)
    GradCache(t._lexicon, 2).backward(q_items, d_items, loss_of)
    cached = [p.grad.clone() for p in params]
    t.optimizer.zero_grad(set_to_none=True)
    torch.manual_seed(11)
    q = torch.cat([t._lexicon(q_items[s:s + 2]) for s in range(0, len(q_items), 2)])
    d = torch.cat([t._lexicon(d_items[s:s + 2]) for s in range(0, len(d_items), 2)])
    loss_of(q, d)[0].backward()
    for a, b in zip(cached, (p.grad for p in params)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    assert any(float(g.abs().sum()) > 0 for g in cached)


# ------------------------------------------------------------------------------------------------ two ranks
def test_gather_and_all_reduce_with_an_empty_rank(two_ranks):
    """Rank 1 holds no rows: the gather still works both ways (its backward sums the 2 ranks' identical
    gradients: 2 * 2x), and a gradient missing on one rank counts as zero in the mean, one missing on both stays
    None."""
    zero, one = _results(two_ranks, 0)["gather"], _results(two_ranks, 1)["gather"]
    assert zero["rows"] == one["rows"] == 3
    assert zero["grad"] == (4 * torch.arange(6.0).reshape(3, 2)).tolist() and one["grad"] == []
    assert zero["used"] == one["used"] == [1.0, 1.0]
    assert zero["unused"] and one["unused"]


@pytest.mark.parametrize("name", list(GRAD_JOBS))
def test_two_ranks_equal_one_process_on_the_global_batch(two_ranks, tiny_lens_dir, tiny_bert_dir, data_file, tmp_path,
                                                         name):
    """(a) per-rank batch b on 2 ranks = batch 2b in one process: the loss, each term, and the LoRA, head and bias
    gradients (to 1e-5), on both ranks alike; the cached loss too (``grads-cached``)."""
    from safetensors.torch import load_file

    from lens.train.trainer import Trainer

    kw = dict(GRAD_JOBS[name])
    kw.pop("cache_chunk", None)  # the reference: one process, plain loss, the whole batch in one pass
    loss, terms, want = _gradients(Trainer(_config(tiny_lens_dir, data_file, tiny_bert_dir, **kw), tmp_path / "one",
                                           show_progress_bar=False))
    for rank in (0, 1):
        got = _results(two_ranks, rank)[name]
        assert got["loss"] == pytest.approx(loss, rel=1e-5, abs=1e-6)
        assert got["terms"] == pytest.approx(terms, rel=1e-5, abs=1e-6)
        _assert_same_gradients(load_file(str(two_ranks / f"{name}-rank{rank}.safetensors")), want)
    a, b = (load_file(str(two_ranks / f"{name}-rank{r}.safetensors")) for r in (0, 1))
    for k in a:  # the all-reduce leaves every rank the very same gradient, so their optimisers stay in step
        assert torch.equal(a[k], b[k]), k


def test_resume_on_one_rank_from_a_two_rank_checkpoint(two_ranks, tiny_lens_dir, data_file, tmp_path):
    """(c) a checkpoint written by 2 ranks after step 2 resumes on 1 and takes the uninterrupted run's steps."""
    from lens.train.trainer import Trainer

    cfg = _config(tiny_lens_dir, data_file, **RESUME_JOB)
    full = Trainer(cfg, tmp_path / "full", show_progress_bar=False)
    full_losses = [full.train_step()["loss"] for _ in range(4)]
    assert _results(two_ranks, 0)["resume"] == pytest.approx(full_losses[:2], rel=1e-5)
    state = json.loads((two_ranks / "resume" / "checkpoint" / "state.json").read_text())
    assert state["step"] == 2 and state["world_size"] == 2
    shutil.copytree(two_ranks / "resume" / "checkpoint", tmp_path / "part" / "checkpoint")
    resumed = Trainer(cfg, tmp_path / "part", show_progress_bar=False)
    resumed.load_checkpoint(tmp_path / "part" / "checkpoint")
    assert resumed.step == 2
    assert [resumed.train_step()["loss"] for _ in range(2)] == pytest.approx(full_losses[2:], rel=1e-5)
    a, b = _lora_state(full), _lora_state(resumed)
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-4, atol=1e-6)


def test_one_ranks_time_limit_stops_every_rank_at_the_same_step(two_ranks):
    """(e) the ranks agree on stopping: rank 1's time limit stops rank 0 too, after the same step, and the
    checkpoint is written there (rank 0 writes it, rank 1 waits)."""
    zero, one = _results(two_ranks, 0)["stop"], _results(two_ranks, 1)["stop"]
    assert zero == {"step": 1, "reason": "another rank stopped"}
    assert one["step"] == 1 and one["reason"].startswith("time limit")
    state = json.loads((two_ranks / "stop" / "checkpoint" / "state.json").read_text())
    assert state["step"] == 1 and state["world_size"] == 2


def test_only_rank_zero_writes(two_ranks, tiny_lens_dir, data_file, tmp_path):
    """(d) a whole 2-rank run: rank 0 writes the config, log, checkpoints, curves and model, rank 1 nothing; the
    run's losses (and validation losses, sharded too) are one process's, and the model loads."""
    from lens.encoder import LensEncoder
    from lens.train.report import read_log
    from lens.train.trainer import Trainer

    main, other = _results(two_ranks, 0)["writes"], _results(two_ranks, 1)["writes"]
    assert other == []
    assert {"train_config", "save_checkpoint", "write_log", "model"} <= set(main)
    out = two_ranks / "train"
    rows = read_log(out / "train_log.csv")
    cfg = _config(tiny_lens_dir, data_file, val_data=[str(data_file.parent / "val.jsonl")], **TRAIN_JOB)
    one = Trainer(cfg, tmp_path / "one", show_progress_bar=False)
    one.train()
    want = read_log(tmp_path / "one" / "train_log.csv")
    # abs 1e-6 beside rel 1e-5: a loss near 0.01 after three steps differed by 1.2e-7 (rel 1.04e-5) in some runs,
    # float32 sums in another order; a real difference between the runs is orders of magnitude larger
    assert [r["loss"] for r in rows] == pytest.approx([r["loss"] for r in want], rel=1e-5, abs=1e-6)
    assert [r["val_loss"] for r in rows if r["val_loss"] != ""] == pytest.approx(
        [r["val_loss"] for r in want if r["val_loss"] != ""], rel=1e-5, abs=1e-6)
    shards = list((two_ranks / "shared-cache").glob("shard-*.safetensors"))
    assert len(shards) >= 2  # each rank wrote the shard of its own slices
    texts = ["cancer drug trial", "mouse gene expression levels"]
    np.testing.assert_allclose(LensEncoder.from_pretrained(out).encode_documents(texts),
                               LensEncoder.from_pretrained(tmp_path / "one").encode_documents(texts), atol=1e-4)
    assert "Data parallel: 2 processes" in (out / "README.md").read_text()


def test_mntp_on_two_ranks_equals_one_process(two_ranks, tiny_lens_dir, data_file, tmp_path):
    """The MNTP warm-up split over 2 ranks (and in micro-batches) logs one process's losses, writes its model, and
    only rank 0 writes."""
    from lens.encoder import LensEncoder
    from lens.train.mntp import MNTP_LOG_NAME, MNTPWarmup
    from lens.train.report import read_log

    assert _results(two_ranks, 1)["mntp_writes"] == []
    assert {"save_checkpoint", "write_log", "model"} <= set(_results(two_ranks, 0)["mntp_writes"])
    one = MNTPWarmup(_mntp_config(tiny_lens_dir, data_file), tmp_path / "one", show_progress_bar=False).run()
    got, want = read_log(two_ranks / "mntp" / MNTP_LOG_NAME), read_log(one / MNTP_LOG_NAME)
    assert [r["loss"] for r in got] == pytest.approx([r["loss"] for r in want], rel=1e-5)
    assert [r["accuracy"] for r in got] == pytest.approx([r["accuracy"] for r in want], abs=1e-9)
    # the gradient norm before clipping: Adam would hide a wrongly scaled gradient from the losses
    assert [r["grad_norm"] for r in got] == pytest.approx([r["grad_norm"] for r in want], rel=1e-4)
    assert json.loads((two_ranks / "mntp" / "checkpoint" / "state.json").read_text())["world_size"] == 2
    np.testing.assert_allclose(LensEncoder.from_pretrained(two_ranks / "mntp").encode_documents(P[:3]),
                               LensEncoder.from_pretrained(one).encode_documents(P[:3]), atol=1e-4)


def _torchrun_cli(args: list[str], returncode: int = 0) -> str:
    """``lens ARGS`` under ``torchrun --standalone --nproc_per_node 2`` on CPU; its standard output (and error,
    when a ``returncode`` other than 0 is expected)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "lens.cli",
           *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=WORKER_TIMEOUT)
    assert done.returncode == returncode, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout if returncode == 0 else done.stdout + done.stderr


@pytest.mark.slow
def test_cli_train_under_torchrun(tiny_lens_dir, data_file, tmp_path):
    """``lens train`` runs unchanged under ``torchrun --standalone --nproc_per_node 2``."""
    out = tmp_path / "cli"
    printed = _torchrun_cli(["train", "--model", str(tiny_lens_dir), "--data", str(data_file), "--steps", "2",
                             "--lora-layers", "1", "--batch-size", "4", "--lr", "1e-3", "--device", "cpu",
                             "--cache-chunk", "2", "--out", str(out)])
    assert printed.count("trained 2 steps") == 1  # printed by rank 0 only
    assert len((out / "train_log.csv").read_text().splitlines()) == 3
    from lens.encoder import LensEncoder

    assert LensEncoder.from_pretrained(out).encode("cancer drug").shape == (16,)


@pytest.mark.slow
def test_cli_train_time_limit_under_torchrun(tiny_lens_dir, data_file, tmp_path):
    """Under torchrun a time limit stops both ranks after the same step with one checkpoint; torchrun itself
    reports the ranks' status 75 as a failure (exit 1), and ``--resume`` finishes the run."""
    out = tmp_path / "cli"
    args = ["train", "--model", str(tiny_lens_dir), "--data", str(data_file), "--steps", "3", "--lora-layers", "1",
            "--batch-size", "4", "--lr", "1e-3", "--device", "cpu", "--out", str(out)]
    printed = _torchrun_cli(args + ["--time-limit", "0.001s"], returncode=1)
    assert printed.count("lens train: stopped at step 1 of 3") == 1 and "exitcode  : 75" in printed
    assert json.loads((out / "checkpoint" / "state.json").read_text())["step"] == 1
    assert not (out / "config.json").exists()
    assert _torchrun_cli(args + ["--resume"]).count("trained 3 steps") == 1
    assert len((out / "train_log.csv").read_text().splitlines()) == 4


@pytest.mark.slow
def test_cli_mntp_under_torchrun(tiny_lens_dir, data_file, tmp_path):
    """``lens mntp`` runs unchanged under torchrun, and ``--resume`` on its output has nothing left to do."""
    out = tmp_path / "warm"
    args = ["mntp", "--model", str(tiny_lens_dir), "--data", str(data_file), "--steps", "2", "--batch-size", "4",
            "--max-length", "16", "--device", "cpu", "--out", str(out)]
    for extra in ([], ["--resume"]):
        assert _torchrun_cli(args + extra).count("MNTP warm-up done") == 1  # printed by rank 0 only
    assert len((out / "mntp_log.csv").read_text().splitlines()) == 3
    from lens.encoder import LensEncoder

    assert LensEncoder.from_pretrained(out).config.attention == "bidirectional"


if __name__ == "__main__":  # a worker process of _launch
    _worker(sys.argv[1])
