"""Metadata filters in search: the filtered top-k equals the unfiltered ranking cut to the matching documents."""

import logging

import numpy as np
import pytest

from index import HybridIndex
from index.metadata import DocTable, check_filter, encode_metadata, missing_fields
from index.shards import ShardedIndex

N, LEX, DENSE = 240, 24, 8
OPTIONS = {"flat": {}, "hnsw": {"ef_search": 256}, "ivf": {"nlist": 4, "min_train": 100, "nprobe": 4},
           "sq8": {"min_train": 100, "train_size": 200}, "fp16": {},
           "ivf-ondisk": {"nlist": 4, "min_train": 100, "nprobe": 4}}


def corpus():
    rng = np.random.default_rng(0)
    lex = rng.random((N, LEX)).astype(np.float32) * (rng.random((N, LEX)) < 0.3)
    dense = rng.standard_normal((N, DENSE)).astype(np.float32)
    ids = [f"d{i}" for i in range(N)]
    meta = [{"group": i % 3, "source": ["wiki", "news", "forum", "web"][i % 4], "tags": ["x", "y", "z"][: 1 + i % 3],
             "new": i % 5 == 0} for i in range(N)]
    meta[7] = None  # a document without metadata matches no filter
    return ids, lex, dense, meta


def naive(ids, meta, full, flt):
    """The reference: every document's score from an unfiltered search, kept where the metadata matches."""
    def matches(m):
        if m is None:
            return False
        for field, values in flt.items():
            values = values if isinstance(values, list) else [values]
            held = m.get(field)
            held = held if isinstance(held, list) else [held]
            if not any(type(h) is type(v) and h == v for h in held for v in values):
                return False
        return True

    keep = {i for i, m in zip(ids, meta) if matches(m)}
    return [(i, s) for i, s in zip(full.ids, full.scores) if i in keep]


FILTERS = [{"group": 1}, {"source": ["wiki", "forum"]}, {"tags": "z"}, {"new": True, "group": [0, 2]},
           {"source": "web", "tags": "y"}]


@pytest.mark.parametrize("index_type", list(OPTIONS))
def test_filtered_search_equals_the_ranking_cut_to_the_matches(index_type, tmp_path):
    ids, lex, dense, meta = corpus()
    options = dict(OPTIONS[index_type])
    search_options = {k: options.pop(k) for k in ("ef_search", "nprobe") if k in options}
    ix = HybridIndex(LEX, DENSE, index_type, **options)
    ix.add(ids, lex, dense, metadata=meta)
    ix = HybridIndex.load(ix.save(tmp_path / "ix"))  # as saved (ivf-ondisk: lists memory-mapped)
    ix.set_search_options(**search_options)
    assert ix.is_trained or index_type in ("flat", "hnsw", "fp16")
    q_lex, q_dense = lex[:4] + 0.1, dense[:4]
    full = ix.search(q_lex, q_dense, k=N)
    for flt in FILTERS:
        got = ix.search(q_lex, q_dense, k=7, filter=flt)
        for f, g in zip(full, got):
            want = naive(ids, meta, f, flt)[:7]
            assert g.ids == [i for i, _ in want], (index_type, flt)
            np.testing.assert_allclose(g.scores, [s for _, s in want], atol=1e-6)
            assert all(ix.metadata(i) == m for i, m in zip(g.ids, g.metadata))


def test_untrained_staging_sharded_and_k_above_the_matches():
    ids, lex, dense, meta = corpus()
    staged = HybridIndex(LEX, DENSE, "ivf", nlist=4, min_train=10_000)  # stays in the exact staging index
    staged.add(ids, lex, dense, metadata=meta)
    assert not staged.is_trained
    sharded = ShardedIndex([HybridIndex(LEX, DENSE) for _ in range(3)])
    for s, part in zip(sharded.shards, np.array_split(np.arange(N), 3)):
        s.add([ids[i] for i in part], lex[part], dense[part], metadata=[meta[i] for i in part])
    q_lex, q_dense = lex[10:12], dense[10:12]
    for ix in (staged, sharded):
        full = ix.search(q_lex, q_dense, k=N)
        got = ix.search(q_lex, q_dense, k=N, filter={"source": "news"})  # k above the 60 matches: all of them
        for f, g in zip(full, got):
            want = naive(ids, meta, f, {"source": "news"})
            assert len(want) == 60 and g.ids == [i for i, _ in want]


