"""Truncation is reported once per run, with the count: the harness's per-query loop and its chunked document
encoding each log one summary line, while a plain ``encode`` call still warns on its own."""

from __future__ import annotations

import logging

from bench_helpers import write_beir

from lens.encoder import reported_truncations
from lens.eval import beir
from lens.eval.systems import Resources, make_systems

LONG = "cell gene protein " * 30  # 91 tokens with BOS/EOS: past a max_seq_length of 16
DOCS = [{"_id": f"d{i}", "title": "", "text": (LONG if i % 2 else "the cell") + f" drug {i}"} for i in range(9)]
QUERIES = [{"_id": f"q{i}", "text": LONG if i % 3 == 0 else "cell gene"} for i in range(30)]  # 10 of 30 long
QRELS = [(f"q{i}", f"d{i % 9}", 1) for i in range(30)]


def truncation_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "truncated" in r.getMessage()]


def test_a_loop_of_single_encodes_warns_once_with_the_count(tiny_encoder, monkeypatch, caplog):
    monkeypatch.setattr(tiny_encoder, "max_seq_length", 16)
    texts = [LONG if i % 4 == 0 else "cell gene" for i in range(40)]  # 10 of 40 long
    with caplog.at_level(logging.WARNING):
        with reported_truncations("queries", "set x") as tally:
            for text in texts:
                tiny_encoder.encode([text])
        assert (tally.truncated, tally.texts) == (10, 40)
        assert truncation_warnings(caplog) == [
            "set x: 10 of 40 queries were longer than max_seq_length=16 tokens and were truncated (their ends are not "
            "encoded: split long texts into passages, or set encoder.max_seq_length higher)"]
        with reported_truncations("queries"):  # nothing cut: nothing said
            tiny_encoder.encode(["cell gene"])
        assert len(truncation_warnings(caplog)) == 1
        tiny_encoder.encode([LONG, LONG, "cell"])  # a plain call warns as before
    assert truncation_warnings(caplog)[1].startswith("2 of 3 texts were longer than max_seq_length=16 tokens")


def test_the_harness_reports_truncated_queries_and_documents_once(tmp_path, tiny_lens_dir, caplog):
    ds = write_beir(tmp_path / "long", docs=DOCS, queries=QUERIES, qrels=QRELS)
    data = beir.load_dataset(ds)
    resources = Resources(model=str(tiny_lens_dir), cache_root=tmp_path / "cache", lens_max_length=16,
                          show_progress_bar=False, lens_batch_size=4)
    resources.lens.chunk_size = 2  # documents encoded in five chunks: five encode calls
    (system,) = make_systems(["lens-lexicon"], resources, instruction="")
    with caplog.at_level(logging.WARNING):
        out = beir.evaluate_system(system, data, depth=5, show_progress_bar=False)
    assert out["summary"]["queries"] == 30
    assert truncation_warnings(caplog) == [
        "LENS documents: 4 of 9 texts were longer than max_seq_length=16 tokens and were truncated (their ends are "
        "not encoded: split long texts into passages, or set encoder.max_seq_length higher)",
        "long lens-lexicon: 10 of 30 queries were longer than max_seq_length=16 tokens and were truncated (their ends "
        "are not encoded: split long texts into passages, or set encoder.max_seq_length higher)"]
