"""``lens encode`` of a file of any size: texts encoded a chunk at a time, each chunk written as soon as it is
encoded (``lens.export.ExportWriter``), and the work resumable.

Memory holds one chunk of texts and vectors (``chunk_size`` texts per worker), not the corpus's vectors: a corpus
of 8.8M documents at k 8000 would otherwise hold 282 GB of float32 before writing anything. Until the export is
whole, the file under construction and a ``state.json`` of what it was made from live in the work directory
``.NAME.partial`` beside the output (``partial_path``); after each chunk the file is flushed to disk and the state
records the rows done, so an interrupted encode (Ctrl-C, a full disk, a lost machine) loses at most the chunk in
flight, and ``resume`` continues it when the input, the model, its quantisation and every option that changes the
output are the same. The output appears only when complete, renamed into place (``lens.atomic``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Sequence

from lens.atomic import DirectoryLock, StorageError, publish_file, read_json, storage_errors, write_json
from lens.chunks import fingerprint_sha, quantize_label
from lens.corpus import Document
from lens.export import ExportOptions, ExportWriter, check_format

__all__ = ["CHUNK_SIZE", "EncodeSummary", "TextRecord", "encode_to_file", "partial_path"]

logger = logging.getLogger(__name__)

STATE_VERSION = 1
CHUNK_SIZE = 1024  # texts a worker encodes per chunk: what memory holds, and what an interruption can lose


class TextRecord(NamedTuple):
    """A text to encode as it is given (a ``lens.corpus.Document`` serves too: what is read is ``id`` and
    ``full_text``)."""

    id: str
    full_text: str


@dataclass(frozen=True)
class EncodeSummary:
    """What an encode wrote: rows and their width; for a sparse format the weights written and empty records."""

    rows: int
    dim: int
    entries: int | None  # weights written in all (sparse formats), None for npy
    empty: int | None  # records holding no weight (sparse formats)
    blank: int = 0  # texts of nothing but whitespace: all-zero vectors in every format


def partial_path(output: Path) -> Path:
    """Where an encode to ``output`` keeps its unfinished file and state until the export is whole."""
    return output.parent / f".{output.name}.partial"


def _input_sha(docs: Sequence[Document | TextRecord]) -> str:
    """sha256 of the ids and texts to encode (one pass; a resume must find the same input)."""
    h = hashlib.sha256()
    for d in docs:
        for part in (d.id, d.full_text):
            h.update(part.encode("utf-8", "surrogatepass"))
            h.update(b"\x00")
    return h.hexdigest()


def encode_to_file(encoder, docs: Sequence[Document | TextRecord], output: str | Path, format: str = "npy", *,
                   labels: Sequence[str] | None = None, options: ExportOptions | None = None,
                   queries: bool = False, instruction: str | None = None, kind: str = "lexicon",
                   normalize: bool = True, top_m: int | None = None, batch_size: int | None = None,
                   workers: int = 1, devices: Sequence[str] | None = None, chunk_size: int = CHUNK_SIZE,
                   resume: bool = False, show_progress_bar: bool = True) -> EncodeSummary:
    """Encode the ``full_text`` of each of ``docs`` (``TextRecord``s, or ``Document``s: a list, or a
    ``lens.corpus.CorpusFile`` read where it lies) with ``encoder`` (a ``LensEncoder``) as queries behind
    ``instruction`` or as documents, and write the vectors to ``output`` in ``format`` (``lens.export.FORMATS``;
    the sparse ones with ``labels`` and ``options``), rows in input order, ids the documents'. ``workers`` /
    ``devices`` as ``lens.sharding.encode_texts``; ``top_m`` keeps each vector's heaviest clusters
    (``index.vectors.prune_top_m``). ``resume``: continue the unfinished encode kept in ``partial_path(output)``
    (without it, one found there is discarded with a warning). ``output`` is replaced when the export is whole; the
    caller decides whether it may be."""
    from index.vectors import prune_top_m
    from lens.sharding import encode_texts

    output = Path(output)
    fmt = check_format(format, output)
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    options = options or ExportOptions()
    state = {
        "version": STATE_VERSION, "input_sha256": _input_sha(docs), "rows": len(docs), "format": format,
        "options": dataclasses.asdict(options) if fmt.sparse else {}, "encoder": fingerprint_sha(encoder.fingerprint()),
        "quantize": quantize_label(getattr(encoder, "quantize", None)), "queries": queries,
        "instruction": instruction if queries else None, "kind": kind, "normalize": normalize, "top_m": top_m,
    }
    work = partial_path(output)
    with DirectoryLock(work, "encode"):
        part = work / f"part{fmt.suffix}"
        progress = _start(work, part, state, resume)

        def encode(texts: list[str]):
            vectors = encode_texts(encoder, texts, queries=queries, instruction=instruction, workers=workers,
                                   devices=devices, batch_size=batch_size, show_progress_bar=False,
                                   normalize=normalize, output=kind)
            return vectors if top_m is None else prune_top_m(vectors, top_m)

        step = chunk_size * max(1, workers if devices is None else len(devices))
        try:
            with storage_errors(output):
                writer = ExportWriter(part, format, len(docs), labels, options, done=progress["done"],
                                      size=progress["size"])
                _write_chunks(docs, step, encode, writer, progress, queries, lambda: write_json(
                    work / "state.json", {**state, "progress": progress}), show_progress_bar)
                writer.close()
        except BaseException as e:
            _keep_or_drop(work, len(docs), e)
            raise
        publish_file(part, output)
        shutil.rmtree(work)
    dim = progress["dim"] if progress["dim"] is not None else len(labels or ())  # no rows: the labels' count
    return EncodeSummary(len(docs), dim, progress["entries"] if fmt.sparse else None,
                         progress["empty"] if fmt.sparse else None, progress["blank"])


def _write_chunks(docs, step: int, encode, writer: ExportWriter, progress: dict, queries: bool, save_progress,
                  show_progress_bar: bool) -> None:
    """Encode and write ``docs`` from ``progress["done"]`` on, ``step`` at a time, recording after each chunk what
    is written and durable (``save_progress``). A query's text is written on one line, its runs of whitespace
    (tabs, line breaks) one space: a search tool looks a query up by that text (Pyserini's cached-query encoder
    by ``contents``), from a topics file of one query per line and tab-separated fields."""
    from tqdm.auto import tqdm

    with tqdm(total=len(docs), initial=progress["done"], unit="text", desc="encode",
              disable=not show_progress_bar) as bar:  # closed (its line ended) on an error too
        for start in range(progress["done"], len(docs), step):
            chunk = list(docs[start:start + step])
            texts = [d.full_text for d in chunk]
            vectors = encode(texts)
            progress["blank"] += sum(not t.strip() for t in texts)
            written = [" ".join(t.split()) for t in texts] if queries else texts
            entries = writer.write(vectors, [d.id for d in chunk], written)
            if entries is not None:
                progress["entries"] += int(sum(entries))
                progress["empty"] += int(sum(n == 0 for n in entries))
            progress.update(done=writer.done, size=writer.sync(), dim=int(vectors.shape[1]))
            save_progress()
            bar.update(len(chunk))


def _keep_or_drop(work: Path, rows: int, error: BaseException) -> None:
    """After a failed encode: drop a work directory holding no encoded text, or say what it keeps and how to
    continue (in a storage error's note, else a warning)."""
    kept = _read_progress(work)
    if not (kept and kept["done"]):
        shutil.rmtree(work, ignore_errors=True)
        return
    note = (f"{kept['done']} of {rows} texts are encoded and kept in {work}: run the same command with --resume to "
            "continue")
    if isinstance(error, StorageError):
        error.note = f"{error.note}; {note}" if error.note else note
    else:
        logger.warning("stopped: %s", note)


def _start(work: Path, part: Path, state: dict, resume: bool) -> dict[str, Any]:
    """The progress to continue from: the unfinished encode in ``work`` (its file ``part``) when ``resume`` and it
    was for the same ``state``; else a fresh start (discarding, with a warning, an unfinished encode not asked to
    resume)."""
    fresh = {"done": 0, "size": 0, "dim": None, "entries": 0, "empty": 0, "blank": 0}
    if work.exists():
        old = _read_state(work)
        same = old is not None and {k: v for k, v in old.items() if k != "progress"} == state
        if resume and same and old.get("progress") and (part.is_file() or not old["progress"]["done"]):
            logger.info("resuming the encode in %s: %d of %d texts done", work, old["progress"]["done"],
                        state["rows"])
            return {**fresh, **old["progress"]}  # a progress saved before it counted blanks: 0 of them
        if resume and not same:
            raise ValueError(f"the unfinished encode in {work} was of another input, model or options (or an older "
                             "LENS): run without --resume to start over")
        if not resume:
            logger.warning("discarding the unfinished encode in %s (pass --resume to continue it)", work)
        shutil.rmtree(work)
    work.mkdir(parents=True)
    write_json(work / "state.json", {**state, "progress": fresh})
    return fresh


def _read_state(work: Path) -> dict | None:
    try:
        return read_json(work / "state.json", "encode state")
    except (FileNotFoundError, ValueError):
        return None


def _read_progress(work: Path) -> dict | None:
    state = _read_state(work)
    return None if state is None else state.get("progress")
