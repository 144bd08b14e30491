"""lens.eval.sts_bench (`lens bench sts`, benchmarks/sts.py, benchmarks/sts_breakdown.py) with fake encoders: rows,
strata, files and errors."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from lens.cli import main
from lens.encoder import EncodeOutput
from lens.eval.sts import STRATA, pair_cosines, pair_stratum, spearman_by_stratum, sts_score

PAIRS = [  # (sentence1, sentence2, score): captions, headlines and prose, so every stratum but question is filled
    ("A man is playing a flute.", "A man plays a flute.", 4.8), ("A dog runs.", "A cat sleeps.", 0.6),
    ("A woman is cutting an onion.", "A woman slices an onion.", 4.5), ("Two boys play soccer.", "A girl reads.", 0.4),
    ("A child is swimming.", "A kid swims in a pool.", 4.0), ("The man is cooking.", "The car is red.", 0.2),
    ("A bird is flying.", "A plane is flying.", 1.8), ("Three dogs bark.", "Dogs are barking loudly.", 3.6),
    ("A horse jumps a fence.", "A horse leaps.", 3.9), ("Some people are dancing.", "A man sings.", 1.0),
    ("Obama visits China", "Obama arrives in Beijing", 3.5), ("Stocks fall in Asia", "Asian markets drop", 4.2),
    ("Storm hits coast", "Election results delayed", 0.1), ("Fire destroys homes", "Homes lost to wildfire", 4.1),
    ("Bank raises rates", "Rates raised by bank", 4.9), ("Team wins final", "Weather turns cold", 0.3),
    ("Court blocks law", "Judge halts new law", 4.0), ("Oil prices rise", "Gold prices fall", 1.2),
    ("Museum opens wing", "New museum wing opens", 4.7), ("Police arrest suspect", "Suspect detained by police", 4.4),
    ("I think you are right about this.", "You are right, I think.", 4.1),
    ("It depends on the version you use.", "The answer is in the manual.", 1.5),
]


def _words(text):
    return [w.strip(".,").lower() for w in text.split()]


class FakeLens:
    """Bag-of-words lexicon (dimension = hashed word) and a dense vector of word lengths."""

    def __init__(self):
        self.calls = []

    def _vectors(self, texts, instruction=None):
        lex = np.zeros((len(texts), 64), dtype=np.float32)
        dense = np.zeros((len(texts), 4), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in _words(t):
                lex[i, sum(map(ord, w)) % 64] += 1.0
                dense[i, len(w) % 4] += 1.0
        if instruction:  # the instruction moves the vectors a little, so a test can see it was passed
            lex[:, 0] += 0.5
        return lex, dense

    def encode_queries(self, texts, instruction=None, output="lexicon", **kw):
        self.calls.append(("query", instruction))
        return EncodeOutput(*self._vectors(texts, instruction))

    def encode_documents(self, texts, output="lexicon", **kw):
        self.calls.append(("document", None))
        return EncodeOutput(*self._vectors(texts))


class FakeMiniLM:
    def encode(self, texts, show_progress_bar=False):
        v = np.zeros((len(texts), 26), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in _words(t):
                v[i, ord(w[0]) % 26] += 1.0
        return v


@pytest.fixture
def fakes(monkeypatch):
    lens = FakeLens()
    monkeypatch.setattr("lens.encoder.LensEncoder.from_pretrained", classmethod(lambda cls, *a, **k: lens))
    monkeypatch.setattr("lens.dense.DenseEncoder.from_pretrained", classmethod(lambda cls, *a, **k: FakeMiniLM()))
    return lens


@pytest.fixture
def sts_file(tmp_path):
    path = tmp_path / "mine.tsv.gz"
    lines = ["sentence1\tsentence2\tscore\tsplit"]
    lines += [f"{a}\t{b}\t{s}\t{'test' if i % 2 == 0 else 'dev'}" for i, (a, b, s) in enumerate(PAIRS)]
    lines += [f"{a}\t{b}\t{s}\ttest" for a, b, s in PAIRS[1::2]]  # test holds every pair
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines) + "\n")
    return path


def test_rows_equal_direct_scores_and_strata(fakes, sts_file, tmp_path, capsys):
    out = tmp_path / "res"
    rc = main(["bench", "sts", str(sts_file), "--pairing", "symmetric,asymmetric", "--by-stratum",
               "--instruction", "Find similar text", "--output", str(out)])
    assert rc == 0
    results = json.loads(out.with_suffix(".json").read_text())
    assert "NaN" not in out.with_suffix(".json").read_text()  # a stratum too small is null: JSON has no NaN
    rows = {(r["system"], r["pairing"]): r for r in results["rows"]}
    assert set(rows) == {("minilm", "-"), ("lens-lexicon", "symmetric"), ("lens-dense", "symmetric"),
                         ("lens-lexicon", "asymmetric"), ("lens-dense", "asymmetric")}
    test = [p for i, p in enumerate(PAIRS) if i % 2 == 0] + PAIRS[1::2]
    s1, s2, gold = [p[0] for p in test], [p[1] for p in test], np.array([p[2] for p in test])
    lens, mini = FakeLens(), FakeMiniLM()
    q1, q2 = lens.encode_queries(s1, "Find similar text"), lens.encode_queries(s2, "Find similar text")
    d2 = lens.encode_documents(s2)
    assert rows[("lens-lexicon", "symmetric")]["spearman"] == pytest.approx(sts_score(q1.lexicon, q2.lexicon, gold))
    assert rows[("lens-dense", "symmetric")]["spearman"] == pytest.approx(sts_score(q1.dense, q2.dense, gold))
    assert rows[("lens-lexicon", "asymmetric")]["spearman"] == pytest.approx(sts_score(q1.lexicon, d2.lexicon, gold))
    assert rows[("minilm", "-")]["spearman"] == pytest.approx(sts_score(mini.encode(s1), mini.encode(s2), gold))
    assert all(r["pairs"] == len(test) and r["split"] == "test" and r["set"] == str(sts_file) for r in rows.values())
    assert ("query", "Find similar text") in fakes.calls and results["_meta"]["instruction"] == "Find similar text"
    # strata: the first pairing's lexicon, against a direct per-stratum computation
    expected = spearman_by_stratum(pair_cosines(q1.lexicon, q2.lexicon), gold, [pair_stratum(a, b) for a, b in
                                                                              zip(s1, s2)])
    strata = {r["stratum"]: r for r in results["strata"]}
    assert set(strata) == {name for name in (*STRATA, "all") if name in expected}
    for name, (n, rho) in expected.items():
        assert strata[name]["pairs"] == n and strata[name]["pairing"] == "symmetric"
        if rho != rho:
            assert strata[name]["lens-lexicon"] is None
        else:
            assert strata[name]["lens-lexicon"] == pytest.approx(rho)
    md = out.with_suffix(".md").read_text()
    assert "(not MTEB's STS instruction)" in md and "## By stratum" in md and "| headline-like |" in md
    assert md == capsys.readouterr().out


def test_splits_are_judged_apart_and_sets_resolve_by_name(fakes, sts_file, tmp_path, monkeypatch):
    data = tmp_path / "data"
    (data / "sts" / "stsbenchmark").mkdir(parents=True)
    (data / "sts" / "stsbenchmark" / "stsbenchmark.tsv.gz").write_bytes(sts_file.read_bytes())
    monkeypatch.setenv("LENS_DATA_DIR", str(data))
    out = tmp_path / "res"
    assert main(["bench", "sts", "--sets", "stsbenchmark", "--split", "dev,test", "--output", str(out)]) == 0
    rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    assert {(r["split"], r["pairs"]) for r in rows} == {("dev", 11), ("test", 22)}
    assert json.loads(out.with_suffix(".json").read_text())["strata"] == []  # no --by-stratum
    # --data-dir may name the sts directory itself
    assert main(["bench", "sts", "stsbenchmark", "--data-dir", str(data / "sts"), "--output", str(out),
                 "--overwrite"]) == 0


def test_bad_sets_and_pairings_fail_before_encoding(fakes, tmp_path, capsys):
    assert main(["bench", "sts", "--pairing", "sideways"]) == 2
    assert "unknown --pairing sideways; choose from symmetric, asymmetric" in capsys.readouterr().err
    assert main(["bench", "sts", "no-such-set", "--output", str(tmp_path / "x")]) == 2
    assert "neither a file nor one of sick-r, stsbenchmark" in capsys.readouterr().err
    assert main(["bench", "sts", "sick-r", "--data-dir", str(tmp_path), "--output", str(tmp_path / "x")]) == 2
    assert "give --data-dir" in capsys.readouterr().err
    assert fakes.calls == [] and not (tmp_path / "x.json").exists()


def test_breakdown_script_runs_by_stratum_and_rerenders(fakes, sts_file, tmp_path, capsys):
    from bench_helpers import load_script

    bd = load_script("sts_breakdown")
    out = tmp_path / "bd"
    assert bd.main(["--markdown-only", "--output", str(out)]) == 2
    assert "bd.json not found: run without --markdown-only first" in capsys.readouterr().err
    assert bd.main([str(sts_file), "--output", str(out)]) == 0
    results = json.loads(out.with_suffix(".json").read_text())
    assert {r["split"] for r in results["rows"]} == {"dev", "test"} and results["strata"]
    assert bd.main(["--markdown-only", "--output", str(out), "--note", "read once"]) == 0
    assert "- read once" in out.with_suffix(".md").read_text()


def test_variants_and_text_rules_are_judged_apart(monkeypatch, sts_file, tmp_path, capsys):
    """--variant rewrites both sentences (upper-all: capitals); --text-rule loads the model under each rule. A
    case-sensitive fake shows both: capitals change its vectors unless the rule folds them back."""
    from lens.inputs import normalize_texts

    loaded = []

    class CasedLens(FakeLens):
        def __init__(self, rule):
            super().__init__()
            self.config = type("Config", (), {"text_normalization": rule})()

        def _vectors(self, texts, instruction=None):
            texts = normalize_texts(list(texts), self.config.text_normalization)
            lex = np.zeros((len(texts), 64), dtype=np.float32)
            for i, t in enumerate(texts):
                for w in t.split():
                    lex[i, sum(map(ord, w)) % 64] += 1.0
            return lex, lex[:, :4].copy()

    def load(cls, path, text_normalization=None, **kw):
        loaded.append(text_normalization)
        return CasedLens(None if text_normalization == "none" else text_normalization)

    monkeypatch.setattr("lens.encoder.LensEncoder.from_pretrained", classmethod(load))
    monkeypatch.setattr("lens.dense.DenseEncoder.from_pretrained", classmethod(lambda cls, *a, **k: FakeMiniLM()))
    out = tmp_path / "res"
    assert main(["bench", "sts", str(sts_file), "--variant", "original,upper-all",
                 "--text-rule", "none,lowercase-shouted", "--output", str(out)]) == 0
    assert loaded == ["none", "lowercase-shouted"]
    rows = {(r["variant"], r["rule"], r["system"]): r["spearman"]
            for r in json.loads(out.with_suffix(".json").read_text())["rows"]}
    assert {k for k in rows if k[2] == "minilm"} == {("original", None, "minilm"), ("upper-all", None, "minilm")}
    lex = {k[:2]: v for k, v in rows.items() if k[2] == "lens-lexicon"}
    assert set(lex) == {(v, r) for v in ("original", "upper-all") for r in ("none", "lowercase-shouted")}
    assert lex[("original", "none")] == lex[("original", "lowercase-shouted")]  # no test sentence is shouted
    assert lex[("upper-all", "none")] != lex[("original", "none")]  # capitals are other words to a cased model
    test = [p for i, p in enumerate(PAIRS) if i % 2 == 0] + PAIRS[1::2]
    gold = np.array([p[2] for p in test])
    folded = CasedLens("lowercase-shouted")
    a = folded.encode_queries([p[0].upper() for p in test]).lexicon
    b = folded.encode_queries([p[1].upper() for p in test]).lexicon
    assert lex[("upper-all", "lowercase-shouted")] == pytest.approx(sts_score(a, b, gold))
    assert "| upper-all | lowercase-shouted | lens-lexicon |" in out.with_suffix(".md").read_text()
    assert main(["bench", "sts", str(sts_file), "--variant", "title-only", "--output", str(tmp_path / "x")]) == 2
    assert "variant 'title-only' rewrites only documents" in capsys.readouterr().err
    assert loaded == ["none", "lowercase-shouted"]  # refused before any model was loaded


def test_a_users_file_is_never_replaced_and_own_results_are(fakes, sts_file, tmp_path, capsys):
    """OUT.md / OUT.json are replaced only when they are a saved result; a user's report is refused before work."""
    mine = tmp_path / "report.md"
    mine.write_text("my own notes\n")
    assert main(["bench", "sts", str(sts_file), "--output", str(mine)]) == 2
    assert "report.md exists and is not a saved benchmark result" in capsys.readouterr().err
    assert mine.read_text() == "my own notes\n" and not (tmp_path / "report.json").exists() and fakes.calls == []
    out = tmp_path / "sts"
    assert main(["bench", "sts", str(sts_file), "--output", str(out)]) == 0
    first, calls = json.loads((tmp_path / "sts.json").read_text()), len(fakes.calls)
    assert main(["bench", "sts", str(sts_file), "--output", str(out), "--pairing", "asymmetric"]) == 2
    assert "sts.json holds an earlier result: add --overwrite" in capsys.readouterr().err
    assert json.loads((tmp_path / "sts.json").read_text()) == first and len(fakes.calls) == calls  # before work
    assert main(["bench", "sts", str(sts_file), "--output", str(out), "--pairing", "asymmetric",
                 "--overwrite"]) == 0  # its own result, replaced when asked
    assert json.loads((tmp_path / "sts.json").read_text())["rows"] != first["rows"]
    (tmp_path / "notes.json").write_text('{"my": "notes"}')  # a JSON object, but not a benchmark's
    assert main(["bench", "sts", str(sts_file), "--output", str(tmp_path / "notes"), "--overwrite"]) == 2
    assert "notes.json exists and is not a saved benchmark result" in capsys.readouterr().err
    assert (tmp_path / "notes.json").read_text() == '{"my": "notes"}'


