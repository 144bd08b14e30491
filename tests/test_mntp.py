"""MNTP warm-up (LLM2Vec) on a tiny random Llama: the masking and the loss against naive references, a run that
learns, micro-batches and resuming that change nothing, and the merged bidirectional model it writes (it loads,
keeps its vectors, and `lens train` starts from it). Two processes against one: tests/test_distributed.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from lens.train import losses as L
from lens.train.data import TrainExample, write_examples
from lens.train.mntp import MNTP_CONFIG_NAME, MNTP_LOG_NAME, MNTPConfig, MNTPWarmup, mntp_texts

DOCS = ["the drug trial in cancer patients", "mouse gene expression levels", "blood protein levels increase",
        "cells of the human brain", "risk of clinical treatment", "response to a high dose"]


@pytest.fixture
def docs_file(tmp_path):
    ex = [TrainExample(f"query {i}", d, negatives=[DOCS[(i + 1) % len(DOCS)]], task="toy") for i, d in enumerate(DOCS)]
    path = tmp_path / "toy.jsonl"
    write_examples(path, ex)
    return path


def test_mask_tokens_masks_only_maskable_positions_at_about_the_rate():
    g = torch.Generator().manual_seed(0)
    ids = torch.arange(4000).reshape(20, 200) + 10
    maskable = torch.ones_like(ids, dtype=torch.bool)
    maskable[:, :3] = False  # e.g. BOS and a prompt
    maskable[5] = False  # a row with nothing to mask
    maskable[7] = False
    maskable[7, 50] = True  # one maskable position: a row always gets at least one mask
    corrupted, targets = L.mask_tokens(ids, maskable, 0.2, mask_id=1, generator=g)
    masked = targets != L.IGNORE
    assert not (masked & ~maskable).any() and not masked[5].any() and masked[7, 50]
    assert torch.equal(corrupted[masked], torch.ones(int(masked.sum()), dtype=ids.dtype))
    assert torch.equal(corrupted[~masked], ids[~masked]) and torch.equal(targets[masked], ids[masked])
    rate = masked[maskable].float().mean().item()
    assert 0.17 < rate < 0.23
    with pytest.raises(ValueError, match="mask rate"):
        L.mask_tokens(ids, maskable, 1.0, mask_id=1)


def test_masked_next_token_loss_against_a_naive_loop():
    torch.manual_seed(0)
    logits = torch.randn(3, 7, 5)
    targets = torch.full((3, 7), L.IGNORE)
    targets[0, 2], targets[0, 6], targets[2, 1] = 4, 0, 3
    terms = [-torch.log_softmax(logits[b, t - 1], dim=0)[targets[b, t]] for b in range(3) for t in range(1, 7)
             if targets[b, t] != L.IGNORE]  # the logits one position to the left predict a masked token
    assert L.masked_next_token_loss(logits, targets).item() == pytest.approx(torch.stack(terms).mean().item(), rel=1e-6)
    assert L.masked_next_token_loss(logits, targets, reduction="sum").item() == pytest.approx(
        torch.stack(terms).sum().item(), rel=1e-6)
    assert L.masked_next_token_loss(logits, torch.full((3, 7), L.IGNORE), reduction="sum").item() == 0.0  # an idle rank
    with pytest.raises(ValueError, match="nothing to predict"):
        L.masked_next_token_loss(logits, torch.full((3, 7), L.IGNORE))
    with pytest.raises(ValueError, match="expected logits"):
        L.masked_next_token_loss(logits[0], targets[0])


def test_texts_are_the_distinct_documents_of_training_files(docs_file):
    assert mntp_texts([str(docs_file)], None, 0) == DOCS  # positives, then negatives already seen
    sample = mntp_texts([str(docs_file)], 3, 0)
    assert len(sample) == 3 and set(sample) < set(DOCS) and sample == mntp_texts([str(docs_file)], 3, 0)


def test_config_checks_and_round_trip(docs_file):
    cfg = MNTPConfig(data=[str(docs_file)], steps=3)
    assert MNTPConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    for bad, match in (({"data": []}, "training files"), ({"data": ["x"], "mask_rate": 0.0}, "mask_rate"),
                       ({"data": ["x"], "steps": 0}, "steps"), ({"data": ["x"], "format_version": 99}, "newer")):
        with pytest.raises(ValueError, match=match):
            MNTPConfig(**bad)
    with pytest.raises(ValueError, match="unknown MNTP settings"):
        MNTPConfig.from_dict({"data": ["x"], "mask": 0.2})


def _warmup(tiny_lens_dir, docs_file, out, **kw):
    cfg = dict(data=[str(docs_file)], model=str(tiny_lens_dir), steps=3, batch_size=4, max_length=16, lora_r=4,
               lora_alpha=8, lr=1e-3, warmup_steps=0, seed=1)
    cfg.update(kw)
    return MNTPWarmup(MNTPConfig(**cfg), out, show_progress_bar=False)


def test_steps_lower_the_loss_of_a_batch_and_the_run_logs_each_step(tiny_lens_dir, docs_file, tmp_path):
    w = _warmup(tiny_lens_dir, docs_file, tmp_path / "out", steps=4, lr=1e-2)

    def batch_loss():
        w.generator.manual_seed(7)  # the same masks every time
        return w.loss(DOCS)

    before = float(batch_loss()[0])
    for _ in range(10):
        loss, accuracy = batch_loss()
        loss.backward()
        w.optimizer.step()
        w.optimizer.zero_grad()
        assert 0.0 <= accuracy <= 1.0
    assert float(batch_loss()[0]) < before - 0.05
    w.run()
    rows = (tmp_path / "out" / MNTP_LOG_NAME).read_text().splitlines()
    assert rows[0].startswith("step,loss,accuracy,lr,grad_norm") and len(rows) == 5


def test_the_warmed_model_is_bidirectional_merged_and_trainable(tiny_lens_dir, docs_file, tmp_path):
    from lens.encoder import LensEncoder
    from lens.train.config import StageConfig, TrainConfig
    from lens.train.trainer import Trainer

    w = _warmup(tiny_lens_dir, docs_file, tmp_path / "warm")
    out = w.run()
    in_memory = w.encoder.encode_documents(DOCS)
    loaded = LensEncoder.from_pretrained(out)
    assert loaded.config.attention == "bidirectional" and loaded.config.adapter is None
    np.testing.assert_allclose(loaded.encode_documents(DOCS), in_memory, atol=1e-5)
    base = LensEncoder.from_pretrained(tiny_lens_dir, attention="bidirectional")
    assert np.abs(base.encode_documents(DOCS) - in_memory).max() > 1e-4  # the warm-up changed the decoder
    np.testing.assert_array_equal(loaded.model.head.weight.detach().numpy(), base.model.head.weight.detach().numpy())
    assert loaded.fingerprint()["lens_backbone_weights"] and "lens_backbone_weights" not in base.fingerprint()
    saved = json.loads((out / MNTP_CONFIG_NAME).read_text())
    assert saved["steps"] == 3 and saved["model"] == str(tiny_lens_dir)
    cfg = TrainConfig(model=str(out), stages=[StageConfig("s", [str(docs_file)], steps=1)], lora_r=4, lora_alpha=8,
                      batch_size=4, eval_every=0, doc_max_length=16, query_max_length=32, lora_layers=1)
    trained = Trainer(cfg, tmp_path / "trained", show_progress_bar=False).train()
    assert LensEncoder.from_pretrained(trained).config.attention == "bidirectional"


def test_a_warm_up_from_a_trained_model_is_a_new_model(trained_lens_dir, docs_file, tmp_path):
    """The start's adapter is merged and then warmed up: the output's fingerprint is its own weights', never the
    start's (which a merged copy of the start keeps: ``save_pretrained``)."""
    from lens.encoder import LensEncoder

    LensEncoder.from_pretrained(trained_lens_dir).save_pretrained(tmp_path / "merged")  # as `lens merge` does
    out = _warmup(tmp_path / "merged", docs_file, tmp_path / "warm").run()
    start = LensEncoder.from_pretrained(tmp_path / "merged", attention="bidirectional").fingerprint()
    assert start["lens_adapter"]  # the merged start is the trained model
    warmed = LensEncoder.from_pretrained(out).fingerprint()
    assert warmed["lens_adapter"] is None and warmed["lens_backbone_weights"]
    assert warmed != start


