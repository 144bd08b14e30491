"""The pure parts of benchmarks/label_augmentation.py: collecting per-model ATEB results and the goal count."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from bench_helpers import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("label_augmentation")


def _results(root: Path, task: str, kind: str, lexicon: float, minilm: float, random: float) -> None:
    systems = {"minilm": {"accuracy": minilm}, "lens-lexicon": {"accuracy": lexicon},
               "lens-hybrid": {"accuracy": (lexicon + minilm) / 2}}
    (root / task).mkdir(parents=True)
    (root / task / "results.json").write_text(json.dumps({
        "task": task, "rows": 10, "of_rows": 20, "formulations": {
            kind: {"metrics": ["accuracy"], "random": {"accuracy": random}, "systems": systems}}}))


def test_collect_and_goal_lines(bench, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _results(a, "piqa", "multiple-choice", lexicon=0.60, minilm=0.55, random=0.5)
    _results(a, "hh_rlhf_harmless", "preference", lexicon=0.45, minilm=0.40, random=0.5)
    _results(b, "piqa", "multiple-choice", lexicon=0.50, minilm=0.55, random=0.5)
    _results(b, "hh_rlhf_harmless", "preference", lexicon=0.52, minilm=0.40, random=0.5)
    rows = bench.collect({"a": a, "b": b})
    piqa = next(r for r in rows if r["task"] == "piqa")
    assert (piqa["a/lexicon"], piqa["b/lexicon"], piqa["minilm"], piqa["rows"]) == (0.60, 0.50, 0.55, 10)
    assert piqa["a/hybrid"] == pytest.approx(0.575)

    out = tmp_path / "out.md"
    args = argparse.Namespace(steps=3, per_task=4, max_rows=5)
    bench.write_markdown(out, rows, {}, ["a", "b"], "cmd", args)
    text = out.read_text()
    assert "- a: above MiniLM on 2 of 2 (hh_rlhf_harmless, piqa); not above random on hh_rlhf_harmless" in text
    assert "- b: above MiniLM on 1 of 2 (hh_rlhf_harmless); not above random on piqa" in text  # 0.50 is not above 0.5
    assert "| piqa | multiple-choice | accuracy | 10 of 20 | 0.500 | 0.550 | 0.600 | 0.500 |" in text
