"""Loading BEIR-layout datasets for the benchmark: gz, CRLF, header, splits, missing files, subsampling."""

from __future__ import annotations

import pytest
from bench_helpers import write_beir

from lens.eval.beir import load_dataset, resolve_dataset, subsample


def test_gz_crlf_header_and_split_restriction(tmp_path):
    d = write_beir(tmp_path / "SciFact", gz=True, crlf=True)
    data = load_dataset(d)
    assert data.name == "scifact" and data.split == "test" and data.subsample is None
    assert [doc.id for doc in data.docs] == ["d1", "d2", "d3", "d4", "d5"]
    assert data.docs[0].title == "Statins" and data.docs[2].title == ""
    assert data.queries == {"q1": "do statins lower cholesterol", "q2": "chlorophyll and light", "q3": "zebra xylophone"}
    assert data.qrels == {"q1": {"d1": 1}, "q2": {"d2": 2}, "q3": {"d3": 1}}  # no "\r" left in ids or grades


def test_plain_files_and_lf(tmp_path):
    data = load_dataset(write_beir(tmp_path / "plain", gz=False, crlf=False))
    assert len(data.docs) == 5 and set(data.queries) == {"q1", "q2", "q3"}


@pytest.mark.parametrize("missing, needle", [
    ("corpus.jsonl.gz", "corpus.jsonl.gz"),
    ("queries.jsonl.gz", "queries.jsonl.gz"),
])
def test_missing_file_is_named(tmp_path, missing, needle):
    d = write_beir(tmp_path / "ds")
    (d / missing).unlink()
    with pytest.raises(FileNotFoundError, match=needle) as e:
        load_dataset(d)
    assert str(d) in str(e.value)


def test_missing_split_names_the_file_and_the_splits_present(tmp_path):
    d = write_beir(tmp_path / "ds")
    with pytest.raises(FileNotFoundError) as e:
        load_dataset(d, split="dev")
    msg = str(e.value)
    assert str(d / "qrels" / "dev.tsv") in msg and "splits present: test" in msg


def test_unknown_dataset_name(tmp_path):
    with pytest.raises(FileNotFoundError, match="no-such-dataset") as e:
        resolve_dataset("no-such-dataset")
    assert "lens data variant" not in str(e.value)
    with pytest.raises(FileNotFoundError, match="written first by `lens data variant"):  # a variant's path, not made
        resolve_dataset(tmp_path / "variants" / "title-only" / "adi")


def test_qrels_query_missing_from_queries_is_an_error(tmp_path):
    d = write_beir(tmp_path / "ds", qrels=[("q1", "d1", 1), ("q404", "d2", 1)])
    with pytest.raises(ValueError, match="q404"):
        load_dataset(d)


def test_subsample_keeps_judged_documents_first_and_is_flagged(tmp_path):
    d = write_beir(tmp_path / "ds")
    data = load_dataset(d, max_docs=3, max_queries=2)
    assert list(data.queries) == ["q1", "q2"]
    ids = [doc.id for doc in data.docs]
    assert len(ids) == 3 and {"d1", "d2"} <= set(ids) and ids == sorted(ids)  # judged kept, corpus order
    assert data.subsample["docs"] == 3 and data.subsample["queries"] == 2 and "SUBSAMPLE" in data.subsample["note"]


def test_subsample_without_limits_is_identity(tmp_path):
    data = load_dataset(write_beir(tmp_path / "ds"))
    docs, queries, qrels = subsample(data.docs, data.queries, data.qrels, None, None)
    assert docs == data.docs and queries == data.queries and qrels == data.qrels
