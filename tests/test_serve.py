"""`lens serve` (lens.serve): the HTTP answers equal `Searcher.search`, bad requests get a 4xx that says why, and a
save by `lens index add` is served from the next request on."""

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from lens.cli import main
from lens.search import Searcher
from lens.serve import SearchService

from corpus_helpers import write_corpus
from serve_helpers import Running

QUERIES = ["cancer drug", "brain cell", "blood risk treatment"]


@pytest.fixture(scope="module")
def index_dir(tiny_lens_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve")
    corpus = write_corpus(tmp / "corpus.jsonl", 20)
    out = tmp / "ix"
    assert main(["-q", "index", "build", "--corpus", str(corpus), "--output", str(out), "--model",
                 str(tiny_lens_dir), "--dense", "lens"]) == 0
    return out


def expected(directory, queries, **kw):
    return [[(i, float(s), m) for i, s, m in zip(h.ids, h.scores, h.metadata)]
            for h in Searcher.open(directory).search(queries, **kw)]


def served(results):
    return [[(h["id"], h["score"], h["metadata"]) for h in r["hits"]] for r in results]


def assert_same(got, want):
    for g, w in zip(got, want, strict=True):  # ties may order differently; scores agree position by position
        np.testing.assert_allclose([s for _, s, _ in g], [s for _, s, _ in w], rtol=1e-5, atol=1e-6)
        assert {i: m for i, _, m in g} == {i: m for i, _, m in w}


def test_answers_equal_the_searcher(index_dir):
    with Running(SearchService(index_dir)) as srv:
        status, body = srv.call("/search", {"queries": QUERIES, "k": 5})
        assert status == 200 and [r["query"] for r in body["results"]] == QUERIES and body["documents"] == 20
        assert [h["rank"] for h in body["results"][0]["hits"]] == [1, 2, 3, 4, 5]
        assert_same(served(body["results"]), expected(index_dir, QUERIES, k=5))

        flt, weights = {"title": ["cancer", "drug"]}, [1.0, 0.0]
        status, body = srv.call("/search", {"query": "cancer drug", "k": 20, "filter": flt, "weights": weights})
        assert status == 200
        want = expected(index_dir, ["cancer drug"], k=20, filter=flt, weights=tuple(weights))
        assert_same(served(body["results"]), want)
        assert {m["title"] for _, _, m in want[0]} == {"cancer", "drug"} and len(want[0]) == 4 and "warnings" not in body

        status, body = srv.call("/search", {"query": "cancer drug", "filter": {"author": "x"}})  # no such field
        assert status == 200 and body["results"][0]["hits"] == []
        assert body["warnings"] == ['no document matches the filter {"author": "x"}; no document has the metadata '
                                    "field 'author'; fields they have: snippet, title (a dot reaches into a "
                                    "nested object, e.g. metadata.author)"]
        status, body = srv.call("/search", {"query": "cancer drug", "filter": {"title": "no such title"}})
        assert body["warnings"] == ['no document matches the filter {"title": "no such title"}']

        status, body = srv.call("/search?q=brain+cell&k=3")
        assert status == 200 and body["results"][0]["query"] == "brain cell"
        assert_same(served(body["results"]), expected(index_dir, ["brain cell"], k=3))

        assert srv.call("/health") == (200, {"status": "ok", "documents": 20})
        status, info = srv.call("/info")
        assert status == 200 and (info["documents"], info["index_type"], info["mode"]) == (20, "flat", "hybrid")
        assert (info["quantize"], info["text_normalization"]) == (None, None)  # the float32 model, no text rule


@pytest.mark.parametrize("body, status, words", [
    ({"queries": "cancer"}, 400, '"queries" must be a list of strings'),
    ({"query": ["cancer"]}, 400, '"query" must be a string'),
    ({"query": "a", "queries": ["b"]}, 400, "not both or neither"),
    ({}, 400, "not both or neither"),
    ({"query": "cancer", "top_k": 3}, 400, "unknown field(s) ['top_k']"),
    ({"query": "cancer", "k": 0}, 400, '"k" must be an integer from 1 to 1000'),
    ({"query": "cancer", "k": "5"}, 400, '"k" must be an integer'),
    ({"query": "cancer", "k": 5000}, 400, "from 1 to 1000"),
    ({"query": "   "}, 400, "a query is empty"),
    ({"queries": []}, 400, "1 to 256 queries"),
    ({"query": "cancer", "weights": [-1, 1]}, 400, "negative weights are not supported"),
    ({"query": "cancer", "weights": "0.5,0.5"}, 400, "a list of two or three numbers LEX,DENSE[,BM25]"),
    ({"query": "cancer", "weights": [0.5]}, 400, "two or three numbers LEX,DENSE[,BM25]"),
    ({"query": "cancer", "weights": [0.1, 0.2, 0.3, 0.4]}, 400, "two or three numbers LEX,DENSE[,BM25]"),
    ({"query": "cancer", "filter": {"title": []}}, 400, "empty list of values"),
    ({"query": "cancer", "filter": "title=cancer"}, 400, "a filter is a non-empty dict"),
    ({"query": "cancer", "instruction": 3}, 400, '"instruction" must be a string'),
    (["cancer"], 400, "must be a JSON object"),
])
def test_bad_requests_say_what_was_wrong(index_dir, body, status, words):
    with Running(SearchService(index_dir)) as srv:
        got, answer = srv.call("/search", body)
        assert got == status and words in answer["error"], answer


def test_bad_http_gets_a_clear_status(index_dir, monkeypatch):
    from lens import serve

    with Running(SearchService(index_dir)) as srv:
        status, answer = srv.call("/search", raw=b"{not json")
        assert status == 400 and "not JSON" in answer["error"]
        assert srv.call("/nowhere")[0] == 404 and srv.call("/nowhere", {"query": "x"})[0] == 404
        status, answer = srv.call("/search", {"query": "x"}, method="PUT")
        assert status == 405 and "PUT is not served" in answer["error"]
        status, answer = srv.call("/search?k=3")
        assert status == 400 and "takes q (the query) and k" in answer["error"]
        monkeypatch.setattr(serve, "MAX_BODY", 10)
        status, answer = srv.call("/search", {"query": "cancer drug treatment"})
        assert status == 413 and "at most 10 are taken" in answer["error"]


def test_a_save_is_served_from_the_next_request(index_dir, tiny_lens_dir, tmp_path, monkeypatch):
    import shutil

    import lens.search

    ix = tmp_path / "ix"
    shutil.copytree(index_dir, ix)
    with Running(SearchService(ix)) as srv:
        assert srv.call("/health")[1]["documents"] == 20
        more = write_corpus(tmp_path / "more.jsonl", 5, prefix="new", seed=1)
        assert main(["-q", "index", "add", str(ix), "--corpus", str(more)]) == 0
        status, body = srv.call("/search", {"queries": QUERIES, "k": 25})
        assert status == 200 and body["documents"] == 25
        assert_same(served(body["results"]), expected(ix, QUERIES, k=25))

        def broken(*a, **kw):
            raise ValueError("damaged for the test")

        assert main(["-q", "index", "remove", str(ix), "new0"]) == 0
        monkeypatch.setattr(lens.search, "load_index", broken)  # the server's next load fails
        status, health = srv.call("/health")
        assert health["documents"] == 25 and "damaged for the test" in health["reload_error"]
        assert srv.call("/search", {"query": "cancer", "k": 30})[1]["documents"] == 25  # the version before
        monkeypatch.undo()
        assert main(["-q", "index", "remove", str(ix), "new1"]) == 0
        assert srv.call("/health")[1] == {"status": "ok", "documents": 23}


def test_lens_serve_command_starts_answers_and_stops_on_ctrl_c(index_dir):
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from lens.cli import main; sys.exit(main())",
                             "serve", str(index_dir), "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        assert "20 documents) on http://127.0.0.1:" in line, line + proc.stderr.read()
        url = line.split(" on ")[1].split()[0]
        with urllib.request.urlopen(url + "/health", timeout=60) as r:
            assert json.loads(r.read()) == {"status": "ok", "documents": 20}
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "stopped" in out, err
    finally:
        proc.kill()
    assert main(["serve", str(index_dir), "--port", "70000"]) == 2


