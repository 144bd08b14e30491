"""Indexes on separate machines searched as one (index.remote, `lens serve --backends`): the same hits and scores as
one index holding every document (a `lens index merge` of them), with idf, BM25 and filters; a part saved again is
described anew; parts built otherwise, or down, are clear errors."""

import json

import numpy as np
import pytest

from index import load_index
from index.remote import RemoteIndex, _groups, answer_part
from lens.cli import main
from lens.search import Searcher
from lens.serve import SearchService

from corpus_helpers import write_corpus
from serve_helpers import Running

QUERIES = ["cancer drug", "brain cell", "blood risk treatment", "gene", "clinical trial of a new drug"]


def build(tiny_lens_dir, out, corpus, *extra):
    assert main(["-q", "index", "build", "--corpus", str(corpus), "--output", str(out), "--model",
                 str(tiny_lens_dir), "--dense", "lens", *extra]) == 0
    return out


@pytest.fixture(scope="module")
def parts(tiny_lens_dir, tmp_path_factory):
    """Two machines' indexes (the second in two shards, as `--shards` builds one part of a layout) and the one
    index of all their documents, merged."""
    tmp = tmp_path_factory.mktemp("remote")
    a = build(tiny_lens_dir, tmp / "a", write_corpus(tmp / "a.jsonl", 14, prefix="a", seed=1))
    b = build(tiny_lens_dir, tmp / "b", write_corpus(tmp / "b.jsonl", 22, prefix="b", seed=2), "--shards", "2")
    whole = tmp / "whole"
    assert main(["-q", "index", "merge", str(whole), str(a), str(b)]) == 0
    return a, b, whole


def hits(results):
    return [(r.ids, np.asarray(r.scores, dtype=np.float32).tolist(), r.metadata) for r in results]


@pytest.mark.parametrize("kw", [
    {},  # the index's default: its weights, idf and BM25 at 0.1
    {"weights": (0.7, 0.3)},
    {"weights": (0.5, 0.5, 0.25), "idf": False},
    {"weights": (0.0, 0.0, 1.0)},  # BM25 alone
    {"weights": (0.5, 0.5, 0.1), "filter": {"title": ["cell", "gene", "drug"]}, "k": 4},
    {"idf": True, "k": 50},  # every document
])
def test_the_parts_answer_as_one_index_of_all_their_documents(parts, kw):
    a, b, whole = parts
    want = Searcher.open(whole).search(QUERIES, **kw)
    with Running(SearchService(a)) as sa, Running(SearchService(b)) as sb:
        remote = Searcher.remote([sa.url, sb.url])
        assert len(remote.index) == len(load_index(whole)) == 36
        assert remote.default_weights == Searcher.open(whole).default_weights
        got = remote.search(QUERIES, **kw)
    assert hits(got) == hits(want)  # ids, scores (float32, exactly) and metadata, in order


def test_a_front_end_serves_the_parts_as_lens_serve_serves_the_whole(parts):
    a, b, whole = parts
    body = {"queries": QUERIES, "k": 6, "weights": [0.6, 0.4, 0.2]}
    with Running(SearchService(a)) as sa, Running(SearchService(b)) as sb, Running(SearchService(whole)) as sw:
        with Running(SearchService(None, backends=[sa.url, sb.url])) as front:
            status, got = front.call("/search", body)
            assert status == 200
            assert [r["hits"] for r in got["results"]] == [r["hits"] for r in sw.call("/search", body)[1]["results"]]
            assert front.call("/health")[1] == {"status": "ok", "documents": 36, "backends": 2}
            info = front.call("/info")[1]
            assert info["backends"] == [sa.url, sb.url] and info["documents"] == 36
            status, err = front.call("/part")
            assert status == 404 and "front end" in err["error"]
        # backends down: the front end names the first that failed (both here), with a gateway status
        front_service = SearchService(None, backends=[sa.url, sb.url])
    with Running(front_service) as front:
        status, err = front.call("/search", body)
        assert status == 502 and "cannot be reached" in err["error"]
        assert sa.url in err["error"] or sb.url in err["error"]
        status, err = front.call("/health")
        assert status == 503 and "2 of 2 backends" in err["error"]


def test_a_part_saved_again_is_described_anew(parts, tiny_lens_dir, tmp_path):
    a, b, _ = parts
    import shutil

    a2 = tmp_path / "a"
    shutil.copytree(a, a2)
    more = write_corpus(tmp_path / "more.jsonl", 5, prefix="m", seed=3)
    with Running(SearchService(a2)) as sa, Running(SearchService(b)) as sb:
        remote = Searcher.remote([sa.url, sb.url])
        remote.search(QUERIES)
        assert main(["-q", "index", "add", str(a2), "--corpus", str(more)]) == 0
        got = remote.search(QUERIES, k=8)  # the part answers 409 to the old version; described again, once
        assert len(remote.index) == 41
    whole = tmp_path / "whole"
    assert main(["-q", "index", "merge", str(whole), str(a2), str(b)]) == 0
    assert hits(got) == hits(Searcher.open(whole).search(QUERIES, k=8))