def test_files_and_splits_are_read_before_a_model_loads(sts_file, tmp_path, monkeypatch, capsys):
    def refuse(cls, *a, **k):
        raise AssertionError("a model was loaded before the data was checked")

    monkeypatch.setattr("lens.encoder.LensEncoder.from_pretrained", classmethod(refuse))
    monkeypatch.setattr("lens.dense.DenseEncoder.from_pretrained", classmethod(refuse))
    assert main(["bench", "sts", str(sts_file), "--split", "tset", "--output", str(tmp_path / "x")]) == 2
    assert "no pairs in split 'tset'; the file's splits: dev, test" in capsys.readouterr().err


def test_a_constant_system_scores_no_correlation_not_nan(fakes, sts_file, tmp_path, monkeypatch):
    monkeypatch.setattr(FakeMiniLM, "encode", lambda self, texts, **k: np.ones((len(texts), 3), np.float32))
    out = tmp_path / "const"
    assert main(["bench", "sts", str(sts_file), "--output", str(out)]) == 0
    text = (tmp_path / "const.json").read_text()
    assert "NaN" not in text
    row = next(r for r in json.loads(text)["rows"] if r["system"] == "minilm")
    assert row["spearman"] is None and "| minilm | - | – |" in (tmp_path / "const.md").read_text()


def test_markdown_only_renders_results_saved_before_meta(tmp_path):
    """benchmarks/sts.py saved command and model at the top level; --markdown-only renders and annotates them."""
    old = {"command": "python benchmarks/sts.py --model default", "model": "default",
           "rows": [{"set": "stsbenchmark", "split": "test", "system": "lens-lexicon", "pairing": "symmetric",
                     "spearman": 70.61, "pairs": 1379, "seconds": 259.0}]}
    (tmp_path / "sts.json").write_text(json.dumps(old))
    assert main(["bench", "sts", "--markdown-only", "--output", str(tmp_path / "sts"), "--note", "older weights"]) == 0
    md = (tmp_path / "sts.md").read_text()
    assert "python benchmarks/sts.py --model default" in md and "| lens-lexicon | symmetric | 70.6 |" in md
    assert "- older weights" in md and "(MTEB's protocol)" in md
