"""`lens index build` / `lens search` / `lens index info`: building, resuming, fingerprints, bad input."""

import json
import logging

import numpy as np
import pytest

from index import HybridIndex
from index.vectors import balanced_weights
from lens.cli import main
from lens.corpus import CorpusFile, load_corpus, pydoc_passages
from lens.encoder import LensEncoder
from lens.hybrid import HybridEncoder
from lens.indexing import build_index
from lens.inputs import encode_texts

from conftest import SHARED, requires_default, requires_shared
from corpus_helpers import write_corpus


class Crash(Exception):
    pass


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.jsonl", 23)


def test_build_and_search_match_the_encoder(tiny_encoder, corpus_file, tmp_path):
    docs = load_corpus(corpus_file)
    index = build_index(docs, tmp_path / "ix", HybridEncoder(tiny_encoder, "lens"), chunk_size=5,
                        show_progress_bar=False)
    assert len(index) == 23 and not (tmp_path / ".ix.partial").exists()
    both = tiny_encoder.encode_documents([d.full_text for d in docs], output="both")
    q = tiny_encoder.encode_queries(["cancer drug"], output="both")
    expected = 0.3 * (both.lexicon @ q.lexicon[0]) + 0.7 * (both.dense @ q.dense[0])
    (hits,) = HybridIndex.load(tmp_path / "ix").search(q.lexicon, q.dense, k=5, weights=(0.3, 0.7), idf=False)
    order = np.argsort(-expected)[:5]
    assert hits.ids == [docs[i].id for i in order]
    np.testing.assert_allclose(hits.scores, expected[order], atol=1e-5)
    assert hits.metadata[0]["title"] == docs[order[0]].title
    # the build's default (DEFAULT_IDF): the query lexicon weighed by the corpus's idf, then normalised
    df = (both.lexicon > 0).sum(axis=0)
    idf = np.log1p((len(docs) - df + 0.5) / (df + 0.5))
    q_idf = q.lexicon[0] * idf / np.linalg.norm(q.lexicon[0] * idf)
    expected = 0.3 * (both.lexicon @ q_idf) + 0.7 * (both.dense @ q.dense[0])
    (hits,) = HybridIndex.load(tmp_path / "ix").search(q.lexicon, q.dense, k=5, weights=(0.3, 0.7))
    np.testing.assert_allclose(hits.scores, expected[np.argsort(-expected)[:5]], atol=1e-5)


def test_default_weights_equal_balanced_on_the_corpus_or_as_given(tiny_encoder, tiny_lens_dir, corpus_file, tmp_path,
                                                                   capsys):
    docs = load_corpus(corpus_file)
    both = tiny_encoder.encode_documents([d.full_text for d in docs], output="both")
    index = build_index(docs, tmp_path / "ix", HybridEncoder(tiny_encoder, "lens"), chunk_size=5,
                        show_progress_bar=False)
    assert index.weights == (0.5, 0.5) and "weights_source" not in (index.info or {})
    balanced = build_index(docs, tmp_path / "bal", HybridEncoder(tiny_encoder, "lens"), chunk_size=5,
                           show_progress_bar=False, weights="balanced")
    want = balanced_weights(both.lexicon, both.dense)
    assert want != pytest.approx((0.5, 0.5), abs=1e-3)  # the check below would not tell the default apart
    assert balanced.weights == pytest.approx(want, abs=1e-6)
    assert HybridIndex.load(tmp_path / "bal").info["weights_source"].startswith("balanced")
    given = build_index(docs, tmp_path / "given", HybridEncoder(tiny_encoder, "lens"), chunk_size=5,
                        show_progress_bar=False, weights=(0.7, 0.3))
    assert given.weights == (0.7, 0.3)
    lexicon_only = build_index(docs, tmp_path / "lex", HybridEncoder(tiny_encoder, "none"), chunk_size=5,
                               show_progress_bar=False, weights="balanced")
    assert lexicon_only.weights == (1.0, 0.0)  # one part: nothing to balance
    assert main(["index", "build", "--corpus", str(corpus_file), "--output", str(tmp_path / "cli"), "--model",
                 str(tiny_lens_dir), "--dense", "lens", "--weights", "0.6,0.4"]) == 0
    assert HybridIndex.load(tmp_path / "cli").weights == (0.6, 0.4)
    capsys.readouterr()
    assert main(["index", "build", "--corpus", str(corpus_file), "--output", str(tmp_path / "bad"), "--model",
                 str(tiny_lens_dir), "--weights", "balance"]) == 2
    assert "two numbers" in capsys.readouterr().err and not (tmp_path / "bad").exists()


