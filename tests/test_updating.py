"""`lens index add` / `lens index remove` (lens.updating): a changed index equals one built from its final corpus."""

import hashlib
import json
import threading

import numpy as np
import pytest

from index import load_index
from lens.atomic import DirectoryLock, LockedError
from lens.cli import main
from lens.corpus import load_corpus
from lens.updating import add_documents, remove_documents

from corpus_helpers import write_corpus

QUERIES = ["cancer drug", "brain cell", "blood risk treatment", "gene protein mouse"]


@pytest.fixture(scope="module")
def corpus_lines(tmp_path_factory):
    path = write_corpus(tmp_path_factory.mktemp("corpus") / "all.jsonl", 23)
    return path.read_text().splitlines()


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


def build(tiny_lens_dir, corpus, out, *extra):
    assert main(["-q", "index", "build", "--corpus", str(corpus), "--output", str(out), "--model",
                 str(tiny_lens_dir), "--dense", "lens", *extra]) == 0
    return out


def hits_of(directory, k=23):
    """(ids, scores, metadata) per query, with the index's own encoders."""
    from lens.search import Searcher

    results = Searcher.open(directory).search(QUERIES, k=k)
    return [(h.ids, np.asarray(h.scores), h.metadata) for h in results]


def assert_same_hits(got, want, atol=1e-5):
    for (ids, scores, meta), (ids2, scores2, meta2) in zip(got, want):
        np.testing.assert_allclose(scores, scores2, atol=atol)
        assert set(ids) == set(ids2)  # ties may order differently; the scores agree position by position
        assert {i: m for i, m in zip(ids, meta)} == {i: m for i, m in zip(ids2, meta2)}


def files_sha(directory):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.mark.parametrize("extra", [[], ["--top-m", "3"], ["--quantize", "int8"]], ids=["flat", "top-m", "int8"])
def test_add_equals_a_build_of_the_whole_corpus(tiny_lens_dir, corpus_lines, tmp_path, capsys, monkeypatch, extra):
    from lens.hybrid import HybridEncoder

    first = write_lines(tmp_path / "first.jsonl", corpus_lines[:15])
    rest = write_lines(tmp_path / "rest.jsonl", corpus_lines[15:])
    whole = build(tiny_lens_dir, write_lines(tmp_path / "all.jsonl", corpus_lines), tmp_path / "whole", *extra)
    ix = build(tiny_lens_dir, first, tmp_path / "ix", *extra)
    encoded_as, encode = [], HybridEncoder.encode_documents

    def spy(self, *args, **kwargs):
        encoded_as.append(self.lens.quantize)
        return encode(self, *args, **kwargs)

    monkeypatch.setattr(HybridEncoder, "encode_documents", spy)
    capsys.readouterr()
    assert main(["-q", "index", "add", str(ix), "--corpus", str(rest)]) == 0
    assert "added 8 documents" in capsys.readouterr().out and len(load_index(ix)) == 23
    assert load_index(ix).top_m == load_index(whole).top_m
    int8 = "int8" in extra
    assert encoded_as == ["int8" if int8 else None]  # the build's quantisation
    # batched apart, the same vectors: an int8 encoder gives each text a forward of its own (docs/encoding.md, int8)
    assert_same_hits(hits_of(ix), hits_of(whole), atol=1e-5)


def test_upsert_replaces_and_a_repeated_id_fails_before_encoding(tiny_lens_dir, corpus_lines, tmp_path, capsys,
                                                                 monkeypatch):
    ix = build(tiny_lens_dir, write_lines(tmp_path / "all.jsonl", corpus_lines), tmp_path / "ix")
    changed = [json.loads(line) for line in corpus_lines[:2]]
    for record in changed:
        record["text"] = "brain brain blood"
    update = write_lines(tmp_path / "update.jsonl", [json.dumps(r) for r in changed])
    before = files_sha(ix)

    from lens.hybrid import HybridEncoder

    def no_encoding(*args, **kwargs):
        raise AssertionError("encoded before the ids were checked")

    with monkeypatch.context() as m:
        m.setattr(HybridEncoder, "encode_documents", no_encoding)
        capsys.readouterr()
        assert main(["-q", "index", "add", str(ix), "--corpus", str(update)]) == 2
        err = capsys.readouterr().err
        assert "'d0' (and 1 more) is already in the index" in err and "--upsert" in err
    assert files_sha(ix) == before  # nothing changed

    assert main(["-q", "index", "add", str(ix), "--corpus", str(update), "--upsert"]) == 0
    out = capsys.readouterr().out
    assert "added 2 documents" in out and "(2 replaced)" in out
    assert len(load_index(ix)) == 23
    expected = build(tiny_lens_dir, write_lines(tmp_path / "expected.jsonl",
                                                [json.dumps(r) for r in changed] + corpus_lines[2:]),
                     tmp_path / "expected")
    assert_same_hits(hits_of(ix), hits_of(expected))


