"""The pure parts of the suite's studies over cached vectors: benchmarks/feedback.py (Rocchio on LENS vectors, BM25
with RM3), term_floor.py's paired test, df_load.py, doc_table_load.py, int8_batching.py's comparison, bm25_part.py,
length_prior.py's table, exact_space.py's BM25 over any terms and its presence cosine, and the set labels they
print."""

from __future__ import annotations

import json

import numpy as np
import pytest
from bench_helpers import load_script


@pytest.fixture(scope="module")
def feedback():
    return load_script("feedback")


def test_rocchio_moves_each_query_toward_its_documents_mean(feedback):
    rng = np.random.default_rng(0)
    docs, queries = rng.random((6, 5)).astype(np.float32), rng.random((2, 5)).astype(np.float32)
    top, weights = np.array([[0, 2], [5, 1]]), rng.random(5).astype(np.float32)
    got = feedback.rocchio(queries, docs, top, 0.5, weights)
    for i in range(2):
        centroid = (docs[top[i, 0]] + docs[top[i, 1]]) / 2 * weights
        want = queries[i] + 0.5 * centroid / np.linalg.norm(centroid)
        np.testing.assert_allclose(got[i], want / np.linalg.norm(want), rtol=1e-5)
    np.testing.assert_allclose(feedback.rocchio(queries, docs, top, 0.0),
                               queries / np.linalg.norm(queries, axis=1, keepdims=True), rtol=1e-6)


TEXTS = ["wing flutter at supersonic speed", "flutter of thin panels in supersonic flow",
         "boundary layer transition on a flat plate", "heat transfer in the boundary layer of a cone"]


def test_rm3_without_feedback_weight_ranks_as_bm25(feedback):
    from lens.bm25 import BM25Index, tokenize

    bm25, q = BM25Index(TEXTS), tokenize(["supersonic flutter", "boundary layer heat"])
    first = np.stack([bm25.scores(t) for t in q])
    got = feedback.rm3_scores(bm25, q, tokenize(TEXTS), original_weight=1.0)
    np.testing.assert_allclose(got, first / np.array([[len(t)] for t in q]), rtol=1e-5)


def test_rm3_brings_in_the_feedback_documents_terms(feedback):
    """A query matching one document only: its feedback adds that document's other terms, so a document sharing
    them but no query term is scored above zero."""
    from lens.bm25 import BM25Index, tokenize

    bm25, q = BM25Index(TEXTS), tokenize(["wing"])
    plain = bm25.scores(q[0])
    got = feedback.rm3_scores(bm25, q, tokenize(TEXTS), fb_docs=1, fb_terms=3)[0]
    assert plain[1] == 0 and got[1] > 0  # "flutter", "supersonic" came from the wing document
    assert np.argmax(got) == 0 and got[2] == 0 == got[3]


def test_set_labels_name_a_variant_by_its_directory(tmp_path):
    common = load_script("_common")
    (tmp_path / "title-only" / "adi").mkdir(parents=True)
    assert common.set_label(tmp_path / "title-only" / "adi", "adi") == "adi (title-only)"
    assert common.set_label("adi", "adi") == "adi"


def test_df_load_measures_both_loads(tmp_path):
    df_load = load_script("df_load")
    out = tmp_path / "df"
    assert df_load.main(["--docs", "300", "--nonzeros", "20", "--clusters", "64", "--out", str(out)]) == 0
    meta = json.loads(out.with_suffix(".json").read_text())
    rows, counts = (meta["loads"][k] for k in ("with its rows (read_only=False)", "counts only (read_only=True)"))
    assert rows["df_sum"] == counts["df_sum"] == 300 * 20
    assert counts["retained_bytes"] < rows["retained_bytes"]



def test_doc_table_load_measures_both_loads(tmp_path):
    """benchmarks/doc_table_load.py: both loads answer the same filter; the table read in place adds less memory
    than the copy of a table of several MB."""
    script = load_script("doc_table_load")
    out = tmp_path / "docs"
    assert script.main(["--docs", "20000", "--queries", "20", "--out", str(out)]) == 0
    meta = json.loads(out.with_suffix(".json").read_text())
    copy, lean = (meta["loads"][script.MODES[m]] for m in ("copy", "in-place"))
    assert copy["filter_matches"] == lean["filter_matches"] == 20000 // script.SOURCES
    assert meta["file_bytes"] > 20000 * 300
    assert lean["loaded_rss_bytes"] < copy["loaded_rss_bytes"]
    assert "Read in place against copied" in out.with_suffix(".md").read_text()



