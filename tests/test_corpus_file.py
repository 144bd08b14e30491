"""lens.corpus.CorpusFile: a JSONL corpus read where it lies is the list ``load_corpus`` gives, a document at a time."""

import json
import pickle

import pytest

from lens.corpus import CorpusFile, DocumentTexts, load_corpus, open_corpus


RECORDS = [{"_id": "a", "title": "T", "text": "first"}, {"id": 7, "text": "second", "year": 1999},
           {"_id": "c", "text": "thïrd ✓", "meta": {"author": "x"}}, {"_id": "d", "text": ""},
           {"_id": "e", "title": "only", "text": "fifth"}]


def write(path, records, end="\n", blank_every=0):
    lines = []
    for i, r in enumerate(records):
        lines.append(json.dumps(r, ensure_ascii=False))
        if blank_every and i % blank_every == 0:
            lines.append("   ")
    path.write_bytes((end.join(lines) + end).encode("utf-8"))
    return path


@pytest.mark.parametrize("end,blank", [("\n", 0), ("\r\n", 2)], ids=["lf", "crlf-blank-lines"])
def test_it_reads_what_load_corpus_reads(tmp_path, end, blank):
    path = write(tmp_path / "c.jsonl", RECORDS, end, blank)
    want = load_corpus(path)
    got = CorpusFile.scan(path)
    assert len(got) == len(want) == 5
    assert list(got) == want
    assert [got[i] for i in range(5)] == want and got[-1] == want[-1] and got[-5] == want[0]
    for sl in (slice(1, 4), slice(0, 5, 2), slice(3, None), slice(4, 2), slice(None, None, -1)):
        view = got[sl]
        assert isinstance(view, CorpusFile) and list(view) == want[sl]
    assert list(got[1:4][1:]) == want[2:4]  # a view of a view
    with pytest.raises(IndexError):
        got[5]
    with pytest.raises(IndexError):
        got[-6]
    assert got[1].extra == {"year": 1999} and got[1].id == "7"  # ids as strings, as load_corpus gives them
    assert list(DocumentTexts(got[2:])) == [d.full_text for d in want[2:]]
    assert DocumentTexts(got)[0:2] == ["T first", "second"]


def test_a_view_pickles_as_its_path_and_offsets(tmp_path):
    path = write(tmp_path / "c.jsonl", RECORDS)
    view = CorpusFile.scan(path)[2:]
    blob = pickle.dumps(view)
    assert len(blob) < 1000 and b"first" not in blob  # no text travels: a worker reads its own share
    assert list(pickle.loads(blob)) == load_corpus(path)[2:]


def test_open_corpus_reads_plain_jsonl_where_it_lies_and_loads_the_rest(tmp_path):
    import gzip

    path = write(tmp_path / "c.jsonl", RECORDS)
    assert isinstance(open_corpus(path), CorpusFile)
    beir = tmp_path / "beir"
    beir.mkdir()
    write(beir / "corpus.jsonl", RECORDS)
    assert isinstance(open_corpus(beir), CorpusFile) and list(open_corpus(beir)) == load_corpus(path)
    (tmp_path / "c.jsonl.gz").write_bytes(gzip.compress(path.read_bytes()))
    got = open_corpus(tmp_path / "c.jsonl.gz")
    assert isinstance(got, CorpusFile) and list(got) == load_corpus(path)
    (tmp_path / "mac.jsonl").write_bytes(path.read_bytes().replace(b"\n", b"\r"))  # lone CR line ends
    assert isinstance(open_corpus(tmp_path / "mac.jsonl"), list) and open_corpus(tmp_path / "mac.jsonl") == list(got)


def test_errors_name_the_corpus_and_the_lines(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n")
    with pytest.raises(ValueError, match="holds no documents"):
        CorpusFile.scan(empty)
    many = [{"_id": f"d{i}", "text": f"t{i}"} for i in range(300)] + [{"_id": "d17", "text": "again"}]
    with pytest.raises(ValueError, match=r"document id 'd17' appears twice \(lines 18 and 301\)"):
        CorpusFile.scan(write(tmp_path / "dup.jsonl", many))
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"_id": "a", "text": "ok"}\n{"_id": "b", "text": "caf\xe9"}\n')
    with pytest.raises(ValueError, match="not UTF-8 text.*line 2"):
        CorpusFile.scan(latin)


def test_a_record_changed_after_the_scan_is_named(tmp_path):
    path = write(tmp_path / "c.jsonl", RECORDS)
    corpus = CorpusFile.scan(path)
    path.write_bytes(path.read_bytes().replace(b'{"id": 7', b'{"id" 7'))
    assert corpus[0].id == "a"
    with pytest.raises(ValueError, match=r"c.jsonl:2 changed since the corpus was read .*not valid JSON"):
        list(corpus)