def test_upsert_reports_the_replaced_count(tiny_lens_dir, corpus_lines, tmp_path, capsys):
    ix = build(tiny_lens_dir, write_lines(tmp_path / "first.jsonl", corpus_lines[:15]), tmp_path / "ix")
    both = write_lines(tmp_path / "both.jsonl", corpus_lines[13:17])  # 2 already there, 2 new
    capsys.readouterr()
    assert main(["-q", "index", "add", str(ix), "--corpus", str(both), "--upsert"]) == 0
    out = capsys.readouterr().out
    assert "added 4 documents" in out and "(2 replaced)" in out and "17 documents now" in out


def test_remove_equals_a_build_without_them(tiny_lens_dir, corpus_lines, tmp_path, capsys):
    ix = build(tiny_lens_dir, write_lines(tmp_path / "all.jsonl", corpus_lines), tmp_path / "ix")
    (tmp_path / "ids.txt").write_text("d7\n\nd9\n")
    capsys.readouterr()
    assert main(["-q", "index", "remove", str(ix), "d3", "--ids-file", str(tmp_path / "ids.txt"), "d5"]) == 0
    assert "removed 4 documents" in capsys.readouterr().out and len(load_index(ix)) == 19
    kept = [line for line in corpus_lines if json.loads(line)["_id"] not in {"d3", "d5", "d7", "d9"}]
    expected = build(tiny_lens_dir, write_lines(tmp_path / "kept.jsonl", kept), tmp_path / "expected")
    assert_same_hits(hits_of(ix), hits_of(expected))

    before = files_sha(ix)
    assert main(["-q", "index", "remove", str(ix), "d1", "nope"]) == 2
    assert "'nope' is not in the index; nothing was removed" in capsys.readouterr().err
    assert main(["-q", "index", "remove", str(ix)]) == 2
    assert "no document ids to remove" in capsys.readouterr().err
    assert files_sha(ix) == before


def test_remove_by_filter_equals_removing_those_ids(tiny_lens_dir, corpus_lines, tmp_path, capsys):
    ix = build(tiny_lens_dir, write_lines(tmp_path / "all.jsonl", corpus_lines), tmp_path / "ix")
    gone = {json.loads(line)["_id"] for line in corpus_lines if json.loads(line)["title"] in ("cancer", "drug")}
    assert gone == {"d3", "d5", "d15", "d17"}  # titles are WORDS[i % 12]
    before = files_sha(ix)
    capsys.readouterr()
    assert main(["-q", "index", "remove", str(ix), "--filter", "title=cancer", "--filter", "title=drug",
                 "--dry-run"]) == 0
    assert capsys.readouterr().out.strip() == f"would remove 4 of 23 documents from {ix}: d3, d5, d15, d17"
    assert files_sha(ix) == before  # a dry run changes nothing
    assert main(["-q", "index", "remove", str(ix), "--filter", "title=nothing-like-it"]) == 0
    assert "removed 0 documents" in capsys.readouterr().out and files_sha(ix) == before
    assert main(["-q", "index", "remove", str(ix), "d1", "--filter", "title=cancer"]) == 2
    assert "not both" in capsys.readouterr().err and files_sha(ix) == before
    assert main(["-q", "index", "remove", str(ix), "--filter", "title=cancer", "d1"]) == 2  # an id after it too
    assert "not both" in capsys.readouterr().err and files_sha(ix) == before

    assert main(["-q", "index", "remove", str(ix), "--filter", "title=cancer", "--filter", "title=drug"]) == 0
    assert "removed 4 documents" in capsys.readouterr().out
    kept = [line for line in corpus_lines if json.loads(line)["_id"] not in gone]
    expected = build(tiny_lens_dir, write_lines(tmp_path / "kept.jsonl", kept), tmp_path / "expected")
    assert_same_hits(hits_of(ix), hits_of(expected))

    sharded = build(tiny_lens_dir, write_lines(tmp_path / "all2.jsonl", corpus_lines), tmp_path / "sharded",
                    "--shards", "3")
    assert sorted(load_index(sharded).ids_matching({"title": ["cancer", "drug"]})) == sorted(gone)
    change = remove_documents(sharded, filter={"title": ["cancer", "drug"]})
    assert (change.removed, change.count) == (4, 19)
    assert not set(load_index(sharded).ids_matching({"title": ["cancer", "drug"]}))
    with pytest.raises(ValueError, match="one of the two"):
        remove_documents(sharded)


