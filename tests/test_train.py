"""Training on a tiny random Llama: a step lowers the batch loss, resume equals an uninterrupted run,
the saved directory loads (adapter merged or not) and gives the trained vectors."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from lens.train.config import StageConfig, TrainConfig
from lens.train.data import TrainExample, plan_steps, read_examples, write_examples
from lens.train.trainer import Trainer, learning_rate_factor

Q = ["cancer drug trial", "gene expression in mouse", "protein level in blood", "brain cells",
     "clinical treatment risk", "high dose response", "new method analysis", "human disease study"]
P = ["the drug trial in cancer patients", "mouse gene expression levels", "blood protein levels increase",
     "cells of the human brain", "risk of clinical treatment", "response to a high dose",
     "analysis using a new method", "a study of human disease"]


@pytest.fixture
def data_file(tmp_path):
    ex = [TrainExample(q, p, negatives=[P[(i + 3) % len(P)]], task="toy") for i, (q, p) in enumerate(zip(Q, P))]
    path = tmp_path / "toy.jsonl"
    write_examples(path, ex)
    return path


def _config(tiny_lens_dir, data_file, **kw):
    base = dict(model=str(tiny_lens_dir), stages=[StageConfig("s1", [str(data_file)], loss="infonce", steps=4)],
                lora_r=4, lora_alpha=8, batch_size=4, lr=5e-3, checkpoint_every=2, eval_every=0,
                doc_max_length=16, query_max_length=32, seed=3)
    base.update(kw)
    return TrainConfig(**base)


@pytest.mark.parametrize("lora_layers", [None, 1])
def test_one_step_lowers_the_batch_loss(tiny_lens_dir, data_file, tmp_path, lora_layers):
    t = Trainer(_config(tiny_lens_dir, data_file, lora_layers=lora_layers, lr=1e-3), tmp_path / "out",
                show_progress_bar=False)
    assert (t.cache is not None) == (lora_layers == 1)
    batch = [t.data[0][i] for i in t.plan[0].batch]
    weights = t.objectives[0]  # the stage's loss: infonce
    with torch.no_grad():
        before = float(t.batch_loss(batch, weights, None)[0])
    row = t.train_step()
    assert row["loss"] == pytest.approx(before, rel=1e-5)
    with torch.no_grad():
        after = float(t.batch_loss(batch, weights, None)[0])
    assert after < before


@pytest.mark.parametrize("loss", ["bce", "bce-graded", "gte", "infonce+0.5*bce"])
def test_every_loss_trains(tiny_lens_dir, data_file, tmp_path, loss):
    cfg = _config(tiny_lens_dir, data_file, lora_layers=1,
                  stages=[StageConfig("s", [str(data_file)], loss=loss, steps=2)])
    t = Trainer(cfg, tmp_path / "out", show_progress_bar=False)
    # bias_init "fitted": -log(N-1), N = 4 queries x (1 positive + 1 negative), less 20 x the mean cosine of the
    # first batch's valid cells before any step, measured here in the model's inference mode
    layout, q_items, d_items = t._batch_items([t.data[0][i] for i in t.plan[0].batch], None)
    t.decoder.eval()
    with torch.no_grad():
        q, d = (torch.nn.functional.normalize(t._lexicon(items), dim=-1).double() for items in (q_items, d_items))
    cells = [float(q[i] @ d[j]) for i in range(4) for j in range(len(d)) if layout.valid[i][j]]
    rows = [t.train_step(), t.train_step()]
    assert all(np.isfinite(r["loss"]) for r in rows)
    if "bce" in loss:
        assert rows[0]["bias"] == pytest.approx(-np.log(7) - 20 * np.mean(cells), abs=1e-4)


def test_bias_init_fitted_starts_the_bce_term_lower_than_siglips(tiny_lens_dir, data_file, tmp_path):
    """Lexicon vectors are non-negative, so pairs start well above cosine 0 and SigLIP's -log(N-1) makes every
    negative a confident positive; the fitted start puts the average cell at -log(N-1) instead."""
    first = {}
    for init in ("siglip", "fitted"):
        cfg = _config(tiny_lens_dir, data_file, lora_layers=1, bias_init=init,
                      stages=[StageConfig("s", [str(data_file)], loss="infonce+bce", steps=1)])
        first[init] = Trainer(cfg, tmp_path / init, show_progress_bar=False).train_step()
    assert first["siglip"]["bias"] == pytest.approx(-np.log(7), abs=1e-6)
    assert first["fitted"]["bias"] < first["siglip"]["bias"]
    assert first["fitted"]["loss_bce"] < first["siglip"]["loss_bce"]
    assert first["fitted"]["loss_infonce"] == pytest.approx(first["siglip"]["loss_infonce"], rel=1e-6)
    with pytest.raises(ValueError, match="bias_init"):
        _config(tiny_lens_dir, data_file, bias_init="zero")


def _final_state(t):
    return {k: v.detach().clone() for k, v in t.decoder.state_dict().items() if "lora" in k} | {
        "head": t.model.head.weight.detach().clone()}


def test_resume_takes_the_same_next_step(tiny_lens_dir, data_file, tmp_path):
    cfg = _config(tiny_lens_dir, data_file, lora_layers=1, stages=[
        StageConfig("a", [str(data_file)], loss="infonce", steps=2), StageConfig("b", [str(data_file)], loss="bce", steps=2)])
    full = Trainer(cfg, tmp_path / "full", show_progress_bar=False)
    full.train()
    full_log = (tmp_path / "full" / "train_log.csv").read_text().splitlines()

    part = Trainer(cfg, tmp_path / "part", show_progress_bar=False)
    for _ in range(2):  # then the process dies after the checkpoint at step 2
        part.train_step()
    part.save_checkpoint(tmp_path / "part" / "checkpoint")
    part.train_step()  # work after the checkpoint is lost
    resumed = Trainer(cfg, tmp_path / "part", show_progress_bar=False)
    resumed.load_checkpoint(tmp_path / "part" / "checkpoint")
    assert resumed.step == 2
    rows = [resumed.train_step(), resumed.train_step()]
    full_rows = [dict(zip(full_log[0].split(","), line.split(","))) for line in full_log[3:5]]
    for got, want in zip(rows, full_rows):
        assert got["loss"] == pytest.approx(float(want["loss"]), rel=1e-6, abs=1e-7)
    a, b = _final_state(full), _final_state(resumed)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-6, atol=1e-7)


def test_resume_refuses_changed_examples_or_start_model(tiny_lens_dir, data_file, tmp_path):
    """The checkpoint records what the run trains on: a resume after the data file changed (the same number of
    examples, so the same plan length) or from another start model is refused, naming what to do."""
    import shutil

    cfg = _config(tiny_lens_dir, data_file, lora_layers=1)
    run = Trainer(cfg, tmp_path / "run", show_progress_bar=False)
    run.train_step()
    run.save_checkpoint(tmp_path / "run" / "checkpoint")
    again = Trainer(cfg, tmp_path / "run", show_progress_bar=False)
    again.load_checkpoint(tmp_path / "run" / "checkpoint")  # the same inputs: resumes
    assert again.step == 1
    lines = data_file.read_text().splitlines()
    changed = tmp_path / "changed.jsonl"
    changed.write_text("\n".join(lines[:-1] + [lines[-1].replace('"query": "', '"query": "edited ')]) + "\n")
    other = Trainer(_config(tiny_lens_dir, changed, lora_layers=1), tmp_path / "run",
                    show_progress_bar=False)
    assert len(other.plan) == len(run.plan)
    with pytest.raises(ValueError, match="another start model or other training examples"):
        other.load_checkpoint(tmp_path / "run" / "checkpoint")
    moved = tmp_path / "model-copy"
    shutil.copytree(tiny_lens_dir, moved)
    cfg_json = json.loads((moved / "config.json").read_text())
    cfg_json["text_normalization"] = "lowercase"  # another model: another fingerprint
    (moved / "config.json").write_text(json.dumps(cfg_json))
    with pytest.raises(ValueError, match="another start model"):
        Trainer(_config(moved, data_file, lora_layers=1), tmp_path / "run",
                show_progress_bar=False).load_checkpoint(tmp_path / "run" / "checkpoint")


def test_saved_model_loads_with_the_trained_weights(tiny_lens_dir, data_file, tmp_path):
    from lens.encoder import LensEncoder

    cfg = _config(tiny_lens_dir, data_file, lora_layers=1, train_head=True)
    t = Trainer(cfg, tmp_path / "out", show_progress_bar=False)
    out = t.train()
    assert (out / "adapter" / "adapter_config.json").is_file()
    assert (out / "train_log.csv").is_file() and (out / "train_config.json").is_file()
    conf = json.loads((out / "config.json").read_text())
    assert conf["adapter"] == "adapter" and conf["extra"]["training"]["steps"] == 4

    texts = ["cancer drug trial", "mouse gene expression levels"]
    with torch.no_grad():  # the trainer's own view of the vectors
        t.decoder.eval()
        items = [t._items[("", P[1])]]
        want = torch.nn.functional.normalize(t._forward(items).lexicon, dim=-1).numpy()
    merged = LensEncoder.from_pretrained(out)
    unmerged = LensEncoder.from_pretrained(out, merge_adapter=False)
    untrained = LensEncoder.from_pretrained(tiny_lens_dir)
    a = merged.encode_documents(texts)
    np.testing.assert_allclose(a, unmerged.encode_documents(texts), atol=1e-4)
    np.testing.assert_allclose(merged.encode_documents([P[1]]), want, atol=1e-3)  # head stored in float16
    assert not np.allclose(a, untrained.encode_documents(texts), atol=1e-3)
    assert merged.fingerprint()["lens_adapter"] != untrained.fingerprint()["lens_adapter"]

    standalone = tmp_path / "standalone"
    merged.save_pretrained(standalone)
    assert json.loads((standalone / "config.json").read_text())["adapter"] is None
    np.testing.assert_allclose(LensEncoder.from_pretrained(standalone).encode_documents(texts), a, atol=1e-5)


def test_prefix_cache_is_reused(tiny_lens_dir, data_file, tmp_path):
    cfg = _config(tiny_lens_dir, data_file, lora_layers=1)
    first = Trainer(cfg, tmp_path / "a", prefix_cache_dir=tmp_path / "cache", show_progress_bar=False)
    assert len(first.cache) > 0
    again = Trainer(cfg, tmp_path / "b", prefix_cache_dir=tmp_path / "cache", show_progress_bar=False)
    assert again.cache.fill(list(again._items.values()), 3) == 0  # nothing left to compute


def test_prefix_cache_holds_only_the_planned_texts(tiny_lens_dir, data_file, tmp_path):
    cfg = _config(tiny_lens_dir, data_file, lora_layers=1,
                  stages=[StageConfig("s1", [str(data_file)], loss="infonce", steps=1)], batch_size=2)
    trainer = Trainer(cfg, tmp_path / "a", show_progress_bar=False)
    used = [trainer.data[0][i] for i in trainer.plan[0].batch]
    texts = {t for e in used for t in (e.query, e.positive, *e.negatives)}
    assert len(trainer._items) == len(texts) == 6 and len(trainer.cache) == 6  # 2 of 8 examples: 2 x 3 texts


def test_max_per_task_balances_a_stage(tiny_lens_dir, tmp_path):
    big = [TrainExample(f"big query {i}", f"big doc {i}", task="big") for i in range(30)]
    small = [TrainExample(f"small query {i}", f"small doc {i}", task="small") for i in range(3)]
    write_examples(tmp_path / "mix.jsonl", big + small)
    stage = StageConfig("s", [str(tmp_path / "mix.jsonl")], steps=1, max_per_task=5)
    trainer = Trainer(_config(tiny_lens_dir, tmp_path / "mix.jsonl", stages=[stage]), tmp_path / "o",
                      show_progress_bar=False)
    tasks = [e.task for e in trainer.data[0]]
    assert tasks.count("big") == 5 and tasks.count("small") == 3
    with pytest.raises(ValueError, match="max_per_task"):
        TrainConfig(stages=[StageConfig("s", ["x"], max_per_task=0)])


def test_learning_rate_schedule():
    assert learning_rate_factor(0, 10, 2) == 0.5
    assert learning_rate_factor(1, 10, 2) == 1.0
    assert learning_rate_factor(6, 10, 2) == pytest.approx(0.5)
    assert learning_rate_factor(9, 10, 0) == pytest.approx(0.1)


@pytest.mark.parametrize("schedule", ["run", "stage"])
def test_a_later_stage_starts_its_own_schedule_when_asked(tiny_lens_dir, data_file, tmp_path, schedule):
    """Two stages of 3 steps, warm-up 2, the second at its own lr: "run" decays over the whole plan (the second stage
    starts three quarters of the way up its lr), "stage" warms up and decays again within the second."""
    stages = [StageConfig("weak", [str(data_file)], steps=3), StageConfig("labelled", [str(data_file)], steps=3,
                                                                           lr=2e-3)]
    t = Trainer(_config(tiny_lens_dir, data_file, stages=stages, lr=5e-3, warmup_steps=2, lr_schedule=schedule),
                tmp_path / schedule, show_progress_bar=False)
    got = [t._set_lr(step) for step in range(6)]
    if schedule == "run":
        want = [5e-3 * f for f in (0.5, 1, 1)] + [2e-3 * f for f in (0.75, 0.5, 0.25)]
    else:
        want = [5e-3 * f for f in (0.5, 1, 1)] + [2e-3 * f for f in (0.5, 1, 1)]
    assert got == pytest.approx(want)
    with pytest.raises(ValueError, match="lr_schedule must be one of"):
        _config(tiny_lens_dir, data_file, lr_schedule="cosine")


def test_a_task_of_one_example_is_named(tiny_lens_dir, tmp_path, caplog):
    """A batch holds one task and needs two examples: a task with one example is never trained on, and says so."""
    import logging

    examples = [TrainExample(q, p, task="toy") for q, p in zip(Q[:4], P[:4])] + [TrainExample(Q[4], P[4], task="lone")]
    path = tmp_path / "mixed.jsonl"
    write_examples(path, examples)
    with caplog.at_level(logging.WARNING):
        t = Trainer(_config(tiny_lens_dir, path), tmp_path / "o", show_progress_bar=False)
    assert "1 task(s) with a single example are never trained on" in caplog.text and "lone" in caplog.text
    assert all(t.data[0][i].task == "toy" for step in t.plan for i in step.batch)


@pytest.mark.parametrize("loss,warned", [("infonce", True), ("infonce+0.5*bce-graded", False), ("bce", False)])
def test_low_graded_positives_under_a_contrastive_loss_are_named(tiny_lens_dir, tmp_path, caplog, loss, warned):
    import logging

    examples = [TrainExample(q, p, score=float(i % 6), max_score=5.0, task="sts") for i, (q, p) in enumerate(zip(Q, P))]
    path = tmp_path / "sts.jsonl"
    write_examples(path, examples)
    with caplog.at_level(logging.WARNING):
        Trainer(_config(tiny_lens_dir, path, stages=[StageConfig("s", [str(path)], loss=loss, steps=1)]),
                tmp_path / "o", show_progress_bar=False)
    said = "5 of 8 examples are graded under half their max_score" in caplog.text  # 0, 1, 2, 0, 1 of 5
    assert said == warned


def test_config_errors(tiny_lens_dir, data_file):
    with pytest.raises(ValueError, match="unknown loss"):
        TrainConfig(stages=[StageConfig("s", [str(data_file)], loss="cosine")])
    with pytest.raises(ValueError, match="unknown field"):
        TrainConfig.from_dict({"stages": [], "lora_rank": 3})
    with pytest.raises(ValueError, match="at least one stage"):
        TrainConfig(stages=[])


def test_cli_train_and_resume(tiny_lens_dir, data_file, tmp_path, capsys):
    from lens.cli import main
    from lens.encoder import LensEncoder

    out = tmp_path / "cli"
    argv = ["train", "--model", str(tiny_lens_dir), "--data", str(data_file), "--steps", "3", "--lora-layers", "1",
            "--batch-size", "4", "--lr", "1e-3", "--out", str(out)]
    assert main(argv) == 0
    assert "trained 3 steps" in capsys.readouterr().out
    log = (out / "train_log.csv").read_text().splitlines()
    assert len(log) == 4 and log[0].startswith("step,stage,task,loss")
    assert main(argv + ["--resume"]) == 0  # the checkpoint is at the last step: nothing left but saving
    assert "already complete (step 3 of 3)" in capsys.readouterr().out
    assert (out / "train_log.csv").read_text().splitlines() == log
    LensEncoder.from_pretrained(out).encode("cancer drug")
    assert main(["train", "--model", str(tiny_lens_dir), "--out", str(out)]) == 2  # no data, no config
    assert "give --config FILE or --data" in capsys.readouterr().err


def test_cli_train_reads_an_extending_config(tiny_lens_dir, data_file, tmp_path):
    """`lens train --config` resolves ``extends`` (the flags still override) and saves the resolved config."""
    from lens.cli import main

    (tmp_path / "base.json").write_text(json.dumps({
        "model": str(tiny_lens_dir), "lora_layers": 1, "batch_size": 4, "lr": 1e-3,
        "stages": [{"name": "only", "data": [str(data_file)], "loss": "infonce", "steps": 5}]}))
    (tmp_path / "variant.json").write_text(json.dumps({
        "extends": "base.json", "stages": [{"name": "only", "loss": "infonce+0.1*flops", "steps": 1}]}))
    out = tmp_path / "run"
    assert main(["train", "--config", str(tmp_path / "variant.json"), "--batch-size", "2", "--out", str(out)]) == 0
    saved = json.loads((out / "train_config.json").read_text())
    assert "extends" not in saved and saved["batch_size"] == 2 and saved["model"] == str(tiny_lens_dir)
    assert [(s["loss"], s["steps"], s["data"]) for s in saved["stages"]] == [("infonce+0.1*flops", 1, [str(data_file)])]
    assert len((out / "train_log.csv").read_text().splitlines()) == 2  # one step, as the variant says


def test_cli_merge(tiny_lens_dir, data_file, tmp_path, capsys):
    from lens.cli import main
    from lens.encoder import LensEncoder

    out = tmp_path / "trained"
    assert main(["train", "--model", str(tiny_lens_dir), "--data", str(data_file), "--steps", "2", "--lora-layers",
                 "1", "--batch-size", "4", "--lr", "1e-3", "--out", str(out)]) == 0
    assert main(["merge", str(out), "--out", str(tmp_path / "merged")]) == 0
    assert (tmp_path / "merged" / "backbone" / "config.json").is_file()
    a = LensEncoder.from_pretrained(out).encode_documents(["cancer drug trial"])
    np.testing.assert_allclose(LensEncoder.from_pretrained(tmp_path / "merged").encode_documents(["cancer drug trial"]),
                               a, atol=1e-5)
    assert main(["merge", str(tiny_lens_dir), "--out", str(tmp_path / "x")]) == 2
    assert "no adapter to merge" in capsys.readouterr().err


def test_cli_merge_writes_float32_where_the_device_default_is_bfloat16(tiny_lens_dir, data_file, tmp_path,
                                                                        monkeypatch):
    """On CUDA a backbone loads as bfloat16 by default; a merge there must still write float32 weights (the LM head
    unrounded, so the clusters' hash check passes and the merged model trains)."""
    import torch

    import lens.backbone
    import lens.encoder
    from lens.cli import main

    out = tmp_path / "trained"
    assert main(["train", "--model", str(tiny_lens_dir), "--data", str(data_file), "--steps", "1", "--lora-layers",
                 "1", "--batch-size", "4", "--out", str(out)]) == 0
    load = lens.encoder.load_backbone

    def cuda_like(reference=lens.backbone.DEFAULT, *, dtype=None, **kw):  # CUDA's default, on this CPU
        return load(reference, dtype=torch.bfloat16 if dtype is None else dtype, **kw)

    monkeypatch.setattr(lens.encoder, "load_backbone", cuda_like)
    merged = tmp_path / "merged"
    assert main(["merge", str(out), "--out", str(merged)]) == 0
    monkeypatch.undo()
    from safetensors import safe_open

    with safe_open(str(merged / "backbone" / "model.safetensors"), framework="pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.float32}
    assert main(["train", "--model", str(merged), "--data", str(data_file), "--steps", "1", "--lora-layers", "1",
                 "--batch-size", "4", "--out", str(tmp_path / "again")]) == 0


def test_cli_merge_onto_ships_a_continuation_as_one_adapter(tiny_lens_dir, data_file, tmp_path, capsys):
    """Train, merge, train again on the merged model; `lens merge TOP --onto BOTTOM` gives the second model's
    vectors from BOTTOM's backbone reference and one adapter."""
    import json

    from lens.cli import main
    from lens.config import LensConfig
    from lens.encoder import LensEncoder

    train = ["--data", str(data_file), "--steps", "3", "--lora-layers", "1", "--batch-size", "4", "--lr", "5e-2"]
    bottom, merged, top = tmp_path / "bottom", tmp_path / "merged", tmp_path / "top"
    assert main(["train", "--model", str(tiny_lens_dir), *train, "--out", str(bottom)]) == 0
    assert main(["merge", str(bottom), "--out", str(merged)]) == 0
    assert main(["train", "--model", str(merged), *train, "--seed", "1", "--out", str(top)]) == 0
    out = tmp_path / "stacked"
    assert main(["merge", str(top), "--onto", str(bottom), "--out", str(out)]) == 0
    config = LensConfig.load(out)
    assert config.backbone == LensConfig.load(bottom).backbone and config.adapter == "adapter"
    assert not (out / "backbone").exists()
    ranks = [json.loads((d / "adapter" / "adapter_config.json").read_text())["r"] for d in (bottom, top, out)]
    assert ranks[2] == ranks[0] + ranks[1]
    texts = ["cancer drug trial", "protein folding in cells"]
    want = LensEncoder.from_pretrained(top).encode_documents(texts)
    before = LensEncoder.from_pretrained(bottom).encode_documents(texts)
    assert np.abs(want - before).max() > 1e-2  # the second run moved the vectors: the check below can fail
    np.testing.assert_allclose(LensEncoder.from_pretrained(out).encode_documents(texts), want, atol=2e-3)
    capsys.readouterr()
    assert main(["merge", str(top), "--onto", str(merged), "--out", str(tmp_path / "x")]) == 2
    assert "has no adapter" in capsys.readouterr().err

    # --fraction: the weights that far from BOTTOM's to TOP's, adapter update and cluster head alike
    from safetensors.numpy import load_file

    from lens.model_dir import read_model_dir

    half = tmp_path / "half"
    assert main(["merge", str(top), "--onto", str(bottom), "--fraction", "0.5", "--out", str(half)]) == 0
    heads = [read_model_dir(d).centroids.astype(np.float32) for d in (bottom, top, half)]
    assert np.abs(heads[1] - heads[0]).max() > 1e-3  # the heads differ, so the mean below is a check
    np.testing.assert_allclose(heads[2], (heads[0] + heads[1]) / 2, atol=2e-3)  # float16 storage

    def update(directory):
        config = json.loads((directory / "adapter" / "adapter_config.json").read_text())
        w = load_file(str(directory / "adapter" / "adapter_model.safetensors"))
        scale = config["lora_alpha"] / config["r"]
        return {k: scale * w[k.replace("lora_A", "lora_B")].astype(np.float32) @ w[k].astype(np.float32)
                for k in w if k.endswith(".lora_A.weight")}

    full, mid, base = update(out), update(half), update(bottom)
    for name in full:
        np.testing.assert_allclose(mid[name], (base[name] + full[name]) / 2, atol=2e-3)
    assert LensConfig.load(half).extra["interpolated"]["fraction"] == 0.5
    vectors = LensEncoder.from_pretrained(half).encode_documents(texts)
    assert np.abs(vectors - want).max() > 1e-3 and np.abs(vectors - before).max() > 1e-3
    # --rank: the stacked adapter cut back to the rank one adapter has, energy kept recorded, vectors near the exact
    cut = tmp_path / "cut"
    r = ranks[0]
    assert main(["merge", str(top), "--onto", str(bottom), "--fraction", "0.5", "--rank", str(r), "--out", str(cut)]) == 0
    assert json.loads((cut / "adapter" / "adapter_config.json").read_text())["r"] == r
    stacked = LensConfig.load(cut).extra["stacked"]
    assert stacked["rank"] == r and 0 < stacked["min_energy_kept"] <= stacked["mean_energy_kept"] <= 1
    approx = update(cut)
    for name in mid:  # no worse than the error the energy kept allows (Eckart-Young), in the Frobenius norm
        err = np.linalg.norm(approx[name] - mid[name]) ** 2 / max(np.linalg.norm(mid[name]) ** 2, 1e-12)
        assert err <= 1 - stacked["min_energy_kept"] + 2e-3
    wide = tmp_path / "wide"  # a rank above r1 + r2 cuts nothing: the exact stack, recorded at its own rank
    assert main(["merge", str(top), "--onto", str(bottom), "--rank", str(4 * r), "--out", str(wide)]) == 0
    assert LensConfig.load(wide).extra["stacked"]["rank"] == ranks[2]
    assert LensConfig.load(wide).extra["stacked"]["min_energy_kept"] == 1.0
    for argv, message in ((["--onto", str(bottom), "--fraction", "0"], r"--fraction must be in \(0, 1\]"),
                          (["--fraction", "0.5"], "trained from with --onto"), (["--rank", "4"], "give the model"),
                          (["--onto", str(bottom), "--rank", "0"], "positive|at least")):
        assert main(["merge", str(top), *argv, "--out", str(tmp_path / "y")]) == 2
        assert re.search(message, capsys.readouterr().err)


def test_merge_onto_takes_a_continuation_of_the_top_layers_only(tiny_lens_dir, data_file, tmp_path):
    """The CPU path continues a model on its top layers only (over a cached prefix); `lens merge --onto` stacks
    that onto a model trained on every layer, and the result encodes as the continuation does."""
    from lens.cli import main
    from lens.encoder import LensEncoder

    train = ["--data", str(data_file), "--steps", "3", "--batch-size", "4", "--lr", "5e-2"]
    bottom, merged, top, out = (tmp_path / n for n in ("bottom", "merged", "top", "stacked"))
    assert main(["train", "--model", str(tiny_lens_dir), *train, "--lora-layers", "2", "--out", str(bottom)]) == 0
    assert main(["merge", str(bottom), "--out", str(merged)]) == 0
    assert main(["train", "--model", str(merged), *train, "--lora-layers", "1", "--seed", "1", "--out", str(top)]) == 0
    targets = [json.loads((d / "adapter" / "adapter_config.json").read_text())["target_modules"] for d in (bottom, top)]
    assert set(targets[1]) < set(targets[0])  # the continuation adapts fewer modules
    assert main(["merge", str(top), "--onto", str(bottom), "--out", str(out)]) == 0
    texts = ["cancer drug trial", "protein folding in cells"]
    want = LensEncoder.from_pretrained(top).encode_documents(texts)
    assert np.abs(want - LensEncoder.from_pretrained(bottom).encode_documents(texts)).max() > 1e-2
    np.testing.assert_allclose(LensEncoder.from_pretrained(out).encode_documents(texts), want, atol=2e-3)


def test_kl_distillation_stage(tiny_lens_dir, tmp_path):
    ex = [TrainExample(q, p, negatives=[P[(i + 3) % len(P)]], teacher=[2.0, 0.5], task="toy")
          for i, (q, p) in enumerate(zip(Q, P))]
    path = tmp_path / "teacher.jsonl"
    write_examples(path, ex)
    cfg = _config(tiny_lens_dir, path, lora_layers=1, stages=[StageConfig("kd", [str(path)], loss="kl", steps=2)])
    t = Trainer(cfg, tmp_path / "out", show_progress_bar=False)
    rows = [t.train_step(), t.train_step()]
    assert all(np.isfinite(r["loss_kl"]) and r["loss_kl"] >= 0 for r in rows)
    no_teacher = tmp_path / "plain.jsonl"
    write_examples(no_teacher, [TrainExample(q, p, task="toy") for q, p in zip(Q, P)])
    t = Trainer(_config(tiny_lens_dir, no_teacher, lora_layers=1,
                        stages=[StageConfig("kd", [str(no_teacher)], loss="kl", steps=1)]), tmp_path / "o2",
                show_progress_bar=False)
    with pytest.raises(ValueError, match="teacher scores"):
        t.train_step()


def test_bce_teacher_is_pairwise_bce_with_blended_targets():
    """The objective against a hand-built target matrix: each query's own block [positive, negatives] gets
    floor * label + (1 - floor) * sigmoid((teacher - centre) / width); other columns 0; copies of a positive masked."""
    from lens.train.losses import cosine_scores, pairwise_bce
    from lens.train.objectives import Objective, batch_layout

    ex = [TrainExample("q0", "p0", negatives=["n0", "n1"], teacher=[0.8, 0.55, 0.1]),
          TrainExample("q1", "p1", negatives=["p0"], teacher=[0.6, 0.7]),
          TrainExample("q2", "p0", negatives=[], teacher=[0.3])]
    layout = batch_layout(ex, lambda e: e.negatives)
    g = torch.Generator().manual_seed(0)
    q, d = torch.randn(3, 5, generator=g), torch.randn(len(layout.doc_texts), 5, generator=g)
    bias = torch.tensor(-1.5)
    loss, terms = Objective("bce-teacher", temperature=0.02, bce_scale=20.0, graded_floor=0.7, teacher_center=0.5,
                            teacher_width=0.1)(q, d, layout, ex, bias)
    sig = lambda c: 1 / (1 + np.exp(-(c - 0.5) / 0.1))  # noqa: E731
    targets = torch.zeros(3, len(layout.doc_texts))
    for i, e in enumerate(ex):
        start = layout.positive_index[i]
        for j, c in enumerate(e.teacher):
            targets[i, start + j] = 0.7 * (j == 0) + 0.3 * sig(c)
    want = pairwise_bce(cosine_scores(q, d), targets, 20.0, bias, torch.tensor(layout.valid))
    assert float(loss) == pytest.approx(float(want), rel=1e-6)
    assert not layout.valid[2][0] and not layout.valid[0][4]  # "p0" elsewhere is q2's / q0's positive: masked
    with pytest.raises(ValueError, match="lens data teacher"):
        Objective("bce-teacher", temperature=0.02, bce_scale=20.0, graded_floor=0.7)(
            q, d, layout, [TrainExample("q0", "p0", negatives=["n0", "n1"])] + ex[1:], bias)


def test_bce_teacher_stage_trains(tiny_lens_dir, tmp_path):
    ex = [TrainExample(q, p, negatives=[P[(i + 3) % len(P)]], teacher=[0.7, 0.4], task="toy")
          for i, (q, p) in enumerate(zip(Q, P))]
    path = tmp_path / "teacher.jsonl"
    write_examples(path, ex)
    cfg = _config(tiny_lens_dir, path, lora_layers=1,
                  stages=[StageConfig("t", [str(path)], loss="infonce+0.5*bce-teacher", steps=2)])
    t = Trainer(cfg, tmp_path / "out", show_progress_bar=False)
    rows = [t.train_step(), t.train_step()]
    assert all(np.isfinite(r["loss_bce-teacher"]) and r["loss_bce-teacher"] > 0 for r in rows)
    assert rows[0]["bias"] != rows[1]["bias"]  # the learned bias is trained


def test_a_step_is_the_plain_forward_and_backward_bit_for_bit(tiny_lens_dir, data_file, tmp_path):
    """One process: the gradients of a step (two micro-batches) are exactly those of embedding each micro-batch's
    queries and documents in one pass and backpropagating loss / 2, as the trainer always did."""
    from lens.train.objectives import batch_layout

    t = Trainer(_config(tiny_lens_dir, data_file, lora_layers=1, grad_accum=2, batch_size=4), tmp_path / "o",
                show_progress_bar=False)
    assert not t.dist.enabled and t.gradcache is None
    examples = [t.data[0][i] for i in t.plan[0].batch]
    params = [p for g in t.optimizer.param_groups for p in g["params"]]
    t.decoder.train()
    loss, _ = t.accumulate_gradients(examples, t.objectives[0], None)
    got = [p.grad.clone() for p in params]
    t.optimizer.zero_grad(set_to_none=True)
    want_loss = 0.0
    for idx in np.array_split(np.arange(len(examples)), 2):
        batch = [examples[i] for i in idx]
        layout = batch_layout(batch, lambda e: e.negatives)
        q = t._forward([t._items[(t._query_prompt(t._instruction(e)), e.query)] for e in batch]).lexicon.float()
        d = t._forward([t._items[("", x)] for x in layout.doc_texts]).lexicon.float()
        value = t.objectives[0](q, d, layout, batch, t.bias)[0]
        (value / 2).backward()
        want_loss += float(value.detach()) / 2
    assert loss == want_loss
    for a, p in zip(got, params):
        assert torch.equal(a, p.grad)


def test_an_example_instruction_reads_as_encode_queries_reads_it(tiny_lens_dir, tmp_path):
    """An example's "" is no instruction and one in the template's form is not wrapped again, as
    LensEncoder.encode_queries reads them: a query trains on the items it is encoded with (the trainer read "" as
    the default instruction and wrapped every instruction in the template)."""
    from lens.inputs import encode_model_texts

    template_form = "<instruct>Find a passage\n<query>"
    examples = [TrainExample(Q[0], P[0], task="toy", instruction=""),
                TrainExample(Q[1], P[1], task="toy", instruction=template_form),
                TrainExample(Q[2], P[2], task="toy", instruction="Find a passage"),
                TrainExample(Q[3], P[3], task="toy")]
    path = tmp_path / "instr.jsonl"
    write_examples(path, examples)
    t = Trainer(_config(tiny_lens_dir, path), tmp_path / "o", show_progress_bar=False)
    config = t.encoder.config
    prompts = [None, template_form, template_form, config.query_template.format(instruction=config.default_instruction)]
    for ex, prompt in zip(examples, prompts):
        assert t._query_prompt(t._instruction(ex)) == prompt
        want = encode_model_texts(t.tokenizer, config, [ex.query], 32, prompt)[0]
        assert t._items[(prompt, ex.query)] == want
    assert t.encoder.config.query_template.format(instruction="Find a passage") == template_form


def test_shipped_configs_load():
    from pathlib import Path

    import lens.train

    configs = Path(lens.train.__file__).parent / "configs"
    paper = TrainConfig.load(configs / "paper-mistral-7b.json")
    assert paper.cache_chunk == 32 and paper.bf16 and paper.gradient_checkpointing
    assert [s.batch_size for s in paper.stages] == [512, 256] and paper.stages[0].max_negatives == 7
    assert any("torchrun --nnodes 2 --nproc_per_node 8" in n for n in paper.notes)
    shipped = sorted(configs.glob("*.json"))
    assert {c.name for c in shipped} >= {"default-cpu.json", "default-gpu.json", "paper-mistral-7b.json"}
    for config in shipped:  # every shipped config loads (default-gpu.json made lens/default_model)
        if config.name.startswith("mntp-"):  # a warm-up before training (lens mntp)
            from lens.train.mntp import MNTPConfig

            assert MNTPConfig.load(config).steps >= 1
        else:
            TrainConfig.load(config)
    gpu, bm25 = TrainConfig.load(configs / "default-gpu.json"), TrainConfig.load(configs / "default-gpu-bm25.json")
    assert bm25.stages[-1].loss == gpu.stages[-1].loss + "+bm25"  # the shipped recipe, BM25 distillation added
    bm25.stages[-1].loss, bm25.notes = gpu.stages[-1].loss, gpu.notes
    assert bm25 == gpu
    # the shipped default's continuation and its control differ in the loss alone (the BM25 term's own effect)
    control, cont = (TrainConfig.load(configs / f"{n}.json") for n in ("default-continue-gpu", "default-continue-gpu-bm25"))
    assert cont.stages[-1].loss == control.stages[-1].loss + "+bm25" == gpu.stages[-1].loss + "+bm25"
    cont.stages[-1].loss, cont.notes = control.stages[-1].loss, control.notes
    assert cont == control
    cpu = TrainConfig.load(configs / "default-continue-cpu-bm25.json")  # the same continuation on a CPU's budget
    assert cpu.stages[-1].loss == gpu.stages[-1].loss + "+bm25" and cpu.model == control.model
    assert (cpu.lora_layers, cpu.batch_size, cpu.stages[-1].max_negatives, cpu.stages[-1].steps) == (8, 16, 1, 100)
    # the term-channel rows of the CPU continuation: its start with the channel, and each one change beside it
    for name, term_lr, loss in (("terms", None, cpu.stages[-1].loss), ("terms-fast", 0.02, cpu.stages[-1].loss),
                                ("terms-lr0.1", 0.1, cpu.stages[-1].loss), ("terms-no-flops", None, "infonce+bm25")):
        row = TrainConfig.load(configs / f"default-continue-cpu-bm25-{name}.json")
        assert (row.model, row.term_lr, row.stages[-1].loss) == (cpu.model + "-terms", term_lr, loss)
        row.model, row.term_lr, row.stages[-1].loss, row.notes = cpu.model, None, cpu.stages[-1].loss, cpu.notes
        assert row == cpu
    echo = TrainConfig.load(configs / "default-continue-cpu-bm25-echo.json")  # echo input: the start alone differs
    assert echo.model == cpu.model + "-echo"
    echo.model, echo.notes = cpu.model, cpu.notes
    assert echo == cpu
    with pytest.raises(ValueError, match="cache_chunk"):
        TrainConfig(stages=[StageConfig("s", ["x"])], cache_chunk=0)


def test_a_config_extends_a_base_changing_only_what_it_names(tmp_path):
    """``extends``: the base's fields, the file's own replacing them, its stages changed by name (the base's order
    kept), chains followed; a stage the base lacks, a missing base and a circle are refused with the file named."""
    def write(name, obj):
        (tmp_path / name).write_text(json.dumps(obj))
        return tmp_path / name

    write("base.json", {"lr": 1e-3, "batch_size": 8, "notes": ["base"], "instructions": {"a": "x"},
                        "stages": [{"name": "weak", "data": ["w.jsonl"], "steps": 5},
                                   {"name": "labelled", "data": ["l.jsonl"], "loss": "infonce", "steps": 10}]})
    write("mid.json", {"extends": "base.json", "lr": 5e-4, "notes": ["mid"],
                       "stages": [{"name": "labelled", "loss": "infonce+bm25"}]})
    (tmp_path / "sub").mkdir()
    write("sub/top.json", {"extends": "../mid.json", "stages": [{"name": "weak", "steps": 7}]})
    top = TrainConfig.load(tmp_path / "sub" / "top.json")
    assert (top.lr, top.batch_size, top.notes, top.instructions) == (5e-4, 8, ["mid"], {"a": "x"})
    assert [(s.name, s.data, s.loss, s.steps) for s in top.stages] == [
        ("weak", ["w.jsonl"], "infonce", 7), ("labelled", ["l.jsonl"], "infonce+bm25", 10)]
    assert "extends" not in top.to_dict()  # a run saves the whole resolved config
    for name, obj, message in (
            ("new-stage.json", {"extends": "base.json", "stages": [{"name": "extra", "data": ["x"]}]},
             r"stage 'extra' is not a stage of .*base.json \(weak, labelled\)"),
            ("no-base.json", {"extends": "absent.json"}, r"extends 'absent.json', but .*absent.json is not a file"),
            ("loop-a.json", {"extends": "loop-b.json"}, "goes round in a circle"),
            ("bad-field.json", {"extends": "base.json", "lrr": 1}, r"unknown field\(s\) \['lrr'\]")):
        write("loop-b.json", {"extends": "loop-a.json"})
        with pytest.raises(ValueError, match=message):
            TrainConfig.load(write(name, obj))


def test_model_card_command_is_written_as_the_lens_command():
    """`python -m lens.cli train ...` (how torchrun and accelerate start it) is retyped as `lens train ...`."""
    from lens.cmdline import command_line

    assert command_line(["/repo/lens/cli.py", "train", "--out", "a b"]) == "lens train --out 'a b'"
    assert command_line(["/venv/bin/lens", "-v", "train"]) == "lens -v train"
    here = Path.cwd()
    assert command_line([str(here / "my_train.py"), "--resume"]) == "python my_train.py --resume"
    assert command_line([str(here / "elsewhere" / "cli.py"), "x"]) == "python elsewhere/cli.py x"  # not lens's cli.py


def test_model_card_says_whether_a_prefix_cache_was_used():
    from lens.train.report import model_card

    cfg = TrainConfig(stages=[StageConfig("s", ["x.jsonl"])])
    rows = [{"loss": 1.0, "step_s": 2.0}]

    def card(cache_seconds):
        return model_card(cfg, backbone="default", num_clusters=8, max_length=32, steps=1,
                          cache_seconds=cache_seconds, stage_examples=[[]], rows=rows, command="lens train")

    assert "no prefix cache (no frozen layers), training steps 2 s." in card(None)
    assert "prefix cache 12 s (computed in this run), training steps 2 s." in card(12.0)


class _BagOfLetters:
    """A fake dense peer: letter counts (not normalised: PeerCosines normalises), counting its encode calls."""

    def __init__(self):
        self.encoded: list[str] = []

    def encode(self, texts, batch_size=64, show_progress_bar=None):
        self.encoded += list(texts)
        return np.array([[t.count(c) + 0.5 for c in "abcdefghijklmnopqrstuvwxyz"] for t in texts], dtype=np.float32)


def test_peer_cosines_are_cached_unit_cosines():
    from lens.train.teacher import PeerCosines

    peer = _BagOfLetters()
    cos = PeerCosines(peer, batch_size=2)
    got = cos(["abc", "zz"], ["abc", "a b", "zz", "abc"])
    v = peer.encode(["abc", "zz", "a b"])
    v = v / np.linalg.norm(v, axis=1, keepdims=True)
    want = v[[0, 1]] @ v[[0, 2, 1, 0]].T
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert got[0, 0] == pytest.approx(1.0) and got[1, 2] == pytest.approx(1.0)
    assert sorted(peer.encoded[:3]) == ["a b", "abc", "zz"]  # each distinct text once
    cos(["zz"], ["abc"])
    assert len(peer.encoded) == 6  # the 3 of the reference above; nothing new was encoded


def test_hybrid_loss_is_infonce_over_the_weighted_hybrid_score():
    """InfoNCE over w_lex cos_lex + w_dense cos_dense against the hand-written formula; the dense peer sees the bare
    queries and the layout's documents; a copy of the positive stays masked; no peer -> a clear error."""
    from lens.train.losses import cosine_scores
    from lens.train.objectives import Objective, batch_layout

    ex = [TrainExample("q0", "p0", negatives=["n0"]), TrainExample("q1", "p1", negatives=["p0"])]
    layout = batch_layout(ex, lambda e: e.negatives)
    g = torch.Generator().manual_seed(1)
    q, d = torch.randn(2, 6, generator=g), torch.randn(len(layout.doc_texts), 6, generator=g)
    dense = np.array([[0.9, 0.1, 0.3, 0.9], [0.2, 0.4, 0.8, 0.2]], dtype=np.float32)
    seen = []

    def peer(queries, docs):
        seen.append((list(queries), list(docs)))
        return dense

    loss, terms = Objective("hybrid", temperature=0.05, bce_scale=20.0, graded_floor=0.7, dense=peer,
                            hybrid_weights=(0.7, 0.3))(q, d, layout, ex, torch.tensor(0.0))
    assert seen == [(["q0", "q1"], ["p0", "n0", "p1", "p0"])]
    lex = cosine_scores(q, d).numpy()
    want = 0.0
    for i, pos in enumerate(layout.positive_index):
        logits = [(0.7 * lex[i, j] + 0.3 * dense[i, j]) / 0.05 for j in range(4) if layout.valid[i][j]]
        own = (0.7 * lex[i, pos] + 0.3 * dense[i, pos]) / 0.05
        want += (np.log(np.sum(np.exp(logits))) - own) / 2
    assert float(loss) == pytest.approx(want, rel=1e-5)
    assert terms == {"hybrid": pytest.approx(want, rel=1e-5)}
    assert not layout.valid[0][3] and layout.valid[1][3]  # q1's negative "p0" is q0's positive: masked for q0 only
    with pytest.raises(ValueError, match="dense peer"):
        Objective("infonce+hybrid", temperature=0.05, bce_scale=20.0, graded_floor=0.7)


def test_hybrid_stage_trains_against_the_dense_peer(tiny_lens_dir, data_file, tmp_path, monkeypatch):
    from lens.train.teacher import PeerCosines

    peer = _BagOfLetters()
    monkeypatch.setattr(Trainer, "_dense_peer", lambda self: PeerCosines(peer))
    cfg = _config(tiny_lens_dir, data_file, lora_layers=1, hybrid_weights=[0.6, 0.4],
                  stages=[StageConfig("h", [str(data_file)], loss="infonce+hybrid", steps=2)])
    t = Trainer(cfg, tmp_path / "out", show_progress_bar=False)
    rows = [t.train_step(), t.train_step()]
    assert all(np.isfinite(r["loss"]) for r in rows)
    assert set(peer.encoded) <= set(Q) | set(P) and set(Q) & set(peer.encoded)  # bare queries, no instruction


def test_bm25_scores_are_the_baseline_index_scores_of_the_batch_documents():
    """BM25Scores gives, for each (query, document) cell, the score BM25Index over the corpus gives that document;
    a document outside the corpus is a clear error."""
    from lens.bm25 import BM25Index, tokenize
    from lens.train.teacher import BM25Scores

    corpus = ["the cat sat on the mat", "dogs chase cats", "a mat of straw", "the stock market fell", "cats"]
    scorer = BM25Scores(corpus + corpus[:2])  # repeats are one document
    queries, docs = ["cat on a mat", "market dogs", "the of"], [corpus[2], corpus[0], corpus[4], corpus[2]]
    got = scorer(queries, docs)
    index = BM25Index(corpus)
    for i, q in enumerate(queries):
        want = index.scores(tokenize([q])[0])[[2, 0, 4, 2]]
        np.testing.assert_allclose(got[i], want, rtol=1e-6)
    assert got[0, 1] > got[0, 0] > 0 and got[1, 0] == 0 and not got[2].any()  # stopwords only: no score
    with pytest.raises(ValueError, match="not in the BM25 corpus"):
        scorer(queries, ["an unseen text"])


def test_bm25_loss_is_kl_from_bm25_softmax_over_row_max():
    """KL(teacher || student) with the teacher softmax(bm25 / row max / T) over the valid cells, against the
    hand-written formula; a query sharing no term with its candidates is left out; no scorer -> a clear error."""
    from lens.train.losses import cosine_scores
    from lens.train.objectives import BM25_TEACHER_TEMPERATURE, Objective, batch_layout

    ex = [TrainExample("q0", "p0", negatives=["n0"]), TrainExample("q1", "p1", negatives=["p0"]),
          TrainExample("q2", "p2", negatives=[])]
    layout = batch_layout(ex, lambda e: e.negatives)
    g = torch.Generator().manual_seed(2)
    q, d = torch.randn(3, 6, generator=g), torch.randn(len(layout.doc_texts), 6, generator=g)
    bm = np.array([[4.0, 1.0, 0.0, 9.0, 2.0], [0.5, 0.0, 2.0, 0.5, 0.0], [0.0] * 5], dtype=np.float32)
    loss, terms = Objective("bm25", temperature=0.05, bce_scale=20.0, graded_floor=0.7,
                            bm25=lambda queries, docs: bm)(q, d, layout, ex, torch.tensor(0.0))
    lex = cosine_scores(q, d).numpy()
    want = 0.0
    for i in (0, 1):  # row 2 has no BM25 score anywhere
        cols = [j for j in range(5) if layout.valid[i][j]]
        top = max(bm[i, j] for j in cols)  # row 0's 9.0 sits in a masked cell (a copy of its positive)
        t = np.array([bm[i, j] / top / BM25_TEACHER_TEMPERATURE for j in cols])
        s = np.array([lex[i, j] / 0.05 for j in cols])
        p, logq = np.exp(t - t.max()) / np.exp(t - t.max()).sum(), s - s.max() - np.log(np.exp(s - s.max()).sum())
        want += float(np.sum(p * (np.log(p + 1e-30) - logq))) / 2
    assert not layout.valid[0][3]
    assert float(loss) == pytest.approx(want, rel=1e-4)
    assert terms == {"bm25": pytest.approx(want, rel=1e-4)}
    with pytest.raises(ValueError, match="BM25 scores"):
        Objective("infonce+bm25", temperature=0.05, bce_scale=20.0, graded_floor=0.7)


def test_bm25_stage_trains_against_the_training_documents_bm25(tiny_lens_dir, data_file, tmp_path):
    cfg = _config(tiny_lens_dir, data_file, lora_layers=1,
                  stages=[StageConfig("b", [str(data_file)], loss="infonce+bm25", steps=2)])
    t = Trainer(cfg, tmp_path / "out", show_progress_bar=False)
    assert set(t.objectives[0].bm25.rows) == set(P)  # the positives and negatives of the toy set
    rows = [t.train_step(), t.train_step()]
    assert all(np.isfinite(r["loss"]) and r["loss_bm25"] >= 0 for r in rows)


def test_hybrid_weights_are_checked(tiny_lens_dir, data_file):
    for bad, match in (([0.0, 1.0], "lexicon weight"), ([0.5], "LEX,DENSE"), ([-1.0, 0.5], "negative")):
        with pytest.raises(ValueError, match=match):
            _config(tiny_lens_dir, data_file, hybrid_weights=bad)
    assert _config(tiny_lens_dir, data_file, hybrid_weights="0.8,0.2").hybrid_weights == [0.8, 0.2]


def test_a_collapse_to_zero_vectors_is_reported(tiny_lens_dir, data_file, tmp_path, monkeypatch, caplog):
    """All-zero lexicon vectors give no gradient at all; after DEAD_STEPS such steps the trainer says so once."""
    import lens.train.trainer as trainer_module

    monkeypatch.setattr(trainer_module, "DEAD_STEPS", 2)
    t = Trainer(_config(tiny_lens_dir, data_file, lora_layers=1, stages=[StageConfig("s", [str(data_file)], steps=4)]),
                tmp_path / "out", show_progress_bar=False)
    with torch.no_grad():
        t.model.head.weight.zero_()  # every cluster logit 0: log1p(relu(0)) = 0 and relu's gradient there is 0
    with caplog.at_level("WARNING", logger="lens.train.trainer"):
        rows = [t.train_step()]
        assert "collapsed" not in caplog.text  # one step is not yet a collapse
        rows += [t.train_step() for _ in range(3)]
    assert [r["grad_norm"] for r in rows] == [0.0] * 4
    assert caplog.text.count("collapsed to zero") == 1


def test_exact_loss_is_the_share_of_weight_off_each_texts_own_clusters():
    """losses.exact_match against a loop; the objective refuses to run without the masks."""
    from lens.train.losses import exact_match
    from lens.train.objectives import Objective, batch_layout

    g = torch.Generator().manual_seed(0)
    v = torch.relu(torch.randn(4, 6, generator=g))
    v[2] = 0.0
    own = torch.rand(4, 6, generator=g) < 0.5
    want = 0.0
    for i in range(4):
        total = float(v[i].sum())
        on = sum(float(v[i, j]) for j in range(6) if own[i, j])
        want += 1.0 if total == 0 else 1.0 - on / total
    assert float(exact_match(v, own)) == pytest.approx(want / 4, rel=1e-6)
    with pytest.raises(ValueError, match="own must match"):
        exact_match(v, own[:, :3])
    ex = [TrainExample("q0", "p0"), TrainExample("q1", "p1")]
    layout = batch_layout(ex, lambda e: [])
    objective = Objective("infonce+exact", temperature=0.05, bce_scale=20.0, graded_floor=0.7)
    with pytest.raises(ValueError, match="own token clusters"):
        objective(v[:2], v[2:], layout, ex, torch.tensor(0.0))
    _, terms = objective(v[:2], v[2:], layout, ex, torch.tensor(0.0), own=(own[:2], own[2:]))
    assert terms["exact"] == pytest.approx((float(exact_match(v[:2], own[:2])) + float(exact_match(v[2:], own[2:])))
                                           / 2, rel=1e-6)


def test_exact_stage_moves_weight_onto_the_texts_own_clusters(tiny_lens_dir, data_file, tmp_path):
    """The trainer's masks are the clusters of each text's own tokens (instruction and EOS left out), and training
    on the exact loss raises the share of the vectors' weight on them."""
    cfg = _config(tiny_lens_dir, data_file, lora_layers=1, lr=1e-2,
                  stages=[StageConfig("s", [str(data_file)], loss="exact", steps=6)])
    t = Trainer(cfg, tmp_path / "out", show_progress_bar=False)
    batch = [t.data[0][i] for i in t.plan[0].batch]
    _, q_items, d_items = t._batch_items(batch, None)
    own_q, own_d = t._own_clusters(q_items, d_items)
    for e, mask in zip(batch, own_q):
        ids = t.tokenizer(e.query, add_special_tokens=False)["input_ids"]
        assert set(np.flatnonzero(mask.numpy())) == set(t.encoder.assignment[ids].tolist())
    with torch.no_grad():
        before = float(t.batch_loss(batch, t.objectives[0], None)[0])
    rows = [t.train_step() for _ in range(6)]
    with torch.no_grad():
        after = float(t.batch_loss(batch, t.objectives[0], None)[0])
    assert rows[0]["loss"] == pytest.approx(before, rel=1e-5) and after < before


def test_a_time_limit_stops_before_overrunning_and_resume_finishes_the_same_run(tiny_lens_dir, data_file, tmp_path):
    """Steps that take 10 s (a fake clock) under a 45 s limit: the run stops after step 3 with its checkpoint
    (none was due) and no model; resumed, it ends where an uninterrupted run does."""
    from lens.train.stopping import StopRule, TrainingStopped

    cfg = _config(tiny_lens_dir, data_file, lora_layers=1, checkpoint_every=100, stages=[
        StageConfig("s1", [str(data_file)], loss="infonce", steps=6)])
    full = Trainer(cfg, tmp_path / "full", show_progress_bar=False)
    full.train()
    now = [0.0]
    part = Trainer(cfg, tmp_path / "part", show_progress_bar=False)
    step = part.train_step

    def ten_seconds():
        now[0] += 10
        return step()

    part.train_step = ten_seconds
    with pytest.raises(TrainingStopped, match="stopped at step 3 of 6 \\(time limit 45 s\\)"):
        part.train(stop=StopRule(45, start=0.0, clock=lambda: now[0], sigterm=False))
    assert part.step == 3 and not (tmp_path / "part" / "config.json").exists()
    assert json.loads((tmp_path / "part" / "checkpoint" / "state.json").read_text())["step"] == 3
    assert len((tmp_path / "part" / "train_log.csv").read_text().splitlines()) == 4
    resumed = Trainer(cfg, tmp_path / "part", show_progress_bar=False)
    resumed.train(resume=True)
    assert resumed.step == 6 and (tmp_path / "part" / "config.json").is_file()
    a, b = _final_state(full), _final_state(resumed)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-6, atol=1e-7)
    assert ((tmp_path / "part" / "train_log.csv").read_text().splitlines()[0]
            == (tmp_path / "full" / "train_log.csv").read_text().splitlines()[0])


def test_cli_train_time_limit_exits_75_and_resume_completes(tiny_lens_dir, data_file, tmp_path, capsys):
    from lens.cli import main

    out = tmp_path / "cli"
    argv = ["train", "--model", str(tiny_lens_dir), "--data", str(data_file), "--steps", "3", "--lora-layers", "1",
            "--batch-size", "4", "--lr", "1e-3", "--out", str(out)]
    assert main(argv + ["--time-limit", "0.001s"]) == 75
    err = capsys.readouterr().err
    assert "lens train: stopped at step 1 of 3 (time limit 0.001 s)" in err and "run the same command with --resume" in err
    assert not (out / "config.json").exists() and (out / "checkpoint").is_dir()
    assert main(argv + ["--resume"]) == 0
    assert "trained 3 steps" in capsys.readouterr().out
    assert len((out / "train_log.csv").read_text().splitlines()) == 4
    assert main(argv + ["--time-limit", "0"]) == 2
    assert "not a positive duration" in capsys.readouterr().err


def test_sigterm_stops_a_running_lens_train_with_its_checkpoint(tiny_lens_dir, data_file, tmp_path):
    """A real `lens train` process sent SIGTERM mid-run (as a scheduler does) exits 75 with a checkpoint at the step
    it stopped after, and the log and checkpoint agree; nothing is written as a finished model."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "lens.cli", "train", "--model", str(tiny_lens_dir), "--data", str(data_file),
           "--steps", "100000", "--lora-layers", "1", "--batch-size", "4", "--out", str(out), "--device", "cpu"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))
    try:
        deadline = time.monotonic() + 120
        while not (out / "checkpoint" / "state.json").is_file():  # the loop has run to its first checkpoint
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 75, err
    step = json.loads((out / "checkpoint" / "state.json").read_text())["step"]
    assert f"lens train: stopped at step {step} of 100000 (SIGTERM)" in err
    assert len((out / "train_log.csv").read_text().splitlines()) == step + 1
    assert not (out / "config.json").exists()


def test_lora_targets_that_miss_linear_layers_are_warned_of(tiny_lens_dir, caplog):
    """A backbone whose projections have other names (Phi-3's fused qkv_proj, gate_up_proj) would train half its
    layers silently: the linear layers no target names are listed."""
    import logging

    from lens.encoder import LensEncoder
    from lens.train.trainer import lora_target_names

    decoder = LensEncoder.from_pretrained(tiny_lens_dir).model.decoder
    with caplog.at_level(logging.WARNING, logger="lens.train.trainer"):
        names = lora_target_names(decoder, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                            "down_proj"], 0)
    assert names and "get no adapter" not in caplog.text
    with caplog.at_level(logging.WARNING, logger="lens.train.trainer"):
        lora_target_names(decoder, ["q_proj", "v_proj"], 0)
    assert "get no adapter: down_proj, gate_proj, k_proj, o_proj, up_proj" in caplog.text


def test_frozen_decoder_is_bfloat16_only_on_cuda_under_autocast():
    from lens.train.trainer import frozen_decoder_dtype

    assert frozen_decoder_dtype("cuda", True) == torch.bfloat16
    assert frozen_decoder_dtype("cuda", False) == torch.float32  # bf16: false trains in float32 throughout
    assert frozen_decoder_dtype("cpu", True) == torch.float32


def test_trained_weights_stay_float32_beside_a_bfloat16_decoder(tiny_lens_dir, data_file, tmp_path, monkeypatch):
    """CUDA's setting on this CPU (a bfloat16 frozen decoder, bf16 autocast): the head, LoRA and bias keep float32
    weights, so AdamW's small first step (about lr on every element with a gradient) moves the head as it does in a
    float32 run; a bfloat16 head would leave most of its values where they were."""
    import lens.train.trainer as trainer_module

    changed = {}
    for name, frozen in (("float32", torch.float32), ("bf16", torch.bfloat16)):
        monkeypatch.setattr(trainer_module, "frozen_decoder_dtype", lambda device_type, bf16, d=frozen: d)
        t = Trainer(_config(tiny_lens_dir, data_file, lora_layers=None, lr=1e-5, bf16=name == "bf16"),
                    tmp_path / name, show_progress_bar=False)
        assert t.model.head.weight.dtype == torch.float32 and t.bias.dtype == torch.float32
        assert {p.dtype for p in t.decoder.parameters() if p.requires_grad} == {torch.float32}  # LoRA
        assert {p.dtype for p in t.decoder.parameters() if not p.requires_grad} == {frozen}
        before = t.model.head.weight.detach().clone()
        row = t.train_step()
        assert np.isfinite(row["loss"])
        changed[name] = (t.model.head.weight.detach() != before)
    assert changed["float32"].float().mean() > 0.5
    both = (changed["float32"] & changed["bf16"]).sum() / changed["float32"].sum()
    assert both > 0.95, float(both)


@pytest.mark.parametrize("bad, message", [
    ({"batch_size": "4"}, "'batch_size' must be int, got '4'"),
    ({"train_head": "false"}, "'train_head' must be bool"),
    ({"lora_targets": "q_proj"}, "'lora_targets' must be list"),
    ({"checkpoint_every": 0}, "checkpoint_every must be >= 1"),
    ({"stages": [{"name": "s", "data": "toy.jsonl"}]}, "stage 's': 'data' must be list"),
    ({"stages": [{"name": "s", "data": ["x"], "steps": 1.5}]}, "stage 's': 'steps' must be int or null, got 1.5"),
    ({"stages": [{"name": "s", "data": ["x"], "max_negatives": -1}]}, "max_negatives must be >= 0"),
    ({"stages": [{"name": "s", "data": ["x"], "shuffle": True}]}, r"stage 's': unknown field\(s\) \['shuffle'\]"),
])
def test_a_config_value_of_the_wrong_type_or_range_is_refused_naming_its_key(bad, message):
    raw = {"model": "m", "stages": [{"name": "s", "data": ["x.jsonl"]}], **bad}
    with pytest.raises(ValueError, match=message):
        TrainConfig.from_dict(raw)
    ok = TrainConfig.from_dict({"model": "m", "stages": [{"name": "s", "data": ["x.jsonl"], "epochs": 2}], "lr": 1,
                                "eval_every": 0, "threads": None})  # an int for a float, 0: no validation
    assert (ok.lr, ok.eval_every, ok.stages[0].epochs) == (1, 0, 2)


def test_flags_override_every_stage_and_the_saved_config_says_what_ran(tiny_lens_dir, data_file, tmp_path, capsys):
    """--batch-size and --lr replace a stage's own values, --epochs a stage's steps; --data with --config and
    --steps with --epochs are refused; without --model (or a config naming one) training does not start."""
    from lens.cli import main

    (tmp_path / "c.json").write_text(json.dumps({
        "model": str(tiny_lens_dir), "lora_layers": 1, "lora_r": 4, "lora_alpha": 8, "doc_max_length": 16,
        "stages": [{"name": "s", "data": [str(data_file)], "steps": 2, "batch_size": 8, "lr": 0.01}]}))
    out = tmp_path / "run"
    assert main(["train", "--config", str(tmp_path / "c.json"), "--batch-size", "2", "--lr", "1e-5",
                 "--out", str(out)]) == 0
    saved = json.loads((out / "train_config.json").read_text())
    assert (saved["batch_size"], saved["lr"]) == (2, 1e-5)
    assert (saved["stages"][0]["batch_size"], saved["stages"][0]["lr"]) == (None, None)
    rows = [line.split(",") for line in (out / "train_log.csv").read_text().splitlines()]
    lr_col = rows[0].index("lr")
    assert 0 < max(float(r[lr_col]) for r in rows[1:]) <= 1e-5  # the flag's rate, not the stage's 0.01
    capsys.readouterr()
    for argv, message in (
            (["--config", str(tmp_path / "c.json"), "--data", str(data_file)], "with --config the stages name"),
            (["--config", str(tmp_path / "c.json"), "--steps", "1", "--epochs", "1"], "not both"),
            (["--data", str(data_file)], "give --model START")):
        assert main(["train", *argv, "--out", str(tmp_path / "other")]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "other").exists()


def test_resume_or_overwrite_never_take_a_users_folder_or_an_old_runs_state(tiny_lens_dir, data_file, tmp_path,
                                                                              capsys):
    """--resume on a folder that holds no run checks it like a new --out (a user's files are refused); --overwrite
    starts again and drops the old run's checkpoint, so a crash then --resume never goes on from it; a checkpoint
    carries the settings it was made with, and a resume is checked against them."""
    from lens.cli import main
    from lens.train.checkpoint import checkpoint_config

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "README.md").write_text("my readme")
    base = ["train", "--model", str(tiny_lens_dir), "--data", str(data_file), "--steps", "2", "--lora-layers", "1",
            "--batch-size", "4"]
    assert main([*base, "--out", str(mine), "--resume"]) == 2
    assert (mine / "README.md").read_text() == "my readme" and sorted(p.name for p in mine.iterdir()) == ["README.md"]
    out = tmp_path / "run"
    assert main([*base, "--seed", "3", "--out", str(out)]) == 0
    assert checkpoint_config(out / "checkpoint")["seed"] == 3

    class Crash(Exception):
        pass

    import lens.train.trainer as trainer_module

    real_step = trainer_module.Trainer.train_step

    def crash(self, *a, **k):
        raise Crash

    trainer_module.Trainer.train_step = crash
    try:
        with pytest.raises(Crash):
            main([*base, "--seed", "5", "--out", str(out), "--overwrite"])
    finally:
        trainer_module.Trainer.train_step = real_step
    assert not (out / "checkpoint").exists()  # the seed-3 state is gone with the run it belonged to
    capsys.readouterr()
    assert main([*base, "--seed", "5", "--out", str(out), "--resume"]) == 0
    assert "trained 2 steps" in capsys.readouterr().out  # from step 0, not "already complete" on the old state
    (out / "train_config.json").write_text(json.dumps({**json.loads((out / "train_config.json").read_text()),
                                                       "seed": 9}))  # the file beside it says otherwise
    assert main([*base, "--seed", "9", "--out", str(out), "--resume"]) == 2  # the checkpoint's own settings rule
    assert "seed: saved 5, given 9" in capsys.readouterr().err


def test_a_model_directory_is_replaced_whole_only_when_it_holds_nothing_of_the_users(tiny_lens_dir, data_file,
                                                                                      tmp_path, capsys):
    """cluster-vocab and merge replace the whole --out: over a model with a user's file beside it, even --overwrite
    is refused (the file would be lost); lens train --overwrite keeps such files. The writers' own file names are
    all known to the check."""
    from lens.cli import main
    from lens.model_dir import MODEL_DIR_ENTRIES
    from lens.train import mntp, report, trainer

    assert {trainer.CHECKPOINT_DIR, trainer.TRAIN_CONFIG_NAME, trainer.ADAPTER_DIR, report.LOG_NAME, report.CURVES_NAME,
            report.CARD_NAME, mntp.MNTP_CONFIG_NAME, mntp.MNTP_LOG_NAME} <= MODEL_DIR_ENTRIES
    out = tmp_path / "run"
    assert main(["train", "--model", str(tiny_lens_dir), "--data", str(data_file), "--steps", "1", "--lora-layers",
                 "1", "--batch-size", "4", "--out", str(out)]) == 0
    (out / "my_eval.txt").write_text("mine")
    assert sorted(p.name for p in out.iterdir() if p.name not in MODEL_DIR_ENTRIES) == ["my_eval.txt"]
    backbone = json.loads((tiny_lens_dir / "config.json").read_text())["backbone"]
    capsys.readouterr()
    assert main(["cluster-vocab", "--model", backbone, "--clusters", "8", "--out", str(out), "--overwrite"]) == 2
    assert "also holds files that are not the model's (my_eval.txt)" in capsys.readouterr().err
    assert (out / "my_eval.txt").read_text() == "mine" and (out / "adapter").is_dir()
    assert main(["train", "--model", str(tiny_lens_dir), "--data", str(data_file), "--steps", "1", "--lora-layers",
                 "1", "--batch-size", "4", "--out", str(out), "--overwrite"]) == 0
    assert (out / "my_eval.txt").read_text() == "mine"


def test_small_slips_in_a_run_are_named(tiny_lens_dir, data_file, tmp_path, caplog):
    """A loss expression with a dangling '*', a batch of 1 and a batch larger than the stage's data each say what
    they are; the trained model's config records a hash of what it trained on."""
    from lens.train.objectives import parse_loss

    with pytest.raises(ValueError, match="a term without a loss name"):
        parse_loss("infonce+0.5*")
    with pytest.raises(ValueError, match="batch size 1; contrastive training needs batches of 2"):
        plan_steps(_config(tiny_lens_dir, data_file, batch_size=1), [read_examples(data_file)])
    with caplog.at_level("WARNING"):
        plan_steps(_config(tiny_lens_dir, data_file, batch_size=64), [read_examples(data_file)])
    assert "batch size 64 is larger than its 8 examples" in caplog.text
    t = Trainer(_config(tiny_lens_dir, data_file, lora_layers=1, stages=[
        StageConfig("s1", [str(data_file)], loss="infonce", steps=1)]), tmp_path / "m")
    t.train()
    trained = json.loads((tmp_path / "m" / "config.json").read_text())["extra"]["training"]
    assert trained["inputs_sha256"] == t.inputs_sha256 and len(t.inputs_sha256) == 64


def test_a_run_stopped_while_its_prefix_cache_filled_is_continued_with_resume(tiny_lens_dir, data_file, tmp_path,
                                                                                capsys):
    """A run killed before its first checkpoint leaves its own files only (the prefix cache): --resume continues
    it, and without --resume or --overwrite the message says so (not "not a LENS model directory")."""
    from lens.cli import main

    out = tmp_path / "run"
    (out / "prefix-cache").mkdir(parents=True)
    argv = ["train", "--model", str(tiny_lens_dir), "--data", str(data_file), "--steps", "2", "--lora-layers", "1",
            "--batch-size", "4", "--out", str(out)]
    assert main(argv) == 2
    assert "holds what a run stopped before its first checkpoint left (prefix-cache): pass --resume" in \
        capsys.readouterr().err
    assert main([*argv, "--resume"]) == 0 and (out / "config.json").is_file()
