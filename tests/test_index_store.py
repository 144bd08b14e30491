"""index.store.HybridIndex: scoring, search contract, add/remove/upsert and input validation."""

import logging

import numpy as np
import pytest

from index import HybridIndex, SearchResult

DL, DD = 40, 12


def data(n, seed, dl=DL, dd=DD):
    rng = np.random.default_rng(seed)
    lex = np.log1p(np.maximum(rng.standard_normal((n, dl)) + 0.3, 0)).astype(np.float32)
    return lex, rng.standard_normal((n, dd)).astype(np.float32)


def ids_for(n, prefix="d"):
    return [f"{prefix}{i}" for i in range(n)]


def cos_matrix(q, d):
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    dn = d / np.linalg.norm(d, axis=1, keepdims=True)
    return qn.astype(np.float64) @ dn.astype(np.float64).T


@pytest.fixture
def small():
    lex, den = data(200, seed=0)
    index = HybridIndex(DL, DD)
    index.add(ids_for(200), lex, den, metadata=[{"title": f"T{i}", "i": i} for i in range(200)])
    return index, lex, den


def test_hybrid_score_is_weighted_cosine_sum(small):
    index, lex, den = small
    qlex, qden = data(5, seed=1)
    cl, cd = cos_matrix(qlex, lex), cos_matrix(qden, den)
    for w in [(0.5, 0.5), (0.8, 0.2), (0.0, 1.0), (2.0, 0.3)]:
        for qi, res in enumerate(index.search(qlex, qden, k=200, weights=w)):
            assert len(res.ids) == 200
            idx = np.array([int(i[1:]) for i in res.ids])
            np.testing.assert_allclose(res.scores, w[0] * cl[qi, idx] + w[1] * cd[qi, idx], atol=1e-5)


def test_flat_search_equals_brute_force(small):
    index, lex, den = small
    qlex, qden = data(7, seed=2)
    brute = 0.5 * cos_matrix(qlex, lex) + 0.5 * cos_matrix(qden, den)
    for qi, res in enumerate(index.search(qlex, qden, k=10)):
        order = np.argsort(-brute[qi], kind="stable")[:10]
        assert np.diff(brute[qi][np.argsort(-brute[qi])][:11]).min() < -1e-6  # distinct: no ties at the cut
        assert res.ids == [f"d{i}" for i in order]
        np.testing.assert_allclose(res.scores, brute[qi, order], atol=1e-5)
        assert res.scores.dtype == np.float32 and np.all(np.diff(res.scores) <= 0)


def test_metadata_returned_with_hits(small):
    index, lex, den = small
    (res,) = index.search(lex[17], den[17], k=3)
    assert res.ids[0] == "d17" and res.metadata[0] == {"title": "T17", "i": 17}
    assert [m["i"] for m in res.metadata] == [int(i[1:]) for i in res.ids]
    assert index.metadata("d3") == {"title": "T3", "i": 3}


def test_single_query_1d_returns_list_of_one(small):
    index, lex, den = small
    out = index.search(lex[4], den[4], k=2)
    assert isinstance(out, list) and len(out) == 1 and isinstance(out[0], SearchResult)
    assert out[0].ids[0] == "d4" and out[0].scores[0] == pytest.approx(1.0, abs=1e-5)


def test_per_query_weights_override_default(small):
    index, lex, den = small
    qlex, qden = data(3, seed=3)
    w = np.array([[1.0, 0.0], [0.0, 1.0], [0.3, 0.7]])
    batch = index.search(qlex, qden, k=5, weights=w)
    for qi in range(3):
        single = index.search(qlex[qi], qden[qi], k=5, weights=tuple(w[qi]))[0]
        assert batch[qi].ids == single.ids
        np.testing.assert_allclose(batch[qi].scores, single.scores, atol=1e-6)
    lex_only = index.search(qlex[0], qden[0], k=5, weights=(1, 0))[0]
    expected = np.argsort(-cos_matrix(qlex[:1], lex)[0])[:5]
    assert lex_only.ids == [f"d{i}" for i in expected]
    assert index.weights == (0.5, 0.5)  # default unchanged
    with pytest.raises(ValueError, match="one pair per query"):
        index.search(qlex, qden, weights=np.ones((2, 2)))
    with pytest.raises(ValueError, match="not all 0"):
        index.search(qlex, qden, weights=(0, 0))
    with pytest.raises(ValueError, match=">= 0"):
        index.search(qlex, qden, weights=(-1, 1))