def test_no_match_warns_and_returns_no_hits(caplog):
    ids, lex, dense, meta = corpus()
    ix = HybridIndex(LEX, DENSE)
    ix.add(ids, lex, dense, metadata=meta)
    with caplog.at_level(logging.WARNING, logger="index.store"):
        (hits,) = ix.search(lex[0], dense[0], k=5, filter={"source": "tv"})
    assert hits.ids == [] and "no document matches the filter" in caplog.text
    sharded = ShardedIndex([ix])
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        (hits,) = sharded.search(lex[0], dense[0], k=5, filter={"group": "1"})  # "1" is text; groups are numbers
    assert hits.ids == [] and caplog.text.count("no document matches the filter") == 1


@pytest.mark.parametrize("flt,match", [
    ({}, "non-empty dict"),
    ("source=wiki", "non-empty dict"),
    ({"source": []}, "empty list"),
    ({"source": None}, "strings, numbers or booleans"),
    ({"source": {"a": 1}}, "strings, numbers or booleans"),
    ({'so"urce': "wiki"}, "without double quotes"),
    ({"x": float("nan")}, "strings, numbers or booleans"),
])
def test_bad_filters_are_refused(flt, match):
    ids, lex, dense, meta = corpus()
    ix = HybridIndex(LEX, DENSE)
    ix.add(ids[:5], lex[:5], dense[:5], metadata=meta[:5])
    with pytest.raises(ValueError, match=match):
        ix.search(lex[0], dense[0], filter=flt)


def test_numpy_values_filter_as_python_ones():
    """A value from a numpy array (np.int64, np.bool_, an array of values) filters as the Python number it is
    (np.int64 was refused as not a number, while np.float64 passed)."""
    assert check_filter({"year": np.int64(2020)}) == check_filter({"year": 2020})
    assert check_filter({"ok": np.bool_(True)}) == check_filter({"ok": True})
    assert check_filter({"year": np.array([2020, 2021])}) == check_filter({"year": [2020, 2021]})
    assert all(type(v) is int for v in check_filter({"year": np.array([2020, 2021])})[0][1])


def test_values_match_by_json_type():
    table = DocTable()
    metas = [{"v": 1}, {"v": "1"}, {"v": True}, {"v": 1.0}, {"v": [1, "a"]}, {"v": {"w": 1}}, None, {"u": 1}]
    table.insert(range(len(metas)), [f"d{i}" for i in range(len(metas))],
                 [encode_metadata(m, "x") for m in metas])
    assert table.matching(check_filter({"v": 1})).tolist() == [0, 3, 4]  # 1 and 1.0 are one JSON number
    assert table.matching(check_filter({"v": "1"})).tolist() == [1]
    assert table.matching(check_filter({"v": True})).tolist() == [2]
    assert table.matching(check_filter({"v": "a"})).tolist() == [4]  # a list field: any item
    assert table.matching(check_filter({"w": 1})).tolist() == []  # a nested field is named by its path
    assert table.matching(check_filter({"v.w": 1})).tolist() == [5]


