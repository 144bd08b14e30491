"""Sparse exports (lens.export, `lens encode --format`): each format read back keeps the dot products of queries and
documents (exactly for the float formats, within the rounding bound for Pyserini's integer impacts)."""

import json
import math
import re

import numpy as np
import pytest

from index.vectors import l2_normalize, prune_top_m
from lens.cli import main
from lens.export import (
    FORMATS, ExportOptions, check_format, cluster_labels, pyserini_records, quantize, write_export,
)

K = 40


def lexicon(rng: np.random.Generator, n: int, k: int = K, density: float = 0.3) -> np.ndarray:
    """Unit-norm non-negative rows with about ``density`` of their entries non-zero (some rows all zero)."""
    x = rng.exponential(1.0, size=(n, k)) * (rng.random((n, k)) < density)
    x[n // 2] = 0  # an empty vector (a blank text) must still get its record
    return l2_normalize(x.astype(np.float32))


@pytest.fixture()
def data():
    rng = np.random.default_rng(0)
    labels = cluster_labels([[f" word{c}", "x"] for c in range(K)])
    return lexicon(rng, 12), lexicon(rng, 5), labels


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def by_label(records, key, labels, dtype):
    """Dense rows from ``{label: weight}`` dicts."""
    col = {label: c for c, label in enumerate(labels)}
    out = np.zeros((len(records), len(labels)), dtype=dtype)
    for i, r in enumerate(records):
        for label, w in r[key].items():
            out[i, col[label]] = w
    return out


def export(tmp_path, name, x, labels, **kw):
    path = tmp_path / f"{name}-{len(x)}.jsonl"
    write_export(path, name, x, [f"id-{i}" for i in range(len(x))], labels, **kw)
    records = read_jsonl(path)
    assert [r["id"] for r in records] == [f"id-{i}" for i in range(len(x))]
    return records


def test_qdrant_keeps_weights_and_dot_products_exactly(tmp_path, data):
    docs, queries, labels = data
    rows = {}
    for name, x in (("docs", docs), ("queries", queries)):
        records = export(tmp_path, "qdrant", x, labels)
        back = np.zeros_like(x)
        for i, r in enumerate(records):
            assert r["indices"] == sorted(r["indices"]) and all(isinstance(j, int) for j in r["indices"])
            assert all(v > 0 for v in r["values"])
            back[i, r["indices"]] = np.asarray(r["values"], dtype=np.float32)
        assert np.array_equal(back, x)  # every positive weight, float32-exact
        rows[name] = back
    assert records[len(queries) // 2]["indices"] == []
    want = queries.astype(np.float64) @ docs.astype(np.float64).T
    assert np.array_equal(rows["queries"].astype(np.float64) @ rows["docs"].astype(np.float64).T, want)


def test_rank_features_keeps_dot_products_exactly_under_the_field(tmp_path, data):
    docs, queries, labels = data
    d = export(tmp_path, "rank-features", docs, labels, options=ExportOptions(field="lens"))
    q = export(tmp_path, "rank-features", queries, labels, options=ExportOptions(field="lens"))
    assert set(d[0]) == {"id", "lens"}
    assert all(w > 0 for r in d + q for w in r["lens"].values())  # Elasticsearch rejects 0
    d_back, q_back = by_label(d, "lens", labels, np.float32), by_label(q, "lens", labels, np.float32)
    assert np.array_equal(d_back, docs) and np.array_equal(q_back, queries)
    assert np.array_equal(q_back.astype(np.float64) @ d_back.astype(np.float64).T,
                          queries.astype(np.float64) @ docs.astype(np.float64).T)


def quantisation_bound(q: np.ndarray, d: np.ndarray, scale: float) -> float:
    """Bound on |q_hat . d_hat / scale^2 - q . d| for q_hat = round(scale q), d_hat = round(scale d).

    Per shared cluster i, with |e| <= 1/2 the rounding errors: q_hat_i d_hat_i - scale^2 q_i d_i
    = scale q_i e_d + scale d_i e_q + e_q e_d, so |.| <= scale (q_i + d_i) / 2 + 1/4; clusters absent from either
    vector contribute 0 to both products.
    """
    both = (q > 0) & (d > 0)
    return float((q[both] + d[both]).sum() / (2 * scale) + both.sum() / (4 * scale**2))


@pytest.mark.parametrize("scale", [100.0, 7.0])
def test_pyserini_impacts_keep_dot_products_within_the_rounding_bound(tmp_path, data, scale):
    docs, queries, labels = data
    texts = [f"text {i}" for i in range(len(docs))]
    d = export(tmp_path, "pyserini", docs, labels, texts=texts, options=ExportOptions(scale=scale))
    q = export(tmp_path, "pyserini", queries, labels, options=ExportOptions(scale=scale))
    assert [r["contents"] for r in d] == texts and q[0]["contents"] == ""
    for r in d + q:
        assert all(isinstance(v, int) and v > 0 for v in r["vector"].values())  # zero impacts dropped
    d_hat, q_hat = by_label(d, "vector", labels, np.int64), by_label(q, "vector", labels, np.int64)
    assert np.array_equal(d_hat, np.rint(docs.astype(np.float64) * scale))  # round(w * scale), nothing lost
    assert np.array_equal(q_hat, np.rint(queries.astype(np.float64) * scale))
    scores = (q_hat @ d_hat.T) / scale**2
    exact = queries.astype(np.float64) @ docs.astype(np.float64).T
    for i in range(len(queries)):
        for j in range(len(docs)):
            assert abs(scores[i, j] - exact[i, j]) <= quantisation_bound(queries[i], docs[j], scale) + 1e-12
    assert np.abs(scores - exact).max() > 0  # the rounding is real: the bound is what is being tested


def test_quantize_rounds_half_to_even_like_round():
    x = np.array([0.004, 0.005, 0.015, 0.0151, 1.0, 2.5 / 100])
    assert quantize(x, 100).tolist() == [round(v * 100) for v in x.tolist()]


def test_cluster_labels_are_unique_stable_and_safe():
    tokens = [[" statin", "Statin"], ["\n   ", "\t", " Café"], [], ["<s>"], [" statin"], ["a.b c-d"], ["日本"],
              ["x" * 50]]
    labels = cluster_labels(tokens)
    assert labels[:6] == ["c0000_statin", "c0001_cafe", "c0002", "c0003_s", "c0004_statin", "c0005_abcd"]
    assert labels[6] == "c0006" and labels[7] == "c0007_" + "x" * 24
    assert cluster_labels(tokens) == labels == cluster_labels([list(t) for t in tokens])
    assert len(set(labels)) == len(labels)
    assert all(re.fullmatch(r"c\d{4}(_[a-z0-9]+)?", label) for label in labels)
    wide = cluster_labels([["the"]] * 12000)  # the same token everywhere: the ids keep them apart
    assert len(set(wide)) == 12000 and wide[0] == "c00000_the" and wide[-1] == "c11999_the"


@pytest.mark.parametrize("m", [1, 3, K + 5])
def test_top_m_keeps_the_m_heaviest_clusters(tmp_path, data, m):
    docs, _, labels = data
    pruned = prune_top_m(docs, m)
    records = export(tmp_path, "qdrant", pruned, labels)
    for row, r in zip(docs, records):
        positive = int((row > 0).sum())
        assert len(r["indices"]) == min(m, positive)
        if r["indices"]:
            assert min(r["values"]) >= np.sort(row)[::-1][min(m, positive) - 1]


def test_bad_options_and_inputs_are_refused_with_reasons(tmp_path, data):
    docs, _, labels = data
    ids = [str(i) for i in range(len(docs))]
    for bad in (0, -1.0, math.nan, math.inf, True):
        with pytest.raises(ValueError, match="scale must be a finite number > 0"):
            ExportOptions(scale=bad)
    with pytest.raises(ValueError, match="field must be"):
        ExportOptions(field="my field")
    for taken in ("id", "_id", "_source"):  # each record's id, and Elasticsearch's metadata fields
        with pytest.raises(ValueError, match=f"field {taken!r} cannot hold the weights"):
            ExportOptions(field=taken)
    with pytest.raises(ValueError, match="valid: npy, pyserini, qdrant, rank-features"):
        check_format("splade")
    with pytest.raises(ValueError, match="ending in .jsonl"):
        check_format("qdrant", tmp_path / "x.npy")
    out = tmp_path / "x.jsonl"
    with pytest.raises(ValueError, match="'3' appears twice"):
        write_export(out, "qdrant", docs, ids[:-1] + ["3"], labels)
    with pytest.raises(ValueError, match="one id per row"):
        write_export(out, "qdrant", docs, ids[1:], labels)
    with pytest.raises(ValueError, match="one per cluster"):
        write_export(out, "rank-features", docs, ids, labels[1:])
    with pytest.raises(ValueError, match="non-negative"):
        write_export(out, "qdrant", -docs - 1, ids, labels)
    with pytest.raises(ValueError, match="NaN"):
        write_export(out, "pyserini", np.full_like(docs, np.nan), ids, labels)
    with pytest.raises(ValueError, match="needs ids"):
        write_export(out, "qdrant", docs)
    assert not out.exists()
    assert list(pyserini_records(docs[:1] * 0, ["a"], labels)) == [{"id": "a", "contents": "", "vector": {}}]
    assert set(FORMATS) == {"npy", "pyserini", "qdrant", "rank-features"}


# ---------------------------------------------------------------------------------------------- the CLI
def corpus_files(tmp_path):
    docs = [("d1", "cell gene expression"), ("d2", "cancer patients drug dose"), ("d3", "the brain")]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in docs))
    (tmp_path / "q.txt").write_text("gene\texpression\ndrug trial\n")  # a tab inside a query
    return [t for _, t in docs], ["gene\texpression", "drug trial"]


