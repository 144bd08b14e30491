"""Training-example format, converters and task batching, on tiny files written to tmp_path."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from lens.corpus import Document
from lens.train.data import (
    TrainExample, beir_pairs, read_examples, shared_pairs, sts_pairs, task_batches, weak_pairs, write_examples,
)
from lens.cli_data import main as data_main

from conftest import SHARED

SCIFACT = SHARED / "beir" / "scifact"


def _jsonl(path, rows):
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if str(path).endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def _doc_no(text: str) -> int:
    """The number of a toy document from its indexed text ("apple 3 apple pie ...")."""
    return int(text.split()[1])


@pytest.fixture
def beir_dir(tmp_path):
    """Eight documents about apples; q1 judges d0 (2) and d1 (0), q2 judges d3 (1); test qrels exist too."""
    d = tmp_path / "toy"
    (d / "qrels").mkdir(parents=True)
    docs = [{"_id": f"d{i}", "title": f"apple {i}", "text": f"apple pie recipe number {i} with apple"}
            for i in range(8)]
    _jsonl(d / "corpus.jsonl", docs)
    _jsonl(d / "queries.jsonl", [{"_id": "q1", "text": "apple pie"}, {"_id": "q2", "text": "apple recipe"}])
    (d / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td0\t2\nq1\td1\t0\nq2\td3\t1\n")
    (d / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td0\t1\n")
    return d


def test_round_trip_plain_and_gz(tmp_path):
    examples = [
        TrainExample("q", "p", ["n1", "n2"], score=3.5, max_score=5.0, teacher=[1.0, 0.2, 0.1], task="t",
                     instruction="find it"),
        TrainExample("q2 é", "p2"),
    ]
    for name in ("ex.jsonl", "ex.jsonl.gz"):
        write_examples(tmp_path / name, examples)
        assert read_examples(tmp_path / name) == examples
    assert gzip.decompress((tmp_path / "ex.jsonl.gz").read_bytes()).startswith(b'{"query": "q"')
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ex.jsonl", "ex.jsonl.gz"]  # no temporary files left


def test_task_defaults_to_file_stem(tmp_path):
    rows = [{"query": "q", "positive": "p"}, {"query": "q", "positive": "p", "task": "t"}]
    path = _jsonl(tmp_path / "wiki.jsonl.gz", rows)
    assert [e.task for e in read_examples(path)] == ["wiki", "t"]
    assert [e.task for e in read_examples(path, task="other")] == ["other", "t"]


@pytest.mark.parametrize("row, message", [
    ({"query": "", "positive": "p"}, "'query' must be a non-empty string"),
    ({"query": "q"}, "'positive' must be a non-empty string"),
    ({"query": "q", "positive": "p", "negatives": "n"}, "'negatives' must be a list of strings"),
    ({"query": "q", "positive": "p", "negatives": ["n"], "teacher": [1.0]}, "expected 1 + 1 negatives"),
    ({"query": "q", "positive": "p", "score": 6, "max_score": 5}, "outside"),
    ({"query": "q", "positive": "p", "negative": "n"}, "unknown field(s) 'negative'"),
])
def test_validation_errors_name_file_and_line(tmp_path, row, message):
    path = _jsonl(tmp_path / "bad.jsonl", [{"query": "ok", "positive": "ok"}, row])
    with pytest.raises(ValueError, match=rf"bad\.jsonl:2: .*{message[:12]}") as info:
        read_examples(path)
    assert message in str(info.value)


def test_beir_refuses_test(beir_dir):
    with pytest.raises(ValueError, match="never train on a test split"):
        beir_pairs(beir_dir, split="test")


def test_beir_negatives_skip_judged_docs(beir_dir):
    ex = beir_pairs(beir_dir, num_negatives=7, negative_ranks=(0, 30))  # more than the 6 unjudged docs of q1
    assert [e.query for e in ex] == ["apple pie", "apple recipe"]  # d1 (grade 0) is no positive
    assert (ex[0].score, ex[0].max_score) == (2.0, 2.0)  # graded qrels keep their grade
    assert {_doc_no(n) for n in ex[0].negatives} == {2, 3, 4, 5, 6, 7}  # all but the judged d0 and d1
    assert {_doc_no(n) for n in ex[1].negatives} == {0, 1, 2, 4, 5, 6, 7}
    assert all(e.task == "toy" for e in ex)
    assert beir_pairs(beir_dir, num_negatives=3, seed=0) == beir_pairs(beir_dir, num_negatives=3, seed=0)
    from lens.train.data import holdout_queries

    held = set(holdout_queries(["q1", "q2"], 0.5))
    kept = {e.query for e in beir_pairs(beir_dir, num_negatives=0, holdout=0.5)}
    assert kept == {"apple pie", "apple recipe"} - {{"q1": "apple pie", "q2": "apple recipe"}[q] for q in held}


def test_beir_short_pool_fills_with_unjudged_docs(beir_dir):
    (beir_dir / "queries.jsonl").write_text(json.dumps({"_id": "q3", "text": "zebra"}) + "\n")
    (beir_dir / "qrels" / "dev.tsv").write_text("q3\td5\t1\n")  # no document matches "zebra"
    [e] = beir_pairs(beir_dir, split="dev", num_negatives=4)
    assert _doc_no(e.positive) == 5 and len(set(e.negatives)) == 4 and 5 not in {_doc_no(n) for n in e.negatives}


def test_beir_callable_miner_takes_top_of_its_scores(beir_dir):
    def miner(queries, docs):  # prefers higher document numbers
        return np.tile(np.arange(len(docs), dtype=float), (len(queries), 1))

    ex = beir_pairs(beir_dir, num_negatives=2, miner=miner, negative_ranks=(0, 2), instruction="i")
    assert [_doc_no(n) for n in ex[0].negatives] == [7, 6]
    assert ex[1].instruction == "i"
    with pytest.raises(ValueError, match="unknown miner"):
        beir_pairs(beir_dir, miner="dense")


def test_weak_pairs_title_and_first_sentence():
    docs = [
        Document("a", "Cells divide quickly. Then they rest for a long while afterwards.", "Cell division"),
        Document("b", "Short.", "Tiny"),
        Document("c", "No title here but a long enough text. Second sentence is here too.", ""),
    ]
    title = weak_pairs(docs, name="toy")
    assert [(e.query, e.task, e.negatives) for e in title] == [("Cell division", "weak-toy", [])]
    first = weak_pairs(docs, mode="first-sentence", name="toy")
    assert [(e.query, e.positive) for e in first] == [
        ("Cells divide quickly.", "Then they rest for a long while afterwards."),
        ("No title here but a long enough text.", "Second sentence is here too."),
    ]
    assert len(weak_pairs(docs * 5, mode="first-sentence", max_pairs=3, seed=1)) == 3
    with pytest.raises(ValueError, match="'title' or 'first-sentence'"):
        weak_pairs(docs, mode="body")


def test_weak_pairs_from_beir_dir_named_after_it(beir_dir):
    assert {e.task for e in weak_pairs(beir_dir, min_chars=5)} == {"weak-toy"}


def test_sts_split_filter_and_test_refusal(tmp_path):
    path = tmp_path / "sts.tsv.gz"
    rows = "sentence1\tsentence2\tscore\tsplit\na\tb\t4.5\ttrain\nc\td\t1.0\ttrain\ne\tf\t2\tdev\ng\th\t3\ttest\n"
    path.write_bytes(gzip.compress(rows.encode()))
    ex = sts_pairs(path)
    assert [(e.query, e.positive, e.score, e.max_score, e.task) for e in ex] == [
        ("a", "b", 4.5, 5.0, "sts"), ("c", "d", 1.0, 5.0, "sts")]
    assert [e.query for e in sts_pairs(path, split="dev")] == ["e"]
    assert [e.query for e in sts_pairs(path, min_score=2)] == ["a"]
    with pytest.raises(ValueError, match="never train on a test split"):
        sts_pairs(path, split="test")


def test_shared_pairs_merge_and_negatives(tmp_path):
    d = tmp_path / "qa"
    d.mkdir()
    _jsonl(d / "train.jsonl.gz", [
        {"query": "q", "positive": "p1", "negative": "n1", "qid": "1"},
        {"query": "q", "positive": "p2", "negative": "p1"},  # another positive of q: not a negative
        {"query": "q", "positive": "p1", "negative": "n2"},
        {"query": "r", "positive": "p3"},
    ])
    ex = shared_pairs(d)
    assert [(e.query, e.positive, e.negatives, e.task) for e in ex] == [
        ("q", "p1", ["n1", "n2"], "qa"), ("q", "p2", [], "qa"), ("r", "p3", [], "qa")]
    _jsonl(d / "test.jsonl", [{"query": "q", "positive": "p"}])
    with pytest.raises(ValueError, match="test split"):
        shared_pairs(d / "test.jsonl")


def test_shared_pairs_sample_and_instruction(tmp_path):
    d = tmp_path / "banking77"
    d.mkdir()
    _jsonl(d / "pairs.jsonl.gz", [{"query": f"q{i}", "positive": f"label {i % 3}", "source_row": i}
                                  for i in range(10)])
    ex = shared_pairs(d, max_pairs=4, seed=1, instruction="Given a query, retrieve its intent")
    assert len(ex) == 4 and ex == shared_pairs(d, max_pairs=4, seed=1, instruction="Given a query, retrieve its intent")
    assert [e.query for e in ex] == sorted((e.query for e in ex), key=lambda q: int(q[1:]))  # file order kept
    assert {e.instruction for e in ex} == {"Given a query, retrieve its intent"} and ex[0].task == "banking77"
    out = tmp_path / "b.jsonl"
    assert data_main(["data", "shared", str(d), "--instruction", "auto", "--out", str(out)]) == 0
    from lens.instructions import TRAINING_INSTRUCTIONS

    assert {e.instruction for e in read_examples(out)} == {TRAINING_INSTRUCTIONS["banking77"]}
    (tmp_path / "mystery").mkdir()
    _jsonl(tmp_path / "mystery" / "pairs.jsonl", [{"query": "q", "positive": "p"}])
    assert data_main(["data", "shared", str(tmp_path / "mystery"), "--instruction", "auto", "--out", str(out)]) == 2


def test_shared_pairs_with_holdout_is_the_kept_list(tmp_path):
    from lens.train.data import split_holdout

    d = tmp_path / "qa"
    d.mkdir()
    _jsonl(d / "pairs.jsonl", [{"query": f"q{i}", "positive": f"p{i}"} for i in range(200)])
    kept, held = split_holdout(shared_pairs(d), 0.2)
    got = shared_pairs(d, holdout=0.2)
    assert type(got) is list and got == kept and 10 < len(held) < 80  # one type, with or without holdout
    sampled = shared_pairs(d, holdout=0.2, max_pairs=30, seed=3)  # split first, then sampled from the kept
    assert type(sampled) is list and len(sampled) == 30 and all(e in kept for e in sampled)


def test_holdout_queries_are_a_stable_fraction():
    from lens.train.data import holdout_queries

    qids = [str(i) for i in range(2000)]
    held = holdout_queries(qids, 0.2)
    assert 300 < len(held) < 500
    assert holdout_queries(list(reversed(qids)), 0.2) == list(reversed(held))  # order-independent choice
    assert set(holdout_queries(qids[:500], 0.2)) == set(held) & set(qids[:500])
    assert holdout_queries(qids, 0.0) == []
    with pytest.raises(ValueError, match="holdout"):
        holdout_queries(qids, 1.0)


def test_split_holdout_keeps_a_query_on_one_side(tmp_path):
    from lens.train.data import sample_examples, split_holdout

    ex = [TrainExample(f"q{i % 400}", f"p{i}", task="t") for i in range(1200)]  # each query three times
    kept, held = split_holdout(ex, 0.1)
    assert len(kept) + len(held) == len(ex) and 60 < len(held) < 180
    assert not {e.query for e in kept} & {e.query for e in held}
    assert split_holdout(ex, 0.0) == (ex, [])
    with pytest.raises(ValueError, match="holdout"):
        split_holdout(ex, 1.5)
    mixed = ex[:50] + [TrainExample(f"s{i}", f"d{i}", task="small") for i in range(4)]
    sampled = sample_examples(mixed, seed=0, max_per_task=10)
    assert [e.task for e in sampled].count("t") == 10 and [e.task for e in sampled].count("small") == 4
    assert sampled == sample_examples(mixed, seed=0, max_per_task=10)
    assert [mixed.index(e) for e in sampled] == sorted(mixed.index(e) for e in sampled)  # file order kept
    assert len(sample_examples(mixed, seed=0, max_per_task=10, max_examples=7)) == 7


def test_cli_shared_holdout_writes_both_parts(tmp_path):
    d = tmp_path / "trec-qc"
    d.mkdir()
    _jsonl(d / "pairs.jsonl.gz", [{"query": f"question {i}", "positive": f"label {i % 4}"} for i in range(300)])
    out, held = tmp_path / "train.jsonl.gz", tmp_path / "val.jsonl.gz"
    assert data_main(["data", "shared", str(d), "--holdout", "0.1", "--out", str(out), "--holdout-out", str(held)]) == 0
    a, b = read_examples(out), read_examples(held)
    assert len(a) + len(b) == 300 and 10 < len(b) < 60 and not {e.query for e in a} & {e.query for e in b}
    assert data_main(["data", "shared", str(d), "--holdout-out", str(held), "--out", str(out)]) == 2


def test_cli_weak_pairs_from_a_training_files_positives(tmp_path):
    paragraph = "Paris is the capital of France. It lies on the Seine and has two million inhabitants."
    write_examples(tmp_path / "squad.jsonl", [
        TrainExample("capital of France?", paragraph, task="squad"),
        TrainExample("which river?", paragraph, task="squad"),  # the same paragraph once
        TrainExample("tallest mountain?", "Everest is the tallest. It is in the Himalaya range of Asia.", task="squad")])
    out = tmp_path / "weak.jsonl"
    assert data_main(["data", "weak", str(tmp_path / "squad.jsonl"), "--from-positives", "--mode", "first-sentence",
                      "--out", str(out)]) == 0
    weak = read_examples(out)
    assert [(e.query, e.positive, e.task) for e in weak] == [
        ("Paris is the capital of France.", "It lies on the Seine and has two million inhabitants.", "weak-squad"),
        ("Everest is the tallest.", "It is in the Himalaya range of Asia.", "weak-squad")]


def test_task_batches_one_task_each_deterministic_and_complete():
    ex = [TrainExample(f"a{i % 7}", f"p{i}", task="a") for i in range(23)]  # repeated queries
    ex += [TrainExample(f"b{i}", f"p{i % 5}", task="b") for i in range(11)]  # repeated positives
    batches = task_batches(ex, 4, seed=3)
    assert sorted(i for b in batches for i in b) == list(range(len(ex)))
    assert batches == task_batches(ex, 4, seed=3) and batches != task_batches(ex, 4, seed=4)
    for b in batches:
        assert len(b) <= 4 and len({ex[i].task for i in b}) == 1
        assert len({ex[i].query for i in b}) == len(b) and len({ex[i].positive for i in b}) == len(b)
    assert all(len(b) == 4 for b in task_batches(ex, 4, seed=3, drop_last=True))


def test_cli_writes_and_reports(tmp_path, capsys):
    (tmp_path / "set").mkdir()
    _jsonl(tmp_path / "set" / "pairs.jsonl", [{"query": "q", "positive": "p"}])
    out = tmp_path / "out.jsonl.gz"
    assert data_main(["data", "shared", str(tmp_path / "set"), "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out and read_examples(out)[0].task == "set"
    assert data_main(["data", "stats", str(out)]) == 0
    assert "set" in capsys.readouterr().out
    assert data_main(["data", "sts", str(tmp_path / "missing.tsv.gz"), "--out", str(out)]) == 2


@pytest.mark.real_data
@pytest.mark.skipif(not SCIFACT.is_dir(), reason="../shared/data/beir/scifact not beside the repo")
def test_real_scifact_negatives_are_never_judged():
    from lens.corpus import load_beir

    corpus, queries, qrels = load_beir(SCIFACT, "train")
    text = {d.id: d.full_text for d in corpus}
    qid_of = {t: q for q, t in queries.items()}
    # the default ranks, then the very top, where the judged documents sit
    for ranks in ((3, 30), (0, 2)):
        ex = beir_pairs(SCIFACT, num_negatives=2, max_queries=20, negative_ranks=ranks)
        assert len({e.query for e in ex}) == 20
        for e in ex:
            judged = {text[d] for d in qrels[qid_of[e.query]]}
            assert e.positive in judged and len(e.negatives) == 2 and not judged & set(e.negatives)


# ------------------------------------------------------------------------------------------------ label documents
LABEL_ROWS = [  # two subtasks (irony; emotion), each row's negative drawn from its own subtask
    {"query": "what a lovely monday", "positive": "Ironic tweet", "negative": "Tweet that is not ironic"},
    {"query": "sunny day", "positive": "Tweet that is not ironic", "negative": "Ironic tweet"},
    {"query": "i hate this", "positive": "Tweet expressing anger", "negative": "Tweet expressing joy"},
    {"query": "so happy", "positive": "Tweet expressing joy", "negative": "Tweet expressing sadness"},
    {"query": "so happy", "positive": "Tweet expressing optimism", "negative": "Tweet expressing anger"},
    {"query": "crying", "positive": "Tweet expressing sadness"},
]


def test_label_ids_drop_shared_leading_words():
    from lens.train.data import label_ids

    labels = ["Banking customer query about: card arrival", "Banking customer query about: pin blocked"]
    assert label_ids(labels) == {labels[0]: "card-arrival", labels[1]: "pin-blocked"}
    assert label_ids(["Tweet about X", "Tweet about x!"]) == {"Tweet about X": "x", "Tweet about x!": "x-2"}
    assert label_ids(["Ironic tweet"]) == {"Ironic tweet": "ironic-tweet"}


def test_label_pairs_write_label_documents_with_same_task_negatives(tmp_path):
    from lens.train.data import label_pairs

    d = tmp_path / "tweeteval"
    d.mkdir()
    _jsonl(d / "pairs.jsonl.gz", LABEL_ROWS)
    ex = label_pairs(d, num_negatives=3, seed=0)
    assert [e.task for e in ex] == ["tweeteval"] * 6 and [e.query for e in ex] == [r["query"] for r in LABEL_ROWS]
    assert ex[0].positive == "Ironic tweet [tweeteval:ironic-tweet]"
    assert ex[0].negatives == ["Tweet that is not ironic [tweeteval:tweet-that-is-not-ironic]"]  # irony has 2 labels
    assert ex[2].positive == "Tweet expressing anger [tweeteval:anger]"
    emotion = {f"Tweet expressing {x} [tweeteval:{x}]" for x in ("anger", "joy", "optimism", "sadness")}
    assert ex[2].negatives[0] == "Tweet expressing joy [tweeteval:joy]"  # the row's given negative comes first
    for e in ex[2:]:
        assert set(e.negatives) <= emotion and e.positive not in e.negatives
    assert len(ex[2].negatives) == len(ex[5].negatives) == 3
    # "so happy" is both joy and optimism: neither is a negative of the other's example
    assert ex[3].negatives[0] == "Tweet expressing sadness [tweeteval:sadness]"
    assert "Tweet expressing optimism [tweeteval:optimism]" not in ex[3].negatives and len(ex[3].negatives) == 2
    assert "Tweet expressing joy [tweeteval:joy]" not in ex[4].negatives and len(ex[4].negatives) == 2
    assert ex == label_pairs(d, num_negatives=3, seed=0)
    assert all(len(e.negatives) <= 1 for e in label_pairs(d, num_negatives=1))
    assert all(e.negatives == [] for e in label_pairs(d, num_negatives=0, instruction="Given a tweet"))
    _jsonl(d / "test.jsonl", LABEL_ROWS)
    with pytest.raises(ValueError, match="test split"):
        label_pairs(d / "test.jsonl")


def test_label_pairs_nli_triplets_use_the_esnli_label_documents(tmp_path):
    from lens.ateb import label_document, nli_text
    from lens.train.data import label_pairs

    d = tmp_path / "snli-cad"
    d.mkdir()
    _jsonl(d / "pairs.jsonl.gz", [{"query": "a man sleeps", "positive": "a man rests", "negative": "a man runs"},
                                  {"query": "two dogs", "positive": "two animals"}])
    ex = label_pairs(d, num_negatives=1)
    assert [(e.query, e.positive) for e in ex] == [
        (nli_text("a man sleeps", "a man rests"), label_document("esnli", "entailment")),
        (nli_text("a man sleeps", "a man runs"), label_document("esnli", "contradiction")),
        (nli_text("two dogs", "two animals"), label_document("esnli", "entailment"))]
    assert all(len(e.negatives) == 1 and e.negatives[0] != e.positive and e.task == "snli-cad" for e in ex)
    assert all(len(e.negatives) == 2 for e in label_pairs(d, num_negatives=5))
    with pytest.raises(ValueError, match="no label documents for task 'piqa'"):
        label_pairs(d, nli="piqa")


def test_cli_data_labels_holdout_and_auto_instruction(tmp_path, capsys):
    from lens.instructions import ATEB_INSTRUCTIONS, TRAINING_INSTRUCTIONS

    d = tmp_path / "banking77"
    d.mkdir()
    _jsonl(d / "pairs.jsonl.gz", [{"query": f"query number {i}", "positive": f"Banking customer query about: topic {i % 5}",
                                   "negative": f"Banking customer query about: topic {(i + 1) % 5}"} for i in range(60)])
    out, held = tmp_path / "l.jsonl.gz", tmp_path / "h.jsonl"
    assert data_main(["data", "labels", str(d), "--negatives", "2", "--instruction", "auto", "--holdout", "0.3",
                      "--out", str(out), "--holdout-out", str(held)]) == 0
    kept, gone = read_examples(out), read_examples(held)
    assert len(kept) + len(gone) == 60 and gone and not {e.query for e in kept} & {e.query for e in gone}
    assert {e.instruction for e in kept} == {TRAINING_INSTRUCTIONS["banking77"]}
    assert all(len(e.negatives) == 2 and e.positive.endswith("]") for e in kept)
    assert {e.positive for e in kept + gone} == {f"Banking customer query about: topic {i} [banking77:{i}]"
                                                 for i in range(5)}
    assert data_main(["data", "labels", str(d), "--max-pairs", "5", "--out", str(out), "--overwrite"]) == 0
    assert len(read_examples(out)) == 5
    assert data_main(["data", "labels", str(d), "--holdout-out", str(held), "--out", str(out)]) == 2
    assert "--holdout-out needs --holdout" in capsys.readouterr().err
    nli = tmp_path / "snli-cad"
    nli.mkdir()
    _jsonl(nli / "pairs.jsonl", [{"query": "p", "positive": "h", "negative": "c"}])
    assert data_main(["data", "labels", str(nli), "--instruction", "auto", "--out", str(out), "--overwrite"]) == 0
    assert {e.instruction for e in read_examples(out)} == {ATEB_INSTRUCTIONS["esnli"]}
    (tmp_path / "mystery").mkdir()
    _jsonl(tmp_path / "mystery" / "pairs.jsonl", LABEL_ROWS)
    assert data_main(["data", "labels", str(tmp_path / "mystery"), "--instruction", "auto", "--out", str(out),
                      "--overwrite"]) == 2
    assert "pass --instruction TEXT" in capsys.readouterr().err


@pytest.mark.real_data
@pytest.mark.skipif(not (SHARED / "train" / "trec-qc").is_dir(), reason="../shared/data/train not beside the repo")
def test_real_label_sets_give_unique_ids_per_label():
    from lens.train.data import label_pairs

    for name in ("trec-qc", "banking77"):
        ex = label_pairs(SHARED / "train" / name, num_negatives=3)
        docs = {e.positive for e in ex}
        ids = {doc.rsplit("[", 1)[1] for doc in docs}
        assert len(ids) == len(docs) and all(i.startswith(f"{name}:") for i in ids)
        assert all(len(e.negatives) == 3 for e in ex)


def test_plan_refuses_a_stage_without_a_usable_batch():
    from types import SimpleNamespace

    from lens.train.data import plan_steps

    same = [TrainExample("one query", f"doc {i}", task="t") for i in range(5)]
    config = SimpleNamespace(stages=[SimpleNamespace(name="s", batch_size=None, steps=3, epochs=1.0)], batch_size=4,
                             seed=0)
    with pytest.raises(ValueError, match="share their query or positive"):
        plan_steps(config, [same])


def test_an_epoch_is_the_batches_that_train():
    """epochs: 1 takes each batch of 2 or more examples once: a task's batch of one (no in-batch negative) is
    dropped, not counted, so the epoch does not spill into the next one's batches."""
    from types import SimpleNamespace

    from lens.train.data import plan_steps

    examples = ([TrainExample(f"a query {i}", f"a doc {i}", task="a") for i in range(5)]  # batches of 4 and 1
                + [TrainExample(f"b query {i}", f"b doc {i}", task="b") for i in range(4)])  # one batch of 4

    def plan(epochs):
        stage = SimpleNamespace(name="s", batch_size=None, steps=None, epochs=epochs)
        return plan_steps(SimpleNamespace(stages=[stage], batch_size=4, seed=0), [examples])

    one = plan(1.0)
    assert len(one) == 2 and all(len(s.batch) == 4 for s in one)
    seen = [i for s in one for i in s.batch]
    assert len(seen) == len(set(seen)) == 8 and {examples[i].task for s in one for i in s.batch} == {"a", "b"}
    assert len(plan(2.0)) == 4 and len(plan(0.5)) == 1