def test_interrupted_build_resumes_from_its_last_chunk(tiny_encoder, corpus_file, tmp_path, monkeypatch):
    docs = load_corpus(corpus_file)
    full = build_index(docs, tmp_path / "full", HybridEncoder(tiny_encoder, "none"), chunk_size=4,
                       show_progress_bar=False)
    import lens.indexing as indexing

    real, calls = indexing.encode_chunk, []

    def flaky(*args):
        calls.append(1)
        if len(calls) == 3:
            raise Crash  # as if the process died during the third chunk
        return real(*args)

    monkeypatch.setattr(indexing, "encode_chunk", flaky)
    with pytest.raises(Crash):
        build_index(docs, tmp_path / "ix", HybridEncoder(tiny_encoder, "none"), chunk_size=4, show_progress_bar=False)
    assert sorted(p.name for p in (tmp_path / ".ix.partial").glob("chunk-*")) == ["chunk-000000.npz", "chunk-000001.npz"]
    calls.clear()
    monkeypatch.setattr(indexing, "encode_chunk", lambda *args: calls.append(1) or real(*args))
    resumed = build_index(docs, tmp_path / "ix", HybridEncoder(tiny_encoder, "none"), chunk_size=4, resume=True,
                          show_progress_bar=False)
    assert len(calls) == 4  # 6 chunks, 2 already done
    q = tiny_encoder.encode_queries(["cancer"])
    a, b = full.search(q, k=23)[0], resumed.search(q, k=23)[0]
    assert a.ids == b.ids and np.array_equal(a.scores, b.scores)


def test_resume_refuses_a_different_corpus(tiny_encoder, corpus_file, tmp_path, monkeypatch):
    docs = load_corpus(corpus_file)
    import lens.indexing as indexing

    monkeypatch.setattr(indexing, "encode_chunk", lambda *a: (_ for _ in ()).throw(Crash()))
    with pytest.raises(Crash):
        build_index(docs, tmp_path / "ix", HybridEncoder(tiny_encoder, "none"), chunk_size=4, show_progress_bar=False)
    monkeypatch.undo()
    with pytest.raises(ValueError, match="another corpus"):
        build_index(docs[:-1], tmp_path / "ix", HybridEncoder(tiny_encoder, "none"), chunk_size=4, resume=True,
                    show_progress_bar=False)


class ChunkCounter:
    """Stands in for ``lens.indexing.encode_chunk``: counts the chunks encoded and fails on the ``crash_at``-th, as
    if the process died there."""

    def __init__(self, monkeypatch, crash_at=None):
        import lens.indexing as indexing

        self.real, self.calls, self.crash_at = indexing.encode_chunk, 0, crash_at
        monkeypatch.setattr(indexing, "encode_chunk", self)

    def __call__(self, *args):
        self.calls += 1
        if self.calls == self.crash_at:
            raise Crash
        return self.real(*args)

    def reset(self):
        self.calls, self.crash_at = 0, None


