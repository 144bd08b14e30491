"""benchmarks/_common.py, the header every benchmark script shares: the data directory rule, the machine, and result
files written through lens.eval.report.write_benchmark in both JSON formats the committed results use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_helpers import BENCHMARKS, load_script


@pytest.fixture(scope="module")
def common():
    return load_script("_common")


def test_data_dir_is_the_flag_then_the_environment_then_beside_the_checkout(common, monkeypatch, tmp_path):
    monkeypatch.delenv("LENS_DATA_DIR", raising=False)
    assert common.data_dir() == BENCHMARKS.parent.parent / "shared" / "data"
    monkeypatch.setenv("LENS_DATA_DIR", str(tmp_path / "env"))
    assert common.data_dir() == tmp_path / "env"
    assert common.data_dir(tmp_path / "flag") == tmp_path / "flag"


def test_machine_facts(common):
    m = common.machine()
    assert m["cores"] >= 1 and m["cpu"] and m["python"].count(".") == 2 and "torch" not in m
    assert {"torch", "torch_threads", "quantized_engine"} <= set(common.machine(torch=True))
    assert ", " in common.machine_description() and "threads" in common.machine_description()


def test_results_keep_their_json_format_and_markdown_bytes(common, tmp_path):
    meta = {"zeta": 1, "alpha": {"é": 2.5}}
    text = common.write_results(tmp_path / "sorted", meta, ["# T", "", "| a |"])
    assert text == "# T\n\n| a |\n" == (tmp_path / "sorted.md").read_text()
    assert (tmp_path / "sorted.json").read_text() == json.dumps(meta, indent=2, sort_keys=True,
                                                                ensure_ascii=False) + "\n"
    common.write_results(tmp_path / "kept.json", meta, "# T\n\n| a |\n", sort_keys=False)  # a string: as it is
    assert (tmp_path / "kept.json").read_text() == json.dumps(meta, indent=2) + "\n"  # insertion order, ASCII
    assert (tmp_path / "kept.md").read_text() == text
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left behind


def test_markdown_only_rerenders_without_measuring(common, tmp_path, capsys):
    import argparse

    def render(results):
        return [f"n = {results['n']}", *results["_meta"]["notes"]]

    out = tmp_path / "r"
    args = common.start(argparse.ArgumentParser(), ["--output", str(out), "--note", "first"], "x", render)
    assert args is not None and args.output == out
    assert common.finish(args, {"n": 3}, render, model="m") == 0
    saved = json.loads(out.with_suffix(".json").read_text())["_meta"]
    assert saved["model"] == "m" and saved["notes"] == ["first"] and saved["command"] and saved["machine"]
    again = common.start(argparse.ArgumentParser(), ["--output", str(out), "--markdown-only", "--note", "later"],
                         "x", render)
    assert again is None and out.with_suffix(".md").read_text() == "n = 3\nfirst\nlater\n"
    assert Path(common.RESULTS) == BENCHMARKS / "results"