@pytest.mark.parametrize("fmt,key", [("qdrant", None), ("rank-features", "features"), ("pyserini", "vector")])
def test_cli_exports_round_trip(tiny_lens_dir, tiny_encoder, tmp_path, capsys, fmt, key):
    docs, queries = corpus_files(tmp_path)
    base = ["encode", "--model", str(tiny_lens_dir), "--format", fmt]
    assert main(base + ["--input", str(tmp_path / "docs.jsonl"), "--output", str(tmp_path / "d.jsonl")]) == 0
    assert main(base + ["--input", str(tmp_path / "q.txt"), "--output", str(tmp_path / "q.jsonl"), "--queries",
                        "--instruction", "find studies"]) == 0
    assert f"{fmt} records" in capsys.readouterr().out
    d, q = read_jsonl(tmp_path / "d.jsonl"), read_jsonl(tmp_path / "q.jsonl")
    assert [r["id"] for r in d] == ["d1", "d2", "d3"] and [r["id"] for r in q] == ["0", "1"]
    want_d = tiny_encoder.encode_documents(docs)
    want_q = tiny_encoder.encode_queries(queries, instruction="find studies")
    labels = cluster_labels([tiny_encoder.cluster_tokens(c, 8) for c in range(tiny_encoder.num_clusters)])
    if key is None:
        got_d, got_q = (np.stack([np.bincount(r["indices"], r["values"], len(labels)) for r in rs]) for rs in (d, q))
    else:
        got_d, got_q = by_label(d, key, labels, np.float64), by_label(q, key, labels, np.float64)
    if fmt == "pyserini":
        assert [r["contents"] for r in d] == docs  # a query on one line, as a topics file holds it
        assert [r["contents"] for r in q] == ["gene expression", "drug trial"]
        got_d, got_q = got_d / 100, got_q / 100
        atol = 0.5 / 100 + 1e-5
    else:
        atol = 1e-5
    np.testing.assert_allclose(got_d, want_d, atol=atol, rtol=0)
    np.testing.assert_allclose(got_q, want_q, atol=atol, rtol=0)
    np.testing.assert_allclose(got_q @ got_d.T, want_q @ want_d.T, atol=0.05 if fmt == "pyserini" else 1e-5)


