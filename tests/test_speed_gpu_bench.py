"""benchmarks/speed_gpu.py without a GPU: its whole path on a CPU (``--device cpu --smoke``, lens.testing's tiny
model), an out-of-memory batch and a failing ``torch.compile`` recorded instead of ending the run, and its table."""

from __future__ import annotations

import json

import pytest
import torch

from bench_helpers import load_script


@pytest.fixture(scope="module")
def speed_gpu():
    return load_script("speed_gpu")


def _row(dtype, name, bs, bare, lens, **extra):
    return {"dtype": dtype, "set": name, "batch_size": bs, "auto": extra.pop("auto", False),
            "bare": {"docs_per_s": bare}, "lens": {"docs_per_s": lens}, "lens_over_bare": lens / bare,
            "ceiling_share": {"bare": bare / 10_000, "lens": lens / 10_000}, "peak_gib": 1.5, **extra}


def _result() -> dict:
    return {"device": "cuda", "model": "default", "peak_tflops": 989.0, "peak_source": "the datasheet", "smoke": False,
            "gpu": {"name": "Made-up GPU", "memory_gib": 80.0, "cuda": "13.0"}, "machine": {"cpu": "c", "cores": 16},
            "params": {"matmul": 110_800_000, "num_clusters": 8000, "pooling_upcast": {"bfloat16": True}},
            "inputs": {"source": "s", "cut": {"docs": 4, "tokens_mean": 256.0, "tokens_max": 256, "max_seq_length": 256,
                                              "ceiling_docs_per_s": 10_000.0, "auto_batch_size": {"bfloat16": 256}},
                       "queries": {"n": 3, "tokens_mean": 30.0}},
            "encode": [_row("bfloat16", "cut", 128, 5000.0, 4000.0),
                       _row("bfloat16", "cut", 256, 5200.0, 4100.0, auto=True),
                       {"dtype": "bfloat16", "set": "cut", "batch_size": 512, "error": "OutOfMemoryError: x",
                        "oom": True}],
            "kernels": [{"dtype": "bfloat16", "set": "cut", "batch_size": 256, "kernel": "flash",
                         "error": "RuntimeError: No available kernel"}],
            "chunked": [{"dtype": "bfloat16", "set": "cut", "batch_size": 256, "chunk": 128,
                         "sorted_docs_per_s": 4100.0, "chunked_docs_per_s": 3000.0}],
            "queries": {"bfloat16": {"one": {"p50_ms": 8.0, "p95_ms": 9.5}, "one_no_graphs": {"p50_ms": 18.0,
                                                                                                 "p95_ms": 25.5},
                                     "batch": {"p50_ms": 12.0, "p95_ms": 13.0, "queries_per_s": 2600.0, "size": 32},
                                     "threads": {"p50_ms": 40.0, "p95_ms": 60.0, "queries_per_s": 700.0, "clients": 32,
                                                 "errors": []}}},
            "fixed_path": {"bfloat16": {"length": 64, "eager": {"p50_ms": 7.0, "p95_ms": 8.0, "setup_s": 0.1,
                                                                 "max_abs_diff": 1e-3},
                                        "cudagraph": {"error": "RuntimeError: capture failed"}}},
            "failures": ["skipped bfloat16 queries: past --time-budget 1 s"], "_meta": {"command": "python x"}}


def test_table_rows_ratios_and_recorded_failures(speed_gpu):
    md = "\n".join(speed_gpu.render(_result()))
    assert "| bfloat16 | cut | 256* | 5,200.0 | 4,100.0 | 0.79 | 52.0, 41.0 | 1.50 |" in md
    assert "| bfloat16 | cut | 512 | out of memory |" in md
    assert "flash | failed: RuntimeError: No available kernel" in md
    assert "| bfloat16 | 64 | cudagraph | failed: RuntimeError: capture failed |" in md
    assert "| bfloat16 | 8.0 / 9.5 | 18.0 / 25.5 | 12.0 / 13.0 (2600), N=32 | 40.0 / 60.0 (700.0), N=32 |" in md
    assert "989 TFLOP/s (the datasheet)" in md and "Made-up GPU" in md
    assert "past --time-budget" in md and "--dtype float32|bfloat16" in md
    assert "Smoke run" not in md


def test_cuda_oom_is_recognised(speed_gpu):
    assert speed_gpu.is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert speed_gpu.is_oom(RuntimeError("CUDA error: out of memory"))
    assert not speed_gpu.is_oom(RuntimeError("No available kernel"))


