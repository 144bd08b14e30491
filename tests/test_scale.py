"""Scale: encoding in several processes, shard indexes, on-disk IVF lists, merging saved indexes, top-m pruning."""

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np
import pytest

import lens.indexing as indexing
from index import HybridIndex, load_index
from index.ondisk import is_mapped
from index.shards import ShardedIndex, ShardWriter, merge_indexes
from index.vectors import balanced_weights, l2_normalize, mean_weights, prune_top_m
from lens.atomic import atomic_dir
from lens.cli import main
from lens.corpus import Document, load_corpus
from lens.hybrid import HybridEncoder
from lens.indexing import build_index, check_build_options, encode_shard
from lens.sharding import EncoderSpec

from corpus_helpers import WORDS, write_corpus

ROOT = Path(__file__).resolve().parents[1]


class Crash(Exception):
    pass


class FakeEncoder:
    """Vectors drawn from each text's hash: a stand-in for a model, to build larger indexes in a blink."""

    lexicon_dim, dense_dim = 48, 8

    def fingerprint(self):
        return {"fake": 1}

    def encode_documents(self, texts, batch_size=16):
        rngs = [np.random.default_rng(int(hashlib.sha256(t.encode()).hexdigest()[:12], 16)) for t in texts]
        centres = np.random.default_rng(7).standard_normal((12, self.lexicon_dim + self.dense_dim))
        x = np.stack([centres[r.integers(12)] + 0.3 * r.standard_normal(centres.shape[1]) for r in rngs])
        return np.abs(x[:, : self.lexicon_dim]).astype(np.float32), x[:, self.lexicon_dim :].astype(np.float32)


@dataclass(frozen=True)
class FakeSpec(EncoderSpec):
    """What worker processes load: the FakeEncoder (no model, no torch), so they start in a moment."""

    def load(self, device=None):
        return FakeEncoder()


def fake_docs(n):
    return [Document(f"d{i}", f"text number {i}", title=f"t{i % 5}") for i in range(n)]


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.jsonl", 23, lengths=(3, 9))


def stored(index):
    """(doc ids, stored vectors) of a flat HybridIndex, in the order they were added."""
    inner = faiss.downcast_index(index.faiss_index.index)
    n = inner.ntotal
    vectors = faiss.rev_swig_ptr(inner.get_xb(), n * inner.d).reshape(n, inner.d).copy()
    int_ids = faiss.vector_to_array(index.faiss_index.id_map)
    table = index._docs.fetch(int_ids)
    return [table[int(i)][0] for i in int_ids], vectors


def assert_same_stored(a, b, ids=None):
    """Two flat indexes store the same documents in the same order (``ids``, when given) with the same vectors."""
    ids_a, va = stored(a)
    ids_b, vb = stored(b)
    assert ids_a == ids_b and (ids is None or ids_a == list(ids))
    np.testing.assert_allclose(va, vb, atol=1e-6, rtol=0)


def assert_same_hits(got, want, atol=1e-6):
    """Same scores in the same order, and the same documents, in either order only where their scores tie."""
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.scores, b.scores, atol=atol, rtol=0)
        where = {i: (s, m) for i, s, m in zip(b.ids, b.scores, b.metadata)}
        for i, (x, y, s, m) in enumerate(zip(a.ids, b.ids, a.scores, a.metadata)):
            if x != y:  # an exact tie (it happens with float32 scores) may be ordered either way
                assert x in where and abs(where[x][0] - s) <= atol, (i, x, y)
            assert m == where[x][1]


def random_parts(n, seed=0, lex=32, dense=8):
    rng = np.random.default_rng(seed)
    return np.abs(rng.standard_normal((n, lex))).astype(np.float32), rng.standard_normal((n, dense)).astype(np.float32)