@pytest.mark.parametrize("first,then", [(None, "int8"), ("int8", None)])
def test_resume_with_another_quantize_encodes_every_chunk_again(tiny_lens_dir, tiny_encoder, corpus_file, tmp_path,
                                                                monkeypatch, caplog, first, then):
    """The fingerprint ignores quantisation on purpose, so each chunk records its own: a resume with another
    --quantize re-encodes the chunks already there (one warning) instead of mixing int8 and float32 vectors."""
    docs = load_corpus(corpus_file)
    int8 = LensEncoder.from_pretrained(tiny_lens_dir, quantize="int8")
    lens = {None: tiny_encoder, "int8": int8}
    chunks = ChunkCounter(monkeypatch, crash_at=3)
    with pytest.raises(Crash):
        build_index(docs, tmp_path / "ix", HybridEncoder(lens[first], "lens"), chunk_size=4, show_progress_bar=False)
    chunks.reset()
    with caplog.at_level(logging.WARNING, logger="lens.indexing"):
        resumed = build_index(docs, tmp_path / "ix", HybridEncoder(lens[then], "lens"), chunk_size=4, resume=True,
                              show_progress_bar=False)
    assert chunks.calls == 6  # all 6 chunks, the 2 encoded before the crash too
    (warning,) = [r.getMessage() for r in caplog.records if "never mixes" in r.getMessage()]
    assert f"encoded in {first or 'float32'}" in warning and f"encodes in {then or 'float32'}" in warning
    monkeypatch.undo()
    fresh = build_index(docs, tmp_path / "fresh", HybridEncoder(lens[then], "lens"), chunk_size=4,
                        show_progress_bar=False)
    q = tiny_encoder.encode_queries(["cancer drug"], output="both")
    a, b = fresh.search(q.lexicon, q.dense, k=23)[0], resumed.search(q.lexicon, q.dense, k=23)[0]
    assert a.ids == b.ids and np.array_equal(a.scores, b.scores)
    assert (resumed.info or {}).get("lens_quantize") == then


def test_shard_records_of_another_quantize_are_refused(tmp_path):
    from lens.corpus import Document
    from lens.indexing import EncodedChunks

    docs = [Document(f"d{i}", "", "x") for i in range(4)]
    record = {"fingerprint": {"m": 1}, "lexicon_dim": 4, "dense_dim": None, "quantize": None,
              "chunks": [{"file": "chunk-000000.npz", "sha256": "0", "rows": 2}]}
    records = [{**record, "rank": 0, "first_chunk": 0},
               {**record, "rank": 1, "first_chunk": 1, "quantize": "int8",
                "chunks": [{"file": "chunk-000001.npz", "sha256": "0", "rows": 2}]}]
    with pytest.raises(ValueError, match="worker 1 encoded int8 vectors and worker 0 float32"):
        EncodedChunks(docs, tmp_path, records, 2)
    records[1]["quantize"] = None
    assert EncodedChunks(docs, tmp_path, records, 2).quantize is None


def test_build_warns_once_about_truncation_with_the_total(tiny_encoder, corpus_file, tmp_path, monkeypatch, caplog):
    """One warning for the whole build (chunks encoded before a resume included), not one per chunk."""
    docs = load_corpus(corpus_file)
    monkeypatch.setattr(tiny_encoder, "max_seq_length", 6)
    items = encode_texts(tiny_encoder.tokenizer, [d.full_text for d in docs], 6)
    cut = sum(it.truncated for it in items)
    assert 3 <= cut < len(docs)  # several chunks hold truncated documents
    chunks = ChunkCounter(monkeypatch, crash_at=4)
    with caplog.at_level(logging.WARNING, logger="lens"), pytest.raises(Crash):
        build_index(docs, tmp_path / "ix", HybridEncoder(tiny_encoder, "none"), chunk_size=4, show_progress_bar=False)
    assert not [r for r in caplog.records if "truncated" in r.getMessage()]
    chunks.reset()
    with caplog.at_level(logging.WARNING, logger="lens"):
        build_index(docs, tmp_path / "ix", HybridEncoder(tiny_encoder, "none"), chunk_size=4, resume=True,
                    show_progress_bar=False)
    assert chunks.calls == 3  # chunks 0-2 were kept
    (warning,) = [r for r in caplog.records if "truncated" in r.getMessage()]
    assert warning.name == "lens.indexing"
    assert warning.getMessage().startswith(f"{cut} of {len(docs)} documents were longer than max_seq_length=6 "
                                           "tokens and were truncated")
    assert "split long documents into passages" in warning.getMessage()  # says what to do


