"""Query lexicon weighed by the corpus's inverse document frequencies (`lens search --idf`, `HybridIndex.search(
idf=True)`): the maths against a naive reference, search against brute force, the frequencies kept exact by
additions, replacements and removals, saved and checked with the index, summed over shards, refused where they
cannot be had; through Python, the CLI and `lens serve`."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from index import HybridIndex, load_index
from index.df_part import DF_FILE
from index.shards import merge_indexes
from index.vectors import cluster_idf, document_vectors, l2_normalize, prune_top_m, query_vectors
from lens.cli import main
from lens.corpus import load_corpus
from lens.hybrid import HybridEncoder
from lens.indexing import build_index
from lens.search import Searcher

from corpus_helpers import write_corpus

QUERIES = ["cancer drug", "brain cell protein", "blood risk treatment"]


def _vectors(n: int, seed: int = 0, dim: int = 12):
    rng = np.random.default_rng(seed)
    lex = np.abs(rng.standard_normal((n, dim))).astype(np.float32) * (rng.random((n, dim)) > 0.6)
    dense = rng.standard_normal((n, 6)).astype(np.float32)
    return [f"d{i}" for i in range(n)], lex, dense


def naive_idf(lex: np.ndarray) -> np.ndarray:
    n = lex.shape[0]
    out = []
    for c in range(lex.shape[1]):
        df = sum(1 for row in lex if row[c] > 0)
        out.append(math.log(1 + (n - df + 0.5) / (df + 0.5)))
    return np.array(out)


def brute_force(lex, dense, q_lex, q_dense, weights, k, idf=None):
    q = q_lex * idf if idf is not None else q_lex
    scores = document_vectors(lex, dense) @ query_vectors(q, q_dense, *weights)[0]
    order = np.lexsort((np.arange(len(scores)), -scores))[:k]
    return order, scores[order]


# ---- maths ------------------------------------------------------------------------------------------------------

def test_cluster_idf_is_bm25s_idf_of_each_cluster():
    _, lex, _ = _vectors(30)
    df = (lex > 0).sum(axis=0)
    np.testing.assert_allclose(cluster_idf(df, 30), naive_idf(lex), rtol=1e-6)
    assert cluster_idf(np.array([0, 30]), 30)[0] > cluster_idf(np.array([0, 30]), 30)[1] > 0  # rare weighs more
    with pytest.raises(ValueError, match="between 0 and n"):
        cluster_idf(np.array([3, 31]), 30)


# ---- HybridIndex ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("index_type,atol", [("flat", 1e-5), ("hnsw", 1e-5), ("fp16", 2e-3)])
@pytest.mark.parametrize("weights", [(1.0, 0.0), (0.5, 0.5), (0.2, 0.8)])
def test_search_with_idf_equals_the_brute_force_reference(index_type, atol, weights):
    ids, lex, dense = _vectors(40)
    ix = HybridIndex(12, 6, index_type, idf=True)
    ix.add(ids, lex, dense)
    _, q_lex, q_dense = _vectors(3, seed=5)
    idf = naive_idf(lex)
    for i, hit in enumerate(ix.search(q_lex, q_dense, k=7, weights=weights, idf=True)):
        rows, scores = brute_force(lex, dense, q_lex[i : i + 1], q_dense[i : i + 1], weights, 7, idf)
        np.testing.assert_allclose(hit.scores, scores, atol=atol)
        assert hit.ids[0] == ids[rows[0]]
    plain = ix.search(q_lex, q_dense, k=7, weights=weights, idf=False)
    rows, scores = brute_force(lex, dense, q_lex[:1], q_dense[:1], weights, 7)
    np.testing.assert_allclose(plain[0].scores, scores, atol=atol)


def test_idf_changes_the_ranking_toward_rare_clusters():
    """Two documents equally close to the query: the one sharing the query's rare cluster wins only with idf."""
    lex = np.zeros((6, 4), np.float32)
    lex[:, 0] = 1.0  # a cluster every document has
    lex[0, 1] = 1.0  # a rare one
    lex[1:, 2] = 1.0  # common to all but the first
    ix = HybridIndex(4, None, idf=True)
    ix.add([f"d{i}" for i in range(6)], lex)
    q = np.array([[1.0, 0.3, 0.6, 0.0]], np.float32)
    assert ix.search(q, k=1, idf=False)[0].ids == ["d1"]
    assert ix.search(q, k=1)[0].ids == ["d0"]


