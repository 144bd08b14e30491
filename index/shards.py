"""Sharded indexes: shard indexes in one directory, searched together; and the merge of saved indexes.

Layout. A sharded index directory holds ``manifest.json`` (``"layout": "sharded"``) and ``shard-00000/``,
``shard-00001/``, ... each a complete saved index (``HybridIndex.save``'s files; one can be loaded alone). The top
manifest lists the shards (``dir``, ``count``), the settings they all share (dims, weights, type, fingerprint,
``top_m``) and the checksum of every shard's manifest and data files, so one version of the whole directory is
opened and verified at once (``index.manifest.open_index``).

Why shards. A build writes one shard at a time (``ShardWriter``) and frees it, so building needs the memory of
one shard, not of the whole index; ``lens index merge`` joins saved indexes without re-encoding or re-training:
each input's files become shards of the output (hard links where the file system allows, else copies).

Search. Every shard answers the query's top-k and ``merge_hits`` keeps the k best of them, ties in shard order:
the same hits and scores as one index over the same vectors, for exact types.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any, BinaryIO, Mapping, Sequence

import numpy as np

from lens.atomic import atomic_dir, parse_json, write_json
from lens.bm25 import BM25Stats

from .manifest import (
    DOCS_FILE,
    FORMAT_VERSION,
    MANIFEST_FILE,
    check_fingerprint,
    data_files,
    file_record,
    layout_of,
    open_index,
    shard_dir,
    validate_manifest,
    verify_stream,
)
from .metadata import DocTable, check_filter, check_ids, field_names, missing_fields
from .store import HybridIndex, SearchResult, idf_weights
from .targets import check_save_target, existing_index
from .bm25_fusion import split_weights
from .bm25_part import BM25Part, BM25Scores
from .vectors import mean_weights, weight_pair

__all__ = ["SHARED_SETTINGS", "ShardWriter", "ShardedIndex", "merge_hits", "merge_indexes", "shard_dir"]

logger = logging.getLogger(__name__)

# manifest fields every shard of one index (and every input of a merge) must have in common. Not the default query
# weights: indexes built apart may differ in them (``lens index build --weights balanced`` measures each corpus), so
# a merge keeps their document-weighted mean in the top manifest and a sharded search uses that for every shard.
SHARED_SETTINGS = ("mode", "lexicon_dim", "dense_dim", "index_type", "top_m", "fingerprint")


class ShardedIndex:
    """Shard :class:`HybridIndex` objects of one index, searched together; the interface of ``HybridIndex`` for
    searching, describing, removing and saving (adding goes through a new build or ``lens index merge``)."""

    def __init__(self, shards: Sequence[HybridIndex], info: Mapping[str, Any] | None = None,
                 weights: Sequence[float] | None = None) -> None:
        """``weights``: the default query weights of every shard's search (default: their mean, by documents)."""
        shards = list(shards)
        if not shards:
            raise ValueError("a sharded index needs at least one shard")
        first = _settings(shards[0])
        for i, shard in enumerate(shards[1:], 1):
            diffs = _differences(first, _settings(shard))
            if diffs:
                raise ValueError(f"shard {i} differs from shard 0 in {', '.join(diffs)}; shards of one index must be "
                                 "built the same way")
        self._shards = shards
        self._info = dict(info) if info is not None else shards[0].info
        self._weights = (weight_pair(weights) if weights is not None
                         else mean_weights([s.weights for s in shards], [len(s) for s in shards]))

    # ---- description -----------------------------------------------------------------------

    @property
    def shards(self) -> list[HybridIndex]:
        return list(self._shards)

    # settings every shard shares (checked at construction), read from shard 0
    @property
    def mode(self) -> str:
        return self._shards[0].mode

    @property
    def lexicon_dim(self) -> int | None:
        return self._shards[0].lexicon_dim

    @property
    def dense_dim(self) -> int | None:
        return self._shards[0].dense_dim

    @property
    def dim(self) -> int:
        return self._shards[0].dim

    @property
    def index_type(self) -> str:
        return self._shards[0].index_type

    @property
    def weights(self) -> tuple[float, float]:
        return self._weights

    @property
    def fingerprint(self) -> dict[str, Any] | None:
        return self._shards[0].fingerprint

    @property
    def top_m(self) -> int | None:
        return self._shards[0].top_m

    @property
    def index_options(self) -> dict[str, Any]:
        """Shard 0's options (shards trained apart may differ, e.g. in an automatic ``nlist``)."""
        return self._shards[0].index_options

    @property
    def info(self) -> dict[str, Any] | None:
        return dict(self._info) if self._info is not None else None

    @property
    def casing_table(self):
        """The shards' corpus casing tables as one (``CasingTable.extended_by``, shard 0's evidence first; the
        shards of one build keep the same table, those of merged indexes their own), or None if shard 0 has none."""
        table = self._shards[0].casing_table
        if table is None:
            return None
        for shard in self._shards[1:]:
            if shard.casing_table is not None:
                table = table.extended_by(shard.casing_table)
        return table

    @property
    def is_trained(self) -> bool:
        return all(s.is_trained for s in self._shards)

    def __len__(self) -> int:
        return sum(len(s) for s in self._shards)

    def __contains__(self, doc_id: object) -> bool:
        return any(doc_id in s for s in self._shards)

    def __repr__(self) -> str:
        return (f"ShardedIndex(shards={len(self._shards)}, mode={self.mode!r}, index_type={self.index_type!r}, "
                f"documents={len(self)}, weights={self.weights})")

    def metadata(self, doc_id: str) -> dict | None:
        for shard in self._shards:
            if doc_id in shard:
                return shard.metadata(doc_id)
        raise KeyError(f"document {doc_id!r} is not in the index")

    def ids_matching(self, filter: Mapping[str, Any]) -> list[str]:
        """``HybridIndex.ids_matching`` over every shard, shard by shard."""
        return [doc_id for shard in self._shards for doc_id in shard.ids_matching(filter)]

    def metadata_fields(self) -> list[str]:
        """``HybridIndex.metadata_fields`` over every shard."""
        return field_names([s.doc_table for s in self._shards])

    def missing_filter_fields(self, filter: Mapping[str, Any]) -> str | None:
        """``HybridIndex.missing_filter_fields`` over every shard: a field no shard's documents hold."""
        return missing_fields([s.doc_table for s in self._shards], check_filter(filter))

    # ---- search and changes -----------------------------------------------------------------

    @property
    def idf(self) -> bool:
        """Whether searches weigh the query lexicon by inverse document frequency by default (every shard's
        default says so)."""
        return all(s.idf for s in self._shards)

    def document_frequencies(self) -> tuple[np.ndarray, int] | None:
        """Every shard's cluster document frequencies summed, and the documents counted; None when a shard keeps
        none."""
        each = [s.document_frequencies() for s in self._shards]
        if not each or any(f is None for f in each):
            return None
        return np.sum([f[0] for f in each], axis=0), sum(f[1] for f in each)

    def query_idf(self, idf: bool | None) -> np.ndarray | None:
        """``HybridIndex.query_idf`` over the whole index: the frequencies of all shards together, so every shard
        weighs a query alike and their scores compare."""
        return idf_weights(self, idf, self.document_frequencies())

    def search(self, lexicon: Any = None, dense: Any = None, k: int = 10, weights: Any = None,
               query_top_m: int | None = None, filter: Mapping[str, Any] | None = None,
               texts: Sequence[str] | None = None, depth: int | None = None,
               idf: bool | None = None) -> list[SearchResult]:
        """``HybridIndex.search`` on every shard, their top-``k`` merged (``merge_hits``); ``idf`` weighs the query
        lexicon by the whole index's frequencies (:meth:`query_idf`). A BM25 weight (every shard keeps a BM25 part)
        scores each shard's documents with the statistics of all shards added up and divides by the best BM25
        score of all shards, so the scores are those of one index holding every document; the candidates are each
        shard's vector and BM25 top ``depth``, which hold one such index's."""
        _, w_bm25 = split_weights(weights)
        weights = self._weights if weights is None else weights  # one default for all shards: comparable scores
        checked = check_filter(filter)
        allowed = [s.selection(filter) for s in self._shards]
        if checked is not None and not any(len(a) for a in allowed) and len(self):
            note = self.missing_filter_fields(filter)
            logger.warning("no document matches the filter %s: returning no hits%s", filter, f"; {note}" if note else "")
        weighing = self.query_idf(idf)
        bm25 = [None] * len(self._shards)
        if w_bm25 > 0:
            bm25 = self._bm25_scores(texts, allowed)
        per_shard = [s.search_selection(lexicon, dense, k, weights, query_top_m, a, texts, depth, weighing, b)
                     for s, a, b in zip(self._shards, allowed, bm25)]
        return [merge_hits([hits[q] for hits in per_shard], k) for q in range(len(per_shard[0]))]

    @property
    def has_bm25(self) -> bool:
        """Whether every shard keeps a BM25 part (``HybridIndex.has_bm25``), so a search can weigh BM25."""
        return all(s.has_bm25 for s in self._shards)

    def _bm25_scores(self, texts: Sequence[str] | None, allowed: Sequence[np.ndarray | None]) -> list[BM25Scores]:
        """Each shard's BM25 scores of the queries, with the whole index's statistics and maximum."""
        self._check_bm25()
        if texts is None or isinstance(texts, str):
            raise ValueError("a BM25 weight needs each query's text: give texts= with one text per query")
        terms = BM25Part.query_terms(list(texts))  # once for every shard
        each = [s.bm25_stats(terms) for s in self._shards]
        stats = [BM25Stats.total([e[q] for e in each]) for q in range(len(terms))]
        scored = [s.bm25_scores(terms, a, stats) for s, a in zip(self._shards, allowed)]
        maxima = [max(sc.maxima[q] for sc in scored) for q in range(len(terms))]
        return [BM25Scores(sc.scores, maxima) for sc in scored]

    def bm25_stats(self, terms: Sequence[Sequence[str]]) -> list[BM25Stats]:
        """``HybridIndex.bm25_stats`` over every shard, added up (the whole index's statistics)."""
        self._check_bm25()
        each = [s.bm25_stats(terms) for s in self._shards]
        return [BM25Stats.total([e[q] for e in each]) for q in range(len(terms))]

    def bm25_maxima(self, terms: Sequence[Sequence[str]], stats: Sequence[BM25Stats],
                    filter: Mapping[str, Any] | None = None) -> list[float]:
        """``HybridIndex.bm25_maxima`` over every shard: each query's best."""
        each = [s.bm25_maxima(terms, stats, filter) for s in self._shards]
        return [max(e[q] for e in each) for q in range(len(terms))]

    def search_part(self, lexicon: Any, dense: Any, k: int, weights: Any, filter: Mapping[str, Any] | None = None,
                    texts: Sequence[str] | None = None, depth: int | None = None, idf: np.ndarray | None = None,
                    bm25_stats: Sequence[BM25Stats] | None = None,
                    bm25_maxima: Sequence[float] | None = None) -> list[SearchResult]:
        """``HybridIndex.search_part`` over every shard (this index one part of a larger one), top-``k`` merged."""
        check_filter(filter)
        per_shard = [s.search_part(lexicon, dense, k, weights, filter, texts, depth, idf, bm25_stats, bm25_maxima)
                     for s in self._shards]
        return [merge_hits([hits[q] for hits in per_shard], k) for q in range(len(per_shard[0]))]

    def _check_bm25(self) -> None:
        missing = [i for i, s in enumerate(self._shards) if not s.has_bm25]
        if missing:
            raise ValueError(f"{len(missing)} of this index's {len(self._shards)} shards (the first: shard "
                             f"{missing[0]}) keep no BM25 part, so a BM25 weight > 0 cannot be used: merge only "
                             "indexes built with a BM25 part (`lens index build` without --no-bm25), or give two "
                             "weights LEX,DENSE")

    def set_search_options(self, **options: Any) -> None:
        for shard in self._shards:
            shard.set_search_options(**options)

    def add(self, *args: Any, **kwargs: Any) -> None:
        self.check_add()

    def check_add(self, *args: Any, **kwargs: Any) -> dict[str, int]:
        """Always refuses: documents are not added to a sharded index (``HybridIndex.check_add``'s counterpart)."""
        raise ValueError("a sharded index takes no new documents: build an index of them and merge it in "
                         "(lens index merge), or build the whole index again")

    def check_removable(self) -> None:
        """Raise the ValueError ``remove`` would raise whatever the ids (as ``HybridIndex.check_removable``)."""
        for shard in self._shards:
            shard.check_removable()

    def remove(self, ids: Sequence[str]) -> None:
        """Remove documents by id from whichever shards hold them; an unknown id raises KeyError (nothing removed)."""
        ids = check_ids(ids, "remove", dedupe=True)
        where = {i: next((s for s in self._shards if i in s), None) for i in ids}
        missing = [i for i, s in where.items() if s is None]
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise KeyError(f"document {missing[0]!r}{more} is not in the index; nothing was removed")
        for shard in {id(s): s for s in where.values()}.values():  # refused before any shard changes
            shard._check_writable("remove documents")
        for shard in self._shards:
            mine = [i for i, s in where.items() if s is shard]
            if mine:
                shard.remove(mine)

    # ---- persistence ------------------------------------------------------------------------

    def save(self, directory: str | os.PathLike) -> Path:
        """Save every shard and the top manifest to ``directory`` atomically (as ``HybridIndex.save``)."""
        for shard in self._shards:
            shard.check_savable()
        check_save_target(directory)
        with atomic_dir(directory, what="index") as tmp:
            writer = ShardWriter(tmp)
            for shard in self._shards:
                writer.add(shard)
            writer.finish(self._info, self._weights)
        logger.info("saved %d documents in %d shards to %s", len(self), len(self._shards), directory)
        return Path(directory)

    @classmethod
    def load(cls, directory: str | os.PathLike, expected_fingerprint: Mapping[str, Any] | None = None, *,
             read_only: bool = False, **search_options: Any) -> "ShardedIndex":
        """Load a sharded index directory (``index.load_index`` loads either layout); ``read_only`` as
        ``HybridIndex.load``, for every shard."""
        directory = Path(directory)
        m, gen = open_index(directory)
        with gen:
            if layout_of(m) != "sharded":
                raise ValueError(f"{directory} holds one index, not shards; load it with HybridIndex.load (or "
                                 "index.load_index, which loads either layout)")
            return cls.from_files(directory, m, gen.files, expected_fingerprint, search_options, read_only)

    @classmethod
    def from_files(cls, directory: Path, m: dict[str, Any], files: Mapping[str, BinaryIO | None],
                   expected_fingerprint: Mapping[str, Any] | None, search_options: dict[str, Any],
                   read_only: bool = False) -> "ShardedIndex":
        """Verify and parse one version's open files of a sharded directory (``index.manifest.open_index``)."""
        check_fingerprint(expected_fingerprint, m["fingerprint"], directory)
        shards = []
        for entry in m["shards"]:
            sub = shard_files(directory, m, files, entry["dir"])
            shard_m = sub.pop(MANIFEST_FILE)
            if shard_m["count"] != entry["count"]:
                raise ValueError(f"saved index {directory} is inconsistent: {entry['dir']} holds {shard_m['count']} "
                                 f"documents, the manifest says {entry['count']}; rebuild the index")
            shards.append(HybridIndex.from_files(directory / entry["dir"], shard_m, sub, None, search_options,
                                                 read_only))
        index = cls(shards, m.get("info"), m["weights"])
        diffs = _differences(_settings_of(m), _settings(shards[0]))
        if diffs:
            raise ValueError(f"saved index {directory} is inconsistent: its shards differ from its manifest in "
                             f"{', '.join(diffs)}; rebuild the index")
        logger.info("loaded %r from %s", index, directory)
        return index


