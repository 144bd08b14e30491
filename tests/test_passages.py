"""Long documents as passages (`lens data passages`, `lens.corpus.split_passages`) and search collapsed on a
metadata field (`Searcher.search(collapse=)`, `lens search --collapse`, `lens serve`'s "collapse"): the windows
against a naive reference, and the collapsed hits against every hit of the index grouped by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lens.cli import main
from lens.corpus import Document, load_corpus, split_passages
from lens.search import Searcher, collapse_result
from lens.serve import SearchService

from corpus_helpers import WORDS

QUERIES = ["cancer drug", "brain cell protein", "blood risk treatment"]


def naive_windows(words: list[str], size: int, overlap: int) -> list[list[str]]:
    if len(words) <= size:
        return [words]
    out, start = [], 0
    while True:
        out.append(words[start:start + size])
        if start + size >= len(words):
            return out
        start += size - overlap


@pytest.mark.parametrize("n", [0, 1, 5, 6, 7, 11, 12, 30])
@pytest.mark.parametrize("size,overlap", [(6, 0), (6, 2), (6, 5), (1, 0), (3, 1)])
def test_windows_cover_every_word_as_a_naive_loop_does(n, size, overlap):
    words = [f"w{i}" for i in range(n)]
    doc = Document("a", "  " + "\n ".join(words) + " ", "T", {"src": "x"})
    passages = split_passages(doc, size, overlap)
    assert [p.text.split() for p in passages] == naive_windows(words, size, overlap)
    assert [p.id for p in passages] == [f"a#{i}" for i in range(len(passages))]
    assert all(p.title == "T" and p.extra == {"src": "x", "document": "a", "passage": i}
               for i, p in enumerate(passages))
    if n > size:  # a passage's text is the document's, as written, between its first and last word
        assert all(p.text in doc.text and p.text == p.text.strip() for p in passages)
    else:
        assert passages[0].text == doc.text


def test_bad_options_and_a_field_of_the_corpus_own_are_refused():
    doc = Document("a", "one two three")
    for words, overlap, match in ((0, 0, "words must be"), (3, 3, "overlap must be"), (3, -1, "overlap must be"),
                                  (2.5, 0, "words must be")):
        with pytest.raises(ValueError, match=match):
            split_passages(doc, words, overlap)
    with pytest.raises(ValueError, match="its own metadata field 'document'.*rename that field"):
        split_passages(Document("a", "x", extra={"document": "mine"}), 3)
    with pytest.raises(ValueError, match="'a#1' is already passage 1 of document 'a'.*split into passages already"):
        split_passages(Document("a#1", "x", extra={"document": "a", "passage": 1}), 3)


def test_the_python_docs_corpus_is_passages_of_its_topics(tmp_path, capsys):
    from lens.cli import main
    from lens.corpus import pydoc_passages

    docs = pydoc_passages()
    assert all(d.extra == {"document": d.title, "passage": int(d.id.rsplit("#", 1)[1])} for d in docs)
    assert main(["-q", "data", "passages", "--corpus", "pydoc-topics", "--out", str(tmp_path / "p.jsonl")]) == 2
    assert "split into passages already" in capsys.readouterr().err and not (tmp_path / "p.jsonl").exists()


def _long_corpus(path, n=8, seed=0):
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for i in range(n):
            text = " ".join(rng.choice(WORDS, size=int(rng.integers(3, 25))))
            f.write(json.dumps({"_id": f"d{i}", "title": WORDS[i], "text": text, "year": 2000 + i % 3}) + "\n")
    return path


@pytest.fixture(scope="module")
def passage_index(tiny_lens_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("passages")
    corpus = _long_corpus(tmp / "corpus.jsonl")
    out = tmp / "passages.jsonl.gz"
    assert main(["-q", "data", "passages", "--corpus", str(corpus), "--out", str(out), "--words", "6",
                 "--overlap", "2"]) == 0
    assert main(["-q", "index", "build", "--corpus", str(out), "--output", str(tmp / "ix"), "--model",
                 str(tiny_lens_dir), "--dense", "lens"]) == 0
    return tmp, corpus, out


def test_the_passages_file_is_what_split_passages_gives_and_indexes(passage_index, capsys):
    tmp, corpus, out = passage_index
    want = [p for d in load_corpus(corpus) for p in split_passages(d, 6, 2)]
    got = load_corpus(out)
    assert [(p.id, p.title, p.text, p.extra) for p in got] == [(p.id, p.title, p.text, p.extra) for p in want]
    assert len(got) > 8 and {p.extra["document"] for p in got} == {f"d{i}" for i in range(8)}
    assert main(["data", "passages", "--corpus", str(corpus), "--out", str(out), "--words", "6", "--overlap",
                 "2"]) == 2
    assert "exists: pass --overwrite" in capsys.readouterr().err
    assert main(["data", "passages", "--corpus", str(corpus), "--out", str(tmp / "p.jsonl"), "--words", "6",
                 "--overlap", "6"]) == 2
    assert "overlap must be an integer from 0 to words - 1 (5), got 6" in capsys.readouterr().err
    twice = tmp / "twice.jsonl"
    twice.write_text(corpus.read_text() + corpus.read_text().splitlines()[0] + "\n")
    assert main(["data", "passages", "--corpus", str(twice), "--out", str(tmp / "t.jsonl")]) == 2
    assert "document id 'd0' appears twice" in capsys.readouterr().err and not (tmp / "t.jsonl").exists()


@pytest.mark.parametrize("k", [1, 3, 8, 20])
def test_collapsed_hits_are_every_hit_grouped_by_hand(passage_index, k):
    """Exact: the best passage of each document, k documents, as the whole ranking grouped by hand gives them
    (k = 3 fetches 12 passages at first, k = 8 needs a second fetch; 20 asks for more documents than there are)."""
    tmp, _, _ = passage_index
    searcher = Searcher.open(tmp / "ix")
    everything = searcher.search(QUERIES, k=len(searcher.index))
    for full, got in zip(everything, searcher.search(QUERIES, k=k, collapse="document")):
        best: dict[str, int] = {}
        for i, meta in enumerate(full.metadata):
            best.setdefault(meta["document"], i)
        keep = sorted(best.values())[:k]
        assert got.ids == [full.ids[i] for i in keep]
        np.testing.assert_array_equal(got.scores, full.scores[keep])
        assert len(got.ids) == min(k, 8) and len({m["document"] for m in got.metadata}) == len(got.ids)
    filtered = searcher.search(QUERIES, k=5, collapse="document", filter={"year": 2001})
    assert all({m["year"] for m in r.metadata} <= {2001} and len(r.ids) == 3 for r in filtered)  # d1, d4, d7
    for bad in ("", "a..b", 3):
        with pytest.raises(ValueError, match="collapse must be a metadata field name"):
            searcher.search(QUERIES[:1], collapse=bad)


def test_a_hit_without_the_field_is_its_own_group_and_values_compare_by_json_type():
    from index import SearchResult

    metas = [{"g": 1}, None, {"g": 1.0}, {"g": [1]}, {"g": True}, {"g": "1"}, {"g": {"a": 1}}, {"h": 1}, {"g": 1}]
    result = SearchResult([f"h{i}" for i in range(9)], np.arange(9, 0, -1).astype(np.float32), metas)
    got = collapse_result(result, "g", 10)  # 1 and 1.0 are one JSON number; true, "1", [1] are others
    assert got.ids == ["h0", "h1", "h3", "h4", "h5", "h6", "h7"]
    assert collapse_result(result, "g", 3).ids == ["h0", "h1", "h3"]


def test_a_collapsed_run_keeps_each_document_once_and_names_an_id_it_cannot_write():
    from index import SearchResult
    from lens.search import collapsed_run

    result = SearchResult(["p1", "p2", "p3", "p4"], np.array([4, 3, 2, 1], dtype=np.float32),
                          [{"document": "7"}, {"document": 7}, None, {"document": "p3"}])
    assert collapsed_run(result, "document") == [("7", 4.0), ("p3", 2.0)]  # 7 and "7" are one id in a run
    spaced = SearchResult(["p1"], np.ones(1, dtype=np.float32), [{"source": "New York Times"}])
    with pytest.raises(ValueError, match="'New York Times' \\(hit 'p1'\\) is not one .*collapse on an id field"):
        collapsed_run(spaced, "source")


def test_a_collapse_looks_at_most_at_its_depth_and_says_so(passage_index, caplog):
    """Eight documents: asking for 8 groups within the top 4 hits gets the best groups there, with a warning; the
    groups found are the first of the full collapsed ranking."""
    import logging

    tmp, _, _ = passage_index
    searcher = Searcher.open(tmp / "ix")
    full = searcher.search(QUERIES, k=8, collapse="document")
    with caplog.at_level(logging.WARNING):
        capped = searcher.search(QUERIES, k=8, collapse="document", collapse_depth=4)
    assert "have fewer than 8 groups in their top 4 hits" in caplog.text
    for a, b in zip(capped, full):
        assert 1 <= len(a.ids) < 8 and a.ids == b.ids[:len(a.ids)]
    with pytest.raises(ValueError, match="collapse_depth must be a positive integer"):
        searcher.search(QUERIES[:1], collapse="document", collapse_depth=0)


def test_cli_run_writes_documents_and_the_server_collapses(passage_index, capsys):
    tmp, _, _ = passage_index
    queries = tmp / "queries.txt"
    queries.write_text("\n".join(QUERIES) + "\n")
    run = tmp / "maxp.trec"
    assert main(["search", str(tmp / "ix"), "--queries-file", str(queries), "-k", "4", "--collapse", "document",
                 "--run", str(run)]) == 0
    lines = [line.split() for line in run.read_text().splitlines()]
    want = Searcher.open(tmp / "ix").search(QUERIES, k=4, collapse="document")
    assert [(q, d) for q, _, d, *_ in lines] == [(str(i), m["document"]) for i, r in enumerate(want)
                                                 for m in r.metadata]
    service = SearchService(tmp / "ix")
    answer = service.search({"queries": QUERIES, "k": 4, "collapse": "document"})
    assert [[h["id"] for h in r["hits"]] for r in answer["results"]] == [r.ids for r in want]
    with pytest.raises(ValueError, match="collapse must be"):  # a 400, as the library's other checks
        service.search({"query": "cell", "collapse": 7})