def test_cli_top_m_with_npy(tiny_lens_dir, tmp_path):
    docs, _ = corpus_files(tmp_path)
    out = tmp_path / "d.npy"
    assert main(["encode", "--model", str(tiny_lens_dir), "--input", str(tmp_path / "docs.jsonl"), "--output",
                 str(out), "--top-m", "3"]) == 0
    x = np.load(out)
    assert x.shape == (3, 16) and ((x > 0).sum(axis=1) <= 3).all() and ((x > 0).sum(axis=1) == 3).any()


def test_cli_refuses_bad_export_flags_before_loading_the_model(tmp_path, capsys):
    corpus_files(tmp_path)
    base = ["encode", "--model", str(tmp_path / "no-model"), "--input", str(tmp_path / "q.txt")]
    cases = [
        (["--format", "splade", "--output", "o.jsonl"], "invalid choice: 'splade'"),
        (["--format", "splade", "--output", "o.jsonl"], "rank-features"),
        (["--top-m", "0", "--output", "o.npy"], "expected a positive integer, got '0'"),
        (["--top-m", "two", "--output", "o.npy"], "expected a positive integer, got 'two'"),
        (["--format", "qdrant", "--output", str(tmp_path / "o.npy")], "ending in .jsonl"),
        (["--output", str(tmp_path / "o.jsonl")],
         "writes a NumPy matrix: give an output file ending in .npy (got "),
        (["--output", str(tmp_path / "o.jsonl")], "or choose --format pyserini / qdrant / rank-features to write .jsonl"),
        (["--output", str(tmp_path / "o.txt")], "format 'npy' writes a NumPy matrix: give an output file ending in .npy"),
        (["--format", "qdrant", "--scale", "10", "--output", str(tmp_path / "o.jsonl")],
         "--scale applies to --format pyserini, not to --format qdrant"),
        (["--format", "pyserini", "--scale", "0", "--output", str(tmp_path / "o.jsonl")], "scale must be"),
        (["--format", "rank-features", "--kind", "dense", "--output", str(tmp_path / "o.jsonl")],
         "drop --kind dense"),
        (["--top-m", "5", "--kind", "dense", "--output", str(tmp_path / "o.npy")], "--top-m works on lexicon"),
        (["--instruction", "find x", "--output", str(tmp_path / "o.npy")], "--instruction is a query instruction"),
        (["--format", "rank-features", "--field", "_id", "--output", str(tmp_path / "o.jsonl")],
         "field '_id' cannot hold the weights"),
        (["--output", str(tmp_path / "q.txt")], "is the --input: writing would replace the texts"),
    ]
    for extra, message in cases:
        assert main(base + extra) == 2, extra
        err = capsys.readouterr().err
        assert message in err and "no-model" not in err, (extra, err)
    assert not list(tmp_path.glob("o.*"))