def test_cli_build_search_info_and_encoder_mismatch(tiny_lens_dir, corpus_file, tmp_path, capsys, tiny_backbone_dir):
    ix = tmp_path / "ix"
    assert main(["index", "build", "--corpus", str(corpus_file), "--output", str(ix), "--model", str(tiny_lens_dir),
                 "--dense", "lens", "--chunk-size", "7"]) == 0
    assert main(["index", "info", str(ix)]) == 0
    out = capsys.readouterr().out
    assert "23 documents" in out and "hybrid (flat)" in out and "lens_model" in out
    assert main(["search", str(ix), "cancer drug", "-k", "3", "--json", "--weights", "1,0"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    hits = result["hits"]
    assert result["query"] == "cancer drug"
    assert [h["rank"] for h in hits] == [1, 2, 3] and all("title" in h["metadata"] for h in hits)
    assert main(["search", str(ix), "cancer drug", "brain", "-k", "2"]) == 0
    out = capsys.readouterr().out
    assert "cancer drug" in out and "brain" in out and out.count("\n  1. ") == 2 and "  3. " not in out
    assert main(["search", str(ix), "cancer drug", "brain", "--top-k", "2"]) == 0  # -k's long name
    assert capsys.readouterr().out == out

    # another clustering of the same backbone: the index must refuse it
    other = tmp_path / "other-k8"
    assert main(["cluster-vocab", "--model", str(tiny_backbone_dir), "--clusters", "16", "--seed", "5",
                 "--out", str(other)]) == 0
    assert main(["search", str(ix), "cancer", "--model", str(other)]) == 2
    assert "lens_clusters" in capsys.readouterr().err


def _tree_bytes(directory):
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_cli_build_refuses_an_existing_index_unless_overwrite_or_resume(tiny_lens_dir, corpus_file, tmp_path, capsys,
                                                                      monkeypatch):
    ix, other = tmp_path / "ix", write_corpus(tmp_path / "other.jsonl", 9, "o", 3)
    build = ["-q", "index", "build", "--output", str(ix), "--model", str(tiny_lens_dir), "--dense", "none",
             "--chunk-size", "4"]
    assert main(build + ["--corpus", str(corpus_file)]) == 0
    before = _tree_bytes(ix)
    capsys.readouterr()
    for extra in ([], ["--resume"]):  # no unfinished build to resume either
        assert main(build + ["--corpus", str(other)] + extra) == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith(f"lens index build: error: {ix} already holds a LENS index (23 documents)")
        assert "--overwrite" in line and "--output" in line and ("--resume" in line) != bool(extra)
    assert _tree_bytes(ix) == before and not (tmp_path / ".ix.partial").exists()

    chunks = ChunkCounter(monkeypatch, crash_at=2)  # an interrupted --overwrite build continues with --resume alone
    with pytest.raises(Crash):
        main(build + ["--corpus", str(other), "--overwrite"])
    assert _tree_bytes(ix) == before  # the old index stays whole until the new one is saved
    chunks.reset()
    assert main(build + ["--corpus", str(other), "--resume"]) == 0 and chunks.calls == 2
    rebuilt = HybridIndex.load(ix)
    assert len(rebuilt) == 9 and "o8" in rebuilt and "d0" not in rebuilt
    assert main(build + ["--corpus", str(corpus_file), "--overwrite"]) == 0
    assert len(HybridIndex.load(ix)) == 23 and not (tmp_path / ".ix.partial").exists()


@pytest.mark.parametrize("argv,match", [
    (["search", "{ix}", "cell", "   "], "query is empty"),
    (["search", "{ix}", "cell", "--weights", "1"], "two or three numbers LEX,DENSE[,BM25]"),
    (["search", "{ix}", "cell", "--weights", "1,2,3,4"], "two or three numbers LEX,DENSE[,BM25]"),
    (["search", "{ix}", "cell", "--weights", "a,b"], "two or three numbers LEX,DENSE[,BM25]"),
    (["search", "{tmp}/nothing", "cell"], "not found"),
    (["search", "{ix}", "--queries-file", "{tmp}/nosuch.tsv"], "--queries-file {tmp}/nosuch.tsv not found: give a "
     "BEIR directory, a queries.jsonl[.gz], a .tsv of id<TAB>text lines, or a .txt of one query a line"),
])
def test_cli_bad_search_input(tiny_lens_dir, corpus_file, tmp_path, capsys, argv, match):
    ix = tmp_path / "ix"
    assert main(["index", "build", "--corpus", str(corpus_file), "--output", str(ix), "--model", str(tiny_lens_dir),
                 "--dense", "none"]) == 0
    capsys.readouterr()
    assert main([a.format(ix=ix, tmp=tmp_path) for a in argv]) == 2
    assert match.format(tmp=tmp_path) in capsys.readouterr().err


@pytest.mark.parametrize("line,match", [
    ('{"text": "no id"}', ":2: record has no id"),
    ('{"_id": "x"}', ":2: record 'x' has no 'text'"),
    ("not json", ":2: not valid JSON"),
    ('{"_id": "b", "text": "a\tb"}', r":2: not valid JSON \(Invalid control character at: line 2 column 24\)$"),
])
@pytest.mark.parametrize("read", [load_corpus, CorpusFile.scan], ids=["in-memory", "where-it-lies"])
def test_corpus_line_errors_name_the_line(tmp_path, line, match, read):
    path = tmp_path / "c.jsonl"
    path.write_text('{"_id": "a", "text": "fine"}\n' + line + "\n")
    with pytest.raises(ValueError, match=match):
        read(path)


@pytest.mark.parametrize("read", [load_corpus, CorpusFile.scan], ids=["in-memory", "where-it-lies"])
def test_duplicate_document_id(tmp_path, read):
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "a", "text": "x"}\n{"id": "b", "text": "x"}\n{"id": "a", "text": "y"}\n')
    with pytest.raises(ValueError, match="'a' appears twice"):
        read(path)


def test_pydoc_corpus_is_always_there():
    docs = pydoc_passages()
    assert len(docs) > 300 and len({d.id for d in docs}) == len(docs)
    assert all(d.text for d in docs) and docs[0].title


def test_fingerprint_names_the_dense_model(tiny_encoder):
    fp = HybridEncoder(tiny_encoder, "none").fingerprint()
    assert fp["dense_model"] == "none" and len(fp["lens_clusters"]) == 64
    with pytest.raises(ValueError, match="unknown dense kind 'bm25'; valid: minilm, mpnet, lens, none"):
        HybridEncoder(tiny_encoder, "bm25")


@pytest.mark.real_data
@pytest.mark.real_model
@requires_shared
@requires_default
def test_adi_build_and_search(tmp_path, capsys):
    """The real thing: ADI (82 docs) with the default LENS model and packaged MiniLM, through the CLI."""
    ix = tmp_path / "adi"
    assert main(["index", "build", "--corpus", str(SHARED / "classic" / "adi"), "--output", str(ix)]) == 0
    assert "indexed 82 documents" in capsys.readouterr().out
    assert main(["search", str(ix), "computer based information retrieval systems", "-k", "5", "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    hits = result["hits"]
    assert len(hits) == 5 and all(-1.0 <= h["score"] <= 1.0 for h in hits)
    index = HybridIndex.load(ix)
    assert len(index) == 82 and index.mode == "hybrid" and index.dense_dim == 384


def test_cli_search_filters_on_corpus_fields(tiny_lens_dir, tmp_path, capsys, caplog):
    corpus = tmp_path / "c.jsonl"
    words = "cell gene protein cancer patients drug dose mouse brain blood".split()
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": f"{words[i % 10]} {words[(i * 3) % 10]}",
                                          "source": ["wiki", "news", "forum"][i % 3], "year": 2020 + i % 4,
                                          "score": 100 + i, "metadata": {"author": f"A. {i % 5}"}}) + "\n"
                              for i in range(30)))  # "metadata": nested, as BEIR corpora keep their extra fields
    ix = tmp_path / "ix"
    assert main(["-q", "index", "build", "--corpus", str(corpus), "--output", str(ix), "--model", str(tiny_lens_dir),
                 "--dense", "none"]) == 0
    capsys.readouterr()
    assert main(["search", str(ix), "cancer drug", "-k", "30", "--json"]) == 0
    (everything,) = json.loads(capsys.readouterr().out)
    hits = everything["hits"]  # a metadata field named "score" stays in the metadata; the hit's score is the search's
    assert all(h["score"] <= 1.0 and h["metadata"]["score"] == 100 + int(h["id"][1:]) for h in hits)
    argv = ["search", str(ix), "cancer drug", "-k", "4", "--json", "--filter", "source=news", "--filter",
            "year=2021", "--filter", "year=2023"]
    assert main(argv) == 0
    (result,) = json.loads(capsys.readouterr().out)
    want = [h["id"] for h in everything["hits"]
            if h["metadata"]["source"] == "news" and h["metadata"]["year"] in (2021, 2023)][:4]
    assert [h["id"] for h in result["hits"]] == want and len(want) == 4
    assert main(["search", str(ix), "cancer", "--filter", 'year="2021"']) == 0  # a JSON string: no number matches
    assert "no results" in capsys.readouterr().out
    assert main(["search", str(ix), "cancer", "--filter", "source"]) == 2
    assert "FIELD=VALUE" in capsys.readouterr().err
    assert main(["search", str(ix), "cancer drug", "-k", "30", "--json", "--filter", "metadata.author=A. 2"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert sorted(h["id"] for h in result["hits"]) == ["d12", "d17", "d2", "d22", "d27", "d7"]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert main(["search", str(ix), "cancer", "--filter", "author=A. 2"]) == 0  # the field is metadata.author
    assert "no results" in capsys.readouterr().out
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]  # one line, saying why
    assert warning.startswith("no document matches the filter {'author': ['A. 2']}: returning no hits; no document has "
                              "the metadata field 'author'; fields they have: metadata.author, score, snippet, source, "
                              "title, year")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert main(["index", "remove", str(ix), "--dry-run", "--filter", "author=A. 2"]) == 0
        assert main(["index", "remove", str(ix), "--filter", "author=A. 2"]) == 0
    assert [r.getMessage().count("no document has the metadata field 'author'") for r in caplog.records
            if r.levelno == logging.WARNING] == [1, 1]
    assert main(["index", "remove", str(ix), "--filter", "metadata.author=A. 2"]) == 0
    assert "removed 6 documents" in capsys.readouterr().out


# ------------------------------------------------------------------ chunk and batch sizes by device (issue 42)
def test_build_sizes_default_by_device_and_keep_what_is_given():
    from lens.indexing import build_sizes

    assert build_sizes(None, None, on_cuda=False) == (64, 16)  # the CPU defaults, unchanged
    assert build_sizes(None, None, on_cuda=True) == (1024, None)  # None: encode sizes its batches to the GPU
    assert build_sizes(8, 4, on_cuda=True) == (8, 4)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="positive integer or None"):
            build_sizes(bad, None, on_cuda=False)


