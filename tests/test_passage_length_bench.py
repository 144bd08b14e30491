"""benchmarks/passage_length.py: its counts against the encoder's own truncation, on the tiny model."""

from __future__ import annotations

import pytest
from bench_helpers import load_script

from lens.corpus import Document, split_passages


@pytest.fixture(scope="module")
def pl():
    return load_script("passage_length")


def test_counts_are_the_encoders_own(pl, tiny_encoder):
    """A document is counted as cut exactly when encoding it reports a truncation; passages likewise."""
    from lens.encoder import count_truncations

    tiny_encoder.max_seq_length = 12
    try:
        docs = [Document(f"d{i}", " ".join(["cell protein gene"] * i), "title") for i in range(1, 7)]
        row = pl.study(tiny_encoder, docs, [4, 7], 2)

        def cut(texts):
            with count_truncations() as seen:
                tiny_encoder.encode_documents(texts, show_progress_bar=False)
            return seen.truncated

        assert row["documents_cut"] == cut([d.full_text for d in docs]) > 0
        assert row["tokens_per_word"] > 0 and row["documents"] == 6
        for words in (4, 7):
            passages = [p for d in docs for p in split_passages(d, words, 2)]
            assert row["passages"][str(words)]["passages"] == len(passages)
            assert row["passages"][str(words)]["cut"] == cut([p.full_text for p in passages])
    finally:
        tiny_encoder.max_seq_length = tiny_encoder.config.max_length
