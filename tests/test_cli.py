"""The `lens` command: encode and explain on a tiny model, and errors that exit non-zero with a message."""

import json

import numpy as np

from lens.cli import main
from lens.encoder import LensEncoder

from conftest import assert_close


def test_encode_txt_and_jsonl(tiny_lens_dir, tmp_path):
    (tmp_path / "t.txt").write_text("cell gene\ncancer patients\n")
    (tmp_path / "t.jsonl").write_text(json.dumps({"text": "cell gene"}) + "\n" + json.dumps("cancer patients") + "\n")
    for name in ("t.txt", "t.jsonl"):
        out = tmp_path / f"{name}.npy"
        assert main(["encode", "--model", str(tiny_lens_dir), "--input", str(tmp_path / name), "--output", str(out)]) == 0
        vecs = np.load(out)
        assert vecs.shape == (2, 16)
    enc = LensEncoder.from_pretrained(tiny_lens_dir)
    assert_close(np.load(tmp_path / "t.txt.npy"), enc.encode(["cell gene", "cancer patients"]))
    q = tmp_path / "q.npy"
    assert main(["encode", "--model", str(tiny_lens_dir), "--input", str(tmp_path / "t.txt"), "--output", str(q),
                 "--queries", "--instruction", "find studies"]) == 0
    assert_close(np.load(q), enc.encode_queries(["cell gene", "cancer patients"], instruction="find studies"))


def test_explain_prints_clusters(tiny_lens_dir, capsys):
    assert main(["explain", "--model", str(tiny_lens_dir), "--top-k", "2", "cell gene", "drug dose"]) == 0
    out = capsys.readouterr().out
    assert "'cell gene'" in out and "'drug dose'" in out and out.count("cluster ") >= 2


def test_errors_exit_2_with_a_message(tiny_lens_dir, tmp_path, capsys):
    assert main(["encode", "--model", str(tmp_path), "--input", "x.txt", "--output", "y.npy"]) == 2
    assert "error" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"title": "no text"}\n')
    assert main(["encode", "--model", str(tiny_lens_dir), "--input", str(bad), "--output", str(tmp_path / "o.npy")]) == 2
    assert "bad.jsonl:2" in capsys.readouterr().err
    assert main(["cluster-vocab", "--model", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    assert "accepted: 'default'" in capsys.readouterr().err


def test_task_flag_applies_the_tasks_instruction_to_queries(tiny_lens_dir, tmp_path, capsys):
    from lens.instructions import ATEB_INSTRUCTIONS

    (tmp_path / "q.txt").write_text("Premise: the cell Hypothesis: a gene\n")
    out = tmp_path / "q.npy"
    assert main(["encode", "--model", str(tiny_lens_dir), "--input", str(tmp_path / "q.txt"), "--output", str(out),
                 "--queries", "--task", "esnli"]) == 0
    enc = LensEncoder.from_pretrained(tiny_lens_dir)
    want = enc.encode_queries(["Premise: the cell Hypothesis: a gene"], instruction=ATEB_INSTRUCTIONS["esnli"])
    assert_close(np.load(out), want)
    assert main(["explain", "--model", str(tiny_lens_dir), "--query", "--task", "piqa", "--top-k", "3",
                 "cell gene"]) == 0
    rows = enc.explain("cell gene", top_k=3, query=True, instruction=ATEB_INSTRUCTIONS["piqa"])
    printed = capsys.readouterr().out
    assert all(f"cluster {r.cluster:>5}  weight {r.weight:6.3f}" in printed for r in rows)
    argv = ["encode", "--model", str(tiny_lens_dir), "--input", str(tmp_path / "q.txt"), "--output", str(out)]
    for extra, message in ((["--queries", "--task", "esnli", "--instruction", "x"], "not both"),
                           (["--task", "esnli"], "add --queries"),
                           (["--queries", "--task", "nope"], "known: dialfact")):
        assert main(argv + extra) == 2
        assert message in capsys.readouterr().err
    assert main(["explain", "--model", str(tiny_lens_dir), "--task", "esnli", "cell"]) == 2
    assert "--query for explain" in capsys.readouterr().err


def test_bench_subcommands_are_wired(capsys):
    for sub in ("beir", "ablation", "ateb"):
        assert main(["bench", sub, "--help"]) == 0
        assert f"lens bench {sub}" in capsys.readouterr().out