def test_a_build_knows_when_it_encodes_on_cuda(tiny_encoder):
    from types import SimpleNamespace

    import torch

    from lens.indexing import _encodes_on_cuda
    from lens.sharding import EncoderSpec

    assert _encodes_on_cuda(HybridEncoder(tiny_encoder, "lens"), None) is False
    assert _encodes_on_cuda(tiny_encoder, ["cuda:0", "cuda:1"]) is True
    assert _encodes_on_cuda(tiny_encoder, ["cpu"]) is False
    on_gpu = SimpleNamespace(lens=SimpleNamespace(device=torch.device("cuda", 0)))  # a hybrid encoder on a GPU
    assert _encodes_on_cuda(on_gpu, None) is True
    assert _encodes_on_cuda(EncoderSpec.of(HybridEncoder(tiny_encoder, "lens")), None) is False


def test_a_cuda_build_hands_the_batch_size_to_encode(tiny_encoder, corpus_file, tmp_path, monkeypatch):
    """On CUDA (faked here) the build encodes in 1024-document chunks and leaves the batch size to `encode`; the
    dense model, which needs a number, gets DENSE_BATCH_SIZE."""
    import lens.indexing as indexing
    from lens.hybrid import DENSE_BATCH_SIZE

    seen = []
    real = LensEncoder.encode

    def spy(self, texts, batch_size=None, **kw):
        seen.append((len(texts), batch_size))
        return real(self, texts, batch_size=batch_size, **kw)

    class Dense:
        def encode(self, texts, batch_size, show_progress_bar):
            seen.append(("dense", batch_size))
            return np.ones((len(texts), 3), dtype=np.float32)

    hybrid = HybridEncoder(tiny_encoder, "lens")
    monkeypatch.setattr(indexing, "_encodes_on_cuda", lambda encoder, devices: True)
    monkeypatch.setattr(LensEncoder, "encode", spy)
    docs = load_corpus(corpus_file)
    index = build_index(docs, tmp_path / "ix", hybrid, show_progress_bar=False)
    assert len(index) == 23 and seen == [(23, None)]  # one chunk of up to 1024 documents, batch left to encode
    hybrid.dense_kind, hybrid.dense = "minilm", Dense()
    seen.clear()
    hybrid.encode_documents(["cell protein"], batch_size=None)
    assert seen == [(1, None), ("dense", DENSE_BATCH_SIZE)]


