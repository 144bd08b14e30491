"""Build a hybrid index from a corpus, chunk by chunk, resumable after an interruption; in several processes and
into several shard indexes when asked.

Encoding. Chunk ``i`` holds documents ``i * chunk_size`` to ``(i + 1) * chunk_size`` and is saved in a work
directory beside the output (``.<name>.partial/chunk-<i>.npz``; the files' format: ``lens.chunks``) with the sha256
of its document ids and of the encoder's fingerprint, its quantisation (``lens.quantize``: int8, or float32) and how
many of its documents were truncated, so a chunk is never attached to documents, or mixed with vectors, it was not
encoded from; a damaged one, or one from another encoder or quantisation (a resume with another ``--quantize``: the
fingerprint is the same on purpose), is encoded again with a warning. ``workers`` processes (``devices``: one per
GPU), or the ranks of ``torchrun``, each encode a contiguous range of chunks (``lens.sharding``) and record it in
``encode-<rank>-of-<world>.json`` (the range, every chunk file with its sha256 and truncated documents, the
fingerprint, quantisation and dims). Chunks are the same whatever the number of workers, so the index is the one a
single process builds, and ``resume=True`` encodes only the chunks not there yet (also with another worker count).

Assembly (one process: the caller, or rank 0). Chunk files are checked against their recorded sha256 before they
are read. Types that need training are trained once, on a seeded sample of the whole corpus. ``shards=S`` writes S
shard indexes of contiguous documents, one at a time (``index.shards``), so only one shard is in memory; for
``ivf-ondisk`` the S parts' inverted lists are spilled to the work directory and merged into one memory-mapped file
instead. ``top_m`` keeps each document's ``top_m`` heaviest lexicon weights (``HybridIndex(top_m=...)``). Documents
truncated to ``max_seq_length`` are reported once, as one total over the corpus (not one warning per chunk). The
manifest records the encoders (``lens.index_record``: model reference, dense kind, the quantisation the chunks were
encoded in, the model's text rule), so ``lens search``, ``lens serve`` and ``lens index add`` open the index with
them whether it was built by ``lens index build`` or from Python.

The whole build holds the output's writer lock (``lens.atomic.DirectoryLock``, the one ``HybridIndex.save`` takes),
so a second build or save to the same output fails at once instead of deleting this one's work directory. A full
disk raises ``lens.atomic.StorageError`` saying that the chunks written so far are kept for ``--resume``.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from index.vectors import BALANCED_ROWS, prune_top_m, resolve_weights, weights_spec
from lens.atomic import DirectoryLock, StorageError, atomic_write_bytes, read_json, write_json
from lens.chunks import (FLOAT32, RECORD_VERSION, Chunk, chunk_bytes, chunk_path, fingerprint_sha, ids_sha, parse_chunk,
                         quantize_label, read_bytes, read_record, record_name)
from lens.corpus import Document, DocumentTexts, invalid_unicode
from lens.index_record import EncoderRecord
from lens.sharding import EncoderSpec, RankGroup, load_encoder, run_in_processes, torchrun_rank, worker_devices

logger = logging.getLogger(__name__)

__all__ = ["FLOAT32", "RECORD_VERSION", "SNIPPET_CHARS", "STATE_VERSION", "STORE_TEXT_KEY", "EncodedChunks",
           "adding_dir", "build_index", "build_saved", "check_build_options", "check_build_output", "check_documents",
           "corpus_hash", "document_metadata", "encode_chunk", "encode_chunks", "encode_shard", "fill_index",
           "ids_hash", "partial_dir", "report_truncation", "resolve_bm25", "stores_text"]

SNIPPET_CHARS = 300
STORE_TEXT_KEY = "store_text"  # in an index's info: its documents' whole texts are kept (build_saved(store_text=))
# A built index weighs each query's lexicon by its clusters' idf in the corpus unless told otherwise (`lens index build
# --no-idf`): on the development collections the model never saw it lifted the lexicon and the hybrid most where they
# trailed BM25, and cost the hybrid at most 0.005 nDCG@10 (not significant) where the model is in its domain
# (docs/index-and-search.md#idf).
DEFAULT_IDF = True
# A built index keeps a BM25 part unless told otherwise (`lens index build --no-bm25`), searched at
# index.bm25_fusion.DEFAULT_BM25_WEIGHT beside the vector weights: paired against the hybrid on the development
# suite it gained on Cranfield and its variants and on SciFact (p < 0.005) and lost nothing significantly
# (docs/index-and-search.md#bm25-part).
DEFAULT_BM25 = True
STATE_VERSION = 2  # chunks carry the encoder fingerprint's sha256; shard records
_SAMPLE_SEED = 0


CPU_CHUNK_SIZE, CPU_BATCH_SIZE = 64, 16  # a build's defaults on a CPU (as they always were)
GPU_CHUNK_SIZE = 1024  # on CUDA: room for the large batches `encode` picks there (18 MB of float32 vectors a chunk)


def build_sizes(chunk_size: int | None, batch_size: int | None, on_cuda: bool) -> tuple[int, int | None]:
    """(chunk_size, batch_size) of a build, each None replaced by its default for the device that encodes.

    On a CPU: chunks of 64 documents encoded 16 at a time. On CUDA: chunks of 1024 and the batch size ``encode``
    picks from the free memory (None): on an H100, batches of 256 encoded twice as many documents a second as
    batches of 16 (``benchmarks/results/speed_gpu.md``), and a 64-document chunk would cap every batch at 64.
    """
    for name, value in (("chunk_size", chunk_size), ("batch_size", batch_size)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be a positive integer or None (the device's default), got {value!r}")
    if chunk_size is None:
        chunk_size = GPU_CHUNK_SIZE if on_cuda else CPU_CHUNK_SIZE
    if batch_size is None and not on_cuda:
        batch_size = CPU_BATCH_SIZE
    return chunk_size, batch_size


def _encodes_on_cuda(encoder, devices: Sequence[str] | None) -> bool:
    """Whether a build encodes on CUDA: the worker devices when given, else the in-process encoder's device."""
    if devices:
        return any(str(d).startswith("cuda") for d in devices)
    if isinstance(encoder, EncoderSpec):
        return False  # loaded on the CPU when no device is named
    device = getattr(getattr(encoder, "lens", encoder), "device", None)
    return getattr(device, "type", None) == "cuda"


