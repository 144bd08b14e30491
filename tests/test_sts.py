"""STS evaluation plumbing: loading a split, pair cosines and Spearman against hand values."""

import gzip

import numpy as np
import pytest

from lens.eval.sts import evaluate_sts, load_sts, pair_cosines, spearman


@pytest.fixture
def sts_file(tmp_path):
    path = tmp_path / "sts.tsv.gz"
    rows = ["sentence1\tsentence2\tscore\tsplit", "a\tb\t5.0\ttest", "c\td\t1.0\ttest", "e\tf\t3.0\ttest",
            "g\th\t2.0\ttrain"]
    with gzip.open(path, "wt") as f:
        f.write("\n".join(rows) + "\n")
    return path


def test_load_split(sts_file):
    s1, s2, gold = load_sts(sts_file, "test")
    assert s1 == ["a", "c", "e"] and s2 == ["b", "d", "f"] and gold.tolist() == [5.0, 1.0, 3.0]
    with pytest.raises(ValueError, match="no pairs in split 'dev'; the file's splits: test, train"):
        load_sts(sts_file, "dev")
    with pytest.raises(FileNotFoundError):
        load_sts(sts_file.parent / "missing.tsv.gz")


def test_pair_cosines_and_spearman():
    a = np.array([[1.0, 0.0], [0.0, 2.0], [0.0, 0.0]])
    b = np.array([[1.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
    np.testing.assert_allclose(pair_cosines(a, b), [1 / np.sqrt(2), 1.0, 0.0])
    assert spearman(np.array([0.1, 0.5, 0.3]), np.array([1.0, 3.0, 2.0])) == pytest.approx(1.0)
    assert spearman(np.array([0.1, 0.5, 0.3]), np.array([3.0, 1.0, 2.0])) == pytest.approx(-1.0)


def test_evaluate_sts_ranks_pairs(sts_file):
    vecs = {"a": [1, 0], "b": [1, 0.1], "c": [1, 0], "d": [0, 1], "e": [1, 0], "f": [1, 1]}
    enc = lambda s1, s2: (np.array([vecs[s] for s in s1], float), np.array([vecs[s] for s in s2], float))
    r = evaluate_sts(enc, sts_file, "test")
    assert r["pairs"] == 3 and r["spearman"] == pytest.approx(100.0)


class _Recorder:
    """Stands in for a LensEncoder: each side's vectors say which method encoded them and with what instruction."""

    def __init__(self):
        self.calls = []

    def _encode(self, kind, texts, instruction=None, **kw):
        self.calls.append((kind, instruction, kw["output"]))
        return np.full((len(texts), 2), 1.0 if kind == "query" else 2.0)

    def encode_queries(self, texts, instruction=None, **kw):
        return self._encode("query", texts, instruction, **kw)

    def encode_documents(self, texts, **kw):
        return self._encode("document", texts, **kw)


def test_pairing_symmetric_by_default_asymmetric_on_request():
    from lens.eval.sts import STS_INSTRUCTION, lens_pair_encoder

    enc = _Recorder()
    a, b = lens_pair_encoder(enc, output="both")(["x", "y"], ["z", "w"])
    assert enc.calls == [("query", STS_INSTRUCTION, "both")] * 2 and (b == 1.0).all()
    enc = _Recorder()
    a, b = lens_pair_encoder(enc, pairing="asymmetric", instruction="Find it")(["x"], ["z"])
    assert enc.calls == [("query", "Find it", "lexicon"), ("document", None, "lexicon")] and (b == 2.0).all()
    with pytest.raises(ValueError, match="unknown STS pairing 'both'.*symmetric, asymmetric"):
        lens_pair_encoder(enc, pairing="both")


def test_pair_stratum_by_shape():
    from lens.eval.sts import pair_stratum

    assert pair_stratum("A man is playing a flute.", "Two men play flutes.") == "caption-like"
    assert pair_stratum("Obama visits China", "Obama arrives in Beijing") == "headline-like"
    assert pair_stratum("How do I fix it?", "The fix is easy.") == "question"
    assert pair_stratum("I think you are right about this.", "You are right, I think.") == "other"
    # a caption needs both sentences short and opening with a determiner; a headline needs no final punctuation
    assert pair_stratum("A man is playing a flute.", "He plays.") == "other"
    long = "A man " + "very " * 20 + "slowly walks."
    assert pair_stratum(long, "A man walks.") == "other"
    assert pair_stratum("Obama visits China", "Obama arrives in Beijing.") == "other"


def test_word_overlap_is_jaccard_of_lowercased_words():
    from lens.eval.sts import word_overlap

    assert word_overlap("The cat sat.", "the CAT ran") == pytest.approx(2 / 4)
    assert word_overlap("a b", "c d") == 0.0
    assert word_overlap("...", "!!") == 0.0


def test_spearman_by_stratum_matches_a_loop_over_strata():
    from scipy.stats import spearmanr

    from lens.eval.sts import STRATA, spearman_by_stratum

    rng = np.random.default_rng(0)
    n = 60
    pred, gold = rng.normal(size=n), rng.uniform(0, 5, size=n)
    strata = [STRATA[i % 3] for i in range(n - 4)] + ["other"] * 4  # "other" has 4 pairs: too few
    out = spearman_by_stratum(pred, gold, strata)
    assert list(out) == [*STRATA, "all"]
    for name in STRATA[:3]:
        rows = [i for i, s in enumerate(strata) if s == name]
        assert out[name] == (len(rows), pytest.approx(100 * spearmanr(pred[rows], gold[rows]).statistic))
    assert out["other"][0] == 4 and np.isnan(out["other"][1])
    assert out["all"] == (n, pytest.approx(100 * spearmanr(pred, gold).statistic))
    assert "question" not in spearman_by_stratum(pred[:3], gold[:3], ["other"] * 3)  # an empty stratum is left out
    with pytest.raises(ValueError, match="equally long"):
        spearman_by_stratum(pred, gold, strata[:-1])


@pytest.mark.parametrize("scores, message", [
    (["5.0", "nan", "1.0"], r":3: score 'nan' is not a finite number"),
    (["5.0", "inf", "1.0"], r":3: score 'inf' is not a finite number"),
    (["2", "2", "2"], r"3 pair\(s\), all scored 2: a rank correlation needs pairs with different gold scores"),
    (["2"], r"1 pair\(s\), all scored 2"),
])
def test_gold_scores_that_give_no_correlation_are_refused(tmp_path, scores, message):
    path = tmp_path / "bad.tsv"
    path.write_text("sentence1\tsentence2\tscore\tsplit\n" + "".join(f"s{i}\tt{i}\t{v}\ttest\n"
                                                                   for i, v in enumerate(scores)))
    with pytest.raises(ValueError, match=message):
        load_sts(path, "test", judged=True)


def test_a_blank_sentence_is_kept_and_reported(tmp_path, caplog):
    import logging

    path = tmp_path / "blank.tsv"
    path.write_text("sentence1\tsentence2\tscore\tsplit\na\tb\t5\ttest\n \tc\t1\ttest\nd\t\t3\ttest\n")
    with caplog.at_level(logging.WARNING, logger="lens.corpus"):
        s1, s2, gold = load_sts(path, "test")
    assert len(gold) == 3 and "2 pair(s) of split 'test' have a blank sentence (lines 3, 4)" in caplog.text
