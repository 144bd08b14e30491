"""The BM25 part of an index (index.bm25_part), the three-part fusion (index.bm25_fusion) and exact rescoring from
stored vectors (index.rescore), each against a naive reference."""

from __future__ import annotations

import io
import re
from pathlib import Path

import faiss
import numpy as np
import pytest

from index.bm25_fusion import (bm25_top, candidate_union, fuse, normalise_bm25, query_weights,  # noqa: E402
                                 sparse_lookup, split_weights)
from index.bm25_part import BM25Part  # noqa: E402
from index.factory import get_index_type  # noqa: E402
from index.rescore import stored_scores  # noqa: E402
from lens.bm25 import BM25Index, BM25Stats, tokenize  # noqa: E402

TEXTS = ["The cat sat on the mat", "Dogs and cats living together", "A bird in the hand", "the",
         "Cats chase mice; mice fear cats", "Running dogs ran past the running cat", "Protein folding in cells"]


# ---- fusion maths -----------------------------------------------------------------------------------------------

def test_split_weights():
    assert split_weights(None) == (None, 0.0)
    assert split_weights("0.7,0.3") == ((0.7, 0.3), 0.0)  # text as the CLI and lens serve take it: numbers
    assert split_weights((0.7, 0.3)) == ((0.7, 0.3), 0.0)
    assert split_weights("0.4,0.3,0.3") == ((0.4, 0.3), 0.3)
    assert split_weights([0, 0, 1]) == ((0.0, 0.0), 1.0)
    for bad in ("1,2,-1", "0,0,0", "a,b,c", (1, float("nan"), 1), "1", "a,b", "1,2,3,4"):
        with pytest.raises(ValueError, match=re.escape("two or three numbers LEX,DENSE[,BM25]")):
            split_weights(bad)


def test_query_weights_name_both_forms():
    assert query_weights("0.7,0.3") == (0.7, 0.3) and query_weights([0.4, 0.3, 0.3]) == (0.4, 0.3, 0.3)
    assert query_weights("0.5,0.5,0") == (0.5, 0.5)  # BM25 at 0: the two-part search
    for bad in ("1", "1,2,3,4", "a,b", "0,0", [], (1, float("inf"))):
        with pytest.raises(ValueError, match=re.escape("--weights must be two or three numbers LEX,DENSE[,BM25]")):
            query_weights(bad, "--weights")
    with pytest.raises(ValueError, match="negative weights are not supported"):
        query_weights("-1,2", "--weights")


def test_normalise_and_top():
    np.testing.assert_allclose(normalise_bm25([0, 2, 4]), [0, 0.5, 1])
    assert not normalise_bm25([0, 0]).any()
    s = np.array([0.0, 3.0, 1.0, 3.0, 2.0])
    assert bm25_top(s, 10).tolist() == [1, 3, 4, 2]  # positive only, ties by row
    assert bm25_top(s, 2).tolist() == [1, 3]
    assert bm25_top(s, 10, keep=np.array([1, 0, 1, 1, 0], bool)).tolist() == [3, 2]
    assert candidate_union([3, 1], [1, 7]).tolist() == [1, 3, 7]


def test_fuse_equals_a_naive_loop():
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(1, 30))
        labels = rng.permutation(100)[:n]
        vec, bm = rng.random(n).round(2), rng.random(n).round(1) * (rng.random(n) > 0.3)
        w = float(rng.random())
        k = int(rng.integers(1, n + 2))
        top = max(bm.max(), 0)
        naive = sorted(((v + (w * b / top if top > 0 else 0.0), int(lab)) for lab, v, b in zip(labels, vec, bm)),
                       key=lambda t: (-t[0], t[1]))[:k]
        got_labels, got_scores = fuse(labels, vec, bm, w, k)
        assert got_labels.tolist() == [lab for _, lab in naive]
        np.testing.assert_allclose(got_scores, [s for s, _ in naive], rtol=1e-6)
    with pytest.raises(ValueError, match="one vector and one BM25 score"):
        fuse(np.arange(3), np.zeros(2), np.zeros(3), 1.0, 2)


def test_sparse_lookup_equals_a_dict():
    rng = np.random.default_rng(3)
    for _ in range(20):
        keys = np.unique(rng.integers(0, 50, size=int(rng.integers(0, 15))))
        values = rng.random(len(keys))
        wanted = rng.integers(0, 60, size=int(rng.integers(0, 12)))
        table = dict(zip(keys.tolist(), values.tolist()))
        np.testing.assert_array_equal(sparse_lookup(keys, values, wanted), [table.get(w, 0.0) for w in wanted])


