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
    parts = {r["rule"]: r for r in tr.restoration(["KRAS acts in T cells."], [], tr.table_parts())}
    assert parts["table: whole"]["sentences"] == 1.0  # "T" before "cells" (a pair), "KRAS" kept (an acronym)
    assert parts["table: forms"]["words"] == 3 / 5  # neither: "Kras", "t"
    assert parts["table: forms + acronyms"]["words"] == 4 / 5 and parts["table: forms + pairs"]["words"] == 4 / 5
    # from lower case: the shouted-only rule changes nothing, truecase-uncased restores
    low = {r["rule"]: r for r in tr.restoration(sentences, ["truecase-shouted", "truecase-uncased"], case="lower")}
    assert low["none"]["words"] == low["truecase-shouted"]["words"] == 7 / 10  # all but "The", "NASA", "What"
    assert low["truecase-uncased"] == {"rule": "truecase-uncased", "words": 1.0, "sentences": 1.0}
    with pytest.raises(ValueError, match="case must be"):
        tr.restoration(sentences, [], case="title")


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
                    "--restore", f"{sts}:train,{beir}:queries", "--work-dir", str(tmp_path / "v"),
                    "--output", str(out)]) == 0
    results = json.loads(out.with_suffix(".json").read_text())
    changed = results["rows"][0]["changed"]
    assert changed["lowercase-shouted"] == {"docs": 1, "queries": 0}  # the shouted record only
    assert changed["truecase-uncased"] == {"docs": 2, "queries": 0}  # and the one without a capital
    sts_rows, query_rows = ({r["rule"]: r for r in source["rules"]} for source in results["restore"])
    assert sts_rows["truecase-uncased"]["sentences"] == 1.0 and sts_rows["lowercase-shouted"]["sentences"] == 0.0
    assert [s["sentences"] for s in results["restore"]] == [2, 1]  # both STS sentences; the one query
    assert query_rows["truecase-uncased"]["sentences"] == 1.0 and "table: whole" in query_rows
    assert "table: the set's corpus over the packaged" in query_rows and "table: the set's corpus" not in str(sts_rows)
    md = out.with_suffix(".md").read_text()
    assert "## Texts in capitals brought back" in md and "| table: forms + pairs |" in md
    assert tr.main(["--sets", str(beir), "--variants", "original", "--rules", "truecase-uncased", "--restore",
                    f"{sts}:train", "--work-dir", str(tmp_path / "v"), "--from", "lower", "--output", str(out)]) == 0
    assert "## Texts in lower case brought back" in out.with_suffix(".md").read_text()
    assert json.loads(out.with_suffix(".json").read_text())["from"] == "lower"