def test_a_port_in_use_is_a_clear_error(index_dir, capsys):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", str(index_dir), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port} (Address already in use); choose another --port" in err


def test_a_sharded_index_is_served_like_its_searcher(tiny_lens_dir, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl", 20)
    ix = tmp_path / "sharded"
    assert main(["-q", "index", "build", "--corpus", str(corpus), "--output", str(ix), "--model",
                 str(tiny_lens_dir), "--dense", "lens", "--shards", "2"]) == 0
    with Running(SearchService(ix)) as srv:
        status, body = srv.call("/search", {"queries": QUERIES, "k": 7, "filter": {"title": ["cell", "gene"]}})
        assert status == 200
        assert_same(served(body["results"]), expected(ix, QUERIES, k=7, filter={"title": ["cell", "gene"]}))
        assert srv.call("/info")[1]["documents"] == 20


def test_a_kept_alive_connection_never_reads_an_unread_body_as_a_request(index_dir):
    import http.client

    with Running(SearchService(index_dir)) as srv:
        conn = http.client.HTTPConnection("127.0.0.1", srv.server.server_address[1], timeout=60)
        body = json.dumps({"query": "cancer drug", "k": 2})
        for path, status in (("/search", 200), ("/search", 200), ("/nowhere", 404), ("/search", 200)):
            conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            answer = json.loads(response.read())
            assert response.status == status, answer
        conn.request("PUT", "/search", body="GET /health HTTP/1.1\r\n\r\n")  # a body that looks like a request
        response = conn.getresponse()
        assert response.status == 405 and response.getheader("Connection") == "close"
        response.read()
        conn.request("POST", "/search", body=body)
        response = conn.getresponse()
        assert response.status == 200 and len(json.loads(response.read())["results"][0]["hits"]) == 2
        conn.close()


class FakeEncoder:
    """encode_queries returns each text's number as its row; it records the calls and is slow, so requests queue."""

    def __init__(self):
        self.calls = []

    def encode_queries(self, texts, instruction=None, batch_size=16):
        import time

        self.calls.append((list(texts), instruction))
        if "boom" in texts:
            raise ValueError("boom in the batch")
        time.sleep(0.05)
        rows = np.array([[float(t)] for t in texts], dtype=np.float32)
        return rows, -rows


def test_the_batcher_encodes_concurrent_requests_together_and_answers_each_its_own():
    from lens.serve import QueryBatcher

    batcher, encoder = QueryBatcher(max_batch=64), FakeEncoder()
    got, errors = {}, {}
    requests = {i: [str(10 * i + j) for j in range(1 + i % 3)] for i in range(12)}

    def ask(i):
        try:
            got[i] = batcher.encode(encoder, requests[i], "same" if i % 2 else None)
        except ValueError as e:
            errors[i] = e

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i, texts in requests.items():
        lexicon, dense = got[i]
        assert lexicon[:, 0].tolist() == [float(t) for t in texts] and (dense == -lexicon).all()
    assert len(encoder.calls) < 12  # some requests shared a call
    assert all(len({q for q in texts}) == len(texts) for texts, _ in encoder.calls)
    for texts, instruction in encoder.calls:  # a call holds one instruction's queries only
        owners = {i for i, r in requests.items() for q in texts if q in r}
        assert {"same" if i % 2 else None for i in owners} == {instruction}

    with pytest.raises(ValueError, match="boom in the batch"):
        batcher.encode(encoder, ["1", "boom"], None)
    assert batcher.encode(encoder, ["7"], None)[0].tolist() == [[7.0]]  # the thread lives on after an error


def test_concurrent_requests_get_the_answers_of_lone_ones(index_dir):
    queries = ["cancer drug", "brain cell", "blood risk treatment", "gene protein mouse", "dose", "patients risk"]
    want = expected(index_dir, queries, k=6)
    got = {}
    with Running(SearchService(index_dir)) as srv:
        def ask(i):
            got[i] = srv.call("/search", {"query": queries[i], "k": 6})

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(queries))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for i in range(len(queries)):
        status, body = got[i]
        assert status == 200 and body["results"][0]["query"] == queries[i]
        assert_same(served(body["results"]), [want[i]])


