"""Indexes held on separate machines, searched as one: each machine serves its index (``lens serve DIR``) and a front
end (``lens serve --backends URL,...``, or :class:`RemoteIndex` in Python) searches them all.

Why a protocol of its own. Each part scoring with its own statistics would give scores that do not compare: a
query's lexicon is weighed by the clusters' inverse document frequencies and BM25 by its terms' statistics, both of
the whole corpus. So the front end adds the parts' statistics up first, as :class:`~index.shards.ShardedIndex` does
for the shards of one directory, and every part scores its documents with them; the parts' top-``k`` then merge
(:func:`~index.shards.merge_hits`) into the top-``k`` of one index holding every document, scores included, for
exact index types.

The exchange (JSON over HTTP, under ``/part`` of ``lens serve``; :data:`PROTOCOL` versions it). Each POST holds
``"version"``, ``"queries"`` (one object per query) and what the queries share:

- ``GET /part``: the part's description (:func:`describe_part`): its settings (which must agree across parts),
  documents, default weights, cluster document frequencies, corpus casing table and saved version.
- ``POST /part/bm25-stats``, a query ``{"terms"}``: each query's BM25 statistics in this part.
- ``POST /part/bm25-maxima``, a query ``{"terms", "stats"}`` and a ``"filter"``: each query's best BM25 score
  among the part's documents the filter allows, scored with the whole index's statistics.
- ``POST /part/search``, a query ``{"lexicon", "dense", "text", "stats", "max"}`` (vectors as little-endian bytes
  in base64, exact; the lexicon's non-zeros only, already weighed by the whole index's idf) and ``"k"``,
  ``"weights"``, ``"filter"``, ``"depth"``: the part's top-``k`` (``HybridIndex.search_part``).

A front end cuts its requests into groups of queries that fit a part's body limit (:data:`MAX_BODY`).
Every request names the version of the part it was described at; a part that has been saved again since answers
:class:`StalePart` (HTTP 409), and the front end describes the parts again and searches once more, so one search
never mixes statistics of two versions.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from lens.bm25 import BM25Stats

from .bm25_fusion import split_weights
from .bm25_part import BM25Part
from .metadata import check_filter
from .shards import SHARED_SETTINGS, merge_hits
from .store import SearchResult, idf_weights
from .vectors import as_matrix, mean_weights, prune_top_m

__all__ = ["MAX_BODY", "PROTOCOL", "RemoteIndex", "StalePart", "answer_part", "backend_health", "describe_part"]

logger = logging.getLogger(__name__)

PROTOCOL = 1
MAX_BODY = 1 << 20  # bytes of a request body a part takes (lens.serve's limit); a front end's requests stay under
OPERATIONS = ("bm25-stats", "bm25-maxima", "search")
_INT64_MAX = (1 << 63) - 1
CALLS_PER_BACKEND = 16  # a front end's requests in flight to one backend at once (its searches run side by side)


class StalePart(RuntimeError):
    """A part was asked about a version of its index other than the one it serves now."""


# ------------------------------------------------------------------------------------------------ the part's side
def describe_part(index: Any, version: Sequence[int] | None) -> dict[str, Any]:
    """What a front end needs of one part (a ``HybridIndex`` or ``ShardedIndex``) before searching it."""
    df = index.document_frequencies() if index.lexicon_dim else None
    casing = index.casing_table
    return {
        "protocol": PROTOCOL, "version": None if version is None else list(version), "documents": len(index),
        "settings": {key: _setting(index, key) for key in SHARED_SETTINGS},
        "weights": [float(w) for w in index.weights], "idf": bool(index.idf), "bm25": bool(index.has_bm25),
        "df": None if df is None else np.asarray(df[0]).astype(np.int64).tolist(),
        "df_documents": None if df is None else int(df[1]),
        "casing": None if casing is None else base64.b64encode(casing.to_bytes()).decode("ascii"),
        "info": index.info,
    }


def answer_part(index: Any, version: Sequence[int] | None, operation: str, body: Any) -> dict[str, Any]:
    """The answer of a part (``index`` at ``version``) to a front end's ``POST /part/<operation>``; bad input
    raises ValueError naming the field, a request for another version :class:`StalePart`."""
    if operation not in OPERATIONS:
        raise ValueError(f"no part operation {operation!r}; the operations are {', '.join(OPERATIONS)}")
    if not isinstance(body, Mapping):
        raise ValueError(f"a part request is a JSON object, got {type(body).__name__}")
    asked = body.get("version")
    if (None if version is None else list(version)) != asked:
        raise StalePart(f"this part serves version {version} of its index, not {asked}: describe it again "
                        "(GET /part)")
    queries = body.get("queries")
    if not isinstance(queries, list) or not queries or not all(isinstance(q, Mapping) for q in queries):
        raise ValueError('"queries" must be a non-empty list of objects, one per query')
    flt = _read_filter(body.get("filter"))
    if operation == "bm25-stats":
        return {"stats": [_stats_record(s) for s in index.bm25_stats([_terms(q.get("terms")) for q in queries])]}
    if operation == "bm25-maxima":
        terms = [_terms(q.get("terms")) for q in queries]
        stats = [_read_stats(q.get("stats")) for q in queries]
        return {"maxima": [float(m) for m in index.bm25_maxima(terms, stats, flt)]}
    lexicon = _read_rows([q.get("lexicon") for q in queries], index.lexicon_dim, "lexicon")
    dense = _read_rows([q.get("dense") for q in queries], index.dense_dim, "dense")
    texts = [q.get("text") for q in queries]
    if all(t is None for t in texts):
        texts = None
    elif not all(isinstance(t, str) for t in texts):
        raise ValueError('each query\'s "text" must be a string (or every one null)')
    bm25 = [q.get("stats") is not None for q in queries]
    stats = maxima = None
    if any(bm25):
        if not all(bm25):
            raise ValueError('give every query its "stats" and "max", or none')
        stats = [_read_stats(q.get("stats")) for q in queries]
        maxima = [q.get("max") for q in queries]
        if not all(_number(m) for m in maxima):
            raise ValueError('each query\'s "max" (its best BM25 score in the whole index) must be a number')
    weights = body.get("weights")
    if weights is None:
        weights = [q.get("weights") for q in queries]
    depth = body.get("depth")
    if depth is not None and not (isinstance(depth, int) and not isinstance(depth, bool) and depth >= 1):
        raise ValueError(f'"depth" must be a positive integer or null, got {depth!r}')
    results = index.search_part(lexicon, dense, body.get("k"), _read_weights(weights), flt, texts,
                                depth, None, stats, maxima)
    return {"results": [{"ids": r.ids, "scores": _pack(np.asarray(r.scores, dtype=np.float32)),
                         "metadata": r.metadata} for r in results]}


def _read_filter(value: Any) -> Mapping[str, Any] | None:
    check_filter(value)
    return value


def _filter_record(filter: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A checked filter as JSON (a set or tuple of values as a list)."""
    if check_filter(filter) is None:
        return None
    return {field: list(v) if isinstance(v, (list, tuple, set, frozenset)) else v for field, v in filter.items()}


