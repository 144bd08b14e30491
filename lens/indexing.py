"""Build a hybrid index from a corpus, chunk by chunk, resumable after an interruption.

Encoded chunks are written to a work directory beside the output (``.<name>.partial``); an interrupted build
run again with ``resume=True`` encodes only the chunks that are not there yet. The finished index is saved
atomically and the work directory removed.
"""

from __future__ import annotations

import hashlib
import io
import logging
import shutil
from pathlib import Path
from typing import Sequence

import numpy as np

from lens.atomic import atomic_write_bytes, read_json, write_json
from lens.corpus import Document

logger = logging.getLogger(__name__)

SNIPPET_CHARS = 300


def corpus_hash(docs: Sequence[Document]) -> str:
    h = hashlib.sha256()
    for d in docs:
        for part in (d.id, d.title, d.text):
            h.update(part.encode("utf-8"))
            h.update(b"\x00")
    return h.hexdigest()


def encode_chunk(encoder, texts: list[str], batch_size: int):
    """(lexicon, dense or None) of documents, both unit-normalised (``HybridEncoder.encode_documents``)."""
    return encoder.encode_documents(texts, batch_size=batch_size)


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
    :class:`index.HybridIndex` to ``output``; returns the index."""
    from tqdm.auto import tqdm

    from index import HybridIndex

    output = Path(output)
    work = output.parent / f".{output.name}.partial"
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
    done = sum((work / f"chunk-{i:06d}.npz").is_file() for i in range(len(starts)))
    bar = tqdm(total=len(docs), initial=min(done * chunk_size, len(docs)), desc="Encoding", unit="doc",
               disable=not show_progress_bar)
    for i, s in enumerate(starts):
        path = work / f"chunk-{i:06d}.npz"
        if path.is_file():
            continue
        chunk = docs[s : s + chunk_size]
        lex, dense = encode_chunk(encoder, [d.full_text for d in chunk], batch_size)
        buf = io.BytesIO()
        np.savez(buf, lexicon=lex, **({"dense": dense} if dense is not None else {}))
        atomic_write_bytes(path, buf.getvalue())
        bar.update(len(chunk))
    bar.close()

    index = HybridIndex(encoder.lexicon_dim, encoder.dense_dim, index_type=index_type, fingerprint=fingerprint,
                        info=info)
    for i, s in enumerate(starts):
        chunk = docs[s : s + chunk_size]
        with np.load(work / f"chunk-{i:06d}.npz") as z:
            meta = [{"title": d.title, "snippet": d.text[:SNIPPET_CHARS], **d.extra} for d in chunk]
            index.add([d.id for d in chunk], z["lexicon"], z["dense"] if "dense" in z else None, metadata=meta)
    index.save(output)
    shutil.rmtree(work)
    return index


def _read_state(work: Path) -> dict | None:
    try:
        return read_json(work / "state.json", "build state")
    except (FileNotFoundError, ValueError):
        return None