def test_removing_every_document_needs_allow_empty(tiny_lens_dir, corpus_lines, tmp_path, capsys):
    records = [json.loads(line) for line in corpus_lines[:6]]
    ix = build(tiny_lens_dir, write_lines(tmp_path / "all.jsonl", corpus_lines[:6]), tmp_path / "ix")
    before = files_sha(ix)
    every = [r["_id"] for r in records]
    every_title = [a for t in sorted({r["title"] for r in records}) for a in ("--filter", f"title={t}")]
    capsys.readouterr()
    with pytest.raises(ValueError, match=r"the ids given would remove every document \(6\).*nothing was removed"):
        remove_documents(ix, every)
    with pytest.raises(ValueError, match="the filter .* would remove every document"):
        remove_documents(ix, filter={"title": sorted({r["title"] for r in records})})
    assert main(["-q", "index", "remove", str(ix), *every]) == 2
    assert "--allow-empty" in capsys.readouterr().err
    assert main(["-q", "index", "remove", str(ix), *every_title]) == 2
    assert "--allow-empty" in capsys.readouterr().err and files_sha(ix) == before
    assert main(["-q", "index", "remove", str(ix), *every_title, "--dry-run"]) == 0
    assert "would remove 6 of 6" in (out := capsys.readouterr().out) and "refused without --allow-empty" in out
    assert main(["-q", "index", "remove", str(ix), *every, "nope", "--dry-run"]) == 0
    assert "1 given id(s) are not in the index (nope): the removal itself would fail" in capsys.readouterr().out
    hnsw = build(tiny_lens_dir, tmp_path / "all.jsonl", tmp_path / "hnsw", "--index", "hnsw")
    for allow in (False, True):  # what cannot remove says so, not that --allow-empty would help
        with pytest.raises(ValueError, match="HNSW graphs cannot delete"):
            remove_documents(hnsw, every, allow_empty=allow)
    assert main(["-q", "index", "remove", str(ix), *every[:5]]) == 0  # one left: allowed as it is
    assert main(["-q", "index", "remove", str(ix), every[5], "--allow-empty"]) == 0
    assert "0 documents left" in capsys.readouterr().out and len(load_index(ix)) == 0


def test_ctrl_c_during_a_removal_says_what_the_index_holds(tiny_lens_dir, corpus_lines, tmp_path, capsys,
                                                            monkeypatch):
    from index.store import HybridIndex

    ix = build(tiny_lens_dir, write_lines(tmp_path / "all.jsonl", corpus_lines[:6]), tmp_path / "ix")
    before = files_sha(ix)

    def interrupted(self, directory):
        raise KeyboardInterrupt

    monkeypatch.setattr(HybridIndex, "save", interrupted)
    capsys.readouterr()
    assert main(["-q", "index", "remove", str(ix), "d1"]) == 130
    err = capsys.readouterr().err
    assert "holds the index as it was" in err and f"lens index info {ix}" in err
    assert files_sha(ix) == before and len(load_index(ix)) == 6


def test_types_that_cannot_change_say_what_to_do(tiny_lens_dir, corpus_lines, tmp_path, capsys):
    corpus = write_lines(tmp_path / "first.jsonl", corpus_lines[:15])
    rest = write_lines(tmp_path / "rest.jsonl", corpus_lines[15:])
    hnsw = build(tiny_lens_dir, corpus, tmp_path / "hnsw", "--index", "hnsw")
    capsys.readouterr()
    assert main(["-q", "index", "remove", str(hnsw), "d1"]) == 2
    assert "HNSW graphs cannot delete" in capsys.readouterr().err
    assert main(["-q", "index", "add", str(hnsw), "--corpus", str(rest)]) == 0  # adding is fine
    assert len(load_index(hnsw)) == 23

    sharded = build(tiny_lens_dir, corpus, tmp_path / "sharded", "--shards", "3")
    capsys.readouterr()
    assert main(["-q", "index", "add", str(sharded), "--corpus", str(rest)]) == 2
    assert "lens index merge" in capsys.readouterr().err
    assert main(["-q", "index", "remove", str(sharded), "d1", "d14"]) == 0  # from two shards
    index = load_index(sharded)
    assert len(index) == 13 and "d1" not in index and "d14" not in index and "d2" in index


