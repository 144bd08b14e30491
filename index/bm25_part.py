"""The BM25 part of a hybrid index (``lens index build --bm25``): each document's BM25 terms, saved beside the
FAISS vectors and scored with the project's one BM25 set-up (``lens.bm25``: bm25s, Lucene scoring, English
stemming and stopwords).

The part keeps every document's terms (as ids into its vocabulary), not the texts and not bm25s's precomputed
scores, so adding or removing documents changes it exactly: the part after a change scores as one built from
the whole corpus (IDF and average length included). The scorer is built from the terms when the part is loaded
(linear in the corpus's terms) or at its first query after a change.

Saved as ``bm25.npz`` (numpy arrays, read with ``allow_pickle=False``): ``labels`` (int64, the index's internal
id of each row), ``terms`` (int32, every row's term ids one after another), ``offsets`` (int64, row ``i``'s terms
are ``terms[offsets[i]:offsets[i + 1]]``) and ``vocab`` (uint8, the UTF-8 terms joined by newlines, id order).
The manifest records its checksum like the other data files, and ``bm25`` holds :meth:`BM25Part.manifest_entry`.
"""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any, BinaryIO, Mapping, Sequence

import numpy as np

from lens.bm25 import BM25_CONFIG, BM25Index, tokenize

__all__ = ["BM25_FILE", "PART_VERSION", "BM25Part"]

logger = logging.getLogger(__name__)

BM25_FILE = "bm25.npz"
PART_VERSION = 1


class BM25Part:
    """Rows of BM25 terms, one per document, keyed by the index's internal ids (``labels``)."""

    def __init__(self, labels: np.ndarray, rows: list[np.ndarray], vocab: list[str]) -> None:
        self.labels = np.asarray(labels, dtype=np.int64)
        self._rows = rows
        self._vocab = vocab
        self._ids = {t: i for i, t in enumerate(vocab)}
        self._scorer: BM25Index | None = None
        if len(self._rows) != len(self.labels):
            raise ValueError(f"BM25 part: {len(self.labels)} labels but {len(self._rows)} rows")

    # ---- building and changing ---------------------------------------------------------------

    @classmethod
    def build(cls, texts: Sequence[str], labels: Sequence[int]) -> "BM25Part":
        """The part of documents ``texts`` (their full text, as encoded) with internal ids ``labels``."""
        part = cls(np.zeros(0, np.int64), [], [])
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
        return tokenize(list(texts)) if n else []

    def add_terms(self, terms: Sequence[Sequence[str]], labels: Sequence[int]) -> None:
        """Add documents given as their BM25 terms (:meth:`terms_of`); labels must be new."""
        labels = np.asarray(labels, dtype=np.int64)
        if len(terms) != len(labels):
            raise ValueError(f"the BM25 part needs one text per document: got {len(terms)} texts for {len(labels)} "
                             "documents")
        if np.isin(labels, self.labels).any() or len(np.unique(labels)) != len(labels):
            raise ValueError("the BM25 part already holds some of these documents' internal ids")
        if not len(labels):
            return
        for doc_terms in terms:
            self._rows.append(np.array([self._term_id(t) for t in doc_terms], dtype=np.int32))
        self.labels = np.concatenate([self.labels, labels])
        self._scorer = None

    def _term_id(self, term: str) -> int:
        i = self._ids.get(term)
        if i is None:
            i = self._ids[term] = len(self._vocab)
            self._vocab.append(term)
        return i

    def remove(self, labels: Sequence[int]) -> None:
        """Drop the rows of these internal ids (those not held are ignored); unused terms leave the vocabulary."""
        drop = np.isin(self.labels, np.asarray(labels, dtype=np.int64))
        if not drop.any():
            return
        self._rows = [r for r, d in zip(self._rows, drop) if not d]
        self.labels = self.labels[~drop]
        used = np.unique(np.concatenate(self._rows)) if self._rows else np.zeros(0, np.int64)
        remap = np.full(len(self._vocab), -1, dtype=np.int64)
        remap[used] = np.arange(len(used))
        self._rows = [remap[r].astype(np.int32) for r in self._rows]
        self._vocab = [self._vocab[i] for i in used]
        self._ids = {t: i for i, t in enumerate(self._vocab)}
        self._scorer = None

    def __len__(self) -> int:
        return len(self.labels)

    # ---- scoring -----------------------------------------------------------------------------

    def _index(self) -> BM25Index | None:
        if self._scorer is None and len(self):
            self._scorer = BM25Index.from_token_ids(self._rows, self._ids)
        return self._scorer

    def query_terms(self, queries: Sequence[str]) -> list[list[str]]:
        """Each query's BM25 terms (``lens.bm25.tokenize``)."""
        return tokenize(list(queries))

    def scores(self, terms: Sequence[str]) -> np.ndarray:
        """Every row's BM25 score (float32, in ``labels`` order) for one query's terms."""
        scorer = self._index()
        return scorer.scores(terms) if scorer is not None else np.zeros(0, np.float32)

    # ---- saving and loading ------------------------------------------------------------------

    def manifest_entry(self) -> dict[str, Any]:
        """What the manifest records about the part (its file's checksum is in ``files``)."""
        return {"version": PART_VERSION, "file": BM25_FILE, "config": dict(BM25_CONFIG), "documents": len(self),
                "terms": len(self._vocab)}

    def write(self, path: Path) -> None:
        """Write ``bm25.npz`` to ``path`` (inside the save's temporary directory)."""
        offsets = np.zeros(len(self._rows) + 1, dtype=np.int64)
        np.cumsum([len(r) for r in self._rows], out=offsets[1:])
        terms = np.concatenate(self._rows).astype(np.int32) if self._rows else np.zeros(0, np.int32)
        vocab = np.frombuffer("\n".join(self._vocab).encode("utf-8"), dtype=np.uint8)
        with open(path, "wb") as f:
            np.savez(f, labels=self.labels, terms=terms, offsets=offsets, vocab=vocab)

    @classmethod
    def read(cls, f: BinaryIO, path: Path, entry: Mapping[str, Any]) -> "BM25Part":
        """Parse ``bm25.npz`` from the open file ``f`` (checksummed by the caller) and check it against the
        manifest's ``bm25`` entry."""
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
        rows = [terms[offsets[i] : offsets[i + 1]].astype(np.int32) for i in range(n)]
        part = cls(labels.astype(np.int64), rows, words)
        part._index()  # built now, so the first query (a served one) does not pay for it
        return part