# ---------------------------------------------------------------------------------------------- sharded encoding
def test_worker_processes_build_what_one_process_builds(tmp_path):
    docs, spec = fake_docs(50), FakeSpec("fake", "none")  # 9 chunks of 6: shards of 3 chunks each
    one = build_index(docs, tmp_path / "one", spec, chunk_size=6, show_progress_bar=False)
    three = build_index(docs, tmp_path / "three", spec, chunk_size=6, workers=3, show_progress_bar=False)
    assert_same_stored(one, three, [d.id for d in docs])
    assert not (tmp_path / ".three.partial").exists()


@pytest.mark.parametrize("options", [{}, {"workers": 3}, {"shards": 2}], ids=["one-process", "3-workers", "2-shards"])
def test_a_corpus_read_where_it_lies_builds_what_the_loaded_one_builds(tmp_path, options):
    """lens index build reads a .jsonl, plain or gzipped, a chunk at a time (lens.corpus.CorpusFile; worker
    processes get views of the file, not its texts): the same index, documents, vectors and metadata as from
    load_corpus's list."""
    from lens.corpus import CorpusFile

    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"_id": d.id, "title": d.title, "text": d.text, "n": i}) + "\n"
                            for i, d in enumerate(fake_docs(50))))
    import gzip

    packed = tmp_path / "c.jsonl.gz"  # gzipped: read where it lies too, each worker decompressing its share
    packed.write_bytes(gzip.compress(path.read_bytes()))
    spec = FakeSpec("fake", "none")
    loaded = build_index(load_corpus(path), tmp_path / "loaded", spec, chunk_size=6, show_progress_bar=False, **options)
    lazy = build_index(CorpusFile.scan(path), tmp_path / "lazy", spec, chunk_size=6, show_progress_bar=False, **options)
    gz = build_index(CorpusFile.scan(packed), tmp_path / "gz", spec, chunk_size=6, show_progress_bar=False, **options)
    if "shards" in options:
        loaded, lazy, gz = loaded.shards, lazy.shards, gz.shards
    else:
        loaded, lazy, gz = [loaded], [lazy], [gz]
    for a, b, c in zip(loaded, lazy, gz):
        assert_same_stored(a, b)
        assert_same_stored(a, c)
        ids, _ = stored(a)
        assert [a.metadata(i) for i in ids] == [b.metadata(i) for i in ids] == [c.metadata(i) for i in ids]
        assert a.metadata(ids[0])["n"] >= 0


@pytest.mark.slow  # each worker process imports torch and loads the model: ~10-35 s on a busy 2-core machine
def test_two_worker_processes_encode_what_one_does(tiny_lens_dir, corpus_file, tmp_path):
    docs = load_corpus(corpus_file)
    spec = EncoderSpec(str(tiny_lens_dir), "lens")
    one = build_index(docs, tmp_path / "one", spec, chunk_size=5, show_progress_bar=False)
    two = build_index(docs, tmp_path / "two", spec, chunk_size=5, workers=2, show_progress_bar=False)
    assert_same_stored(one, two, [d.id for d in docs])
    assert one.fingerprint == two.fingerprint and two.fingerprint["lens_clusters"]
    assert not (tmp_path / ".two.partial").exists()


