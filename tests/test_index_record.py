"""The encoder record (lens.index_record): an index built from Python names its encoders, so `lens search`, `lens
index add` and `lens serve` open it and answer as the Python Searcher does; older manifests still open."""

import json
import threading
import urllib.request

import numpy as np
import pytest

from lens.cli import main
from lens.corpus import load_corpus
from lens.encoder import LensEncoder
from lens.hybrid import HybridEncoder
from lens.indexing import build_index
from lens.search import Searcher
from lens.sharding import EncoderSpec

from corpus_helpers import write_corpus

QUERIES = ["cancer drug", "brain cell"]


def _hits(results):
    return [[(h["id"], h["score"]) for h in r] for r in results]


def _searched(directory, queries, k=5):
    results = Searcher.open(directory).search(queries, k=k)
    return [[(i, float(s)) for i, s in zip(r.ids, r.scores)] for r in results]


def _same(got, want):
    assert [[i for i, _ in r] for r in got] == [[i for i, _ in r] for r in want]
    for a, b in zip(got, want):
        np.testing.assert_allclose([s for _, s in a], [s for _, s in b], atol=1e-5)


def _cli_search(directory, capsys, k=5):
    capsys.readouterr()
    assert main(["-q", "search", str(directory), *QUERIES, "-k", str(k), "--json"]) == 0
    return _hits([q["hits"] for q in json.loads(capsys.readouterr().out)])