def test_one_part_query_on_hybrid_index(small):
    index, lex, den = small
    qlex, qden = data(2, seed=4)
    res = index.search(dense=qden, k=200, weights=(0.5, 0.8))
    cd = cos_matrix(qden, den)
    for qi, r in enumerate(res):
        idx = np.array([int(i[1:]) for i in r.ids])
        np.testing.assert_allclose(r.scores, 0.8 * cd[qi, idx], atol=1e-5)
    res = index.search(lexicon=qlex, k=200)
    cl = cos_matrix(qlex, lex)
    idx = np.array([int(i[1:]) for i in res[0].ids])
    np.testing.assert_allclose(res[0].scores, 0.5 * cl[0, idx], atol=1e-5)
    with pytest.raises(ValueError, match="give lexicon and/or dense"):
        index.search(k=3)


@pytest.mark.parametrize("mode", ["lexicon", "dense"])
def test_single_part_modes(mode):
    lex, den = data(50, seed=5)
    qlex, qden = data(3, seed=6)
    if mode == "lexicon":
        index, docs, q, kw = HybridIndex(DL, None), {"lexicon": lex}, qlex, "lexicon"
    else:
        index, docs, q, kw = HybridIndex(0, DD), {"dense": den}, qden, "dense"
    assert index.mode == mode and index.weights == ((1.0, 0.0) if mode == "lexicon" else (0.0, 1.0))
    index.add(ids_for(50), **docs)
    c = cos_matrix(q, docs[kw])
    for qi, r in enumerate(index.search(**{kw: q}, k=50)):
        idx = np.array([int(i[1:]) for i in r.ids])
        np.testing.assert_allclose(r.scores, c[qi, idx], atol=1e-5)
        assert r.ids[0] == f"d{np.argmax(c[qi])}"
    other = "dense" if mode == "lexicon" else "lexicon"
    with pytest.raises(ValueError, match=f"this is a {mode} index with no {other} part"):
        index.search(**{kw: q, other: np.ones((3, 5))})
    with pytest.raises(ValueError, match=f"this is a {mode} index with no {other} part"):
        index.add(["x"], **{kw: q[:1], other: np.ones((1, 5))})


def test_no_parts_is_an_error():
    with pytest.raises(ValueError, match="needs a lexicon part, a dense part or both"):
        HybridIndex(None, 0)
    with pytest.raises(ValueError, match="positive integer"):
        HybridIndex(-3, 4)


def test_wrong_dimension(small):
    index, lex, den = small
    with pytest.raises(ValueError, match="^lexicon vectors have 39 columns but this index was built with 40$"):
        index.add(["x"], lex[:1, :39], den[:1])
    with pytest.raises(ValueError, match="dense vectors have 13 columns but this index was built with 12"):
        index.search(lex[:1], np.ones((1, 13)))
    assert len(index) == 200


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_inf_rejected_in_add_and_search(small, bad):
    index, lex, den = small
    new_lex, new_den = data(10, seed=7)
    new_den[6, 3] = bad
    with pytest.raises(ValueError, match=r"^dense vectors contain NaN or inf in row\(s\) 6$"):
        index.add(ids_for(10, "n"), new_lex, new_den, chunk_size=4)
    assert len(index) == 200 and "n0" not in index  # nothing added, not even earlier chunks
    with pytest.raises(ValueError, match=r"query dense vectors contain NaN or inf in row\(s\) 6"):
        index.search(new_lex, new_den)


def test_duplicate_ids(small):
    index, lex, den = small
    with pytest.raises(ValueError, match="document id 'x' appears more than once in this add call"):
        index.add(["x", "y", "x"], lex[:3], den[:3])
    with pytest.raises(ValueError, match="document id 'd5' \\(and 1 more\\) is already in the index; pass upsert=True"):
        index.add(["new", "d5", "d9"], lex[:3], den[:3])
    assert len(index) == 200 and "new" not in index


def test_upsert_replaces_vector_and_metadata(small):
    index, lex, den = small
    index.add(["d5", "extra"], lex[[100, 101]], den[[100, 101]], metadata=[{"v": 2}, None], upsert=True)
    assert len(index) == 201 and "extra" in index
    (res,) = index.search(lex[100], den[100], k=3)
    assert set(res.ids[:2]) == {"d5", "d100"}  # d5 now holds d100's vectors
    np.testing.assert_allclose(res.scores[:2], 1.0, atol=1e-5)
    assert index.metadata("d5") == {"v": 2}
    (res,) = index.search(lex[5], den[5], k=201)
    got = dict(zip(res.ids, res.scores))  # the old d5 vector is gone: d5 now scores like d100
    expected = 0.5 * cos_matrix(lex[5:6], lex[100:101])[0, 0] + 0.5 * cos_matrix(den[5:6], den[100:101])[0, 0]
    assert got["d5"] == pytest.approx(expected, abs=1e-5) and expected < 0.9