def test_a_slow_reload_holds_up_no_other_request(index_dir, tmp_path, monkeypatch):
    import shutil

    import lens.search

    ix = tmp_path / "ix"
    shutil.copytree(index_dir, ix)
    service = SearchService(ix)
    assert main(["-q", "index", "add", str(ix), "--corpus", str(write_corpus(tmp_path / "m.jsonl", 5, "new"))]) == 0
    entered, gate, real = threading.Event(), threading.Event(), lens.search.load_index

    def slow(*args, **kwargs):
        entered.set()
        assert gate.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(lens.search, "load_index", slow)
    first = []
    loader = threading.Thread(target=lambda: first.append(service.health()))
    loader.start()
    assert entered.wait(60)
    assert service.health()["documents"] == 20  # answered from the old version while the new one loads
    gate.set()
    loader.join()
    assert first[0]["documents"] == 25 and service.health()["documents"] == 25


def test_info_reports_the_quantize_mode_in_use(index_dir):
    """`lens serve --quantize auto` says what "auto" became on this host (int8 or float32), not "auto"."""
    from lens.quantize import resolve_quantize

    assert SearchService(index_dir, quantize="int8").info()["quantize"] == "int8"
    assert SearchService(index_dir, quantize="auto").info()["quantize"] == resolve_quantize("auto", "cpu")