def _cli_serve(directory, monkeypatch, body):
    """`lens serve DIR --port 0` run in-process in a thread; one POST /search, then the server is shut down."""
    import lens.serve

    made, real = [], lens.serve.make_server

    def capture(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(lens.serve, "make_server", capture)
    codes = []
    thread = threading.Thread(target=lambda: codes.append(main(["-q", "serve", str(directory), "--port", "0"])))
    thread.start()
    try:
        for _ in range(600):
            if made or not thread.is_alive():
                break
            thread.join(0.1)
        assert made, "lens serve did not start"
        port = made[0].server_address[1]
        req = urllib.request.Request(f"http://127.0.0.1:{port}/search", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            answer = json.loads(r.read())
    finally:
        if made:
            made[0].shutdown()
        thread.join(60)
    assert codes == [0]
    return answer


def test_a_python_built_index_is_searched_added_to_and_served_by_the_cli(tiny_lens_dir, tmp_path, capsys,
                                                                         monkeypatch):
    docs = load_corpus(write_corpus(tmp_path / "corpus.jsonl", 20))
    ix = tmp_path / "ix"
    encoder = HybridEncoder(LensEncoder.from_pretrained(tiny_lens_dir), "lens")
    build_index(docs, ix, encoder, chunk_size=6, show_progress_bar=False)
    info = json.loads((ix / "manifest.json").read_text())["info"]
    assert info["lens_model"] == str(tiny_lens_dir.resolve()) and info["dense"] == "lens"
    assert info["lens_quantize"] is None and info["text_normalization"] is None

    want = _searched(ix, QUERIES)
    assert len(want[0]) == 5
    _same(_cli_search(ix, capsys), want)

    more = write_corpus(tmp_path / "more.jsonl", 4, "new")
    assert main(["-q", "index", "add", str(ix), "--corpus", str(more)]) == 0
    after = _searched(ix, QUERIES, k=30)
    assert sum(len(r) for r in after) == 2 * 24  # every document, both queries
    assert any(i.startswith("new") for r in after for i, _ in r)
    _same(_cli_search(ix, capsys, k=30), after)

    answer = _cli_serve(ix, monkeypatch, {"queries": QUERIES, "k": 30})
    _same(_hits([r["hits"] for r in answer["results"]]), after)


def test_a_spec_build_records_the_same_encoders(tiny_lens_dir, tmp_path):
    docs = load_corpus(write_corpus(tmp_path / "corpus.jsonl", 8))
    build_index(docs, tmp_path / "spec", EncoderSpec(str(tiny_lens_dir), "none"), chunk_size=4,
                show_progress_bar=False)
    info = json.loads((tmp_path / "spec" / "manifest.json").read_text())["info"]
    assert (info["lens_model"], info["dense"], info["lens_quantize"]) == (str(tiny_lens_dir.resolve()), "none", None)
    assert Searcher.open(tmp_path / "spec").search(["cancer"], k=3)[0].ids


def test_an_encoder_made_in_memory_is_recorded_as_not_reopenable(tiny_encoder, tmp_path, caplog):
    docs = load_corpus(write_corpus(tmp_path / "corpus.jsonl", 8))
    lens = LensEncoder(tiny_encoder.model, tiny_encoder.tokenizer, tiny_encoder.config, tiny_encoder.assignment)
    encoder = HybridEncoder(lens, "none")
    build_index(docs, tmp_path / "ix", encoder, chunk_size=4, show_progress_bar=False)
    assert "built in memory" in caplog.text
    assert json.loads((tmp_path / "ix" / "manifest.json").read_text())["info"]["lens_model"] is None
    with pytest.raises(ValueError, match=r"pass that encoder \(Searcher.open\(directory, encoder=...\)\)"):
        Searcher.open(tmp_path / "ix")
    hits = Searcher.open(tmp_path / "ix", encoder=encoder).search(["cancer"], k=3)[0]
    lex = lens.encode_documents([d.full_text for d in docs])
    q = lens.encode_queries(["cancer"])[0]
    assert hits.ids == [docs[i].id for i in np.argsort(-(lex @ q), kind="stable")[:3]]


def _rewrite_info(directory, change):
    path = directory / "manifest.json"
    m = json.loads(path.read_text())
    m["info"] = change(m["info"])
    path.write_text(json.dumps(m))


def test_older_manifests_still_open(tiny_lens_dir, tmp_path, capsys):
    docs = load_corpus(write_corpus(tmp_path / "corpus.jsonl", 10))
    ix = tmp_path / "ix"
    build_index(docs, ix, HybridEncoder(LensEncoder.from_pretrained(tiny_lens_dir), "lens"), chunk_size=5,
                show_progress_bar=False)
    want = _searched(ix, QUERIES)
    # as `lens index build` wrote it before the build recorded its encoders: no lens_quantize, no text rule
    _rewrite_info(ix, lambda info: {"lens_model": info["lens_model"], "dense": "lens", "corpus": "c.jsonl"})
    _same(_cli_search(ix, capsys), want)
    # as a Python build wrote it then: nothing recorded; the dense kind is read from the fingerprint
    _rewrite_info(ix, lambda info: {})
    searcher = Searcher.open(ix, model=tiny_lens_dir)
    assert (searcher.record.dense, searcher.record.recorded) == ("lens", False)
    _same([[(i, float(s)) for i, s in zip(r.ids, r.scores)] for r in searcher.search(QUERIES, k=5)], want)


def test_a_model_with_another_text_rule_is_refused(tiny_lens_dir, tmp_path):
    docs = load_corpus(write_corpus(tmp_path / "corpus.jsonl", 6))
    ix = tmp_path / "ix"
    build_index(docs, ix, HybridEncoder(LensEncoder.from_pretrained(tiny_lens_dir), "none"), chunk_size=3,
                show_progress_bar=False)
    _rewrite_info(ix, lambda info: {**info, "text_normalization": "some-other-rule"})
    with pytest.raises(ValueError, match="unknown text_normalization 'some-other-rule'"):
        Searcher.open(ix)
    lens = LensEncoder.from_pretrained(tiny_lens_dir)
    lens.config.text_normalization = "lowercase"  # a model with another rule than the index's documents
    encoder = HybridEncoder(lens, "none")
    _rewrite_info(ix, lambda info: {**info, "text_normalization": None})
    with pytest.raises(ValueError, match="lowercase"):  # the fingerprint or the record refuses it
        Searcher.open(ix, encoder=encoder)


@pytest.mark.parametrize("built_with,model_now", [(None, "lowercase-shouted"), ("lowercase", None)])
def test_an_index_is_queried_under_the_text_rule_its_documents_were_encoded_with(tiny_lens_dir, tmp_path,
                                                                                 built_with, model_now):
    """The model directory's rule may change after a build (the shipped default gained one): the index opens with
    the model under the rule it records, so its queries are normalised as its documents were."""
    import shutil

    from lens.config import LensConfig

    model = tmp_path / "model"
    shutil.copytree(tiny_lens_dir, model)
    config = LensConfig.load(model)
    config.text_normalization = built_with
    config.save(model)
    docs = load_corpus(write_corpus(tmp_path / "corpus.jsonl", 6))
    ix = tmp_path / "ix"
    build_index(docs, ix, HybridEncoder.from_pretrained(model, "lens"), chunk_size=3, show_progress_bar=False)
    queries = ["CELL PROTEIN GENE CANCER", "cancer drug"]
    want = [[(i, float(x)) for i, x in zip(r.ids, r.scores)] for r in Searcher.open(ix).search(queries, k=4)]
    config.text_normalization = model_now  # the directory's rule changes after the build
    config.save(model)
    searcher = Searcher.open(ix)
    assert searcher.encoder.lens.config.text_normalization == built_with
    _same([[(i, float(x)) for i, x in zip(r.ids, r.scores)] for r in searcher.search(queries, k=4)], want)


def test_an_mpnet_dense_part_is_recorded_and_reopened(tiny_lens_dir, tmp_path, capsys, monkeypatch):
    """--dense mpnet loads the peer through lens.peers.load_mpnet (here a stand-in: the packaged MiniLM under
    another name), records the kind, and every reader loads the same dense model again."""
    from lens.dense import DenseEncoder

    loads = []

    def fake_mpnet(cache_root=None, device=None):
        loads.append(device)
        encoder = DenseEncoder.from_pretrained("minilm")
        encoder.name = "stand-in-mpnet"
        return encoder

    monkeypatch.setattr("lens.peers.load_mpnet", fake_mpnet)
    corpus = write_corpus(tmp_path / "corpus.jsonl", 12)
    ix = tmp_path / "ix"
    assert main(["-q", "index", "build", "--corpus", str(corpus), "--output", str(ix), "--model", str(tiny_lens_dir),
                 "--dense", "mpnet", "--no-idf", "--no-bm25"]) == 0  # scored below as plain cosines
    manifest = json.loads((ix / "manifest.json").read_text())
    assert manifest["info"]["dense"] == "mpnet" and manifest["fingerprint"]["dense_model"] == "stand-in-mpnet"
    assert len(loads) == 1
    searched = _searched(ix, QUERIES)
    assert len(loads) == 2  # the searcher loaded the recorded kind again
    encoder = HybridEncoder(LensEncoder.from_pretrained(tiny_lens_dir), "mpnet")
    lex, dense = encoder.encode_documents([d.full_text for d in load_corpus(corpus)])
    q_lex, q_dense = encoder.encode_queries(QUERIES[:1])
    scores = 0.5 * (lex @ q_lex[0]) + 0.5 * (dense @ q_dense[0])  # the index's default weights
    ids = [d.id for d in load_corpus(corpus)]
    assert [i for i, _ in searched[0]] == [ids[j] for j in np.argsort(-scores, kind="stable")[:5]]
    _same(_cli_search(ix, capsys), searched)
    assert EncoderSpec.of(encoder).dense == "mpnet" and EncoderSpec(str(tiny_lens_dir), "mpnet").load().dense.name \
        == "stand-in-mpnet"
