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


def test_explain_match_prints_the_cosine_and_what_makes_it_up(tiny_lens_dir, capsys):
    from lens.encoder import LensEncoder

    argv = ["explain", "--model", str(tiny_lens_dir), "--top-k", "3", "--instruction", "Find it", "cell gene",
            "--match", "the cell gene and its protein"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    why = LensEncoder.from_pretrained(str(tiny_lens_dir)).explain_match(
        "cell gene", "the cell gene and its protein", top_k=3, instruction="Find it")
    assert f"lexicon cosine {why.score:.4f} with 'the cell gene and its protein'" in out
    assert [int(line.split()[1]) for line in out.splitlines() if line.strip().startswith("cluster")] == [
        r.cluster for r in why.clusters] and why.clusters
    assert main(["explain", "--model", str(tiny_lens_dir), "cell gene", "--match", " "]) == 0
    assert "lexicon cosine 0.0000 with ' '; no cluster is weighed by both" in capsys.readouterr().out


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
    argv = ["encode", "--model", str(tiny_lens_dir), "--input", str(tmp_path / "q.txt"), "--output", str(out),
            "--overwrite"]
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


# ---------------------------------------------------------------------------------------------- -q / normal / -v
import pytest  # noqa: E402  (this section's fixture)


@pytest.fixture(scope="module")
def tiny_adapter_dir(tiny_lens_dir, tmp_path_factory):
    """``tiny_lens_dir`` plus an untrained LoRA adapter: loading it goes through PEFT, which (with the pinned
    transformers and PEFT) calls a deprecated transformers property and so raises a FutureWarning."""
    import shutil
    import warnings

    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    d = tmp_path_factory.mktemp("adapter") / "tiny-lora"
    shutil.copytree(tiny_lens_dir, d)
    config = json.loads((d / "config.json").read_text())
    decoder = AutoModelForCausalLM.from_pretrained(config["backbone"], local_files_only=True).model
    with warnings.catch_warnings():  # the FutureWarning this fixture exists for, raised here too
        warnings.simplefilter("ignore", FutureWarning)
        lora = get_peft_model(decoder, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    lora.save_pretrained(d / "adapter")
    (d / "config.json").write_text(json.dumps({**config, "adapter": "adapter"}))
    return d


def test_quiet_prints_no_progress_bar(tiny_lens_dir, tmp_path, capfd):
    (tmp_path / "t.txt").write_text("cell gene\ncancer patients\n")
    argv = ["encode", "--model", str(tiny_lens_dir), "--input", str(tmp_path / "t.txt"), "--output",
            str(tmp_path / "o.npy"), "--overwrite"]
    assert main(argv) == 0
    assert "100%|" in capfd.readouterr().err  # the bar the command asks for
    for flag in ("-q", "--quiet"):
        assert main([flag] + argv) == 0
        out, err = capfd.readouterr()
        assert err == "" and "wrote" in out
    assert main(argv) == 0  # the bars come back after a quiet run in the same process
    assert "100%|" in capfd.readouterr().err


def test_a_model_load_prints_no_library_chatter(tiny_adapter_dir, capfd):
    import warnings

    argv = ["explain", "--model", str(tiny_adapter_dir), "--top-k", "2", "cell gene"]
    for flags, chatter in (([], False), (["-v"], True)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # no "once per location" hiding a repeat
            assert main(flags + argv) == 0
        err = capfd.readouterr().err
        library = [w for w in caught if issubclass(w.category, FutureWarning)]
        assert ("Loading weights" in err) is chatter, err
        assert bool(library) is chatter, [str(w.message) for w in library]


def test_verbose_enables_our_info_logs(tiny_lens_dir, caplog, capsys):
    import logging

    before = logging.getLogger("lens").level
    argv = ["explain", "--model", str(tiny_lens_dir), "--top-k", "2", "cell gene"]
    assert main(argv) == 0
    assert not [r for r in caplog.records if r.name.startswith("lens") and r.levelno == logging.INFO]
    assert main(["-v"] + argv) == 0
    assert any(r.name == "lens.backbone" and r.levelno == logging.INFO and "loading backbone" in r.getMessage()
               for r in caplog.records)
    assert logging.getLogger("lens").level == before  # restored for the rest of the process
    assert main(["-q", "-v"] + argv) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def _small_index(directory):
    """A saved three-document index, made without a model."""
    from index import HybridIndex

    ix = HybridIndex(4, 2)
    rng = np.random.default_rng(0)
    ix.add(["a", "b", "c"], rng.random((3, 4), dtype=np.float32), rng.random((3, 2), dtype=np.float32))
    ix.save(directory)
    return directory


def test_a_reader_that_closes_early_ends_the_command_quietly(tmp_path, capsys, monkeypatch):
    """``lens index info DIR | head -1``: no BrokenPipeError traceback, status 1 (the SIGPIPE recipe)."""
    import io
    import os
    import subprocess
    import sys

    ix = _small_index(tmp_path / "ix")
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command writes its first line
    try:
        done = subprocess.run([sys.executable, "-m", "lens.cli", "index", "info", str(ix)], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    assert done.returncode == 1 and done.stderr == ""

    class ClosedPipe(io.TextIOBase):
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["index", "info", str(ix)]) == 1
    assert capsys.readouterr().err == ""


def test_python_dash_m_lens_is_the_lens_command():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "lens", "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "cluster-vocab" in done.stdout and "search" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "lens", "no-such-command"], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "no-such-command" in bad.stderr
