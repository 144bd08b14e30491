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
    counted = count_forms(TEXTS)
    counts = counted.forms
    assert counted.texts == 5  # of the eight: the repeat, the caseless and the shouted text are left out
    assert counts["nasa"] == {"NASA": 3}  # the caseless and shouted texts' "nasa"/"NASA" are not counted
    assert counts["the"] == {"the": 4}  # the three sentence-initial "The" are not counted
    assert counts["paris"] == {"Paris": 3} and counts["houston"] == {"Houston": 2}  # the repeat once
    assert counts["engineers"] == {}  # only ever a sentence's first word
    assert counts["iphone"] == {"iPhone": 2, "iphone": 1}
    # pairs: the same sightings, keyed by the word before / after (lower case); a sentence start is never one
    assert counted.after[("by", "nasa")] == {"NASA": 1} and counted.after[("the", "iphone")] == {"iPhone": 1}
    assert counted.before[("nasa", "in")] == {"NASA": 1} and ("the", "mission") not in counted.before
    assert counted.after[("and", "iphone")] == {"iphone": 1}
    # every word in any form and position, counted in the same five texts
    assert counted.words["engineers"] == 1 and counted.words["the"] == 6 and counted.words["nasa"] == 3


def test_pairs_and_vocabulary_in_the_table():
    texts = ["Cells called T cells and B cells were counted by the team.",
             "The T cells of mice differ from the T cells of rats.",
             "Most T cells die; a t of tea is not a T cell.",
             "We saw that a t and a t were typed as a t here."]
    table = build_casing_table(texts, min_count=2, min_share=0.6, pair_min_count=3, pair_min_share=0.8)
    assert "t" not in table.forms  # alone: 5 of 9 sightings "T", under 0.6
    assert table.before == {"t cells": "T"}  # before "cells": 4 of 4 (the "T cell" once: under the count)
    assert table.after == {}  # "a t": 4 of 5 lower case, as the word's own form: a pair that agrees is not stored
    assert "cells" in table.known and "tea" not in table.known  # seen twice or more, in any form
    assert table.truecase("THE T CELLS OF A T") == "The T cells of a t"
    assert table.truecase("KRAS AND YAP OF T CELLS") == "KRAS and YAP of T cells"  # unknown, short: acronyms
    assert table.truecase("KINASES OF CELLS") == "Kinases of cells"  # unknown but long: lower case
    assert table.truecase("kras in cells") == "Kras in cells"  # only a word written in capitals is kept
    # a word in capitals right before a digit is part of a code, kept whatever its length or the vocabulary
    assert table.truecase("CELLS CALLED CX3CR1 AND TEAM7") == "Cells called CX3CR1 and TEAM7"
    assert table.truecase("THE 2CELLS") == "The 2cells"  # after a digit (a unit, an ordinal): as usual
    strict = build_casing_table(texts, min_count=2, min_share=0.6, pair_min_count=5, pair_min_share=0.8)
    assert strict.before == {} and strict.truecase("THE T CELLS") == "The t cells"
    # a format-1 table (no vocabulary): no word is kept as an acronym
    assert CasingTable(forms={}).truecase("KRAS IN CELLS") == "Kras in cells"
    with pytest.raises(ValueError, match="min_share in"):
        build_casing_table(texts, pair_min_share=1.5)


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


def test_a_corpus_table_overrules_the_general_one():
    general = CasingTable(forms={"apple": "Apple", "nasa": "NASA"}, after={"cd t": "T"}, before={"t cells": "T"},
                          known=frozenset({"apple", "nasa", "t", "cells", "the"}))
    docs = ["Fruit such as apple and pear. We ate an apple and a pear with YAP and miRNA levels.",
            "The apple was fresh; YAP and miRNA rose, t was low, and the t value fell. Apple pie is sweet.",
            "The t statistic, and a t of 2, for YAP."]
    own = build_casing_table(docs, lower_forms=True)
    assert own.forms["apple"] == "apple" and own.forms["yap"] == "YAP" and own.forms["mirna"] == "miRNA"
    assert "apple" not in build_casing_table(docs).forms  # without lower_forms a lower-case form is not kept
    merged = general.overruled_by(own)
    assert merged.truecase("THE APPLE AND PEAR, NASA, YAP AND MIRNA") == "The apple and pear, NASA, YAP and miRNA"
    assert general.truecase("THE T CELLS") == "The T cells"  # the general table's pair ...
    assert own.forms["t"] == "t" and merged.truecase("THE T CELLS") == "The t cells"  # ... loses to the corpus's "t"
    assert merged.before == {} and merged.after == {}  # the corpus has a form for "t": the pairs of "t" are gone
    assert merged.known >= general.known | {"yap", "pear"} and merged.texts == general.texts + own.texts
    assert general.forms["apple"] == "Apple"  # the general table itself is left as it was
    from lens.casing import corpus_casing_table, own_casing_table

    assert own_casing_table(docs * 5, max_texts=2).texts == 2  # a large corpus: a spaced sample (every 8th of 15)
    table = corpus_casing_table(docs, base=general)
    assert table.forms == merged.forms and table.sources == ["corpus"]
    assert corpus_casing_table(docs).forms["nasa"] == packaged_casing_table().forms["nasa"]  # default base: packaged