def test_dotted_fields_reach_into_nested_objects_scanned_or_indexed():
    """BEIR corpora keep fields such as the author under ``metadata``: ``metadata.author`` finds them, by a scan
    and then by the field's index, and a field no document has says which fields there are."""
    metas = [{"title": "t", "metadata": {"author": ["ann", "bob"][i % 2], "year": 2000 + i % 3,
                                         "venue": {"name": ["acl", "sigir"][i % 2]}}} for i in range(12)]
    metas[3] = {"title": "t", "metadata": "flat text"}  # not an object: holds no nested field
    table = DocTable()
    table.insert(range(12), [f"d{i}" for i in range(12)], [encode_metadata(m, "x") for m in metas])
    want = [i for i in range(12) if i != 3 and i % 2 == 0]
    for _ in range(3):  # a scan, then (a field filtered twice) its FieldIndex
        assert table.matching(check_filter({"metadata.author": "ann"})).tolist() == want
        assert table.matching(check_filter({"metadata.venue.name": ["acl"]})).tolist() == want
        assert table.matching(check_filter({"metadata.author": "bob", "metadata.year": 2001})).tolist() == [1, 7]
    assert "metadata.author" in table.indexed_fields
    assert table.matching(check_filter({"author": "ann"})).tolist() == []
    assert missing_fields([table], check_filter({"metadata.author": "x"})) is None  # the value matches nothing
    note = missing_fields([DocTable(), table], check_filter({"author": "ann", "title": "t"}))
    assert note.startswith("no document has the metadata field 'author'; fields they have: metadata, "
                           "metadata.author, metadata.venue.name, metadata.year, title (")  # d3's metadata is text
    with pytest.raises(ValueError, match="empty name between its dots"):
        check_filter({"metadata..author": "ann"})


def test_a_field_filtered_twice_gets_an_index_that_matches_like_the_scan(tmp_path):
    rng = np.random.default_rng(5)
    kinds = [1, 2, 1.5, "1", "a", "b", True, False, [1, "a"], ["b", 2.0], {"x": 1}, None]
    metas = [None if i % 13 == 0 else {"v": kinds[i % len(kinds)], "t": f"t{rng.integers(4)}", "n": int(i % 3)}
             for i in range(200)]
    metas[5] = {"t": "t1"}  # no "v" at all
    table = DocTable()
    table.insert(range(len(metas)), [f"d{i}" for i in range(len(metas))], [encode_metadata(m, "x") for m in metas])

    def postings():
        return int("v" in table.indexed_fields)

    filters = [{"v": 1}, {"v": "a"}, {"v": [True, 2]}, {"v": 1.5, "t": "t2"}, {"t": ["t0", "t3"], "n": 0},
               {"v": False}, {"v": "x"}, {"n": [1, 2], "v": ["b", 1]}]
    assert postings() == 0
    for i, flt in enumerate(filters):
        checked = check_filter(flt)
        got = table.matching(checked)
        assert got.tolist() == table._scan(checked).tolist(), flt  # the index answers as the scan does
        assert got.tolist() == sorted(got.tolist())
        assert postings() == (i >= 1)  # "v" filtered a second time: indexed
    table.save(tmp_path / "docs.sqlite")  # the index is not part of the saved table
    saved = DocTable.load(tmp_path / "docs.sqlite")
    assert saved.indexed_fields == frozenset()
    assert saved.matching(check_filter({"v": 1})).tolist() == table.matching(check_filter({"v": 1})).tolist()

    table.insert([500], ["new"], [encode_metadata({"v": "a"}, "new")])  # a change drops the index
    assert postings() == 0
    assert 500 in table.matching(check_filter({"v": "a"})).tolist()  # rebuilt: "v" was filtered before
    assert postings() == 1
    table.delete([500])
    assert 500 not in table.matching(check_filter({"v": "a"})).tolist()


def test_remembered_matches_follow_every_change():
    ids, lex, dense, meta = corpus()
    ix = HybridIndex(LEX, DENSE)
    ix.add(ids[:30], lex[:30], dense[:30], metadata=meta[:30])
    flt = {"source": "web"}

    def found():
        return sorted(ix.search(lex[0], dense[0], k=N, filter=flt)[0].ids)

    assert found() == sorted(f"d{i}" for i in range(3, 30, 4) if i != 7) == found()  # the second from memory
    ix.add(["extra"], lex[:1], dense[:1], metadata=[{"source": "web"}])
    assert "extra" in found()
    ix.remove(["d3"])
    assert "d3" not in found()
    ix.add(["d7"], lex[:1], dense[:1], metadata=[{"source": "web"}], upsert=True)  # d7 had no metadata
    assert "d7" in found()