def corpus_hash(docs: Sequence[Document]) -> str:
    h = hashlib.sha256()
    for d in docs:
        for part in (d.id, d.title, d.text):
            h.update(part.encode("utf-8"))
            h.update(b"\x00")
    return h.hexdigest()


def ids_hash(docs: Sequence[Document]) -> str:
    """sha256 of a chunk's document ids: what ties a saved chunk to its documents."""
    return ids_sha([d.id for d in docs])


def check_documents(docs: Sequence[Document]) -> None:
    """Refuse a document whose id, title or text is not valid Unicode, naming it (before any encoding); warn of
    documents with no text at all (title and text blank), which are kept with all-zero vectors: they score 0 for
    every query."""
    blank, spaced = [], []
    for d in docs:
        for field, value in (("id", d.id), ("title", d.title), ("text", d.text)):
            problem = invalid_unicode(value)
            if problem is not None:
                raise ValueError(f"document {d.id!r}: its {field} holds {problem}; fix the corpus record")
        if not d.full_text:
            blank.append(d.id)
        if any(c.isspace() for c in d.id):
            spaced.append(d.id)
    if spaced:
        logger.warning("%d document ids hold whitespace (%s): searches return them, but a TREC run file (lens "
                       "search --run, lens bench --save-runs) cannot name them", len(spaced),
                       ", ".join(repr(i) for i in spaced[:3]) + (", ..." if len(spaced) > 3 else ""))
    if blank:
        shown = ", ".join(repr(i) for i in blank[:5]) + (f" and {len(blank) - 5} more" if len(blank) > 5 else "")
        logger.warning("%d of %d documents have no text (title and text blank): %s; they are kept with all-zero "
                       "vectors, which score 0 for every query", len(blank), len(docs), shown)


def check_build_options(workers: int, shards: int, top_m: int | None, n_docs: int | None = None) -> None:
    """Refuse bad ``workers`` / ``shards`` / ``top_m`` before any work: positive integers, and no more shards than
    documents."""
    for name, value in (("workers", workers), ("shards", shards), ("top_m", top_m)):
        if value is None and name == "top_m":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            flag = name.replace("_", "-")
            raise ValueError(f"--{flag} must be a positive integer, got {value!r}")
    if n_docs is not None and shards > max(n_docs, 1):
        raise ValueError(f"--shards {shards} is more than the {n_docs} documents of the corpus; every shard needs a "
                         "document: give fewer shards")


def check_build_output(output: str | Path, *, resume: bool = False, overwrite: bool = False) -> None:
    """Refuse to build over a saved index unless asked to: ``overwrite``, or ``resume`` of the unfinished build
    whose chunks are kept beside it (``partial_dir``). A build replaces its output whole, so an ``--output`` that
    names an existing index by mistake would otherwise lose it. (``index.targets.check_save_target`` refuses what is
    not an index.)"""
    from index.targets import existing_index

    output = Path(output)
    found = None if overwrite else existing_index(output)
    if found is None or (resume and partial_dir(output).is_dir()):
        return
    if resume:
        raise FileExistsError(f"{found} and no unfinished build of it to resume (no {partial_dir(output).name}): "
                              "pass --overwrite to replace it, or choose a new --output")
    raise FileExistsError(f"{found}: pass --overwrite to replace it, --resume to continue an interrupted build of "
                          "it, or choose a new --output")


def encode_chunk(encoder, texts: list[str], batch_size: int):
    """(lexicon, dense or None) of documents, both unit-normalised (``HybridEncoder.encode_documents``)."""
    return encoder.encode_documents(texts, batch_size=batch_size)


