"""The table of benchmarks/speed_encode.py, rendered from a saved result (no timing is run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench_helpers import load_script

ROOT = Path(__file__).resolve().parents[1]


def _result() -> dict:
    systems = {"bare": (3.0, 1.5), "lens_fp32": (2.0, 1.0), "lens_int8": (5.0, 2.4), "minilm": (30.0, 15.0)}
    row = {"batch_size": 4, "systems": {k: {"docs_per_s": w, "docs_per_cpu_s": c} for k, (w, c) in systems.items()},
           "ratio_to_bare_cpu": {"lens_fp32": 0.667, "lens_int8": 1.6}, "fraction_of_peak": {"bare": 0.8},
           "loadavg_after": [1.0, 1.0, 1.0]}
    return {"command": "python benchmarks/speed_encode.py", "date": "2026-01-01",
            "machine": {"cpu": "cpu", "cores": 2, "torch": "2", "torch_threads": 2, "quantized_engine": "x86"},
            "inputs": {"docs": 4, "source": "s", "tokens_mean": 10, "tokens_max": 12, "queries": 2,
                       "query_tokens_mean": 5},
            "model": "m", "num_clusters": 8, "max_seq_length": 16, "cpu_batch_tokens": 32,
            "peak": {"fp32_matmul_gflops": 100.0, "int8_linear_gops": 800.0}, "backbone_gflop_per_doc": 1.0,
            "loadavg_start": [0.0, 0.0, 0.0], "encode": [row],
            "queries": {"int8": {"p50_ms": 50, "p95_ms": 60, "cpu_p50_ms": 50, "cpu_p95_ms": 60}}}


def test_table_has_int8_over_float32_wall_and_cpu():
    md = load_script("speed_encode")._markdown(_result())
    header = next(line for line in md.splitlines() if line.startswith("| batch size"))
    row = next(line for line in md.splitlines() if line.startswith("| 4 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert len(cells) == len(header.strip("|").split("|"))
    assert cells[header.strip("|").split("|").index(" LENS int8 / fp32: wall (CPU) ")] == "2.50 (2.40)"


def test_markdown_only_rewrites_the_table_from_saved_json(tmp_path):
    out = tmp_path / "speed.json"
    out.write_text(json.dumps(_result()))
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "speed_encode.py"), "--markdown-only", "--out", str(out)],
                   check=True, cwd=ROOT)
    assert "| 4 | 3.00 (1.50) | 2.00 (1.00) | 5.00 (2.40) |" in out.with_suffix(".md").read_text()
    missing = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "speed_encode.py"), "--markdown-only",
                              "--out", str(tmp_path / "missing.json")], cwd=ROOT, capture_output=True, text=True)
    assert missing.returncode == 2 and "does not exist: run the benchmark with --out first" in missing.stderr
    dotted = tmp_path / "speed-f0.5"  # a name with a dot in it keeps it: speed-f0.5.json, speed-f0.5.md
    (tmp_path / "speed-f0.5.json").write_text(json.dumps(_result()))
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "speed_encode.py"), "--markdown-only", "--out",
                    str(dotted)], check=True, cwd=ROOT)
    assert "| 4 | 3.00 (1.50) |" in (tmp_path / "speed-f0.5.md").read_text()
