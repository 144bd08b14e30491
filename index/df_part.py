"""The document-frequency part of an index with a lexicon part: which clusters each document weighs above zero.

``lens search --idf`` multiplies a query's lexicon weights by each cluster's inverse document frequency in the
index's own corpus (``index.vectors.cluster_idf``), the BM25 weighting the model cannot know for a corpus it never
saw. An index built with idf (``lens index build``'s default; ``--no-idf``: none) keeps the part. It keeps every document's non-zero clusters (as stored: after ``top_m`` pruning), not only the counts,
so adding, replacing or removing documents changes the frequencies exactly: after any change they are those of an
index built from the documents it holds. A sharded index sums its shards' counts (``index.shards``).

Searching needs only the counts: an index loaded read-only (``HybridIndex.load(read_only=True)``, as ``lens search``
and ``lens serve`` load one) reads ``df`` alone, one integer per cluster, instead of the rows (about 2 bytes per
non-zero cluster of every document), and refuses changes.

Saved as ``df.npz`` (numpy arrays, read with ``allow_pickle=False``): ``labels`` (int64, the index's internal id of
each row), ``clusters`` (uint16 below 65,536 clusters, else uint32: every row's clusters one after another),
``offsets`` (int64, row ``i``'s clusters are ``clusters[offsets[i]:offsets[i + 1]]``) and, since version 2, ``df``
(int64, each cluster's count: what a read-only load reads; version 1, without it, is still read). The manifest
records its checksum like the other data files, and ``df`` holds :meth:`DocFrequencyPart.manifest_entry`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, BinaryIO, Mapping, Sequence

import numpy as np

from .rows import RowBlocks
from .vectors import cluster_idf

__all__ = ["DF_FILE", "DF_PART_VERSION", "DocFrequencyPart"]

DF_FILE = "df.npz"
DF_PART_VERSION = 2
READABLE_VERSIONS = (1, 2)  # version 1 has no ``df`` array: its counts come from its rows
_COUNT_CHUNK = 1 << 22  # clusters counted at a time when reading the rows (32 MB of int64 at most)


class DocFrequencyPart:
    """Each document's non-zero lexicon clusters, keyed by the index's internal ids (``labels``), and the
    document frequency of every cluster (``df``), kept in step; or, read with ``counts_only``, the counts alone
    (searchable, not changeable). The rows are held as flat blocks (``index.rows.RowBlocks``), so memory is the
    saved file's and a change is vectorised, with no Python object per document."""

    def __init__(self, dim: int) -> None:
        self.dim = int(dim)
        self._rows: RowBlocks | None = RowBlocks(self._dtype(), "the document-frequency part")
        self._documents = 0  # the count of a counts-only part (it keeps no labels)
        self.df = np.zeros(self.dim, np.int64)

    @property
    def counts_only(self) -> bool:
        """True when read with ``counts_only``: the counts without the rows, so no document can be added,
        removed or written."""
        return self._rows is None

    @property
    def labels(self) -> np.ndarray:
        """The internal ids of the documents held, in the order added (empty for a counts-only part)."""
        return np.zeros(0, np.int64) if self._rows is None else self._rows.labels

    def _check_rows(self, action: str) -> RowBlocks:
        if self._rows is None:
            raise ValueError(f"cannot {action}: the document frequencies were loaded without their rows "
                             "(a read-only load); load the index with read_only=False to change or save it")
        return self._rows

    def _dtype(self) -> type:
        return np.uint16 if self.dim <= 1 << 16 else np.uint32

    def _count(self, clusters: np.ndarray, sign: int = 1) -> None:
        for start in range(0, len(clusters), _COUNT_CHUNK):  # bincount widens to int64: a chunk at a time
            self.df += sign * np.bincount(clusters[start : start + _COUNT_CHUNK], minlength=self.dim)

    @staticmethod
    def rows_of(lexicon: np.ndarray) -> list[np.ndarray]:
        """The non-zero columns of each row of ``lexicon`` (the stored, pruned weights), for :meth:`add_rows`."""
        return [np.flatnonzero(row) for row in lexicon]

    def add_rows(self, rows: Sequence[np.ndarray], labels: Sequence[int]) -> None:
        """Add documents given as their non-zero clusters (:meth:`rows_of`: distinct, within ``dim``); labels must
        be new."""
        self._count(self._check_rows("add documents").add(rows, labels))

    def remove(self, labels: Sequence[int]) -> None:
        """Drop the rows of these internal ids (those not held are ignored)."""
        self._count(self._check_rows("remove documents").remove(labels), -1)

    def __len__(self) -> int:
        return self._documents if self._rows is None else len(self._rows)

    def idf(self) -> np.ndarray:
        """Each cluster's BM25 inverse document frequency over the documents held (``cluster_idf``)."""
        return cluster_idf(self.df, len(self))

    # ---- saving and loading ------------------------------------------------------------------

    def manifest_entry(self) -> dict[str, Any]:
        """What the manifest records about the part (its file's checksum is in ``files``)."""
        return {"version": DF_PART_VERSION, "file": DF_FILE, "dim": self.dim, "documents": len(self)}

    def write(self, path: Path) -> None:
        """Write ``df.npz`` to ``path`` (inside the save's temporary directory)."""
        labels, clusters, offsets = self._check_rows("save the index").flat()
        with open(path, "wb") as f:
            np.savez(f, labels=labels, clusters=clusters, offsets=offsets, df=self.df)

    @classmethod
    def read(cls, f: BinaryIO, path: Path, entry: Mapping[str, Any], dim: int,
             counts_only: bool = False) -> "DocFrequencyPart":
        """Parse ``df.npz`` from the open file ``f`` (checksummed by the caller) and check it against the
        manifest's ``df`` entry and the index's lexicon width ``dim``. ``counts_only``: read the counts alone
        (a version 1 file has none, so its rows are counted and dropped)."""
        if not isinstance(entry, Mapping) or entry.get("version") not in READABLE_VERSIONS:
            found = entry.get("version") if isinstance(entry, Mapping) else entry
            raise ValueError(f"the document-frequency part of {path.parent} has version {found!r}; this LENS reads "
                             f"versions {', '.join(map(str, READABLE_VERSIONS))}: rebuild the index with "
                             "`lens index build`")
        if entry.get("dim") != dim:
            raise ValueError(f"document-frequency part {path} is inconsistent: it counts {entry.get('dim')} "
                             f"clusters, the index's lexicon part has {dim}; rebuild the index")
        documents = entry.get("documents")
        f.seek(0)
        try:  # members are read one by one from the file: a counts-only read never reads the rows of version 2
            with np.load(f, allow_pickle=False) as z:
                if counts_only and entry["version"] >= 2:
                    labels = clusters = offsets = None
                    df = z["df"]
                else:
                    labels, clusters, offsets = (z[k] for k in ("labels", "clusters", "offsets"))
                    df = z["df"] if entry["version"] >= 2 else None
        except (ValueError, KeyError, OSError, EOFError) as e:
            raise ValueError(f"document-frequency part {path} could not be read ({e}); rebuild the index") from e
        problems = []
        if labels is not None:
            n = len(labels)
            if n != documents or offsets.shape != (n + 1,):
                problems.append(f"{n} rows, {offsets.size} offsets, manifest says {documents} documents")
            elif offsets[0] != 0 or offsets[-1] != len(clusters) or (np.diff(offsets) < 0).any():
                problems.append("its offsets do not cover its clusters")
            elif len(clusters) and int(clusters.max()) >= dim:
                problems.append("a cluster id lies outside the lexicon part")
            else:
                counter = cls(dim)
                counter._count(clusters)
                if df is not None and not np.array_equal(df, counter.df):
                    problems.append("its counts are not those of its rows")
                df = counter.df
        elif df.shape != (dim,) or not isinstance(documents, int) or (df < 0).any() or (df > documents).any():
            problems.append(f"its counts (shape {df.shape}) do not fit {dim} clusters of {documents!r} documents")
        if problems:
            raise ValueError(f"document-frequency part {path} is inconsistent: {'; '.join(problems)}; rebuild the "
                             "index")
        part = cls(dim)
        part.df = df.astype(np.int64)
        if counts_only:
            part._rows, part._documents = None, int(documents)
        else:
            part._rows = RowBlocks.from_flat(labels, clusters, offsets, part._dtype(), "the document-frequency part")
        return part
