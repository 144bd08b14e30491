"""lens.casing (truecasing texts in capitals), its text rule "truecase-shouted" and `lens data casing`."""

from __future__ import annotations

import gzip
import json

import pytest

from lens.casing import (CASING_FORMAT, CasingTable, build_casing_table, count_forms, is_shouted, is_uncased,
                         load_casing_table, packaged_casing_table)

TEXTS = [
    "The mission was run by NASA in Houston. Later the crew met NASA staff.",
    "Data from NASA and the European agency were shared with Paris.",
    "Engineers in Paris and Houston compared the data.",
    "The data were shared.",  # "The" opens a sentence: its capital says nothing about "the"
    "Engineers in Paris and Houston compared the data.",  # a repeat counts once
    "nasa said nothing",  # no capital at all: no evidence of case
    "ALL OF NASA IN CAPITALS HERE",  # shouted: no evidence either
    "Both iPhone and iphone appear; the iPhone is sold in Paris.",
]


def test_is_shouted():
    assert is_shouted("WHAT CAUSES HEART FAILURE") and is_shouted("THE pH OF BLOOD PLASMA")
    assert not is_shouted("DNA") and not is_shouted("Effects of DNA damage on HIV-1")
    assert not is_shouted("Rare Title In Capitals Per Word") and not is_shouted("")


def test_is_uncased():
    assert is_uncased("WHAT CAUSES HEART FAILURE") and is_uncased("dna repair in yeast")
    assert not is_uncased("DNA repair in yeast") and not is_uncased("Effects of dna")  # one capital: cased
    assert not is_uncased("dna") and not is_uncased("")  # under 6 letters: too little to tell


def test_counts_skip_sentence_starts_repeats_and_texts_without_case_evidence():
    counts, n = count_forms(TEXTS)
    assert n == 5  # of the eight: the repeat, the caseless and the shouted text are left out
    assert counts["nasa"] == {"NASA": 3}  # the caseless and shouted texts' "nasa"/"NASA" are not counted
    assert counts["the"] == {"the": 4}  # the three sentence-initial "The" are not counted
    assert counts["paris"] == {"Paris": 3} and counts["houston"] == {"Houston": 2}  # the repeat once
    assert counts["engineers"] == {}  # only ever a sentence's first word
    assert counts["iphone"] == {"iPhone": 2, "iphone": 1}


def test_table_keeps_usual_forms_that_are_not_lower_case():
    table = build_casing_table(TEXTS, min_count=2, min_share=0.6, sources=["mine"])
    assert table.forms == {"nasa": "NASA", "paris": "Paris", "houston": "Houston", "iphone": "iPhone"}
    assert table.texts == 5 and table.sources == ["mine"]
    assert "iphone" not in build_casing_table(TEXTS, min_count=2, min_share=0.7).forms  # 2 of 3: under 0.7
    assert build_casing_table(TEXTS, min_count=3, min_share=0.6).forms == {"nasa": "NASA", "paris": "Paris"}
    with pytest.raises(ValueError, match="min_share in"):
        build_casing_table(TEXTS, min_share=0)


def test_truecase_restores_usual_forms_and_sentence_capitals():
    table = CasingTable(forms={"nasa": "NASA", "houston": "Houston", "i": "I", "o'neill": "O'Neill"})
    assert table.truecase("NASA STAFF IN HOUSTON. THE CREW LEFT! WHY? I MET O'NEILL.") == \
        "NASA staff in Houston. The crew left! Why? I met O'Neill."
    assert table.truecase('"QUOTED" OPENING (IN BRACKETS). 3 DOGS RAN. HIV-1 IS A VIRUS') == \
        '"Quoted" opening (in brackets). 3 dogs ran. Hiv-1 is a virus'  # unknown words are lower-cased
    assert table.truecase("") == ""
    mixed = "Mixed case text about NASA and Houston"
    assert table.truecase_shouted(mixed) == mixed  # only texts in capitals are rewritten
    assert table.truecase_shouted("NASA IN HOUSTON") == "NASA in Houston"
    assert table.truecase_shouted("nasa in houston") == "nasa in houston"
    assert table.truecase_uncased("nasa in houston") == "NASA in Houston"  # lower case says nothing either
    assert table.truecase_uncased("NASA IN HOUSTON") == "NASA in Houston" and table.truecase_uncased(mixed) == mixed