def test_remove(small):
    index, lex, den = small
    index.remove(["d17", "d18", "d17"])
    assert len(index) == 198 and "d17" not in index and "d16" in index
    (res,) = index.search(lex[17], den[17], k=198)
    assert "d17" not in res.ids and "d18" not in res.ids and len(res.ids) == 198
    with pytest.raises(KeyError, match="document 'nope' \\(and 1 more\\) is not in the index; nothing was removed"):
        index.remove(["d1", "nope", "d17"])
    assert len(index) == 198 and "d1" in index
    index.add(["d17"], lex[17], den[17])  # can be re-added after removal
    assert index.search(lex[17], den[17], k=1)[0].ids == ["d17"]


def test_hnsw_cannot_remove_or_upsert():
    lex, den = data(30, seed=8)
    index = HybridIndex(DL, DD, "hnsw")
    index.add(ids_for(30), lex, den)
    with pytest.raises(ValueError, match="'hnsw' does not support removing documents.*Rebuild.*flat, ivf, sq8, fp16"):
        index.remove(["d1"])
    with pytest.raises(ValueError, match="cannot replace document 'd2'.*'hnsw'"):
        index.add(["d2"], lex[:1], den[:1], upsert=True)
    assert len(index) == 30


def test_search_empty_index_warns_and_returns_empty(caplog):
    index = HybridIndex(DL, DD)
    qlex, qden = data(3, seed=9)
    with caplog.at_level(logging.WARNING, logger="index.store"):
        res = index.search(qlex, qden, k=5)
    assert len(res) == 3 and all(r.ids == [] and r.scores.shape == (0,) and r.metadata == [] for r in res)
    assert "empty index" in caplog.text
    with pytest.raises(ValueError, match="columns"):
        index.search(qlex[:, :5], qden)  # still validated


def test_k_larger_than_index_returns_all(small):
    index, lex, den = small
    (res,) = index.search(lex[0], den[0], k=10_000)
    assert len(res.ids) == 200 and len(set(res.ids)) == 200 and len(res.metadata) == 200
    with pytest.raises(ValueError, match="k must be a positive integer"):
        index.search(lex[0], den[0], k=0)


def test_zero_query_returns_empty_and_warns(small, caplog):
    index, lex, den = small
    qlex, qden = lex[:3].copy(), den[:3].copy()
    qlex[1], qden[1] = 0, 0
    with caplog.at_level(logging.WARNING, logger="index.store"):
        res = index.search(qlex, qden, k=4)
    assert res[1].ids == [] and res[1].scores.shape == (0,)
    assert res[0].ids[0] == "d0" and res[2].ids[0] == "d2" and len(res[2].ids) == 4
    assert "1 of 3 queries are all-zero" in caplog.text
    # a nonzero part with weight 0 and the other part absent is also a zero query
    assert index.search(lexicon=lex[:1], k=3, weights=(0, 1))[0].ids == []


def test_zero_document_part_scores_zero_for_that_part():
    lex, den = data(3, seed=10)
    lex[1] = 0
    index = HybridIndex(DL, DD)
    index.add(ids_for(3), lex, den)
    res = index.search(lex[0], den[1], k=3, weights=(1, 1))[0]
    got = dict(zip(res.ids, res.scores))
    assert got["d1"] == pytest.approx(1.0, abs=1e-5)  # cos_lex(d1) = 0 (zero part), cos_dense = 1


def test_add_validation_messages():
    index = HybridIndex(DL, DD)
    lex, den = data(3, seed=11)
    with pytest.raises(ValueError, match="got 2 ids but 3 vectors"):
        index.add(["a", "b"], lex, den)
    with pytest.raises(ValueError, match="dense vectors are required: this is a hybrid index"):
        index.add(["a", "b", "c"], lex)
    with pytest.raises(ValueError, match="same number of rows"):
        index.add(["a", "b", "c"], lex, den[:2])
    with pytest.raises(ValueError, match="got 3 ids but 1 metadata entries"):
        index.add(["a", "b", "c"], lex, den, metadata=[{}])
    with pytest.raises(ValueError, match="metadata for document 'b' must be a dict or None"):
        index.add(["a", "b", "c"], lex, den, metadata=[{}, "text", None])
    with pytest.raises(ValueError, match="ids must be a list of strings, got str"):
        index.add("abc", lex, den)
    with pytest.raises(ValueError, match="non-empty strings, got 3"):
        index.add(["a", 3, "c"], lex, den)
    with pytest.raises(ValueError, match="chunk_size"):
        index.add(["a", "b", "c"], lex, den, chunk_size=0)
    assert len(index) == 0
    index.add([], np.zeros((0, DL)), np.zeros((0, DD)))
    assert len(index) == 0