def test_equal_id_hashes_are_compared_by_their_ids(tmp_path, monkeypatch):
    """The repeated-id check compares 64-bit hashes, then the ids of equal hashes: a collision is not a repeat."""
    import lens.corpus as corpus_module

    monkeypatch.setattr(corpus_module, "_id_hash", lambda doc_id: 1)  # every id collides
    path = write(tmp_path / "c.jsonl", RECORDS)
    assert [d.id for d in CorpusFile.scan(path)] == ["a", "7", "c", "d", "e"]
    with pytest.raises(ValueError, match=r"'c' appears twice \(lines 3 and 6\)"):
        CorpusFile.scan(write(tmp_path / "d.jsonl", RECORDS + [{"_id": "c", "text": "x"}]))


TSV_CASES = [
    ("collection.tsv", "0\tthe first passage\n1\tthe second one\n", [("0", "", "the first passage", {}),
                                                                     ("1", "", "the second one", {})]),
    ("psgs.tsv", "id\ttext\ttitle\n1\tAaron was a prophet\tAaron\n2\tSome text\tOther\n",
     [("1", "Aaron", "Aaron was a prophet", {}), ("2", "Other", "Some text", {})]),
    ("extra.tsv", "docid\tsource\tpassage\nx\twiki\thello there\n",
     [("x", "", "hello there", {"source": "wiki"})]),
]


@pytest.mark.parametrize("name,content,want", TSV_CASES, ids=[c[0] for c in TSV_CASES])
def test_tsv_corpora_read_alike_both_ways(tmp_path, name, content, want):
    """MS MARCO's id<TAB>text, and the columns a header names (DPR's id<TAB>text<TAB>title), in memory and where
    they lie."""
    path = tmp_path / name
    path.write_text(content)
    got = [(d.id, d.title, d.text, d.extra) for d in load_corpus(path)]
    assert got == want
    lazy = open_corpus(path)
    assert isinstance(lazy, CorpusFile) and [(d.id, d.title, d.text, d.extra) for d in lazy] == want
    assert [(d.id, d.title, d.text, d.extra) for d in pickle.loads(pickle.dumps(lazy[1:]))] == want[1:]


