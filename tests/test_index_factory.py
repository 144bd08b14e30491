"""index.factory registry, and recall sanity of the approximate index types on small structured data."""

import faiss
import numpy as np
import pytest

from index import HybridIndex
from index.factory import INDEX_TYPES, auto_nlist, get_index_type


def clustered(n, dl, dd, seed, topics=30):
    """Topic-clustered data: sparse non-negative lexicon (log1p of relu) and gaussian dense parts."""
    rng, prng = np.random.default_rng(seed), np.random.default_rng(1234)
    proto_l = np.where(prng.random((topics, dl)) < 0.1, prng.uniform(1, 3, (topics, dl)), 0)
    proto_d = prng.standard_normal((topics, dd))
    t = rng.integers(0, topics, n)
    lex = np.log1p(np.maximum(proto_l[t] + rng.standard_normal((n, dl)) * 0.7 - 0.7, 0)).astype(np.float32)
    den = (proto_d[t] + rng.standard_normal((n, dd))).astype(np.float32)
    return lex, den


N, DL, DD = 3000, 256, 64


@pytest.fixture(scope="module")
def corpus():
    lex, den = clustered(N, DL, DD, seed=0)
    qlex, qden = clustered(50, DL, DD, seed=1)
    ids = [f"d{i}" for i in range(N)]
    flat = HybridIndex(DL, DD)
    flat.add(ids, lex, den)
    truth = [set(r.ids) for r in flat.search(qlex, qden, k=10)]
    return ids, lex, den, qlex, qden, truth


def recall(index, corpus):
    _, _, _, qlex, qden, truth = corpus
    res = index.search(qlex, qden, k=10)
    return float(np.mean([len(t & set(r.ids)) / 10 for t, r in zip(truth, res)]))


def test_registry_names_and_errors():
    assert list(INDEX_TYPES) == ["flat", "hnsw", "ivf", "sq8", "fp16", "ivf-ondisk"]
    with pytest.raises(ValueError, match="unknown index type 'pq'; valid choices: flat, hnsw, ivf, sq8, fp16, ivf-ondisk"):
        get_index_type("pq")
    with pytest.raises(ValueError, match="unknown option\\(s\\) nlist for index type 'hnsw'; valid options: ef_construction, ef_search, m"):
        HybridIndex(8, 4, "hnsw", nlist=3)
    with pytest.raises(ValueError, match="valid options: none"):
        HybridIndex(8, 4, "flat", m=3)
    with pytest.raises(ValueError, match="'m' must be an integer >= 1"):
        HybridIndex(8, 4, "hnsw", m=0)
    with pytest.raises(ValueError, match="'nlist' must be an integer >= 1 or None"):
        HybridIndex(8, 4, "ivf", nlist=2.5)


def test_auto_nlist():
    assert auto_nlist(100_000) == 1265  # 4*sqrt(1e5) = 1264.9; below 1e5 // 39 = 2564
    assert auto_nlist(1000) == 25  # capped by 1000 // 39
    assert auto_nlist(10) == 1
    assert auto_nlist(10**12) == 65536


def test_built_indexes_are_inner_product_with_ids():
    for name, t in INDEX_TYPES.items():
        opts = t.resolve_options({"nlist": 4} if name in ("ivf", "ivf-ondisk") else {})
        idx = t.build(12, opts)
        assert idx.metric_type == faiss.METRIC_INNER_PRODUCT, name
        assert idx.d == 12 and idx.is_trained == (not t.needs_training), name
    hnsw = INDEX_TYPES["hnsw"].build(12, INDEX_TYPES["hnsw"].resolve_options({"ef_search": 99}))
    inner = faiss.downcast_index(hnsw.index)
    assert inner.hnsw.efSearch == 99 and inner.hnsw.nb_neighbors(1) == 32  # M=32 -> 32 links above level 0
    ivf = INDEX_TYPES["ivf"].build(12, INDEX_TYPES["ivf"].resolve_options({"nlist": 4, "nprobe": 16}))
    assert ivf.nprobe == 4  # capped at nlist


@pytest.mark.parametrize(
    "index_type, options, minimum",
    [("hnsw", {}, 0.95), ("ivf", {"nlist": 16, "nprobe": 4}, 0.9), ("ivf", {}, 0.95), ("sq8", {}, 0.95), ("fp16", {}, 0.98)],
)
def test_recall_against_flat(corpus, index_type, options, minimum):
    ids, lex, den = corpus[:3]
    index = HybridIndex(DL, DD, index_type, **options)
    index.add(ids, lex, den)
    assert index.is_trained and len(index) == N
    assert recall(index, corpus) >= minimum


def test_ivf_nprobe_is_applied(corpus):
    ids, lex, den = corpus[:3]
    index = HybridIndex(DL, DD, "ivf", nlist=32, nprobe=1)
    index.add(ids, lex, den)
    low = recall(index, corpus)
    index.set_search_options(nprobe=32)  # all lists: exact
    assert recall(index, corpus) == 1.0 > low
    with pytest.raises(ValueError, match="search-time options: nprobe"):
        index.set_search_options(nlist=8)


def test_training_plans():
    ivf = INDEX_TYPES["ivf"]
    plan = ivf.training_plan(ivf.resolve_options({}), 100_000)  # nlist from the data, above min_train
    assert plan.options["nlist"] == 1265 and plan.min_train == 1265 and plan.train_size == 40 * 1265
    plan = ivf.training_plan(ivf.resolve_options({}), 500)
    assert plan.options["nlist"] == 25 and plan.min_train == 1000  # too few yet: stays staged
    plan = ivf.training_plan(ivf.resolve_options({"nlist": 64}), 10)
    assert plan.min_train == 39 * 64 and plan.train_size == 40 * 64
    plan = ivf.training_plan(ivf.resolve_options({"nlist": 64, "min_train": 10, "train_size": 5}), 10)
    assert plan.min_train == 64 and plan.train_size == 64  # k-means needs one point per list
    sq8 = INDEX_TYPES["sq8"]
    plan = sq8.training_plan(sq8.resolve_options({}), 50_000)
    assert plan.min_train == 1000 and plan.train_size == 20_000
    with pytest.raises(ValueError, match="needs no training"):
        INDEX_TYPES["flat"].training_plan({}, 10)


def test_ivf_auto_nlist_above_default_min_train():
    rng = np.random.default_rng(3)
    n = 64_000  # auto nlist = 1012 > the default min_train of 1000
    lex, den = np.abs(rng.standard_normal((n, 4), dtype=np.float32)), rng.standard_normal((n, 2), dtype=np.float32)
    index = HybridIndex(4, 2, "ivf", train_size=2000)
    index.add([f"d{i}" for i in range(n)], lex, den, chunk_size=16384)
    assert index.is_trained and index.index_options["nlist"] == 1012 and len(index) == n
