"""benchmarks/filter_speed.py end to end on a few hundred synthetic documents: its counts and recall are right."""

from __future__ import annotations

import json

import pytest
from bench_helpers import load_script


@pytest.fixture(scope="module")
def filter_speed():
    return load_script("filter_speed")


def test_small_run_writes_sane_rows(filter_speed, tmp_path):
    assert filter_speed.main(["--docs", "400", "--queries", "3", "--table-docs", "500",
                              "--output", str(tmp_path / "fs")]) == 0
    results = json.loads((tmp_path / "fs.json").read_text())
    for kind in filter_speed.KINDS:
        row = results[kind]
        assert row["documents"] == 400 and row["qps_unfiltered"] > 0
        for share in filter_speed.SHARES:
            entry = row[f"{share}%"]
            assert entry["matching"] == 4 * share  # bucket = i % 100: share% of 400
            assert entry["qps"] > 0 and entry["scan_s"] >= 0
            assert 0.0 <= entry["recall@10"] <= 1.0
    (table,) = results["tables"]
    for share in filter_speed.SHARES:  # a scan, then the field's index, then remembered: the same documents
        entry = table[f"{share}%"]
        assert entry["matching"] == 5 * share and min(entry[k] for k in ("scan_s", "indexed_s")) > 0
    assert results["flat"]["recall_unfiltered"] == 1.0  # exact search against the exact reference
    assert all(results["flat"][f"{s}%"]["recall@10"] == 1.0 for s in filter_speed.SHARES)
    md = (tmp_path / "fs.md").read_text()
    assert "| flat | 10% | 40 |" in md and "| 500 | 50% | 250 |" in md and results["_meta"]["command"] in md