# ---------------------------------------------------------------------------------------------- building
def build_index(docs: Sequence[Document], output: str | Path, encoder, **options: Any):
    """Encode ``docs`` (their ``full_text``) with ``encoder`` and save an index to ``output``; returns the index
    (a ``HybridIndex``; a sharded build's ``index.shards.ShardedIndex``), or None on a torchrun rank other than 0.

    ``encoder``: a ``lens.hybrid.HybridEncoder``, or a ``lens.sharding.EncoderSpec`` that each worker loads. Options
    are those of :func:`build_saved`. Raises ``lens.atomic.LockedError`` at once if another process is writing
    ``output``, ``FileExistsError`` if ``output`` is something other than an index, and ``StorageError`` on a full
    disk (chunks so far are kept).
    """
    from index import load_index

    manifest, index = _build(docs, Path(output), encoder, **options)
    if manifest is None:
        return None
    return index if index is not None else load_index(output)


def build_saved(docs: Sequence[Document], output: str | Path, encoder, *, index_type: str = "flat",
                chunk_size: int | None = None, batch_size: int | None = None, resume: bool = False,
                info: dict | None = None, show_progress_bar: bool = True, workers: int = 1, devices: Sequence[str] | None = None,
                shards: int = 1, top_m: int | None = None, weights: Any = None, bm25: bool | None = None,
                idf: bool = DEFAULT_IDF, store_text: bool = False) -> dict | None:
    """:func:`build_index` without loading the result: returns the saved manifest (None on a torchrun rank > 0).

    ``workers``: encoding processes (CPU; ``devices`` such as ``["cuda:0", "cuda:1"]`` puts one on each; under
    torchrun each rank is one worker). ``shards``: shard indexes to write (``ivf-ondisk``: parts merged into one
    on-disk file). ``top_m``: lexicon weights kept per document (None: all). ``weights``: the index's default query
    weights: None (``HybridIndex``'s, 0.5 / 0.5), a pair (w_lex, w_dense) or ``"balanced"``
    (``index.vectors.balanced_weights`` of a seeded sample of the corpus's vectors: each part weighted inversely to
    the spread of its cosines); an index of one part alone ignores them. ``info``: free-form facts for the
    manifest; the build adds the encoder record's keys (``lens.index_record.RECORD_KEYS``) itself. ``bm25``: keep a
    BM25 part of the documents' texts beside the vectors (``index.bm25_part``; one per shard; None: ``resolve_bm25``).
    ``idf``: searches weigh the query lexicon by the clusters' inverse document frequencies in the index unless
    they say otherwise (``HybridIndex(idf=True)``; default ``DEFAULT_IDF``). ``store_text``: keep each document's
    whole text in its stored metadata (``"text"``, beside the ``"snippet"``), so hits carry it (a RAG pipeline needs
    no store of its own); recorded in the manifest's info (``STORE_TEXT_KEY``), so `lens index add` keeps it too.
    ``chunk_size`` / ``batch_size`` None: ``build_sizes`` for the device that encodes.
    """
    manifest, _ = _build(docs, Path(output), encoder, index_type=index_type, chunk_size=chunk_size,
                         batch_size=batch_size, resume=resume, info=info, show_progress_bar=show_progress_bar,
                         workers=workers, devices=devices, shards=shards, top_m=top_m, weights=weights, bm25=bm25,
                         idf=idf, store_text=store_text)
    return manifest