class _FakeEncoder:
    """Unnormalised fixed vectors per text, so the test also checks that cosines are computed, not dot products."""

    def __init__(self):
        self.calls = []

    def encode(self, texts, batch_size=64, show_progress_bar=None):
        self.calls.append(list(texts))
        return np.array([[len(t), t.count("a") + 1.0, 2.0 * t.count("e")] for t in texts], dtype=np.float32)


def test_teacher_scores_are_cosines_and_each_text_is_encoded_once():
    from lens.train.teacher import add_teacher_scores

    ex = [TrainExample("a query", "a positive passage", negatives=["shared label", "other text"], task="t"),
          TrainExample("another query", "shared label", negatives=["a positive passage"], teacher=[9.0, 9.0])]
    enc = _FakeEncoder()
    out = add_teacher_scores(ex, enc)
    assert len(enc.calls) == 1 and sorted(enc.calls[0]) == sorted(set(enc.calls[0]))  # distinct texts only

    def cos(a, b):
        va, vb = enc.encode([a, b])
        return float(va @ vb / np.linalg.norm(va) / np.linalg.norm(vb))

    for e, o in zip(ex, out):
        assert o.teacher == pytest.approx([cos(e.query, t) for t in (e.positive, *e.negatives)], abs=1e-5)
        assert (o.query, o.positive, o.negatives, o.task) == (e.query, e.positive, e.negatives, e.task)
    assert ex[1].teacher == [9.0, 9.0]  # the input is not modified
    assert add_teacher_scores([], enc) == []