def test_documents_without_text_are_named_in_a_warning(caplog):
    import logging

    from lens.corpus import Document
    from lens.indexing import check_documents

    docs = [Document("a", "cell gene"), Document("b", "  ", title=""), Document("c", "", title="A title")]
    with caplog.at_level(logging.WARNING):
        check_documents(docs)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith("1 of 3 documents have no text (title and text blank): 'b';")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        check_documents(docs[:1] + docs[2:])
    assert not caplog.records


def test_hybrid_encoder_shapes_follow_lens_encoder(tiny_encoder):
    """One string gives vectors, a list (N, dim) matrices, an empty list zero rows, on both sides."""
    enc = HybridEncoder(tiny_encoder, "lens")
    lex, dense = enc.encode_documents("a study of cells")
    lex2, dense2 = enc.encode_documents(["a study of cells", "mouse brain"])
    assert lex.shape == (16,) and dense.shape == (enc.dense_dim,)
    assert lex2.shape == (2, 16)  # float32 in a batch of 2 may differ from alone in the last bit (encoding.md)
    np.testing.assert_allclose(lex, lex2[0], atol=1e-6)
    np.testing.assert_allclose(dense, dense2[0], atol=1e-6)
    q, qd = enc.encode_queries("cells", instruction="Find it")
    assert q.shape == (16,) and np.array_equal(q, tiny_encoder.encode_queries("cells", instruction="Find it"))
    for side in (enc.encode_documents, enc.encode_queries):
        empty_lex, empty_dense = side([])
        assert empty_lex.shape == (0, 16) and empty_dense.shape == (0, enc.dense_dim)