def test_additions_replacements_and_removals_keep_the_frequencies_exact():
    ids, lex, dense = _vectors(30)
    ix = HybridIndex(12, 6, "flat", top_m=4, idf=True)
    ix.add(ids[:20], lex[:20], dense[:20])
    ix.add(ids[20:], lex[20:], dense[20:])
    new = _vectors(5, seed=9)[1]
    ix.add(ids[:5], new, dense[:5], upsert=True)  # replaced
    ix.remove(ids[25:])
    held = np.concatenate([new, lex[5:25]])
    df, n = ix.document_frequencies()
    assert n == 25
    np.testing.assert_array_equal(df, (prune_top_m(held, 4) > 0).sum(axis=0))  # as stored: after top_m
    fresh = HybridIndex(12, 6, "flat", top_m=4, idf=True)
    fresh.add(ids[:25], held, np.concatenate([dense[:5], dense[5:25]]))
    _, q_lex, q_dense = _vectors(2, seed=3)
    for a, b in zip(ix.search(q_lex, q_dense, k=10, idf=True), fresh.search(q_lex, q_dense, k=10, idf=True)):
        assert a.ids == b.ids
        np.testing.assert_allclose(a.scores, b.scores, atol=1e-6)


def test_the_part_follows_a_naive_reference_through_random_changes(tmp_path):
    """DocFrequencyPart (flat blocks, one per addition) against a dict of sets, through random additions and
    removals, a save and a read: the same counts, documents and rows."""
    from index.df_part import DocFrequencyPart

    rng = np.random.default_rng(7)
    part, ref, next_label = DocFrequencyPart(20), {}, 0
    for step in range(30):
        if ref and rng.random() < 0.4:
            gone = rng.choice(list(ref), size=min(len(ref), int(rng.integers(1, 4))), replace=False).tolist()
            part.remove(gone + [10_000])  # an id not held is ignored
            for g in gone:
                del ref[g]
        else:
            n = int(rng.integers(0, 4))
            rows = [np.flatnonzero(rng.random(20) < 0.3) for _ in range(n)]
            labels = list(range(next_label, next_label + n))
            next_label += n
            part.add_rows(rows, labels)
            ref.update({lab: set(r.tolist()) for lab, r in zip(labels, rows)})
        want = np.zeros(20, np.int64)
        for clusters in ref.values():
            want[list(clusters)] += 1
        np.testing.assert_array_equal(part.df, want)
        assert len(part) == len(ref) and sorted(part.labels.tolist()) == sorted(ref)
    part.add_rows([np.array([1, 4])], [next_label])
    ref[next_label] = {1, 4}
    with pytest.raises(ValueError, match="already holds"):
        part.add_rows([np.array([1])], [next_label])
    part.write(tmp_path / DF_FILE)
    with open(tmp_path / DF_FILE, "rb") as f:
        back = DocFrequencyPart.read(f, tmp_path / DF_FILE, part.manifest_entry(), 20)
    np.testing.assert_array_equal(back.df, part.df)
    back.remove(list(ref))  # every row read back is its own: removing them all leaves nothing counted
    assert len(back) == 0 and not back.df.any()


