"""The BM25 part of a hybrid index (kept by ``lens index build`` unless ``--no-bm25``): each document's BM25 terms,
saved beside the FAISS vectors and scored with the project's one BM25 set-up (``lens.bm25``: bm25s's tokeniser,
English stemming and stopwords, Lucene scoring with k1 1.5 and b 0.75).

The part keeps every document's terms (as ids into its vocabulary), not the texts and not precomputed scores, so
adding or removing documents changes it exactly: the part after a change scores as one built from the whole corpus
(IDF and average length included). Its scorer is a term-major table of each term's documents and counts, built
from the terms when the part is loaded (linear in the corpus's terms) or at its first query after a change. It
scores with the corpus's statistics (``lens.bm25.BM25Stats``) or with those given: the shards of one index add
theirs up, so each shard scores its documents as one index of all of them would (``index.shards``).

Saved as ``bm25.npz`` (numpy arrays, read with ``allow_pickle=False``): ``labels`` (int64, the index's internal
id of each row), ``terms`` (int32, every row's term ids one after another), ``offsets`` (int64, row ``i``'s terms
are ``terms[offsets[i]:offsets[i + 1]]``) and ``vocab`` (uint8, the UTF-8 terms joined by newlines, id order).
The manifest records its checksum like the other data files, and ``bm25`` holds :meth:`BM25Part.manifest_entry`.
"""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any, BinaryIO, Mapping, NamedTuple, Sequence

import numpy as np

from lens.bm25 import BM25_CONFIG, BM25Stats, lucene_idf, saturated_tf, tokenize

from .rows import RowBlocks

__all__ = ["BM25_FILE", "PART_VERSION", "BM25Part", "BM25Scores"]

logger = logging.getLogger(__name__)

BM25_FILE = "bm25.npz"
PART_VERSION = 1


class BM25Scores(NamedTuple):
    """A search's BM25 side: each query's ``(rows, scores)`` of a part's rows searched (those a filter allows)
    holding its terms (``BM25Part.sparse_scores``) and its maximum over the documents searched (the divisor of
    ``index.bm25_fusion``; over all shards for a sharded index)."""

    scores: list[tuple[np.ndarray, np.ndarray]]
    maxima: list[float]


