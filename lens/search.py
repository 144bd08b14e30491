"""Searching a saved hybrid index: open it with the encoders it was built with, encode queries, search.

The query side here and the document side in ``lens.indexing`` both go through ``lens.hybrid.HybridEncoder``,
so a query vector is always made the way the index's documents were.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from index import HybridIndex, SearchResult, load_index
from index.manifest import check_fingerprint
from index.vectors import check_positive_int
from lens.hybrid import HybridEncoder
from lens.index_record import EncoderRecord, model_reference

logger = logging.getLogger(__name__)

__all__ = ["Searcher", "check_queries", "hit_records", "model_reference", "use_corpus_casing"]


def check_queries(queries: Sequence[str], ids: Sequence[str] | None = None) -> list[str]:
    """The queries as a list (a string is one query); a blank one, a dict, a set or invalid Unicode is an error
    (before any model is loaded, when called first), naming the query's id when ``ids`` (a file's) are given."""
    from lens.encoder import check_texts

    queries = check_texts(queries, "queries")
    for i, q in enumerate(queries):
        if not isinstance(q, str) or not q.strip():
            which = f"query {ids[i]!r} is empty" if ids is not None else "a query is empty"
            raise ValueError(f"{which}: give some words to search for")
    return queries


def hit_records(result: SearchResult) -> list[dict[str, Any]]:
    """One query's hits as JSON-ready records, best first: ``{"rank", "id", "score", "metadata"}`` (the one shape
    of ``lens search --json`` and ``lens serve``; the metadata stays apart, so a field named ``score`` or ``id``
    cannot hide the hit's own)."""
    return [{"rank": rank, "id": doc_id, "score": float(score), "metadata": meta}
            for rank, (doc_id, score, meta) in enumerate(zip(result.ids, result.scores, result.metadata), 1)]


COLLAPSE_FETCH = 4  # hits first fetched per group wanted when collapsing; multiplied by 4 until k groups are found
COLLAPSE_DEPTH = 10_000  # the most hits a collapsed search looks at per query, by default (or 4 x k if more)


def field_value(meta: Mapping[str, Any] | None, field: str) -> Any:
    """The value of ``field`` (dotted: nested) in a hit's metadata; None when it has none."""
    value: Any = meta
    for name in field.split("."):
        value = value.get(name) if isinstance(value, Mapping) else None
    return value


def group_key(doc_id: str, meta: Mapping[str, Any] | None, field: str) -> tuple:
    """The group of a hit when collapsing on ``field`` (dotted: nested): its value compared as the metadata filter
    compares values, by JSON type (``true`` is not ``1``, ``1`` is ``1.0``, ``7`` is not ``"7"``; lists and objects
    by their JSON); a hit without the field is a group of its own."""
    from index.metadata import value_key

    value = field_value(meta, field)
    if value is None:
        return ("id", doc_id)
    if isinstance(value, (str, int, float)):  # bool too
        return value_key(value)
    return ("json", json.dumps(value, sort_keys=True))


def collapse_result(result: SearchResult, field: str, k: int) -> SearchResult:
    """The first (best) hit of each group of ``result`` (``group_key``), at most ``k`` groups, best first: a
    passage index's hits as documents ranked by their best passage (MaxP), or one hit per source."""
    seen, keep = set(), []
    for i, (doc_id, meta) in enumerate(zip(result.ids, result.metadata)):
        key = group_key(doc_id, meta, field)
        if key not in seen:
            seen.add(key)
            keep.append(i)
            if len(keep) == k:
                break
    return SearchResult([result.ids[i] for i in keep], result.scores[keep], [result.metadata[i] for i in keep])


def collapsed_run(result: SearchResult, field: str) -> list[tuple[str, float]]:
    """A collapsed query's hits as TREC run rows: each hit's ``field`` value as the document id (a passage's
    document), its own id where it has none; an id met again keeps its first, best score (the number 7 and the text
    "7" are one id in a run). A value that cannot be a run's document id is named."""
    rows, seen = [], set()
    for doc_id, score, meta in zip(result.ids, result.scores, result.metadata):
        value = field_value(meta, field)
        run_id = doc_id if value is None else value if isinstance(value, str) else json.dumps(value)
        if not run_id or any(c.isspace() for c in run_id):
            raise ValueError(f"--run writes each hit's {field!r} value as its document id, and {run_id!r} (hit "
                             f"{doc_id!r}) is not one (empty or holding whitespace): collapse on an id field such as "
                             "document, or search without --run")
        if run_id not in seen:
            seen.add(run_id)
            rows.append((run_id, float(score)))
    return rows


def check_collapse(field: Any) -> str | None:
    """A ``collapse`` argument checked: None, or a metadata field name (dotted: nested)."""
    if field is not None and (not isinstance(field, str) or not field or "" in field.split(".")):
        raise ValueError(f"collapse must be a metadata field name such as 'document' (dotted: nested), got {field!r}")
    return field