def test_info_lists_the_metadata_fields_a_filter_can_name(index_dir, tmp_path):
    """/info lists the fields as `lens index info --json` does (one reading of the document tables); a field added
    with a document is listed (a sharded index's: tests/test_index_idf.py)."""
    import contextlib
    import io
    import json

    from index import load_index

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["index", "info", str(index_dir), "--json"]) == 0
    fields = json.loads(out.getvalue())["metadata_fields"]
    assert fields == ["snippet", "title"] == SearchService(index_dir).info()["metadata_fields"]
    index = load_index(index_dir)
    index.add(["extra"], np.ones((1, index.lexicon_dim)), np.ones((1, index.dense_dim)),
              metadata=[{"source": {"site": "wiki"}}], texts=["extra text"])
    assert index.metadata_fields() == ["snippet", "source.site", "title"]


def _raw(port, data: bytes, head: bool = False) -> tuple[int, dict, bytes]:
    """Send ``data`` as it is and read one answer: (status, headers, body); ``head``: the answer has no body."""
    import socket

    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(data)
        while b"\r\n\r\n" not in received or not head and len(received.partition(b"\r\n\r\n")[2]) < _length(
                received):
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
    top, _, body = received.partition(b"\r\n\r\n")
    lines = top.decode().split("\r\n")
    return int(lines[0].split()[1]), dict(line.split(": ", 1) for line in lines[1:]), body


def _length(received: bytes) -> int:
    top = received.partition(b"\r\n\r\n")[0].decode(errors="replace")
    return next((int(line.split(":")[1]) for line in top.split("\r\n") if line.lower().startswith("content-length")), 0)