def test_saved_with_the_index_its_default_kept_and_tampering_refused(tmp_path):
    ids, lex, dense = _vectors(20)
    ix = HybridIndex(12, 6, idf=True)
    ix.add(ids, lex, dense)
    ix.save(tmp_path / "ix")
    back = load_index(tmp_path / "ix")
    assert back.idf is True
    np.testing.assert_array_equal(back.document_frequencies()[0], (lex > 0).sum(axis=0))
    _, q_lex, q_dense = _vectors(2, seed=4)
    default, on, off = (back.search(q_lex, q_dense, k=5, idf=v) for v in (None, True, False))
    assert [r.ids for r in default] == [r.ids for r in on] and default[0].scores.tolist() == on[0].scores.tolist()
    assert off[0].scores.tolist() == ix.search(q_lex, q_dense, k=5, idf=False)[0].scores.tolist()
    path = tmp_path / "ix" / DF_FILE
    path.write_bytes(path.read_bytes()[:-8] + b"\0" * 8)
    with pytest.raises(ValueError, match=DF_FILE):
        load_index(tmp_path / "ix")


def _rewrite_df(directory, version: int, **arrays):
    """Rewrite ``directory``'s df.npz with ``arrays`` (numpy arrays by member name) and its manifest's records
    to match (checksum, part version), as a save of that version would have written them."""
    from index.manifest import file_record
    from lens.atomic.writes import write_json

    with open(directory / DF_FILE, "wb") as f:
        np.savez(f, **arrays)
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["files"][DF_FILE] = file_record(directory / DF_FILE)
    manifest["df"]["version"] = version
    write_json(directory / "manifest.json", manifest)


def test_a_read_only_load_keeps_the_counts_alone_searches_alike_and_refuses_changes(tmp_path):
    """``load(read_only=True)`` (lens search, lens serve) reads df.npz's counts, not every document's clusters:
    the same search, and every change or save refused with what to do, the saved index left as it was."""
    ids, lex, dense = _vectors(30)
    ix = HybridIndex(12, 6, top_m=5, idf=True)
    ix.add(ids, lex, dense)
    ix.save(tmp_path / "ix")
    before = {p.name: p.read_bytes() for p in (tmp_path / "ix").iterdir() if p.is_file()}
    full, ro = load_index(tmp_path / "ix"), load_index(tmp_path / "ix", read_only=True)
    assert ro._df.counts_only and not full._df.counts_only and len(ro._df.labels) == 0
    np.testing.assert_array_equal(ro.document_frequencies()[0], full.document_frequencies()[0])
    assert ro.document_frequencies()[1] == 30 and ro.idf
    _, q_lex, q_dense = _vectors(3, seed=6)
    for a, b in zip(ro.search(q_lex, q_dense, k=8), full.search(q_lex, q_dense, k=8)):
        assert a.ids == b.ids and a.scores.tolist() == b.scores.tolist()
    for change in (lambda: ro.add(["new"], lex[:1], dense[:1]), lambda: ro.add(ids[:1], lex[:1], dense[:1], upsert=True),
                   lambda: ro.remove(ids[:2]), lambda: ro.save(tmp_path / "ix"), lambda: ro.save(tmp_path / "copy")):
        with pytest.raises(ValueError, match="read-only.*read_only=False"):
            change()
    assert not (tmp_path / "copy").exists() and len(ro) == 30
    assert {p.name: p.read_bytes() for p in (tmp_path / "ix").iterdir() if p.is_file()} == before
    full.remove(ids[:2])  # the full load still changes and saves
    full.save(tmp_path / "ix")
    assert load_index(tmp_path / "ix", read_only=True).document_frequencies()[1] == 28


def test_a_first_version_part_without_counts_still_loads_both_ways(tmp_path):
    """df.npz of version 1 (saved before the counts were kept) holds the rows alone: both loads count them."""
    ids, lex, dense = _vectors(20)
    ix = HybridIndex(12, 6, idf=True)
    ix.add(ids, lex, dense)
    ix.save(tmp_path / "ix")
    with np.load(tmp_path / "ix" / DF_FILE) as z:
        rows = {k: z[k] for k in ("labels", "clusters", "offsets")}
    _rewrite_df(tmp_path / "ix", 1, **rows)
    for read_only in (False, True):
        back = load_index(tmp_path / "ix", read_only=read_only)
        np.testing.assert_array_equal(back.document_frequencies()[0], (lex > 0).sum(axis=0))
    full = load_index(tmp_path / "ix")
    full.save(tmp_path / "again")
    assert json.loads((tmp_path / "again" / "manifest.json").read_text())["df"]["version"] == 2