def test_tsv_and_pyserini_errors_and_forms(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("1\ta\tb\n")
    for read in (load_corpus, CorpusFile.scan):
        with pytest.raises(ValueError, match=r"bad.tsv:1: 3 tab-separated columns; a TSV corpus line is id<TAB>text"):
            read(bad)
    short = tmp_path / "short.tsv"
    short.write_text("id\ttext\ttitle\n1\tonly text\n")
    with pytest.raises(ValueError, match=r"short.tsv:2: 2 tab-separated columns where the header names 3"):
        CorpusFile.scan(short)
    pyserini = write(tmp_path / "p.jsonl", [{"id": "p1", "contents": "a passage"}, {"id": "p2", "contents": "b",
                                                                                     "text": "wins"}])
    assert [(d.id, d.text, d.extra) for d in load_corpus(pyserini)] == [("p1", "a passage", {}),
                                                                        ("p2", "wins", {"contents": "b"})]
    assert list(CorpusFile.scan(pyserini)) == load_corpus(pyserini)


def test_lens_index_build_takes_a_tsv_corpus(tiny_lens_dir, tmp_path, capsys):
    from lens.cli import main

    path = tmp_path / "psgs.tsv"
    path.write_text("id\ttext\ttitle\n1\tcancer drug dose\tOncology\n2\tbrain cell blood\tNeuro\n3\tgene protein\tX\n")
    ix = tmp_path / "ix"
    assert main(["-q", "index", "build", "--corpus", str(path), "--output", str(ix), "--model", str(tiny_lens_dir),
                 "--dense", "none"]) == 0
    capsys.readouterr()
    assert main(["search", str(ix), "cancer drug", "-k", "3", "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert sorted(h["id"] for h in result["hits"]) == ["1", "2", "3"]
    assert {h["id"]: h["metadata"]["title"] for h in result["hits"]} == {"1": "Oncology", "2": "Neuro", "3": "X"}


def test_an_index_built_with_store_text_returns_whole_texts_and_add_keeps_them(tiny_lens_dir, tmp_path, capsys):
    """--store-text: hits carry each document's whole text (metadata "text"); recorded in the manifest, so a later
    lens index add keeps it; without it, hits carry the 300-character snippet alone."""
    from lens.cli import main
    from lens.search import Searcher

    long_text = "cancer drug dose " * 40  # longer than the snippet
    path = tmp_path / "c.jsonl"
    write(path, [{"_id": "a", "text": long_text, "title": "T"}, {"_id": "b", "text": "brain cell blood"}])
    more = write(tmp_path / "more.jsonl", [{"_id": "c", "text": "gene protein " * 30}])
    for flag, ix in (["--store-text"], tmp_path / "with"), ([], tmp_path / "without"):
        assert main(["-q", "index", "build", "--corpus", str(path), "--output", str(ix), "--model",
                     str(tiny_lens_dir), "--dense", "none", *flag]) == 0
        assert main(["-q", "index", "add", str(ix), "--corpus", str(more)]) == 0
        (hits,) = Searcher.open(ix).search(["cancer drug"], k=3)
        texts = {i: m.get("text") for i, m in zip(hits.ids, hits.metadata)}
        snippets = {i: m["snippet"] for i, m in zip(hits.ids, hits.metadata)}
        assert len(snippets["a"]) == 300 and snippets["a"] == long_text[:300]
        if flag:
            assert texts == {"a": long_text, "b": "brain cell blood", "c": "gene protein " * 30}
        else:
            assert texts == {"a": None, "b": None, "c": None}
    capsys.readouterr()
    assert main(["index", "info", str(tmp_path / "with")]) == 0
    assert "store_text: True" in capsys.readouterr().out


def test_a_gzipped_corpus_is_read_where_it_lies_in_one_pass(tmp_path, monkeypatch):
    """A .jsonl.gz / .tsv.gz is scanned as a plain file is (offsets in the decompressed stream): a build reading its
    chunks in order decompresses the file once a pass, a read behind the last one starts again from the top, and
    views read alike in this process and, pickled, in another."""
    import gzip

    import lens.corpus as corpus_module

    many = [{"_id": f"d{i}", "title": f"t{i}" if i % 3 else "", "text": f"text number {i} " * (i % 7)}
            for i in range(500)]
    plain = write(tmp_path / "c.jsonl", many, "\r\n", 50)
    packed = tmp_path / "c.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    want = load_corpus(plain)
    assert load_corpus(packed) == want
    corpus = open_corpus(packed)
    opened = []
    real_open = gzip.open
    monkeypatch.setattr(corpus_module.gzip, "open", lambda *a, **k: opened.append(a[0]) or real_open(*a, **k))
    corpus_module._GzipLines._open.clear()
    got = [d for start in range(0, len(corpus), 64) for d in corpus[start:start + 64]]  # a build's chunks
    assert got == want and len(opened) == 1  # one pass for every chunk
    assert corpus[10] == want[10] and len(opened) == 2  # behind the reader: from the top again
    assert list(pickle.loads(pickle.dumps(corpus[400:]))) == want[400:]
    packed.write_bytes(gzip.compress(plain.read_bytes().replace(b"text number", b"other words")))
    with pytest.raises(ValueError, match=r"c.jsonl.gz:\d+ changed since the corpus was read \(the file was replaced"):
        list(corpus[:3])  # the version scanned is gone: an error, never the new file's documents
    assert list(open_corpus(packed))[5].text.startswith("other words")  # scanned again: the new version
    tsv = tmp_path / "collection.tsv.gz"
    tsv.write_bytes(gzip.compress(b"id\ttext\n1\tone\n2\ttwo\n"))
    assert [(d.id, d.text) for d in open_corpus(tsv)] == [("1", "one"), ("2", "two")]


def test_a_damaged_gzip_is_named(tmp_path):
    import gzip

    records = [{"_id": f"d{i}", "text": f"text {i}"} for i in range(400)]
    data = gzip.compress(write(tmp_path / "c.jsonl", records).read_bytes())
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"cut.jsonl.gz cannot be read .*the file is damaged"):
        open_corpus(cut)
    garbled = tmp_path / "garbled.jsonl.gz"
    garbled.write_bytes(data[:20] + b"\x00" * 40 + data[60:])
    with pytest.raises(ValueError, match=r"garbled.jsonl.gz cannot be read .*the file is damaged"):
        open_corpus(garbled)


def test_lens_search_task_asks_the_tasks_instruction(tiny_lens_dir, tmp_path, capsys):
    """`lens search --task scifact` scores as `--instruction` with SciFact's instruction does (not as the model's
    default instruction), and refuses to be combined with --instruction."""
    from lens.cli import main
    from lens.instructions import get_instruction

    path = tmp_path / "psgs.tsv"
    path.write_text("id\ttext\n1\tcancer drug dose\n2\tbrain cell blood\n3\tgene protein\n")
    ix = tmp_path / "ix"
    assert main(["-q", "index", "build", "--corpus", str(path), "--output", str(ix), "--model", str(tiny_lens_dir),
                 "--dense", "none", "--no-bm25", "--no-idf"]) == 0
    capsys.readouterr()

    def scores(*flags):
        assert main(["search", str(ix), "cancer drug", "-k", "3", "--json", *flags]) == 0
        (result,) = json.loads(capsys.readouterr().out)
        return {h["id"]: h["score"] for h in result["hits"]}

    by_task = scores("--task", "scifact")
    assert by_task == scores("--instruction", get_instruction("scifact")) and by_task != scores()
    assert main(["search", str(ix), "cancer", "--task", "scifact", "--instruction", "x"]) == 2
    assert "not both" in capsys.readouterr().err