def _build(docs, output: Path, encoder, *, index_type="flat", chunk_size=None, batch_size=None, resume=False, info=None,
           show_progress_bar=True, workers=1, devices=None, shards=1, top_m=None, weights=None, bm25=None,
           idf=DEFAULT_IDF, store_text=False):
    """(manifest, the in-memory index when there is one) of a build; (None, None) on a torchrun rank > 0."""
    from index.factory import get_index_type
    from index.targets import check_save_target

    check_build_options(workers, shards, top_m, len(docs))
    get_index_type(index_type)
    if weights is not None:
        weights = weights_spec(weights)  # a bad value fails before anything is encoded
    bm25 = resolve_bm25(bm25, index_type, shards)
    if bm25:
        _check_bm25()
    launch = torchrun_rank()
    if launch is not None and workers != 1:
        raise ValueError(f"under torchrun each of the {launch[1]} ranks is one worker: leave --workers out (set the "
                         "number of processes with torchrun --nproc_per_node)")
    if launch is None or launch[0] == 0:
        check_save_target(output)
    check_documents(docs)
    chunk_size, batch_size = build_sizes(chunk_size, batch_size, _encodes_on_cuda(
        encoder, devices if launch is None else [_rank_device(launch[2], devices)]))
    work = partial_dir(output)
    state = _work_state(docs, chunk_size)
    record = EncoderRecord.of_encoder(encoder)  # before encoding: a spec's model directory is read now
    if store_text:
        info = {**(info or {}), STORE_TEXT_KEY: True}
    settings = dict(index_type=index_type, shards=shards, top_m=top_m, info=info, weights=weights, record=record,
                    bm25=bool(bm25), idf=bool(idf))
    if launch is not None:
        return _build_ranked(docs, output, work, state, encoder, launch, devices, chunk_size, batch_size, resume,
                             show_progress_bar, settings)
    devices = worker_devices(workers, devices)
    if _quantize_of(encoder) is not None and devices != ["cpu"]:  # workers load the model again, in float32
        raise ValueError(f"this encoder is quantized ({_quantize_of(encoder)}), which applies to one CPU process; "
                         "drop workers / devices, or load the model without quantize=")
    with DirectoryLock(output, "index"), _kept_on_storage_error(work):
        _prepare(work, state, resume)
        if len(devices) == 1 and devices[0] == "cpu" and not isinstance(encoder, EncoderSpec):
            records = [_encode_range(encoder, docs, work, 0, 1, chunk_size, batch_size, show_progress_bar)]
        elif len(devices) == 1:
            enc = (encoder if isinstance(encoder, EncoderSpec) else EncoderSpec.of(encoder)).load(devices[0])
            records = [_encode_range(enc, docs, work, 0, 1, chunk_size, batch_size, show_progress_bar)]
        else:
            spec = encoder if isinstance(encoder, EncoderSpec) else EncoderSpec.of(encoder)
            tasks = [_task(spec, dev, docs, work, r, len(devices), chunk_size, batch_size, show_progress_bar)
                     for r, dev in enumerate(devices)]
            tasks = [t for t in tasks if t.ids] or tasks[:1]  # more workers than chunks: the rest have nothing to do
            logger.info("encoding %d documents in %d worker processes (%s)", len(docs), len(tasks), ", ".join(devices))
            records = run_in_processes(_encode_task, tasks)
        result = _assemble(docs, output, work, records, chunk_size, **settings)
        shutil.rmtree(work)
    return result


def _build_ranked(docs, output, work, state, encoder, launch, devices, chunk_size, batch_size, resume,
                  show_progress_bar, settings):
    """The build under torchrun: rank 0 prepares, every rank encodes its shard, rank 0 assembles."""
    rank, world, local = launch
    group = RankGroup()
    lock = DirectoryLock(output, "index")
    try:
        if rank == 0:
            try:
                lock.acquire()
                _prepare(work, state, resume)
            except BaseException as e:
                group.share(f"{type(e).__name__}: {e}")
                raise
        group.share(None)
        error = None
        try:
            if not isinstance(encoder, EncoderSpec):
                enc = encoder  # each rank loaded its own
            else:
                enc = load_encoder(encoder, _rank_device(local, devices))
            with _kept_on_storage_error(work):
                _encode_range(enc, docs, work, rank, world, chunk_size, batch_size, show_progress_bar)
        except Exception as e:  # noqa: BLE001 - every rank must reach the gather below
            error = e
        failed = group.gather(None if error is None else f"{type(error).__name__}: {error}")
        if error is not None:
            raise error
        if failed:
            raise ValueError("; ".join(f"rank {r} failed: {e}" for r, e in failed) +
                             " (the chunks encoded so far are kept: run the same command with --resume)")
        if rank != 0:
            return None, None
        with _kept_on_storage_error(work):
            records = [read_record(work, r, world) for r in range(world)]
            result = _assemble(docs, output, work, records, chunk_size, **settings)
        shutil.rmtree(work)
        return result
    finally:
        if rank == 0:
            lock.release()
        group.close()


def resolve_bm25(bm25: bool | None, index_type: str, shards: int) -> bool:
    """Whether a build keeps a BM25 part: as asked, else ``DEFAULT_BM25``, except for an ``ivf-ondisk`` build in
    parts (``shards`` > 1). That one writes its vectors to disk part by part to bound its memory, while its one BM25
    part would hold every document's terms in memory until the save (about 0.75 KB a document at SciFact's length,
    ``benchmarks/results/bm25_part.md``): it keeps none unless asked (``--bm25``), and a warning says so when asked."""
    from index.factory import get_index_type

    parts_on_disk = get_index_type(index_type).on_disk and shards > 1
    if bm25 is None:
        if parts_on_disk and DEFAULT_BM25:
            logger.info("an ivf-ondisk build in %d parts keeps no BM25 part unless --bm25: it would hold every "
                        "document's terms in memory until the save", shards)
            return False
        return DEFAULT_BM25
    if bm25 and parts_on_disk:
        logger.warning("--bm25 with an ivf-ondisk build in %d parts: the BM25 part holds every document's terms in "
                       "memory until the save (about 0.75 KB a document), while the vectors go to disk", shards)
    return bool(bm25)


def _check_bm25() -> None:
    """Load the BM25 tokeniser (bm25s, PyStemmer) before anything is encoded, so a broken install fails first."""
    from lens.bm25 import tokenize

    tokenize(["check"])