@pytest.mark.parametrize("read_only,bad,words", [
    (False, "df_plus_one", "counts are not those of its rows"),
    (True, "df_above_n", "do not fit"),
    (True, "df_shape", "do not fit"),
])
def test_counts_that_disagree_are_refused(tmp_path, read_only, bad, words):
    """A df.npz whose checksum is right but whose counts are wrong (written by a broken tool) is refused."""
    ids, lex, dense = _vectors(10)
    ix = HybridIndex(12, 6, idf=True)
    ix.add(ids, lex, dense)
    ix.save(tmp_path / "ix")
    with np.load(tmp_path / "ix" / DF_FILE) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["df"] = {"df_plus_one": arrays["df"] + 1, "df_above_n": arrays["df"] + 11,
                    "df_shape": arrays["df"][:-1]}[bad]
    _rewrite_df(tmp_path / "ix", 2, **arrays)
    with pytest.raises(ValueError, match=words):
        load_index(tmp_path / "ix", read_only=read_only)


def test_an_index_without_frequencies_keeps_no_part_and_refuses_idf(tmp_path):
    """Made without idf (``--no-idf``; also every index saved before LENS kept frequencies): no df.npz, no
    ``df`` in the manifest, searched as before, and idf refused with what to do."""
    ids, lex, dense = _vectors(10)
    ix = HybridIndex(12, 6)
    ix.add(ids, lex, dense)
    ix.save(tmp_path / "ix")
    manifest = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    assert "df" not in manifest and not (tmp_path / "ix" / DF_FILE).exists()
    old = load_index(tmp_path / "ix")
    assert old.document_frequencies() is None and old.idf is False
    _, q_lex, q_dense = _vectors(1, seed=2)
    assert len(old.search(q_lex, q_dense, k=3)[0].ids) == 3
    with pytest.raises(ValueError, match="rebuild it with `lens index build` without --no-idf"):
        old.search(q_lex, q_dense, k=3, idf=True)


def test_a_dense_only_index_refuses_idf():
    with pytest.raises(ValueError, match="dense-only"):
        HybridIndex(None, 6, idf=True)
    ix = HybridIndex(None, 6)
    ix.add(["a"], dense=np.ones((1, 6), np.float32))
    assert ix.document_frequencies() is None and not ix.idf
    with pytest.raises(ValueError, match="dense-only"):
        ix.search(dense=np.ones(6, np.float32), idf=True)
    with pytest.raises(ValueError, match="True, False or None"):
        ix.search(dense=np.ones(6, np.float32), idf="yes")


def _merged(tmp_path, ids, lex, dense, split: int):
    """Two saved indexes (the rows before ``split``, the rest) merged into the sharded index ``tmp_path / "all"``."""
    for name, rows in (("a", slice(0, split)), ("b", slice(split, len(ids)))):
        part = HybridIndex(12, 6, idf=True)
        part.add(ids[rows], lex[rows], dense[rows])
        part.save(tmp_path / name)
    merge_indexes(tmp_path / "all", [tmp_path / "a", tmp_path / "b"])
    return tmp_path / "all"


