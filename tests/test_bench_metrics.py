"""lens.metrics: nDCG@10, Recall@100 and MRR@10 on hand-made qrels and runs, values computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lens.metrics import drop_self_hits, evaluate, mean_scores, ranked, truncate_run

QRELS = {
    "q1": {"d1": 2, "d2": 1, "d5": 0, "d9": 1},  # graded; d5 judged not relevant (grade 0)
    "q2": {"d3": 1},
    "q3": {"d4": 1},  # the run has no entry for q3
    "q4": {"d6": 1, "d7": 1},
}
RUN = {
    "q1": {"d2": 0.9, "d5": 0.8, "d1": 0.7},  # ranking d2 (1), d5 (0), d1 (2)
    "q2": {**{f"x{i:02d}": 1.0 - i / 100 for i in range(10)}, "d3": 0.5, "y": 0.4},  # d3 at rank 11
    "q4": {"x": 0.5, "d7": 0.4},  # ranking x (0), d7 (1)
    "q5": {"d1": 1.0},  # not in the qrels: ignored
}

# q1: DCG@10 = 1/log2(2) + 0/log2(3) + 2/log2(4) = 1 + 0 + 1 = 2
#     ideal grades 2, 1, 1: IDCG = 2/log2(2) + 1/log2(3) + 1/log2(4) = 2 + 0.630930 + 0.5 = 3.130930
#     nDCG@10 = 2 / 3.130930 = 0.638788;  recall@100 = |{d2, d1}| / |{d1, d2, d9}| = 2/3;  MRR@10 = 1/1
Q1_NDCG = 2 / (2 + 1 / math.log2(3) + 0.5)
# q2: d3 is at rank 11: nDCG@10 = 0, MRR@10 = 0 (the full run's reciprocal rank would be 1/11), recall@100 = 1
# q3: no hits: 0 on every measure
# q4: DCG = 0 + 1/log2(3) = 0.630930; IDCG = 1 + 1/log2(3) = 1.630930; nDCG = 0.386853; recall 1/2; MRR 1/2
Q4_NDCG = (1 / math.log2(3)) / (1 + 1 / math.log2(3))


def test_hand_computed_values_per_query():
    ev = evaluate(QRELS, RUN)
    assert set(ev.per_query) == {"q1", "q2", "q3", "q4"}  # q5 ignored, q3 present with zeros
    assert ev.per_query["q1"]["ndcg@10"] == pytest.approx(0.638788, abs=1e-6)
    assert ev.per_query["q1"]["ndcg@10"] == pytest.approx(Q1_NDCG, abs=1e-12)
    assert ev.per_query["q1"]["recall@100"] == pytest.approx(2 / 3)
    assert ev.per_query["q1"]["mrr@10"] == pytest.approx(1.0)
    assert ev.per_query["q2"] == pytest.approx({"ndcg@10": 0.0, "recall@100": 1.0, "mrr@10": 0.0})
    assert ev.per_query["q3"] == {"ndcg@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0}
    assert ev.per_query["q4"]["ndcg@10"] == pytest.approx(0.386853, abs=1e-6)
    assert ev.per_query["q4"]["ndcg@10"] == pytest.approx(Q4_NDCG, abs=1e-12)
    assert ev.per_query["q4"]["recall@100"] == pytest.approx(0.5)
    assert ev.per_query["q4"]["mrr@10"] == pytest.approx(0.5)


def test_means_are_over_the_qrels_queries_with_missing_ones_as_zero():
    ev = evaluate(QRELS, RUN)
    # 4 qrels queries: (q1 + q2 + q3 + q4) / 4
    assert ev.mean["ndcg@10"] == pytest.approx((Q1_NDCG + 0 + 0 + Q4_NDCG) / 4)  # 0.256410
    assert ev.mean["recall@100"] == pytest.approx((2 / 3 + 1 + 0 + 0.5) / 4)  # 0.541667
    assert ev.mean["mrr@10"] == pytest.approx((1 + 0 + 0 + 0.5) / 4)  # 0.375
    assert ev.mean == pytest.approx(mean_scores(ev.per_query))


def test_empty_hits_count_as_zero_and_do_not_crash():
    ev = evaluate({"q1": {"d1": 1}, "q2": {"d2": 1}}, {"q1": {}, "q2": {"d2": 3.0}})
    assert ev.per_query["q1"] == {"ndcg@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0}
    assert ev.per_query["q2"] == pytest.approx({"ndcg@10": 1.0, "recall@100": 1.0, "mrr@10": 1.0})
    assert ev.mean["ndcg@10"] == pytest.approx(0.5)


def test_recall_counts_only_the_top_100():
    # 150 hits with the single relevant document at rank 101: recall@100 = 0
    run = {"q": {**{f"x{i:03d}": 1000.0 - i for i in range(100)}, "rel": 1.0, **{f"y{i}": 0.5 for i in range(49)}}}
    assert evaluate({"q": {"rel": 1}}, run).per_query["q"]["recall@100"] == 0.0
    run["q"]["rel"] = 950.5  # now at rank 51
    assert evaluate({"q": {"rel": 1}}, run).per_query["q"]["recall@100"] == 1.0


def test_ties_follow_trec_eval_doc_id_descending_and_truncation_agrees():
    # a and b tie; trec_eval puts "b" first (ids descending), so the relevant "a" is at rank 2: MRR = 1/2
    assert ranked({"a": 1.0, "b": 1.0, "c": 2.0}) == [("c", 2.0), ("b", 1.0), ("a", 1.0)]
    assert evaluate({"q": {"a": 1}}, {"q": {"a": 1.0, "b": 1.0}}).per_query["q"]["mrr@10"] == pytest.approx(0.5)
    # the tie straddles the cut at 10: "z" (rank 10) before "r" (rank 11), so MRR@10 = 0 and nDCG@10 = 0
    run = {"q": {**{f"h{i}": 10.0 - i for i in range(9)}, "r": 0.5, "z": 0.5}}
    assert list(truncate_run(run, 10)["q"])[-1] == "z"
    ev = evaluate({"q": {"r": 1}}, run)
    assert ev.per_query["q"]["mrr@10"] == 0.0 and ev.per_query["q"]["ndcg@10"] == 0.0


def test_truncate_run_is_pure_and_checks_k():
    run = {"q": {"a": 0.1, "b": 0.3, "c": 0.2}}
    assert truncate_run(run, 2) == {"q": {"b": 0.3, "c": 0.2}}
    assert run == {"q": {"a": 0.1, "b": 0.3, "c": 0.2}}
    with pytest.raises(ValueError, match="k must be"):
        truncate_run(run, 0)


def test_drop_self_hits_removes_the_query_document_only():
    run = {"q1": {"q1": 0.9, "d1": 0.5}, "d1": {"d1": 1.0, "q1": 0.2}, "q2": {"d2": 0.1}}
    out = drop_self_hits(run)
    assert out == {"q1": {"d1": 0.5}, "d1": {"q1": 0.2}, "q2": {"d2": 0.1}}
    assert run["q1"] == {"q1": 0.9, "d1": 0.5}  # input untouched
    # evaluated: with the self hit q1 would rank its relevant d1 second; without it first
    qrels = {"q1": {"d1": 1}}
    assert evaluate(qrels, run).per_query["q1"]["mrr@10"] == pytest.approx(0.5)
    assert evaluate(qrels, out).per_query["q1"]["mrr@10"] == pytest.approx(1.0)


def test_grade_zero_is_not_relevant_and_gains_are_grades():
    # only grade-0 judgments: nothing relevant, every measure 0 even when the judged doc is first
    assert evaluate({"q": {"d": 0}}, {"q": {"d": 1.0}}).per_query["q"] == {"ndcg@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0}
    # grades 4 and 1, ranked 1 then 4: DCG = 1 + 4/log2(3); IDCG = 4 + 1/log2(3)
    ev = evaluate({"q": {"hi": 4, "lo": 1}}, {"q": {"lo": 2.0, "hi": 1.0}})
    assert ev.per_query["q"]["ndcg@10"] == pytest.approx((1 + 4 / math.log2(3)) / (4 + 1 / math.log2(3)))


def test_errors():
    with pytest.raises(ValueError, match="qrels are empty"):
        evaluate({}, {"q": {"d": 1.0}})
    with pytest.raises(ValueError, match="unknown measure"):
        evaluate({"q": {"d": 1}}, {"q": {"d": 1.0}}, measures=("map@7",))
    with pytest.raises(TypeError, match="mapping"):
        evaluate({"q": {"d": 1}}, {"q": ["d"]})


def test_paired_test_against_enumerated_sign_flips_and_the_t_formula():
    import itertools

    from scipy import stats

    from lens.metrics import paired_test

    rng = np.random.default_rng(3)
    a, b = rng.random(10), rng.random(10)
    d = a - b
    flips = [abs(np.mean(d * np.array(signs))) for signs in itertools.product((1, -1), repeat=10)]
    exact = np.mean([f >= abs(d.mean()) - 1e-12 for f in flips])  # all 1024 sign patterns: the exact p-value
    t = d.mean() / (d.std(ddof=1) / math.sqrt(len(d)))
    r = paired_test(a, b)
    assert r.p_randomization == pytest.approx(exact, abs=1e-12)
    assert r.p_ttest == pytest.approx(2 * stats.t.sf(abs(t), len(d) - 1), rel=1e-9)
    assert (r.n, r.wins + r.ties + r.losses, r.wins) == (10, 10, int((d > 0).sum()))
    assert r.diff == pytest.approx(a.mean() - b.mean()) and r.mean_a == pytest.approx(a.mean())


def test_paired_test_edge_cases():
    from lens.metrics import paired_test

    same = paired_test([0.1, 0.5, 0.9], [0.1, 0.5, 0.9])
    assert (same.p_ttest, same.p_randomization, same.ties) == (1.0, 1.0, 3)
    gap = paired_test([0.5] * 8, [0.4] * 8)  # every query 0.1 better: only the two one-sided patterns are as far
    assert gap.p_ttest == 0.0 and gap.p_randomization == pytest.approx(2 / 2**8) and gap.wins == 8
    big = paired_test(np.linspace(0, 1, 200), np.linspace(0, 1, 200)[::-1], resamples=2000, seed=1)
    assert 0.9 < big.p_randomization <= 1.0  # symmetric: no difference in the means
    for bad in (([1.0, 2.0], [1.0]), ([1.0], [2.0]), ([1.0, float("nan")], [1.0, 2.0])):
        with pytest.raises(ValueError, match="paired_test needs"):
            paired_test(*bad)