def test_resume_continues_a_half_done_sharded_build(tmp_path, monkeypatch):
    docs, enc = fake_docs(60), FakeEncoder()  # 9 chunks of 7
    fresh = build_index(docs, tmp_path / "fresh", enc, chunk_size=7, shards=3, show_progress_bar=False)
    real, calls = indexing.encode_chunk, []

    def flaky(*args):
        calls.append(1)
        if len(calls) == 4:
            raise Crash  # the process dies while encoding chunk 3
        return real(*args)

    monkeypatch.setattr(indexing, "encode_chunk", flaky)
    with pytest.raises(Crash):
        build_index(docs, tmp_path / "ix", enc, chunk_size=7, shards=3, show_progress_bar=False)
    work = tmp_path / ".ix.partial"
    assert sorted(p.name for p in work.glob("chunk-*")) == [f"chunk-{i:06d}.npz" for i in range(3)]
    # meanwhile the second of two ranks encoded its shard (chunks 5..8) and recorded it
    monkeypatch.setattr(indexing, "encode_chunk", real)
    rest = docs[35:]
    record = encode_shard(enc, [d.id for d in rest], [d.full_text for d in rest], work, first_chunk=5, chunk_size=7,
                          batch_size=16, rank=1, world=2, show_progress_bar=False)
    assert [c["file"] for c in record["chunks"]] == [f"chunk-{i:06d}.npz" for i in range(5, 9)]
    assert json.loads((work / "encode-00001-of-00002.json").read_text())["first_chunk"] == 5
    calls.clear()
    monkeypatch.setattr(indexing, "encode_chunk", lambda *args: calls.append(1) or real(*args))
    resumed = build_index(docs, tmp_path / "ix", enc, chunk_size=7, shards=3, resume=True, show_progress_bar=False)
    assert len(calls) == 2  # chunks 3 and 4 only
    assert isinstance(resumed, ShardedIndex) and len(resumed.shards) == 3 and not work.exists()
    q_lex, q_dense = random_parts(5, seed=3, lex=48)
    assert_same_hits(resumed.search(q_lex, q_dense, k=60), fresh.search(q_lex, q_dense, k=60))


def test_a_chunk_changed_after_it_was_recorded_is_refused(tmp_path, monkeypatch):
    docs, enc = fake_docs(20), FakeEncoder()
    real = indexing._assemble

    def tamper(docs, output, work, records, *args, **kwargs):
        (work / "chunk-000001.npz").write_bytes(b"not the recorded bytes")
        return real(docs, output, work, records, *args, **kwargs)

    monkeypatch.setattr(indexing, "_assemble", tamper)
    with pytest.raises(ValueError, match="chunk-000001.npz is missing or changed since it was encoded"):
        build_index(docs, tmp_path / "ix", enc, chunk_size=8, show_progress_bar=False)


# ---------------------------------------------------------------------------------------------- shard indexes
def test_sharded_index_searches_like_one_flat_index(tmp_path):
    n = 500
    lex, dense = random_parts(n)
    ids, meta = [f"d{i}" for i in range(n)], [{"n": i} for i in range(n)]
    flat = HybridIndex(32, 8)
    flat.add(ids, lex, dense, metadata=meta)
    with atomic_dir(tmp_path / "sharded", what="index") as tmp:
        writer = ShardWriter(tmp)
        for part in np.array_split(np.arange(n), 3):
            shard = HybridIndex(32, 8)
            shard.add([ids[i] for i in part], lex[part], dense[part], metadata=[meta[i] for i in part])
            writer.add(shard)
        writer.finish({"note": "three"})
    sharded = load_index(tmp_path / "sharded")
    assert isinstance(sharded, ShardedIndex) and len(sharded) == n and len(sharded.shards) == 3
    assert sharded.info == {"note": "three"} and "d499" in sharded and sharded.metadata("d250") == {"n": 250}
    q_lex, q_dense = random_parts(7, seed=1)
    for weights in [(0.5, 0.5), (1.0, 0.0), (0.2, 0.8)]:
        for k in (1, 10, 600):
            assert_same_hits(sharded.search(q_lex, q_dense, k=k, weights=weights),
                             flat.search(q_lex, q_dense, k=k, weights=weights))
    sharded.remove(["d3", "d400"])
    flat.remove(["d3", "d400"])
    sharded.save(tmp_path / "again")
    assert_same_hits(load_index(tmp_path / "again").search(q_lex, q_dense, k=20), flat.search(q_lex, q_dense, k=20))
    with pytest.raises(KeyError, match="'nope' is not in the index"):
        sharded.remove(["d5", "nope"])
    assert "d5" in sharded
    damaged = tmp_path / "again" / "shard-00002" / "index.faiss"
    data = damaged.read_bytes()
    damaged.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    with pytest.raises(ValueError, match="shard-00002/index.faiss is damaged"):
        load_index(tmp_path / "again")
    # each class loads its own layout and names the loader of both for the other
    assert isinstance(ShardedIndex.load(tmp_path / "sharded"), ShardedIndex)
    with pytest.raises(ValueError, match=r"sharded index \(3 shards\).*index.load_index"):
        HybridIndex.load(tmp_path / "sharded")
    flat.save(tmp_path / "one")
    assert isinstance(load_index(tmp_path / "one"), HybridIndex)
    with pytest.raises(ValueError, match="holds one index, not shards"):
        ShardedIndex.load(tmp_path / "one")


