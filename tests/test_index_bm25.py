"""An index with a BM25 part (`lens index build --bm25`, `HybridIndex(bm25=True)`): three-part search against a
brute-force reference, weight 0 is today's search, BM25 alone ranks as lens.bm25, saved and checked with the index,
kept in step by additions and removals, refused where it cannot be kept; through Python, the CLI and `lens serve`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from index import HybridIndex, load_index  # noqa: E402
from index.bm25_part import BM25_FILE  # noqa: E402
from index.vectors import document_vectors, query_vectors  # noqa: E402
from lens.bm25 import BM25Index  # noqa: E402
from lens.cli import main  # noqa: E402
from lens.corpus import load_corpus  # noqa: E402
from lens.hybrid import HybridEncoder  # noqa: E402
from lens.indexing import build_index  # noqa: E402
from lens.search import Searcher  # noqa: E402

from corpus_helpers import WORDS, write_corpus  # noqa: E402

QUERIES = ["cancer drug", "brain cell protein", "blood risk treatment", "the of"]


def _corpus(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 9)))) for _ in range(n)]
    lex = np.abs(rng.standard_normal((n, 12))).astype(np.float32) * (rng.random((n, 12)) > 0.5)
    dense = rng.standard_normal((n, 6)).astype(np.float32)
    return [f"d{i}" for i in range(n)], texts, lex, dense


def _index(ids, texts, lex, dense, index_type="flat", **kw) -> HybridIndex:
    ix = HybridIndex(12, 6, index_type, bm25=True, **kw)
    ix.add(ids, lex, dense, texts=texts)
    return ix


def _shards(ids, texts, lex, dense, cuts, filtered=False):
    """Shards of contiguous documents cut at ``cuts`` (none: one ``HybridIndex``); ``filtered``: each document's
    metadata ``{"half": i % 2}``."""
    from index.shards import ShardedIndex

    bounds = [0, *cuts, len(ids)]
    parts = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        part = HybridIndex(12, 6, bm25=True)
        meta = [{"half": i % 2} for i in range(a, b)] if filtered else None
        part.add(ids[a:b], lex[a:b], dense[a:b], metadata=meta, texts=texts[a:b])
        parts.append(part)
    return ShardedIndex(parts) if cuts else parts[0]


def brute_force(texts, lex, dense, q_lex, q_dense, query, weights, k, keep=None):
    """Every document scored naively: w_lex cos_lex + w_dense cos_dense + w_bm25 bm25 / max bm25 (BM25 of the whole
    corpus, its maximum over the documents searched: ``keep``, default all), then the top k as (rows, scores)."""
    keep = np.arange(len(texts)) if keep is None else np.asarray(keep)
    vec = document_vectors(lex[keep], dense[keep]) @ query_vectors(q_lex, q_dense, *weights[:2])[0]
    rows, scores = BM25Index(texts).search([query], len(texts))[0]
    bm = np.zeros(len(texts))
    bm[rows] = scores
    bm = bm[keep]
    fused = vec + (weights[2] * bm / bm.max() if bm.max() > 0 else 0.0)
    order = np.lexsort((keep, -fused))[:k]
    return keep[order], fused[order]


def assert_same_ranking(got_ids, got_scores, want_ids, want_scores, atol=1e-5):
    """The same scores position by position, and the same ids except where scores tie (within the list, or with
    the last one, which may tie with a document cut off)."""
    np.testing.assert_allclose(got_scores, want_scores, atol=atol)
    assert len(got_ids) == len(want_ids)
    rounded = np.round(np.asarray(want_scores, dtype=np.float64), 4)
    for s in np.unique(rounded):
        at = np.isclose(rounded, s)
        if at.sum() == 1 and s != rounded[-1]:
            assert np.asarray(got_ids)[at].tolist() == np.asarray(want_ids)[at].tolist()


# ---- Python: HybridIndex ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("index_type,atol", [("flat", 1e-5), ("hnsw", 1e-5), ("fp16", 2e-3)])
@pytest.mark.parametrize("weights", [(0.5, 0.5, 0.5), (0.2, 0.3, 1.0), (0.0, 1.0, 0.2), (1.0, 0.0, 2.0)])
def test_three_parts_equal_the_brute_force_reference(index_type, atol, weights):
    ids, texts, lex, dense, = _corpus(40)
    ix = _index(ids, texts, lex, dense, index_type)
    rng = np.random.default_rng(5)
    for query in QUERIES:
        q_lex, q_dense = np.abs(rng.standard_normal((1, 12))), rng.standard_normal((1, 6))
        (hits,) = ix.search(q_lex, q_dense, k=7, weights=weights, texts=[query])
        rows, scores = brute_force(texts, lex, dense, q_lex, q_dense, query, weights, 7)
        assert_same_ranking(hits.ids, hits.scores, [ids[r] for r in rows], scores, atol)


def test_a_small_depth_still_scores_every_hit_exactly():
    ids, texts, lex, dense = _corpus(60)
    ix = _index(ids, texts, lex, dense)
    q_lex, q_dense = np.abs(np.random.default_rng(1).standard_normal((2, 12))), np.ones((2, 6))
    w = (0.4, 0.3, 0.8)
    results = ix.search(q_lex, q_dense, k=5, weights=w, texts=QUERIES[:2], depth=5)
    for q, hits in enumerate(results):
        _, all_scores = brute_force(texts, lex, dense, q_lex[q : q + 1], q_dense[q : q + 1], QUERIES[q], w, 60)
        full = dict(zip(*brute_force(texts, lex, dense, q_lex[q : q + 1], q_dense[q : q + 1], QUERIES[q], w, 60)))
        np.testing.assert_allclose(hits.scores, [full[ids.index(i)] for i in hits.ids], atol=1e-5)
        assert hits.scores[0] == pytest.approx(all_scores[0], abs=1e-5)  # the best is never missed here


def test_bm25_weight_zero_is_todays_search():
    ids, texts, lex, dense = _corpus(30)
    ix = _index(ids, texts, lex, dense)
    plain = HybridIndex(12, 6)
    plain.add(ids, lex, dense)
    q = (np.abs(np.random.default_rng(2).standard_normal((3, 12))), np.ones((3, 6)))
    for with_zero, today in zip(ix.search(*q, k=6, weights=(0.3, 0.7, 0.0), texts=QUERIES[:3]),
                                plain.search(*q, k=6, weights=(0.3, 0.7))):
        assert with_zero.ids == today.ids
        np.testing.assert_array_equal(with_zero.scores, today.scores)
    for text, pair in (("0.3,0.7", (0.3, 0.7)), ("0.3,0.7,0", (0.3, 0.7))):  # text weights, as the CLI takes them
        for got, want in zip(ix.search(*q, k=6, weights=text, texts=QUERIES[:3]), plain.search(*q, k=6, weights=pair)):
            assert got.ids == want.ids
            np.testing.assert_array_equal(got.scores, want.scores)


def test_texts_that_are_not_strings_and_bad_arguments_are_named():
    """The BM25 part tokenizes texts: a None or a number among them is named (it was an AttributeError deep in the
    tokenizer); depth is checked on every search, weights without an order and metadata not one dict per id are
    refused, a generator of metadata is taken."""
    ids, texts, lex, dense = _corpus(10)
    ix = _index(ids, texts, lex, dense)
    for bad in (None, 5):
        with pytest.raises(ValueError, match=r"texts\[1\] is not a string \(got \w+ '(None|5)'\)"):
            ix.add(["new", "new2"], lex[:2], dense[:2], texts=["fine", bad])
        with pytest.raises(ValueError, match=r"texts\[0\] is not a string"):
            ix.search(lex[:1], dense[:1], weights=(0.5, 0.5, 1), texts=[bad])
    assert len(ix) == 10 and "new" not in ix
    for depth in (0, -5, 2.5, True):
        with pytest.raises(ValueError, match="depth must be a positive integer"):
            ix.search(lex[:1], dense[:1], depth=depth)  # two weights: no BM25 part searched, still checked
    for weights in ({"lex": 1, "dense": 1}, {0.5, 0.7}):
        with pytest.raises(ValueError, match="weights must be two or three numbers LEX,DENSE\\[,BM25\\]"):
            ix.search(lex[:1], dense[:1], weights=weights)
    with pytest.raises(ValueError, match="metadata is one dict \\(or None\\) per id: give a list"):
        ix.add(["new"], lex[:1], dense[:1], texts=["x"], metadata={"source": "wiki"})
    ix.add(["a", "b"], lex[:2], dense[:2], texts=["x", "y"], metadata=({"n": i} for i in range(2)))
    assert ix.metadata("b") == {"n": 1}


def test_bm25_alone_ranks_like_lens_bm25():
    ids, texts, lex, dense = _corpus(50)
    ix = _index(ids, texts, lex, dense)
    for query in QUERIES[:3]:
        rows, scores = BM25Index(texts).search([query], 10)[0]
        (hits,) = ix.search(lex[:1], dense[:1], k=10, weights=(0, 0, 1), texts=[query])
        assert_same_ranking(hits.ids, hits.scores, [ids[r] for r in rows], scores / scores.max())
    (none,) = ix.search(lex[:1], dense[:1], k=5, weights=(0, 0, 1), texts=["the of and"])  # stopwords only
    assert none.ids == []


@pytest.mark.parametrize("cuts", [(), (13, 27)])  # one index; three shards that add up their statistics
def test_a_filter_keeps_the_whole_index_bm25_statistics_and_its_maximum_over_the_matches(cuts):
    ids, texts, lex, dense = _corpus(40)
    ix = _shards(ids, texts, lex, dense, cuts, filtered=True)
    keep = np.arange(0, 40, 2)
    q_lex, q_dense = np.abs(np.random.default_rng(3).standard_normal((1, 12))), np.ones((1, 6))
    w = (0.3, 0.3, 0.6)
    (hits,) = ix.search(q_lex, q_dense, k=6, weights=w, texts=["cancer cell"], filter={"half": 0})
    rows, scores = brute_force(texts, lex, dense, q_lex, q_dense, "cancer cell", w, 6, keep=keep)
    assert_same_ranking(hits.ids, hits.scores, [ids[r] for r in rows], scores)


def test_additions_and_removals_keep_the_part_in_step(tmp_path):
    ids, texts, lex, dense = _corpus(30)
    ix = _index(ids[:20], texts[:20], lex[:20], dense[:20])
    ix.add(ids[20:], lex[20:], dense[20:], texts=texts[20:])
    ix.remove(["d3", "d7"])
    ix.add(["d5"], lex[29:], dense[29:], upsert=True, texts=[texts[29]])  # d5 now holds d29's vectors and text
    ix.save(tmp_path / "ix")
    ix = load_index(tmp_path / "ix")
    rows = [i for i in range(30) if i not in (3, 5, 7)] + [29]
    ref = _index([ids[i] for i in rows[:-1]] + ["d5"], [texts[i] for i in rows], lex[rows], dense[rows])
    q = (np.abs(np.random.default_rng(4).standard_normal((2, 12))), np.ones((2, 6)))
    for got, want in zip(ix.search(*q, k=8, weights=(0.2, 0.2, 1.0), texts=QUERIES[:2]),
                         ref.search(*q, k=8, weights=(0.2, 0.2, 1.0), texts=QUERIES[:2])):
        assert_same_ranking(got.ids, got.scores, want.ids, want.scores)
    with pytest.raises(ValueError, match="needs each document's text"):
        ix.add(["new"], lex[:1], dense[:1])
    assert "new" not in ix


def test_saved_with_the_index_checked_and_refused_when_tampered(tmp_path):
    ids, texts, lex, dense = _corpus(10)
    _index(ids, texts, lex, dense).save(tmp_path / "ix")
    m = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    assert BM25_FILE in m["files"] and m["bm25"]["documents"] == 10
    raw = bytearray((tmp_path / "ix" / BM25_FILE).read_bytes())
    raw[-30] ^= 1
    (tmp_path / "ix" / BM25_FILE).write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="bm25.npz is damaged"):
        load_index(tmp_path / "ix")
    _index(ids, texts, lex, dense).save(tmp_path / "ix")  # saving over an index with a BM25 part is allowed
    (tmp_path / "ix" / BM25_FILE).unlink()
    with pytest.raises(FileNotFoundError, match="incomplete"):
        load_index(tmp_path / "ix")


def test_a_read_only_load_searches_alike_and_refuses_changes_and_saves(tmp_path):
    ids, texts, lex, dense = _corpus(25)
    _index(ids, texts, lex, dense).save(tmp_path / "ix")
    full, lean = load_index(tmp_path / "ix"), load_index(tmp_path / "ix", read_only=True)
    q_lex, q_dense = np.abs(np.random.default_rng(8).standard_normal((3, 12))), np.ones((3, 6))
    for a, b in zip(full.search(q_lex, q_dense, k=6, weights=(0.3, 0.3, 0.4), texts=QUERIES[:3]),
                    lean.search(q_lex, q_dense, k=6, weights=(0.3, 0.3, 0.4), texts=QUERIES[:3])):
        assert a.ids == b.ids
        np.testing.assert_array_equal(a.scores, b.scores)
    before = sorted((p.name, p.stat().st_mtime_ns) for p in (tmp_path / "ix").iterdir())
    with pytest.raises(ValueError, match="read_only=False"):
        lean.save(tmp_path / "ix")
    with pytest.raises(ValueError, match="read_only=False"):
        lean.add(["new"], lex[:1], dense[:1], texts=["cancer"])
    assert sorted((p.name, p.stat().st_mtime_ns) for p in (tmp_path / "ix").iterdir()) == before


def test_an_index_without_the_part_opens_as_before_and_refuses_a_bm25_weight(tmp_path):
    ids, texts, lex, dense = _corpus(10)
    plain = HybridIndex(12, 6)
    plain.add(ids, lex, dense)
    plain.save(tmp_path / "old")
    old = load_index(tmp_path / "old")
    assert not old.has_bm25 and "bm25" not in json.loads((tmp_path / "old" / "manifest.json").read_text())
    assert old.search(lex[:1], dense[:1], k=3)[0].ids == plain.search(lex[:1], dense[:1], k=3)[0].ids
    with pytest.raises(ValueError, match="lens index build --bm25"):
        old.search(lex[:1], dense[:1], k=3, weights=(0.5, 0.5, 0.5), texts=["cancer"])
    ix = _index(ids, texts, lex, dense)
    with pytest.raises(ValueError, match="each query's text"):
        ix.search(lex[:1], dense[:1], k=3, weights=(0.5, 0.5, 0.5))


# ---- lens: build, Searcher, CLI, serve --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def built(tiny_encoder, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bm25")
    corpus = write_corpus(tmp / "corpus.jsonl", 24)
    docs = load_corpus(corpus)
    build_index(docs, tmp / "bm25", HybridEncoder(tiny_encoder, "lens"), chunk_size=5, show_progress_bar=False,
                bm25=True)
    build_index(docs, tmp / "plain", HybridEncoder(tiny_encoder, "lens"), chunk_size=5, show_progress_bar=False,
                bm25=False)
    return tmp, docs


def test_searcher_weight_zero_equals_an_index_without_the_part(built):
    tmp, _ = built
    with_part, plain = Searcher.open(tmp / "bm25"), Searcher.open(tmp / "plain")
    for a, b, c in zip(with_part.search(QUERIES, k=5, weights=(0.5, 0.5, 0)),
                       with_part.search(QUERIES, k=5, weights=(0.5, 0.5)), plain.search(QUERIES, k=5)):
        assert a.ids == b.ids == c.ids
        np.testing.assert_array_equal(a.scores, c.scores)
    with pytest.raises(ValueError, match="lens index build --bm25"):
        plain.search(QUERIES, weights=(0.5, 0.5, 0.5))


def test_searcher_default_weights_add_bm25_on_an_index_with_the_part(built):
    from index.bm25_fusion import DEFAULT_BM25_WEIGHT

    tmp, _ = built
    with_part, plain = Searcher.open(tmp / "bm25"), Searcher.open(tmp / "plain")
    want = with_part.search(QUERIES, k=5, weights=(*with_part.index.weights, DEFAULT_BM25_WEIGHT))
    got = with_part.search(QUERIES, k=5)
    assert [r.ids for r in got] == [r.ids for r in want] and 0 < DEFAULT_BM25_WEIGHT
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.scores, w.scores)
    assert [r.ids for r in plain.search(QUERIES, k=5)] == [r.ids for r in plain.search(QUERIES, k=5, weights=(0.5, 0.5))]
    for batch_size in (0, -1, 1.5, True):  # -1 returned no results at all, 0 a bare range() error
        with pytest.raises(ValueError, match="batch_size must be a positive integer"):
            plain.search(QUERIES, batch_size=batch_size)
    assert [r.ids for r in plain.search(QUERIES, k=5, batch_size=np.int64(2))] == [
        r.ids for r in plain.search(QUERIES, k=5)]


def test_searcher_three_parts_equal_the_reference(built, tiny_encoder):
    tmp, docs = built
    texts = [d.full_text for d in docs]
    both = tiny_encoder.encode_documents(texts, output="both")
    q = tiny_encoder.encode_queries(QUERIES[:3], output="both")
    results = Searcher.open(tmp / "bm25").search(QUERIES[:3], k=6, weights=(0.3, 0.2, 0.5), idf=False)
    for i, hits in enumerate(results):
        rows, scores = brute_force(texts, both.lexicon, both.dense, q.lexicon[i : i + 1], q.dense[i : i + 1],
                                   QUERIES[i], (0.3, 0.2, 0.5), 6)
        assert_same_ranking(hits.ids, hits.scores, [docs[r].id for r in rows], scores, atol=1e-4)


def test_cli_build_search_info_add_remove(built, tiny_lens_dir, tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.jsonl", 12)
    ix = tmp_path / "ix"
    assert main(["-q", "index", "build", "--corpus", str(corpus), "--output", str(ix), "--model", str(tiny_lens_dir),
                 "--dense", "lens", "--bm25"]) == 0
    capsys.readouterr()
    assert main(["index", "info", str(ix)]) == 0
    assert "bm25: a BM25 part of 12 documents" in capsys.readouterr().out
    assert main(["search", str(ix), "cancer drug", "-k", "4", "--weights", "0,0,1", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)[0]["hits"]
    texts = [d.full_text for d in load_corpus(corpus)]
    rows, scores = BM25Index(texts).search(["cancer drug"], 4)[0]
    assert_same_ranking([h["id"] for h in hits], [h["score"] for h in hits], [f"d{r}" for r in rows],
                        scores / scores.max())
    more = write_corpus(tmp_path / "more.jsonl", 3, prefix="new", seed=1)
    assert main(["-q", "index", "add", str(ix), "--corpus", str(more)]) == 0
    assert main(["-q", "index", "remove", str(ix), "d2"]) == 0
    assert load_index(ix).has_bm25 and len(load_index(ix)) == 14
    capsys.readouterr()
    assert main(["search", str(ix), "cancer drug", "-k", "20", "--weights", "0,0,1", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)[0]["hits"]
    kept = [d for d in load_corpus(corpus) if d.id != "d2"] + load_corpus(more)
    rows, scores = BM25Index([d.full_text for d in kept]).search(["cancer drug"], 20)[0]
    assert_same_ranking([h["id"] for h in hits], [h["score"] for h in hits], [kept[r].id for r in rows],
                        scores / scores.max())
    tmp, _ = built
    assert main(["search", str(tmp / "plain"), "cancer", "--weights", "0.5,0.5,0.5"]) == 2
    assert "lens index build --bm25" in capsys.readouterr().err
    assert main(["-q", "index", "build", "--corpus", str(corpus), "--output", str(tmp_path / "sh"), "--model",
                 str(tiny_lens_dir), "--dense", "lens", "--shards", "2"]) == 0  # a BM25 part per shard, by default
    capsys.readouterr()
    assert main(["index", "info", str(tmp_path / "sh")]) == 0
    assert "bm25: a BM25 part of 12 documents in 2 of 2 shards, searched at weight 0.1" in capsys.readouterr().out
    assert main(["search", str(tmp_path / "sh"), "cancer drug", "-k", "4", "--weights", "0,0,1", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)[0]["hits"]
    rows, scores = BM25Index(texts).search(["cancer drug"], 4)[0]
    assert_same_ranking([h["id"] for h in hits], [h["score"] for h in hits], [f"d{r}" for r in rows],
                        scores / scores.max())
    assert main(["-q", "index", "build", "--corpus", str(corpus), "--output", str(tmp_path / "none"), "--model",
                 str(tiny_lens_dir), "--dense", "lens", "--no-bm25"]) == 0
    assert not load_index(tmp_path / "none").has_bm25 and load_index(tmp_path / "sh").has_bm25
    capsys.readouterr()
    assert main(["index", "info", str(tmp_path / "none")]) == 0
    assert "bm25: none (built with --no-bm25" in capsys.readouterr().out


def test_a_build_keeps_a_bm25_part_by_default_and_searches_it_at_the_default_weight(tiny_encoder, tmp_path):
    from index.bm25_fusion import DEFAULT_BM25_WEIGHT

    docs = load_corpus(write_corpus(tmp_path / "corpus.jsonl", 15))
    ix = build_index(docs, tmp_path / "ix", HybridEncoder(tiny_encoder, "lens"), chunk_size=5,
                     show_progress_bar=False)
    assert ix.has_bm25
    searcher = Searcher.open(tmp_path / "ix")
    for got, want in zip(searcher.search(QUERIES, k=5),
                         searcher.search(QUERIES, k=5, weights=(*ix.weights, DEFAULT_BM25_WEIGHT))):
        assert got.ids == want.ids
        np.testing.assert_array_equal(got.scores, want.scores)


# ---- shards and merges: each shard scores with the whole index's BM25 statistics ----------------------------------

@pytest.mark.parametrize("cuts", [(20,), (7, 19, 33)])
@pytest.mark.parametrize("weights", [(0.5, 0.5, 0.1), (0.2, 0.3, 1.0), (0.0, 0.0, 1.0)])
def test_shards_search_as_one_index_of_all_their_documents(cuts, weights):
    ids, texts, lex, dense = _corpus(40)
    sharded = _shards(ids, texts, lex, dense, cuts)
    assert sharded.has_bm25
    rng = np.random.default_rng(9)
    for query in QUERIES[:3]:
        q_lex, q_dense = np.abs(rng.standard_normal((1, 12))), rng.standard_normal((1, 6))
        (hits,) = sharded.search(q_lex, q_dense, k=7, weights=weights, texts=[query], depth=40)
        rows, scores = brute_force(texts, lex, dense, q_lex, q_dense, query, weights, 7)
        assert_same_ranking(hits.ids, hits.scores, [ids[r] for r in rows], scores)


def test_shards_with_a_small_depth_score_every_hit_exactly():
    ids, texts, lex, dense = _corpus(40)
    sharded = _shards(ids, texts, lex, dense, (13, 27))
    q_lex, q_dense = np.abs(np.random.default_rng(4).standard_normal((1, 12))), np.ones((1, 6))
    w = (0.3, 0.3, 0.6)
    (small,) = sharded.search(q_lex, q_dense, k=4, weights=w, texts=["cancer cell"], depth=3)
    full = dict(zip(*brute_force(texts, lex, dense, q_lex, q_dense, "cancer cell", w, 40)))
    np.testing.assert_allclose(small.scores, [full[ids.index(i)] for i in small.ids], atol=1e-5)


def test_merged_indexes_search_as_one_and_a_merge_without_parts_refuses_the_weight(tmp_path, caplog, capsys):
    from index.shards import merge_indexes

    ids, texts, lex, dense = _corpus(30)
    _index(ids[:12], texts[:12], lex[:12], dense[:12]).save(tmp_path / "a")
    _index(ids[12:], texts[12:], lex[12:], dense[12:]).save(tmp_path / "b")
    merge_indexes(tmp_path / "ab", [tmp_path / "a", tmp_path / "b"])
    merged, whole = load_index(tmp_path / "ab", read_only=True), _index(ids, texts, lex, dense)
    q_lex, q_dense = np.abs(np.random.default_rng(6).standard_normal((2, 12))), np.ones((2, 6))
    for got, want in zip(merged.search(q_lex, q_dense, k=8, weights=(0.4, 0.2, 0.5), texts=QUERIES[:2], depth=30),
                         whole.search(q_lex, q_dense, k=8, weights=(0.4, 0.2, 0.5), texts=QUERIES[:2], depth=30)):
        assert_same_ranking(got.ids, got.scores, want.ids, want.scores)
    plain = HybridIndex(12, 6)
    plain.add(["x0", "x1"], lex[:2], dense[:2])
    plain.save(tmp_path / "plain")
    with caplog.at_level("WARNING"):
        merge_indexes(tmp_path / "mixed", [tmp_path / "a", tmp_path / "plain"])
    assert "keep no BM25 part" in caplog.text
    mixed = load_index(tmp_path / "mixed")
    assert not mixed.has_bm25
    capsys.readouterr()
    assert main(["index", "info", str(tmp_path / "mixed")]) == 0
    assert "a BM25 part of 12 documents in 1 of 2 shards, not searchable" in capsys.readouterr().out
    with pytest.raises(ValueError, match=r"1 of this index's 2 shards \(the first: shard 1\) keep no BM25 part"):
        mixed.search(q_lex, q_dense, k=3, weights=(0.5, 0.5, 0.5), texts=QUERIES[:2])
    (two,) = mixed.search(q_lex[:1], q_dense[:1], k=3, weights=(0.5, 0.5))
    assert len(two.ids) == 3


def test_serve_takes_three_weights(built):
    from lens.serve import SearchService

    tmp, _ = built
    service = SearchService(tmp / "bm25")
    want = Searcher.open(tmp / "bm25").search(QUERIES[:2], k=4, weights=(0.2, 0.3, 0.5))
    got = service.search({"queries": QUERIES[:2], "k": 4, "weights": [0.2, 0.3, 0.5]})["results"]
    for g, w in zip(got, want):
        assert [h["id"] for h in g["hits"]] == w.ids
        np.testing.assert_allclose([h["score"] for h in g["hits"]], w.scores, rtol=1e-6)
    default = SearchService(tmp / "bm25", weights="0.2,0.3,0.5").search({"queries": QUERIES[:2], "k": 4})["results"]
    assert [[h["id"] for h in r["hits"]] for r in default] == [w.ids for w in want]
    assert service.info()["bm25"] is True
    assert service.info()["search_weights"] == [0.5, 0.5, 0.1]  # the index's pair, BM25 at the default weight
    assert SearchService(tmp / "bm25", weights="0.2,0.3,0.5").info()["search_weights"] == [0.2, 0.3, 0.5]
    assert SearchService(tmp / "plain").info()["search_weights"] == [0.5, 0.5]


def test_ivf_ondisk_parts_make_one_index_with_one_bm25_part(built, tiny_encoder, tmp_path, caplog):
    tmp, docs = built
    with caplog.at_level("WARNING"):
        ix = build_index(docs, tmp_path / "ondisk", HybridEncoder(tiny_encoder, "lens"), chunk_size=5,
                         show_progress_bar=False, index_type="ivf-ondisk", shards=2, bm25=True)
    assert "holds every document's terms in memory" in caplog.text  # asked for: kept, with the memory named
    assert ix.has_bm25 and len(ix) == len(docs)
    # not asked: the parts go to disk to bound the build's memory, which one part of every document would undo
    lean = build_index(docs, tmp_path / "lean", HybridEncoder(tiny_encoder, "lens"), chunk_size=5,
                       show_progress_bar=False, index_type="ivf-ondisk", shards=2)
    assert not lean.has_bm25 and len(lean) == len(docs)
    got = Searcher.open(tmp_path / "ondisk").search(QUERIES[:2], k=5, weights=(0.3, 0.2, 0.5))
    want = Searcher.open(tmp / "bm25").search(QUERIES[:2], k=5, weights=(0.3, 0.2, 0.5))
    for g, w in zip(got, want):
        assert_same_ranking(g.ids, g.scores, w.ids, w.scores, atol=1e-4)


def test_a_merge_of_indexes_with_and_without_idf_warns_that_it_searches_without(tmp_path, caplog):
    from index.shards import merge_indexes

    ids, texts, lex, dense = _corpus(30)
    _index(ids[:12], texts[:12], lex[:12], dense[:12], idf=True).save(tmp_path / "a")
    _index(ids[12:], texts[12:], lex[12:], dense[12:]).save(tmp_path / "b")
    with caplog.at_level("WARNING"):
        merge_indexes(tmp_path / "ab", [tmp_path / "a", tmp_path / "b"])
    assert "1 of the merged index's 2 shards keep no document frequencies" in caplog.text
    assert load_index(tmp_path / "a").idf and not load_index(tmp_path / "ab").idf
    caplog.clear()
    _index(ids[12:], texts[12:], lex[12:], dense[12:], idf=True).save(tmp_path / "c")
    with caplog.at_level("WARNING"):
        merge_indexes(tmp_path / "ac", [tmp_path / "a", tmp_path / "c"])
    assert "document frequencies" not in caplog.text and load_index(tmp_path / "ac").idf


def test_a_users_file_inside_an_index_is_named_before_add_or_remove_does_any_work(tmp_path, capsys):
    """add and remove replace the index directory when they save: a file of the user's beside the index would be lost,
    so they refuse it at once, saying it is an index with other files in it (not "not a LENS index")."""
    ids, texts, lex, dense = _corpus(12)
    _index(ids, texts, lex, dense).save(tmp_path / "ix")
    (tmp_path / "ix" / "README.txt").write_text("my notes")
    assert main(["index", "remove", str(tmp_path / "ix"), ids[0]]) == 2
    err = capsys.readouterr().err
    assert "is a LENS index but also holds files LENS did not write (README.txt)" in err and "move them out" in err
    assert (tmp_path / "ix" / "README.txt").read_text() == "my notes" and len(load_index(tmp_path / "ix")) == 12