def _setting(index: Any, key: str) -> Any:
    value = getattr(index, key)
    return None if value is None else json.loads(json.dumps(value))


def _number(value: Any) -> bool:
    """A finite JSON number (NaN and infinities, which Python's JSON reads, are not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _terms(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(w, str) for w in value):
        raise ValueError('each query\'s "terms" must be a list of strings (its BM25 terms)')
    return value


def _stats_record(stats: BM25Stats) -> dict[str, Any]:
    return {"documents": int(stats.documents), "length": int(stats.length),
            "df": np.asarray(stats.df, dtype=np.int64).tolist()}


def _read_stats(s: Any) -> BM25Stats:
    def count(v: Any, most: int = _INT64_MAX) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= most

    if not (isinstance(s, Mapping) and count(s.get("documents")) and count(s.get("length"))
            and isinstance(s.get("df"), list) and all(count(d, s["documents"]) for d in s["df"])):
        raise ValueError('BM25 statistics are {"documents": int, "length": int, "df": [int, ...]}, counts from 0 '
                         '(each df at most "documents")')
    return BM25Stats(s["documents"], s["length"], np.asarray(s["df"], dtype=np.int64))


def _read_weights(value: Any) -> Any:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        arr = np.full(3, np.nan)  # refused below
    if arr.ndim not in (1, 2) or not np.isfinite(arr).all():
        raise ValueError(f'"weights" must be two or three numbers, or a pair for each query, got {value!r}')
    return tuple(arr.tolist()) if arr.ndim == 1 else arr


def _pack(values: np.ndarray) -> str:
    """An array's bytes (little-endian) as base64: exact, and a quarter of the size of JSON numbers."""
    return base64.b64encode(np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("<")).tobytes()).decode()


