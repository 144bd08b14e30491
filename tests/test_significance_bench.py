"""lens bench significance (benchmarks/significance.py): paired tests read from a saved run's per-query file
(``per_query.json.gz``, or ``per_query.json`` in a run saved before they were compressed)."""

from __future__ import annotations

import json

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


def test_verdicts_and_errors(tmp_path):
    assert sig.verdict({"diff": 0.02, "p_ttest": 0.01, "p_randomization": 0.02}) == "A ahead, significant"
    assert sig.verdict({"diff": -0.02, "p_ttest": 0.01, "p_randomization": 0.2}) == "B ahead, not significant"
    with pytest.raises(Exception, match="SYSTEM_A:SYSTEM_B"):
        sig.pair_list("bm25")
    per_query = {"x": {"q1": {"ndcg@10": 0.1}, "q2": {"ndcg@10": 0.3}}, "y": {"q1": {"ndcg@10": 0.2}}}
    run = _run(tmp_path, per_query)
    for pairs, message in (("x:nope", r"\['nope'\] not in this run"), ("x:y", "different queries")):
        with pytest.raises(SystemExit, match=message):
            main(["bench", "significance", "--run", str(run), "--sets", "tiny", "--pairs", pairs, "--output",
                  str(tmp_path / "o")])
    with pytest.raises(SystemExit, match="per_query.json.gz not found.*lens bench beir"):
        main(["bench", "significance", "--run", str(run), "--sets", "absent", "--output",
              str(tmp_path / "o")])
    per_query["y"]["q2"] = {"recall@100": 1.0}
    with pytest.raises(SystemExit, match="measure 'ndcg@10' is not saved"):
        main(["bench", "significance", "--run", str(_run(tmp_path / "b", per_query)), "--sets", "tiny", "--pairs",
              "x:y", "--output", str(tmp_path / "o")])


def test_a_side_can_come_from_another_run(tmp_path):
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
    with pytest.raises(SystemExit, match="not in this run"):
        main(["bench", "significance", "--run", str(first), "--sets", "tiny", "--pairs",
              f"lens-lexicon:bm25@{second}", "--output", str(out)])


def test_an_ateb_run_is_read_per_formulation(tmp_path):
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
                     "--measure", measure, "--output", str(out), "--resamples", "200"]) == 0
        row = json.loads(out.with_suffix(".json").read_text())["sets"][f"piqa/{formulation}"][0]
        assert row["mean_a"] == pytest.approx(mean_a) and row["mean_b"] == pytest.approx(mean_b)
    with pytest.raises(SystemExit, match="average precision is not a mean over queries"):
        main(["bench", "significance", "--run", str(first), "--sets", "piqa/pair-classification", "--pairs", pair,
              "--output", str(out)])
    with pytest.raises(SystemExit, match="no formulation 'classification'"):
        main(["bench", "significance", "--run", str(first), "--sets", "piqa/classification", "--pairs", pair,
              "--output", str(out)])