def test_int8_batching_compares_each_texts_two_vectors():
    script = load_script("int8_batching")
    a = np.array([[0.6, 0.8, 0.0], [1.0, 0.0, 0.0]], dtype=np.float32)
    b = np.array([[0.8, 0.6, 0.0], [1.0, 0.0, 0.0]], dtype=np.float32)
    got = script._compare(a, b)
    assert got["cos_min"] == pytest.approx(0.96) and got["cos_mean"] == pytest.approx(0.98)
    assert got["diff_max"] == pytest.approx(0.2) and got["diff_mean"] == pytest.approx(0.4 / 3)  # zeros left out
    meta = {"command": "x", "model": "default", "set": "adi", "texts": 2, "queries": True, "repeats": 2,
            "threads": 1, "machine_line": "a CPU",
            "modes": {"float32": {**script._compare(a, a), "texts_per_s": 3.0},
                      "int8-batched": {**got, "cos_to_float32_mean": 0.99, "texts_per_s": 5.5}}}
    lines = script.render(meta)
    assert any(line.startswith("| float32 | 1.000000 |") and line.endswith("| - | 3.00 |") for line in lines)
    assert any(line.startswith("| int8-batched | 0.960000 | 0.980000 |") and line.endswith("| 0.99000 | 5.50 |")
               for line in lines)
    assert lines[-1] == "Machine: a CPU."

def test_term_floor_pairs_the_index_bm25_part_with_the_hybrid():
    """benchmarks/term_floor.py's paired test: the index's three-part run against the hybrid's, per query, and the
    table that renders it (a run saved without it renders without it)."""
    term_floor = load_script("term_floor")
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 1}}
    better = {"q1": {"a": 2.0, "b": 1.0}, "q2": {"b": 2.0, "a": 1.0}, "q3": {"c": 2.0, "a": 1.0}}
    worse = {"q1": {"b": 2.0, "a": 1.0}, "q2": {"a": 2.0, "b": 1.0}, "q3": {"c": 2.0, "a": 1.0}}
    got = term_floor._paired(qrels, better, worse)
    assert got["wins"] == 2 and got["losses"] == 0 and got["diff"] > 0 and 0 < got["p_randomization"] <= 1
    floor = {"lexicon": 0.5, "expansion_only": 0.4, "query_own_share": 0.1, "hybrid": 0.6, "hybrid+bm25": 0.6,
             "index_bm25": {"0.1": 0.65}}
    meta = {"command": "x", "model": "default", "quantize": "int8", "bm25_weights": [0.1],
            "rows": [{"set": "adi", "bm25": 0.5, "dense": 0.5, "bm25+dense": 0.55, "floors": {"0.0": floor}}]}
    assert not any("paired" in line for line in term_floor.render(meta))
    floor["index_bm25_vs_hybrid"] = {"0.1": got}
    assert any(line.startswith("| adi | 0.0 | +") and "2/0" in line for line in term_floor.render(meta))
    assert not any("queries alone" in line for line in term_floor.render(meta))  # both sides (runs before --sides)
    assert any("The floor on queries alone" in line for line in term_floor.render({**meta, "sides": "queries"}))
    assert any("The floor on documents alone" in line for line in term_floor.render({**meta, "sides": "documents"}))


def test_bm25_part_bench_measures_the_part_against_bm25s_and_its_shards(tmp_path):
    """bm25_part.py's measurement on a tiny corpus: the part's scores are bm25s's, its shards' the whole part's,
    and the bytes, sizes and times it reports are there and positive."""
    bench = load_script("bm25_part")
    texts = TEXTS * 3
    got = bench.measure(texts, ["supersonic flutter", "boundary layer heat", "the"], shards=2)
    assert got["documents"] == len(texts) and got["queries"] == 2  # a query of stopwords only is left out
    assert got["max_rel_diff"] < 1e-5 and got["sharded_max_rel_diff"] < 1e-6
    assert min(got["part_bytes"].values()) > 0 and got["bm25s_bytes"] > 0 and got["file_bytes"] > 0
    assert all(got[k] > 0 for k in ("part_query_ms", "part_sparse_query_ms", "bm25s_query_ms", "read_s"))
    assert "| 12 |" in "\n".join(bench.render({"command": "x", "corpus": "c", "runs": [got]}))


def test_length_prior_renders_each_gamma_against_zero():
    bench = load_script("length_prior")
    row = {"set": "adi", "mean_length": 40.0, "gammas": [
        {"gamma": 0.0, "lexicon": 0.5, "hybrid": 0.6, "index": 0.7},
        {"gamma": 0.1, "lexicon": 0.52, "hybrid": 0.6, "index": 0.69,
         **{f"{s}_vs_0": {"diff": d, "wins": 3, "losses": 1, "p_randomization": 0.04}
            for s, d in (("lexicon", 0.02), ("hybrid", 0.0), ("index", -0.01))}}]}
    lines = bench.render({"command": "x", "model": "m", "quantize": "int8", "rows": [row]})
    assert "| adi | 40 | 0.0 | 0.500 | 0.600 | 0.700 |" in lines
    assert "| adi | 40 | 0.1 | 0.520 (+0.020, 3/1, p 0.04) | 0.600 (+0.000, 3/1, p 0.04) | 0.690 (-0.010, 3/1, p 0.04) |" in lines