# ---- the BM25 part ----------------------------------------------------------------------------------------------

def _reference(texts, query):
    """Every document's score by lens.bm25 alone (its search, asked for all documents)."""
    idx = BM25Index(texts)
    rows, scores = idx.search([query], len(texts))[0]
    out = np.zeros(len(texts), np.float32)
    out[rows] = scores
    return out


@pytest.mark.parametrize("query", ["cats", "running dog", "protein cells mat", "the a", "unknownword",
                                   "cats cats dog"])
def test_part_scores_as_lens_bm25(query):
    part = BM25Part.build(TEXTS, np.arange(10, 10 + len(TEXTS)))
    got = part.scores(part.query_terms([query])[0])
    np.testing.assert_allclose(got, _reference(TEXTS, query), rtol=1e-6)


@pytest.mark.parametrize("cut", [1, 4, 6])
@pytest.mark.parametrize("query", ["cats", "running dog", "cats cats protein", "unknownword"])
def test_parts_score_with_their_summed_statistics_as_one_corpus(cut, query):
    """Two parts of one corpus (an index's shards), each scoring with the statistics of both added up, give the
    whole corpus's scores (bm25s over all texts); with their own statistics they do not."""
    first, second = BM25Part.build(TEXTS[:cut], range(cut)), BM25Part.build(TEXTS[cut:], range(cut, len(TEXTS)))
    terms = tokenize([query])[0]
    total = BM25Stats.total([first.stats(terms), second.stats(terms)])
    whole = BM25Part.build(TEXTS, range(len(TEXTS))).stats(terms)
    assert (total.documents, total.length) == (whole.documents, whole.length) == (len(TEXTS), whole.length)
    np.testing.assert_array_equal(total.df, whole.df)
    got = np.concatenate([first.scores(terms, total), second.scores(terms, total)])
    np.testing.assert_allclose(got, _reference(TEXTS, query), rtol=1e-6)
    if _reference(TEXTS, query).any():
        own = np.concatenate([first.scores(terms), second.scores(terms)])
        assert not np.allclose(own, _reference(TEXTS, query), rtol=1e-6)


@pytest.mark.parametrize("query", ["cats", "running dog cats", "unknownword", "the a"])
def test_sparse_scores_hold_exactly_the_rows_with_a_query_term(query):
    part = BM25Part.build(TEXTS, np.arange(100, 100 + len(TEXTS)))
    terms = tokenize([query])[0]
    rows, values = part.sparse_scores(terms)
    dense = _reference(TEXTS, query)
    assert rows.tolist() == np.flatnonzero(dense).tolist() and (values > 0).all()
    np.testing.assert_allclose(values, dense[rows], rtol=1e-6)
    np.testing.assert_array_equal(part.scores(terms)[rows], values)


def test_rows_of_follows_additions_and_removals():
    part = BM25Part.build(TEXTS[:3], [30, 10, 20])
    assert part.rows_of([10, 20, 30]).tolist() == [1, 2, 0]
    part.add(TEXTS[3:5], [5, 25])
    part.remove([10])
    assert part.labels.tolist() == [30, 20, 5, 25]
    assert part.rows_of([5, 20, 25, 30]).tolist() == [2, 1, 3, 0]


def test_statistics_for_other_terms_are_refused():
    part = BM25Part.build(TEXTS, range(len(TEXTS)))
    with pytest.raises(ValueError, match="statistics for 1 terms given for a query of 2 terms"):
        part.scores(["cat", "dog"], part.stats(["cat"]))


def test_add_and_remove_equal_a_fresh_build():
    part = BM25Part.build(TEXTS[:4], [0, 1, 2, 3])
    part.add(TEXTS[4:], [4, 5, 6])
    part.remove([1, 3])
    kept = [TEXTS[i] for i in (0, 2, 4, 5, 6)]
    assert part.labels.tolist() == [0, 2, 4, 5, 6]
    for q in ("cats", "dogs living", "bird"):
        np.testing.assert_allclose(part.scores(tokenize([q])[0]), _reference(kept, q), rtol=1e-6)
    terms = part.manifest_entry()["terms"]
    with pytest.raises(ValueError, match="already holds"):
        part.add(["zebra unicorn"], [4])
    assert part.manifest_entry()["terms"] == terms and part.stats(["zebra"]).df.tolist() == [0]  # nothing added
    with pytest.raises(ValueError, match="one text per document"):
        part.add(["x", "y"], [9])


