"""lens bench runs: TREC run files judged against qrels, each run tested against a baseline; naive references."""

import json
import math

import numpy as np
import pytest

from lens.cli import main
from lens.metrics import evaluate, paired_test
from lens.trec import write_run

QRELS = {"q1": {"a": 2, "c": 1}, "q2": {"b": 1}, "q3": {"e": 1, "f": 3}, "q4": {"a": 1}}
RUN_A = {"q1": {"a": 3.0, "b": 2.0, "c": 1.0}, "q2": {"a": 2.0, "b": 1.0}, "q3": {"f": 0.5, "x": 0.4},
         "q4": {"a": 0.9}}
RUN_B = {"q1": {"c": 3.0, "a": 2.0}, "q2": {"b": 1.0}, "q3": {"x": 0.9, "y": 0.8, "e": 0.7}}  # no q4


def order(hits):
    return [d for d, _ in sorted(sorted(hits.items(), reverse=True), key=lambda kv: -kv[1])]


def naive_ndcg10(grades, hits):
    ranked = order(hits)[:10]
    dcg = sum(grades.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked))
    ideal = sorted(grades.values(), reverse=True)[:10]
    return dcg / sum(g / math.log2(i + 2) for i, g in enumerate(ideal))


def naive_ap(grades, hits):
    relevant, found, total = {d for d, g in grades.items() if g > 0}, 0, 0.0
    for i, d in enumerate(order(hits), 1):
        if d in relevant:
            found += 1
            total += found / i
    return total / len(relevant)


def naive(run, measure):
    values = []
    for q, grades in QRELS.items():
        hits = run.get(q, {})
        relevant = {d for d, g in grades.items() if g > 0}
        if not hits:
            values.append(0.0)
        elif measure == "ndcg@10":
            values.append(naive_ndcg10(grades, hits))
        elif measure == "map":
            values.append(naive_ap(grades, hits))
        elif measure == "p@10":
            values.append(len(relevant & set(order(hits)[:10])) / 10)
        elif measure == "recall@10":
            values.append(len(relevant & set(order(hits)[:10])) / len(relevant))
    return values


@pytest.mark.parametrize("measure", ["ndcg@10", "map", "p@10", "recall@10"])
def test_measures_equal_their_definitions(measure):
    for run in (RUN_A, RUN_B):
        ev = evaluate(QRELS, run, (measure,))
        np.testing.assert_allclose([ev.per_query[q][measure] for q in QRELS], naive(run, measure), atol=1e-9)


def write_qrels_trec(path):
    path.write_text("".join(f"{q} 0 {d} {g}\n" for q, docs in QRELS.items() for d, g in docs.items()))
    return path


def test_runs_are_judged_and_tested_against_the_baseline(tmp_path, capsys, caplog):
    qrels = write_qrels_trec(tmp_path / "qrels.txt")
    a, b = write_run(tmp_path / "lens.trec", RUN_A), write_run(tmp_path / "bm25.trec", RUN_B)
    assert main(["bench", "runs", str(a), str(b), "--qrels", str(qrels), "--measures", "ndcg@10,map",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["queries"] == 4 and out["baseline"] == "lens"
    assert out["runs"]["lens"]["queries_answered"] == 4 and out["runs"]["bm25"]["queries_answered"] == 3
    assert "bm25 answers 3 of the qrels' 4 queries" in caplog.text  # q4 scores 0
    for name, run in (("lens", RUN_A), ("bm25", RUN_B)):
        for m in ("ndcg@10", "map"):
            assert out["runs"][name][m] == pytest.approx(np.mean(naive(run, m)))
    (t,) = [t for t in out["tests"] if t["measure"] == "ndcg@10"]
    want = paired_test(naive(RUN_B, "ndcg@10"), naive(RUN_A, "ndcg@10"))
    assert t["run"] == "bm25" and t["diff"] == pytest.approx(want.diff)
    assert t["p_randomization"] == pytest.approx(want.p_randomization)
    assert (t["wins"], t["ties"], t["losses"]) == (want.wins, want.ties, want.losses)

    # Markdown by default; --baseline by name; a BEIR directory's split instead of a qrels file
    beir = tmp_path / "set"
    (beir / "qrels").mkdir(parents=True)
    (beir / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{g}\n" for q, docs in QRELS.items() for d, g in docs.items()))
    assert main(["bench", "runs", str(a), str(b), "--qrels", str(beir), "--split", "dev", "--baseline", "bm25"]) == 0
    text = capsys.readouterr().out
    assert "| bm25 (baseline) | 3 |" in text and "| lens | ndcg@10 |" in text
    assert f"{np.mean(naive(RUN_A, 'ndcg@10')):.4f}" in text


def test_mismatched_inputs_say_what_is_wrong(tmp_path, capsys):
    qrels = write_qrels_trec(tmp_path / "qrels.txt")
    other = write_run(tmp_path / "other.trec", {"PLAIN-1": {"a": 1.0}})
    assert main(["bench", "runs", str(other), "--qrels", str(qrels)]) != 0
    assert "answers none of the qrels' 4 queries" in capsys.readouterr().err
    a = write_run(tmp_path / "a.trec", RUN_A)
    assert main(["bench", "runs", str(a), "--qrels", str(qrels), "--measures", "ndcg@7"]) == 2
    assert "unknown measure 'ndcg@7'" in capsys.readouterr().err
    assert main(["bench", "runs", str(a), "--qrels", str(tmp_path / "nope")]) != 0
    assert "neither a qrels file nor a BEIR directory" in capsys.readouterr().err
    assert main(["bench", "runs", str(a), "--qrels", str(qrels), "--baseline", "zzz"]) != 0
    assert "baseline 'zzz' is not one of the runs" in capsys.readouterr().err