class BM25Part:
    """Rows of BM25 terms, one per document, keyed by the index's internal ids (``labels``); held as flat blocks
    (``index.rows.RowBlocks``: no Python object per document)."""

    _WHAT = "the BM25 part"

    def __init__(self, rows: RowBlocks | None, vocab: list[str], scorer: "_Postings | None" = None,
                 labels: np.ndarray | None = None) -> None:
        """``rows`` None: a part read for searching alone (:meth:`read`'s ``scorer_only``), which holds ``scorer``
        and its rows' ``labels``, and refuses changes and saves."""
        if rows is None and (scorer is None or labels is None):
            raise ValueError("BM25 part: give its rows, or its scorer and labels for a part read to search only")
        self._rows = rows
        self._labels = None if rows is not None else np.asarray(labels, dtype=np.int64)
        self._vocab = vocab
        self._ids = {t: i for i, t in enumerate(vocab)}
        self._scorer: _Postings | None = scorer
        self._lookup: tuple[np.ndarray, np.ndarray] | None = None  # (argsort of labels, sorted labels)
        n = len(rows) if rows is not None else len(scorer.lengths)
        if n != len(self.labels):
            raise ValueError(f"BM25 part: {len(self.labels)} labels but {n} rows")

    @property
    def labels(self) -> np.ndarray:
        """The internal ids of the rows, in row order (int64)."""
        return self._labels if self._rows is None else self._rows.labels

    @property
    def scorer_only(self) -> bool:
        """Whether this part was read to search only (``read(scorer_only=True)``): it holds each term's documents
        and counts, not each document's terms, so it cannot change or be saved."""
        return self._rows is None

    def _check_rows(self, what: str) -> None:
        if self._rows is None:
            raise ValueError(f"cannot {what}: this BM25 part was read to search only (an index loaded with "
                             "read_only=True); load the index with read_only=False to change or save it")

    # ---- building and changing ---------------------------------------------------------------

    @classmethod
    def empty(cls) -> "BM25Part":
        """A part without documents, to :meth:`add` to."""
        return cls(RowBlocks(np.int32, cls._WHAT), [])

    @classmethod
    def build(cls, texts: Sequence[str], labels: Sequence[int]) -> "BM25Part":
        """The part of documents ``texts`` (their full text, as encoded) with internal ids ``labels``."""
        part = cls.empty()
        part.add(texts, labels)
        return part

    def add(self, texts: Sequence[str], labels: Sequence[int]) -> None:
        """Add documents (their texts, one per label); labels must be new."""
        self.add_terms(self.terms_of(texts, len(labels)), labels)

    @staticmethod
    def terms_of(texts: Sequence[str], n: int) -> list[list[str]]:
        """The BM25 terms of ``n`` documents' ``texts`` (checked: one text per document), for :meth:`add_terms`."""
        if texts is None or isinstance(texts, str) or len(texts) != n:
            got = "none" if texts is None else "one string" if isinstance(texts, str) else f"{len(texts)}"
            raise ValueError(f"the index keeps a BM25 part, which needs each document's text: give texts= with one "
                             f"text per document ({n}), got {got}")
        return tokenize(_strings(texts, "texts")) if n else []

    def add_terms(self, terms: Sequence[Sequence[str]], labels: Sequence[int]) -> None:
        """Add documents given as their BM25 terms (:meth:`terms_of`); labels must be new."""
        if len(terms) != len(labels):
            raise ValueError(f"the BM25 part needs one text per document: got {len(terms)} texts for {len(labels)} "
                             "documents")
        self._check_rows("add documents")
        vocab = len(self._vocab)
        try:
            self._rows.add([np.array([self._term_id(t) for t in doc_terms], dtype=np.int32) for doc_terms in terms],
                           labels)
        except ValueError:
            for t in self._vocab[vocab:]:  # nothing added: neither are the new terms
                del self._ids[t]
            del self._vocab[vocab:]
            raise
        self._scorer = self._lookup = None

    def _term_id(self, term: str) -> int:
        i = self._ids.get(term)
        if i is None:
            i = self._ids[term] = len(self._vocab)
            self._vocab.append(term)
        return i

    def remove(self, labels: Sequence[int]) -> None:
        """Drop the rows of these internal ids (those not held are ignored); unused terms leave the vocabulary."""
        self._check_rows("remove documents")
        before = len(self._rows)
        self._rows.remove(labels)
        if len(self._rows) == before:
            return
        used = np.unique(self._rows.values())
        remap = np.full(len(self._vocab), -1, dtype=np.int64)
        remap[used] = np.arange(len(used))
        self._rows.map_values(remap)
        self._vocab = [self._vocab[i] for i in used]
        self._ids = {t: i for i, t in enumerate(self._vocab)}
        self._scorer = self._lookup = None

    def __len__(self) -> int:
        return len(self.labels)

    # ---- scoring -----------------------------------------------------------------------------

    def _index(self) -> "_Postings":
        if self._scorer is None:
            self._scorer = _Postings.of_flat(self._rows.values().astype(np.int64), self._rows.lengths(),
                                             len(self._vocab))
        return self._scorer

    @staticmethod
    def query_terms(queries: Sequence[str]) -> list[list[str]]:
        """Each query's BM25 terms (``lens.bm25.tokenize``)."""
        return tokenize(_strings(queries, "texts"))

    def stats(self, terms: Sequence[str]) -> BM25Stats:
        """This part's statistics for one query's terms: its documents, their total length, each term's
        document frequency (0 for a term it does not hold)."""
        post = self._index()
        ids = [self._ids.get(t) for t in terms]
        df = np.array([0 if i is None else post.df(i) for i in ids], dtype=np.int64)
        return BM25Stats(len(self), post.total_length, df)

    def scores(self, terms: Sequence[str], stats: BM25Stats | None = None) -> np.ndarray:
        """Every row's BM25 score (float32, in ``labels`` order) for one query's terms: :meth:`sparse_scores`
        spread over all rows, 0 where a row holds none of the terms."""
        rows, values = self.sparse_scores(terms, stats)
        out = np.zeros(len(self), dtype=np.float32)
        out[rows] = values
        return out

    def sparse_scores(self, terms: Sequence[str], stats: BM25Stats | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The BM25 scores of the rows holding any of one query's terms (each occurrence counts, as in bm25s):
        ``(rows, scores)``, rows ascending (int64), scores float32 and positive; with this part's statistics or
        ``stats`` (:meth:`stats` of the same terms, added up over the parts of one corpus). What a search keeps
        of each query follows the terms' postings, not the corpus's size."""
        post = self._index()
        stats = self.stats(terms) if stats is None else stats
        if len(stats.df) != len(terms):
            raise ValueError(f"BM25 statistics for {len(stats.df)} terms given for a query of {len(terms)} terms")
        empty = (np.zeros(0, np.int64), np.zeros(0, np.float32))
        if not len(self) or stats.documents == 0 or stats.length == 0:
            return empty
        idf = lucene_idf(stats.df, stats.documents)
        avg = stats.length / stats.documents
        acc = np.zeros(len(self), dtype=np.float64)  # one query's: measured faster than sorting the postings
        for term, weight in zip(terms, idf):
            i = self._ids.get(term)
            if i is None:
                continue
            r, tf = post.postings(i)
            acc[r] += weight * saturated_tf(tf, post.lengths[r], avg)  # term by term, as bm25s sums
        rows = np.flatnonzero(acc > 0)  # a comparison first: ten times faster than nonzero on floats
        return rows.astype(np.int64), acc[rows].astype(np.float32)

    def rows_of(self, labels: np.ndarray) -> np.ndarray:
        """The row of each internal id in ``labels`` (all held by this part)."""
        if self._lookup is None:
            order = np.argsort(self.labels, kind="stable")
            self._lookup = (order, self.labels[order])
        order, sorted_labels = self._lookup
        return order[np.searchsorted(sorted_labels, np.asarray(labels, dtype=np.int64))]

    # ---- saving and loading ------------------------------------------------------------------

    def manifest_entry(self) -> dict[str, Any]:
        """What the manifest records about the part (its file's checksum is in ``files``)."""
        return {"version": PART_VERSION, "file": BM25_FILE, "config": dict(BM25_CONFIG), "documents": len(self),
                "terms": len(self._vocab)}

    def write(self, path: Path) -> None:
        """Write ``bm25.npz`` to ``path`` (inside the save's temporary directory)."""
        self._check_rows("save")
        labels, terms, offsets = self._rows.flat()
        vocab = np.frombuffer("\n".join(self._vocab).encode("utf-8"), dtype=np.uint8)
        with open(path, "wb") as f:
            np.savez(f, labels=labels, terms=terms, offsets=offsets, vocab=vocab)

    @classmethod
    def read(cls, f: BinaryIO, path: Path, entry: Mapping[str, Any], scorer_only: bool = False) -> "BM25Part":
        """Parse ``bm25.npz`` from the open file ``f`` (checksummed by the caller) and check it against the
        manifest's ``bm25`` entry. ``scorer_only``: keep what searching needs (each term's documents and counts),
        not each document's terms: about half the memory; the part then refuses changes and saves."""
        if not isinstance(entry, Mapping) or entry.get("version") != PART_VERSION:
            found = entry.get("version") if isinstance(entry, Mapping) else entry
            raise ValueError(f"the BM25 part of {path.parent} has version {found!r}; this LENS reads version "
                             f"{PART_VERSION}: rebuild the index with `lens index build --bm25`")
        if entry.get("config") != BM25_CONFIG:
            raise ValueError(f"the BM25 part of {path.parent} was built with BM25 settings {entry.get('config')!r}, "
                             f"this LENS scores with {BM25_CONFIG!r}: rebuild the index with `lens index build --bm25`")
        f.seek(0)
        try:
            with np.load(io.BytesIO(f.read()), allow_pickle=False) as z:
                labels, terms, offsets, vocab = (z[k] for k in ("labels", "terms", "offsets", "vocab"))
        except (ValueError, KeyError, OSError) as e:
            raise ValueError(f"BM25 part {path} could not be read ({e}); rebuild the index") from e
        text = vocab.astype(np.uint8).tobytes().decode("utf-8")
        words = text.split("\n") if text else []
        n = len(labels)
        problems = []
        if n != entry.get("documents") or offsets.shape != (n + 1,):
            problems.append(f"{n} rows, {offsets.size} offsets, manifest says {entry.get('documents')} documents")
        elif offsets[0] != 0 or offsets[-1] != len(terms) or (np.diff(offsets) < 0).any():
            problems.append("its offsets do not cover its terms")
        elif len(terms) and (terms.min() < 0 or terms.max() >= len(words)):
            problems.append("a term id lies outside its vocabulary")
        if problems:
            raise ValueError(f"BM25 part {path} is inconsistent: {'; '.join(problems)}; rebuild the index")
        # built now, so the first query (a served one) does not pay for it
        scorer = _Postings.of_flat(terms.astype(np.int64), np.diff(offsets), len(words))
        if scorer_only:
            return cls(None, words, scorer, labels=labels)
        return cls(RowBlocks.from_flat(labels, terms, offsets, np.int32, cls._WHAT), words, scorer)


class _Postings:
    """Term-major counts of a part's rows: for each term id, the rows holding it and how often (CSC-like arrays),
    and every row's length in terms."""

    def __init__(self, indptr: np.ndarray, rows: np.ndarray, tf: np.ndarray, lengths: np.ndarray) -> None:
        self.indptr, self.rows, self.tf, self.lengths = indptr, rows, tf, lengths
        self.total_length = int(lengths.sum(dtype=np.int64))  # asked for by every query's statistics

    @classmethod
    def of_flat(cls, terms: np.ndarray, lengths: np.ndarray, n_terms: int) -> "_Postings":
        """The table of rows given as every row's term ids one after another and each row's length."""
        n = max(len(lengths), 1)
        row_of = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
        keys, tf = np.unique(terms * n + row_of, return_counts=True)  # by term, then row
        indptr = np.zeros(n_terms + 1, dtype=np.int64)
        np.cumsum(np.bincount(keys // n, minlength=n_terms), out=indptr[1:])
        return cls(indptr, (keys % n).astype(np.int32), tf.astype(np.int32), np.asarray(lengths, dtype=np.int32))

    def df(self, term_id: int) -> int:
        return int(self.indptr[term_id + 1] - self.indptr[term_id])

    def postings(self, term_id: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows, counts) of one term."""
        a, b = self.indptr[term_id], self.indptr[term_id + 1]
        return self.rows[a:b], self.tf[a:b]


def _strings(texts: Sequence[str], what: str) -> list[str]:
    """``texts`` as a list, each checked to be a string (the BM25 tokenizer's input)."""
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"{what}[{i}] is not a string (got {type(text).__name__} {str(text)[:40]!r}): the BM25 "
                             "part needs each text as a string")
    return texts