def test_malformed_http_is_answered_at_once(index_dir, monkeypatch):
    """A negative or missing Content-Length, a body shorter than it says (after the read timeout), JSON nested too
    deep and a HEAD request each get their answer; no connection is held waiting."""
    from lens import serve

    monkeypatch.setattr(serve._Handler, "timeout", 1)
    with Running(SearchService(index_dir)) as srv:
        port = srv.server.server_address[1]
        post = b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        status, headers, body = _raw(port, post + b"Content-Length: -1\r\n\r\n" + b'{"query": "x"}')
        assert status == 400 and "Content-Length must be a number of bytes, got '-1'" in json.loads(body)["error"]
        assert headers.get("Connection") == "close"
        status, headers, body = _raw(port, post + b"Content-Length: 100\r\n\r\n" + b'{"query": "cell"}')  # then waits
        assert status == 408 and "did not arrive within 1 s" in json.loads(body)["error"]
        assert "ended after 17 of its 100 bytes" in json.loads(body)["error"]  # what did arrive is counted
        status, headers, body = _raw(port, post + b"Transfer-Encoding: chunked\r\n\r\n" + b"5\r\nhello\r\n0\r\n\r\n")
        assert status == 411 and headers.get("Connection") == "close"
        deep = b"[" * 100_000 + b"]" * 100_000
        status, _, body = _raw(port, post + b"Content-Length: %d\r\n\r\n" % len(deep) + deep)
        assert status == 400 and "not JSON (RecursionError" in json.loads(body)["error"]
        status, headers, body = _raw(port, b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n", head=True)
        assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0
        assert srv.call("/health")[0] == 200  # and the server still answers


def test_health_says_when_the_directory_holds_no_index(index_dir, tmp_path):
    import shutil

    ix = tmp_path / "ix"
    shutil.copytree(index_dir, ix)
    with Running(SearchService(ix)) as srv:
        assert srv.call("/health")[1] == {"status": "ok", "documents": 20}
        shutil.rmtree(ix)
        health = srv.call("/health")[1]
        assert health["documents"] == 20 and "holds no saved index now" in health["warning"]
        assert srv.call("/search", {"query": "cancer"})[0] == 200  # still answering from memory


def test_lens_serve_binds_its_port_before_loading_the_models(index_dir, monkeypatch, capsys):
    import socket

    import lens.serve

    monkeypatch.setattr(lens.serve, "SearchService", lambda *a, **k: pytest.fail("the models were loaded"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert main(["serve", str(index_dir), "--port", str(taken.getsockname()[1])]) == 2
    assert "Address already in use" in capsys.readouterr().err


def test_a_client_dripping_bytes_is_cut_off_and_connections_are_capped(index_dir, monkeypatch):
    """A request must arrive whole within READ_TIMEOUT_S, however often the client sends a byte; past
    MAX_CONNECTIONS open connections, one more gets a 503 at once."""
    import socket
    import time

    from lens import serve

    monkeypatch.setattr(serve, "READ_TIMEOUT_S", 1)
    monkeypatch.setattr(serve, "MAX_CONNECTIONS", 3)
    with Running(SearchService(index_dir)) as srv:
        port = srv.server.server_address[1]
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\n")
            closed = False
            for i in range(20):  # a header line every 0.3 s: each read waits less than the 1 s, the whole more
                time.sleep(0.3)
                try:
                    sock.sendall(b"X-Drip-%d: 1\r\n" % i)
                except OSError:
                    closed = True
                    break
                sock.settimeout(0.01)
                try:
                    if sock.recv(65536) == b"":
                        closed = True
                        break
                except (TimeoutError, BlockingIOError):
                    pass
                except OSError:
                    closed = True
                    break
            assert closed and time.monotonic() - started < 3.0
        assert srv.call("/health")[0] == 200

        def slots_free(n):  # wait (under a loaded CPU too) until the server holds 3 - n connections
            deadline = time.monotonic() + 20
            while srv.server._slots._value != n and time.monotonic() < deadline:
                time.sleep(0.05)
            assert srv.server._slots._value == n

        monkeypatch.setattr(serve, "READ_TIMEOUT_S", 30)  # the idle connections below stay open while counted
        slots_free(3)  # the connections above are all closed
        idle = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(3)]
        try:
            slots_free(0)  # the server has taken all three
            status, headers, body = _raw(port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert status == 503 and "3 connections already" in json.loads(body)["error"]
        finally:
            for sock in idle:
                sock.close()
        slots_free(3)
        assert srv.call("/health")[0] == 200  # their slots are free again


def test_other_methods_and_a_get_with_a_body_get_json_and_no_desync(index_dir):
    with Running(SearchService(index_dir)) as srv:
        port = srv.server.server_address[1]
        for method, code in (("OPTIONS", 405), ("TRACE", 405), ("FOO", 501)):
            status, headers, body = _raw(port, f"{method} /search HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert status == code and f"{method} is not served" in json.loads(body)["error"]
        status, headers, body = _raw(port, b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 26\r\n\r\n"
                                           b"GET /health HTTP/1.1\r\n\r\n")
        assert status == 200 and headers.get("Connection") == "close"  # the body is never read as a request
        status, _, body = _raw(port, b"GET /health HTTP/2.0\r\nHost: x\r\n\r\n")  # the stdlib's own refusal
        assert status == 505 and "error" in json.loads(body)


def test_ctrl_c_while_a_connection_thread_starts_stops_the_server(index_dir, monkeypatch):
    """Ctrl-C (KeyboardInterrupt in the main thread) can land while Thread.start() waits for a connection's thread
    that already runs, even one that has finished: it must stop the server, not turn into "Semaphore released too
    many times" (which the server reported, and then served on), and the slot is freed once, by the thread."""
    import socket
    import time

    from lens import serve

    server = serve.make_server(SearchService(index_dir), port=0)
    outcome = []

    def run():
        try:
            server.serve_forever(poll_interval=0.05)
        except BaseException as e:  # noqa: BLE001 - the test reads what stopped it
            outcome.append(e)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    real_start = threading.Thread.start

    def start_then_ctrl_c(thread):  # the connection's thread runs to its end, then Ctrl-C lands in start()
        real_start(thread)
        thread.join()
        raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", start_then_ctrl_c)
    try:
        with socket.create_connection(server.server_address, timeout=30) as client:
            client.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert b"200 OK" in client.recv(65536)
        runner.join(30)
        assert [type(e) for e in outcome] == [KeyboardInterrupt]
        assert server._slots._value == serve.MAX_CONNECTIONS  # every slot free, none released twice
    finally:
        monkeypatch.undo()
        if runner.is_alive():
            server.shutdown()
        server.server_close()
