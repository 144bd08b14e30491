"""An HTTP JSON service over a saved hybrid index (``lens serve DIR``), on Python's own ``ThreadingHTTPServer``.

Endpoints (JSON in, JSON out; an error is ``{"error": "..."}`` with status 400, 404, 405 (another method), 408 (a
request that did not arrive whole within ``READ_TIMEOUT_S``), 409 (``/part``: a stale version), 411 (no
Content-Length), 413, 500, 501 (an unknown method), 502 / 503 (a front end's backend failed or is down) or 503 (more
than ``MAX_CONNECTIONS`` connections at once); HEAD answers GET's status and headers):

- ``POST /search`` ``{"query": "text"}`` or ``{"queries": [...]}``, optional ``"k"``, ``"filter"`` (as
  ``HybridIndex.search``), ``"weights"`` ``[w_lex, w_dense]`` or ``[w_lex, w_dense, w_bm25]`` (an index with a BM25
  part), ``"idf"`` (true / false: weigh the query lexicon by the index's inverse document frequencies; default:
  the index's), ``"instruction"``; answers
  ``{"results": [{"query", "hits": [{"rank", "id", "score", "metadata"}]}], "documents", "took_ms"}``, and
  ``"warnings"`` (a list of lines) when there is something to say: a filter that matches no document, and why
  when one of its fields is held by none (``HybridIndex.missing_filter_fields``).
- ``GET /search?q=...&k=...``: one query, for a quick look with curl or a browser.
- ``GET /health``: ``{"status": "ok", "documents": N}`` (and ``"reload_error"`` when the index on disk could not be
  loaded again and the previous version is still served; ``"warning"`` when the directory holds no saved index now).
- ``GET /info``: the index's type, size, parts, weights (``search_weights``: those of a request that names none), models
  and version.

- ``GET /part`` and ``POST /part/...``: this index as one part of a larger one, for a front end (``index.remote``).

``lens serve --backends URL,...`` (``SearchService(None, backends=...)``) is that front end: the same ``/search``,
``/health`` (503 when a backend does not answer) and ``/info`` over the indexes other ``lens serve DIR`` processes
serve, searched as one index of all their documents; a backend that fails a search is a 502 naming it.

The service follows its directory: a save by ``lens index add`` / ``remove`` (an atomic swap of the directory) is
seen on the next request and the new version loaded beside the old, which answers until the new one is ready; the
models are loaded again only if the index now names other ones. Queries are encoded in one thread, those of
concurrent requests batched together (:class:`QueryBatcher`); FAISS searches run in the requests' threads.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import socket
import threading
import time
from concurrent.futures import Future
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Mapping, Sequence
from urllib.parse import parse_qs, urlsplit

from index.bm25_fusion import query_weights
from index.remote import MAX_BODY, StalePart, answer_part, backend_health, describe_part  # MAX_BODY: one limit
from lens.search import Searcher, hit_records

__all__ = ["QueryBatcher", "SearchService", "RequestError", "make_server"]

logger = logging.getLogger(__name__)

READ_TIMEOUT_S = 60  # seconds a request may take to arrive whole, headers and body (then 408, or closed when idle)
MAX_CONNECTIONS = 256  # connections served at once (a thread each); more are answered 503 at once and closed


class RequestError(ValueError):
    """A request the service refuses; ``status`` is its HTTP status."""

    def __init__(self, message: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST) -> None:
        super().__init__(message)
        self.status = status


def _version(directory: Path) -> tuple[int, int, int] | None:
    """What identifies the saved version of an index directory: its manifest's inode, mtime and size (a save swaps
    in a new directory, so each save makes a new file); None while a swap is under way."""
    try:
        st = os.stat(directory / "manifest.json")
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _int(value: Any, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RequestError(f"{name} must be an integer from {low} to {high}, got {value!r}")
    return value


class QueryBatcher:
    """Encodes the queries of concurrent requests together, in one thread: while a batch is encoding, the requests
    that arrive wait in a queue, and the next batch takes all of them (up to ``max_batch`` queries; those with
    the same encoder and instruction are encoded as one call). A lone request waits for nothing; under load, fewer
    and larger forward passes serve more queries per second than one request at a time
    (``benchmarks/serve_speed.py``)."""

    def __init__(self, max_batch: int = 32) -> None:
        self.max_batch = max_batch
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def encode(self, encoder, queries: list[str], instruction: str | None):
        """``encoder.encode_queries(queries, instruction=instruction)``, batched with other requests' queries."""
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="lens-serve-encoder", daemon=True)
                self._thread.start()
        job: Future = Future()
        self._queue.put((encoder, instruction, queries, job))
        return job.result()

    def _run(self) -> None:
        while True:
            jobs = [self._queue.get()]
            size = len(jobs[0][2])
            while size < self.max_batch:
                try:
                    jobs.append(self._queue.get_nowait())
                except queue.Empty:
                    break
                size += len(jobs[-1][2])
            groups: dict[tuple[int, str | None], list] = {}
            for job in jobs:
                groups.setdefault((id(job[0]), job[1]), []).append(job)
            for group in groups.values():
                self._encode(group)

    @staticmethod
    def _encode(group: list) -> None:
        encoder, instruction = group[0][0], group[0][1]
        texts = [q for job in group for q in job[2]]
        logger.debug("encoding %d queries of %d requests together", len(texts), len(group))
        try:
            lexicon, dense = encoder.encode_queries(texts, instruction=instruction, batch_size=len(texts))
        except BaseException as e:  # every waiting request gets the error
            for job in group:
                job[3].set_exception(e)
            return
        start = 0
        for job in group:
            stop = start + len(job[2])
            job[3].set_result((lexicon[start:stop], None if dense is None else dense[start:stop]))
            start = stop