def test_cli_teacher_writes_scored_examples(tmp_path, monkeypatch, capsys):
    from lens import dense

    src = tmp_path / "in.jsonl"
    write_examples(src, [TrainExample(f"query {i}", f"passage {i}", negatives=["x"], task="a" if i < 6 else "b")
                         for i in range(8)])
    monkeypatch.setattr(dense.DenseEncoder, "from_pretrained", classmethod(lambda cls, path: _FakeEncoder()))
    out = tmp_path / "scored.jsonl.gz"
    assert data_main(["data", "teacher", str(src), "--max-per-task", "3", "--out", str(out)]) == 0
    got = read_examples(out)
    assert sorted(e.task for e in got) == ["a", "a", "a", "b", "b"]
    assert all(len(e.teacher) == 2 for e in got)
    assert data_main(["data", "teacher", str(tmp_path / "missing.jsonl"), "--out", str(out)]) == 2


def test_model_miner_ranks_by_the_encoders_cosines(beir_dir, tiny_lens_dir, tiny_encoder, tmp_path):
    from lens.train.mining import encoder_miner

    miner = encoder_miner(tiny_encoder, instruction="find it")
    docs, queries = ["apple pie recipe", "car engine", "pie crust"], ["apple pie", "engines"]
    want = tiny_encoder.encode_queries(queries, instruction="find it") @ tiny_encoder.encode_documents(docs).T
    np.testing.assert_allclose(miner(queries, docs), want, rtol=1e-5, atol=1e-6)
    # the CLI's --miner MODEL mines exactly as beir_pairs with that miner
    out = tmp_path / "mined.jsonl"
    assert data_main(["data", "beir", str(beir_dir), "--negatives", "2", "--miner", str(tiny_lens_dir),
                      "--instruction", "find it", "--out", str(out)]) == 0
    assert read_examples(out) == beir_pairs(beir_dir, num_negatives=2, miner=miner, instruction="find it")
    assert read_examples(out) != beir_pairs(beir_dir, num_negatives=2, instruction="find it")  # not BM25's
    assert data_main(["data", "beir", str(beir_dir), "--quantize", "int8", "--out", str(out)]) == 2


