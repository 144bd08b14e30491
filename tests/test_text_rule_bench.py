"""benchmarks/text_rule.py: the texts each rule changes, and how well each rule restores texts in capitals."""

from __future__ import annotations

import gzip
import json

import pytest
from bench_helpers import load_script


@pytest.fixture(scope="module")
def tr():
    return load_script("text_rule")


def test_restoration_counts_words_and_sentences(tr):
    sentences = ["The mission was run by NASA.", "What causes heart failure?"]
    rows = {r["rule"]: r for r in tr.restoration(sentences, ["lowercase-shouted", "truecase-shouted"])}
    assert rows["none"] == {"rule": "none", "words": 1 / 10, "sentences": 0.0}  # only "NASA" is right in capitals
    assert rows["lowercase-shouted"]["words"] == 7 / 10 and rows["lowercase-shouted"]["sentences"] == 0.0
    assert rows["truecase-shouted"] == {"rule": "truecase-shouted", "words": 1.0, "sentences": 1.0}


def test_the_script_writes_both_tables(tr, tmp_path):
    data = tmp_path / "data"
    beir = data / "tiny"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in [
        {"_id": "d1", "title": "", "text": "heart failure in adults"},
        {"_id": "d2", "title": "WING LIFT", "text": "LIFT OF A WING AT HIGH SPEED"}]) + "\n")
    (beir / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "What causes heart failure?"}) + "\n")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    sts = data / "sts.tsv.gz"
    with gzip.open(sts, "wt") as f:
        f.write("sentence1\tsentence2\tscore\tsplit\nA man met NASA staff.\tA man is here.\t3.0\ttrain\n")
    out = tmp_path / "out"
    assert tr.main(["--sets", str(beir), "--variants", "original", "--rules", "lowercase-shouted,truecase-uncased",
                    "--restore", f"{sts}:train", "--work-dir", str(tmp_path / "v"), "--output", str(out)]) == 0
    results = json.loads(out.with_suffix(".json").read_text())
    changed = results["rows"][0]["changed"]
    assert changed["lowercase-shouted"] == {"docs": 1, "queries": 0}  # the shouted record only
    assert changed["truecase-uncased"] == {"docs": 2, "queries": 0}  # and the one without a capital
    restore = {r["rule"]: r for r in results["restore"]["rules"]}
    assert restore["truecase-uncased"]["sentences"] == 1.0 and restore["lowercase-shouted"]["sentences"] == 0.0
    assert "## Texts in capitals brought back" in out.with_suffix(".md").read_text()