def _unpack(data: Any, dtype: str, what: str) -> np.ndarray:
    if not isinstance(data, str):
        raise ValueError(f"{what} must be base64 text")
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError:
        raise ValueError(f"{what} is not base64") from None
    dt = np.dtype(dtype).newbyteorder("<")
    if len(raw) % dt.itemsize:
        raise ValueError(f"{what} holds {len(raw)} bytes, not a whole number of {dtype} values")
    return np.frombuffer(raw, dtype=dt).astype(np.dtype(dtype))


def _row_record(row: np.ndarray | None, sparse: bool) -> dict[str, Any] | None:
    """One query's vector as JSON: the lexicon's non-zeros (indices, values), a dense row whole; packed
    (:func:`_pack`) in its own dtype, so the part searches with exactly the values given here."""
    if row is None:
        return None
    if not sparse:
        return {"dtype": str(row.dtype), "values": _pack(row)}
    nz = np.flatnonzero(row)
    return {"dtype": str(row.dtype), "dim": int(row.shape[0]), "indices": _pack(nz.astype(np.int32)),
            "values": _pack(row[nz])}


def _read_rows(records: list[Any], dim: int | None, name: str) -> np.ndarray | None:
    """The queries' ``name`` vectors from their records (all null: None)."""
    if all(r is None for r in records):
        return None
    if not dim:
        raise ValueError(f"this index has no {name} part, but the request gives {name} vectors")
    dtypes = {r.get("dtype") if isinstance(r, Mapping) else None for r in records}
    if len(dtypes) != 1 or next(iter(dtypes)) not in ("float32", "float64"):
        raise ValueError(f'every query\'s "{name}" must be {{"dtype": "float32" or "float64", ...}} of one dtype')
    dtype = next(iter(dtypes))
    out = np.zeros((len(records), dim), dtype=dtype)
    for i, r in enumerate(records):
        values = _unpack(r.get("values"), dtype, f"{name} values")
        if "indices" not in r:
            if values.shape != (dim,):
                raise ValueError(f'a query\'s "{name}" holds {values.size} values; this index\'s {name} part has {dim}')
            out[i] = values
            continue
        if r.get("dim") != dim:
            raise ValueError(f'a query\'s "{name}" has {r.get("dim")} dimensions; this index\'s {name} part has {dim}')
        idx = _unpack(r["indices"], "int32", f"{name} indices")
        if idx.shape != values.shape or (idx.size and (idx.min() < 0 or idx.max() >= dim)):
            raise ValueError(f'"{name}" indices must be one per value, within 0..{dim - 1}')
        out[i, idx] = values
    return out