def _lora(w) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in w.encoder.model.decoder.named_parameters() if p.requires_grad}


def test_micro_batches_take_the_same_step(tiny_lens_dir, docs_file, tmp_path):
    whole = _warmup(tiny_lens_dir, docs_file, tmp_path / "a", batch_size=5)
    parts = _warmup(tiny_lens_dir, docs_file, tmp_path / "b", batch_size=5, micro_batch_size=2)  # 2 + 2 + 1 texts
    for _ in range(2):
        a, b = whole.train_step(), parts.train_step()
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5) and b["accuracy"] == a["accuracy"]
    for (name, x), y in zip(_lora(whole).items(), _lora(parts).values()):
        torch.testing.assert_close(y, x, rtol=1e-4, atol=1e-6, msg=name)


def test_an_interrupted_run_resumes_to_the_uninterrupted_result(tiny_lens_dir, docs_file, tmp_path, monkeypatch):
    from lens.encoder import LensEncoder
    from lens.train.mntp import CHECKPOINT_DIR
    from lens.train.report import read_log

    kw = dict(steps=4, checkpoint_every=2, lr=1e-2)
    full = _warmup(tiny_lens_dir, docs_file, tmp_path / "full", **kw).run()
    part = _warmup(tiny_lens_dir, docs_file, tmp_path / "part", **kw)
    step = part.train_step

    def dies_at_step_three():
        if part.step == 2:
            raise KeyboardInterrupt  # after the checkpoint of step 2
        return step()

    monkeypatch.setattr(part, "train_step", dies_at_step_three)
    with pytest.raises(KeyboardInterrupt):
        part.run()
    assert not (tmp_path / "part" / "config.json").exists() and (tmp_path / "part" / CHECKPOINT_DIR).is_dir()
    with pytest.raises(ValueError, match="other settings \\(lr\\)"):  # a changed setting is refused, not mixed in
        _warmup(tiny_lens_dir, docs_file, tmp_path / "part", **{**kw, "lr": 1e-3}).run(resume=True)
    resumed = _warmup(tiny_lens_dir, docs_file, tmp_path / "part", **kw, threads=1)  # threads may change
    resumed.run(resume=True)
    assert resumed.step == 4
    want, got = read_log(full / MNTP_LOG_NAME), read_log(tmp_path / "part" / MNTP_LOG_NAME)
    assert [r["step"] for r in got] == [1, 2, 3, 4]
    assert [r["loss"] for r in got] == pytest.approx([r["loss"] for r in want], rel=1e-5)
    np.testing.assert_allclose(LensEncoder.from_pretrained(tmp_path / "part").encode_documents(DOCS),
                               LensEncoder.from_pretrained(full).encode_documents(DOCS), atol=1e-5)
    again = _warmup(tiny_lens_dir, docs_file, tmp_path / "part", **kw)
    again.run(resume=True)  # a finished run: nothing left but writing the same model again
    assert again.step == 4 and len(read_log(tmp_path / "part" / MNTP_LOG_NAME)) == 4


