"""Rows of integers of varying length keyed by an index's internal ids: the store behind the idf part's clusters
(``index.df_part``) and the BM25 part's terms (``index.bm25_part``).

Rows are held as flat blocks, one per addition or read (``labels``, every row's values one after another, and
offsets into them), so memory is that of the saved arrays, with no Python object per document, and a removal is
vectorised. Order is kept: the rows' order is their blocks' order, which is what the parts' saved files and
scorers index by.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

__all__ = ["RowBlocks"]


class _Block(NamedTuple):
    labels: np.ndarray  # (n,) int64
    values: np.ndarray  # every row's values, one row after another
    offsets: np.ndarray  # (n + 1,) int64: row i is values[offsets[i]:offsets[i + 1]]


def _offsets(lengths: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


class RowBlocks:
    """Rows of ``dtype`` values keyed by unique int64 labels, in the order added."""

    def __init__(self, dtype: type, what: str) -> None:
        """``what`` names the owner in errors ("the BM25 part")."""
        self.dtype = np.dtype(dtype)
        self._what = what
        self._blocks: list[_Block] = []
        self._labels: np.ndarray | None = None  # the blocks' labels joined (read-only), None until asked again

    @classmethod
    def from_flat(cls, labels: np.ndarray, values: np.ndarray, offsets: np.ndarray, dtype: type,
                  what: str) -> "RowBlocks":
        """One block of rows as a saved file holds them (checked by the caller), without copying where the dtypes
        already match."""
        rows = cls(dtype, what)
        if len(labels):
            rows._blocks.append(_Block(np.asarray(labels, dtype=np.int64), np.asarray(values, dtype=rows.dtype),
                                       np.asarray(offsets, dtype=np.int64)))
        return rows

    def __len__(self) -> int:
        return sum(len(b.labels) for b in self._blocks)

    @property
    def nbytes(self) -> int:
        """The bytes the rows' arrays hold (labels, values, offsets)."""
        return sum(b.labels.nbytes + b.values.nbytes + b.offsets.nbytes for b in self._blocks)

    @property
    def labels(self) -> np.ndarray:
        """The rows' labels in row order (int64, read-only; one array, kept until the rows change)."""
        if self._labels is None:
            self._labels = (np.concatenate([b.labels for b in self._blocks]) if self._blocks
                            else np.zeros(0, np.int64))
            self._labels.flags.writeable = False
        return self._labels

    def add(self, rows: Sequence[np.ndarray], labels: Sequence[int]) -> np.ndarray:
        """Append ``rows`` (one array of values each) under new ``labels``; return their values one row after
        another (what an owner counts). A label held already or given twice is refused, and nothing changes."""
        labels = np.asarray(labels, dtype=np.int64)
        if len(rows) != len(labels):
            raise ValueError(f"{self._what} needs one row per document: got {len(rows)} rows for {len(labels)} "
                             "documents")
        if len(np.unique(labels)) != len(labels) or np.isin(labels, self.labels).any():
            raise ValueError(f"{self._what} already holds some of these documents' internal ids")
        lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        values = (np.concatenate([np.asarray(r) for r in rows]) if lengths.sum() else np.zeros(0)).astype(self.dtype)
        if len(labels):
            self._blocks.append(_Block(labels, values, _offsets(lengths)))
            self._labels = None
        return values

    def remove(self, labels: Sequence[int]) -> np.ndarray:
        """Drop the rows of these labels (those not held are ignored); return the dropped rows' values."""
        gone = np.asarray(labels, dtype=np.int64)
        kept, dropped = [], []
        for b in self._blocks:
            drop = np.isin(b.labels, gone)
            if not drop.any():
                kept.append(b)
                continue
            lengths = np.diff(b.offsets)
            element_dropped = np.repeat(drop, lengths)
            dropped.append(b.values[element_dropped])
            if not drop.all():
                kept.append(_Block(b.labels[~drop], b.values[~element_dropped], _offsets(lengths[~drop])))
        if dropped:
            self._blocks, self._labels = kept, None
        return np.concatenate(dropped) if dropped else np.zeros(0, self.dtype)

    def flat(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(labels, values, offsets)`` of every row as one block (what a saved file holds)."""
        return self.labels, self.values(), _offsets(self.lengths())

    def lengths(self) -> np.ndarray:
        """Each row's length, in row order (int64)."""
        return (np.concatenate([np.diff(b.offsets) for b in self._blocks]) if self._blocks
                else np.zeros(0, np.int64))

    def values(self) -> np.ndarray:
        """Every row's values one row after another, in row order."""
        return np.concatenate([b.values for b in self._blocks]) if self._blocks else np.zeros(0, self.dtype)

    def map_values(self, mapping: np.ndarray) -> None:
        """Replace every value v by ``mapping[v]`` (an owner renumbering what its values stand for)."""
        self._blocks = [b._replace(values=mapping[b.values].astype(self.dtype)) for b in self._blocks]