def test_approximate_types_look_further_under_a_restrictive_filter():
    from index.faiss_ops import filtered_breadth

    assert filtered_breadth(16, 1000, 1000, 64) == 16  # no filter's worth of loss: unchanged
    assert filtered_breadth(16, 1000, 100, 64) == 64  # 160, capped at nlist
    assert filtered_breadth(16, 1000, 300, 64) == 54  # ceil(16 * 1000 / 300)
    assert filtered_breadth(16, 1000, 0, 64) == 64
    ids, lex, dense, meta = corpus()
    ix = HybridIndex(LEX, DENSE, "ivf", nlist=16, min_train=100)
    ix.add(ids, lex, dense, metadata=meta)
    ix.set_search_options(nprobe=1)  # one list of 16: an unfiltered search sees about 1/16 of the documents
    q_lex, q_dense = lex[:8] + 0.1, dense[:8]
    exact = HybridIndex(LEX, DENSE)
    exact.add(ids, lex, dense, metadata=meta)
    flt = {"source": "news", "new": True}  # 12 of 240: 1 x 240 / 12 = 20 lists, so all 16 are probed
    for got, want in zip(ix.search(q_lex, q_dense, k=10, filter=flt), exact.search(q_lex, q_dense, k=10, filter=flt)):
        assert got.ids == want.ids


def test_hnsw_scores_a_narrow_filter_exactly_and_walks_the_graph_for_a_wide_one():
    import faiss

    from index.faiss_ops import hnsw_filter_is_exact

    # a walk with ef 64 over m 32 links computes about 64 * 32 distances; widened by total / allowed under a filter
    assert hnsw_filter_is_exact(64, 32, 30_000, 300)  # ef 6400: ~205k distances vs 300 matches
    assert hnsw_filter_is_exact(64, 32, 30_000, 6000)  # ef 320: ~10k vs 6000
    assert not hnsw_filter_is_exact(64, 32, 30_000, 9000)  # ef 214: ~6.8k vs 9000
    assert not hnsw_filter_is_exact(64, 32, 30_000, 30_000)
    assert hnsw_filter_is_exact(64, 32, 30_000, 0)

    rng = np.random.default_rng(3)
    n, lex_dim, dense_dim = 3000, 16, 8
    lex = rng.random((n, lex_dim)).astype(np.float32)
    dense = rng.standard_normal((n, dense_dim)).astype(np.float32)
    ids = [f"d{i}" for i in range(n)]
    meta = [{"rare": i % 100 == 0, "half": i % 2} for i in range(n)]
    ix = HybridIndex(lex_dim, dense_dim, "hnsw", m=4)
    ix.add(ids, lex, dense, metadata=meta)
    ix.set_search_options(ef_search=16)
    exact = HybridIndex(lex_dim, dense_dim)
    exact.add(ids, lex, dense, metadata=meta)
    q_lex, q_dense = lex[:5] + 0.05, dense[:5]

    def walked(flt) -> int:
        faiss.cvar.hnsw_stats.reset()
        got = ix.search(q_lex, q_dense, k=10, filter=flt)
        for g, w in zip(got, exact.search(q_lex, q_dense, k=10, filter=flt)):
            if flt == {"rare": True}:  # scored exactly: the same hits and scores as the flat index
                assert g.ids == w.ids
                np.testing.assert_allclose(g.scores, w.scores, atol=1e-5)
            else:  # approximate, but it finds most of them
                assert len(set(g.ids) & set(w.ids)) >= 5
        return faiss.cvar.hnsw_stats.ndis

    assert walked({"rare": True}) == 0  # 30 matches <= 16 * 100 * 4: no graph distance computed
    assert walked({"half": 1}) > 0  # 1500 matches > 32 * 4: the graph is walked


def test_the_field_index_survives_a_rolled_back_change():
    table = DocTable()
    table.insert(range(6), [f"d{i}" for i in range(6)], [encode_metadata({"v": i % 3}, "x") for i in range(6)])
    assert table.matching(check_filter({"v": 0})).tolist() == [0, 3]
    assert table.matching(check_filter({"v": 1})).tolist() == [1, 4]  # the second filter on "v": indexed
    with pytest.raises(RuntimeError):
        with table.transaction():
            table.insert([9], ["d9"], [encode_metadata({"v": 2}, "x")])
            raise RuntimeError("undo")
    assert table.matching(check_filter({"v": 2})).tolist() == [2, 5]  # rebuilt, without the undone row
    assert len(table._fields["v"]) == 6  # one posting per document