def test_merged_shards_weigh_by_the_whole_index(tmp_path):
    """Each shard's frequencies alone would weigh a query differently in each; summed, a sharded search scores as
    one index over every document."""
    ids, lex, dense = _vectors(36)
    sharded = load_index(_merged(tmp_path, ids, lex, dense, 12))
    whole = HybridIndex(12, 6, idf=True)
    whole.add(ids, lex, dense)
    np.testing.assert_array_equal(sharded.document_frequencies()[0], whole.document_frequencies()[0])
    _, q_lex, q_dense = _vectors(3, seed=8)
    assert sharded.idf
    for a, b in zip(sharded.search(q_lex, q_dense, k=8), whole.search(q_lex, q_dense, k=8)):
        assert a.ids == b.ids
        np.testing.assert_allclose(a.scores, b.scores, atol=1e-6)


def test_a_sharded_index_loads_read_only_too(tmp_path):
    ids, lex, dense = _vectors(24)
    merged = _merged(tmp_path, ids, lex, dense, 10)
    full, ro = load_index(merged), load_index(merged, read_only=True)
    np.testing.assert_array_equal(ro.document_frequencies()[0], full.document_frequencies()[0])
    _, q_lex, q_dense = _vectors(2, seed=1)
    for a, b in zip(ro.search(q_lex, q_dense, k=6), full.search(q_lex, q_dense, k=6)):
        assert a.ids == b.ids and a.scores.tolist() == b.scores.tolist()
    with pytest.raises(ValueError, match="read-only"):
        ro.remove([ids[0], ids[20]])  # one in each shard: refused before either changes
    assert ids[0] in ro and ids[20] in ro and len(ro) == 24
    with pytest.raises(ValueError, match="read-only"):
        ro.save(tmp_path / "copy")
    assert not (tmp_path / "copy").exists()


# ---- lens: build, Searcher, CLI, serve --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def built(tiny_encoder, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("idf")
    docs = load_corpus(write_corpus(tmp / "corpus.jsonl", 24))
    build_index(docs, tmp / "idf", HybridEncoder(tiny_encoder, "lens"), chunk_size=5, show_progress_bar=False,
                bm25=False)  # the vector search alone, against the reference
    build_index(docs, tmp / "plain", HybridEncoder(tiny_encoder, "lens"), chunk_size=5, show_progress_bar=False,
                idf=False, bm25=False)
    return tmp, docs


def test_searcher_follows_the_index_default_and_the_call(built, tiny_encoder):
    tmp, docs = built
    on, plain = Searcher.open(tmp / "idf"), Searcher.open(tmp / "plain")
    assert on.index.idf and not plain.index.idf  # a build weighs by idf unless told not to (DEFAULT_IDF)
    both = tiny_encoder.encode_documents([d.full_text for d in docs], output="both")
    q = tiny_encoder.encode_queries(QUERIES, output="both")
    idf = naive_idf(both.lexicon)
    with pytest.raises(ValueError, match="keeps no document frequencies"):
        plain.search(QUERIES, k=5, idf=True)
    for i, (a, b) in enumerate(zip(on.search(QUERIES, k=5), on.search(QUERIES, k=5, idf=True))):
        rows, scores = brute_force(both.lexicon, both.dense, q.lexicon[i : i + 1], q.dense[i : i + 1], (0.5, 0.5),
                                   5, idf)
        assert a.ids == b.ids
        np.testing.assert_allclose(a.scores, scores, atol=1e-4)
    for a, b in zip(on.search(QUERIES, k=5, idf=False), plain.search(QUERIES, k=5)):
        assert a.ids == b.ids
    assert on.index._df.counts_only  # a searcher loads the index read-only: the counts, not the rows
    assert not Searcher.open(tmp / "idf", read_only=False).index._df.counts_only