def test_data_commands_never_replace_a_users_file_or_their_own_input(beir_dir, tmp_path, capsys):
    """An existing --out is replaced only with --overwrite; an input, a path inside an input directory, or --out
    given again as --holdout-out, never, and each refusal comes before any work, leaving the file as it was."""
    (tmp_path / "set").mkdir()
    _jsonl(tmp_path / "set" / "pairs.jsonl", [{"query": f"q{i}", "positive": f"p{i}"} for i in range(40)])
    mine = tmp_path / "mine.jsonl"
    mine.write_text("my notes\n")
    assert data_main(["data", "shared", str(tmp_path / "set"), "--out", str(mine)]) == 2
    assert f"--out {mine} exists: pass --overwrite" in capsys.readouterr().err and mine.read_text() == "my notes\n"
    assert data_main(["data", "shared", str(tmp_path / "set"), "--out", str(mine), "--overwrite"]) == 0
    assert len(read_examples(mine)) == 40
    corpus = (beir_dir / "corpus.jsonl").read_bytes()
    for name in ("corpus.jsonl", "weak.jsonl"):  # one of its files, or a new one a later read could take for one
        assert data_main(["data", "beir", str(beir_dir), "--out", str(beir_dir / name), "--overwrite"]) == 2
        assert f"is inside the input directory {beir_dir}" in capsys.readouterr().err
    assert (beir_dir / "corpus.jsonl").read_bytes() == corpus and not (beir_dir / "weak.jsonl").exists()
    assert data_main(["data", "teacher", str(mine), "--out", str(mine), "--overwrite"]) == 2  # before the model loads
    assert "is this command's input" in capsys.readouterr().err and len(read_examples(mine)) == 40
    both = tmp_path / "both.jsonl"
    assert data_main(["data", "shared", str(tmp_path / "set"), "--holdout", "0.2", "--out", str(both),
                      "--holdout-out", str(both)]) == 2
    assert "--out and --holdout-out are the same file" in capsys.readouterr().err and not both.exists()
    assert data_main(["data", "shared", str(tmp_path / "set"), "--out", str(tmp_path)]) == 2
    assert "is a directory; give a file name" in capsys.readouterr().err


