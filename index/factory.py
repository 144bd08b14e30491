"""FAISS index types by name: one registry, one place that knows how each type is built and tuned.

Every index built here is an inner-product index over the hybrid vectors that accepts int64 ids
(``add_with_ids``): flat, HNSW and scalar-quantised indexes are wrapped in ``faiss.IndexIDMap``; IVF
takes ids natively (wrapping IVF in an IDMap would break ``remove_ids``, which assumes the inner index
renumbers after a removal, as flat storage does but IVF lists do not).

Types that need training (``ivf``, ``sq8``) have their options resolved in two steps: at construction
(validation, defaults) and at training time, when the number of available vectors is known (``ivf``
with ``nlist=None`` picks ``nlist`` from it). See :meth:`IndexType.training_plan`.

``ivf-ondisk`` is ``ivf`` whose saved inverted lists live in their own file (``index.ivfdata``, FAISS
``OnDiskInvertedLists``) that a load memory-maps instead of reading, so an index larger than memory can be searched
(the pages of the probed lists are read on demand). In memory, before it is saved, it is an ordinary ``ivf``
index; :mod:`index.ondisk` writes and maps the file.

``sq8`` learns a per-dimension [min, max] range from its training sample (FAISS RS_minmax); values
outside it are clipped when encoding. A lexicon dimension that is zero in every sampled document gets
an empty range and is then stored as 0, so the sample must be representative (hence the default of
20000 random documents rather than the first few).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

import faiss

__all__ = ["INDEX_TYPES", "IndexType", "TrainingPlan", "auto_nlist", "exact_index", "get_index_type"]

IP = faiss.METRIC_INNER_PRODUCT
# FAISS warns when k-means has fewer than this many training points per centroid.
MIN_POINTS_PER_LIST = 39
MAX_NLIST = 65536


def auto_nlist(n: int) -> int:
    """IVF list count for ``n`` vectors: about ``4 * sqrt(n)``, at most ``n // 39`` (so every list gets
    FAISS's recommended 39 training points) and 65536, at least 1."""
    return max(1, min(int(round(4 * math.sqrt(max(n, 0)))), n // MIN_POINTS_PER_LIST, MAX_NLIST))


def exact_index(dim: int) -> faiss.Index:
    """Exact inner-product index with int64 ids (the ``flat`` type, and the staging area of trained types)."""
    return faiss.IndexIDMap(faiss.IndexFlatIP(dim))


@dataclass(frozen=True)
class TrainingPlan:
    """What a trainable index needs: ``options`` (fully resolved, e.g. with ``nlist`` set), the
    ``min_train`` vectors required before training, and the ``train_size`` sample actually used."""

    options: dict[str, Any]
    min_train: int
    train_size: int


def _positive_int(name: str, value: Any, allow_none: bool) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        extra = " or None" if allow_none else ""
        raise ValueError(f"index option {name!r} must be an integer >= 1{extra}, got {value!r}")


@dataclass(frozen=True)
class IndexType:
    """One named index type: its options (with defaults), how to build and tune it, what it supports."""

    name: str
    summary: str
    defaults: Mapping[str, Any]
    make: Callable[[int, dict[str, Any]], faiss.Index]
    nullable: frozenset[str] = frozenset()  # options that may be None (resolved later)
    search_options: frozenset[str] = frozenset()  # options that can change after build (no re-index)
    tune: Callable[[faiss.Index, dict[str, Any]], None] | None = None
    needs_training: bool = False
    supports_remove: bool = True
    on_disk: bool = False  # saved lists are memory-mapped at load (index.ondisk); a loaded index is read-only
    plan: Callable[[dict[str, Any], int], TrainingPlan] | None = field(default=None, repr=False)

    def resolve_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """Defaults merged with ``options``; unknown names or bad values raise ValueError."""
        unknown = sorted(set(options) - set(self.defaults))
        if unknown:
            valid = ", ".join(sorted(self.defaults)) or "none"
            raise ValueError(
                f"unknown option(s) {', '.join(unknown)} for index type {self.name!r}; valid options: {valid}"
            )
        resolved = {**self.defaults, **options}
        for name, value in resolved.items():
            _positive_int(name, value, allow_none=name in self.nullable)
        return resolved

    def check_search_options(self, options: Mapping[str, Any]) -> None:
        """Raise unless every name in ``options`` is a search-time option of this type."""
        bad = sorted(set(options) - self.search_options)
        if bad:
            valid = ", ".join(sorted(self.search_options)) or "none"
            raise ValueError(
                f"option(s) {', '.join(bad)} cannot be changed after building an index of type "
                f"{self.name!r}; search-time options: {valid}"
            )
        for name, value in options.items():
            _positive_int(name, value, allow_none=False)

    def build(self, dim: int, options: Mapping[str, Any]) -> faiss.Index:
        """A new, empty (and for trainable types untrained) id-accepting index of width ``dim``."""
        index = self.make(dim, dict(options))
        self.apply_search_options(index, options)
        return index

    def apply_search_options(self, index: faiss.Index, options: Mapping[str, Any]) -> None:
        """Set search-time parameters (efSearch, nprobe) on a built or loaded index."""
        if self.tune is not None:
            self.tune(index, dict(options))

    def training_plan(self, options: Mapping[str, Any], n_available: int) -> TrainingPlan:
        """How to train given ``n_available`` vectors (only for types with ``needs_training``)."""
        if self.plan is None:
            raise ValueError(f"index type {self.name!r} needs no training")
        return self.plan(dict(options), n_available)


# ---- builders ---------------------------------------------------------------------------------


def _make_flat(dim: int, opts: dict[str, Any]) -> faiss.Index:
    return exact_index(dim)


def _make_hnsw(dim: int, opts: dict[str, Any]) -> faiss.Index:
    hnsw = faiss.IndexHNSWFlat(dim, opts["m"], IP)
    hnsw.hnsw.efConstruction = opts["ef_construction"]
    return faiss.IndexIDMap(hnsw)


def _tune_hnsw(index: faiss.Index, opts: dict[str, Any]) -> None:
    if "ef_search" in opts:
        faiss.downcast_index(index.index).hnsw.efSearch = opts["ef_search"]


def _make_ivf(dim: int, opts: dict[str, Any]) -> faiss.Index:
    if opts.get("nlist") is None:
        raise ValueError("ivf needs nlist resolved (see IndexType.training_plan) before it is built")
    return faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, opts["nlist"], IP)


def _tune_ivf(index: faiss.Index, opts: dict[str, Any]) -> None:
    if "nprobe" in opts:
        ivf = faiss.extract_index_ivf(index)
        ivf.nprobe = min(opts["nprobe"], ivf.nlist)


def _plan_ivf(opts: dict[str, Any], n_available: int) -> TrainingPlan:
    if opts["nlist"] is None:
        min_train = opts["min_train"] or 1000
        opts["nlist"] = auto_nlist(max(n_available, min_train))
    else:
        min_train = opts["min_train"] or MIN_POINTS_PER_LIST * opts["nlist"]
    min_train = max(min_train, opts["nlist"])  # k-means needs at least one point per list
    train_size = opts["train_size"] or (MIN_POINTS_PER_LIST + 1) * opts["nlist"]
    return TrainingPlan(opts, min_train, max(train_size, min_train))


def _make_sq(qtype: int) -> Callable[[int, dict[str, Any]], faiss.Index]:
    def make(dim: int, opts: dict[str, Any]) -> faiss.Index:
        return faiss.IndexIDMap(faiss.IndexScalarQuantizer(dim, qtype, IP))

    return make


def _plan_sq8(opts: dict[str, Any], n_available: int) -> TrainingPlan:
    return TrainingPlan(opts, opts["min_train"], max(opts["train_size"], opts["min_train"]))


_IVF = IndexType(
    "ivf",
    "inverted lists (IndexIVFFlat); approximate, needs training",
    {"nlist": None, "nprobe": 16, "min_train": None, "train_size": None},
    _make_ivf,
    nullable=frozenset({"nlist", "min_train", "train_size"}),
    search_options=frozenset({"nprobe"}),
    tune=_tune_ivf,
    needs_training=True,
    plan=_plan_ivf,
)

INDEX_TYPES: dict[str, IndexType] = {
    t.name: t
    for t in (
        IndexType("flat", "exact inner product (IndexFlatIP); the default", {}, _make_flat),
        IndexType(
            "hnsw",
            "graph search (IndexHNSWFlat); fast approximate search, cannot remove documents",
            {"m": 32, "ef_construction": 40, "ef_search": 64},
            _make_hnsw,
            search_options=frozenset({"ef_search"}),
            tune=_tune_hnsw,
            supports_remove=False,
        ),
        _IVF,
        IndexType(
            "sq8",
            "8-bit scalar quantisation (IndexScalarQuantizer QT_8bit); 4x smaller, needs training",
            {"min_train": 1000, "train_size": 20000},
            _make_sq(faiss.ScalarQuantizer.QT_8bit),
            needs_training=True,
            plan=_plan_sq8,
        ),
        IndexType(
            "fp16",
            "half-precision storage (IndexScalarQuantizer QT_fp16); 2x smaller, no training",
            {},
            _make_sq(faiss.ScalarQuantizer.QT_fp16),
        ),
        replace(  # ivf in all but where its lists live
            _IVF,
            name="ivf-ondisk",
            summary="ivf whose inverted lists are saved to index.ivfdata and memory-mapped at load "
            "(OnDiskInvertedLists); for indexes larger than memory, read-only once saved",
            defaults=dict(_IVF.defaults),
            on_disk=True,
        ),
    )
}


def get_index_type(name: str) -> IndexType:
    """Look up an index type by name; the error lists the valid names."""
    try:
        return INDEX_TYPES[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown index type {name!r}; valid choices: {', '.join(INDEX_TYPES)}"
        ) from None