def test_cli_encode_keeps_what_a_user_saved_and_numbers_lines_as_wc_does(tiny_lens_dir, tiny_encoder, tmp_path,
                                                                           capsys, caplog):
    """An existing --output is replaced only with --overwrite; a .txt's lines end at newlines alone (a form feed or
    U+2028 inside a line does not shift the ids); a .jsonl of bare strings gets numbered ids in a sparse format; a
    pyserini export counts what it wrote and warns of empty records."""
    import logging

    (tmp_path / "t.txt").write_text("first doc\nsecond\x0cpart of second\r\nthird \u2028 sep\nfourth\n")
    keep = tmp_path / "keep.npy"
    keep.write_bytes(b"precious")
    argv = ["encode", "--model", str(tiny_lens_dir), "--input", str(tmp_path / "t.txt"), "--output", str(keep)]
    assert main(argv) == 2
    assert "exists: pass --overwrite" in capsys.readouterr().err and keep.read_bytes() == b"precious"
    assert main(argv + ["--overwrite"]) == 0
    texts = ["first doc", "second\x0cpart of second", "third \u2028 sep", "fourth"]
    np.testing.assert_allclose(np.load(keep), tiny_encoder.encode_documents(texts), atol=1e-6)
    (tmp_path / "s.jsonl").write_text('"cell gene"\n\n"drug dose"\n')  # ids: line numbers, the blank counted
    assert main(["encode", "--model", str(tiny_lens_dir), "--input", str(tmp_path / "s.jsonl"), "--format", "qdrant",
                 "--output", str(tmp_path / "s.q.jsonl")]) == 0
    assert [r["id"] for r in read_jsonl(tmp_path / "s.q.jsonl")] == ["0", "2"]
    (tmp_path / "m.jsonl").write_text('{"text": "cell gene"}\n{"_id": "b", "text": "drug"}\n')
    assert main(["encode", "--model", str(tiny_lens_dir), "--input", str(tmp_path / "m.jsonl"), "--format", "qdrant",
                 "--output", str(tmp_path / "m.q.jsonl")]) == 2  # b's id would be lost: refused
    assert "m.jsonl:2: this record has an id but the first record has none" in capsys.readouterr().err
    assert not (tmp_path / "m.q.jsonl").exists()
    capsys.readouterr()
    with caplog.at_level(logging.WARNING, logger="lens"):
        assert main(["encode", "--model", str(tiny_lens_dir), "--input", str(tmp_path / "s.jsonl"), "--format",
                     "pyserini", "--scale", "0.01", "--output", str(tmp_path / "p.jsonl")]) == 0
    assert "on average 0.0 of 16 cluster weights per record" in capsys.readouterr().out
    assert "2 of 2 records of non-blank texts hold no weight (every weight rounded to 0: raise --scale)" in caplog.text
    (tmp_path / "b.txt").write_text("cell gene\n \n")  # a blank line: blank, whatever the scale
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="lens"):
        assert main(["encode", "--model", str(tiny_lens_dir), "--input", str(tmp_path / "b.txt"), "--format",
                     "pyserini", "--output", str(tmp_path / "b.jsonl")]) == 0
    assert "1 of 2 texts are blank" in caplog.text and "raise --scale" not in caplog.text
    assert main(["encode", "--model", str(tiny_lens_dir), "--input", str(tmp_path / "b.txt"), "--format",
                 "pyserini", "--scale", "1e12", "--output", str(tmp_path / "big.jsonl")]) == 2
    assert "the largest Anserini reads (a Java int): lower the scale" in capsys.readouterr().err


def test_an_empty_instruction_is_no_instruction_on_every_path(tiny_encoder):
    """"" means no instruction, as sentence-transformers' empty prompt and prompt_name="document" do: the texts are
    encoded as documents (it used to be the template around an empty instruction)."""
    texts = ["cell gene", "drug dose"]
    docs = tiny_encoder.encode_documents(texts)
    for kwargs in ({"instruction": ""}, {"prompt": ""}, {"prompt_name": "document"}):
        np.testing.assert_array_equal(tiny_encoder.encode_queries(texts, **kwargs), docs)
    assert not np.allclose(tiny_encoder.encode_queries(texts), docs)  # the default instruction is one
