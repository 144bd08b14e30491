"""The document-frequency part of an index with a lexicon part: which clusters each document weighs above zero.

``lens search --idf`` multiplies a query's lexicon weights by each cluster's inverse document frequency in the
index's own corpus (``index.vectors.cluster_idf``), the BM25 weighting the model cannot know for a corpus it never
saw. An index built with idf (``lens index build``'s default; ``--no-idf``: none) keeps the part. It keeps every document's non-zero clusters (as stored: after ``top_m`` pruning), not only the counts,
so adding, replacing or removing documents changes the frequencies exactly: after any change they are those of an
index built from the documents it holds. A sharded index sums its shards' counts (``index.shards``).

Saved as ``df.npz`` (numpy arrays, read with ``allow_pickle=False``): ``labels`` (int64, the index's internal id of
each row), ``clusters`` (uint16 below 65,536 clusters, else uint32: every row's clusters one after another) and
``offsets`` (int64, row ``i``'s clusters are ``clusters[offsets[i]:offsets[i + 1]]``). The manifest records its
checksum like the other data files, and ``df`` holds :meth:`DocFrequencyPart.manifest_entry`.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, BinaryIO, Mapping, Sequence

import numpy as np

from .vectors import cluster_idf

__all__ = ["DF_FILE", "DF_PART_VERSION", "DocFrequencyPart"]

DF_FILE = "df.npz"
DF_PART_VERSION = 1


class DocFrequencyPart:
    """Each document's non-zero lexicon clusters, keyed by the index's internal ids (``labels``), and the
    document frequency of every cluster (``df``), kept in step."""

    def __init__(self, dim: int) -> None:
        self.dim = int(dim)
        self.labels = np.zeros(0, np.int64)
        self._rows: list[np.ndarray] = []
        self.df = np.zeros(self.dim, np.int64)

    def _dtype(self) -> type:
        return np.uint16 if self.dim <= 1 << 16 else np.uint32

    @staticmethod
    def rows_of(lexicon: np.ndarray) -> list[np.ndarray]:
        """The non-zero columns of each row of ``lexicon`` (the stored, pruned weights), for :meth:`add_rows`."""
        return [np.flatnonzero(row) for row in lexicon]

    def add_rows(self, rows: Sequence[np.ndarray], labels: Sequence[int]) -> None:
        """Add documents given as their non-zero clusters (:meth:`rows_of`); labels must be new."""
        labels = np.asarray(labels, dtype=np.int64)
        if len(rows) != len(labels):
            raise ValueError(f"the document-frequency part needs one row per document: got {len(rows)} rows for "
                             f"{len(labels)} documents")
        if np.isin(labels, self.labels).any() or len(np.unique(labels)) != len(labels):
            raise ValueError("the document-frequency part already holds some of these documents' internal ids")
        if not len(labels):
            return
        rows = [np.asarray(r).astype(self._dtype()) for r in rows]
        for r in rows:
            self.df[r.astype(np.int64)] += 1  # a row's clusters are distinct (flatnonzero)
        self._rows.extend(rows)
        self.labels = np.concatenate([self.labels, labels])

    def remove(self, labels: Sequence[int]) -> None:
        """Drop the rows of these internal ids (those not held are ignored)."""
        drop = np.isin(self.labels, np.asarray(labels, dtype=np.int64))
        if not drop.any():
            return
        for r, d in zip(self._rows, drop):
            if d:
                self.df[r.astype(np.int64)] -= 1
        self._rows = [r for r, d in zip(self._rows, drop) if not d]
        self.labels = self.labels[~drop]

    def __len__(self) -> int:
        return len(self.labels)

    def idf(self) -> np.ndarray:
        """Each cluster's BM25 inverse document frequency over the documents held (``cluster_idf``)."""
        return cluster_idf(self.df, len(self))

    # ---- saving and loading ------------------------------------------------------------------

    def manifest_entry(self) -> dict[str, Any]:
        """What the manifest records about the part (its file's checksum is in ``files``)."""
        return {"version": DF_PART_VERSION, "file": DF_FILE, "dim": self.dim, "documents": len(self)}

    def write(self, path: Path) -> None:
        """Write ``df.npz`` to ``path`` (inside the save's temporary directory)."""
        offsets = np.zeros(len(self._rows) + 1, dtype=np.int64)
        np.cumsum([len(r) for r in self._rows], out=offsets[1:])
        clusters = np.concatenate(self._rows) if self._rows else np.zeros(0, self._dtype())
        with open(path, "wb") as f:
            np.savez(f, labels=self.labels, clusters=clusters.astype(self._dtype()), offsets=offsets)

    @classmethod
    def read(cls, f: BinaryIO, path: Path, entry: Mapping[str, Any], dim: int) -> "DocFrequencyPart":
        """Parse ``df.npz`` from the open file ``f`` (checksummed by the caller) and check it against the
        manifest's ``df`` entry and the index's lexicon width ``dim``."""
        if not isinstance(entry, Mapping) or entry.get("version") != DF_PART_VERSION:
            found = entry.get("version") if isinstance(entry, Mapping) else entry
            raise ValueError(f"the document-frequency part of {path.parent} has version {found!r}; this LENS reads "
                             f"version {DF_PART_VERSION}: rebuild the index with `lens index build`")
        f.seek(0)
        try:
            with np.load(io.BytesIO(f.read()), allow_pickle=False) as z:
                labels, clusters, offsets = (z[k] for k in ("labels", "clusters", "offsets"))
        except (ValueError, KeyError, OSError) as e:
            raise ValueError(f"document-frequency part {path} could not be read ({e}); rebuild the index") from e
        n = len(labels)
        problems = []
        if entry.get("dim") != dim:
            problems.append(f"it counts {entry.get('dim')} clusters, the index's lexicon part has {dim}")
        elif n != entry.get("documents") or offsets.shape != (n + 1,):
            problems.append(f"{n} rows, {offsets.size} offsets, manifest says {entry.get('documents')} documents")
        elif offsets[0] != 0 or offsets[-1] != len(clusters) or (np.diff(offsets) < 0).any():
            problems.append("its offsets do not cover its clusters")
        elif len(clusters) and int(clusters.max()) >= dim:
            problems.append("a cluster id lies outside the lexicon part")
        if problems:
            raise ValueError(f"document-frequency part {path} is inconsistent: {'; '.join(problems)}; rebuild the "
                             "index")
        part = cls(dim)
        part.labels = labels.astype(np.int64)
        part._rows = [clusters[offsets[i] : offsets[i + 1]] for i in range(n)]
        part.df = np.bincount(clusters.astype(np.int64), minlength=dim).astype(np.int64)
        return part