def test_parts_built_otherwise_or_named_twice_are_refused(parts, tiny_lens_dir, tmp_path):
    a, b, _ = parts
    other = build(tiny_lens_dir, tmp_path / "lexicon-only", write_corpus(tmp_path / "c.jsonl", 6), "--dense", "none")
    with Running(SearchService(a)) as sa, Running(SearchService(other)) as so:
        with pytest.raises(ValueError, match="differs from .* in .*dense_dim"):
            RemoteIndex([sa.url, so.url])
        with pytest.raises(ValueError, match="named twice"):
            RemoteIndex([sa.url, sa.url + "/"])
    with pytest.raises(ValueError, match="http"):
        RemoteIndex(["localhost:1"])
    with pytest.raises(ConnectionError, match="cannot be reached"):
        RemoteIndex(["http://127.0.0.1:9"], timeout=2)


def test_a_part_refuses_bad_or_stale_requests(parts):
    a, _, _ = parts
    index = load_index(a)
    from index.remote import StalePart

    with pytest.raises(StalePart):
        answer_part(index, (1, 2, 3), "search", {"version": [9, 9, 9], "queries": [{}]})
    for op, body, words in [
        ("nope", {}, "no part operation"),
        ("search", {"version": None, "queries": []}, "non-empty list"),
        ("search", {"version": None, "queries": [{"dense": {"dtype": "float32", "values": "AAAAAA=="}}],
                    "weights": [1, 1], "k": 1}, "holds 1 values"),
        ("bm25-stats", {"version": None, "queries": [{"terms": "gene"}]}, "list of strings"),
        ("search", {"version": None, "queries": [{"lexicon": None}], "k": 1}, "weights"),  # none, for any query
        ("search", {"version": None, "queries": [{"lexicon": None}], "filter": {"": 1}, "k": 1}, "filter"),
        ("bm25-maxima", {"version": None, "queries": [{"terms": ["gene"], "stats": {
            "documents": -1, "length": 3, "df": [0]}}]}, "counts from 0"),
        ("bm25-maxima", {"version": None, "queries": [{"terms": ["gene"], "stats": {
            "documents": 3, "length": 3, "df": [10 ** 30]}}]}, "each df at most"),
        ("search", {"version": None, "queries": [{"lexicon": None, "text": "gene", "stats": {
            "documents": 3, "length": 3, "df": [1]}, "max": float("nan")}], "weights": [0, 0, 1], "k": 1},
         '"max"'),
        ("search", {"version": None, "queries": [{"lexicon": None}], "weights": [1, 1], "k": 1, "depth": "x"},
         '"depth" must be a positive integer'),
    ]:
        with pytest.raises(ValueError, match=words):
            answer_part(index, None, op, body)


def test_requests_are_cut_to_fit_a_parts_body_limit():
    queries = [{"x": "y" * 100}] * 25
    groups = _groups(queries, 1000)
    assert [q for g in groups for q in g] == queries and all(len(json.dumps(g)) <= 1000 for g in groups)
    assert _groups([{"x": "y" * 5000}], 1000) == [[{"x": "y" * 5000}]]  # one query alone may exceed it


def test_lens_serve_takes_a_directory_or_backends(capsys):
    assert main(["serve"]) == 2
    assert "DIR to serve, or --backends" in capsys.readouterr().err
    assert main(["serve", "--backends", "localhost:8080"]) == 2
    assert "http:// URLs" in capsys.readouterr().err
    assert main(["serve", "--backends", "http://127.0.0.1:9", "--port", "0", "--timeout", "2"]) == 2
    assert "cannot be reached" in capsys.readouterr().err
    with pytest.raises(ValueError, match="give one"):
        SearchService("ix", backends=["http://a:1"])


def test_a_stuck_backend_fails_each_search_within_the_timeout_and_others_run_side_by_side(parts):
    """One backend that accepts connections and never answers: every search fails within about --timeout, however
    many run at once (they do not queue behind each other), naming that backend."""
    import socket
    import threading
    import time

    a, b, _ = parts
    stuck = socket.socket()
    stuck.bind(("127.0.0.1", 0))
    stuck.listen(64)  # connections are accepted by the kernel and never answered
    stuck_url = f"http://127.0.0.1:{stuck.getsockname()[1]}"
    try:
        with Running(SearchService(a)) as sa, Running(SearchService(b)) as sb:
            remote = RemoteIndex([sa.url, sb.url], timeout=1.0)
            q = np.zeros((1, remote.lexicon_dim), np.float32)
            q[0, :3] = 1.0
            assert len(remote.search(lexicon=q, weights=(1.0, 0.0), idf=False)[0].ids) == 10
            remote._parts[1].url = stuck_url  # the second machine stops answering
            outcomes = []

            def search():
                started = time.monotonic()
                try:
                    remote.search(lexicon=q, weights=(1.0, 0.0), idf=False)
                    outcomes.append(("answered", time.monotonic() - started))
                except ConnectionError as e:
                    outcomes.append((str(e), time.monotonic() - started))

            threads = [threading.Thread(target=search) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            remote.close()
    finally:
        stuck.close()
    assert len(outcomes) == 8
    for message, seconds in outcomes:
        assert f"backend {stuck_url} did not answer within 1 s" in message
        assert seconds < 3.0, outcomes  # each within its own timeout, not queued behind the others
