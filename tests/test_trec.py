"""TREC run files (lens.trec), `lens search --queries-file --run` and `lens bench beir --save-runs`."""

import json

import pytest

from lens.cli import main
from lens.metrics import evaluate
from lens.trec import read_run, run_lines, write_run

from corpus_helpers import write_corpus


def test_lines_rank_as_trec_eval_and_round_trip_exactly(tmp_path):
    """Ranks in trec_eval's order (score descending, ties by id descending, lens.metrics.ranked) and every score in
    full: a run read back is the run that was judged, near ties included."""
    from lens.metrics import evaluate

    run = {"q2": {"b": 0.5, "a": 0.5, "c": 0.9}, "q1": [("x", 1.0), ("y", -2.0)]}
    assert list(run_lines(run, tag="t")) == [
        "q2 Q0 c 1 0.9 t\n", "q2 Q0 b 2 0.5 t\n", "q2 Q0 a 3 0.5 t\n",
        "q1 Q0 x 1 1.0 t\n", "q1 Q0 y 2 -2.0 t\n"]
    assert list(run_lines(run, depth=1)) == ["q2 Q0 c 1 0.9 lens\n", "q1 Q0 x 1 1.0 lens\n"]
    path = write_run(tmp_path / "sub" / "r.trec", run)
    assert read_run(path) == {"q2": {"c": 0.9, "a": 0.5, "b": 0.5}, "q1": {"x": 1.0, "y": -2.0}}
    # 1e-7 apart: a tie at 6 decimals, which trec_eval would break by id descending, "z" (not relevant) first
    near = {"q": {"a": 3.78898286, "z": 3.78898263, **{f"d{i}": 5.0 + i for i in range(9)}}}
    qrels = {"q": {"a": 1}}
    judged = evaluate(qrels, near).mean["ndcg@10"]
    assert evaluate(qrels, read_run(write_run(tmp_path / "near.trec", near))).mean["ndcg@10"] == judged > 0
    with pytest.raises(ValueError, match="listed twice"):
        list(run_lines({"q": [("a", 1.0), ("a", 0.5)]}))
    for depth in (0, -1, 1.5):
        with pytest.raises(ValueError, match="depth must be a positive number"):
            list(run_lines(run, depth=depth))


@pytest.mark.parametrize("run,match", [
    ({"q 1": {"a": 1.0}}, "query id"),
    ({"q1": {"a b": 1.0}}, "document id"),
    ({"q1": {"a": float("nan")}}, "finite"),
])
def test_bad_runs_are_refused_before_writing(tmp_path, run, match):
    with pytest.raises(ValueError, match=match):
        write_run(tmp_path / "r.trec", run)
    assert not (tmp_path / "r.trec").exists()


@pytest.mark.parametrize("text,match", [
    ("q1 Q0 a 1 0.5 t\nq1 Q0 b 2 zero t\n", "r.trec:2: score 'zero'"),
    ("q1 a 1 0.5\n", ":1: a TREC run line has 6 columns"),
    ("q1 Q0 a 1 0.5 t\nq2 Q0 a 1 0.5 t\nq1 Q0 a 2 0.4 t\n", "r.trec:3: document 'a' is listed twice for query 'q1'"),
    ("q1 Q0 a 1 nan t\n", "r.trec:1: score 'nan'; a run needs finite scores"),
])
def test_malformed_lines_name_the_line(tmp_path, text, match):
    (tmp_path / "r.trec").write_text(text)
    with pytest.raises(ValueError, match=match):
        read_run(tmp_path / "r.trec")


def test_a_gzipped_run_is_read_as_gzip(tmp_path):
    import gzip

    run = {"q1": {"a": 1.5, "b": 0.25}, "q2": {"c": -1.0}}
    text = write_run(tmp_path / "r.trec", run).read_bytes()
    (tmp_path / "r.trec.gz").write_bytes(gzip.compress(text))
    assert read_run(tmp_path / "r.trec.gz") == run
    (tmp_path / "g.trec").write_bytes(gzip.compress(text))  # gzip without the .gz name: named, not a decode error
    with pytest.raises(ValueError, match=r"g.trec: not UTF-8 text .*a gzipped run must end in .gz"):
        read_run(tmp_path / "g.trec")
    (tmp_path / "cut.trec.gz").write_bytes(gzip.compress(text)[:-6])
    with pytest.raises(ValueError, match="cut.trec.gz: not a whole gzip file"):
        read_run(tmp_path / "cut.trec.gz")