# ------------------------------------------------------------------------------------------------ the front end
class _Part:
    """One machine's index behind ``lens serve``: its description and requests."""

    def __init__(self, url: str, timeout: float) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"a backend is an http:// or https:// URL of `lens serve DIR`, got {url!r}")
        self.url, self.timeout = url.rstrip("/"), timeout

    def describe(self, deadline: float | None = None) -> dict[str, Any]:
        desc = self._request("GET", "/part", deadline=deadline)
        if desc.get("protocol") != PROTOCOL:
            raise ValueError(f"{self.url} speaks part protocol {desc.get('protocol')!r}, this front end "
                             f"{PROTOCOL}: run the same LENS version on every machine")
        return desc

    def call(self, operation: str, body: dict[str, Any], version: Any, deadline: float | None = None
             ) -> dict[str, Any]:
        """``POST /part/OPERATION`` for the part's ``version`` (the one the search started from: a part saved again
        since answers 409, so no search mixes two versions' statistics)."""
        return self._request("POST", f"/part/{operation}", {"version": version, **body}, deadline=deadline)

    def late(self) -> ConnectionError:
        return ConnectionError(f"backend {self.url} did not answer within {self.timeout:g} s (the front end's "
                               "--timeout): is it overloaded or stuck?")

    def _request(self, method: str, path: str, body: Any = None, deadline: float | None = None) -> dict[str, Any]:
        """The JSON answer; ``deadline`` (``time.monotonic()``): no later (each socket wait gets what is left)."""
        timeout = self.timeout if deadline is None else deadline - time.monotonic()
        if timeout <= 0:
            raise self.late()
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data is not None else {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            try:
                message = json.loads(e.read()).get("error", "")
            except ValueError:
                message = ""
            if e.code == 409:
                raise StalePart(f"{self.url}: {message}") from None
            raise ConnectionError(f"backend {self.url} answered {e.code} to {method} {path}: {message or e.reason}") \
                from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            if isinstance(reason, TimeoutError):
                raise self.late() from None
            raise ConnectionError(f"backend {self.url} cannot be reached ({reason}): is `lens serve` running there, "
                                  "and the URL right?") from None
        try:
            answer = json.loads(raw)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise ConnectionError(f"backend {self.url} answered {method} {path} with something other than a JSON "
                                  "object: is it `lens serve`?")
        return answer


class RemoteIndex:
    """Indexes served apart (``lens serve DIR`` on each machine), searched as one index holding all their
    documents: the interface of :class:`~index.shards.ShardedIndex` for searching and describing.

    ``urls``: each part's ``http://host:port``; ``timeout``: seconds a search may take, all its requests to the parts
    together (a part that has not answered by then fails it, naming the part). The parts must
    agree in their settings (``index.shards.SHARED_SETTINGS``: encoders' fingerprint, dimensions, index type,
    ``top_m``); their default weights are averaged by documents, as a merge does. ``on_refresh`` is called after
    the parts are described again (a part saved again since), e.g. to take their corpus casing table anew."""

    def __init__(self, urls: Sequence[str], timeout: float = 60.0,
                 on_refresh: Callable[[], None] | None = None) -> None:
        urls = [u for u in urls if u]
        if not urls:
            raise ValueError("a remote index needs at least one backend URL")
        if len(set(u.rstrip("/") for u in urls)) != len(urls):
            raise ValueError(f"a backend is named twice in {list(urls)}: its documents would count twice")
        self._parts = [_Part(u, timeout) for u in urls]
        self.timeout = timeout
        # one pool for every search: CALLS_PER_BACKEND of them side by side, each part's call on its own thread
        self._pool = ThreadPoolExecutor(max_workers=min(512, CALLS_PER_BACKEND * len(self._parts)),
                                        thread_name_prefix="lens-part")
        self.on_refresh = on_refresh
        self._first_settings: dict[str, Any] | None = None
        self._refresh_lock = threading.Lock()
        self.refresh()

    def refresh(self) -> None:
        """Describe every part again and check that they still agree (one refresh at a time: the requests that
        found a part stale together wait for it)."""
        with self._refresh_lock:
            self._refresh()

    def _refresh(self) -> None:
        descs = self._each(_Part.describe, self._deadline())
        settings = [d["settings"] for d in descs]
        reference = self._first_settings or settings[0]
        for part, s in zip(self._parts, settings):
            diffs = [key for key in SHARED_SETTINGS if s.get(key) != reference.get(key)]
            if diffs:
                raise ValueError(f"backend {part.url} differs from {self._parts[0].url} in {', '.join(diffs)}; the "
                                 "indexes searched as one must be built the same way (the same models, index type "
                                 "and top_m)")
        self._first_settings = reference
        self._descs = descs
        self._weights = mean_weights([d["weights"] for d in descs], [d["documents"] for d in descs])
        casing = None
        for d in descs:
            if d["casing"] is not None:
                from lens.casing import read_casing_table

                table = read_casing_table(base64.b64decode(d["casing"]), "a backend's casing table")
                casing = table if casing is None else casing.extended_by(table)
        self._casing = casing
        if self.on_refresh is not None:
            self.on_refresh()

    def _deadline(self) -> float:
        return time.monotonic() + self.timeout

    def _each(self, work: Callable[[_Part, float], Any], deadline: float) -> list[Any]:
        """``work(part, deadline)`` on every part at once, their answers in order; the first failure is raised as
        soon as it happens, and a part that has not answered by ``deadline`` fails the whole call then."""
        futures = [self._pool.submit(work, part, deadline) for part in self._parts]
        done, pending = wait(futures, timeout=max(0.0, deadline - time.monotonic()) + 0.5,
                             return_when=FIRST_EXCEPTION)
        for future in futures:
            if future in done and future.exception() is not None:
                for other in pending:
                    other.cancel()
                raise future.exception()
        if pending:
            for other in pending:
                other.cancel()
            raise next(part for part, f in zip(self._parts, futures) if f in pending).late()
        return [future.result() for future in futures]

    def close(self) -> None:
        self._pool.shutdown(wait=False)

    # settings the parts share (checked), read from the first
    def _setting(self, key: str) -> Any:
        return self._descs[0]["settings"][key]

    @property
    def backends(self) -> list[str]:
        return [p.url for p in self._parts]

    @property
    def mode(self) -> str:
        return self._setting("mode")

    @property
    def lexicon_dim(self) -> int | None:
        return self._setting("lexicon_dim")

    @property
    def dense_dim(self) -> int | None:
        return self._setting("dense_dim")

    @property
    def index_type(self) -> str:
        return self._setting("index_type")

    @property
    def top_m(self) -> int | None:
        return self._setting("top_m")

    @property
    def fingerprint(self) -> dict[str, Any] | None:
        return self._setting("fingerprint")

    @property
    def info(self) -> dict[str, Any] | None:
        info = self._descs[0]["info"]
        return dict(info) if info is not None else None

    @property
    def weights(self) -> tuple[float, float]:
        return self._weights

    @property
    def idf(self) -> bool:
        return all(d["idf"] for d in self._descs)

    @property
    def has_bm25(self) -> bool:
        return all(d["bm25"] for d in self._descs)

    @property
    def casing_table(self):
        return self._casing

    def __len__(self) -> int:
        return sum(d["documents"] for d in self._descs)

    def __repr__(self) -> str:
        return f"RemoteIndex(backends={self.backends}, documents={len(self)}, weights={self.weights})"

    def missing_filter_fields(self, filter: Mapping[str, Any]) -> str | None:
        """Not known here (each part holds its own documents): a filter that matches nothing is warned of plainly."""
        return None

    def document_frequencies(self) -> tuple[np.ndarray, int] | None:
        """Every part's cluster document frequencies summed, and their documents; None when a part keeps none."""
        return _frequencies(self._descs)

    def query_idf(self, idf: bool | None) -> np.ndarray | None:
        """``HybridIndex.query_idf`` over every part's documents together."""
        return idf_weights(self, idf, self.document_frequencies())

    def search(self, lexicon: Any = None, dense: Any = None, k: int = 10, weights: Any = None,
               query_top_m: int | None = None, filter: Mapping[str, Any] | None = None,
               texts: Sequence[str] | None = None, depth: int | None = None,
               idf: bool | None = None) -> list[SearchResult]:
        """``ShardedIndex.search`` over the parts: the same hits and scores as one index of all their documents
        (exact types). A part saved again meanwhile makes the search start over once, with every part described
        anew."""
        try:
            return self._search(lexicon, dense, k, weights, query_top_m, filter, texts, depth, idf)
        except StalePart as e:
            logger.info("%s; describing the parts again", e)
        try:
            self.refresh()
        except ValueError as e:  # a part rebuilt otherwise: a backend's fault here, not the request's
            raise ConnectionError(str(e)) from None
        try:
            return self._search(lexicon, dense, k, weights, query_top_m, filter, texts, depth, idf)
        except StalePart as e:
            raise ConnectionError(f"a part was saved again twice during one search ({e}); search again") from None

    def _search(self, lexicon, dense, k, weights, query_top_m, filter, texts, depth, idf) -> list[SearchResult]:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        deadline = self._deadline()
        with self._refresh_lock:  # one description of the parts for the whole search, whatever refreshes meanwhile
            descs, default_weights = self._descs, self._weights
        versions = {part.url: d.get("version") for part, d in zip(self._parts, descs)}
        filter = _filter_record(filter)
        weights = default_weights if weights is None else weights
        w_bm25 = split_weights(weights)[1]
        weighing = idf_weights(self, idf, _frequencies(descs))
        if lexicon is not None:
            lexicon = as_matrix(lexicon, "lexicon")
            if weighing is not None:
                lexicon = lexicon * weighing  # as HybridIndex.search_selection weighs it, before pruning
            if query_top_m is not None:
                lexicon = prune_top_m(lexicon, query_top_m)
        dense = None if dense is None else as_matrix(dense, "dense")
        given = lexicon if lexicon is not None else dense
        if given is None or given.shape[0] == 0:
            raise ValueError("give lexicon and/or dense vectors")
        n = given.shape[0]
        if texts is not None and (isinstance(texts, str) or len(texts) != n):
            raise ValueError(f"texts must hold one text per query ({n})")
        w = np.asarray(weights, dtype=np.float64)
        queries: list[dict[str, Any]] = [
            {"lexicon": _row_record(None if lexicon is None else lexicon[i], sparse=True),
             "dense": _row_record(None if dense is None else dense[i], sparse=False),
             "text": None if texts is None else texts[i], **({"weights": w[i].tolist()} if w.ndim == 2 else {})}
            for i in range(n)]
        common: dict[str, Any] = {"k": int(k), "filter": filter, "depth": depth,
                                  "weights": w.tolist() if w.ndim == 1 else None}
        if w_bm25 > 0:
            if not all(d["bm25"] for d in descs):
                raise ValueError("a backend keeps no BM25 part, so a BM25 weight > 0 cannot be used: build every "
                                 "part with a BM25 part (`lens index build` without --no-bm25), or give two weights "
                                 "LEX,DENSE")
            if texts is None:
                raise ValueError("a BM25 weight needs each query's text: give texts= with one text per query")
            terms = [{"terms": t} for t in BM25Part.query_terms(list(texts))]
            each = self._each(lambda p, t: self._grouped(p, "bm25-stats", terms, {"filter": None}, "stats",
                                                         versions, t), deadline)
            stats = [_stats_record(BM25Stats.total([_read_stats(e[q]) for e in each])) for q in range(n)]
            ask = [{**t, "stats": st} for t, st in zip(terms, stats)]
            maxima = self._each(lambda p, t: self._grouped(p, "bm25-maxima", ask, {"filter": filter}, "maxima",
                                                           versions, t), deadline)
            for q, record in enumerate(queries):
                record["stats"], record["max"] = stats[q], max(m[q] for m in maxima)
        answers = self._each(lambda p, t: self._grouped(p, "search", queries, common, "results", versions, t),
                             deadline)
        per_part = [[SearchResult(list(r["ids"]), _unpack(r["scores"], "float32", "scores"), list(r["metadata"]))
                     for r in answer] for answer in answers]
        return [merge_hits([hits[q] for hits in per_part], int(k)) for q in range(n)]

    def _grouped(self, part: _Part, operation: str, queries: list[dict[str, Any]], common: dict[str, Any],
                 key: str, versions: Mapping[str, Any], deadline: float) -> list[Any]:
        """``part``'s answers (``key``) to ``queries``, asked of the part's version in ``versions`` (by URL) in
        groups that keep each request under a part's body limit (``MAX_BODY``)."""
        version = versions[part.url]
        out: list[Any] = []
        for group in _groups(queries, MAX_BODY // 2 - len(json.dumps(common))):
            answer = part.call(operation, {**common, "queries": group}, version, deadline).get(key)
            if not isinstance(answer, list) or len(answer) != len(group):
                raise ConnectionError(f"backend {part.url} answered {operation} without one {key!r} entry per query: "
                                      "is it the same LENS version?")
            out += answer
        return out


def _frequencies(descs: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, int] | None:
    """The parts' cluster document frequencies summed, and their documents; None when a part keeps none."""
    if any(d["df"] is None for d in descs):
        return None
    return (np.sum([np.asarray(d["df"], dtype=np.int64) for d in descs], axis=0),
            sum(d["df_documents"] for d in descs))


def _groups(queries: list[dict[str, Any]], limit: int) -> list[list[dict[str, Any]]]:
    """``queries`` in order, cut into groups of at most ``limit`` bytes of JSON each (a query alone may exceed it)."""
    groups: list[list[dict[str, Any]]] = [[]]
    size = 0
    for q in queries:
        n = len(json.dumps(q)) + 2
        if groups[-1] and size + n > limit:
            groups.append([])
            size = 0
        groups[-1].append(q)
        size += n
    return groups


def backend_health(urls: Sequence[str], timeout: float = 5.0) -> list[tuple[str, str | None]]:
    """Each backend's ``GET /health``: (url, None) when it answers ok, else (url, what went wrong)."""
    def check(url: str) -> tuple[str, str | None]:
        try:
            answer = _Part(url, timeout)._request("GET", "/health")
        except (ConnectionError, ValueError) as e:
            return url, str(e)
        return url, None if answer.get("status") == "ok" else json.dumps(answer)

    with ThreadPoolExecutor(max_workers=min(32, max(1, len(urls)))) as pool:
        return list(pool.map(check, urls))
