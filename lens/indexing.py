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

from lens._io import atomic_write_bytes, read_json, write_json
from lens.corpus import Document

logger = logging.getLogger(__name__)

DENSE_KINDS = ("minilm", "lens", "none")
SNIPPET_CHARS = 300


def corpus_hash(docs: Sequence[Document]) -> str:
    h = hashlib.sha256()
    for d in docs:
        for part in (d.id, d.title, d.text):
            h.update(part.encode("utf-8"))
            h.update(b"\x00")
    return h.hexdigest()


def encoder_fingerprint(lens_encoder, dense_kind: str, dense_encoder=None) -> dict:
    """The index fingerprint: the LENS encoder's, plus the dense encoder's name and weights hash."""
    if dense_kind not in DENSE_KINDS:
        raise ValueError(f"dense must be one of {DENSE_KINDS}, got {dense_kind!r}")
    fp = dict(lens_encoder.fingerprint())
    if dense_kind == "minilm":
        fp.update(dense_model=dense_encoder.name, dense_sha256=dense_encoder.fingerprint())
    else:
        fp.update(dense_model=dense_kind, dense_sha256=None)
    return fp


def encode_chunk(lens_encoder, dense_kind: str, dense_encoder, texts: list[str], batch_size: int):
    """(lexicon, dense or None) for documents, both unit-normalised."""
    if dense_kind == "lens":
        out = lens_encoder.encode_documents(texts, batch_size=batch_size, output="both", show_progress_bar=False)
        return out.lexicon, out.dense
    lex = lens_encoder.encode_documents(texts, batch_size=batch_size, show_progress_bar=False)
    dense = dense_encoder.encode(texts, batch_size=batch_size, show_progress_bar=False) if dense_kind == "minilm" else None
    return lex, dense


def build_index(
    docs: Sequence[Document],
    output: str | Path,
    lens_encoder,
    *,
    dense_kind: str = "minilm",
    dense_encoder=None,
    index_type: str = "flat",
    chunk_size: int = 64,
    batch_size: int = 16,
    resume: bool = False,
    info: dict | None = None,
    show_progress_bar: bool = True,
):
    """Encode ``docs`` and save a :class:`index.HybridIndex` to ``output``; returns the index."""
    from tqdm.auto import tqdm

    from index import HybridIndex

    if dense_kind == "minilm" and dense_encoder is None:
        raise ValueError("dense_kind='minilm' needs a dense_encoder")
    output = Path(output)
    work = output.parent / f".{output.name}.partial"
    fingerprint = encoder_fingerprint(lens_encoder, dense_kind, dense_encoder)
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
        lex, dense = encode_chunk(lens_encoder, dense_kind, dense_encoder, [d.full_text for d in chunk], batch_size)
        buf = io.BytesIO()
        np.savez(buf, lexicon=lex, **({"dense": dense} if dense is not None else {}))
        atomic_write_bytes(path, buf.getvalue())
        bar.update(len(chunk))
    bar.close()

    dense_dim = None if dense_kind == "none" else (
        lens_encoder.model.decoder.config.hidden_size if dense_kind == "lens" else dense_encoder.dim
    )
    index = HybridIndex(lens_encoder.num_clusters, dense_dim, index_type=index_type, fingerprint=fingerprint,
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
