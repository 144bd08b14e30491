"""`lens encode` a chunk at a time (lens.encode_job): the file it writes is the one a whole encode writes, an
interrupted encode resumes where it stopped, and nothing but a whole export ever appears at --output."""

import json
import logging

import numpy as np
import pytest

from lens.cli import main
from lens.corpus import CorpusFile
from lens.encode_job import TextRecord, encode_to_file, partial_path
from lens.encoder import LensEncoder
from lens.export import cluster_labels, write_export

from conftest import assert_close

TEXTS = ["cell gene", "cancer patients", "drug dose response", "", "protein folding in cells", "gene therapy",
         "the weather is mild"]


@pytest.fixture(scope="module")
def encoder(tiny_lens_dir):
    return LensEncoder.from_pretrained(tiny_lens_dir)


@pytest.fixture(scope="module")
def labels(encoder):
    return cluster_labels([encoder.cluster_tokens(c, 8) for c in range(encoder.num_clusters)])


def records(texts=TEXTS):
    return [TextRecord(f"d{i}", t) for i, t in enumerate(texts)]


class Interrupting:
    """The encoder, counting the chunks it encodes and raising ``error`` at chunk ``at`` (1-based)."""

    def __init__(self, encoder, at=None, error=KeyboardInterrupt):
        self.encoder, self.at, self.error, self.calls = encoder, at, error, []

    def fingerprint(self):
        return self.encoder.fingerprint()

    @property
    def quantize(self):
        return self.encoder.quantize

    def encode_documents(self, texts, **kwargs):
        self.calls.append(list(texts))
        if len(self.calls) == self.at:
            raise self.error()
        return self.encoder.encode_documents(texts, **kwargs)

    def encode_queries(self, texts, **kwargs):
        self.calls.append(list(texts))
        return self.encoder.encode_queries(texts, **kwargs)


@pytest.mark.parametrize("fmt", ["npy", "qdrant", "pyserini", "rank-features"])
def test_chunked_encode_writes_what_a_whole_encode_writes(encoder, labels, tmp_path, fmt):
    suffix = ".npy" if fmt == "npy" else ".jsonl"
    whole = tmp_path / f"whole{suffix}"
    x = encoder.encode_documents(TEXTS)
    write_export(whole, fmt, x, [f"d{i}" for i in range(len(TEXTS))], labels, TEXTS)
    out = tmp_path / f"chunked{suffix}"
    counting = Interrupting(encoder)
    done = encode_to_file(counting, records(), out, fmt, labels=labels, chunk_size=3, show_progress_bar=False)
    assert [len(c) for c in counting.calls] == [3, 3, 1]
    assert done.rows == len(TEXTS) and done.dim == encoder.num_clusters
    assert not partial_path(out).exists()
    if fmt == "npy":
        assert done.entries is None
        assert_close(np.load(out), np.load(whole))
        return
    got = [json.loads(line) for line in out.read_text().splitlines()]
    want = [json.loads(line) for line in whole.read_text().splitlines()]
    assert [r["id"] for r in got] == [r["id"] for r in want]
    field = {"qdrant": "indices", "pyserini": "vector", "rank-features": "features"}[fmt]
    for g, w in zip(got, want):  # the chunks pad differently: weights agree to float32 noise
        if fmt == "qdrant":
            assert g["indices"] == w["indices"]
            assert_close(g["values"], w["values"])
        elif fmt == "rank-features":
            assert sorted(g[field]) == sorted(w[field])
            assert_close([g[field][k] for k in sorted(g[field])], [w[field][k] for k in sorted(w[field])])
        else:
            assert g == w
    assert done.entries == sum(len(r[field]) for r in got)
    assert done.empty == sum(not r[field] for r in got) == 1  # the blank text