def test_save_load_round_trip_and_refusals(tmp_path):
    table = build_casing_table(TEXTS, sources=["mine"])
    path = tmp_path / "casing.json.gz"
    table.save(path)
    first = path.read_bytes()
    table.save(path)
    assert path.read_bytes() == first  # the same table gives the same bytes
    assert load_casing_table(path) == table
    (tmp_path / "plain.json").write_text("{}")
    with pytest.raises(ValueError, match="not a casing table"):
        load_casing_table(tmp_path / "plain.json")
    (tmp_path / "other.json.gz").write_bytes(gzip.compress(json.dumps({"format": 99, "forms": {}}).encode()))
    with pytest.raises(ValueError, match=f"not a casing table of format {CASING_FORMAT}.*rebuild"):
        load_casing_table(tmp_path / "other.json.gz")


def test_packaged_table_and_the_text_rule():
    from lens.inputs import TEXT_NORMALIZATIONS, normalize_texts

    table = packaged_casing_table()
    assert len(table.forms) > 10_000 and table.sources  # built from the training sets, named in the file
    assert all(form.lower() == word and form != word for word, form in table.forms.items())
    assert "truecase-shouted" in TEXT_NORMALIZATIONS
    texts = ["WHAT PROBLEMS ARE THERE IN MAKING UP DESCRIPTIVE TITLES?", "Effects of DNA damage", "DNA", ""]
    assert normalize_texts(texts, "truecase-shouted") == [
        "What problems are there in making up descriptive titles?", "Effects of DNA damage", "DNA", ""]
    assert normalize_texts(["I SAW NASA IN TEXAS"], "truecase-shouted") == ["I saw NASA in Texas"]
    assert normalize_texts(["i saw nasa in texas", "I saw nasa"], "truecase-uncased") == ["I saw NASA in Texas",
                                                                                          "I saw nasa"]


def test_truecase_shouted_rule_maps_shouted_texts_to_their_truecased_vectors(tiny_lens_dir, tiny_encoder):
    from lens.encoder import LensEncoder

    enc = LensEncoder.from_pretrained(tiny_lens_dir, text_normalization="truecase-shouted")
    docs = ["The cell protein gene in Paris", "Cancer patients at NASA"]
    truecased = [packaged_casing_table().truecase(d.upper()) for d in docs]
    assert truecased[0] != docs[0].lower()  # a sentence capital at least: not the lower-case rule's text
    assert (enc.encode([d.upper() for d in docs]) == tiny_encoder.encode(truecased)).all()
    assert (enc.encode(docs) == tiny_encoder.encode(docs)).all()  # ordinary texts: as without the rule
    assert enc.fingerprint()["lens_text_normalization"] == "truecase-shouted"


def test_lens_data_casing_command(tmp_path, capsys):
    from lens.cli import main

    d = tmp_path / "myset"
    d.mkdir()
    rows = [{"query": t, "positive": "Pairs from Houston and NASA staff."} for t in TEXTS[:3]]
    with gzip.open(d / "pairs.jsonl.gz", "wt") as f:
        f.write("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "casing.json.gz"
    assert main(["data", "casing", str(d), "--out", str(out), "--min-count", "2"]) == 0
    assert "words with a usual form other than lower case, from 4 distinct mixed-case texts" in capsys.readouterr().out
    table = load_casing_table(out)
    assert table.forms["nasa"] == "NASA" and table.forms["houston"] == "Houston" and table.sources == ["myset"]
    (tmp_path / "test.jsonl").write_text(json.dumps(rows[0]) + "\n")
    assert main(["data", "casing", str(tmp_path / "test.jsonl"), "--out", str(tmp_path / "t.json.gz")]) == 2
    assert "never train on a test split" in capsys.readouterr().err