def test_cli_sharded_build_with_top_m(tiny_lens_dir, tiny_encoder, corpus_file, tmp_path, capsys):
    ix = tmp_path / "ix"
    assert main(["index", "build", "--corpus", str(corpus_file), "--output", str(ix), "--model", str(tiny_lens_dir),
                 "--dense", "lens", "--chunk-size", "4", "--shards", "3", "--top-m", "4", "--weights", "balanced",
                 "--no-bm25"]) == 0  # the vectors' search, checked below against a reference
    assert "23 documents" in capsys.readouterr().out
    assert main(["index", "info", str(ix)]) == 0
    out = capsys.readouterr().out
    assert "shards: 3 searched together (shard-00000: 8, shard-00001: 8, shard-00002: 7)" in out
    assert "top-m: each document keeps its 4 heaviest lexicon weights" in out
    index = load_index(ix)
    assert index.top_m == 4 and all(s.top_m == 4 for s in index.shards)
    for shard in index.shards:
        assert ((stored(shard)[1][:, :16] != 0).sum(axis=1) <= 4).all()
    # documents were pruned before normalising; the query was not pruned
    docs = load_corpus(corpus_file)
    both = tiny_encoder.encode_documents([d.full_text for d in docs], output="both")
    q = tiny_encoder.encode_queries(["cancer drug"], output="both")
    pruned = l2_normalize(prune_top_m(both.lexicon, 4))
    # balanced weights come from the corpus the index holds (pruned lexicon, as stored), one pair for all shards
    w = balanced_weights(pruned, both.dense)
    assert all(s.weights == pytest.approx(w, abs=1e-6) for s in index.shards)
    assert index.weights == pytest.approx(w, abs=1e-6)
    # the build's default idf: the query lexicon times each cluster's idf over every shard's pruned documents
    assert index.idf
    df = (pruned > 0).sum(axis=0)
    q_idf = l2_normalize(q.lexicon * np.log1p((len(docs) - df + 0.5) / (df + 0.5)))
    expected = w[0] * (pruned @ q_idf[0]) + w[1] * (both.dense @ q.dense[0])
    assert main(["search", str(ix), "cancer drug", "-k", "5", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)[0]["hits"]
    order = np.argsort(-expected)[:5]
    assert [h["id"] for h in hits] == [docs[i].id for i in order]
    np.testing.assert_allclose([h["score"] for h in hits], expected[order], atol=1e-5)
    (pruned_q,) = index.search(q.lexicon, q.dense, k=5, query_top_m=2, idf=False)
    q_lex = prune_top_m(q.lexicon, 2)
    assert (q_lex != 0).sum() == 2
    again = 0.5 * (l2_normalize(prune_top_m(both.lexicon, 4)) @ l2_normalize(q_lex)[0]) + 0.5 * (both.dense @ q.dense[0])
    assert pruned_q.ids == [docs[i].id for i in np.argsort(-again)[:5]]


# ---------------------------------------------------------------------------------------------- on-disk IVF
def clustered(n, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((30, 40))
    x = centres[rng.integers(30, size=n)] + 0.35 * rng.standard_normal((n, 40))
    return np.abs(x[:, :32]).astype(np.float32), x[:, 32:].astype(np.float32)


def test_ivf_ondisk_round_trip_and_recall(tmp_path):
    n = 4000
    lex, dense = clustered(n)
    ids = [f"d{i}" for i in range(n)]
    ix = HybridIndex(32, 8, "ivf-ondisk", nlist=32, nprobe=4)
    ix.add(ids[:2500], lex[:2500], dense[:2500])
    assert ix.spill(tmp_path / "part-0.faiss") == 2500
    ix.add(ids[2500:], lex[2500:], dense[2500:])
    with pytest.raises(ValueError, match="save it and load the saved index"):
        ix.search(lex[:1], dense[:1])
    ix.save(tmp_path / "ix")
    assert sorted(os.listdir(tmp_path / "ix")) == ["docs.sqlite", "index.faiss", "index.ivfdata", "manifest.json"]
    loaded = load_index(tmp_path / "ix")
    assert is_mapped(loaded.faiss_index) and len(loaded) == n and loaded.index_options["nprobe"] == 4
    flat = HybridIndex(32, 8)
    flat.add(ids, lex, dense)
    q_lex, q_dense = clustered(60, seed=1)
    truth = flat.search(q_lex, q_dense, k=10)
    got = loaded.search(q_lex, q_dense, k=10)
    recall = np.mean([len(set(a.ids) & set(b.ids)) / 10 for a, b in zip(got, truth)])
    assert recall >= 0.8, recall
    loaded.set_search_options(nprobe=32)  # every list: exact
    assert_same_hits(loaded.search(q_lex, q_dense, k=10), truth, atol=1e-5)
    with pytest.raises(ValueError, match="memory-mapped from index.ivfdata, read-only"):
        loaded.add(["new"], lex[:1], dense[:1])
    with pytest.raises(ValueError, match="read-only"):
        loaded.remove(["d1"])
    loaded.save(tmp_path / "copy")  # a loaded index saves its mapped lists byte for byte
    assert_same_hits(load_index(tmp_path / "copy", nprobe=32).search(q_lex, q_dense, k=10), truth, atol=1e-5)
    data = tmp_path / "copy" / "index.ivfdata"
    data.write_bytes(data.read_bytes()[:-8])
    with pytest.raises(ValueError, match="index.ivfdata is damaged"):
        load_index(tmp_path / "copy")


def test_ivf_ondisk_build_in_parts_equals_one_part(tmp_path, capsys):
    docs, enc = fake_docs(1200), FakeEncoder()  # above min_train: trained once on a sample of the corpus
    one = build_index(docs, tmp_path / "one", enc, index_type="ivf-ondisk", chunk_size=100, show_progress_bar=False)
    three = build_index(docs, tmp_path / "three", enc, index_type="ivf-ondisk", chunk_size=100, shards=3,
                        show_progress_bar=False)
    assert isinstance(three, HybridIndex) and is_mapped(three.faiss_index) and len(three) == 1200
    assert faiss.extract_index_ivf(three.faiss_index).nlist == faiss.extract_index_ivf(one.faiss_index).nlist == 30
    q_lex, q_dense = enc.encode_documents([f"query {i}" for i in range(20)])
    assert_same_hits(three.search(q_lex, q_dense, k=10), one.search(q_lex, q_dense, k=10))
    assert main(["index", "info", str(tmp_path / "three")]) == 0
    assert "index.ivfdata, memory-mapped" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------- merge
def test_merge_equals_one_build(tiny_encoder, corpus_file, tmp_path, capsys):
    docs = load_corpus(corpus_file)
    enc = HybridEncoder(tiny_encoder, "lens")
    whole = build_index(docs, tmp_path / "whole", enc, chunk_size=5, show_progress_bar=False)
    kw = dict(chunk_size=5, show_progress_bar=False, weights="balanced")  # each part's default from its own documents
    build_index(docs[:9], tmp_path / "a", enc, **kw)
    build_index(docs[9:16], tmp_path / "b", enc, **kw)
    build_index(docs[16:], tmp_path / "c", enc, shards=2, **kw)  # a sharded input
    assert main(["index", "merge", str(tmp_path / "m"), *(str(tmp_path / x) for x in "abc")]) == 0
    assert "23 documents in 4 shards" in capsys.readouterr().out
    merged = load_index(tmp_path / "m")
    q = tiny_encoder.encode_queries(["cancer drug", "brain blood", "gene"], output="both")
    for w in ((0.5, 0.5), (0.8, 0.2)):
        assert_same_hits(merged.search(q.lexicon, q.dense, k=23, weights=w),
                         whole.search(q.lexicon, q.dense, k=23, weights=w))
    # the parts' default weights differ; the merge's default is their mean by documents
    parts = [load_index(tmp_path / x) for x in "abc"]
    assert len({p.weights for p in parts}) > 1
    expected = mean_weights([p.weights for p in parts], [len(p) for p in parts])
    assert merged.weights == pytest.approx(expected, abs=1e-9)
    # a search without weights uses the merged default on every shard: the scores of one index with those weights
    one = HybridIndex(merged.lexicon_dim, merged.dense_dim, "flat", idf=True)
    one.add(*(lambda v: ([d.id for d in docs], v.lexicon, v.dense))(
        tiny_encoder.encode_documents([d.full_text for d in docs], output="both")))
    assert merged.idf  # each input built with the default; the shards' counts summed weigh as one index's
    for a, b in zip(merged.search(q.lexicon, q.dense, k=23),
                    one.search(q.lexicon, q.dense, k=23, weights=expected)):
        np.testing.assert_allclose(a.scores, b.scores, atol=1e-5, rtol=0)
    assert main(["index", "info", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out
    assert "23 documents" in out and "shards: 4 searched together" in out and "merged_from" in out


def saved(path, ids, lexicon_dim=16, dense_dim=4, index_type="flat", fingerprint=None, top_m=None):
    ix = HybridIndex(lexicon_dim, dense_dim, index_type, fingerprint=fingerprint or {"model": "a"}, top_m=top_m)
    lex, dense = random_parts(len(ids), lex=lexicon_dim, dense=dense_dim)
    ix.add(ids, lex, dense)
    ix.save(path)
    return path


@pytest.mark.parametrize("other,match", [
    (dict(ids=[f"x{i}" for i in range(5)] + ["a3"]), "document id 'a3' is in both"),
    (dict(fingerprint={"model": "b"}), "model: expected 'a', index has 'b'"),
    (dict(dense_dim=6), "dense_dim \\(4 in"),
    (dict(index_type="fp16"), "index_type \\('flat' in"),
    (dict(top_m=3), "top_m \\(None in"),
])
def test_merge_refuses_mismatches(tmp_path, capsys, other, match):
    a = saved(tmp_path / "a", [f"a{i}" for i in range(10)])
    b = saved(tmp_path / "b", **{"ids": [f"b{i}" for i in range(10)], **other})
    assert main(["index", "merge", str(tmp_path / "out"), str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert "lens index merge: error:" in err and len(err.strip().splitlines()) == 1
    assert __import__("re").search(match, err), err
    assert not (tmp_path / "out").exists()


def test_merge_refuses_bad_arguments(tmp_path):
    a = saved(tmp_path / "a", ["a1", "a2"])
    b = saved(tmp_path / "b", ["b1"])
    with pytest.raises(ValueError, match="at least two"):
        merge_indexes(tmp_path / "out", [a])
    with pytest.raises(ValueError, match="given twice"):
        merge_indexes(tmp_path / "out", [a, b, tmp_path / "b"])
    with pytest.raises(ValueError, match="is one of the inputs"):
        merge_indexes(a, [a, b])
    with pytest.raises(FileNotFoundError, match="no saved index"):
        merge_indexes(tmp_path / "out", [a, tmp_path / "nothing"])
    assert len(load_index(merge_indexes(tmp_path / "out", [a, b]) and tmp_path / "out")) == 3


def test_merge_replaces_an_index_only_when_asked(tmp_path, capsys):
    """An index already at the output (here: one of other documents) is kept unless --overwrite: swapping the
    arguments of `lens index merge` must not lose an index."""
    a = saved(tmp_path / "a", ["a1", "a2"])
    b = saved(tmp_path / "b", ["b1"])
    victim = saved(tmp_path / "victim", ["v1", "v2", "v3"])
    before = sorted((p.relative_to(victim), p.read_bytes()) for p in victim.rglob("*") if p.is_file())
    assert main(["index", "merge", str(victim), str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert "victim already holds a LENS index (3 documents): pass --overwrite" in err
    assert sorted((p.relative_to(victim), p.read_bytes()) for p in victim.rglob("*") if p.is_file()) == before
    with pytest.raises(FileExistsError, match="overwrite=True"):
        merge_indexes(victim, [a, b])
    assert main(["index", "merge", str(victim), str(a), str(b), "--overwrite"]) == 0
    assert len(load_index(victim)) == 3 and "v1" not in load_index(victim)


# ---------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize("extra,match", [
    (["--workers", "0"], "argument --workers: expected a positive integer"),
    (["--shards", "-1"], "argument --shards: expected a positive integer"),
    (["--top-m", "0"], "argument --top-m: expected a positive integer"),
    (["--shards", "24"], "--shards 24 is more than the 23 documents"),
    (["--workers", "3", "--devices", "cpu,cpu"], "3 workers but 2 devices"),
    (["--devices", "gpu0"], "device 'gpu0' is not a device name"),
])
def test_cli_refuses_bad_scale_options(tiny_lens_dir, corpus_file, tmp_path, capsys, extra, match):
    ix = tmp_path / "ix"
    assert main(["index", "build", "--corpus", str(corpus_file), "--output", str(ix), "--model", str(tiny_lens_dir),
                 "--dense", "none", *extra]) == 2
    assert match in capsys.readouterr().err
    assert not ix.exists()


def test_library_checks_build_options():
    for kwargs, match in [(dict(workers=0), "--workers must be a positive integer"),
                          (dict(shards=2.0), "--shards must be a positive integer"),
                          (dict(top_m=True), "--top-m must be a positive integer")]:
        with pytest.raises(ValueError, match=match):
            check_build_options(**{"workers": 1, "shards": 1, "top_m": None, **kwargs})
    with pytest.raises(ValueError, match="top_m prunes the lexicon part"):
        HybridIndex(None, 8, top_m=3)
    with pytest.raises(ValueError, match="spill moves on-disk inverted lists"):
        HybridIndex(8, 4).spill("x.faiss")


# ---------------------------------------------------------------------------------------------- lens encode
@pytest.mark.slow  # two processes import torch and load the model
def test_encode_with_two_workers_gives_the_rows_of_one(tiny_lens_dir, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(" ".join(WORDS[i : i + 3]) for i in range(9)) + "\n")
    for workers in ("1", "2"):  # two workers, two texts each a chunk: three chunks, the last shared unevenly
        assert main(["encode", "--model", str(tiny_lens_dir), "--input", str(texts), "--output",
                     str(tmp_path / f"w{workers}.npy"), "--workers", workers, "--chunk-size", "2"]) == 0
    one, two = np.load(tmp_path / "w1.npy"), np.load(tmp_path / "w2.npy")
    assert one.shape == (9, 16)
    np.testing.assert_allclose(one, two, atol=1e-6, rtol=0)


# ---------------------------------------------------------------------------------------------- torchrun
@pytest.mark.slow
def test_torchrun_ranks_build_what_one_process_builds(tiny_lens_dir, corpus_file, tmp_path):
    base = ["index", "build", "--corpus", str(corpus_file), "--model", str(tiny_lens_dir), "--dense", "lens",
            "--chunk-size", "4"]
    assert main([*base, "--output", str(tmp_path / "one")]) == 0
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                          "-m", "lens.cli", *base, "--output", str(tmp_path / "two")],
                         env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("indexed 23 documents") == 1  # rank 0 alone reports
    assert_same_stored(load_index(tmp_path / "one"), load_index(tmp_path / "two"))