@pytest.mark.parametrize("split", ["test", " Test", "test_small", "dev-test", "scifact.test", "test2", "test1k",
                                   "testa", "../qrels/test", "qrels/dev", ".."])
def test_a_test_split_or_a_path_is_never_a_training_split(beir_dir, split):
    with pytest.raises(ValueError, match="never train on a test split|is not a split name"):
        beir_pairs(beir_dir, split=split)


def test_a_split_with_test_inside_a_word_is_not_refused(beir_dir):
    import shutil

    for name in ("latest", "contest", "testing"):
        shutil.copy(beir_dir / "qrels" / "train.tsv", beir_dir / "qrels" / f"{name}.tsv")
        assert len(beir_pairs(beir_dir, split=name, num_negatives=0)) == 2


def test_a_shared_file_named_as_a_test_split_is_refused(tmp_path):
    path = _jsonl(tmp_path / "test_pairs.jsonl", [{"query": "q", "positive": "p"}])
    with pytest.raises(ValueError, match="refusing a test split"):
        shared_pairs(path)


def test_weak_pairs_count_what_they_skip_and_split_uncased_text(caplog):
    docs = [Document("a", "the wing was tested in the tunnel. results show the lift rises with the angle.", ""),
            Document("b", "flow e.g. the boundary layer of a plate, and no second sentence at all here", ""),
            Document("c", "Short. Tiny.", ""),
            Document("d", "The Wing was tested. Results show the lift rises with the angle of attack.", ""),
            Document("e", "flow past a flat plate . the layer grows downstream with the distance .", "")]
    with caplog.at_level("WARNING"):
        pairs = weak_pairs(docs, mode="first-sentence")
    assert [(e.query, e.positive) for e in pairs] == [
        ("the wing was tested in the tunnel.", "results show the lift rises with the angle."),
        ("The Wing was tested.", "Results show the lift rises with the angle of attack."),
        ("flow past a flat plate .", "the layer grows downstream with the distance .")]
    assert "from 3 of 5 documents; skipped: 1 no sentence end, 1 text under 20 characters" in caplog.text