def test_a_field_with_too_many_values_is_scanned_not_indexed(monkeypatch, caplog):
    from index import metadata

    table = DocTable()
    metas = [{"title": f"t{i}", "v": i % 2, "tags": ["a", "a", i % 3]} for i in range(12)]
    table.insert(range(12), [f"d{i}" for i in range(12)], [encode_metadata(m, "x") for m in metas])
    monkeypatch.setattr(metadata, "FIELD_INDEX_MAX_VALUES", 4)
    with caplog.at_level("INFO", logger="index.metadata"):
        for flt in ({"title": "t3"}, {"title": ["t5", "t7"], "v": 1}, {"tags": ["a", 2]}, {"tags": 1, "v": 0}):
            checked = check_filter(flt)
            assert table.matching(checked).tolist() == table._scan(checked).tolist(), flt
    assert table.matching(check_filter({"title": "t9"})).tolist() == [9]
    assert table.indexed_fields == frozenset({"v", "tags"})  # 12 titles > 4: scanned each time
    assert "'title' has more than 4 distinct values" in caplog.text
    assert len(table._fields["tags"]) == 24  # "a" twice in a list is one posting: 12 x {"a", i % 3}


def test_field_index_lookup_equals_a_naive_reference():
    from index.metadata import FieldIndex

    rng = np.random.default_rng(3)
    pool = [("text", "x", "x"), ("text", "1", "1"), ("integer", 1, 1), ("real", 1.0, 1.0), ("true", 1, True),
            ("false", 0, False), ("integer", 2, 2), ("null", None, None), ("array", "[1]", None)]
    rows = [(*pool[k][:2], int(i)) for i in range(300) for k in rng.choice(len(pool), size=rng.integers(0, 4))]
    rows += [("text", "far", 10**6), ("text", "near", 7), ("text", "near", 7)]  # few ids over a wide range
    index = FieldIndex.build(rows)
    for values in (["x"], [1], [1.0], [True], [False], ["1", 2], [2, True, "x"], ["nothing"], [3], ["x", "x"],
                   ["far", "near", "far"], ["near"]):
        want = sorted({i for t, v, i in rows for q in values if (
            (t == "text" and isinstance(q, str) and v == q)
            or (t in ("integer", "real") and not isinstance(q, (bool, str)) and v == q)
            or (t in ("true", "false") and isinstance(q, bool) and (t == "true") == q))})
        assert index.lookup(values).tolist() == want, values
    assert FieldIndex.build(rows, max_values=3) is None  # eight distinct keys


def test_a_filter_with_thousands_of_values_or_fields_matches_as_a_loop_does():
    """SQLite refuses an expression over 1000 terms deep: the scan groups values and fields, with the same matches."""
    metas = [{"t": f"t{i}", "g": i % 7, **{f"f{j}": 1 for j in range(i % 3)}} for i in range(300)]
    table = DocTable()
    table.insert(range(len(metas)), [f"d{i}" for i in range(len(metas))], [encode_metadata(m, "x") for m in metas])
    many_values = {"t": [f"t{i}" for i in range(0, 3000, 3)] + ["nope"] * 500, "g": [0, 1, 2]}
    many_fields = {f"f{j}": 1 for j in range(2)} | {f"missing{j}": 1 for j in range(1100)}
    for flt in (many_values, many_fields, {"t": [f"t{i}" for i in range(1500)]}):
        def ok(m):
            return all(m.get(f) in (v if isinstance(v, list) else [v]) for f, v in flt.items())

        expected = [i for i, m in enumerate(metas) if ok(m)]
        assert table._scan(check_filter(flt)).tolist() == expected
        assert table.matching(check_filter(flt)).tolist() == expected