@pytest.mark.parametrize("fmt", ["npy", "qdrant"])
def test_interrupted_encode_resumes_where_it_stopped(encoder, labels, tmp_path, fmt, caplog):
    out = tmp_path / ("v.npy" if fmt == "npy" else "v.jsonl")
    reference = tmp_path / ("r.npy" if fmt == "npy" else "r.jsonl")
    encode_to_file(encoder, records(), reference, fmt, labels=labels, chunk_size=2, show_progress_bar=False)
    stopping = Interrupting(encoder, at=3)
    with caplog.at_level(logging.WARNING, logger="lens.encode_job"), pytest.raises(KeyboardInterrupt):
        encode_to_file(stopping, records(), out, fmt, labels=labels, chunk_size=2, show_progress_bar=False)
    assert not out.exists()  # only a whole export is ever published
    assert "4 of 7 texts are encoded and kept" in caplog.text and "--resume" in caplog.text
    work = partial_path(out)
    if fmt == "qdrant":  # a chunk cut short while it was written: its bytes are past the recorded size
        with open(work / "part.jsonl", "ab") as f:
            f.write(b'{"id": "d4", "indi')
    resumed = Interrupting(encoder)
    encode_to_file(resumed, records(), out, fmt, labels=labels, chunk_size=2, resume=True, show_progress_bar=False)
    assert resumed.calls == [TEXTS[4:6], TEXTS[6:]]  # the first two chunks were not encoded again
    assert out.read_bytes() == reference.read_bytes()  # the same chunks: the same bytes
    assert not work.exists()


def test_resume_refuses_other_settings_and_a_fresh_run_discards(encoder, labels, tmp_path, caplog):
    out = tmp_path / "v.jsonl"
    with pytest.raises(KeyboardInterrupt):
        encode_to_file(Interrupting(encoder, at=2), records(), out, "qdrant", labels=labels, chunk_size=2,
                       show_progress_bar=False)
    for change in ({"top_m": 3}, {"queries": True, "instruction": "find"}):
        with pytest.raises(ValueError, match="another input, model or options.*without --resume"):
            encode_to_file(encoder, records(), out, "qdrant", labels=labels, chunk_size=2, resume=True,
                           show_progress_bar=False, **change)
    with pytest.raises(ValueError, match="another input"):  # another input
        encode_to_file(encoder, records(TEXTS[::-1]), out, "qdrant", labels=labels, resume=True,
                       show_progress_bar=False)
    fresh = Interrupting(encoder)
    with caplog.at_level(logging.WARNING, logger="lens.encode_job"):
        encode_to_file(fresh, records(), out, "qdrant", labels=labels, chunk_size=4, show_progress_bar=False)
    assert "discarding the unfinished encode" in caplog.text
    assert fresh.calls == [TEXTS[:4], TEXTS[4:]]


def test_a_corpus_file_is_encoded_with_its_ids(encoder, labels, tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"doc-{i}", "title": "T" if i % 2 else "", "text": t}) + "\n"
                              for i, t in enumerate(TEXTS)))
    docs = CorpusFile.scan(corpus)
    out = tmp_path / "c.qdrant.jsonl"
    encode_to_file(encoder, docs, out, "qdrant", labels=labels, chunk_size=3, show_progress_bar=False)
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in got] == [f"doc-{i}" for i in range(len(TEXTS))]
    x = encoder.encode_documents([d.full_text for d in docs])
    assert got[1]["indices"] == np.flatnonzero(x[1] > 0).tolist()  # "T cancer patients": the title is encoded


def test_cli_encode_resume(tiny_lens_dir, tmp_path, encoder):
    (tmp_path / "t.txt").write_text("\n".join(TEXTS) + "\n")
    out = tmp_path / "t.npy"
    argv = ["encode", "--model", str(tiny_lens_dir), "--input", str(tmp_path / "t.txt"), "--output", str(out),
            "--chunk-size", "2"]
    assert main(argv) == 0
    assert_close(np.load(out), encoder.encode_documents(TEXTS))
    assert main(argv + ["--resume"]) == 2  # the output exists: --overwrite is still needed
    assert main(argv + ["--resume", "--overwrite"]) == 0  # nothing to resume: a fresh encode
    assert_close(np.load(out), encoder.encode_documents(TEXTS))