def test_weak_pairs_warn_about_a_corpus_judged_for_evaluation(beir_dir, caplog):
    with caplog.at_level("WARNING"):
        weak_pairs(beir_dir)
    assert "judged for evaluation (qrels/test.tsv)" in caplog.text


def test_sts_rows_are_checked_by_line(tmp_path, caplog):
    head = "sentence1\tsentence2\tscore\tsplit\n"
    bad = _write_text(tmp_path / "tab.tsv", head + "a\tb\t4.0\ttrain\na\tstray\tb\t3.0\ttrain\n")
    with pytest.raises(ValueError, match=r"tab.tsv:3: expected 4 tab-separated columns as in the header, got 5"):
        sts_pairs(bad)
    out = _write_text(tmp_path / "range.tsv", head + "a\tb\t4.0\ttrain\nc\td\t7.5\ttrain\n")
    with pytest.raises(ValueError, match=r"range.tsv:3: score 7.5 is outside \[0, 5.0\]"):
        sts_pairs(out)
    blank = _write_text(tmp_path / "blank.tsv", head + "a\tb\t4.0\ttrain\n \td\t2.0\ttrain\ne\tf\t0.5\ttrain\n")
    with caplog.at_level("WARNING"):
        ex = sts_pairs(blank, min_score=1.0, task="sick")
    assert [(e.query, e.task) for e in ex] == [("a", "sick")]
    assert "1 of 3 pairs of split 'train' kept; 1 scored under --min-score 1.0, 1 with a blank sentence" in caplog.text