def test_write_read_round_trip_and_checks(tmp_path: Path):
    part = BM25Part.build(TEXTS, np.arange(len(TEXTS)) * 2)
    part.remove([4])
    path = tmp_path / "bm25.npz"
    part.write(path)
    entry = part.manifest_entry()
    with open(path, "rb") as f:
        back = BM25Part.read(f, path, entry)
    assert back.labels.tolist() == part.labels.tolist()
    q = tokenize(["cats dogs"])[0]
    np.testing.assert_array_equal(back.scores(q), part.scores(q))
    with open(path, "rb") as f:
        with pytest.raises(ValueError, match="manifest says 99"):
            BM25Part.read(f, path, {**entry, "documents": 99})
        with pytest.raises(ValueError, match="rebuild the index with `lens index build --bm25`"):
            BM25Part.read(f, path, {**entry, "config": {**entry["config"], "k1": 1.2}})
        with pytest.raises(ValueError, match="version"):
            BM25Part.read(f, path, {**entry, "version": 99})
    with pytest.raises(ValueError, match="could not be read"):
        BM25Part.read(io.BytesIO(b"not a zip"), path, entry)


def test_a_part_read_to_search_only_scores_alike_and_refuses_changes(tmp_path: Path):
    part = BM25Part.build(TEXTS, np.arange(len(TEXTS)) * 3)
    part.remove([6])
    path = tmp_path / "bm25.npz"
    part.write(path)
    with open(path, "rb") as f:
        lean = BM25Part.read(f, path, part.manifest_entry(), scorer_only=True)
    assert lean.scorer_only and not part.scorer_only and lean.labels.tolist() == part.labels.tolist()
    for q in ("cats dogs", "cats cats mat", "unknownword", "running"):
        terms = tokenize([q])[0]
        np.testing.assert_array_equal(lean.scores(terms), part.scores(terms))
        np.testing.assert_array_equal(lean.stats(terms).df, part.stats(terms).df)
        assert lean.stats(terms)[:2] == part.stats(terms)[:2]
    for change in (lambda: lean.add(["x"], [99]), lambda: lean.remove([0]), lambda: lean.write(tmp_path / "x.npz")):
        with pytest.raises(ValueError, match="read to search only .* read_only=False"):
            change()
    assert not (tmp_path / "x.npz").exists()


def test_saved_file_holds_no_pickles(tmp_path: Path):
    path = tmp_path / "bm25.npz"
    BM25Part.build(TEXTS, range(len(TEXTS))).write(path)
    with np.load(path, allow_pickle=False) as z:
        assert {k: z[k].dtype.kind for k in z.files} == {"labels": "i", "terms": "i", "offsets": "i", "vocab": "u"}


# ---- exact rescoring from stored vectors ------------------------------------------------------------------------

@pytest.mark.parametrize("type_name", ["flat", "hnsw", "fp16", "sq8", "ivf"])
def test_stored_scores_equal_the_stored_vectors_dot_products(type_name):
    rng = np.random.default_rng(1)
    d, n = 16, 400
    x = rng.standard_normal((n, d)).astype(np.float32)
    itype = get_index_type(type_name)
    opts = itype.resolve_options({"nlist": 4} if type_name == "ivf" else {})
    index = itype.build(d, opts)
    if itype.needs_training:
        index.train(x)
    labels = np.arange(n, dtype=np.int64) * 3 + 5
    index.add_with_ids(x, labels)
    q = rng.standard_normal((2, d)).astype(np.float32)
    pick = labels[[7, 0, 399, 123]]
    got = stored_scores(index, q, pick)
    ref = q @ x[[7, 0, 399, 123]].T
    tol = 0.05 if type_name == "sq8" else 1e-2 if type_name == "fp16" else 1e-5
    np.testing.assert_allclose(got, ref, atol=tol)
    # what a FAISS search returns for those documents is what stored_scores gives
    scores, found = index.search(q, n) if type_name in ("flat", "fp16", "sq8") else (None, None)
    if scores is not None:
        for row in range(2):
            by_label = dict(zip(found[row].tolist(), scores[row].tolist()))
            np.testing.assert_allclose(got[row], [by_label[int(p)] for p in pick], rtol=1e-5, atol=1e-5)
    with pytest.raises(KeyError):
        stored_scores(index, q, np.array([1], np.int64))
    assert faiss is not None