def test_cli_build_info_and_search(built, tiny_lens_dir, tmp_path, capsys):
    tmp, _ = built
    corpus = write_corpus(tmp_path / "corpus.jsonl", 12)
    ix = tmp_path / "ix"
    assert main(["-q", "index", "build", "--corpus", str(corpus), "--output", str(ix), "--model", str(tiny_lens_dir),
                 "--dense", "lens"]) == 0
    capsys.readouterr()
    assert main(["index", "info", str(ix)]) == 0
    assert "searches weigh the query lexicon by them by default" in capsys.readouterr().out
    runs = {}
    for flag in ("--idf", "--no-idf"):
        assert main(["search", str(ix), "cancer drug", "-k", "12", "--json", flag]) == 0
        runs[flag] = [h["score"] for h in json.loads(capsys.readouterr().out)[0]["hits"]]
    assert main(["search", str(ix), "cancer drug", "-k", "12", "--json"]) == 0
    assert [h["score"] for h in json.loads(capsys.readouterr().out)[0]["hits"]] == runs["--idf"]
    assert runs["--idf"] != runs["--no-idf"]
    assert main(["-q", "index", "build", "--corpus", str(corpus), "--output", str(tmp_path / "off"), "--model",
                 str(tiny_lens_dir), "--dense", "lens", "--no-idf"]) == 0
    capsys.readouterr()
    assert main(["search", str(tmp_path / "off"), "cancer drug", "-k", "12", "--json"]) == 0
    assert [h["score"] for h in json.loads(capsys.readouterr().out)[0]["hits"]] == runs["--no-idf"]
    # a merged index says it of its shards: every shard keeps frequencies, or how many do not
    other = write_corpus(tmp_path / "other.jsonl", 6, prefix="e", seed=1)
    for flags, name in (([], "e-idf"), (["--no-idf"], "e-off")):
        assert main(["-q", "index", "build", "--corpus", str(other), "--output", str(tmp_path / name), "--model",
                     str(tiny_lens_dir), "--dense", "lens", *flags]) == 0
    for name, second, said in (("all-idf", "e-idf", "kept in all 2 shards; searches weigh the query lexicon by them "
                                                      "by default"),
                               ("mixed", "e-off", "idf: none: 1 of 2 shards keep no cluster frequencies")):
        assert main(["-q", "index", "merge", str(tmp_path / name), str(ix), str(tmp_path / second)]) == 0
        capsys.readouterr()
        assert main(["index", "info", str(tmp_path / name)]) == 0
        out = capsys.readouterr().out
        assert said in out and "what --filter can name): snippet, title\n" in out
        assert main(["index", "info", str(tmp_path / name), "--json"]) == 0  # the same, for scripts
        record = json.loads(capsys.readouterr().out)
        assert record["idf"] == {"kept": name == "all-idf", "default": name == "all-idf"}
        assert [s["documents"] for s in record["shards"]] == [12, 6] and record["documents"] == 18
        assert record["bm25"]["searchable"] and record["bm25"]["documents"] == 18 and record["verified"]
        assert record["metadata_fields"] == ["snippet", "title"]  # what --filter can name, over both shards
        assert load_index(tmp_path / name).metadata_fields() == record["metadata_fields"]  # as the server says
    assert main(["index", "info", str(ix), "--json", "--no-verify"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["shards"] is None and record["documents"] == 12 and not record["verified"]
    assert record["idf"] == {"kept": True, "default": True} and record["dims"]["lexicon"] == 16


def test_serve_takes_idf_per_request(built):
    from lens.serve import RequestError, SearchService

    tmp, _ = built
    service = SearchService(tmp / "idf")
    want = Searcher.open(tmp / "idf").search(QUERIES[:2], k=4, idf=False)
    got = service.search({"queries": QUERIES[:2], "k": 4, "idf": False})["results"]
    for g, w in zip(got, want):
        assert [h["id"] for h in g["hits"]] == w.ids
        np.testing.assert_allclose([h["score"] for h in g["hits"]], w.scores, rtol=1e-6)
    assert service.info()["idf"] is True and SearchService(tmp / "idf", idf=False).info()["idf"] is False
    with pytest.raises(ValueError, match="keeps no document frequencies"):
        SearchService(tmp / "plain", idf=True)  # refused at the start, not at the first request
    with pytest.raises(RequestError, match='"idf" must be true, false or null'):
        service.search({"query": "cancer", "idf": "yes"})