def use_corpus_casing(encoder: HybridEncoder, index: Any) -> None:
    """Let ``encoder`` truecase queries with ``index``'s corpus casing table over the packaged one
    (``lens.casing.corpus_casing_table``), when the index keeps one and the model's text rule truecases; else with
    the packaged table alone (an encoder reused from another index drops that index's table)."""
    lens = getattr(encoder, "lens", None)
    if lens is None:
        return
    from lens.inputs import CASING_RULES

    own = getattr(index, "casing_table", None)
    if own is not None and lens.config.text_normalization in CASING_RULES:
        from lens.casing import corpus_casing_table

        lens.casing_table = corpus_casing_table(own)
    else:
        lens.casing_table = None


class Searcher:
    """A saved index and the encoders recorded in its manifest (``lens.index_record.EncoderRecord``)."""

    def __init__(self, index: HybridIndex, encoder: HybridEncoder, record: EncoderRecord | None = None):
        self.index, self.encoder = index, encoder
        self.record = record if record is not None else EncoderRecord.of_index(index)

    @classmethod
    def open(cls, directory: str | os.PathLike, model: str | os.PathLike | None = None,
             quantize: str | None = None, reuse: "Searcher | None" = None,
             encoder: HybridEncoder | None = None, read_only: bool = True) -> "Searcher":
        """Load the index at ``directory`` with the encoders its manifest records, refusing other encoders.

        The index is loaded first, so the encoders named in its manifest and its vectors come from one version
        even if another process saves over it meanwhile. ``model``: another LENS model directory (one that has
        moved since the build); ``encoder``: a ``HybridEncoder`` to use as it is (needed for an index built with an
        encoder made in memory, which names no model to load). Either must still match the index's fingerprint and
        text rule. ``quantize``: encode queries with int8 layers (``LensEncoder.apply_quantize``; to encoders
        loaded here). ``reuse``: a searcher of an earlier version whose encoders (already quantized as asked) are
        kept when the index names the same ones (or ``model`` / ``encoder`` is given), instead of loading them.
        ``read_only`` (default): load only what searching needs and refuse changes (``HybridIndex.load``; the idf
        part's counts, not every document's clusters); False for a caller that changes the index
        (``lens.updating``)."""
        index = load_index(directory, read_only=read_only)
        record = EncoderRecord.of_index(index)
        if encoder is None and reuse is not None and (model is not None or record.same_encoders(reuse.record)):
            encoder = reuse.encoder
        return cls._matched(index, record, encoder, Path(directory), model, quantize)

    @classmethod
    def _matched(cls, index: Any, record: EncoderRecord, encoder: HybridEncoder | None, where: Any,
                 model: str | os.PathLike | None, quantize: str | None) -> "Searcher":
        """A searcher of ``index`` with ``encoder`` (None: the encoders ``record`` names, or ``model``, loaded
        and quantized as asked), refused unless it matches the index's fingerprint and text rule."""
        from lens.encoder import LATER_FINGERPRINT_KEYS

        if encoder is None:
            encoder = record.load(where, model)
            if quantize:
                encoder.lens.apply_quantize(quantize)
        check_fingerprint(encoder.fingerprint(), index.fingerprint, where, LATER_FINGERPRINT_KEYS)
        record.check_text_rule(encoder, where)
        use_corpus_casing(encoder, index)
        return cls(index, encoder, record)

    @classmethod
    def remote(cls, backends: Sequence[str], model: str | os.PathLike | None = None, quantize: str | None = None,
               encoder: HybridEncoder | None = None, timeout: float = 60.0) -> "Searcher":
        """A searcher over indexes served on other machines (``lens serve DIR`` on each; ``index.remote``), as one
        index holding all their documents: queries are encoded here once, with the encoders the parts record
        (``model``: another LENS model directory, as :meth:`open` takes it), and every part scores them with the
        whole index's statistics."""
        from index.remote import RemoteIndex

        index = RemoteIndex(backends, timeout=timeout)
        searcher = cls._matched(index, EncoderRecord.of_index(index), encoder,
                                f"the index served at {index.backends[0]}", model, quantize)
        # a part saved again: its corpus table anew
        index.on_refresh = lambda: use_corpus_casing(searcher.encoder, index)
        return searcher

    @property
    def default_weights(self) -> tuple[float, ...]:
        """The weights of a search that names none: the index's (lexicon, dense) pair, and BM25 at
        ``index.bm25_fusion.DEFAULT_BM25_WEIGHT`` where the index keeps a BM25 part."""
        from index.bm25_fusion import DEFAULT_BM25_WEIGHT

        pair = tuple(float(w) for w in self.index.weights)
        return (*pair, DEFAULT_BM25_WEIGHT) if getattr(self.index, "has_bm25", False) else pair

    def search(self, queries: Sequence[str] | str, k: int = 10, weights: Sequence[float] | None = None,
               instruction: str | None = None, filter: Mapping[str, Any] | None = None, batch_size: int = 64,
               show_progress_bar: bool = False, encode: Callable | None = None,
               depth: int | None = None, idf: bool | None = None, collapse: str | None = None,
               collapse_depth: int | None = None) -> list[SearchResult]:
        """Top-``k`` hits per query; ``weights`` (lexicon, dense) default to the index's, and on an index with a BM25
        part to the index's pair and ``index.bm25_fusion.DEFAULT_BM25_WEIGHT``; three weights (lexicon, dense, BM25)
        add the index's BM25 part (kept by ``lens index build`` unless ``--no-bm25``; ``depth``: candidates taken
        from each part, ``HybridIndex.search``); ``filter`` keeps the
        documents whose metadata matches (``HybridIndex.search``); ``idf`` weighs the query lexicon by the
        clusters' inverse document frequencies in the index (None: the index's default; ``HybridIndex.search``).
        Queries are encoded and searched
        ``batch_size`` at a time, so a file of many queries needs one batch's vectors in memory. ``encode(texts,
        instruction)`` makes a batch's (lexicon, dense) vectors (default: this searcher's encoder; ``lens serve``
        passes one that batches concurrent requests together). ``collapse`` (a metadata field, e.g. ``"document"``
        in an index of ``lens data passages``): the best hit of each value of the field, ``k`` of them, best first;
        more hits are fetched until ``k`` values are found, the index has no more, or ``collapse_depth`` hits were
        looked at (default ``max(COLLAPSE_DEPTH, 4 k)``; then fewer groups, the best ones, and a warning)."""
        from tqdm.auto import tqdm

        from index.metadata import check_filter

        from index.bm25_fusion import split_weights

        queries = check_queries(queries)
        check_positive_int(batch_size, "batch_size", "queries encoded at a time")
        check_filter(filter)  # before the queries are encoded
        collapse = check_collapse(collapse)
        if collapse_depth is not None:
            check_positive_int(collapse_depth, "collapse_depth", "hits looked at per query")
        self.index.query_idf(idf)  # refused before the queries are encoded where the index cannot
        weights = self.default_weights if weights is None else weights
        if split_weights(weights)[1] > 0 and not getattr(self.index, "has_bm25", False):
            raise ValueError("this index has no BM25 part, so a BM25 weight > 0 cannot be used: rebuild it with "
                             "`lens index build --bm25` (the default), or give two weights LEX,DENSE")
        results: list[SearchResult] = []
        with tqdm(total=len(queries), desc="Searching", unit="query", disable=not show_progress_bar) as bar:
            for start in range(0, len(queries), batch_size):
                batch = queries[start : start + batch_size]
                lexicon, dense = (encode(batch, instruction) if encode is not None
                                  else self.encoder.encode_queries(batch, instruction=instruction))
                if collapse is None:
                    results += self.index.search(lexicon, dense, k=k, weights=weights, filter=filter, texts=batch,
                                                 depth=depth, idf=idf)
                else:
                    results += self._collapsed(lexicon, dense, batch, k, collapse, collapse_depth, weights=weights,
                                               filter=filter, depth=depth, idf=idf)
                bar.update(len(batch))
        return results

    def _collapsed(self, lexicon, dense, texts: list[str], k: int, field: str, most: int | None,
                   **search) -> list[SearchResult]:
        """``k`` groups of hits per query (``collapse_result``): each query's hits fetched again, four times as many,
        until it has ``k`` groups, no more hits, or ``most`` hits were looked at."""
        check_positive_int(k, "k")
        most = max(COLLAPSE_DEPTH, COLLAPSE_FETCH * k) if most is None else most
        total = max(min(len(self.index), most), 1)
        out: list[SearchResult | None] = [None] * len(texts)
        todo, fetch = list(range(len(texts))), min(k * COLLAPSE_FETCH, total)
        while todo:
            rows = np.asarray(todo)
            found = self.index.search(None if lexicon is None else lexicon[rows], None if dense is None else dense[rows],
                                      k=fetch, texts=[texts[i] for i in todo], **search)
            again, short = [], 0
            for i, result in zip(todo, found):
                out[i] = collapse_result(result, field, k)
                if len(out[i].ids) < k and len(result.ids) == fetch:  # fewer groups than asked, more hits to see
                    if fetch < total:
                        again.append(i)
                    elif total < len(self.index):
                        short += 1
            if short:
                logger.warning("collapse on %r: %d of %d queries have fewer than %d groups in their top %d hits, the "
                               "most a collapsed search looks at (collapse_depth); they get the best groups found",
                               field, short, len(texts), k, total)
            todo, fetch = again, min(fetch * 4, total)
        return out