def _rank_device(local_rank: int, devices: Sequence[str] | None) -> str:
    if devices:
        from lens.sharding import check_devices

        devices = check_devices(devices)
        if local_rank >= len(devices):
            raise ValueError(f"LOCAL_RANK={local_rank} but only {len(devices)} devices were given "
                             f"({', '.join(devices)}); give one per process on each machine")
        return devices[local_rank]
    import torch

    return f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu"


@contextlib.contextmanager
def _kept_on_storage_error(work: Path) -> Iterator[None]:
    try:
        yield
    except StorageError as e:
        kept = sorted(work.glob("chunk-*.npz")) if work.is_dir() else []
        if kept:
            e.note = f"{len(kept)} encoded chunks are kept in {work}: run the same command with --resume to continue"
        raise


def partial_dir(output: Path) -> Path:
    """Where a build of ``output`` keeps its encoded chunks until the index is saved (``--resume`` reads them)."""
    return output.parent / f".{output.name}.partial"


def adding_dir(directory: Path) -> Path:
    """Where ``lens index add`` keeps the chunks it has encoded for the index at ``directory`` until it is saved."""
    return directory.parent / f".{directory.name}.adding"


def _prepare(work: Path, state: dict, resume: bool, what: str = "build") -> None:
    """Continue the unfinished ``what`` (a build, an addition) in ``work`` (``resume``, same corpus and chunk size)
    or start a fresh one."""
    if work.exists():
        old = _read_state(work)
        if resume and old == state:
            logger.info("resuming the %s in %s", what, work)
        elif resume:
            raise ValueError(
                f"the unfinished {what} in {work} was for another corpus or chunk size (or an older LENS); "
                "run without --resume to start over"
            )
        else:
            logger.warning("discarding the unfinished %s in %s (pass --resume to continue it)", what, work)
            shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    write_json(work / "state.json", state)


def encode_chunks(docs: Sequence[Document], work: Path, encoder, *, chunk_size: int = 64, batch_size: int = 16,
                  resume: bool = False, show_progress_bar: bool = True, what: str = "addition") -> "EncodedChunks":
    """Encode ``docs`` in this process into chunk files in ``work``, resumable as a build is (``resume``: the chunks
    already there, of these documents and this encoder, are kept); returns them, read back one at a time. A full
    disk raises ``StorageError`` saying that the chunks so far are kept."""
    state = _work_state(docs, chunk_size)
    with _kept_on_storage_error(work):
        _prepare(work, state, resume, what)
        record = _encode_range(encoder, docs, work, 0, 1, chunk_size, batch_size, show_progress_bar)
    _report_truncation([record], len(docs))
    return EncodedChunks(docs, work, [record], chunk_size)


