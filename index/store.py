"""HybridIndex: a FAISS vector store for lexicon + dense embeddings, with string ids and metadata.

Scoring. Each document is stored as ``[lex / |lex| ; dense / |dense|]`` and each query as
``[w_lex * lex / |lex| ; w_dense * dense / |dense|]`` (see :mod:`index.vectors`), so one inner-product
search returns ``score = w_lex * cos_lex + w_dense * cos_dense`` for any weights chosen per query.
An index may also hold only one part ("lexicon" or "dense" mode).

Defined edge cases (the lead-facing contract):

* Searching an empty index returns one empty :class:`SearchResult` per query and logs a warning
  (queries are still validated, so a wrong dimension is an error even then).
* ``k`` larger than the index returns every document (exact types; approximate types return what
  they find); FAISS's ``-1`` padding is always stripped.
* A query whose weighted vector is all zero (a zero/empty embedding, or a nonzero part whose weight
  is 0) would score every document 0, so no ranking exists: it returns an empty result and logs a
  warning. Other queries in the same batch are unaffected.
* A query giving only one part on a hybrid index uses weight 0 for the other part (the given part's
  weight is not rescaled, so scores stay comparable with hybrid queries).
* Documents may have a zero part (e.g. an empty text): that part contributes 0 to their scores.
* A metadata ``filter`` (``index.metadata.check_filter``) that matches no document returns empty results and logs a
  warning; one that matches fewer than ``k`` returns those it matches.

Training (``ivf``, ``sq8``). Until trained, documents go to an exact flat *staging* index, so they are
searchable (exactly) at once. Training happens automatically inside :meth:`HybridIndex.add` as soon as
the staged documents plus those being added reach the type's ``min_train`` (ivf: ``39 * nlist``, or
1000 when ``nlist`` is None and picked from the data as about ``4 * sqrt(n)``; sq8: 1000), on a seeded
random sample of at most ``train_size`` of them (ivf: ``40 * nlist``; sq8: 20000); the staged
documents then move to the trained index. :meth:`HybridIndex.train` trains explicitly on a sample.
For ivf with ``nlist=None``, ``n`` is what is available at that moment, so add the bulk of the
corpus in the first call (or pass ``nlist``) rather than many small calls.

Top-m pruning (``top_m``). An index built with ``top_m=M`` keeps only the ``M`` heaviest lexicon weights of each
document (``index.vectors.prune_top_m``) before normalising it, for every document it is given (training samples
too); the manifest records ``M``. Queries are not pruned unless a search asks (``query_top_m``).

On-disk lists (``ivf-ondisk``). Saved, the inverted lists go to ``index.ivfdata`` (:mod:`index.ondisk`); a load
memory-maps them, and such a loaded index is read-only (add / remove / train raise ValueError). To build one larger
than memory, add a part of the documents, :meth:`HybridIndex.spill` its lists to a file, repeat, then save: the
parts are merged into the saved data file and only one part is ever in memory.

BM25 part (``bm25=True``). The index also keeps each document's BM25 terms (:mod:`index.bm25_part`; ``add`` then
takes ``texts=``, and removals drop them), and ``search`` takes a third weight, for BM25, with the queries' texts:
candidates from the FAISS and BM25 top ``depth``, each scored exactly (:mod:`index.bm25_fusion`,
:mod:`index.rescore`). A BM25 weight of 0 is the two-part search.

IDF (``idf=True``). The index keeps each document's non-zero lexicon clusters (:mod:`index.df_part`, kept exact by
additions and removals), and :meth:`HybridIndex.search` multiplies a query's lexicon by each cluster's BM25 inverse
document frequency in this corpus before normalising it, unless the search says ``idf=False``; a sharded index sums
its shards' counts. An index made without it keeps no counts and refuses ``idf=True``.

Corpus casing (``set_casing_table``). An index built by a LENS model whose text rule truecases (``lens.casing``) keeps
its corpus's own casing table (``casing.json.gz``, counted over the documents at the build, checksummed like the
other files), so a query in capitals is brought back to the corpus's forms of its words (``lens.search``); adding
or removing documents keeps the table as it was built.

Sharded directories (:mod:`index.shards`) hold several of these, searched together by
:class:`index.shards.ShardedIndex`; ``index.load_index`` (:mod:`index.loading`) loads a directory of either layout,
:meth:`HybridIndex.load` one of a single index.

Not thread-safe for concurrent writes (add/remove); concurrent searches are fine. Saving takes the index
directory's writer lock (``lens.atomic.DirectoryLock``): a second process saving to the same directory fails at
once with ``LockedError``. Loading reads one consistent version even while another process saves, and repairs a
save that was killed half-way (``lens.atomic.recover``). A full disk, a missing permission or a read-only file
system make ``save`` raise ``lens.atomic.StorageError`` (one line: path, cause, what to do) and change nothing.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Sequence

import faiss
import numpy as np

from lens.atomic import atomic_dir, write_json
from lens.bm25 import BM25Stats
from lens.casing import CasingTable, read_casing_table

from .factory import INDEX_TYPES, IndexType, TrainingPlan, exact_index, get_index_type
from . import faiss_ops
from .faiss_ops import faiss_search
from .manifest import (
    CASING_FILE,
    DOCS_FILE,
    FORMAT_VERSION,
    INDEX_FILE,
    MANIFEST_FILE,
    data_files,
    check_fingerprint,
    file_record,
    layout_of,
    normalize_fingerprint,
    open_index,
    verify_stream,
)
from .bm25_fusion import DEFAULT_DEPTH, bm25_top, candidate_union, fuse, sparse_lookup, split_weights
from .bm25_part import BM25_FILE, BM25Part, BM25Scores
from .df_part import DF_FILE, DocFrequencyPart
from .metadata import DocTable, check_filter, check_ids, encode_metadata, field_names, missing_fields
from . import ondisk
from .ondisk import DATA_FILE
from .rescore import stored_scores
from .targets import check_save_target
from .vectors import (
    as_matrix, check_dim, check_finite, check_positive_int, cluster_idf, document_vectors, prune_top_m, query_vectors,
    weight_pair,
)

__all__ = ["HybridIndex", "SearchResult", "idf_weights"]

logger = logging.getLogger(__name__)

PARTS = ("lexicon", "dense")
_SAMPLE_SEED = 0


class SearchResult(NamedTuple):
    """Hits of one query, best first: string ids, float32 scores, and each hit's metadata (or None)."""

    ids: list[str]
    scores: np.ndarray
    metadata: list[dict | None]


def _empty_result() -> SearchResult:
    return SearchResult([], np.zeros(0, dtype=np.float32), [])