def test_chunked_add_matches_single_chunk_and_float64_input():
    lex, den = data(50, seed=12)
    a, b = HybridIndex(DL, DD), HybridIndex(DL, DD)
    a.add(ids_for(50), lex, den, chunk_size=7)
    b.add(ids_for(50), lex.astype(np.float64), den.astype(np.float64))
    qlex, qden = data(4, seed=13)
    for ra, rb in zip(a.search(qlex, qden, k=50), b.search(qlex, qden, k=50)):
        assert ra.ids == rb.ids
        np.testing.assert_allclose(ra.scores, rb.scores, atol=1e-6)


def test_failed_add_midway_leaves_index_unchanged(small, monkeypatch):
    index, lex, den = small
    before = index.search(lex[:2], den[:2], k=5)
    original = HybridIndex._doc_vectors
    calls = []

    def flaky(self, parts, sel):
        calls.append(sel)
        if len(calls) == 3:
            raise MemoryError("simulated")
        return original(self, parts, sel)

    monkeypatch.setattr(HybridIndex, "_doc_vectors", flaky)
    new_lex, new_den = data(20, seed=14)
    with pytest.raises(MemoryError):
        index.add(ids_for(20, "n"), new_lex, new_den, chunk_size=5)
    monkeypatch.undo()
    assert len(index) == 200 and index.faiss_index.ntotal == 200 and "n0" not in index
    after = index.search(lex[:2], den[:2], k=5)
    assert [r.ids for r in after] == [r.ids for r in before]
    index.add(ids_for(20, "n"), new_lex, new_den)  # and the same ids can be added afterwards
    assert len(index) == 220


def test_ivf_stages_until_enough_vectors_then_trains():
    lex, den = data(400, seed=15)
    index = HybridIndex(DL, DD, "ivf", nlist=4)  # min_train = 39 * 4 = 156
    index.add(ids_for(100), lex[:100], den[:100])
    assert not index.is_trained and len(index) == 100
    (res,) = index.search(lex[7], den[7], k=3)  # staged documents are searchable (exactly)
    assert res.ids[0] == "d7"
    index.remove(["d8"])
    index.add(["d9"], lex[9] * 2, den[9], upsert=True)
    index.add([f"d{i}" for i in range(100, 400)], lex[100:], den[100:])
    assert index.is_trained and len(index) == 399 and index.faiss_index.ntotal == 399
    assert index.index_options["nlist"] == 4
    index.set_search_options(nprobe=4)
    for i in (7, 9, 250):
        assert index.search(lex[i], den[i], k=1)[0].ids == [f"d{i}"]
    assert "d8" not in index.search(lex[8], den[8], k=399)[0].ids


def test_explicit_train():
    lex, den = data(300, seed=16)
    index = HybridIndex(DL, DD, "sq8", min_train=200)
    with pytest.raises(ValueError, match="needs at least min_train=200"):
        index.train(lex[:50], den[:50])
    index.train(lex, den)
    assert index.is_trained and len(index) == 0
    index.add(ids_for(10), lex[:10], den[:10])
    assert index.search(lex[3], den[3], k=1)[0].ids == ["d3"]
    with pytest.raises(ValueError, match="already trained"):
        index.train(lex, den)
    HybridIndex(DL, DD).train(lex, den)  # flat: nothing to train, no error


def test_len_contains_repr(small):
    index, _, _ = small
    assert len(index) == 200 and "d0" in index and "x" not in index and 3 not in index
    assert "documents=200" in repr(index) and index.dim == DL + DD and index.mode == "hybrid"


def test_faiss_padding_is_stripped_for_approximate_types():
    lex, den = data(400, seed=17)
    index = HybridIndex(DL, DD, "ivf", nlist=8, nprobe=1)
    index.add(ids_for(400), lex, den)
    assert index.is_trained
    (res,) = index.search(lex[0], den[0], k=400)  # one list of 8 probed: fewer than 400 found
    assert 0 < len(res.ids) < 400 and len(res.ids) == len(res.scores) == len(res.metadata)
    assert len(set(res.ids)) == len(res.ids) and np.isfinite(res.scores).all() and res.ids[0] == "d0"


@pytest.mark.parametrize("index_type", ["flat", "hnsw", "fp16"])
def test_faiss_search_matches_idmap_search(index_type):
    import faiss

    from index.faiss_ops import faiss_search

    lex, den = data(300, seed=18)
    index = HybridIndex(DL, DD, index_type)
    index.add(ids_for(300), lex, den)
    if index_type != "hnsw":
        index.remove(["d3", "d4"])  # the id map no longer equals positions
    q = np.ascontiguousarray(np.hstack([lex[:20], den[:20]]) / 3)
    fi = index.faiss_index
    assert isinstance(fi, faiss.IndexIDMap)
    s1, l1 = faiss_search(fi, q, 300)
    s2, l2 = fi.search(q, 300)
    np.testing.assert_array_equal(l1, l2)
    np.testing.assert_array_equal(s1, s2)