def _work_state(docs: Sequence[Document], chunk_size: int) -> dict:
    """What a work directory's chunks were encoded for (``state.json``): a resume must find the same."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"--chunk-size must be a positive integer, got {chunk_size!r}")
    return {"version": STATE_VERSION, "corpus_sha256": corpus_hash(docs), "chunk_size": chunk_size}


def _read_state(work: Path) -> dict | None:
    try:
        return read_json(work / "state.json", "build state")
    except (FileNotFoundError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------- encoding
@dataclass(frozen=True)
class _Task:
    """What a worker process needs to encode one shard (sent by pickle; its texts read when encoded: from a
    ``CorpusFile`` a view pickles as its path and offsets)."""

    spec: EncoderSpec
    device: str
    ids: list[str]
    texts: Sequence[str]
    work: str
    first_chunk: int
    chunk_size: int
    batch_size: int
    rank: int
    world: int
    show_progress_bar: bool


def _shard_docs(docs: Sequence[Document], chunk_size: int, rank: int, world: int) -> tuple[int, Sequence[Document]]:
    """(first chunk, documents) of ``rank``'s contiguous shard of ``world`` (``shard_slice`` over the chunks)."""
    from lens.train.distributed import shard_slice

    n_chunks = -(-len(docs) // chunk_size)
    chunks = range(n_chunks)[shard_slice(n_chunks, rank, world)]
    return chunks.start, docs[chunks.start * chunk_size : chunks.stop * chunk_size]


def _task(spec, device, docs, work, rank, world, chunk_size, batch_size, show_progress_bar) -> _Task:
    first, part = _shard_docs(docs, chunk_size, rank, world)
    return _Task(spec, device, [d.id for d in part], DocumentTexts(part), str(work), first, chunk_size,
                 batch_size, rank, world, show_progress_bar)


def _encode_task(task: _Task) -> dict:
    """A worker process's job: load the encoder (once per process) and encode its shard."""
    encoder = load_encoder(task.spec, task.device)
    return encode_shard(encoder, task.ids, task.texts, Path(task.work), first_chunk=task.first_chunk,
                        chunk_size=task.chunk_size, batch_size=task.batch_size, rank=task.rank, world=task.world,
                        show_progress_bar=task.show_progress_bar)


def _encode_range(encoder, docs, work, rank, world, chunk_size, batch_size, show_progress_bar) -> dict:
    """This process encodes ``rank``'s shard itself (one process, or a torchrun rank)."""
    first, part = _shard_docs(docs, chunk_size, rank, world)
    return encode_shard(encoder, [d.id for d in part], DocumentTexts(part), work, first_chunk=first,
                        chunk_size=chunk_size, batch_size=batch_size, rank=rank, world=world,
                        show_progress_bar=show_progress_bar)


def encode_shard(encoder, ids: Sequence[str], texts: Sequence[str], work: Path, *, first_chunk: int, chunk_size: int,
                 batch_size: int, rank: int = 0, world: int = 1, show_progress_bar: bool = True) -> dict:
    """Encode one shard's documents into chunk files ``first_chunk, first_chunk + 1, ...`` of ``work`` (skipping
    the chunks already there, whole and of this encoder and quantisation) and write its record
    ``encode-<rank>-of-<world>.json``; returns it."""
    from tqdm.auto import tqdm

    from lens.encoder import count_truncations

    fingerprint = encoder.fingerprint()
    fp_sha = fingerprint_sha(fingerprint)
    dims = (encoder.lexicon_dim, encoder.dense_dim)
    quantize = _quantize_of(encoder)
    chunks, requantized = [], False
    desc = "Encoding" if world == 1 else f"Encoding {rank + 1}/{world}"
    bar = tqdm(total=len(ids), desc=desc, unit="doc", position=rank if world > 1 else None,
               disable=not show_progress_bar)
    try:  # closed on Ctrl-C too, so the message that follows starts on its own line
        for j, start in enumerate(range(0, len(ids), chunk_size)):
            path = chunk_path(work, first_chunk + j)
            chunk_ids = list(ids[start : start + chunk_size])
            ids_digest = ids_sha(chunk_ids)
            data = read_bytes(path)
            chunk = None if data is None else parse_chunk(data, ids_digest, fp_sha, dims)
            if data is not None and chunk is None:
                logger.warning("chunk %s is damaged or belongs to other documents or another encoder; encoding it "
                               "again", path.name)
            elif chunk is not None and chunk.quantize != quantize:
                if not requantized:  # one warning for the shard, not one per chunk
                    logger.warning("the unfinished build in %s holds chunks encoded in %s (%s first), but this "
                                   "build encodes in %s: encoding them again, so that the index never mixes int8 and "
                                   "float32 vectors", work, quantize_label(chunk.quantize), path.name,
                                   quantize_label(quantize))
                requantized, chunk = True, None
            if chunk is None:
                with count_truncations() as tally:  # reported once for the whole build, by _assemble
                    lex, dense = encode_chunk(encoder, list(texts[start : start + chunk_size]), batch_size)
                chunk = Chunk(lex, dense, quantize, tally.truncated)
                data = chunk_bytes(chunk, ids_digest, fp_sha)
                atomic_write_bytes(path, data)
            chunks.append({"file": path.name, "sha256": hashlib.sha256(data).hexdigest(), "rows": len(chunk_ids),
                           "truncated": chunk.truncated})
            bar.update(len(chunk_ids))
    finally:
        bar.close()
    record = {"version": RECORD_VERSION, "rank": rank, "world": world, "first_chunk": first_chunk,
              "documents": len(ids), "fingerprint": fingerprint, "quantize": quantize,
              "max_seq_length": _max_seq_length(encoder), "lexicon_dim": dims[0], "dense_dim": dims[1],
              "chunks": chunks}
    write_json(work / record_name(rank, world), record)
    return record


def _quantize_of(encoder) -> str | None:
    """The quantisation of ``encoder``'s LENS model (a ``HybridEncoder``'s ``.lens``): ``"int8"``, or None."""
    return getattr(getattr(encoder, "lens", encoder), "quantize", None)


def _max_seq_length(encoder) -> int | None:
    return getattr(getattr(encoder, "lens", encoder), "max_seq_length", None)


# ---------------------------------------------------------------------------------------------- assembly
class EncodedChunks:
    """The encoded chunks of a build (or of `lens index add`), read one at a time and checked against the shard
    records."""

    def __init__(self, docs: Sequence[Document], work: Path, records: Sequence[dict], chunk_size: int) -> None:
        records = sorted(records, key=lambda r: r["first_chunk"])
        first = records[0]
        for r in records[1:]:
            if r["fingerprint"] != first["fingerprint"] or (r["lexicon_dim"], r["dense_dim"]) != (
                    first["lexicon_dim"], first["dense_dim"]):
                raise ValueError(
                    f"worker {r['rank']} encoded with another encoder than worker {first['rank']} (fingerprint "
                    f"{fingerprint_sha(r['fingerprint'])[:12]} vs {fingerprint_sha(first['fingerprint'])[:12]}): "
                    "load the same model on every device (a GPU loads bfloat16 weights, a CPU float32)")
            if r.get("quantize") != first.get("quantize"):
                raise ValueError(
                    f"worker {r['rank']} encoded {quantize_label(r.get('quantize'))} vectors and worker "
                    f"{first['rank']} {quantize_label(first.get('quantize'))}; an index never mixes them: load the "
                    "model with the same quantize= in every worker")
        self.fingerprint = first["fingerprint"]
        self.quantize = first.get("quantize")
        self.dims = (first["lexicon_dim"], first["dense_dim"])
        self._fp_sha = fingerprint_sha(self.fingerprint)
        self.docs, self.work = docs, work
        self.entries = [c for r in records for c in r["chunks"]]
        expected = -(-len(docs) // chunk_size)
        bounds = [(i * chunk_size, min((i + 1) * chunk_size, len(docs))) for i in range(expected)]
        if len(self.entries) != expected or any(c["rows"] != b - a for c, (a, b) in zip(self.entries, bounds)):
            raise ValueError(f"the shard records in {work} do not cover the corpus's {len(docs)} documents in "
                             "order; run the build again without --resume")
        self.bounds = bounds

    def load(self, i: int, docs: Sequence[Document] | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """Chunk ``i``'s (lexicon, dense), checked against its documents' ids (``docs``: those documents when the
        caller has read them already, else read here)."""
        entry, (start, stop) = self.entries[i], self.bounds[i]
        path = self.work / entry["file"]
        data = read_bytes(path)
        if data is None or hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise ValueError(f"chunk {path} is missing or changed since it was encoded (its sha256 is not the "
                             "recorded one); run the same command with --resume to encode it again")
        docs = self.docs[start:stop] if docs is None else docs
        parsed = parse_chunk(data, ids_sha([d.id for d in docs]), self._fp_sha, self.dims)
        if parsed is None or parsed.quantize != self.quantize:
            raise ValueError(f"chunk {path} does not hold the {quantize_label(self.quantize)} vectors of documents "
                             f"{start}..{stop - 1}; run the build again without --resume")
        return parsed.lexicon, parsed.dense

    def overlapping(self, start: int, stop: int) -> Iterator[tuple[int, int, int]]:
        """``(chunk, first row, end row)`` of the chunks holding documents ``start`` to ``stop``, rows within."""
        for i, (a, b) in enumerate(self.bounds):
            if b > start and a < stop:
                yield i, max(start, a) - a, min(stop, b) - a


def _assemble(docs, output: Path, work: Path, records, chunk_size: int, *, index_type: str, shards: int,
              top_m: int | None, info: dict | None, record: EncoderRecord, weights: Any = None, bm25: bool = False,
              idf: bool = DEFAULT_IDF):
    """Train (once), fill and save the index from the encoded chunks; returns (manifest, in-memory index or None).
    The manifest's ``info`` records the encoders (``record``) with the quantisation the chunks were encoded in."""
    from index import HybridIndex
    from index.factory import get_index_type
    from index.manifest import read_manifest
    from index.shards import ShardWriter
    from lens.atomic import atomic_dir
    from lens.train.distributed import shard_slice

    chunks = EncodedChunks(docs, work, records, chunk_size)
    _report_truncation(records, len(docs))
    store_text = stores_text(info)
    info = _recorded_info(info, record.with_quantize(chunks.quantize))
    itype = get_index_type(index_type)
    options, train_size = {}, 0
    if itype.needs_training:
        plan = itype.training_plan(itype.resolve_options({}), len(docs))
        if len(docs) >= plan.min_train:  # else the documents stay in exact staging, as HybridIndex.add does
            options, train_size = plan.options, plan.train_size
    if not all(chunks.dims):
        weights = None  # one part alone: its own default
    elif isinstance(weights, str):  # "balanced": from the same seeded sample whatever the workers or shards
        lex, dense = _sample(chunks, len(docs), BALANCED_ROWS)
        weights = resolve_weights(weights, lex if top_m is None else prune_top_m(lex, top_m), dense)  # as stored
        info = {**(info or {}), "weights_source": "balanced (index.vectors.balanced_weights of the corpus)"}
        logger.info("balanced query weights for this corpus: lexicon %.3f, dense %.3f", *weights)
    template = HybridIndex(*chunks.dims, index_type, weights=weights, fingerprint=chunks.fingerprint, info=info,
                           top_m=top_m, bm25=bm25, idf=idf and bool(chunks.dims[0]), **options)
    template.set_casing_table(corpus_casing(docs, record))
    if train_size:
        template.train(*_sample(chunks, len(docs), train_size))
    parts = [shard_slice(len(docs), s, shards) for s in range(shards)]
    if shards == 1 or itype.on_disk:
        spilled = False
        for s, part in enumerate(parts):
            fill_index(template, chunks, docs, part, store_text=store_text)
            if s + 1 < len(parts) and template.is_trained:
                template.spill(work / f"lists-{s:05d}.faiss")
                spilled = True
        template.save(output)
        return read_manifest(output), (None if spilled else template)
    with atomic_dir(output, what="index") as tmp:
        writer = ShardWriter(tmp)
        for part in parts:
            shard = template.clone_empty()
            fill_index(shard, chunks, docs, part, store_text=store_text)
            writer.add(shard)
            del shard  # one shard in memory at a time
        manifest = writer.finish(info)
    return manifest, None


def corpus_casing(docs: Sequence[Document], record: EncoderRecord):
    """The corpus's own casing table (``lens.casing.own_casing_table``) when the model's text rule truecases, so
    that the index's queries in capitals come back to the corpus's forms of its words (``lens.search``); else None."""
    from lens.inputs import CASING_RULES

    if record.text_normalization not in CASING_RULES:
        return None
    from lens.casing import own_casing_table, spaced_sample

    table = own_casing_table([d.full_text for d in spaced_sample(docs)])  # the sample's texts only
    logger.info("corpus casing table: %d words' usual forms from %d mixed-case documents", len(table.forms),
                table.texts)
    return table


def _recorded_info(info: dict | None, record: EncoderRecord) -> dict:
    """``info`` with the encoder record's entries (``lens.index_record``), which win over the caller's."""
    entries = record.to_info()
    clash = sorted(k for k in entries if k in (info or {}) and info[k] != entries[k])
    if clash:
        logger.warning("info %s given to the build differ from the encoders that built the index; the index "
                       "records the encoders' (%s)", clash, ", ".join(f"{k}={entries[k]!r}" for k in clash))
    return {**(info or {}), **entries}


def _report_truncation(records: Sequence[dict], n_docs: int) -> None:
    """One warning for the whole build: the documents truncated to ``max_seq_length``, summed over every chunk
    (encoded in this run or before it; by any worker)."""
    cut = sum(c.get("truncated", 0) for r in records for c in r["chunks"])
    report_truncation(cut, n_docs, "/".join(sorted({str(r.get("max_seq_length")) for r in records})))


def report_truncation(cut: int, n_docs: int, max_seq_length: Any) -> None:
    """Warn once that ``cut`` of ``n_docs`` indexed documents were truncated to ``max_seq_length`` tokens."""
    if cut:
        logger.warning("%d of %d documents were longer than max_seq_length=%s tokens and were truncated (their ends "
                       "are not indexed: split long documents into passages to search all of their text)", cut,
                       n_docs, max_seq_length)


def document_metadata(doc: Document, store_text: bool = False) -> dict:
    """What an index stores beside a document's vectors: its title, the start of its text (``SNIPPET_CHARS``, for
    search results), with ``store_text`` its whole text, and its corpus record's extra fields."""
    return {"title": doc.title, "snippet": doc.text[:SNIPPET_CHARS], **({"text": doc.text} if store_text else {}),
            **doc.extra}


def stores_text(info: Mapping[str, Any] | None) -> bool:
    """Whether an index (its manifest's ``info``) keeps its documents' whole texts (``build_saved(store_text=)``)."""
    return bool((info or {}).get(STORE_TEXT_KEY))


def fill_index(index, chunks: EncodedChunks, docs, part: slice, upsert: bool = False,
               store_text: bool = False) -> None:
    """Add documents ``part`` of ``docs`` to ``index`` from their encoded chunks, with their stored metadata
    (``document_metadata``; ``store_text``: their whole texts too) and their texts, for an index with a BM25 part."""
    bm25 = getattr(index, "has_bm25", False)
    for i, a, b in chunks.overlapping(part.start, part.stop):
        chunk_docs = list(docs[slice(*chunks.bounds[i])])  # read once (a CorpusFile parses them again per read)
        lex, dense = chunks.load(i, chunk_docs)
        rows = chunk_docs[a:b]
        index.add([d.id for d in rows], lex[a:b], None if dense is None else dense[a:b],
                  metadata=[document_metadata(d, store_text) for d in rows], upsert=upsert,
                  texts=[d.full_text for d in rows] if bm25 else None)


def _sample(chunks: EncodedChunks, n: int, size: int) -> tuple[np.ndarray, np.ndarray | None]:
    """A seeded random sample of ``size`` documents' (lexicon, dense) from the whole corpus, in corpus order."""
    rng = np.random.default_rng(_SAMPLE_SEED)
    pick = np.arange(n) if size >= n else np.sort(rng.choice(n, size=size, replace=False))
    lex, dense = [], []
    for i, (a, b) in enumerate(chunks.bounds):
        lo, hi = np.searchsorted(pick, [a, b])
        if lo == hi:
            continue
        chunk_lex, chunk_dense = chunks.load(i)
        lex.append(chunk_lex[pick[lo:hi] - a])
        if chunk_dense is not None:
            dense.append(chunk_dense[pick[lo:hi] - a])
    return np.concatenate(lex), (np.concatenate(dense) if dense else None)
