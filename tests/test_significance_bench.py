"""lens bench significance (benchmarks/significance.py): paired tests read from a saved run's per-query file
(``per_query.json.gz``, or ``per_query.json`` in a run saved before they were compressed)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from lens.atomic import write_json
from lens.cli import main
from lens.eval import significance as sig
from lens.metrics import paired_test


def _run(tmp_path, per_query: dict, name: str = "tiny", legacy: bool = False):
    """A saved run of one set: its per-query file as the harness writes it, or, ``legacy``, as plain JSON under the
    name runs had before (still read, so that old runs pair with new ones)."""
    (tmp_path / "run" / name).mkdir(parents=True)
    if legacy:
        (tmp_path / "run" / name / "per_query.json").write_text(json.dumps(per_query))
    else:
        write_json(tmp_path / "run" / name / "per_query.json.gz", per_query)
    return tmp_path / "run"


def test_rows_are_paired_tests_on_the_saved_values(tmp_path):
    rng = np.random.default_rng(0)
    a, b = rng.random(40), rng.random(40)
    per_query = {"lens-lexicon": {f"q{i}": {"ndcg@10": float(v), "query_ms": 1.0} for i, v in enumerate(a)},
                 "bm25": {f"q{i}": {"ndcg@10": float(v)} for i, v in enumerate(b)}}
    run = _run(tmp_path, per_query)
    out = tmp_path / "sig"
    assert main(["bench", "significance", "--run", str(run), "--sets", "tiny", "--pairs", "lens-lexicon:bm25",
                 "--output", str(out), "--resamples", "500"]) == 0
    saved = json.loads(out.with_suffix(".json").read_text())
    row = saved["sets"]["tiny"][0]
    order = sorted(per_query["bm25"])  # the script pairs queries by id, not by file order
    ref = paired_test([per_query["lens-lexicon"][q]["ndcg@10"] for q in order],
                      [per_query["bm25"][q]["ndcg@10"] for q in order], resamples=500)
    assert row == {"a": "lens-lexicon", "b": "bm25", **ref.__dict__}
    table = out.with_suffix(".md").read_text()
    assert f"| tiny | lens-lexicon | bm25 | {a.mean():.4f} | {b.mean():.4f} | {a.mean() - b.mean():+.4f} |" in table
    assert main(["bench", "significance", "--output", str(out), "--markdown-only", "--note", "read"]) == 0
    assert "- read" in out.with_suffix(".md").read_text()


def test_verdicts_and_errors(tmp_path, capsys):
    assert sig.verdict({"diff": 0.02, "p_ttest": 0.01, "p_randomization": 0.02}) == "A ahead, significant"
    assert sig.verdict({"diff": -0.02, "p_ttest": 0.01, "p_randomization": 0.2}) == "B ahead, not significant"
    with pytest.raises(Exception, match="SYSTEM_A:SYSTEM_B"):
        sig.pair_list("bm25")
    per_query = {"x": {"q1": {"ndcg@10": 0.1}, "q2": {"ndcg@10": 0.3}}, "y": {"q1": {"ndcg@10": 0.2}}}
    run = _run(tmp_path, per_query)
    for pairs, message in (("x:nope", "'nope' not in this run"), ("x:y", "different queries")):
        assert main(["bench", "significance", "--run", str(run), "--sets", "tiny", "--pairs", pairs, "--output",
                     str(tmp_path / "o")]) == 2
        assert message in capsys.readouterr().err
    assert main(["bench", "significance", "--run", str(run), "--sets", "absent", "--output",
                 str(tmp_path / "o")]) == 2
    assert re.search("per_query.json.gz not found.*lens bench beir.*this run holds: tiny", capsys.readouterr().err)
    per_query["y"]["q2"] = {"recall@100": 1.0}
    assert main(["bench", "significance", "--run", str(_run(tmp_path / "b", per_query)), "--sets", "tiny", "--pairs",
                 "x:y", "--output", str(tmp_path / "o")]) == 2
    assert "measure 'ndcg@10' is not saved" in capsys.readouterr().err


def test_the_default_sets_are_the_runs_and_a_missing_system_names_all_it_has(tmp_path, capsys):
    """Without --sets, every set the run holds (not sets it never ran); a system not in the run is named beside
    every system the run holds, and the CLI's input-error status is 2."""
    values = {f"q{i}": {"ndcg@10": i / 10} for i in range(5)}
    run = _run(tmp_path, {"bm25": values, "minilm": values, "bm25+minilm": values}, name="adi")
    out = tmp_path / "sig"
    assert main(["bench", "significance", "--run", str(run), "--pairs", "bm25:minilm", "--output", str(out),
                 "--resamples", "50"]) == 0
    assert list(json.loads(out.with_suffix(".json").read_text())["sets"]) == ["adi"]
    assert main(["bench", "significance", "--run", str(run), "--sets", "adi", "--output", str(out)]) == 2
    assert "holds an earlier result: add --overwrite" in capsys.readouterr().err  # before any work
    other = tmp_path / "sig2"
    assert main(["bench", "significance", "--run", str(run), "--sets", "adi", "--output", str(other)]) == 2
    assert "'lens-lexicon' not in this run (it has bm25, bm25+minilm, minilm)" in capsys.readouterr().err
    assert main(["bench", "significance", "--run", str(tmp_path / "empty"), "--output", str(other)]) == 2
    assert "holds no set" in capsys.readouterr().err