def test_a_change_waits_for_no_other_writer(tiny_lens_dir, corpus_lines, tmp_path):
    ix = build(tiny_lens_dir, write_lines(tmp_path / "all.jsonl", corpus_lines), tmp_path / "ix")
    held, release = threading.Event(), threading.Event()

    def writer():
        with DirectoryLock(ix, "index"):
            held.set()
            release.wait(30)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert held.wait(30)
        with pytest.raises(LockedError):
            remove_documents(ix, ["d1"])
        with pytest.raises(LockedError):
            add_documents(ix, load_corpus(tmp_path / "all.jsonl")[:1], upsert=True, show_progress_bar=False)
    finally:
        release.set()
        thread.join()
    assert len(load_index(ix)) == 23
    assert remove_documents(ix, ["d1"]).count == 22


def test_library_input_errors(tiny_lens_dir, corpus_lines, tmp_path):
    ix = build(tiny_lens_dir, write_lines(tmp_path / "all.jsonl", corpus_lines), tmp_path / "ix")
    with pytest.raises(ValueError, match="single string 'd1'"):
        remove_documents(ix, "d1")
    with pytest.raises(ValueError, match="corpus is empty"):
        add_documents(ix, [])
    with pytest.raises(FileNotFoundError):
        remove_documents(tmp_path / "missing", ["d1"])


def test_an_interrupted_addition_resumes_from_its_last_chunk(tiny_lens_dir, corpus_lines, tmp_path, capsys,
                                                             monkeypatch):
    import lens.indexing as indexing

    whole = build(tiny_lens_dir, write_lines(tmp_path / "all.jsonl", corpus_lines), tmp_path / "whole")
    ix = build(tiny_lens_dir, write_lines(tmp_path / "first.jsonl", corpus_lines[:5]), tmp_path / "ix")
    rest = write_lines(tmp_path / "rest.jsonl", corpus_lines[5:])  # 18 documents: 5 chunks of 4
    before = files_sha(ix)
    real, calls = indexing.encode_chunk, []

    def interrupted(*args):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt  # Ctrl-C during the third chunk
        return real(*args)

    monkeypatch.setattr(indexing, "encode_chunk", interrupted)
    args = ["-q", "index", "add", str(ix), "--corpus", str(rest), "--chunk-size", "4"]
    capsys.readouterr()
    assert main(args) == 130
    assert "--resume to continue" in capsys.readouterr().err
    work = tmp_path / ".ix.adding"
    assert sorted(p.name for p in work.glob("chunk-*")) == ["chunk-000000.npz", "chunk-000001.npz"]
    assert files_sha(ix) == before  # the index itself is untouched until the save

    calls.clear()
    monkeypatch.setattr(indexing, "encode_chunk", lambda *a: calls.append(1) or real(*a))
    capsys.readouterr()
    assert main(args + ["--resume"]) == 0
    assert len(calls) == 3  # 5 chunks, 2 already encoded
    assert "added 18 documents" in capsys.readouterr().out
    assert not work.exists()  # cleaned up once the index is saved
    assert_same_hits(hits_of(ix), hits_of(whole))

    # other documents cannot resume what these left: refused, and what was kept stays for the right command
    monkeypatch.setattr(indexing, "encode_chunk", interrupted)
    calls.clear()
    more = write_lines(tmp_path / "more.jsonl", [json.dumps({"_id": f"n{i}", "text": f"new text {i}"})
                                                 for i in range(12)])
    assert main(["-q", "index", "add", str(ix), "--corpus", str(more), "--chunk-size", "4"]) == 130
    assert main(["-q", "index", "add", str(ix), "--corpus", str(rest), "--chunk-size", "4", "--upsert",
                 "--resume"]) == 2
    assert "unfinished addition" in capsys.readouterr().err and work.exists()
    monkeypatch.setattr(indexing, "encode_chunk", real)
    assert main(["-q", "index", "add", str(ix), "--corpus", str(more), "--chunk-size", "4", "--resume"]) == 0
    assert len(load_index(ix)) == 35 and not work.exists()
