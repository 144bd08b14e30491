"""benchmarks/doc_length.py: the --lengths parser and the saved results' rendering."""

from __future__ import annotations

import argparse
import json

import pytest
from bench_helpers import load_script


@pytest.fixture(scope="module")
def dl():
    return load_script("doc_length")


def test_length_list(dl):
    assert dl.length_list("512,256, 512") == [512, 256]
    for bad in ("", "8", "256,x"):
        with pytest.raises(argparse.ArgumentTypeError, match="--lengths takes comma-separated integers >= 16"):
            dl.length_list(bad)


def test_markdown_only_renders_every_length_and_keeps_notes(dl, tmp_path):
    out = tmp_path / "dl"
    with pytest.raises(SystemExit, match="run without --markdown-only"):
        dl.main(["--markdown-only", "--output", str(out)])
    row = {"lexicon": 0.5, "lens-dense": 0.25, "hybrid": 0.75, "truncated": 3, "encode_s": None, "docs_per_s": 2.5}
    results = {"toy-heldout": {"source": "made up", "queries": 2, "documents": 9, "minilm": 0.4,
                               "tokens_p50_p90_max": [100.0, 300.0, 700],
                               "lengths": {"256": row, "512": {**row, "lexicon": 0.625, "docs_per_s": None}}},
               "_meta": {"command": "python benchmarks/doc_length.py", "model": "default", "machine": "cpu"}}
    out.with_suffix(".json").write_text(json.dumps(results))
    assert dl.main(["--markdown-only", "--output", str(out), "--note", "read once"]) == 0
    md = out.with_suffix(".md").read_text()
    assert "| 256 | 0.5000 | 0.2500 | 0.7500 | 3 | 2.50 |" in md and "| 512 | 0.6250 |" in md
    assert "MiniLM alone: 0.4000" in md and "- read once" in md and ", float32." in md