def test_cli_search_writes_the_hits_it_would_print(tiny_lens_dir, tmp_path, capsys, caplog):
    corpus = write_corpus(tmp_path / "c.jsonl", 23)
    ix = tmp_path / "ix"
    assert main(["-q", "index", "build", "--corpus", str(corpus), "--output", str(ix), "--model", str(tiny_lens_dir),
                 "--dense", "lens"]) == 0
    queries = {"a1": "cancer drug", "b2": "brain cell blood", "c3": "gene"}
    (tmp_path / "q.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    (tmp_path / "q.tsv").write_text("".join(f"{q}\t{t}\n" for q, t in queries.items()))
    capsys.readouterr()
    assert main(["search", str(ix), *queries.values(), "-k", "5", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    want = {q: {h["id"]: h["score"] for h in r["hits"]} for q, r in zip(queries, printed)}
    (tmp_path / "q.txt").write_text("".join(f"{t}\n" for t in queries.values()))  # ids: 0-based line numbers
    for name in ("q.jsonl", "q.tsv", "q.txt"):
        run = tmp_path / f"{name}.trec"
        assert main(["search", str(ix), "--queries-file", str(tmp_path / name), "-k", "5", "--run", str(run),
                     "--batch-size", "2", "--run-tag", "mine"]) == 0
        assert "wrote the top 5 of 3 queries" in capsys.readouterr().out
        got = read_run(run)
        expected = dict(zip(("0", "1", "2"), want.values())) if name == "q.txt" else want
        assert list(got) == list(expected)
        for q in expected:
            assert list(got[q]) == list(expected[q]) and got[q] == pytest.approx(expected[q], abs=1e-6)
        assert all(line.split()[5] == "mine" for line in run.read_text().splitlines())
    import logging

    with caplog.at_level(logging.WARNING, logger="lens"):  # unquoted words: each a query, and said so
        assert main(["search", str(ix), "cancer", "drug", "-k", "2", "--json"]) == 0
    assert [r["query"] for r in json.loads(capsys.readouterr().out)] == ["cancer", "drug"]
    assert 'searching 2 one-word queries (cancer, drug): each argument is a query; quote' in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="lens"):
        assert main(["search", str(ix), "cancer drug", "gene", "-k", "2", "--json"]) == 0
    assert "one-word queries" not in caplog.text
    (tmp_path / "topics.txt").write_text("a1\tcancer drug\n")  # Anserini's topics: id<TAB>text, named .txt
    assert main(["search", str(ix), "--queries-file", str(tmp_path / "topics.txt")]) == 2
    assert "topics.txt:1: a tab in a .txt of one query a line" in capsys.readouterr().err
    (tmp_path / "q.csv").write_text("a1,cancer drug\n")
    capsys.readouterr()
    assert main(["search", str(ix), "--queries-file", str(tmp_path / "q.csv")]) == 2
    assert "not a file type read as queries; give a BEIR directory" in capsys.readouterr().err
    assert main(["search", str(ix), "cell", "--queries-file", str(tmp_path / "q.tsv")]) == 2
    assert "not both" in capsys.readouterr().err
    assert main(["search", str(ix)]) == 2
    assert "no query" in capsys.readouterr().err
    assert main(["search", str(ix), "cell", "--run", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    (tmp_path / "bad.tsv").write_text("q1 no tab\n")
    assert main(["search", str(ix), "--queries-file", str(tmp_path / "bad.tsv")]) == 2
    assert "bad.tsv:1: a query line is 'id<TAB>text'" in capsys.readouterr().err


def test_bench_saves_the_runs_it_judged(tmp_path):
    from bench_helpers import write_beir
    from lens.corpus import load_qrels
    from test_bench_runner import read, run_bench

    ds = write_beir(tmp_path / "data" / "tiny")
    out = tmp_path / "out"
    run_bench([str(ds), "--systems", "bm25", "--output-dir", str(out), "--cache-dir", str(tmp_path / "c"),
               "--save-runs", "--no-plot"])
    run = read_run(out / "tiny" / "runs" / "bm25.trec")
    ndcg = evaluate(load_qrels(ds / "qrels" / "test.tsv"), run, ("ndcg@10",)).mean["ndcg@10"]
    assert ndcg == pytest.approx(read(out / "tiny" / "results.json")["systems"]["bm25"]["ndcg@10"])


def test_cli_search_takes_queries_after_its_options(tiny_lens_dir, tmp_path, capsys):
    corpus = write_corpus(tmp_path / "c.jsonl", 9)
    ix = tmp_path / "ix"
    assert main(["-q", "index", "build", "--corpus", str(corpus), "--output", str(ix), "--model", str(tiny_lens_dir),
                 "--dense", "none"]) == 0
    capsys.readouterr()
    assert main(["search", str(ix), "-k", "2", "cancer drug", "brain", "--json"]) == 0  # as `make demo` calls it
    assert [r["query"] for r in json.loads(capsys.readouterr().out)] == ["cancer drug", "brain"]
    assert main(["search", str(ix), "cell", "-k", "2", "gene", "--json"]) == 0
    assert [r["query_id"] for r in json.loads(capsys.readouterr().out)] == ["1", "2"]
    assert main(["search", str(ix), "cell", "--bogus"]) == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err
    assert main(["index", "info", str(ix), "extra"]) == 2  # other commands still refuse stray words
    assert "unrecognized arguments: extra" in capsys.readouterr().err


def test_query_files_lose_no_query_and_fail_before_any_search(tiny_lens_dir, tmp_path, capsys, monkeypatch, caplog):
    """A query id given twice is an error naming both lines (it used to keep the last one silently); a TSV header
    line is skipped, a .tsv.gz read; a blank query is named; a query id a run cannot hold is refused before any
    model loads; --json with --run prints the JSON and writes the run."""
    import gzip
    import logging

    from lens.corpus import load_queries
    from lens.search import Searcher

    (tmp_path / "dup.tsv").write_text("q1\tcats and dogs\nq1\tprogramming language\nq2\tcoffee\n")
    with pytest.raises(ValueError, match=r"query id 'q1' appears twice \(lines 1 and 2\)"):
        load_queries(tmp_path / "dup.tsv")
    (tmp_path / "dup.jsonl").write_text('{"_id": "a", "text": "x"}\n\n{"_id": "a", "text": "y"}\n')
    with pytest.raises(ValueError, match=r"query id 'a' appears twice \(lines 1 and 3\)"):
        load_queries(tmp_path / "dup.jsonl")
    (tmp_path / "h.tsv").write_text("query-id\ttext\nq1\tcats\nid\ttext\n")
    assert load_queries(tmp_path / "h.tsv") == {"q1": "cats", "id": "text"}  # the first line only is a header
    (tmp_path / "h.tsv.gz").write_bytes(gzip.compress((tmp_path / "h.tsv").read_bytes()))
    assert load_queries(tmp_path / "h.tsv.gz") == {"q1": "cats", "id": "text"}

    corpus = write_corpus(tmp_path / "c.jsonl", 8)
    corpus.write_text(corpus.read_text() + json.dumps({"_id": "spaced id", "text": "cell gene"}) + "\n")
    ix = tmp_path / "ix"
    with caplog.at_level(logging.WARNING, logger="lens"):
        assert main(["-q", "index", "build", "--corpus", str(corpus), "--output", str(ix), "--model",
                     str(tiny_lens_dir), "--dense", "none"]) == 0
    assert "1 document ids hold whitespace ('spaced id')" in caplog.text
    opened = []
    monkeypatch.setattr(Searcher, "open", classmethod(lambda cls, *a, **k: opened.append(1) or 1 / 0))
    (tmp_path / "blank.jsonl").write_text('{"_id": "q9", "text": "  "}\n')
    (tmp_path / "spaced.tsv").write_text("q 2\tcells\n")
    for name, extra, match in [("dup.tsv", [], "appears twice"), ("blank.jsonl", [], "query 'q9' is empty"),
                               ("spaced.tsv", ["--run", str(tmp_path / "r.trec")],
                                "a query id in a TREC run must be a non-empty string without whitespace")]:
        capsys.readouterr()
        assert main(["search", str(ix), "--queries-file", str(tmp_path / name), *extra]) == 2
        assert match in capsys.readouterr().err
    assert not opened and not (tmp_path / "r.trec").exists()
    monkeypatch.undo()
    assert main(["-q", "index", "remove", str(ix), "spaced id"]) == 0  # a run could not name it
    (tmp_path / "q.tsv").write_text("q1\tcell\nq2\tgene\n")
    capsys.readouterr()
    assert main(["search", str(ix), "--queries-file", str(tmp_path / "q.tsv"), "--json", "-k", "2", "--run",
                 str(tmp_path / "r.trec")]) == 0
    out = capsys.readouterr()
    printed = json.loads(out.out)
    assert [p["query_id"] for p in printed] == ["q1", "q2"] and "wrote the top 2 of 2 queries" in out.err
    assert list(read_run(tmp_path / "r.trec")) == ["q1", "q2"]
    assert main(["search", str(ix), "--queries-file", str(tmp_path / "q.tsv"), "--jsonl", "-k", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line) for line in lines] == printed  # one query per line, the same records
    assert main(["search", str(ix), "cell", "--json", "--jsonl"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err
