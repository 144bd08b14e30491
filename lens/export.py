"""Sparse exports of lexicon vectors for external stores: Pyserini impact indexes, Qdrant / Milvus, Elasticsearch /
OpenSearch ``rank_features``; and the ``.npy`` matrix.

A lexicon vector has one non-negative weight per cluster. Each sparse format writes one JSON object per line, holding
the non-zero weights only: by cluster index (``qdrant``) or by cluster label (``pyserini``, ``rank-features``), a
stable term such as ``c0042_statin`` (:func:`cluster_labels`). Queries are written in the same shape as documents, so
a store scores a query and a document by the dot product of their vectors: exactly for the float formats, and
``scale**2`` times it up to rounding for ``pyserini``'s integer impacts. ``lens encode --format`` reads ``FORMATS``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Iterator, NamedTuple, Sequence

import numpy as np

from index.vectors import as_matrix, check_finite
from lens.atomic import atomic_file

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_FIELD",
    "DEFAULT_SCALE",
    "ExportOptions",
    "ExportWriter",
    "FORMATS",
    "LABEL_TOKENS",
    "Format",
    "check_format",
    "cluster_labels",
    "pyserini_records",
    "qdrant_records",
    "quantize",
    "rank_features_records",
    "write_export",
]

DEFAULT_SCALE = 100.0  # pyserini: impact = round(weight * scale); unit vectors' weights are <= 1
DEFAULT_FIELD = "features"  # rank-features: the name of the rank_features field
_LABEL_CHARS = 24  # at most this many characters of the token after the cluster id
LABEL_TOKENS = 8  # how many of a cluster's first tokens are tried for its label
_NOT_LABEL = re.compile(r"[^a-z0-9]+")
_FIELD = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")


@dataclass(frozen=True)
class ExportOptions:
    """The options of the sparse formats, checked when made (before any encoding)."""

    scale: float = DEFAULT_SCALE  # pyserini: integer impact = round(weight * scale); entries rounding to 0 dropped
    field: str = DEFAULT_FIELD  # rank-features: the rank_features field that holds {label: weight}

    def __post_init__(self) -> None:
        if isinstance(self.scale, bool) or not isinstance(self.scale, (int, float)) or not (
                math.isfinite(self.scale) and self.scale > 0):
            raise ValueError(f"scale must be a finite number > 0 (impact = round(weight * scale)), got {self.scale!r}")
        if not isinstance(self.field, str) or not _FIELD.fullmatch(self.field):
            raise ValueError(f"field must be a field name of letters, digits, '_' and '-' (e.g. {DEFAULT_FIELD!r}), "
                             f"got {self.field!r}")
        if self.field == "id" or self.field.startswith("_"):
            raise ValueError(f"field {self.field!r} cannot hold the weights: 'id' is each record's id, and names "
                             "starting with '_' are Elasticsearch's metadata fields; choose another (e.g. "
                             f"{DEFAULT_FIELD!r})")


# ---------------------------------------------------------------------------------------------- labels
def cluster_labels(tokens: Sequence[Sequence[str]]) -> list[str]:
    """One term per cluster, ``c<id>_<token>`` (e.g. ``c0042_statin``), from each cluster's decoded tokens.

    ``tokens[c]`` are cluster ``c``'s member tokens in token-id order (``LensEncoder.cluster_tokens``, the order of
    ``clusters.tsv``). The token part is the first of its first ``LABEL_TOKENS`` tokens that keeps a letter or digit
    once folded to lowercase ASCII (accents stripped, other characters removed), cut to 24 characters; a cluster
    without one is ``c<id>``.
    The id is zero-padded to one width (at least 4 digits), so labels are unique whatever the tokens; they hold only
    ``[a-z0-9_]``: safe as Lucene terms, JSON keys and Elasticsearch feature names.
    """
    width = max(4, len(str(max(len(tokens) - 1, 0))))
    labels = []
    for c, members in enumerate(tokens):
        word = next((w for w in map(_ascii_word, list(members)[:LABEL_TOKENS]) if w), "")
        labels.append(f"c{c:0{width}d}_{word}" if word else f"c{c:0{width}d}")
    return labels


def _ascii_word(token: str) -> str:
    folded = unicodedata.normalize("NFKD", token).encode("ascii", "ignore").decode("ascii").lower()
    return _NOT_LABEL.sub("", folded)[:_LABEL_CHARS]


# ---------------------------------------------------------------------------------------------- records
MAX_IMPACT = 2**31 - 1  # Anserini's JsonVectorCollection reads each impact as a Java int


def quantize(x: np.ndarray, scale: float = DEFAULT_SCALE) -> np.ndarray:
    """Integer impacts ``round(x * scale)`` (half to even, as Python's ``round``) as int64, computed in float64."""
    return np.rint(np.asarray(x, dtype=np.float64) * float(scale)).astype(np.int64)


def pyserini_records(vectors: np.ndarray, ids: Sequence[str], labels: Sequence[str],
                     texts: Sequence[str] | None = None, scale: float = DEFAULT_SCALE) -> Iterator[dict]:
    """Pyserini ``JsonVectorCollection`` objects: ``{"id", "contents", "vector": {label: impact}}``.

    Impacts are ``round(weight * scale)``; entries that round to 0 are left out. ``contents`` is the text (empty
    without ``texts``). A query in the same shape scores ``sum(q_impact * d_impact)``, about ``scale**2`` times the
    dot product (the rounding error is bounded in docs/integrations.md, "Sparse exports").
    """
    x = _checked(vectors, ids, labels, texts)
    ExportOptions(scale=scale)
    for i, doc_id in enumerate(ids):
        impacts = quantize(x[i], scale)
        if impacts.size and impacts.max() > MAX_IMPACT:
            raise ValueError(f"record {doc_id!r}: impact {int(impacts.max())} (weight {float(x[i].max()):.4g} x scale "
                             f"{scale:g}) is over {MAX_IMPACT}, the largest Anserini reads (a Java int): lower the "
                             "scale (the usual is 100)")
        cols = np.flatnonzero(impacts > 0)
        yield {"id": doc_id, "contents": texts[i] if texts is not None else "",
               "vector": {labels[c]: int(impacts[c]) for c in cols}}


def qdrant_records(vectors: np.ndarray, ids: Sequence[str], labels: Sequence[str] | None = None,
                   texts: Sequence[str] | None = None) -> Iterator[dict]:
    """Qdrant / Milvus sparse vectors: ``{"id", "indices": [cluster, ...], "values": [weight, ...]}``.

    Indices ascend; only positive weights are kept. Values are written in float32's shortest form, so reading them
    back as float32 gives the encoded weights exactly (Qdrant stores float32).
    """
    x = _checked(vectors, ids, labels, texts)
    for i, doc_id in enumerate(ids):
        cols = np.flatnonzero(x[i] > 0)
        yield {"id": doc_id, "indices": cols.tolist(), "values": _floats(x[i, cols])}


def rank_features_records(vectors: np.ndarray, ids: Sequence[str], labels: Sequence[str],
                          texts: Sequence[str] | None = None, field: str = DEFAULT_FIELD) -> Iterator[dict]:
    """Elasticsearch / OpenSearch ``rank_features`` documents: ``{"id", field: {label: weight}}``.

    Only positive weights are kept (the field rejects zero and negative values). Elasticsearch keeps 9 significant
    bits of each value (relative error up to about 0.4%); the file holds the float32 weights exactly.
    """
    x = _checked(vectors, ids, labels, texts)
    ExportOptions(field=field)
    for i, doc_id in enumerate(ids):
        cols = np.flatnonzero(x[i] > 0)
        yield {"id": doc_id, field: dict(zip((labels[c] for c in cols), _floats(x[i, cols])))}


def _floats(values: np.ndarray) -> list[float]:
    """float32 values as the shortest decimals that read back to the same float32 (``0.1``, not ``0.100000001``)."""
    return [float(s) for s in values.astype(np.float32).astype(str)]


def _checked(vectors, ids, labels, texts) -> np.ndarray:
    """``vectors`` as float32 rows after checking them against ids, labels and texts."""
    x = as_matrix(vectors, "lexicon")
    check_finite(x, "lexicon")
    if len(ids) != x.shape[0]:
        raise ValueError(f"{len(ids)} ids for {x.shape[0]} vectors: give one id per row")
    if labels is not None and len(labels) != x.shape[1]:
        raise ValueError(f"{len(labels)} cluster labels for vectors of {x.shape[1]} clusters: give one per cluster")
    if texts is not None and len(texts) != x.shape[0]:
        raise ValueError(f"{len(texts)} texts for {x.shape[0]} vectors: give one text per row")
    bad = [i for i in ids if not isinstance(i, str)]
    if bad:
        raise TypeError(f"ids must be strings, got {type(bad[0]).__name__} {bad[0]!r}")
    seen: set[str] = set()
    for i in ids:
        if i in seen:
            raise ValueError(f"id {i!r} appears twice; a store would keep only one of them: give unique ids")
        seen.add(i)
    negative = np.flatnonzero((x < 0).any(axis=1))
    if negative.size:
        raise ValueError(f"sparse exports take non-negative lexicon vectors; row {int(negative[0])} has a negative "
                         "weight (dense vectors are exported with --format npy)")
    return x.astype(np.float32, copy=False)


# ---------------------------------------------------------------------------------------------- formats
class Format(NamedTuple):
    """An export format: its file's extension and what it needs; a sparse one also its records (matrix, ids,
    labels, texts, options -> one dict per vector, written as JSON lines), a dense one is a ``.npy`` matrix."""

    suffix: str  # the output file's extension
    sparse: bool  # one record per vector, with ids and cluster labels (lexicon vectors only)
    options: tuple[str, ...]  # the ExportOptions fields it reads
    help: str
    records: Callable[..., Iterator[dict]] | None = None


def _sparse(records: Callable[..., Iterator[dict]], options: tuple[str, ...], help: str) -> Format:
    """A JSON-lines format of ``records``."""
    return Format(".jsonl", True, options, help, records)


FORMATS: dict[str, Format] = {
    "npy": Format(".npy", False, (), "a float32 matrix, rows in input order (numpy.load)"),
    "pyserini": _sparse(lambda x, ids, labels, texts, o: pyserini_records(x, ids, labels, texts, o.scale),
                        ("scale",), "Pyserini JsonVectorCollection: {id, contents, vector: {label: int impact}}"),
    "qdrant": _sparse(lambda x, ids, labels, texts, o: qdrant_records(x, ids, labels, texts),
                      (), "Qdrant / Milvus sparse vectors: {id, indices, values}"),
    "rank-features": _sparse(lambda x, ids, labels, texts, o: rank_features_records(x, ids, labels, texts, o.field),
                             ("field",), "Elasticsearch / OpenSearch rank_features: {id, FIELD: {label: weight}}"),
}


def check_format(name: str, path: str | os.PathLike | None = None) -> Format:
    """The format called ``name``, refusing an unknown name or an output path without the format's extension (so
    ``lens encode --output x.jsonl`` never writes a .npy matrix under that name)."""
    if name not in FORMATS:
        raise ValueError(f"unknown export format {name!r}; valid: {', '.join(FORMATS)}")
    fmt = FORMATS[name]
    given = None if path is None else os.fspath(path)
    if given is not None and not given.endswith(fmt.suffix):
        what = "JSON lines" if fmt.sparse else "a NumPy matrix"
        others = [n for n, f in FORMATS.items() if given.endswith(f.suffix)]
        instead = f", or choose --format {' / '.join(others)} to write {os.path.splitext(given)[1]}" if others else ""
        raise ValueError(f"format {name!r} writes {what}: give an output file ending in {fmt.suffix} (got {given!r})"
                         f"{instead}")
    return fmt


class ExportWriter:
    """Writes an export of ``rows`` vectors into the file ``part`` a block of rows at a time, appending, so that only
    a block is ever in memory: a sparse format its JSON lines, ``npy`` the rows of a ``(rows, dim)`` C-order matrix
    after the header its first block writes (its dtype and width). The caller renames ``part`` into place once
    every row is written (``lens.atomic``).

    ``done`` / ``size``: continue a part file whose first ``done`` rows (its first ``size`` bytes) were written and
    made durable by :meth:`sync`; whatever follows them (a block cut short) is dropped.
    """

    def __init__(self, part: str | os.PathLike, name: str, rows: int, labels: Sequence[str] | None = None,
                 options: ExportOptions | None = None, *, done: int = 0, size: int = 0) -> None:
        self.format, self.name = check_format(name), name
        if self.format.sparse and labels is None:
            raise ValueError(f"format {name!r} needs cluster labels (one per cluster)")
        self.part, self.rows, self.done = Path(part), rows, done
        self.labels, self.options = labels, options or ExportOptions()
        self._dtype: np.dtype | None = None  # npy: the header's dtype, once written
        self._file: BinaryIO | None = open(self.part, "r+b" if done else "wb")
        if done:
            if not self.format.sparse:
                self._dtype = self._read_npy_header()
            self._file.truncate(size)
        self._file.seek(0, os.SEEK_END)

    def _read_npy_header(self) -> np.dtype:
        """The dtype of the part's npy header, after checking it is this export's (``rows`` rows)."""
        f = self._file
        version = np.lib.format.read_magic(f)
        shape, _, dtype = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                           else np.lib.format.read_array_header_2_0(f))
        if not shape or shape[0] != self.rows:
            raise ValueError(f"{self.part} holds a matrix of shape {shape}, not {self.rows} rows: not this export's "
                             "part")
        return dtype

    def write(self, vectors: np.ndarray, ids: Sequence[str] | None = None,
              texts: Sequence[str] | None = None) -> list[int] | None:
        """Write the next block of rows; returns, for a sparse format, the entries each record holds as written
        (after pyserini's rounding), else None."""
        n = len(vectors)
        if self.done + n > self.rows:
            raise ValueError(f"{self.done + n} rows written to an export of {self.rows}")
        assert self._file is not None
        if self.format.records is None:
            x = np.asarray(vectors)
            if self._dtype is None:
                self._dtype = x.dtype
                np.lib.format.write_array_header_1_0(self._file, {
                    "descr": np.lib.format.dtype_to_descr(x.dtype), "fortran_order": False,
                    "shape": (self.rows, *x.shape[1:])})
            self._file.write(np.ascontiguousarray(x, dtype=self._dtype).tobytes())
            self.done += n
            return None
        if ids is None:
            raise ValueError(f"format {self.name!r} needs ids (one per vector)")
        records = list(self.format.records(vectors, ids, self.labels, texts, self.options))
        self._file.write(_jsonl(records))
        self.done += n
        return [_entries(r, self.options.field) for r in records]

    def sync(self) -> int:
        """Make what was written durable; returns the part file's size (what ``size`` resumes from)."""
        assert self._file is not None
        self._file.flush()
        os.fsync(self._file.fileno())
        return self._file.tell()

    def close(self) -> None:
        """Sync and let go of the part file (complete: every row written)."""
        if self.done != self.rows:
            raise ValueError(f"{self.done} of {self.rows} rows written to {self.part}")
        if self._dtype is None and not self.format.sparse:  # an npy export of zero rows and no block
            self.write(np.zeros((0, 0), dtype=np.float32))
        self.sync()
        self._file.close()
        self._file = None