def test_exact_space_bm25_over_any_terms_scores_as_bm25s():
    from lens.bm25 import BM25Index, tokenize

    bench = load_script("exact_space")
    queries = ["supersonic flutter flutter", "boundary layer heat", "nothing matches"]
    got = bench.bm25_matrix(tokenize(TEXTS), tokenize(queries))
    bm25 = BM25Index(TEXTS)
    want = np.stack([bm25.scores(t) for t in tokenize(queries)])
    # bm25s's Lucene scores exactly, a repeated query term counted twice
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert not got[2].any()
    ids = bench.bm25_matrix([[3, 3, 7], [7], [1]], [[7], [3, 9]])  # ints are terms too; 9 is in no document
    assert ids[0, 1] > ids[0, 0] > 0 and ids[1, 1] == ids[1, 2] == 0 and ids[1, 0] > 0


def test_exact_space_presence_cosine_is_idf_weighed_clusters_against_present_ones():
    bench = load_script("exact_space")
    idf = np.array([1.0, 2.0, 3.0, 4.0])
    from index.vectors import support_mask

    got = bench.presence_cosine(support_mask([np.array([0, 1, 1]), np.array([2])], 4),
                                support_mask([np.array([1, 2])], 4), idf)
    q = np.array([0.0, 2.0, 3.0, 0.0]) / np.sqrt(13.0)
    d = np.array([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]]) / np.array([[np.sqrt(2.0)], [1.0]])
    np.testing.assert_allclose(got, q[None] @ d.T, rtol=1e-6)


def test_exact_space_token_forms_merge_case_spacing_and_inflection(tokenizer):
    bench = load_script("exact_space")
    forms = bench.token_forms(tokenizer)
    assert forms.shape == (len(tokenizer),)
    form = dict(zip(tokenizer.convert_ids_to_tokens(list(range(len(tokenizer)))), forms.tolist()))
    assert form["review"] == form["reviews"] == form["reviewed"] and form["cell"] == form["cells"]
    assert form["review"] != form["paper"] and form["<s>"] != form["</s>"]  # other words, and non-words kept apart

    class Spaced:  # a byte-level vocabulary: a leading space is written as U+0120, case is the writer's
        tokens = ["\u0120Flows", "flow", "FLOW", "\u0120flowing", "\u0120.", ".", "\u0120wing"]

        def __len__(self):
            return len(self.tokens)

        def convert_ids_to_tokens(self, ids):
            return [self.tokens[i] for i in ids]

    spaced = bench.token_forms(Spaced()).tolist()
    assert spaced[0] == spaced[1] == spaced[2] == spaced[3]
    assert len({spaced[0], spaced[4], spaced[5], spaced[6]}) == 4


def test_corpus_memory_reads_the_same_texts_both_ways(tmp_path):
    """benchmarks/corpus_memory.py: both opens pass over the same texts (its own check), and the table says which."""
    script = load_script("corpus_memory")
    path = tmp_path / "c.jsonl"
    script.write_corpus(path, 40, 50)
    loaded, lean = (script.child(path, 40, mode, 16) for mode in ("loaded", "in-place"))
    assert loaded["chars"] == lean["chars"] > 40 * 40
    meta = {"command": "x", "docs": 40, "chars": 50, "chunk": 16, "file_bytes": path.stat().st_size,
            "opens": {script.MODES["loaded"]: loaded, script.MODES["in-place"]: lean}, "machine": {"cpu": "a CPU"}}
    lines = script.render(meta)
    assert sum(line.startswith(("| loaded into memory", "| read where it lies")) for line in lines) == 2
    assert lines[-1].startswith("Machine: a CPU")


def test_encode_memory_paths_write_the_same_file(tmp_path):
    """benchmarks/encode_memory.py: the whole and the chunked path write the same bytes (its own check), the stand-in
    encoder gives each text the same vector wherever it is encoded, and the table has a row per path and format."""
    script = load_script("encode_memory")
    stub = script.Stub(50, 7)
    x = stub.encode_documents(["a", "b", "c"])
    assert (np.count_nonzero(x, axis=1) == 7).all() and np.allclose(np.linalg.norm(x, axis=1), 1)
    assert np.array_equal(stub.encode_documents(["b"])[0], x[1])
    runs = {}
    for fmt in ("npy", "qdrant"):
        runs[fmt] = {path: script.child(str(tmp_path / f"{fmt}-{path}"), fmt, 30, 50, 7, 8) for path in script.PATHS}
        assert runs[fmt]["whole"]["sha256"] == runs[fmt]["chunked"]["sha256"]
    meta = {"command": "x", "texts": 30, "clusters": 50, "nonzero": 7, "chunk": 8, "formats": ["npy", "qdrant"],
            "runs": runs, "machine": {"cpu": "a CPU"}}
    lines = script.render(meta)
    assert sum(line.startswith(("| npy |", "| qdrant |")) for line in lines) == 4
    assert lines[-1].startswith("Machine: a CPU")