def _write_text(path, text):
    path.write_text(text)
    return path


@pytest.mark.parametrize("argv", [["beir", "DIR", "--max-queries", "-3"], ["weak", "DIR", "--max-pairs", "0"],
                                  ["shared", "DIR", "--max-pairs", "-5"], ["teacher", "DIR", "--max-per-task", "0"]])
def test_counts_must_be_positive(argv, capsys):
    with pytest.raises(SystemExit) as e:
        data_main(["data", *argv, "--out", "x.jsonl"])
    assert e.value.code == 2 and "expected a positive integer" in capsys.readouterr().err


def test_stats_names_empty_files_and_refuses_a_file_given_twice(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert data_main(["data", "stats", str(empty)]) == 2
    assert f"{empty} hold(s) no examples" in capsys.readouterr().err
    one = _jsonl(tmp_path / "one.jsonl", [{"query": "q", "positive": "p"}])
    assert data_main(["data", "stats", str(one), str(empty)]) == 0  # e.g. a --holdout-out that held out nothing
    out = capsys.readouterr()
    assert f"{empty} hold(s) no examples" in out.err and "one" in out.out
    assert data_main(["data", "stats", str(one), str(tmp_path / "." / "one.jsonl")]) == 2
    assert "is given twice" in capsys.readouterr().err


def test_written_examples_stream_to_the_same_bytes(tmp_path):
    examples = [TrainExample(f"q{i} é", f"p{i}", [f"n{i}"], task="t") for i in range(3000)]
    write_examples(tmp_path / "a.jsonl.gz", examples)
    write_examples(tmp_path / "b.jsonl.gz", iter(examples))  # any iterable, written a line at a time
    raw = (tmp_path / "a.jsonl.gz").read_bytes()
    assert raw == (tmp_path / "b.jsonl.gz").read_bytes() and raw[4:8] == b"\0\0\0\0"  # no time in the header
    assert gzip.decompress(raw).decode().splitlines() == [json.dumps(e.to_json(), ensure_ascii=False)
                                                          for e in examples]


def test_readers_name_a_folder_and_a_training_file_given_as_a_corpus(tmp_path, capsys):
    from lens.corpus import iter_json_lines

    (tmp_path / "set").mkdir()
    for name in ("dev.jsonl.gz", "train.jsonl.gz"):
        _jsonl(tmp_path / "set" / name, [{"query": "q", "positive": "p"}])
    with pytest.raises(IsADirectoryError, match="is a directory; give a .jsonl"):
        list(iter_json_lines(tmp_path / "set"))
    with pytest.raises(IsADirectoryError, match=r"lens data shared .*train.jsonl.gz"):  # never the dev file
        read_examples(tmp_path / "set")
    pairs = _jsonl(tmp_path / "pairs.jsonl", [{"query": f"question {i}", "positive": f"an answer of some length {i}"}
                                              for i in range(3)])
    assert data_main(["data", "weak", str(pairs), "--out", str(tmp_path / "w.jsonl")]) == 2
    assert "add --from-positives" in capsys.readouterr().err