def shard_files(directory: Path, m: Mapping[str, Any], files: Mapping[str, BinaryIO | None],
                name: str) -> dict[str, Any]:
    """Shard ``name``'s files (by their names inside the shard) with its verified, parsed manifest under
    ``manifest.json``; the shard manifest's checksums must be the top manifest's."""
    mname = f"{name}/{MANIFEST_FILE}"
    mpath = directory / mname
    verify_stream(files.get(mname), mpath, m["files"][mname])
    shard_m = validate_manifest(parse_json(files[mname].read(), mpath, "index manifest"), mpath)
    if layout_of(shard_m) != "single":
        raise ValueError(f"index manifest {mpath}: a shard cannot itself be sharded; rebuild the index")
    out: dict[str, Any] = {MANIFEST_FILE: shard_m}
    for fname in data_files(shard_m):
        key = f"{name}/{fname}"
        if m["files"].get(key) != shard_m["files"][fname]:
            raise ValueError(f"saved index {directory} is inconsistent: the checksums of {key} in {mpath} and in "
                             f"{directory / MANIFEST_FILE} differ; rebuild the index")
        out[fname] = files.get(key)
    return out


class ShardWriter:
    """Writes the shards of a sharded index one at a time into ``directory`` (empty; inside ``atomic_dir``), then
    the top manifest; only the shard being written needs to be in memory."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.manifests: list[dict[str, Any]] = []

    def add(self, shard: HybridIndex) -> dict[str, Any]:
        """Write ``shard`` as the next shard directory; returns its manifest."""
        if self.manifests:
            diffs = _differences(_settings_of(self.manifests[0]), _settings(shard))
            if diffs:
                raise ValueError(f"shard {len(self.manifests)} differs from shard 0 in {', '.join(diffs)}")
        target = self.directory / shard_dir(len(self.manifests))
        target.mkdir()
        manifest = shard.write_files(target)
        self.manifests.append(manifest)
        return manifest

    def add_files(self, manifest: Mapping[str, Any], files: Mapping[str, BinaryIO], source: Path) -> None:
        """Add a saved shard by its open, verified files (``manifest.json`` among them), linking ``source``'s
        files where they are the very files opened, else copying from the open files."""
        if self.manifests:
            diffs = _differences(_settings_of(self.manifests[0]), _settings_of(manifest))
            if diffs:
                raise ValueError(f"{source} differs from the first index in {', '.join(diffs)}")
        target = self.directory / shard_dir(len(self.manifests))
        target.mkdir()
        for name, f in files.items():
            _place(f, source / name, target / name)
        self.manifests.append(dict(manifest))

    def finish(self, info: Mapping[str, Any] | None = None,
               weights: Sequence[float] | None = None) -> dict[str, Any]:
        """Write the top manifest (``info``: the index's free-form facts, default shard 0's; ``weights``: the default
        query weights, default the shards' mean by documents) and return it."""
        if not self.manifests:
            raise ValueError("a sharded index needs at least one shard")
        first = self.manifests[0]
        if weights is None:
            pairs = [tuple(m["weights"]) for m in self.manifests]
            weights = mean_weights(pairs, [m["count"] for m in self.manifests])
            if len(set(pairs)) > 1:
                logger.info("the shards' default query weights differ (%s): the index's are their mean by documents, "
                            "(%.3f, %.3f)", ", ".join(f"({a:.3f}, {b:.3f})" for a, b in sorted(set(pairs))), *weights)
        files: dict[str, Any] = {}
        shards = []
        for i, m in enumerate(self.manifests):
            name = shard_dir(i)
            files[f"{name}/{MANIFEST_FILE}"] = file_record(self.directory / name / MANIFEST_FILE)
            files.update({f"{name}/{fname}": rec for fname, rec in m["files"].items()})
            shards.append({"dir": name, "count": m["count"]})
        count = sum(s["count"] for s in shards)
        manifest = {
            "format_version": FORMAT_VERSION,
            "layout": "sharded",
            **{key: first.get(key) for key in SHARED_SETTINGS},
            "weights": [float(w) for w in weights],
            "index_options": first["index_options"],
            "trained": all(m["trained"] for m in self.manifests),
            "count": count,
            "next_id": count,  # unused: every shard numbers its own documents
            "info": dict(info) if info is not None else first.get("info"),
            "faiss_version": first.get("faiss_version"),
            "shards": shards,
            "files": files,
        }
        write_json(self.directory / MANIFEST_FILE, manifest)
        return manifest


def merge_indexes(output: str | os.PathLike, inputs: Sequence[str | os.PathLike], *,
                  overwrite: bool = False) -> dict[str, Any]:
    """Merge saved indexes into a new sharded index at ``output`` (atomically); returns its manifest. An index
    already at ``output`` is replaced only with ``overwrite`` (FileExistsError otherwise, before any work).

    Every input (single or sharded) must have the same encoder fingerprint, dims, index type and ``top_m``, and no
    document id may be in two inputs; default query weights may differ (the output's are their mean by documents).
    Inputs' BM25 parts stay with their shards, searched with the statistics of all of them; where only some inputs
    keep one, the output keeps them but cannot search with a BM25 weight (a warning says so).
    Each input is verified (checksums) before its files are linked or copied into the output. Nothing is re-encoded
    or re-trained.
    """
    output, inputs = Path(output), [Path(p) for p in inputs]
    if len(inputs) < 2:
        raise ValueError("give at least two indexes to merge")
    seen_paths: dict[Path, Path] = {}
    for p in inputs:
        if p.resolve() in seen_paths:
            raise ValueError(f"{p} is given twice; give each index to merge once")
        seen_paths[p.resolve()] = p
    if output.resolve() in seen_paths:
        raise ValueError(f"the output {output} is one of the inputs; merge into a new directory")
    check_save_target(output)
    found = None if overwrite else existing_index(output)
    if found is not None:
        raise FileExistsError(f"{found}: pass --overwrite (Python: overwrite=True) to replace it with the merge, or "
                              "merge into a new directory")
    ids = _IdSet()
    with atomic_dir(output, what="index") as tmp:
        writer = ShardWriter(tmp)
        first_info = None
        for p in inputs:
            m, gen = open_index(p)
            with gen:
                if writer.manifests:
                    _check_mergeable(inputs[0], writer.manifests[0], p, m)
                first_info = first_info if first_info is not None else (m.get("info") or {})
                for prefix, shard_m, files in _parts(p, m, gen.files):
                    for name in data_files(shard_m):
                        verify_stream(files[name], p / prefix / name, shard_m["files"][name])
                    docs = DocTable.read(files[DOCS_FILE], p / prefix / DOCS_FILE, in_place=True)
                    ids.add_all(docs, p)
                    docs.close()
                    writer.add_files(shard_m, files, p / prefix)
        manifest = writer.finish({**first_info, "merged_from": [str(p) for p in inputs]})
        without = [i for i, m in enumerate(writer.manifests) if m.get("bm25") is None]
        if without and len(without) < len(writer.manifests):
            logger.warning("%d of the merged index's %d shards keep no BM25 part (built with --no-bm25 or before "
                           "indexes kept one), so it cannot search with a BM25 weight: rebuild those inputs with "
                           "`lens index build` to search it with BM25", len(without), len(writer.manifests))
    no_idf = [i for i, m in enumerate(writer.manifests) if not m.get("idf")]
    if no_idf and len(no_idf) < len(writer.manifests):  # the merged index weighs by idf only when every shard can
        logger.warning("%d of the merged index's %d shards keep no document frequencies (built with --no-idf or "
                       "before indexes kept them), so it searches without idf, also for the documents of the inputs "
                       "that had it: rebuild those inputs with `lens index build` to search it with idf",
                       len(no_idf), len(writer.manifests))
    logger.info("merged %d indexes (%d documents) into %s", len(inputs), manifest["count"], output)
    return manifest


def _parts(directory: Path, m: dict[str, Any], files: Mapping[str, BinaryIO | None]):
    """(prefix, manifest, files by name incl. manifest.json) of each single index inside a saved index."""
    if layout_of(m) == "single":
        yield "", m, {name: files[name] for name in (MANIFEST_FILE, *data_files(m))}
        return
    for entry in m["shards"]:
        sub = shard_files(directory, m, files, entry["dir"])
        shard_m = sub.pop(MANIFEST_FILE)
        sub[MANIFEST_FILE] = files[f"{entry['dir']}/{MANIFEST_FILE}"]
        yield entry["dir"], shard_m, sub


def _check_mergeable(first_path: Path, first: Mapping[str, Any], path: Path, m: Mapping[str, Any]) -> None:
    if m["fingerprint"] != first["fingerprint"]:
        try:
            check_fingerprint(first["fingerprint"] or {}, m["fingerprint"], path)
        except ValueError as e:
            raise ValueError(f"cannot merge {path} with {first_path}: {e}") from None
    diffs = [f"{key} ({first.get(key)!r} in {first_path}, {m.get(key)!r} here)"
             for key in SHARED_SETTINGS if key != "fingerprint" and first.get(key) != m.get(key)]
    if diffs:
        raise ValueError(f"cannot merge {path} with {first_path}: they differ in {'; '.join(diffs)}; merge only "
                         "indexes built with the same encoders, index type and --top-m")


class _IdSet:
    """Document ids seen so far (SQLite in memory: constant Python memory), refusing one seen in another input."""

    def __init__(self) -> None:
        self._conn = sqlite3.connect(":memory:")
        self._conn.execute("CREATE TABLE seen (doc_id TEXT PRIMARY KEY, source TEXT)")

    def add_all(self, docs: DocTable, source: Path) -> None:
        for batch in docs.iter_doc_ids(500):
            marks = ",".join("?" * len(batch))
            clash = self._conn.execute(f"SELECT doc_id, source FROM seen WHERE doc_id IN ({marks})", batch).fetchone()
            if clash is not None:
                raise ValueError(f"document id {clash[0]!r} is in both {clash[1]} and {source}; an id may be in one "
                                 "index only: remove it from one of them (or rebuild) before merging")
            self._conn.executemany("INSERT INTO seen VALUES (?, ?)", ((i, str(source)) for i in batch))


def _place(f: BinaryIO, source: Path, target: Path) -> None:
    """Put the open, verified file ``f`` (read from ``source``) at ``target``: a hard link when ``source`` is still
    that very file, else a copy of ``f``."""
    try:
        os.link(source, target)
        if os.path.samestat(os.fstat(f.fileno()), os.stat(target)):
            return
        target.unlink()  # source was replaced since it was opened and verified
    except OSError:
        pass
    f.seek(0)
    with open(target, "wb") as out:
        shutil.copyfileobj(f, out, 1 << 22)
        out.flush()
        os.fsync(out.fileno())


def _settings(index: HybridIndex) -> dict[str, Any]:
    return {"mode": index.mode, "lexicon_dim": index.lexicon_dim, "dense_dim": index.dense_dim,
            "weights": list(index.weights), "index_type": index.index_type, "top_m": index.top_m,
            "fingerprint": index.fingerprint}


def _settings_of(m: Mapping[str, Any]) -> dict[str, Any]:
    return {key: m.get(key) for key in SHARED_SETTINGS}


def _differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    return [key for key in SHARED_SETTINGS if a.get(key) != b.get(key)]


def merge_hits(results: Sequence[SearchResult], k: int) -> SearchResult:
    """The ``k`` best hits of one query's per-shard results, best first; equal scores keep shard order, then rank."""
    ids = [i for r in results for i in r.ids]
    metadata = [m for r in results for m in r.metadata]
    scores = np.concatenate([r.scores for r in results]) if results else np.zeros(0, np.float32)
    order = np.argsort(-scores, kind="stable")[:k]
    return SearchResult([ids[i] for i in order], scores[order].astype(np.float32, copy=True),
                        [metadata[i] for i in order])
