"""Build a hybrid index from a corpus, chunk by chunk, resumable after an interruption.

Encoded chunks are written to a work directory beside the output (``.<name>.partial``); an interrupted build
run again with ``resume=True`` encodes only the chunks that are not there yet. The finished index is saved
atomically and the work directory removed.

The whole build holds the output's writer lock (``lens.atomic.DirectoryLock``, the one ``HybridIndex.save`` takes),
so a second build or save to the same output fails at once instead of deleting this one's work directory. Each
chunk records the sha256 of its document ids, so a chunk is never attached to documents it was not encoded from; a
damaged chunk is encoded again. A full disk raises ``lens.atomic.StorageError`` saying that the chunks written so
far are kept for ``--resume``.
"""

from __future__ import annotations

import hashlib
import io
import logging
import shutil
from pathlib import Path
from typing import Sequence

import numpy as np

from lens.atomic import DirectoryLock, StorageError, atomic_write_bytes, read_json, write_json
from lens.corpus import Document, invalid_unicode

logger = logging.getLogger(__name__)

SNIPPET_CHARS = 300


def corpus_hash(docs: Sequence[Document]) -> str:
    h = hashlib.sha256()
    for d in docs:
        for part in (d.id, d.title, d.text):
            h.update(part.encode("utf-8"))
            h.update(b"\x00")
    return h.hexdigest()


def ids_hash(docs: Sequence[Document]) -> str:
    """sha256 of a chunk's document ids: what ties a saved chunk to its documents."""
    return hashlib.sha256("\x00".join(d.id for d in docs).encode("utf-8")).hexdigest()


def check_documents(docs: Sequence[Document]) -> None:
    """Refuse a document whose id, title or text is not valid Unicode, naming it (before any encoding)."""
    for d in docs:
        for field, value in (("id", d.id), ("title", d.title), ("text", d.text)):
            problem = invalid_unicode(value)
            if problem is not None:
                raise ValueError(f"document {d.id!r}: its {field} holds {problem}; fix the corpus record")


def encode_chunk(encoder, texts: list[str], batch_size: int):
    """(lexicon, dense or None) of documents, both unit-normalised (``HybridEncoder.encode_documents``)."""
    return encoder.encode_documents(texts, batch_size=batch_size)


def _chunk_path(work: Path, i: int) -> Path:
    return work / f"chunk-{i:06d}.npz"


def _load_chunk(path: Path, chunk: Sequence[Document], dim: int, dense_dim: int | None):
    """(lexicon, dense or None) of a saved chunk if it is whole and belongs to ``chunk``'s documents, else None."""
    try:
        with np.load(path) as z:
            if "ids_sha256" not in z or str(z["ids_sha256"]) != ids_hash(chunk):
                return None
            lex = z["lexicon"]
            dense = z["dense"] if "dense" in z else None
    except Exception:  # truncated or overwritten: numpy and zipfile raise several types
        return None
    if lex.shape != (len(chunk), dim) or (dense_dim is not None) != (dense is not None):
        return None
    if dense is not None and dense.shape != (len(chunk), dense_dim):
        return None
    return lex, dense


def build_index(
    docs: Sequence[Document],
    output: str | Path,
    encoder,
    *,
    index_type: str = "flat",
    chunk_size: int = 64,
    batch_size: int = 16,
    resume: bool = False,
    info: dict | None = None,
    show_progress_bar: bool = True,
):
    """Encode ``docs`` (their ``full_text``) with ``encoder`` (a ``lens.hybrid.HybridEncoder``) and save a
    :class:`index.HybridIndex` to ``output``; returns the index.

    Raises ``lens.atomic.LockedError`` at once if another process is writing ``output``, ``FileExistsError`` if
    ``output`` is something other than an index, and ``StorageError`` on a full disk (chunks so far are kept).
    """
    from index import HybridIndex
    from index.store import check_save_target

    output = Path(output)
    check_save_target(output)
    check_documents(docs)
    work = output.parent / f".{output.name}.partial"
    with DirectoryLock(output, "index"):
        try:
            return _build(docs, output, work, encoder, HybridIndex, index_type=index_type, chunk_size=chunk_size,
                          batch_size=batch_size, resume=resume, info=info, show_progress_bar=show_progress_bar)
        except StorageError as e:
            kept = sorted(work.glob("chunk-*.npz")) if work.is_dir() else []
            if kept:
                e.note = (f"{len(kept)} encoded chunks are kept in {work}: run the same command with --resume to "
                          "continue")
            raise


def _build(docs, output: Path, work: Path, encoder, index_cls, *, index_type, chunk_size, batch_size, resume, info,
           show_progress_bar):
    from tqdm.auto import tqdm

    fingerprint = encoder.fingerprint()
    state = {"corpus_sha256": corpus_hash(docs), "fingerprint": fingerprint, "chunk_size": chunk_size}
    if work.exists():
        old = _read_state(work)
        if resume and old == state:
            logger.info("resuming the build in %s", work)
        elif resume:
            raise ValueError(
                f"the unfinished build in {work} was for another corpus, encoder or chunk size; "
                "run without --resume to start over"
            )
        else:
            logger.warning("discarding the unfinished build in %s (pass --resume to continue it)", work)
            shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    write_json(work / "state.json", state)

    starts = range(0, len(docs), chunk_size)
    lex_dim, dense_dim = encoder.lexicon_dim, encoder.dense_dim
    done = set()
    for i, s in enumerate(starts):
        path = _chunk_path(work, i)
        if path.is_file():
            if _load_chunk(path, docs[s : s + chunk_size], lex_dim, dense_dim) is not None:
                done.add(i)
            else:
                logger.warning("chunk %s is damaged or belongs to other documents; encoding it again", path.name)
    bar = tqdm(total=len(docs), initial=sum(len(docs[s : s + chunk_size]) for i, s in enumerate(starts) if i in done),
               desc="Encoding", unit="doc", disable=not show_progress_bar)
    try:  # closed on Ctrl-C too, so the message that follows starts on its own line
        for i, s in enumerate(starts):
            if i in done:
                continue
            chunk = docs[s : s + chunk_size]
            lex, dense = encode_chunk(encoder, [d.full_text for d in chunk], batch_size)
            buf = io.BytesIO()
            np.savez(buf, lexicon=lex, ids_sha256=np.array(ids_hash(chunk)),
                     **({"dense": dense} if dense is not None else {}))
            atomic_write_bytes(_chunk_path(work, i), buf.getvalue())
            bar.update(len(chunk))
    finally:
        bar.close()

    index = index_cls(lex_dim, dense_dim, index_type=index_type, fingerprint=fingerprint, info=info)
    for i, s in enumerate(starts):
        chunk = docs[s : s + chunk_size]
        loaded = _load_chunk(_chunk_path(work, i), chunk, lex_dim, dense_dim)
        if loaded is None:  # changed under us although we hold the lock: never attach wrong vectors
            raise ValueError(f"chunk {_chunk_path(work, i)} changed during the build; run the build again")
        meta = [{"title": d.title, "snippet": d.text[:SNIPPET_CHARS], **d.extra} for d in chunk]
        index.add([d.id for d in chunk], loaded[0], loaded[1], metadata=meta)
    index.save(output)
    shutil.rmtree(work)
    return index


def _read_state(work: Path) -> dict | None:
    try:
        return read_json(work / "state.json", "build state")
    except (FileNotFoundError, ValueError):
        return None
