"""BEIR-layout variants (lens.variants): each rewrite on a tiny set written here, ids and qrels kept."""

from __future__ import annotations

import gzip
import json
import random
import time

import pytest

from lens.corpus import load_beir
from lens.variants import VARIANTS, add_typos, typo_word, write_variant


def _write_set(d, titles=True):
    (d / "qrels").mkdir(parents=True)
    docs = [{"_id": "d1", "title": "Heart Disease" if titles else "", "text": "Statins lower risk. A second one."},
            {"_id": "d2", "title": "", "text": "Wing lift in a slipstream. More text here."}]
    with gzip.open(d / "corpus.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in docs)
    with gzip.open(d / "queries.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in [{"_id": "q1", "text": "Do statins prevent heart disease?"},
                                                    {"_id": "q2", "text": "wing lift"}])
    (d / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t2\n")
    return d


def test_every_variant_keeps_ids_and_qrels(tmp_path):
    src = _write_set(tmp_path / "src")
    docs0, q0, qrels0 = load_beir(src)
    for name in VARIANTS:
        rec = write_variant(src, tmp_path / name, name, seed=3)
        docs, q, qrels = load_beir(tmp_path / name)
        assert [d.id for d in docs] == [d.id for d in docs0] and q.keys() == q0.keys() and qrels == qrels0
        assert rec["variant"] == name and json.loads((tmp_path / name / "variant.json").read_text()) == rec


def test_case_and_title_rewrites(tmp_path):
    src = _write_set(tmp_path / "src")
    write_variant(src, tmp_path / "u", "upper-all")
    docs, q, _ = load_beir(tmp_path / "u")
    assert docs[0].full_text == "HEART DISEASE STATINS LOWER RISK. A SECOND ONE." and q["q2"] == "WING LIFT"
    rec = write_variant(src, tmp_path / "uq", "upper-queries")
    docs, q, _ = load_beir(tmp_path / "uq")
    assert docs[0].full_text == "Heart Disease Statins lower risk. A second one." and q["q1"].isupper()
    assert (rec["documents_changed"], rec["queries_changed"]) == (0, 2)
    rec = write_variant(src, tmp_path / "lq", "lower-queries")
    docs, q, _ = load_beir(tmp_path / "lq")
    assert docs[0].full_text == "Heart Disease Statins lower risk. A second one." and q["q2"] == "wing lift"
    assert q["q1"] == "do statins prevent heart disease?"
    assert (rec["documents_changed"], rec["queries_changed"]) == (0, 1)  # "wing lift" was lower case already
    write_variant(src, tmp_path / "t", "title-only")
    docs, _, _ = load_beir(tmp_path / "t")
    assert [d.full_text for d in docs] == ["Heart Disease", "Wing lift in a slipstream."]


def test_typos_are_light_seeded_and_spare_short_words():
    text = "retrieval augmented generation with transformer encoders is an old idea"
    a, b = add_typos(text, 0, "q1", rate=0.5), add_typos(text, 0, "q1", rate=0.5)
    assert a == b != text and add_typos(text, 1, "q1", rate=0.5) != a
    assert len(a.split()) == len(text.split())
    changed = [(x, y) for x, y in zip(text.split(), a.split()) if x != y]
    assert changed and all(len(x) >= 4 and x[0] == y[0] and abs(len(x) - len(y)) <= 1 for x, y in changed)
    assert add_typos("an is of to", 0, "q", rate=1.0) == "an is of to"
    rng = random.Random(0)
    for _ in range(50):
        w = typo_word("encoder", rng)
        assert abs(len(w) - 7) <= 1 and w[0] == "e"


def test_bad_requests_are_clear(tmp_path):
    src = _write_set(tmp_path / "src", titles=False)
    with pytest.raises(ValueError, match="unknown variant 'shout'; valid: upper-queries"):
        write_variant(src, tmp_path / "x", "shout")
    with pytest.raises(ValueError, match="no document has a title"):
        write_variant(src, tmp_path / "x", "title-only")
    write_variant(src, tmp_path / "x", "upper-all")
    with pytest.raises(FileExistsError, match="pass --overwrite"):
        write_variant(src, tmp_path / "x", "upper-all")
    with pytest.raises(FileNotFoundError, match="BEIR directory not found"):
        write_variant(tmp_path / "missing", tmp_path / "y", "upper-all")


def test_lens_data_variant_command(tmp_path, capsys):
    from lens.cli import main

    src = _write_set(tmp_path / "src")
    assert main(["data", "variant", str(src), "--variant", "upper-queries", "--out", str(tmp_path / "v")]) == 0
    assert "0 of 2 documents and 2 of 2 queries changed" in capsys.readouterr().out
    assert load_beir(tmp_path / "v")[1]["q2"] == "WING LIFT"
    assert main(["data", "variant", str(src), "--variant", "upper-queries", "--out", str(tmp_path / "v")]) == 2
    assert "pass --overwrite" in capsys.readouterr().err
    assert main(["data", "variant", str(src), "--variant", "upper-queries", "--out", str(tmp_path / "v"),
                 "--overwrite"]) == 0


def test_overwrite_replaces_only_a_variant_or_an_empty_folder(tmp_path, capsys):
    """--overwrite replaces an earlier variant (it has variant.json) or an empty folder; a folder of the user's own
    files, or a file, is refused in one line and left as it was."""
    from lens.cli import main

    src = _write_set(tmp_path / "src")
    mine = tmp_path / "mydir"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    (mine / "important.csv").write_text("a,b\n")
    assert main(["data", "variant", str(src), "--variant", "title-only", "--out", str(mine), "--overwrite"]) == 2
    assert "is not a variant directory (no variant.json)" in capsys.readouterr().err
    assert sorted(p.name for p in mine.iterdir()) == ["important.csv", "notes.txt"]
    (tmp_path / "afile").write_text("x")
    with pytest.raises(FileExistsError, match="is a file"):
        write_variant(src, tmp_path / "afile", "upper-all", overwrite=True)
    (tmp_path / "empty").mkdir()
    write_variant(src, tmp_path / "empty", "upper-all", overwrite=True)
    assert write_variant(src, tmp_path / "empty", "lower-all", overwrite=True)["variant"] == "lower-all"
    assert json.loads((tmp_path / "empty" / "variant.json").read_text())["variant"] == "lower-all"


def test_a_variant_is_the_same_bytes_every_time_and_keeps_query_fields(tmp_path):
    src = _write_set(tmp_path / "src")
    rows = [json.loads(line) for line in gzip.decompress((src / "queries.jsonl.gz").read_bytes()).splitlines()]
    rows[0]["metadata"] = {"topic": "lift"}
    (src / "queries.jsonl.gz").write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    write_variant(src, tmp_path / "a", "typos", seed=3)
    time.sleep(1.1)  # a gzip header with the time in it would differ now
    write_variant(src, tmp_path / "b", "typos", seed=3)
    for name in ("corpus.jsonl.gz", "queries.jsonl.gz"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    written = [json.loads(line) for line in gzip.decompress((tmp_path / "a" / "queries.jsonl.gz").read_bytes())
               .decode().splitlines()]
    assert written[0]["metadata"] == {"topic": "lift"} and written[0]["_id"] == rows[0]["_id"]
