"""An index built under a truecasing text rule keeps its corpus's casing table, and its queries in capitals come back
to the corpus's forms of its words (lens.casing.corpus_casing_table, index.store, lens.indexing, lens.search)."""

import shutil

import numpy as np
import pytest

from index import HybridIndex
from lens.casing import own_casing_table, packaged_casing_table
from lens.config import LensConfig
from lens.corpus import Document
from lens.encoder import LensEncoder
from lens.hybrid import HybridEncoder
from lens.indexing import build_index
from lens.search import Searcher

DOCS = [Document("d1", "Levels of YAP and miRNA in Zorblax cells were measured.", "YAP in Zorblax"),
        Document("d2", "The YAP protein of Zorblax mice rose while miRNA fell.", ""),
        Document("d3", "An apple a day: nothing about YAP here, only an apple.", "Apples")]
SHOUTED = "YAP AND MIRNA IN ZORBLAX CELLS"


@pytest.fixture
def ruled_model(tiny_lens_dir, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(tiny_lens_dir, model)
    config = LensConfig.load(model)
    config.text_normalization = "truecase-shouted"
    config.save(model)
    return model


def test_a_truecasing_model_builds_an_index_with_its_corpus_table(ruled_model, tiny_lens_dir, tmp_path, capsys):
    ix = tmp_path / "ix"
    index = build_index(DOCS, ix, HybridEncoder.from_pretrained(ruled_model, "lens"), chunk_size=2,
                        show_progress_bar=False)
    own = index.casing_table
    assert own.forms["yap"] == "YAP" and own.forms["mirna"] == "miRNA" and own.forms["zorblax"] == "Zorblax"
    assert own.forms["apple"] == "apple"  # lower-case forms are kept: they overrule the general table's
    assert (ix / "casing.json.gz").is_file() and HybridIndex.load(ix).casing_table == own

    searcher = Searcher.open(ix)
    table = searcher.encoder.lens.casing_table
    assert table.forms["mirna"] == "miRNA" and table.forms["nasa"] == packaged_casing_table().forms["nasa"]
    plain = LensEncoder.from_pretrained(tiny_lens_dir)  # no rule: the text as given
    got = searcher.encoder.encode_queries([SHOUTED])[0]
    want = plain.encode_queries(["YAP and miRNA in Zorblax cells"], output="lexicon")
    np.testing.assert_array_equal(got, want)
    packaged = packaged_casing_table().truecase(SHOUTED)
    assert packaged != "YAP and miRNA in Zorblax cells"  # what the packaged table alone would give: not the corpus's

    from lens.cli import main

    assert main(["index", "info", str(ix)]) == 0
    assert "casing: the corpus's own casing table (casing.json.gz)" in capsys.readouterr().out

    from lens.updating import add_documents

    add_documents(ix, [Document("d4", "We saw Apple and Apple shares, the Qux gene and Qux mice, and ZORBLAX.", "")],
                  show_progress_bar=False)
    grown = HybridIndex.load(ix).casing_table
    assert grown.forms["qux"] == "Qux"  # the added document's own word: the table gains it ...
    assert {w: grown.forms[w] for w in own.forms} == own.forms  # ... and keeps every form it had ("apple")
    assert grown == own.extended_by(own_casing_table(["We saw Apple and Apple shares, the Qux gene and Qux mice, "
                                                      "and ZORBLAX."]))
    got = Searcher.open(ix).encoder.encode_queries(["QUX AND ZORBLAX MICE"])[0]
    np.testing.assert_array_equal(got, plain.encode_queries(["Qux and Zorblax mice"], output="lexicon"))


def test_an_index_without_a_truecasing_rule_keeps_no_table(tiny_lens_dir, tmp_path):
    ix = tmp_path / "ix"
    index = build_index(DOCS, ix, HybridEncoder.from_pretrained(tiny_lens_dir, "none"), chunk_size=2,
                        show_progress_bar=False)
    assert index.casing_table is None and not (ix / "casing.json.gz").exists()
    encoder = HybridEncoder.from_pretrained(tiny_lens_dir, "none")
    encoder.lens.casing_table = packaged_casing_table()  # left over from another index
    assert Searcher.open(ix, encoder=encoder).encoder.lens.casing_table is None


def test_a_damaged_casing_file_is_refused(ruled_model, tmp_path):
    ix = tmp_path / "ix"
    build_index(DOCS, ix, HybridEncoder.from_pretrained(ruled_model, "none"), chunk_size=2, show_progress_bar=False)
    path = ix / "casing.json.gz"
    path.write_bytes(path.read_bytes()[:-5] + b"xxxxx")
    with pytest.raises(ValueError, match="casing.json.gz"):
        HybridIndex.load(ix)


def test_the_store_saves_clones_and_checks_its_table(tmp_path):
    index = HybridIndex(4, None, "flat")
    table = own_casing_table(d.full_text for d in DOCS)
    index.set_casing_table(table)
    assert index.clone_empty().casing_table == table
    index.add(["a"], np.eye(4, dtype=np.float32)[:1], None)
    index.save(tmp_path / "ix")
    assert HybridIndex.load(tmp_path / "ix").casing_table == table
    index.save(tmp_path / "ix")  # a directory holding the table is an index: saved over again
    with pytest.raises(TypeError, match="CasingTable"):
        index.set_casing_table({"yap": "YAP"})


def test_removal_keeps_the_table_and_a_merge_joins_them(ruled_model, tmp_path):
    from index import load_index
    from index.shards import merge_indexes
    from lens.updating import remove_documents

    encoder = HybridEncoder.from_pretrained(ruled_model, "none")
    build_index(DOCS[:2], tmp_path / "a", encoder, chunk_size=2, show_progress_bar=False)
    build_index(DOCS[2:], tmp_path / "b", encoder, chunk_size=2, show_progress_bar=False)
    own_a = HybridIndex.load(tmp_path / "a").casing_table
    remove_documents(tmp_path / "a", ["d2"])
    assert HybridIndex.load(tmp_path / "a").casing_table == own_a
    merge_indexes(tmp_path / "ab", [tmp_path / "a", tmp_path / "b"])
    merged = load_index(tmp_path / "ab")
    own_b = HybridIndex.load(tmp_path / "b").casing_table
    assert "apple" in own_b.forms and "apple" not in own_a.forms
    assert merged.casing_table == own_a.extended_by(own_b)  # each input's words, the first input's evidence first
    table = Searcher.open(tmp_path / "ab").encoder.lens.casing_table
    assert table.forms["mirna"] == "miRNA" and table.forms["apple"] == "apple"