def _dim(value: Any, name: str) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value == 0):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{name} must be a positive integer, or None/0 when that part is absent; got {value!r}")
    return int(value)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class HybridIndex:
    """FAISS store of hybrid (lexicon + dense), lexicon-only or dense-only document embeddings.

    Args:
        lexicon_dim: width of the lexicon vectors, or None/0 for a dense-only index.
        dense_dim: width of the dense vectors, or None/0 for a lexicon-only index.
        index_type: one of :data:`index.factory.INDEX_TYPES` (flat, hnsw, ivf, sq8, fp16, ivf-ondisk).
        weights: default ``(w_lex, w_dense)`` for queries; None means (0.5, 0.5) for a hybrid index
            and (1, 0) / (0, 1) for a single-part one. Overridable per :meth:`search` call.
        fingerprint: JSON-able dict describing the encoders (kept opaque; checked by :meth:`load`).
        info: JSON-able dict of free-form facts to keep in the manifest (e.g. which dense encoder or
            model name to use at query time); stored and returned as is, never checked.
        top_m: keep only the ``top_m`` heaviest lexicon weights of each document (None: all); needs a lexicon
            part.
        bm25: keep a BM25 part (``index.bm25_part``): :meth:`add` then takes each document's text (``texts=``) and
            :meth:`search` a third weight, for BM25 (``index.bm25_fusion``).
        idf: keep each document's non-zero lexicon clusters (``index.df_part``: about 2 bytes per non-zero, in
            memory and on disk) and weigh each query's lexicon by the clusters' inverse document frequency in this
            index (:meth:`search`'s ``idf``) unless a search says otherwise; needs a lexicon part. Without it the
            index keeps no frequencies and refuses ``idf=True``.
        **index_options: options of the index type, e.g. ``ef_search=128`` (hnsw), ``nlist=1024``
            (ivf); unknown names raise ValueError listing the valid ones.
    """

    def __init__(
        self,
        lexicon_dim: int | None,
        dense_dim: int | None,
        index_type: str = "flat",
        weights: Sequence[float] | None = None,
        fingerprint: Mapping[str, Any] | None = None,
        info: Mapping[str, Any] | None = None,
        top_m: int | None = None,
        bm25: bool = False,
        idf: bool = False,
        **index_options: Any,
    ) -> None:
        self._dims = {"lexicon": _dim(lexicon_dim, "lexicon_dim"), "dense": _dim(dense_dim, "dense_dim")}
        if self._dims["lexicon"] is None and self._dims["dense"] is None:
            raise ValueError("an index needs a lexicon part, a dense part or both: give lexicon_dim and/or dense_dim")
        self._type: IndexType = get_index_type(index_type)
        self._options = self._type.resolve_options(index_options)
        if weights is None:
            weights = {"hybrid": (0.5, 0.5), "lexicon": (1.0, 0.0), "dense": (0.0, 1.0)}[self.mode]
        self._weights = weight_pair(weights, "weights")
        self._fingerprint = normalize_fingerprint(fingerprint)
        self._info = normalize_fingerprint(info, "info")
        if top_m is not None:
            if isinstance(top_m, bool) or not isinstance(top_m, (int, np.integer)) or top_m < 1:
                raise ValueError(f"top_m must be a positive integer (lexicon weights kept per document) or None, "
                                 f"got {top_m!r}")
            if not self._dims["lexicon"]:
                raise ValueError("top_m prunes the lexicon part, but this is a dense-only index; leave top_m out")
            top_m = int(top_m)
        self._top_m: int | None = top_m
        self._readonly: str | None = None  # why add/remove/train are refused (a loaded ivf-ondisk index)
        self._spilled: list[Path] = []  # ivf-ondisk parts written by spill(), merged at save
        self._docs = DocTable()
        self._next_id = 0
        self._bm25: BM25Part | None = BM25Part.build([], []) if bm25 else None
        if not isinstance(idf, (bool, np.bool_)):
            raise ValueError(f"idf must be True or False, got {idf!r}")
        if idf and not self._dims["lexicon"]:
            raise ValueError("idf weighs the lexicon part of queries, but this is a dense-only index; leave idf out")
        self._idf = bool(idf)
        self._df: DocFrequencyPart | None = DocFrequencyPart(self._dims["lexicon"]) if idf else None
        self._casing: CasingTable | None = None
        self._main: faiss.Index | None = None
        self._staging: faiss.Index | None = None
        if self._type.needs_training:
            self._staging = exact_index(self.dim)
        else:
            self._main = self._type.build(self.dim, self._options)

    # ---- properties -------------------------------------------------------------------------

    @property
    def mode(self) -> str:
        """"hybrid", "lexicon" or "dense"."""
        lex, den = self._dims["lexicon"], self._dims["dense"]
        return "hybrid" if lex and den else ("lexicon" if lex else "dense")

    @property
    def lexicon_dim(self) -> int | None:
        return self._dims["lexicon"]

    @property
    def dense_dim(self) -> int | None:
        return self._dims["dense"]

    @property
    def dim(self) -> int:
        """Width of the stored FAISS vectors (sum of the present parts)."""
        return (self._dims["lexicon"] or 0) + (self._dims["dense"] or 0)

    @property
    def index_type(self) -> str:
        return self._type.name

    @property
    def index_options(self) -> dict[str, Any]:
        return dict(self._options)

    @property
    def weights(self) -> tuple[float, float]:
        return self._weights

    @property
    def fingerprint(self) -> dict[str, Any] | None:
        return normalize_fingerprint(self._fingerprint)

    @property
    def info(self) -> dict[str, Any] | None:
        """The free-form ``info`` dict given at construction (as it reads back from JSON)."""
        return normalize_fingerprint(self._info, "info")

    @property
    def top_m(self) -> int | None:
        """Lexicon weights kept per document (``prune_top_m``), or None when documents are not pruned."""
        return self._top_m

    @property
    def casing_table(self) -> CasingTable | None:
        """The corpus's own casing table (``lens.casing.own_casing_table``) this index keeps, or None."""
        return self._casing

    def set_casing_table(self, table: CasingTable | None) -> None:
        """Keep ``table`` (a corpus's own casing table; None: none) with this index; saved as ``casing.json.gz``."""
        if table is not None and not isinstance(table, CasingTable):
            raise TypeError(f"a casing table must be a lens.casing.CasingTable, got {type(table).__name__}")
        self._casing = table

    @property
    def has_bm25(self) -> bool:
        """Whether this index keeps a BM25 part (built with ``bm25=True``, ``lens index build --bm25``)."""
        return self._bm25 is not None

    @property
    def idf(self) -> bool:
        """Whether searches weigh the query lexicon by inverse document frequency unless they say otherwise."""
        return self._idf

    def document_frequencies(self) -> tuple[np.ndarray, int] | None:
        """How many documents weigh each lexicon cluster above zero, and how many documents there are; None for an
        index that keeps no frequencies (built without ``idf``)."""
        return None if self._df is None else (self._df.df, len(self._df))

    def query_idf(self, idf: bool | None) -> np.ndarray | None:
        """The per-cluster weights a search multiplies the query lexicon by: the index's BM25 inverse document
        frequencies when ``idf`` (None: this index's default) is on, else None."""
        return idf_weights(self, idf, self.document_frequencies())

    @property
    def is_trained(self) -> bool:
        """False while an ivf/sq8 index still keeps its documents in the exact staging index."""
        return self._main is not None

    @property
    def faiss_index(self) -> faiss.Index:
        """The FAISS index currently answering searches (read-only use, e.g. for measuring)."""
        return self._main if self._main is not None else self._staging

    @property
    def doc_table(self) -> DocTable:
        """The documents' ids and metadata (``index.metadata.DocTable``), for reading: a filter's lookup costs."""
        return self._docs

    def __len__(self) -> int:
        return len(self._docs)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._docs

    def __repr__(self) -> str:
        return (
            f"HybridIndex(mode={self.mode!r}, lexicon_dim={self.lexicon_dim}, dense_dim={self.dense_dim}, "
            f"index_type={self.index_type!r}, documents={len(self)}, weights={self._weights})"
        )

    def metadata(self, doc_id: str) -> dict | None:
        """Metadata stored with ``doc_id`` (None if none); KeyError if the id is unknown."""
        return self._docs.metadata(doc_id)

    def ids_matching(self, filter: Mapping[str, Any]) -> list[str]:
        """The ids of the documents whose metadata matches ``filter`` (as :meth:`search` takes it), in the order
        they were added: what to remove, export or count for one source or tenant."""
        checked = check_filter(filter)
        if checked is None:
            raise ValueError("ids_matching needs a filter, e.g. {'source': 'wiki'}")
        return self._docs.doc_ids(self._docs.matching(checked))

    def metadata_fields(self) -> list[str]:
        """The metadata fields a filter can name (dotted: nested), from the first documents with metadata
        (``index.metadata.field_names``)."""
        return field_names([self._docs])

    def missing_filter_fields(self, filter: Mapping[str, Any]) -> str | None:
        """Why ``filter`` can match nothing when one of its fields is held by no document (``author`` where a BEIR
        corpus keeps ``metadata.author``): that field and some the documents have; None when every field is held
        (then it is the values that match nothing). For the warning of a filter that matched nothing."""
        return missing_fields([self._docs], check_filter(filter))

    def selection(self, filter: Mapping[str, Any] | None) -> np.ndarray | None:
        """The internal ids of the documents whose metadata matches ``filter`` (as :meth:`search` takes it), for
        :meth:`search_selection`; None for no filter (every document)."""
        checked = check_filter(filter)
        return None if checked is None else self._docs.matching(checked)

    # ---- validation helpers -----------------------------------------------------------------

    def _parts(self, lexicon: Any, dense: Any, require_all: bool) -> dict[str, np.ndarray]:
        """The given parts as 2-D arrays, checked against this index's parts and dimensions."""
        given = {"lexicon": lexicon, "dense": dense}
        out: dict[str, np.ndarray] = {}
        for name in PARTS:
            if given[name] is None:
                if require_all and self._dims[name]:
                    raise ValueError(f"{name} vectors are required: this is a {self.mode} index")
                continue
            if not self._dims[name]:
                raise ValueError(
                    f"this is a {self.mode} index with no {name} part; do not pass {name} vectors"
                )
            arr = as_matrix(given[name], name)
            check_dim(arr, self._dims[name], name)
            out[name] = arr
        if not out:
            raise ValueError("give lexicon and/or dense vectors")
        rows = {name: arr.shape[0] for name, arr in out.items()}
        if len(set(rows.values())) > 1:
            raise ValueError(f"lexicon and dense vectors must have the same number of rows, got {rows}")
        return out

    @staticmethod
    def _check_finite_chunked(parts: dict[str, np.ndarray], chunk: int) -> None:
        for name, arr in parts.items():
            for start in range(0, arr.shape[0], chunk):
                check_finite(arr[start : start + chunk], name, row_offset=start)

    def _doc_vectors(self, parts: dict[str, np.ndarray], sel: slice | np.ndarray) -> np.ndarray:
        lexicon = parts["lexicon"][sel] if "lexicon" in parts else None
        if lexicon is not None and self._top_m is not None:
            lexicon = prune_top_m(lexicon, self._top_m)  # before normalisation, as the manifest's top_m says
        return document_vectors(lexicon, parts["dense"][sel] if "dense" in parts else None)

    def _check_writable(self, action: str) -> None:
        if self._readonly is not None:
            raise ValueError(f"cannot {action}: {self._readonly}")

    # ---- training ---------------------------------------------------------------------------

    def _staged(self) -> tuple[np.ndarray, np.ndarray]:
        """Zero-copy view of the staged vectors and their int ids."""
        st = self._staging
        n = st.ntotal
        ids = faiss.vector_to_array(st.id_map).astype(np.int64) if n else np.zeros(0, np.int64)
        if n == 0:
            return np.zeros((0, self.dim), np.float32), ids
        flat = faiss.downcast_index(st.index)
        return faiss.rev_swig_ptr(flat.get_xb(), n * self.dim).reshape(n, self.dim), ids

    def _train_and_migrate(self, plan: TrainingPlan, parts: dict[str, np.ndarray], n_new: int, chunk: int) -> None:
        """Train a new main index on a sample of staged + new vectors, then move the staged ones in.

        Nothing observable changes until the end, so a failure leaves the store as it was.
        """
        staged_x, staged_ids = self._staged()
        n_staged = len(staged_ids)
        total = n_staged + n_new
        m = min(total, plan.train_size)
        rng = np.random.default_rng(_SAMPLE_SEED)
        pick = np.arange(total) if m == total else np.sort(rng.choice(total, size=m, replace=False))
        from_staged, from_new = pick[pick < n_staged], pick[pick >= n_staged] - n_staged
        sample = np.empty((m, self.dim), dtype=np.float32)
        sample[: len(from_staged)] = staged_x[from_staged]
        if len(from_new):
            sample[len(from_staged) :] = self._doc_vectors(parts, from_new)
        main = self._type.build(self.dim, plan.options)
        t0 = time.perf_counter()
        main.train(sample)
        del sample
        for start in range(0, n_staged, chunk):
            main.add_with_ids(
                np.ascontiguousarray(staged_x[start : start + chunk]), staged_ids[start : start + chunk]
            )
        logger.info(
            "trained %s index on %d of %d vectors in %.1fs (options %s); moved %d staged documents",
            self._type.name, m, total, time.perf_counter() - t0, plan.options, n_staged,
        )
        self._main, self._options, self._staging = main, dict(plan.options), None

    def train(self, lexicon: Any = None, dense: Any = None, chunk_size: int = 4096) -> None:
        """Train an ivf/sq8 index on these sample vectors (plus any staged documents), without adding them.

        Needs at least ``min_train`` vectors in all. For types that need no training this does
        nothing; a trained index raises ValueError (rebuild to retrain).
        """
        if not self._type.needs_training:
            logger.info("index type %r needs no training; train() does nothing", self._type.name)
            return
        self._check_writable("train")
        if self._main is not None:
            raise ValueError(f"this {self._type.name} index is already trained; build a new index to retrain")
        parts = self._parts(lexicon, dense, require_all=True)
        self._check_finite_chunked(parts, chunk_size)
        n = next(iter(parts.values())).shape[0]
        n_staged = self._staging.ntotal
        plan = self._type.training_plan(self._options, n_staged + n)
        if n_staged + n < plan.min_train:
            raise ValueError(
                f"{self._type.name} needs at least min_train={plan.min_train} training vectors, got "
                f"{n} (+{n_staged} staged); give more, or lower min_train"
            )
        self._train_and_migrate(plan, parts, n, chunk_size)

    # ---- add / remove -----------------------------------------------------------------------

    def add(
        self,
        ids: Sequence[str],
        lexicon: Any = None,
        dense: Any = None,
        metadata: Sequence[dict | None] | None = None,
        upsert: bool = False,
        chunk_size: int = 4096,
        texts: Sequence[str] | None = None,
    ) -> None:
        """Add documents (all parts of this index are required, one row per id).

        ``texts``: each document's text, required by an index with a BM25 part (``has_bm25``), ignored otherwise.

        Everything is validated before anything changes: dimensions, NaN/inf, ids duplicated within
        the call, and ids already in the index (an error unless ``upsert=True``, which replaces those
        documents, metadata included). Vectors are normalised and added ``chunk_size`` rows at a time,
        so the extra memory is one chunk (plus a training sample when an ivf/sq8 index trains). If
        FAISS fails midway, the rows added by this call are removed again and the id table is rolled
        back.
        """
        if not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
        ids = check_ids(ids, "add")
        existing = self._existing_for_add(ids, upsert)
        parts = self._parts(lexicon, dense, require_all=True)
        n = len(ids)
        rows = next(iter(parts.values())).shape[0]
        if rows != n:
            raise ValueError(f"got {n} ids but {rows} vectors; give one vector per id")
        if isinstance(metadata, Mapping):
            raise ValueError("metadata is one dict (or None) per id: give a list of them, e.g. [{'source': 'wiki'}]")
        if metadata is not None and not isinstance(metadata, Sequence):  # a generator: one entry per id
            metadata = list(metadata)
        if metadata is not None and len(metadata) != n:
            raise ValueError(f"got {n} ids but {len(metadata)} metadata entries; give one (or None) per id")
        metas = [encode_metadata(m, i) for m, i in zip(metadata, ids)] if metadata is not None else [None] * n
        terms = BM25Part.terms_of(texts, n) if self._bm25 is not None else None
        self._check_finite_chunked(parts, chunk_size)
        if n == 0:
            return

        if self._main is None:
            plan = self._type.training_plan(self._options, self._staging.ntotal + n)
            if self._staging.ntotal + n >= plan.min_train:
                self._train_and_migrate(plan, parts, n, chunk_size)
        target = self.faiss_index
        new_ids = np.arange(self._next_id, self._next_id + n, dtype=np.int64)
        old_ids = np.array(sorted(existing.values()), dtype=np.int64)
        added = 0
        df_rows: list[np.ndarray] = []  # each document's non-zero clusters as stored, for the frequency part
        try:
            with self._docs.transaction():
                if len(old_ids):
                    self._docs.delete(old_ids)
                self._docs.insert(new_ids, ids, metas)
                for start in range(0, n, chunk_size):
                    stop = min(start + chunk_size, n)
                    vectors = self._doc_vectors(parts, slice(start, stop))
                    target.add_with_ids(vectors, new_ids[start:stop])
                    if self._df is not None:  # the lexicon part leads the stored row, pruned and normalised
                        df_rows.extend(DocFrequencyPart.rows_of(vectors[:, : self.lexicon_dim]))
                    added = stop
                if len(old_ids):
                    target.remove_ids(old_ids)
        except BaseException:
            if added:
                try:
                    target.remove_ids(new_ids[:added])
                except Exception:  # pragma: no cover - only reached if FAISS fails twice
                    logger.exception("could not undo a failed add; reload the index from disk")
            raise
        if self._bm25 is not None:  # after the vectors, from terms made before anything changed
            self._bm25.remove(old_ids)
            self._bm25.add_terms(terms, new_ids)
        if self._df is not None:
            self._df.remove(old_ids)
            self._df.add_rows(df_rows, new_ids)
        self._next_id += n
        logger.debug("added %d documents (%d replaced); %d in total", n, len(old_ids), len(self))

    def check_add(self, ids: Sequence[str], upsert: bool = False) -> dict[str, int]:
        """The checks :meth:`add` makes of ``ids`` alone, so a caller can fail before it encodes anything: the
        index is writable, the ids are non-empty strings given once, and an id already in the index is allowed
        (``upsert``) and replaceable (not HNSW, not spilled). Returns the ids already there (id -> internal id)."""
        return self._existing_for_add(check_ids(ids, "add"), upsert)

    def _existing_for_add(self, ids: list[str], upsert: bool) -> dict[str, int]:
        """:meth:`check_add` for ids already checked by ``index.metadata.check_ids``."""
        self._check_writable("add documents")
        existing = self._docs.lookup(ids)
        if existing:
            first = next(i for i in ids if i in existing)
            more = f" (and {len(existing) - 1} more)" if len(existing) > 1 else ""
            if not upsert:
                raise ValueError(f"document id {first!r}{more} is already in the index; pass upsert=True (lens "
                                 "index add --upsert) to replace it")
            if not self._type.supports_remove:
                raise ValueError(self._no_remove_message(f"replace document {first!r}{more}"))
            if self._spilled:
                raise ValueError(f"cannot replace document {first!r}{more}: its part of the lists was spilled to "
                                 "disk; save, then build again without it")
        return existing

    def _no_remove_message(self, action: str) -> str:
        able = ", ".join(name for name, t in INDEX_TYPES.items() if t.supports_remove)
        return (
            f"cannot {action}: index type {self._type.name!r} does not support removing documents "
            f"(FAISS HNSW graphs cannot delete). Rebuild the index without them, or use one of: {able}"
        )

    def check_removable(self) -> None:
        """Raise the ValueError ``remove`` would raise whatever the ids (a read-only load, a type that cannot
        remove), so a caller can refuse before other checks."""
        self._check_writable("remove documents")
        if not self._type.supports_remove:
            raise ValueError(self._no_remove_message("remove documents"))

    def remove(self, ids: Sequence[str]) -> None:
        """Remove documents by id. An unknown id raises KeyError naming it (nothing is removed).

        HNSW indexes cannot remove documents (a FAISS limitation): they raise ValueError; rebuild the
        index, or use flat/ivf/sq8/fp16 when documents must be deleted.
        """
        ids = check_ids(ids, "remove", dedupe=True)
        self.check_removable()
        found = self._docs.lookup(ids)
        missing = [i for i in ids if i not in found]
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise KeyError(f"document {missing[0]!r}{more} is not in the index; nothing was removed")
        if not ids:
            return
        if self._spilled:
            raise ValueError("cannot remove documents once parts of the lists were spilled to disk; save the index "
                             "and build it again without them")
        int_ids = np.array(sorted(found.values()), dtype=np.int64)
        with self._docs.transaction():
            self._docs.delete(int_ids)
            removed = self.faiss_index.remove_ids(int_ids)
            if removed != len(int_ids):
                raise RuntimeError(f"FAISS removed {removed} vectors, expected {len(int_ids)}")
        if self._bm25 is not None:
            self._bm25.remove(int_ids)
        if self._df is not None:
            self._df.remove(int_ids)

    # ---- search -----------------------------------------------------------------------------

    def _query_weights(self, weights: Any, nq: int) -> np.ndarray:
        if weights is None:
            return np.tile(np.array(self._weights, dtype=np.float64), (nq, 1))
        w = np.asarray(weights, dtype=np.float64)
        if w.shape == (2,):
            return np.tile(np.array(weight_pair(w, "weights")), (nq, 1))
        if w.shape != (nq, 2):
            raise ValueError(f"weights must be a pair (w_lex, w_dense) or one pair per query ({nq}, 2), got shape {w.shape}")
        for row in w:
            weight_pair(row, "each row of weights")
        return w

    def search(
        self,
        lexicon: Any = None,
        dense: Any = None,
        k: int = 10,
        weights: Any = None,
        query_top_m: int | None = None,
        filter: Mapping[str, Any] | None = None,
        texts: Sequence[str] | None = None,
        depth: int | None = None,
        idf: bool | None = None,
    ) -> list[SearchResult]:
        """Top-``k`` documents for each query (rows of ``lexicon`` / ``dense``; 1-D = one query).

        ``weights``: None (the index default), a pair ``(w_lex, w_dense)`` for all queries, or an
        array of shape (n_queries, 2). A part not given gets weight 0. Three weights ``(w_lex, w_dense, w_bm25)``
        add BM25 (an index with a BM25 part; ``texts``: the queries' texts): each hit scores ``w_lex * cos_lex +
        w_dense * cos_dense + w_bm25 * bm25 / max_bm25`` exactly, over the union of the vector index's and BM25's
        top ``depth`` (default ``max(k, 100)``; ``index.bm25_fusion``); ``w_bm25 = 0`` is the two-weight search. ``query_top_m`` keeps only that many
        of each query's heaviest lexicon weights (default: none pruned, whatever ``top_m`` the documents had).
        ``filter``: search only the documents whose metadata matches, e.g. ``{"source": "wiki", "year": [2023,
        2024]}`` (``index.metadata.check_filter``); the same top-``k`` as searching an index of those documents
        alone (exact types). ``idf``: multiply each query's lexicon weights by the clusters' BM25 inverse document
        frequencies in this index before normalising it (None: the index's default, :attr:`idf`; see
        :meth:`query_idf`). Returns one :class:`SearchResult` per query; see the module docstring for
        empty-index, zero-query and ``k > len(index)`` behaviour.
        """
        allowed = self.selection(filter)
        if allowed is not None and len(allowed) == 0 and len(self):
            note = self.missing_filter_fields(filter)
            logger.warning("no document matches the filter %s: returning no hits%s", filter, f"; {note}" if note else "")
        return self.search_selection(lexicon, dense, k, weights, query_top_m, allowed, texts, depth,
                                     self.query_idf(idf))

    def search_selection(self, lexicon: Any, dense: Any, k: int, weights: Any, query_top_m: int | None,
                         allowed: np.ndarray | None, texts: Sequence[str] | None = None,
                         depth: int | None = None, idf: np.ndarray | None = None,
                         bm25: BM25Scores | None = None) -> list[SearchResult]:
        """:meth:`search` over the documents whose internal ids are ``allowed`` (:meth:`selection`; None: all),
        with no warning when none are (``index.shards`` warns once for all of its shards). ``idf``: the weights
        the query lexicon is multiplied by (:meth:`query_idf`; a sharded index gives all of its shards' ones).
        ``bm25``: each query's BM25 scores and maximum (:meth:`bm25_scores`; a sharded index gives them scored with
        all of its shards' statistics), computed here from this index alone when None."""
        check_positive_int(k, "k")
        if depth is not None:
            check_positive_int(depth, "depth", "candidates from each part")
        if self._spilled:
            raise ValueError("this index spilled parts of its lists to disk to be built; save it and load the saved "
                             "index to search it")
        parts = self._parts(lexicon, dense, require_all=False)
        for name, arr in parts.items():
            check_finite(arr, f"query {name}")
        if idf is not None and "lexicon" in parts:
            parts["lexicon"] = parts["lexicon"] * idf  # before pruning: the heaviest weights as weighed
        if query_top_m is not None and "lexicon" in parts:
            parts["lexicon"] = prune_top_m(parts["lexicon"], query_top_m)
        nq = next(iter(parts.values())).shape[0]
        weights, w_bm25 = split_weights(weights)
        if w_bm25 > 0:
            self._check_bm25_query(texts, nq)
            w = np.tile(np.array(weights, dtype=np.float64), (nq, 1))  # 0,0 is BM25 alone
        else:
            w = self._query_weights(weights, nq)
        q_parts: dict[str, np.ndarray | None] = {}
        q_w: dict[str, np.ndarray] = {}
        for j, name in enumerate(PARTS):
            if not self._dims[name]:
                q_parts[name], q_w[name] = None, np.zeros(nq)
            elif name in parts:
                q_parts[name], q_w[name] = parts[name], w[:, j]
            else:  # part not given on a hybrid index: weight 0
                q_parts[name], q_w[name] = np.zeros((nq, self._dims[name]), np.float32), np.zeros(nq)
        qv = query_vectors(q_parts["lexicon"], q_parts["dense"], q_w["lexicon"], q_w["dense"])

        results = [_empty_result() for _ in range(nq)]
        zero = ~qv.any(axis=1)
        if zero.any() and w_bm25 == 0:
            logger.warning(
                "%d of %d queries are all-zero (empty embedding or weight 0 on the only given part); "
                "they match nothing and return no hits", int(zero.sum()), nq,
            )
        index = self.faiss_index
        if index.ntotal == 0:
            logger.warning("searching an empty index: no documents have been added; returning no hits")
            return results
        if w_bm25 > 0:
            bm25 = self.bm25_scores(BM25Part.query_terms(texts), allowed) if bm25 is None else bm25
            return self._search_bm25(qv, bm25, k, max(k, depth or DEFAULT_DEPTH), w_bm25, allowed)
        live = np.flatnonzero(~zero)
        if len(live) == 0 or (allowed is not None and len(allowed) == 0):
            return results
        n = index.ntotal if allowed is None else len(allowed)
        scores, labels = faiss_search(index, np.ascontiguousarray(qv[live]), int(min(k, n)), allowed)
        docs = self._docs.fetch(labels[labels >= 0].ravel())
        for row, qi in enumerate(live):
            keep = labels[row] >= 0
            hits = [docs[int(i)] for i in labels[row][keep]]
            results[qi] = SearchResult(
                [h[0] for h in hits], scores[row][keep].astype(np.float32, copy=True), [h[1] for h in hits]
            )
        return results

    def _check_bm25_query(self, texts: Sequence[str] | None, nq: int) -> None:
        if self._bm25 is None:
            raise ValueError("this index has no BM25 part, so a BM25 weight > 0 cannot be used: rebuild it with "
                             "`lens index build --bm25` (Python: HybridIndex(..., bm25=True)), or give two weights "
                             "LEX,DENSE")
        if texts is None or isinstance(texts, str) or len(texts) != nq:
            raise ValueError(f"a BM25 weight needs each query's text: give texts= with one text per query ({nq})")

    def bm25_scores(self, terms: Sequence[Sequence[str]], allowed: np.ndarray | None = None,
                    stats: Sequence[BM25Stats] | None = None) -> BM25Scores:
        """Each query's BM25 scores of the documents ``allowed`` (None: all) holding one of its terms
        (``BM25Part.sparse_scores`` of ``BM25Part.query_terms``) and its maximum over them, with this index's
        statistics or ``stats`` (one per query: a sharded index's, added up over its shards). Every candidate of a
        search is an allowed document, so the scores of the others are not kept."""
        part = self._bm25
        if part is None:
            raise ValueError("this index has no BM25 part: rebuild it with `lens index build` (without --no-bm25)")
        if stats is not None and len(stats) != len(terms):
            raise ValueError(f"BM25 statistics for {len(stats)} queries given for {len(terms)} queries")
        scores = []
        for q, t in enumerate(terms):
            rows, values = part.sparse_scores(t, None if stats is None else stats[q])
            if allowed is not None:
                ok = np.isin(part.labels[rows], allowed)
                rows, values = rows[ok], values[ok]
            scores.append((rows, values))
        return BM25Scores(scores, [float(values.max(initial=0.0)) for _, values in scores])

    def bm25_stats(self, terms: Sequence[Sequence[str]]) -> list[BM25Stats]:
        """This index's BM25 statistics for each query's terms (``BM25Stats.total`` adds up those of shards)."""
        if self._bm25 is None:
            raise ValueError("this index has no BM25 part: rebuild it with `lens index build` (without --no-bm25)")
        return [self._bm25.stats(t) for t in terms]

    def bm25_maxima(self, terms: Sequence[Sequence[str]], stats: Sequence[BM25Stats],
                    filter: Mapping[str, Any] | None = None) -> list[float]:
        """Each query's best BM25 score over this index's documents that ``filter`` allows, scored with ``stats``
        (a larger index's, this one a part of it): the parts' maxima give that index's (``index.remote``)."""
        return self.bm25_scores(terms, self.selection(filter), stats).maxima

    def search_part(self, lexicon: Any, dense: Any, k: int, weights: Any, filter: Mapping[str, Any] | None = None,
                    texts: Sequence[str] | None = None, depth: int | None = None, idf: np.ndarray | None = None,
                    bm25_stats: Sequence[BM25Stats] | None = None,
                    bm25_maxima: Sequence[float] | None = None) -> list[SearchResult]:
        """:meth:`search` of this index as one part of a larger one held apart (``index.remote``: a machine's
        index behind ``lens serve``): ``idf`` the query lexicon's weights from the whole index's frequencies,
        ``bm25_stats`` and ``bm25_maxima`` its BM25 statistics and each query's best score, so the scores are the
        whole index's and the parts' top-``k`` merge into its top-``k`` (``index.shards.merge_hits``)."""
        allowed = self.selection(filter)
        return self.search_selection(lexicon, dense, k, weights, None, allowed, texts, depth, idf,
                                     self._part_bm25(weights, texts, allowed, bm25_stats, bm25_maxima))

    def _part_bm25(self, weights: Any, texts: Sequence[str] | None, allowed: np.ndarray | None,
                   stats: Sequence[BM25Stats] | None, maxima: Sequence[float] | None) -> BM25Scores | None:
        """:meth:`search_part`'s BM25 side: scored with the whole index's ``stats``, divided by its ``maxima``."""
        if split_weights(weights)[1] == 0:
            return None
        if stats is None or maxima is None:
            raise ValueError("a part's search with a BM25 weight needs the whole index's BM25 statistics and maxima")
        if texts is None or isinstance(texts, str) or len(texts) != len(stats) or len(maxima) != len(stats):
            raise ValueError("a part's BM25 search needs one text, one set of statistics and one maximum per query")
        scored = self.bm25_scores(BM25Part.query_terms(list(texts)), allowed, stats)
        return BM25Scores(scored.scores, [float(m) for m in maxima])

    def _search_bm25(self, qv: np.ndarray, bm25: BM25Scores, k: int, depth: int, w_bm25: float,
                     allowed: np.ndarray | None) -> list[SearchResult]:
        """Three-part search (``index.bm25_fusion``): candidates from FAISS's and BM25's top ``depth``, each scored
        exactly from its stored vector (``index.rescore``) and its BM25 score over ``bm25``'s maximum."""
        index, part = self.faiss_index, self._bm25
        nq = len(bm25.scores)
        n = index.ntotal if allowed is None else len(allowed)
        live = np.flatnonzero(qv.any(axis=1))
        vec_labels = [np.zeros(0, np.int64)] * nq
        if len(live) and n:
            _, found = faiss_search(index, np.ascontiguousarray(qv[live]), int(min(depth, n)), allowed)
            for row, qi in enumerate(live):
                vec_labels[qi] = found[row][found[row] >= 0]
        cands, cand_bm25 = [], []
        for q, (rows, values) in enumerate(bm25.scores):  # the allowed documents' scores alone
            c = candidate_union(vec_labels[q], part.labels[rows[bm25_top(values, depth)]])
            cands.append(c)
            cand_bm25.append(sparse_lookup(rows, values, part.rows_of(c)))
        union = candidate_union(*cands)
        vec_scores = stored_scores(index, qv, union)
        fused = []
        for q, c in enumerate(cands):
            fused.append(fuse(c, vec_scores[q, np.searchsorted(union, c)], cand_bm25[q], w_bm25, k,
                              bm25.maxima[q]))
        docs = self._docs.fetch(np.concatenate([f[0] for f in fused]) if fused else np.zeros(0, np.int64))
        results = []
        for labels, scores in fused:
            hits = [docs[int(i)] for i in labels]
            results.append(SearchResult([h[0] for h in hits], scores, [h[1] for h in hits]))
        return results

    def set_search_options(self, **options: Any) -> None:
        """Change search-time options (hnsw ``ef_search``, ivf ``nprobe``) without re-indexing."""
        self._type.check_search_options(options)
        self._options.update(options)
        if self._main is not None:
            self._type.apply_search_options(self._main, options)

    # ---- building in parts ------------------------------------------------------------------

    def clone_empty(self) -> "HybridIndex":
        """A new, empty index with this one's settings and, when this one is trained, a copy of its trained FAISS
        index: shards filled from one template share one training (``lens.indexing``). This one must be empty."""
        if len(self) or self._spilled:
            raise ValueError("clone_empty copies an empty template index; this one holds documents")
        if self._readonly is not None:
            raise ValueError(f"cannot clone this index: {self._readonly}")
        new = HybridIndex(self.lexicon_dim, self.dense_dim, self._type.name, self._weights, self._fingerprint,
                          self._info, top_m=self._top_m, bm25=self.has_bm25, idf=self._idf, **self._options)
        if self._type.needs_training and self._main is not None:
            new._main, new._staging = faiss.clone_index(self._main), None
        new._casing = self._casing
        return new

    def spill(self, path: str | os.PathLike) -> int:
        """``ivf-ondisk`` only: write the inverted lists held in memory to ``path`` and empty them; returns how
        many vectors moved. :meth:`save` merges every spilled part into the saved ``index.ivfdata``; keep the
        files until then. Until saved, this index cannot search, nor remove or replace documents."""
        if not self._type.on_disk:
            raise ValueError(f"spill moves on-disk inverted lists; index type {self._type.name!r} has none "
                             "(use ivf-ondisk)")
        self._check_writable("spill")
        if self._main is None:
            raise ValueError("train the index before spilling its lists (train(), or add min_train documents)")
        path = Path(path)
        moved = ondisk.spill(self._main, path)
        self._spilled.append(path)
        logger.debug("spilled %d vectors to %s", moved, path)
        return moved

    # ---- persistence ------------------------------------------------------------------------

    def save(self, directory: str | os.PathLike) -> Path:
        """Save to ``directory`` atomically: it ends up holding either the old index or the new one.

        Writes ``index.faiss``, ``docs.sqlite`` and ``manifest.json`` (format version, dims, weights,
        index type and options, ``top_m``, count, fingerprint, sha256 and size of each data file), and for a
        trained ``ivf-ondisk`` index its lists in ``index.ivfdata``. Refuses a directory
        that is not an index (``FileExistsError``); raises ``LockedError`` if another process is saving there
        and ``StorageError`` on a full disk or a missing permission (nothing changed either way).
        """
        self.check_savable()
        check_save_target(directory)
        with atomic_dir(directory, what="index") as tmp:
            self.write_files(tmp)
        logger.info("saved %d documents to %s", len(self), directory)
        return Path(directory)

    def check_savable(self) -> None:
        """Refuse (ValueError) to save an index loaded read-only (``load(read_only=True)``) with idf counts alone
        or a BM25 part read to search only: it no longer holds every document's clusters or terms, so a save would
        lose them."""
        if ((self._df is not None and self._df.counts_only)
                or (self._bm25 is not None and self._bm25.scorer_only)):
            raise ValueError(f"cannot save this index: {self._readonly}")

    def write_files(self, directory: Path) -> dict[str, Any]:
        """Write this index's data files and manifest into the existing, empty ``directory``; return the manifest.

        Not atomic by itself: :meth:`save` and :mod:`index.shards` call it inside ``lens.atomic.atomic_dir``.
        """
        index_path, docs_path = directory / INDEX_FILE, directory / DOCS_FILE
        files = {}
        if self._type.on_disk and self._main is not None:
            data_path = directory / DATA_FILE
            faiss_ops.write_faiss(self._main, data_path,
                         lambda: ondisk.write_ondisk(self._main, self._spilled, index_path, data_path, directory))
            _fsync(data_path)
            files[DATA_FILE] = file_record(data_path)
        else:
            faiss_ops.write_faiss(self.faiss_index, index_path)
        _fsync(index_path)
        self._docs.save(docs_path)
        _fsync(docs_path)
        files.update({INDEX_FILE: file_record(index_path), DOCS_FILE: file_record(docs_path)})
        if self._bm25 is not None:
            bm25_path = directory / BM25_FILE
            self._bm25.write(bm25_path)
            _fsync(bm25_path)
            files[BM25_FILE] = file_record(bm25_path)
        if self._df is not None:
            df_path = directory / DF_FILE
            self._df.write(df_path)
            _fsync(df_path)
            files[DF_FILE] = file_record(df_path)
        if self._casing is not None:
            casing_path = directory / CASING_FILE
            casing_path.write_bytes(self._casing.to_bytes())
            _fsync(casing_path)
            files[CASING_FILE] = file_record(casing_path)
        manifest = {
            "format_version": FORMAT_VERSION,
            "mode": self.mode,
            "lexicon_dim": self.lexicon_dim,
            "dense_dim": self.dense_dim,
            "weights": list(self._weights),
            "index_type": self._type.name,
            "index_options": self._options,
            "trained": self.is_trained,
            "count": len(self),
            "next_id": self._next_id,
            "fingerprint": self._fingerprint,
            "info": self._info,
            "top_m": self._top_m,
            "faiss_version": faiss.__version__,
            "files": files,
        }
        if self._bm25 is not None:
            manifest["bm25"] = self._bm25.manifest_entry()
        if self._df is not None:
            manifest["df"], manifest["idf"] = self._df.manifest_entry(), self._idf
        write_json(directory / MANIFEST_FILE, manifest)
        return manifest

    @classmethod
    def load(
        cls,
        directory: str | os.PathLike,
        expected_fingerprint: Mapping[str, Any] | None = None,
        *,
        read_only: bool = False,
        **search_options: Any,
    ) -> "HybridIndex":
        """Load a saved index, verifying it before trusting it.

        Refuses (ValueError) a different format version, a fingerprint other than
        ``expected_fingerprint`` (:class:`~index.manifest.FingerprintMismatchError`, listing the
        differing keys), and any damaged file: checksums are verified before FAISS or SQLite parse
        anything. ``search_options`` (e.g. ``ef_search``, ``nprobe``) override the saved ones. ``read_only``: load
        what searching needs and refuse changes (the idf part then holds its counts, not every document's
        clusters: :mod:`index.df_part`, and the BM25 part each term's documents, not each document's terms:
        :mod:`index.bm25_part`; so a save, which would lose them, is refused too). A sharded directory is refused, saying to load it with
        ``index.load_index`` (either layout).
        """
        directory = Path(directory)
        m, gen = open_index(directory)
        with gen:
            if layout_of(m) != "single":
                raise ValueError(f"{directory} is a sharded index ({len(m['shards'])} shards), not one index: load "
                                 "it with index.load_index(directory), which loads either layout")
            return cls.from_files(directory, m, gen.files, expected_fingerprint, search_options, read_only)

    @classmethod
    def from_files(cls, directory: Path, m: dict[str, Any], files: Mapping[str, Any],
                   expected_fingerprint: Mapping[str, Any] | None, search_options: dict[str, Any],
                   read_only: bool = False) -> "HybridIndex":
        """Verify and parse one version's open files of a single index (``index.manifest.open_index``: ``m`` its
        validated manifest, ``files`` its data files by name); ``read_only`` as :meth:`load`."""
        mpath = directory / MANIFEST_FILE
        check_fingerprint(expected_fingerprint, m["fingerprint"], directory)
        try:
            itype = get_index_type(m["index_type"])
        except ValueError as e:
            raise ValueError(f"index manifest {mpath}: {e}") from e
        itype.check_search_options(search_options)
        on_disk = itype.on_disk and m["trained"]
        if on_disk and DATA_FILE not in m["files"]:
            raise ValueError(f"index manifest {mpath} is damaged: no valid checksum record for {DATA_FILE}")
        index_path, docs_path = directory / INDEX_FILE, directory / DOCS_FILE
        for name in data_files(m):
            verify_stream(files.get(name), directory / name, m["files"][name])

        obj = cls(
            m["lexicon_dim"], m["dense_dim"], m["index_type"], m["weights"], m["fingerprint"], m.get("info"),
            top_m=m.get("top_m"), idf=bool(m.get("idf", False)), **m["index_options"],
        )
        if m.get("df") is not None:
            if DF_FILE not in m["files"]:
                raise ValueError(f"index manifest {mpath} is damaged: no valid checksum record for {DF_FILE}")
            obj._df = DocFrequencyPart.read(files[DF_FILE], directory / DF_FILE, m["df"], obj.lexicon_dim,
                                            counts_only=read_only)
            if read_only and len(obj._df) != m["count"]:
                raise ValueError(f"saved index {directory} is inconsistent: {DF_FILE} counts {len(obj._df)} "
                                 f"documents, the manifest {m['count']}; rebuild the index")
        else:
            obj._df = None  # built without idf (or before LENS kept frequencies): `idf` is refused (query_idf)
        if m.get("bm25") is not None:
            if BM25_FILE not in m["files"]:
                raise ValueError(f"index manifest {mpath} is damaged: no valid checksum record for {BM25_FILE}")
            obj._bm25 = BM25Part.read(files[BM25_FILE], directory / BM25_FILE, m["bm25"], scorer_only=read_only)
        if CASING_FILE in m["files"]:
            f = files[CASING_FILE]
            f.seek(0)
            try:
                obj._casing = read_casing_table(f.read(), directory / CASING_FILE)
            except ValueError as e:
                raise ValueError(f"saved index {directory}: {e}; rebuild the index") from None
        raw = faiss_ops.read_faiss(files[INDEX_FILE], index_path, faiss.IO_FLAG_SKIP_IVF_DATA if on_disk else 0)
        docs = DocTable.read(files[DOCS_FILE], docs_path, in_place=read_only or on_disk)  # never changed then
        problems = []
        if raw.d != obj.dim:
            problems.append(f"{INDEX_FILE} has width {raw.d}, manifest dims give {obj.dim}")
        if not (raw.ntotal == len(docs) == m["count"]):
            problems.append(f"{INDEX_FILE} holds {raw.ntotal} vectors, {DOCS_FILE} {len(docs)} ids, manifest count {m['count']}")
        if m["next_id"] <= docs.max_int_id():
            problems.append(f"manifest next_id {m['next_id']} is not above the largest id {docs.max_int_id()}")
        needs_staging = itype.needs_training and not m["trained"]
        id_checks = []  # (the ids another file holds, what to say if they are not the table's)
        if hasattr(raw, "id_map"):
            id_checks.append((faiss.vector_to_array(raw.id_map), f"the ids in {INDEX_FILE} and {DOCS_FILE} differ"))
        if obj._bm25 is not None:
            id_checks.append((obj._bm25.labels, f"the documents of {BM25_FILE} and {DOCS_FILE} differ"))
        if obj._df is not None and not obj._df.counts_only:
            id_checks.append((obj._df.labels, f"the documents of {DF_FILE} and {DOCS_FILE} differ"))
        if id_checks and not problems:
            int_ids = docs.int_ids()  # read once for every check; the first mismatch is reported
            bad = next((why for ids, why in id_checks if not np.array_equal(np.sort(ids), int_ids)), None)
            problems += [bad] if bad else []
        if problems:
            docs.close()
            raise ValueError(f"saved index {directory} is inconsistent: {'; '.join(problems)}; rebuild the index")
        if on_disk:
            ondisk.map_lists(raw, files[DATA_FILE], directory / DATA_FILE)
            obj._readonly = (f"the index loaded from {directory} keeps its inverted lists memory-mapped from "
                             f"{DATA_FILE}, read-only; build a new index (lens index build) or merge saved ones "
                             "(lens index merge)")
        elif read_only:
            obj._readonly = (f"the index at {directory} was loaded read-only (read_only=True, as lens search and lens "
                             "serve load it); load it with read_only=False to change it")
        obj._docs, obj._next_id = docs, m["next_id"]
        if needs_staging:
            obj._staging, obj._main = raw, None
        else:
            obj._main, obj._staging = raw, None
        obj.set_search_options(**search_options)
        if obj._main is not None:
            itype.apply_search_options(obj._main, obj._options)
        logger.info("loaded %r from %s", obj, directory)
        return obj


def idf_weights(index: Any, idf: bool | None, frequencies: tuple[np.ndarray, int] | None) -> np.ndarray | None:
    """The query lexicon's weights for ``idf`` (None: ``index.idf``, the index's default) from ``frequencies``
    (``(df, n)``: one index's, or a sharded index's summed); None when off. Refused with what to do when the index
    has no lexicon part or keeps no frequencies."""
    if idf is None:
        idf = index.idf
    if not isinstance(idf, (bool, np.bool_)):
        raise ValueError(f"idf must be True, False or None (the index's default), got {idf!r}")
    if not idf:
        return None
    if not index.lexicon_dim:
        raise ValueError("idf weighs the lexicon part of queries, but this is a dense-only index; search without "
                         "--idf")
    if frequencies is None:
        raise ValueError("this index keeps no document frequencies to weigh queries by (built with --no-idf, or "
                         "before LENS kept them): rebuild it with `lens index build` without --no-idf (Python: "
                         "HybridIndex(..., idf=True)), or search without --idf")
    df, n = frequencies
    return cluster_idf(df, n)

