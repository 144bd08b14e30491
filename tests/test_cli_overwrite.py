"""The CLI's writers never lose what a user saved without being asked: a model at --out is replaced only with
--overwrite, an input never; `lens train` refuses a checkpoint without --resume and a resume with other settings."""

import json
import shutil

import pytest
import torch

from lens.cli import main
from lens.train.data import TrainExample, write_examples

Q = ["cancer drug trial", "gene expression in mouse", "protein level in blood", "brain cells"]
P = ["the drug trial in cancer patients", "mouse gene expression levels", "blood protein levels increase",
     "cells of the human brain"]


@pytest.fixture
def data_file(tmp_path):
    path = tmp_path / "toy.jsonl"
    write_examples(path, [TrainExample(q, p, task="toy") for q, p in zip(Q, P)])
    return path


def _train(model, data, out, *extra):
    return main(["train", "--model", str(model), "--data", str(data), "--steps", "2", "--lora-layers", "1",
                 "--batch-size", "4", "--lr", "1e-3", "--out", str(out), *extra])


def test_cluster_vocab_refuses_a_model_without_overwrite(trained_lens_dir, tiny_backbone_dir, tmp_path, capsys):
    out = tmp_path / "trained"
    shutil.copytree(trained_lens_dir, out)
    before = sorted(p.name for p in out.iterdir())
    argv = ["cluster-vocab", "--model", str(tiny_backbone_dir), "--clusters", "16", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "already holds a trained LENS model (adapter" in err and "--overwrite" in err
    assert sorted(p.name for p in out.iterdir()) == before
    assert main(argv + ["--overwrite"]) == 0
    assert not (out / "adapter").exists()


def test_merge_never_writes_over_its_input(trained_lens_dir, tmp_path, capsys):
    for argv in (["merge", str(trained_lens_dir), "--out", str(trained_lens_dir), "--overwrite"],
                 ["merge", str(trained_lens_dir), "--onto", str(trained_lens_dir), "--out", str(trained_lens_dir),
                  "--overwrite"]):
        assert main(argv) == 2
        assert "is also this command's input" in capsys.readouterr().err
    assert (trained_lens_dir / "adapter").is_dir()


def test_train_refuses_checkpoint_finished_model_and_user_folder(tiny_lens_dir, data_file, tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(tiny_lens_dir, data_file, out) == 0
    capsys.readouterr()
    assert _train(tiny_lens_dir, data_file, out) == 2
    assert "holds a finished trained model: pass --overwrite" in capsys.readouterr().err
    (out / "config.json").unlink()  # as after an interrupted run: checkpoint, no model yet
    assert _train(tiny_lens_dir, data_file, out) == 2
    assert "holds a checkpoint at step 2 of an interrupted run: pass --resume" in capsys.readouterr().err
    assert _train(tiny_lens_dir, data_file, out, "--overwrite") == 0
    user = tmp_path / "mine"
    user.mkdir()
    (user / "README.md").write_text("my notes")
    (user / "config.json.bak").write_text("{}")
    assert _train(tiny_lens_dir, data_file, user) == 2
    assert "is not a LENS model directory" in capsys.readouterr().err
    assert (user / "README.md").read_text() == "my notes"


def test_train_resume_refuses_other_settings(tiny_lens_dir, data_file, tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(tiny_lens_dir, data_file, out) == 0
    saved = (out / "train_config.json").read_text()
    capsys.readouterr()
    assert _train(tiny_lens_dir, data_file, out, "--resume", "--lr", "0.01") == 2
    err = capsys.readouterr().err
    assert "lr: saved 0.001, given 0.01" in err
    assert (out / "train_config.json").read_text() == saved
    assert _train(tiny_lens_dir, data_file, out, "--resume", "--threads", "1") == 0  # exempt: where it runs
    assert "already complete" in capsys.readouterr().out
    import os

    # the same model and data spelled another way (relative, or through a link) are the same settings
    link = tmp_path / "model-link"
    link.symlink_to(tiny_lens_dir)
    assert _train(os.path.relpath(link), os.path.relpath(data_file), out, "--resume") == 0
    assert "already complete" in capsys.readouterr().out


@pytest.mark.parametrize("flag", [["--steps", "0"], ["--steps", "-1"], ["--epochs", "0"]])
def test_train_refuses_no_steps(tiny_lens_dir, data_file, tmp_path, capsys, flag):
    argv = ["train", "--model", str(tiny_lens_dir), "--data", str(data_file), "--out", str(tmp_path / "o"), *flag]
    assert main(argv) == 2
    assert "expected" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_train_device_cuda_without_gpu(tiny_lens_dir, data_file, tmp_path, capsys):
    assert _train(tiny_lens_dir, data_file, tmp_path / "o", "--device", "cuda") == 2
    assert "this machine has no CUDA GPU visible to torch" in capsys.readouterr().err


def test_train_data_folder_and_raw_shared_file(tiny_lens_dir, tmp_path, capsys):
    folder = tmp_path / "wikiqa"
    folder.mkdir()
    (folder / "train.jsonl").write_text(json.dumps({"query": "q", "positive": "p", "qid": "1", "negative": "n"}) + "\n")
    assert _train(tiny_lens_dir, folder, tmp_path / "o") == 2
    err = capsys.readouterr().err
    assert "is a folder, not a training file (it holds train.jsonl)" in err and "lens data shared" in err
    assert _train(tiny_lens_dir, folder / "train.jsonl", tmp_path / "o2") == 2
    assert "convert it first with `lens data shared" in capsys.readouterr().err


def test_a_hugging_face_folder_is_never_taken_for_a_lens_model(tiny_backbone_dir, tiny_lens_dir, data_file, tmp_path,
                                                               capsys):
    """A transformers model folder has a config.json too: no writer may replace it, with or without --overwrite,
    the Python API included; nor may a command write over the backbone its input model names."""
    from lens.encoder import LensEncoder

    hf = tmp_path / "hf"
    shutil.copytree(tiny_backbone_dir, hf)
    before = sorted(p.name for p in hf.iterdir())
    for extra in ([], ["--overwrite"]):
        assert main(["cluster-vocab", "--model", str(tiny_backbone_dir), "--clusters", "16", "--out", str(hf),
                     *extra]) == 2
        err = capsys.readouterr().err
        assert "holds a Hugging Face model (model_type 'llama'), not a LENS model directory" in err
    assert _train(tiny_lens_dir, data_file, hf, "--overwrite") == 2
    assert "holds a Hugging Face model" in capsys.readouterr().err
    with pytest.raises(FileExistsError, match="holds a Hugging Face model"):
        LensEncoder.from_pretrained(tiny_lens_dir).save_pretrained(hf)
    assert sorted(p.name for p in hf.iterdir()) == before
    own = tmp_path / "own"  # a model clustered from hf: hf is its backbone, an input of whatever reads the model
    assert main(["cluster-vocab", "--model", str(hf), "--clusters", "16", "--out", str(own)]) == 0
    capsys.readouterr()
    assert _train(own, data_file, hf, "--overwrite") == 2
    assert "is the backbone of this command's input" in capsys.readouterr().err
    assert sorted(p.name for p in hf.iterdir()) == before