def test_smoke_run_on_cpu_records_oom_and_compile_failures(speed_gpu, tiny_lens_dir, tmp_path, monkeypatch):
    """The script end to end on a CPU: bfloat16 (kernels, chunked, queries, fixed path), an out-of-memory error at
    batch 4 ends that set's batch sizes, a torch.compile that fails is recorded; both files are written."""
    from lens.encoder import LensEncoder

    real_encode = LensEncoder.encode

    def encode(self, texts, batch_size=None, **kw):
        if batch_size == 4 and len(texts) > 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB (made up)")
        return real_encode(self, texts, batch_size=batch_size, **kw)

    def no_compile(*a, **k):
        raise RuntimeError("no C++ compiler here (made up)")

    monkeypatch.setattr(LensEncoder, "encode", encode)
    monkeypatch.setattr(torch, "compile", no_compile)
    out = tmp_path / "speed_gpu"
    assert speed_gpu.main(["--device", "cpu", "--smoke", "--model", str(tiny_lens_dir), "--dtypes", "bfloat16",
                           "--docs", "4", "--queries", "3", "--concurrency", "2", "--compile", "--cuda-graphs",
                           "--data-dir", str(tmp_path / "no-data"), "--output", str(out)]) == 0
    r = json.loads(out.with_suffix(".json").read_text())
    assert r["smoke"] and r["inputs"]["source"].startswith("pydoc")
    for name in ("cranfield", "scifact", "cut"):
        rows = [row for row in r["encode"] if row["set"] == name]
        assert [row["batch_size"] for row in rows] == [1, 4]  # 4 ran out of memory: the auto size (32) skipped
        assert rows[0]["lens"]["docs_per_s"] > 0 and rows[0]["bare"]["docs_per_s"] > 0
        assert rows[1]["oom"] and "OutOfMemoryError" in rows[1]["error"]
    assert r["inputs"]["cut"]["max_seq_length"] == 256 and r["inputs"]["cut"]["tokens_max"] <= 256
    assert {k["kernel"] for k in r["kernels"]} == {"flash", "efficient", "math"}
    q = r["queries"]["bfloat16"]
    assert q["one"]["n"] == 3 and q["batch"]["size"] == 2 and q["threads"]["clients"] == 2
    fixed = r["fixed_path"]["bfloat16"]
    assert fixed["eager"]["max_abs_diff"] < 1e-2  # the same vectors, up to bfloat16's rounding in another shape
    assert "no C++ compiler" in fixed["compile"]["error"] and "CUDA" in fixed["cudagraph"]["error"]
    md = out.with_suffix(".md").read_text()
    assert "Smoke run" in md and "out of memory" in md and "| bfloat16 | 48 | compile | failed:" in md


def test_the_commands_the_gpu_session_runs_parse(speed_gpu):
    """The driver's lens commands and the docstring's bf16-vs-float32 command use options that exist."""
    import argparse
    import re
    import subprocess
    from pathlib import Path

    from lens.eval import beir

    parser = beir.add_arguments(argparse.ArgumentParser())
    for dtype in ("float32", "bfloat16"):
        args = parser.parse_args(["scifact", "cranfield", "medline", "--systems", "lens-lexicon", "--device", "cuda",
                                  "--dtype", dtype, "--output-dir", "x", "--no-plot"])
        assert args.device == "cuda" and args.dtype == dtype and args.lens_batch_size is None
    assert "--device cuda --dtype float32" in speed_gpu.__doc__
    script = Path(speed_gpu.__file__).with_name("gpu_session.sh")
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert done.returncode == 2 and "usage" in done.stderr
    assert re.search(r"lens/train/configs/smoke-gpu\.json", script.read_text())
    from lens.train.config import TrainConfig

    smoke = TrainConfig.load(Path(beir.__file__).parents[1] / "train" / "configs" / "smoke-gpu.json")
    assert smoke.bf16 and smoke.gradient_checkpointing and smoke.cache_chunk and smoke.checkpoint_every < \
        smoke.stages[0].steps


def test_the_ood_gpu_session_driver_parses_and_names_configs_that_load():
    """Issue 39's driver: valid bash, a usage error without a mode, and the training configs it runs exist and load
    (the BM25 continuation and its control)."""
    import re
    import subprocess
    from pathlib import Path

    from lens.train.config import TrainConfig

    root = Path(__file__).parents[1]
    script = root / "benchmarks" / "gpu_ood_session.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert done.returncode == 2 and "usage" in done.stderr
    text = script.read_text()
    default_variants = re.search(r'VARIANTS=\$\{VARIANTS:-"([^"]+)"\}', text).group(1).split()
    assert [v.split(":")[0] for v in default_variants] == ["bm25", "control"]
    configs = re.findall(r"lens/train/configs/[\w.-]+\.json", text)
    assert {Path(c).name for c in configs} >= {"default-continue-gpu-bm25.json", "default-continue-gpu.json"}
    control = TrainConfig.load(root / "lens/train/configs/default-continue-gpu.json")
    for c in configs:  # every continuation it runs or names: the control's run, only the labelled loss changed
        variant = TrainConfig.load(root / c)
        assert variant.stages[-1].steps >= 1
        variant.stages[-1].loss, variant.notes = control.stages[-1].loss, control.notes
        assert variant == control, c


def test_a_smoke_run_without_output_leaves_the_committed_results_alone(speed_gpu, tiny_lens_dir, tmp_path,
                                                                        monkeypatch, capsys):
    import _common

    monkeypatch.setattr(_common, "RESULTS", tmp_path / "results")  # stands for benchmarks/results
    monkeypatch.setattr(speed_gpu, "RESULTS", tmp_path / "results")
    assert speed_gpu.main(["--device", "cpu", "--smoke", "--model", str(tiny_lens_dir), "--dtypes", "float32",
                           "--docs", "2", "--queries", "2", "--data-dir", str(tmp_path / "no-data")]) == 0
    assert not (tmp_path / "results").exists()
    assert "the committed results stay as they are" in capsys.readouterr().err
