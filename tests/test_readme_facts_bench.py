"""benchmarks/readme_facts.py: the quickstart's scores and sizes as measured, and a failed command said, not timed."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from bench_helpers import load_script


@pytest.fixture(scope="module")
def rf():
    return load_script("readme_facts")


def test_quickstart_scores_are_the_cosines_and_sizes_the_files(rf, tiny_lens_dir, tmp_path):
    from lens import LensEncoder

    row = rf.quickstart(tmp_path, str(tiny_lens_dir))
    enc = LensEncoder.from_pretrained(str(tiny_lens_dir))
    docs = enc.encode_documents(rf.DOCS, normalize=False)
    queries = enc.encode_queries(rf.QUERIES, instruction=rf.INSTRUCTION, normalize=False)
    want = (queries / np.linalg.norm(queries, axis=1, keepdims=True)) @ (docs / np.linalg.norm(docs, axis=1,
                                                                                               keepdims=True)).T
    np.testing.assert_allclose(row["scores"], want, atol=6e-4)
    files = [p for p in (tmp_path / "copy").rglob("*") if p.is_file()]
    assert files and row["saved_bytes"] == sum(p.stat().st_size for p in files)


def test_a_failed_command_is_an_error(rf):
    assert rf.timed([sys.executable, "-c", "pass"])["seconds"] >= 0
    with pytest.raises(RuntimeError, match="failed \\(3\\): boom"):
        rf.timed([sys.executable, "-c", "import sys; sys.stderr.write('boom'); sys.exit(3)"])


def test_the_table_shows_each_figure(rf, tiny_lens_dir, tmp_path):
    row = rf.quickstart(tmp_path, str(tiny_lens_dir))
    timing = {"seconds": 1.5, "load_before": 0.5, "load_after": 0.7}
    results = {"first_use": {"first": timing, "later": timing, "cache_bytes": 2_000_000}, "quickstart": row,
               "pydoc": {**timing, "index_bytes": 3_000_000}, "mpnet_bytes": None, "wheel_bytes": 27_300_000,
               "_meta": {"command": "python benchmarks/readme_facts.py", "machine": "a CPU"}}
    text = "\n".join(rf.render(results))
    assert str(row["scores"]) in text and f"{row['match']['score']}: " in text and "| 2 MB |" in text
    assert "1.5 s (load 0.5 -> 0.7), index 3 MB" in text and "| not installed |" in text and "| 27 MB |" in text