def _jsonl(records: Iterator[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")


def write_export(path: str | os.PathLike, name: str, vectors: np.ndarray, ids: Sequence[str] | None = None,
                 labels: Sequence[str] | None = None, texts: Sequence[str] | None = None,
                 options: ExportOptions | None = None) -> list[int] | None:
    """Write ``vectors`` (N, k) to ``path`` in format ``name``, atomically (``lens.atomic``); returns, for a sparse
    format, the entries each record holds as written (after pyserini's rounding), else None.

    The sparse formats need ``ids`` (one string per row) and ``labels`` (``cluster_labels``, one per column);
    ``texts`` fills Pyserini's ``contents``. (``lens encode`` writes an export a block of rows at a time, through
    the same :class:`ExportWriter`.)
    """
    fmt = check_format(name, path)
    if fmt.sparse and (ids is None or labels is None):
        raise ValueError(f"format {name!r} needs ids (one per vector) and cluster labels (one per cluster)")
    with atomic_file(path) as tmp:
        writer = ExportWriter(tmp, name, len(vectors), labels, options)
        entries = writer.write(vectors, ids, texts)
        writer.close()
    logger.info("wrote %s (%s, %d bytes)", path, name, os.path.getsize(path))
    return entries


def _entries(record: dict, field: str) -> int:
    """The weights a sparse record holds: pyserini's ``vector``, qdrant's ``indices``, rank-features' ``field``."""
    for key in ("vector", "indices", field):
        if key in record:
            return len(record[key])
    raise ValueError(f"not a sparse record: {sorted(record)}")