def test_it_never_writes_over_a_users_folder(tiny_lens_dir, docs_file, tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a LENS model directory"):
        _warmup(tiny_lens_dir, docs_file, folder, steps=1)  # refused before any training
    assert (folder / "notes.txt").read_text() == "keep me"


def test_lens_mntp_command(tiny_lens_dir, docs_file, tmp_path, capsys):
    from lens.cli import main

    out = tmp_path / "warm"
    assert main(["-q", "mntp", "--model", str(tiny_lens_dir), "--data", str(docs_file), "--out", str(out), "--steps",
                 "2", "--batch-size", "3", "--max-length", "16", "--lr", "1e-3"]) == 0
    assert "continue with `lens train --model" in capsys.readouterr().out
    saved = json.loads((out / MNTP_CONFIG_NAME).read_text())
    assert (saved["steps"], saved["batch_size"], saved["data"]) == (2, 3, [str(docs_file)])
    again = tmp_path / "again"  # a saved config reruns the same warm-up; flags override it
    assert main(["-q", "mntp", "--config", str(out / MNTP_CONFIG_NAME), "--steps", "1", "--out", str(again)]) == 0
    assert json.loads((again / MNTP_CONFIG_NAME).read_text()) == {**saved, "steps": 1}
    assert main(["-q", "mntp", "--out", str(out), "--resume"]) == 0  # the saved run, already finished
    assert len((out / MNTP_LOG_NAME).read_text().splitlines()) == 3
    assert main(["mntp", "--model", str(tiny_lens_dir), "--out", str(tmp_path / "x")]) == 2  # no data
    assert "give --data FILE" in capsys.readouterr().err and not (tmp_path / "x").exists()
    finished = (out / "clusters.safetensors").read_bytes(), (out / MNTP_LOG_NAME).read_text()
    rerun = ["-q", "mntp", "--model", str(tiny_lens_dir), "--data", str(docs_file), "--out", str(out), "--steps", "3",
             "--batch-size", "3", "--max-length", "16", "--lr", "1e-2"]
    assert main(rerun) == 2  # a finished warm-up is replaced only when asked
    assert "holds an MNTP run (checkpoint at step 2): pass --resume to continue it, --overwrite" in \
        capsys.readouterr().err
    assert ((out / "clusters.safetensors").read_bytes(), (out / MNTP_LOG_NAME).read_text()) == finished
    assert main(rerun + ["--overwrite", "--resume"]) == 2
    assert main(rerun + ["--overwrite"]) == 0
    assert len((out / MNTP_LOG_NAME).read_text().splitlines()) == 4  # the new run's three steps


def test_a_time_limit_stops_with_a_checkpoint_and_resume_finishes(tiny_lens_dir, docs_file, tmp_path, capsys):
    """`--time-limit` ends the warm-up after a step (at least one always runs) with its checkpoint, exit 75; the
    same command with --resume takes the remaining steps to the uninterrupted run's result."""
    from lens.cli import main
    from lens.encoder import LensEncoder
    from lens.train.mntp import CHECKPOINT_DIR
    from lens.train.report import read_log

    args = ["-q", "mntp", "--model", str(tiny_lens_dir), "--data", str(docs_file), "--steps", "3", "--batch-size",
            "3", "--max-length", "16", "--lr", "1e-2", "--checkpoint-every", "100"]
    assert main(args + ["--out", str(tmp_path / "full")]) == 0
    part = tmp_path / "part"
    assert main(args + ["--out", str(part), "--time-limit", "0.001s"]) == 75
    err = capsys.readouterr().err
    assert "lens mntp: stopped at step 1 of 3 (time limit" in err and "--resume" in err
    assert (part / CHECKPOINT_DIR).is_dir() and not (part / "config.json").exists()
    assert [r["step"] for r in read_log(part / MNTP_LOG_NAME)] == [1]
    assert main(args + ["--out", str(part), "--resume"]) == 0
    assert [r["loss"] for r in read_log(part / MNTP_LOG_NAME)] == pytest.approx(
        [r["loss"] for r in read_log(tmp_path / "full" / MNTP_LOG_NAME)], rel=1e-5)
    np.testing.assert_allclose(LensEncoder.from_pretrained(part).encode_documents(DOCS),
                               LensEncoder.from_pretrained(tmp_path / "full").encode_documents(DOCS), atol=1e-5)
    assert main(args + ["--out", str(tmp_path / "y"), "--time-limit", "soon"]) == 2
    assert "not a positive duration" in capsys.readouterr().err