def test_a_table_extended_by_another_keeps_its_own_forms_and_gains_the_new_words():
    """What an index's table does when documents are added or indexes merged: the other table's evidence only for
    words this one has no form for (pairs go with their word), the vocabularies together, this table's settings."""
    mine = CasingTable(forms={"apple": "apple", "yap": "YAP"}, after={"the t": "t"},
                       known=frozenset({"apple", "yap", "an", "and"}),
                       texts=3, sources=["corpus"])
    more = CasingTable(forms={"apple": "Apple", "kras": "KRAS", "t": "T"}, after={"the apple": "Apple"},
                       before={"t cells": "T", "kras gene": "KRAS"}, known=frozenset({"kras", "gene"}), texts=2,
                       min_count=5, sources=["other"])
    grown = mine.extended_by(more)
    assert grown.forms == {"apple": "apple", "yap": "YAP", "kras": "KRAS", "t": "T"}
    assert grown.after == {"the t": "t"}  # more's pair for "apple", a word mine has a form for, is not taken
    assert grown.before == {"t cells": "T", "kras gene": "KRAS"}
    assert grown.known == {"apple", "yap", "an", "and", "kras", "gene"} and grown.texts == 5
    assert grown.sources == ["corpus"] and grown.min_count == mine.min_count
    assert grown.truecase("AN APPLE AND KRAS") == "An apple and KRAS"
    assert mine.extended_by(mine) is mine and mine.forms == {"apple": "apple", "yap": "YAP"}  # inputs unchanged


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
    with pytest.raises(ValueError, match=f"not a casing table of format 1 or {CASING_FORMAT}.*rebuild"):
        load_casing_table(tmp_path / "other.json.gz")
    # a format-1 table (forms only) still reads: no pairs, no vocabulary
    (tmp_path / "v1.json.gz").write_bytes(gzip.compress(json.dumps({"format": 1, "forms": {"nasa": "NASA"}}).encode()))
    old = load_casing_table(tmp_path / "v1.json.gz")
    assert old.forms == {"nasa": "NASA"} and old.after == old.before == {} and old.known is None
    assert old.truecase("NASA AND KRAS") == "NASA and kras"


def test_packaged_table_and_the_text_rule():
    from lens.inputs import TEXT_NORMALIZATIONS, normalize_texts

    table = packaged_casing_table()
    assert len(table.forms) > 10_000 and table.sources  # built from the training sets, named in the file
    assert all(form.lower() == word and form != word for word, form in table.forms.items())
    assert table.after and table.before and len(table.known) > 20_000
    assert all(form.lower() == pair.split()[1] for pair, form in table.after.items())
    assert all(form.lower() == pair.split()[0] for pair, form in table.before.items())
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
    assert ("3 words with a usual form other than lower case, 0 forms after and 0 before a given word, 9 words known, "
            "from 4 distinct mixed-case texts") in capsys.readouterr().out
    table = load_casing_table(out)
    assert table.forms["nasa"] == "NASA" and table.forms["houston"] == "Houston" and table.sources == ["myset"]
    (tmp_path / "test.jsonl").write_text(json.dumps(rows[0]) + "\n")
    assert main(["data", "casing", str(tmp_path / "test.jsonl"), "--out", str(tmp_path / "t.json.gz")]) == 2
    assert "never train on a test split" in capsys.readouterr().err


def test_an_encoder_truecases_with_the_table_it_is_given(tiny_lens_dir, tiny_encoder):
    from lens.encoder import LensEncoder
    from lens.inputs import normalize_texts

    table = CasingTable(forms={"yap": "YAP"}, known=frozenset({"in", "cells", "now"}))
    assert normalize_texts(["YAP IN CELLS NOW"], "truecase-shouted", table) == ["YAP in cells now"]
    assert normalize_texts(["YAP IN CELLS NOW"], "lowercase", table) == ["yap in cells now"]  # not a truecasing rule
    assert normalize_texts(["YAP IN CELLS NOW"], "truecase-shouted") == [
        packaged_casing_table().truecase("YAP IN CELLS NOW")]
    enc = LensEncoder.from_pretrained(tiny_lens_dir, text_normalization="truecase-shouted")
    enc.casing_table = table
    assert (enc.encode(["YAP IN CELLS NOW"]) == tiny_encoder.encode(["YAP in cells now"])).all()
    enc.casing_table = None  # the packaged table again
    assert (enc.encode(["YAP IN CELLS NOW"]) ==
            tiny_encoder.encode([packaged_casing_table().truecase("YAP IN CELLS NOW")])).all()


@pytest.mark.parametrize("corpus_casing", [False, True])
def test_the_bench_brings_queries_to_the_corpus_forms_only_when_asked(tiny_lens_dir, tmp_path, corpus_casing):
    import shutil

    from lens.eval.systems import LensResource

    ruled = tmp_path / "ruled"
    shutil.copytree(tiny_lens_dir, ruled)
    config = json.loads((ruled / "config.json").read_text())
    (ruled / "config.json").write_text(json.dumps({**config, "text_normalization": "truecase-shouted"}))
    res = LensResource(str(ruled), cache_root=tmp_path / "cache", show_progress_bar=False,
                       corpus_casing=corpus_casing)
    docs = ["Levels of YAP and miRNA in the Zorblax cells.", "The YAP of Zorblax rose; miRNA fell in Zorblax mice."]
    res.documents(docs)
    table = res.encoder.casing_table
    if not corpus_casing:
        assert table is None
        return
    assert table.forms["zorblax"] == "Zorblax" and table.forms["mirna"] == "miRNA"
    assert (res.query("ZORBLAX MIRNA LEVELS", "Find", "lexicon") ==
            res.encoder.encode_queries(["Zorblax miRNA levels"], instruction="Find", output="lexicon")).all()
    res.documents(["the other corpus, all in lower case"])  # a corpus without case evidence: its own table is empty
    assert "zorblax" not in res.encoder.casing_table.forms