class SearchService:
    """A :class:`~lens.search.Searcher` for one index directory, kept at the directory's latest saved version.

    ``model``: the LENS model to encode queries with (default: the one the index records); ``encoder``: a
    ``HybridEncoder`` to use as it is (``Searcher.open``); ``quantize``: ``"int8"`` to encode them with int8 layers
    (``LensEncoder.apply_quantize``). ``max_queries`` and ``max_k`` bound one request. ``weights``: the query
    weights of a request that gives none (LEX,DENSE or LEX,DENSE,BM25; default: the index's). ``idf``: whether a
    request that does not say weighs the query lexicon by the index's inverse document frequencies (None: the
    index's default; ``HybridIndex.search``)."""

    def __init__(self, directory: str | os.PathLike | None, model: str | os.PathLike | None = None,
                 quantize: str | None = None, max_queries: int = 256, max_k: int = 1000, encoder=None,
                 weights=None, idf: bool | None = None, backends: Sequence[str] | None = None,
                 timeout: float = 60.0) -> None:
        """``backends`` (with ``directory`` None): a front end over the indexes other ``lens serve`` processes
        serve, searched as one (``index.remote``; ``timeout``: seconds one search may take, all its requests to
        them together)."""
        if (directory is None) == (backends is None):
            raise ValueError("serve one index directory, or be the front end of backends (their URLs): give one")
        self.directory = None if directory is None else Path(directory)
        self.backends = None if backends is None else list(backends)
        self.model, self.quantize, self.encoder = model, quantize, encoder
        self.max_queries, self.max_k = max_queries, max_k
        self.weights = None if weights is None else query_weights(weights, "weights")
        if idf is not None and not isinstance(idf, bool):
            raise ValueError(f"idf must be True, False or None (the index's default), got {idf!r}")
        self.idf = idf
        self._batcher = QueryBatcher(max_batch=max(32, max_queries))
        self._reload_lock = threading.Lock()
        self.reload_error: str | None = None
        if self.backends is not None:
            self._current = (Searcher.remote(self.backends, model, quantize, encoder=encoder, timeout=timeout), None)
        else:
            version = _version(self.directory)
            self._current = (Searcher.open(self.directory, self.model, quantize, encoder=encoder), version)
        self._current[0].index.query_idf(idf)  # an index that cannot weigh by idf is refused at the start

    @property
    def searcher(self) -> Searcher:
        """The searcher of the directory's latest version (loaded again when a save has changed it)."""
        return self.current()[0]

    def current(self) -> tuple[Searcher, tuple[int, int, int] | None]:
        """The searcher of the directory's latest version and that version, read together."""
        if self.directory is None:
            return self._current
        version = _version(self.directory)
        if version is not None and version != self._current[1] and self._reload_lock.acquire(blocking=False):
            try:  # one request loads the new version; the others go on with the old one meanwhile
                if version != self._current[1]:
                    self._reload(version)
            finally:
                self._reload_lock.release()
        return self._current

    def _reload(self, version: tuple[int, int, int]) -> None:
        old = self._current[0]
        try:
            searcher = Searcher.open(self.directory, self.model, self.quantize, reuse=old, encoder=self.encoder)
        except Exception as e:  # keep answering from the version loaded before, and say why on /health
            self.reload_error = f"{type(e).__name__}: {e}"
            logger.error("could not load %s again (%s); still serving the version loaded before", self.directory,
                         self.reload_error)
            self._current = (old, version)  # not retried until the directory changes again
            return
        self._current, self.reload_error = (searcher, version), None
        logger.info("loaded %s again: %d documents", self.directory, len(searcher.index))

    def health(self) -> dict[str, Any]:
        searcher = self.searcher
        out: dict[str, Any] = {"status": "ok", "documents": len(searcher.index)}
        if self.backends is not None:
            return self._backends_health(out)
        if self.reload_error:
            out["reload_error"] = self.reload_error
        if _version(self.directory) is None:
            out["warning"] = (f"{self.directory} holds no saved index now (removed, or a save is swapping it in): "
                              "answering from the version loaded before")
        return out

    def _backends_health(self, out: dict[str, Any]) -> dict[str, Any]:
        """A front end is healthy when every backend answers /health (503 otherwise, naming those that do not)."""
        down = [f"{url}: {error}" for url, error in backend_health(self.backends) if error is not None]
        if down:
            raise RequestError(f"{len(down)} of {len(self.backends)} backends are not healthy: " + "; ".join(down),
                               HTTPStatus.SERVICE_UNAVAILABLE)
        return {**out, "backends": len(self.backends)}

    def part(self) -> dict[str, Any]:
        """``GET /part``: this index described to a front end (``index.remote.describe_part``)."""
        searcher, version = self._part_current()
        return describe_part(searcher.index, version)

    def part_answer(self, operation: str, body: Any) -> dict[str, Any]:
        """``POST /part/<operation>``: a front end's request to this index as one of its parts."""
        searcher, version = self._part_current()
        try:
            return answer_part(searcher.index, version, operation, body)
        except StalePart as e:
            raise RequestError(str(e), HTTPStatus.CONFLICT) from None

    def _part_current(self) -> tuple[Searcher, tuple[int, int, int] | None]:
        if self.directory is None:
            raise RequestError("this server is itself a front end (lens serve --backends); its parts are "
                               f"{', '.join(self.backends)}", HTTPStatus.NOT_FOUND)
        return self.current()

    def info(self) -> dict[str, Any]:
        searcher = self.searcher
        index, record = searcher.index, searcher.record
        where = ({"directory": str(self.directory.resolve())} if self.directory is not None
                 else {"backends": list(self.backends)})
        return {**where, "documents": len(index), "index_type": index.index_type,
                "mode": index.mode, "lexicon_dim": index.lexicon_dim, "dense_dim": index.dense_dim,
                "weights": list(index.weights), "bm25": bool(getattr(index, "has_bm25", False)),
                # what a request without "weights" is searched with (lens serve --weights, else the searcher's)
                "search_weights": list(self.weights if self.weights is not None else searcher.default_weights),
                "idf": index.idf if self.idf is None else self.idf,
                "lens_model": record.lens_model, "dense": record.dense,
                # the mode in use ("auto" resolved to int8 or None), not the one asked for
                "quantize": getattr(getattr(searcher.encoder, "lens", None), "quantize", self.quantize),
                "text_normalization": record.text_normalization,
                # what a filter can name (a sample of the documents; a front end over backends: each backend's /info)
                "metadata_fields": index.metadata_fields() if hasattr(index, "metadata_fields") else None,
                "max_queries": self.max_queries, "max_k": self.max_k}

    def search(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The answer to a ``POST /search`` body (see the module docstring); bad input raises RequestError."""
        start = time.perf_counter()
        if not isinstance(body, Mapping):
            raise RequestError(f"the request body must be a JSON object, got {type(body).__name__}")
        unknown = set(body) - {"query", "queries", "k", "filter", "weights", "instruction", "idf", "collapse"}
        if unknown:
            raise RequestError(f"unknown field(s) {sorted(unknown)}; a search takes query or queries, k, filter, "
                               "weights, idf, collapse and instruction")
        if ("query" in body) == ("queries" in body):
            raise RequestError('give "query" (one text) or "queries" (a list of texts), not both or neither')
        queries = [body["query"]] if "query" in body else body["queries"]
        if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
            raise RequestError('"queries" must be a list of strings' if "queries" in body else
                               '"query" must be a string')
        if not 1 <= len(queries) <= self.max_queries:
            raise RequestError(f"a request holds 1 to {self.max_queries} queries, got {len(queries)}")
        k = _int(body.get("k", 10), '"k"', 1, self.max_k)
        instruction = body.get("instruction")
        if instruction is not None and not isinstance(instruction, str):
            raise RequestError(f'"instruction" must be a string or null, got {instruction!r}')
        weights = body.get("weights")
        if weights is not None:
            if not isinstance(weights, list) or not all(isinstance(w, (int, float)) and not isinstance(w, bool)
                                                        for w in weights):
                raise RequestError(f'"weights" must be a list of two or three numbers LEX,DENSE[,BM25] ([w_lex, '
                                   f'w_dense] or [w_lex, w_dense, w_bm25]), got {weights!r}')
            weights = query_weights(weights, '"weights"')
        else:
            weights = self.weights
        idf = body.get("idf", self.idf)
        if idf is not None and not isinstance(idf, bool):
            raise RequestError(f'"idf" must be true, false or null (the index\'s default), got {idf!r}')
        searcher = self.searcher
        results = searcher.search(queries, k=k, weights=weights, instruction=instruction, filter=body.get("filter"),
                                  batch_size=len(queries), idf=idf, collapse=body.get("collapse"),
                                  # a collapsed search looks at most at max_k hits (4 k if more) per query
                                  collapse_depth=max(self.max_k, 4 * k),
                                  encode=lambda texts, instr: self._batcher.encode(searcher.encoder, texts, instr))
        answer = {"results": [{"query": q, "hits": hit_records(h)} for q, h in zip(queries, results)],
                  "documents": len(searcher.index), "took_ms": round((time.perf_counter() - start) * 1000, 3)}
        flt = body.get("filter")
        if flt is not None and len(searcher.index) and not any(len(r.ids) for r in results):
            note = searcher.index.missing_filter_fields(flt)
            answer["warnings"] = [f"no document matches the filter {json.dumps(flt)}" + (f"; {note}" if note else "")]
        return answer


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"
    protocol_version = "HTTP/1.1"  # keep-alive: a client's next request reuses the connection
    # Seconds a connection may wait for a client's bytes: a body shorter than its Content-Length, or an idle
    # keep-alive connection, never holds a thread for good. A request must also arrive whole within it (a client
    # sending a byte now and then would reset a wait on each read): handle_one_request's deadline.
    timeout = READ_TIMEOUT_S
    head_only = False  # a HEAD request: the answer's status and headers, no body

    def handle_one_request(self) -> None:
        """One request, read within ``READ_TIMEOUT_S`` in all: past it the server's watchdog stops the connection
        reading (the request gets 408 if its headers came, or is closed), whatever the client still drips."""
        self.server.watch(self, time.monotonic() + READ_TIMEOUT_S)
        try:
            super().handle_one_request()
        finally:
            self._arrived()

    def _arrived(self) -> None:
        """The request is read: its answer may take as long as the search does."""
        self.server.unwatch(self)

    def stop_reading(self) -> None:
        """Called by the watchdog when the request has not arrived in time."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RD)  # a blocked read returns at once with what has come
        except OSError:
            pass

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's own refusals (an unknown method, a malformed request line or headers) as JSON,
        like every other error here."""
        self.close_connection = True
        try:
            status = HTTPStatus(code)
        except ValueError:
            status = HTTPStatus.BAD_REQUEST
        if status is HTTPStatus.NOT_IMPLEMENTED and self.command:
            message = f"{self.command} is not served; use GET or POST"
        if self.request_version == "HTTP/0.9":  # a request line it could not read: still answer with a status line
            self.request_version = "HTTP/1.0"
        try:
            self._send(status, {"error": message or status.phrase})
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:  # the access log goes to logging, not stderr
        logger.debug("%s %s", self.address_string(), format % args)

    def _send(self, status: HTTPStatus, payload: Mapping[str, Any]) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if not self.head_only:
            self.wfile.write(data)

    def _answer(self, work) -> None:
        try:
            self._send(HTTPStatus.OK, work())
        except RequestError as e:
            self._send(e.status, {"error": str(e)})
        except ValueError as e:  # the library's own checks of filters, weights and texts
            self._send(HTTPStatus.BAD_REQUEST, {"error": str(e)})
        except ConnectionError as e:  # a front end's backend is down or failed (lens serve --backends)
            self._send(HTTPStatus.BAD_GATEWAY, {"error": str(e)})
        except Exception:
            logger.exception("%s %s failed", self.command, self.path)
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "internal error; the server's log says more"})

    def do_GET(self) -> None:
        self._arrived()
        if self.headers.get("Content-Length", "0").strip() not in ("", "0") or self.headers.get("Transfer-Encoding"):
            self.close_connection = True  # a body on a GET is not read: it must not be taken for the next request
        url = urlsplit(self.path)
        service = self.server.service
        if url.path == "/health":
            self._answer(service.health)
        elif url.path == "/info":
            self._answer(service.info)
        elif url.path == "/search":
            self._answer(lambda: service.search(_query_string(url.query)))
        elif url.path == "/part":
            self._answer(service.part)
        else:
            self._send(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint {url.path!r}; try POST /search, "
                                                       "GET /search?q=..., /health or /info"})

    def do_HEAD(self) -> None:
        """GET's status and headers without its body (a load balancer's check of /health)."""
        self.head_only = True
        self.do_GET()

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        if path.startswith("/part/"):  # a front end's request (lens serve --backends; index.remote)
            self._answer(lambda: self.server.service.part_answer(path[len("/part/"):], self._body()))
            return
        if path != "/search":
            self.close_connection = True  # its body is not read: it must not be taken for the next request
            self._send(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint {self.path!r}; POST to /search"})
            return
        self._answer(lambda: self.server.service.search(self._body()))

    def _body(self) -> Any:
        given = self.headers.get("Content-Length")
        if given is None:
            self.close_connection = True  # a chunked body is not read
            raise RequestError("a POST needs a Content-Length header (a chunked body is not taken: send the JSON "
                               "whole)", HTTPStatus.LENGTH_REQUIRED)
        try:
            length = int(given)
        except ValueError:
            length = -1
        if length < 0:
            self.close_connection = True  # where its body ends is unknown
            raise RequestError(f"Content-Length must be a number of bytes, got {given!r}")
        if length > MAX_BODY:
            self.close_connection = True  # the body is not read
            raise RequestError(f"the request body is {length} bytes; at most {MAX_BODY} are taken",
                               HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
        received = bytearray()
        try:
            while len(received) < length:
                chunk = self.rfile.read1(length - len(received))
                if not chunk:
                    break
                received += chunk
        except (TimeoutError, OSError):
            pass
        self._arrived()
        raw = bytes(received)
        if len(raw) < length:
            self.close_connection = True
            raise RequestError(f"the request body ended after {len(raw)} of its {length} bytes (Content-Length) or "
                               f"did not arrive within {self.timeout:g} s", HTTPStatus.REQUEST_TIMEOUT)
        try:
            return json.loads(raw)
        except (ValueError, RecursionError) as e:  # RecursionError: arrays nested thousands deep
            raise RequestError(f"the request body is not JSON ({type(e).__name__}: {str(e)[:200]})") from None

    def _refuse(self) -> None:
        self.close_connection = True  # its body is not read
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, {"error": f"{self.command} is not served; use GET or POST"})

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _refuse


def _query_string(query: str) -> dict[str, Any]:
    params = parse_qs(query, keep_blank_values=True)
    unknown = set(params) - {"q", "k"}
    if unknown or "q" not in params:
        raise RequestError("GET /search takes q (the query) and k, e.g. /search?q=gene+therapy&k=5; POST a JSON "
                           "body for filters and weights")
    body: dict[str, Any] = {"queries": params["q"]}
    if "k" in params:
        try:
            body["k"] = int(params["k"][-1])
        except ValueError:
            raise RequestError(f"k must be an integer, got {params['k'][-1]!r}") from None
    return body


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], service: SearchService | None) -> None:
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._reading: dict[_Handler, float] = {}  # requests being read, and when each must have arrived
        self._watch_lock = threading.Lock()
        self._closed = threading.Event()
        super().__init__(address, _Handler)  # binds (a port in use: server_close, then the error)
        self.service = service
        threading.Thread(target=self._watchdog, name="lens-serve-watchdog", daemon=True).start()

    def watch(self, handler: "_Handler", deadline: float) -> None:
        with self._watch_lock:
            self._reading[handler] = deadline

    def unwatch(self, handler: "_Handler") -> None:
        with self._watch_lock:
            self._reading.pop(handler, None)

    def _watchdog(self) -> None:
        """Every quarter second, stop reading the requests past their deadline (one thread for all of them)."""
        while not self._closed.wait(0.25):
            now = time.monotonic()
            with self._watch_lock:
                late = [h for h, deadline in self._reading.items() if deadline <= now]
                for h in late:
                    del self._reading[h]
            for h in late:
                h.stop_reading()

    def server_close(self) -> None:
        self._closed.set()
        super().server_close()

    def process_request(self, request, client_address) -> None:
        """A thread for the connection, or, past ``MAX_CONNECTIONS`` at once, a 503 and the connection closed."""
        if not self._slots.acquire(blocking=False):
            logger.warning("%d connections already open: refusing %s", MAX_CONNECTIONS, client_address[0])
            body = json.dumps({"error": f"the server holds {MAX_CONNECTIONS} connections already; try again"}).encode()
            try:
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                                b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        release = _ReleaseOnce(self._slots)
        thread = threading.Thread(target=self._connection, args=(request, client_address, release), daemon=True)
        try:
            thread.start()
        except BaseException:  # no thread (it frees nothing), or Ctrl-C while start() waited for one that runs
            release()  # and frees its slot itself: once in all, so the Ctrl-C is not turned into a ValueError
            raise

    def _connection(self, request, client_address, release: "_ReleaseOnce") -> None:
        """ThreadingMixIn's thread (the request handled, an error reported, the socket closed), then the slot freed."""
        try:
            self.process_request_thread(request, client_address)
        finally:
            release()


class _ReleaseOnce:
    """A connection's slot of the server's semaphore, released on the first call only."""

    def __init__(self, semaphore: threading.BoundedSemaphore) -> None:
        self._semaphore, self._lock, self._done = semaphore, threading.Lock(), False

    def __call__(self) -> None:
        with self._lock:
            if not self._done:
                self._done = True
                self._semaphore.release()


def make_server(service: SearchService | None, host: str = "127.0.0.1", port: int = 8080) -> ThreadingHTTPServer:
    """An HTTP server answering for ``service`` (``port`` 0: any free port; ``server.server_address`` says which).
    Run it with ``serve_forever()``; ``shutdown()`` from another thread stops it. ``service`` None binds the port
    now and takes the service later (``server.service = ...``, before ``serve_forever``)."""
    return _Server((host, port), service)
