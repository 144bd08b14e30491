"""The files of a resumable index build's work directory (``lens.indexing``): chunk files and shard records.

A chunk file ``chunk-<i>.npz`` holds chunk ``i``'s unit-normalised lexicon (and dense) vectors beside the sha256 of
its document ids, the sha256 of the encoder's fingerprint, its quantisation and how many of its documents were
truncated, so that a chunk is only ever read back for the documents and the encoder it was made from. A shard
record ``encode-<rank>-of-<world>.json`` lists the chunk files one worker wrote (``lens.indexing.encode_shard``
writes it). Only the format lives here; what a build does with these files stays in ``lens.indexing``.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import NamedTuple, Sequence

import numpy as np

from lens.atomic import read_json

__all__ = ["FLOAT32", "RECORD_VERSION", "Chunk", "chunk_bytes", "chunk_path", "fingerprint_sha", "ids_sha",
           "parse_chunk", "quantize_label", "read_bytes", "read_record", "record_name"]

RECORD_VERSION = 2  # 2: the quantisation, max_seq_length and each chunk's truncated documents
FLOAT32 = "float32"  # a chunk's stored quantisation when it has none (quantize=None)


class Chunk(NamedTuple):
    """A chunk file's contents."""

    lexicon: np.ndarray  # (rows, lexicon_dim), unit rows
    dense: np.ndarray | None  # (rows, dense_dim), unit rows
    quantize: str | None  # what encoded it: "int8", or None (float32)
    truncated: int  # its documents longer than max_seq_length


def chunk_path(work: Path, i: int) -> Path:
    return work / f"chunk-{i:06d}.npz"


def record_name(rank: int, world: int) -> str:
    return f"encode-{rank:05d}-of-{world:05d}.json"


def read_record(work: Path, rank: int, world: int) -> dict:
    return read_json(work / record_name(rank, world), "shard record")


def read_bytes(path: Path) -> bytes | None:
    """The file's bytes, or None when it is not there (a chunk not encoded yet)."""
    try:
        return path.read_bytes()
    except (FileNotFoundError, IsADirectoryError):
        return None


def quantize_label(quantize: str | None) -> str:
    return FLOAT32 if quantize is None else quantize


def ids_sha(ids: Sequence[str]) -> str:
    """sha256 of a chunk's document ids: what ties a chunk file to its documents."""
    return hashlib.sha256("\x00".join(ids).encode("utf-8")).hexdigest()


def fingerprint_sha(fingerprint: dict) -> str:
    """sha256 of an encoder's fingerprint (its JSON with sorted keys): what ties a chunk file to its encoder."""
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode("utf-8")).hexdigest()


def chunk_bytes(chunk: Chunk, ids_digest: str, fp_digest: str) -> bytes:
    """A chunk file's bytes (``.npz``): the vectors with the hashes that tie them to their documents and encoder."""
    buf = io.BytesIO()
    np.savez(buf, lexicon=chunk.lexicon, ids_sha256=np.array(ids_digest), fingerprint_sha256=np.array(fp_digest),
             quantize=np.array(quantize_label(chunk.quantize)), truncated=np.int64(chunk.truncated),
             **({"dense": chunk.dense} if chunk.dense is not None else {}))
    return buf.getvalue()


def parse_chunk(data: bytes, ids_digest: str, fp_digest: str, dims: tuple[int, int | None]) -> Chunk | None:
    """A chunk file's contents if it is whole and carries these digests (``ids_sha``, ``fingerprint_sha``): of
    these documents and of this encoder (its quantisation is for the caller to compare); None otherwise, also for a
    chunk written before quantisation was recorded."""
    rows = None
    try:
        with np.load(io.BytesIO(data)) as z:
            for key, expected in (("ids_sha256", ids_digest), ("fingerprint_sha256", fp_digest)):
                if key not in z or str(z[key]) != expected:
                    return None
            if "quantize" not in z or "truncated" not in z:
                return None
            quantize = str(z["quantize"])
            truncated = int(z["truncated"])
            lex = z["lexicon"]
            dense = z["dense"] if "dense" in z else None
            rows = lex.shape[0]
    except Exception:  # truncated or overwritten: numpy and zipfile raise several types
        return None
    lex_dim, dense_dim = dims
    if lex.shape != (rows, lex_dim) or (dense_dim is not None) != (dense is not None):
        return None
    if dense is not None and dense.shape != (rows, dense_dim):
        return None
    return Chunk(lex, dense, None if quantize == FLOAT32 else quantize, truncated)