def test_a_side_can_come_from_another_run(tmp_path, capsys):
    rng = np.random.default_rng(1)
    a, b = rng.random(30), rng.random(30)
    first = _run(tmp_path / "one", {"lens-lexicon": {f"q{i}": {"ndcg@10": float(v)} for i, v in enumerate(a)}})
    second = _run(tmp_path / "two", {"lens-lexicon": {f"q{i}": {"ndcg@10": float(v)} for i, v in enumerate(b)}},
                  legacy=True)  # an old run's file pairs with a new one's
    out = tmp_path / "sig"
    pair = f"lens-lexicon:lens-lexicon@{second}"
    assert main(["bench", "significance", "--run", str(first), "--sets", "tiny", "--pairs", pair,
                 "--output", str(out), "--resamples", "300"]) == 0
    row = json.loads(out.with_suffix(".json").read_text())["sets"]["tiny"][0]
    order = sorted(f"q{i}" for i in range(30))
    ref = paired_test([float(a[int(q[1:])]) for q in order], [float(b[int(q[1:])]) for q in order], resamples=300)
    assert row == {"a": "lens-lexicon", "b": f"lens-lexicon@{second}", **ref.__dict__}
    assert main(["bench", "significance", "--run", str(first), "--sets", "tiny", "--pairs",
                 f"lens-lexicon:bm25@{second}", "--output", str(tmp_path / "sig2")]) == 2
    assert f"'bm25' not in {second} (it has lens-lexicon)" in capsys.readouterr().err


def test_an_ateb_run_is_read_per_formulation(tmp_path, capsys):
    """A set TASK/FORMULATION of an ATEB run: per-query measures from the stored ranks and choices, whose means are
    the harness's own (pool_ndcg_at_10, choice_accuracy), paired across two runs by query id."""
    from lens.metrics import choice_accuracy, gold_ranks, pool_ndcg_at_10

    rng = np.random.default_rng(2)
    ids = [f"piqa-dev-{i}" for i in range(25)]
    gold = [int(g) for g in rng.integers(0, 30, size=25)]
    runs = {}
    for name in ("one", "two"):
        scores = [rng.integers(0, 4, size=30).astype(float) for _ in ids]  # small integers: ties happen
        choices = [rng.random(2) for _ in ids]
        per_query = {"answer-pool": {"gold": gold, "ids": ids,
                                     "systems": {"lens-lexicon": {"rank": gold_ranks(scores, gold).tolist()}}},
                     "multiple-choice": {"gold": [0] * 25, "ids": ids, "systems": {
                         "lens-lexicon": {"correct": [int(c[0] > c[1]) for c in choices]}}},
                     "pair-classification": {"gold": [1] * 25, "ids": ids,
                                             "systems": {"lens-lexicon": {"score": [0.5] * 25}}}}
        runs[name] = (_run(tmp_path / name, per_query, "piqa", legacy=name == "two"), scores, choices)
    (first, s1, c1), (second, s2, c2) = runs["one"], runs["two"]
    out = tmp_path / "sig"
    pair = f"lens-lexicon:lens-lexicon@{second}"
    for formulation, measure, mean_a, mean_b in (
            ("answer-pool", "ndcg@10", pool_ndcg_at_10(s1, gold), pool_ndcg_at_10(s2, gold)),
            ("answer-pool", "accuracy", choice_accuracy(s1, gold), choice_accuracy(s2, gold)),
            ("multiple-choice", "accuracy", np.mean([c[0] > c[1] for c in c1]), np.mean([c[0] > c[1] for c in c2]))):
        assert main(["bench", "significance", "--run", str(first), "--sets", f"piqa/{formulation}", "--pairs", pair,
                     "--measure", measure, "--output", str(out), "--resamples", "200", "--overwrite"]) == 0
        row = json.loads(out.with_suffix(".json").read_text())["sets"][f"piqa/{formulation}"][0]
        assert row["mean_a"] == pytest.approx(mean_a) and row["mean_b"] == pytest.approx(mean_b)
    assert main(["bench", "significance", "--run", str(first), "--sets", "piqa/pair-classification", "--pairs", pair,
                 "--output", str(tmp_path / "sig2")]) == 2
    assert "average precision is not a mean over queries" in capsys.readouterr().err
    assert main(["bench", "significance", "--run", str(first), "--sets", "piqa/classification", "--pairs", pair,
                 "--output", str(tmp_path / "sig2")]) == 2
    assert "no formulation 'classification'" in capsys.readouterr().err
    assert main(["bench", "significance", "--run", str(first), "--pairs", pair, "--measure", "accuracy",
                 "--output", str(tmp_path / "sig2"), "--resamples", "50"]) == 2  # every formulation by default: one is not a mean
    assert "piqa/pair-classification" in capsys.readouterr().err


def test_the_repository_script_replaces_its_own_result_where_lens_bench_asks(tmp_path, capsys):
    """python benchmarks/significance.py (script_main) regenerates its committed result when rerun, as every
    benchmark script here does; lens bench significance, the same code, wants --overwrite for that."""
    from lens.eval import script_main

    values = {f"q{i}": {"ndcg@10": i / 10} for i in range(5)}
    run = _run(tmp_path, {"bm25": values, "minilm": values})
    argv = ["--run", str(run), "--pairs", "bm25:minilm", "--output", str(tmp_path / "sig"), "--resamples", "20"]
    assert script_main("lens.eval.significance", "test", argv) == 0
    assert script_main("lens.eval.significance", "test", argv) == 0  # its own result, replaced
    assert main(["bench", "significance", *argv]) == 2
    assert "holds an earlier result: add --overwrite" in capsys.readouterr().err
    (tmp_path / "mine.json").write_text('{"my": "notes"}')
    assert script_main("lens.eval.significance", "test", argv[:-4] + ["--output", str(tmp_path / "mine")]) == 2
    assert (tmp_path / "mine.json").read_text() == '{"my": "notes"}'
