"""On-disk embedding cache: a second benchmark run skips encoding, an interrupted one resumes.

Layout under the cache root::

    <root>/<sha256 of the encoder fingerprint>[:32]/
        fingerprint.json             what made these vectors (for people; the directory name is its hash)
        chunk-<sha256>.npz           one per encoded chunk: "hashes" (sha256 of each text, as S64),
                                     one array per output part (e.g. "lexicon", "dense"), "seconds" (float64:
                                     wall time the encoder took for this chunk)

Each chunk file is written atomically (``lens.atomic.atomic_write_bytes``) as soon as its texts are encoded, so
an interruption loses at most the chunk in progress; the index of text hashes is rebuilt from the chunk files
when the cache is opened. A text is found by the sha256 of its UTF-8 bytes, so the same texts in another order
(or in another dataset) are found too. A different fingerprint is a different directory: never a stale hit. So the
fingerprint must name everything that changes the vectors: ``LensResource.cache_fingerprint`` (``lens.eval.systems``)
adds an int8 encoder's quantisation, which the LENS fingerprint leaves out on purpose.

The progress bar counts texts ("text"): a cache holds documents, queries (ATEB's LENS queries) or both at once
(ATEB's dense scorers), and ``desc`` says which.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from lens.atomic import atomic_write_bytes, write_json

logger = logging.getLogger(__name__)

__all__ = ["CacheResult", "EmbeddingCache", "fingerprint_key", "text_hash"]

SINGLE = "vectors"  # part name when the encode function returns one array


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def fingerprint_key(fingerprint: Mapping) -> str:
    """sha256 of the fingerprint as canonical JSON (sorted keys)."""
    blob = json.dumps(fingerprint, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass
class CacheResult:
    """Vectors of the requested texts (rows in request order) and what it took to get them."""

    arrays: dict[str, np.ndarray]
    encoded: int  # unique texts encoded by this call
    cached: int  # unique texts found in the cache
    encode_seconds: float  # wall time spent in the encode function by this call
    chunk_rows: int  # rows of every chunk that served this request (encoded now or before)
    chunk_seconds: float  # their recorded encoding time

    @property
    def rate(self) -> float | None:
        """Texts per second as measured when the serving chunks were encoded (this call, earlier, or both)."""
        return self.chunk_rows / self.chunk_seconds if self.chunk_seconds > 0 else None

    @property
    def rate_source(self) -> str:
        if self.cached == 0:
            return "measured in this run"
        if self.encoded == 0:
            return "from the cache: rate measured when the vectors were encoded (no encoding in this run)"
        return f"mixed: {self.encoded} texts encoded in this run, {self.cached} from the cache (rates pooled)"


class EmbeddingCache:
    """Vectors of texts under one encoder ``fingerprint`` (a JSON-able mapping), stored in ``root``."""

    def __init__(self, root: str | os.PathLike, fingerprint: Mapping, chunk_size: int = 256):
        if not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
        self.root = Path(root)
        self.fingerprint = dict(fingerprint)
        self.key = fingerprint_key(self.fingerprint)
        self.directory = self.root / self.key[:32]
        self.chunk_size = chunk_size
        self._index: dict[str, tuple[Path, int]] | None = None

    # ------------------------------------------------------------------ index of what is stored
    def _chunk_files(self) -> list[Path]:
        return sorted(self.directory.glob("chunk-*.npz")) if self.directory.is_dir() else []

    def _load_index(self) -> dict[str, tuple[Path, int]]:
        if self._index is None:
            index: dict[str, tuple[Path, int]] = {}
            for path in self._chunk_files():
                try:
                    with np.load(path) as z:
                        hashes = z["hashes"]
                except Exception as e:  # a damaged chunk is re-encoded, not trusted
                    logger.warning("ignoring damaged cache chunk %s (%s)", path, e)
                    continue
                for row, h in enumerate(hashes):
                    index.setdefault(h.decode("ascii"), (path, row))
            self._index = index
        return self._index

    def __len__(self) -> int:
        """Number of distinct texts stored."""
        return len(self._load_index())

    def __contains__(self, text: object) -> bool:
        return isinstance(text, str) and text_hash(text) in self._load_index()

    # ------------------------------------------------------------------ writing
    def _write_chunk(self, hashes: list[str], parts: dict[str, np.ndarray], seconds: float) -> Path:
        if not self.directory.is_dir() or not (self.directory / "fingerprint.json").is_file():
            write_json(self.directory / "fingerprint.json", self.fingerprint)
        name = hashlib.sha256("".join(hashes).encode("ascii")).hexdigest()
        path = self.directory / f"chunk-{name}.npz"
        buf = io.BytesIO()
        np.savez(buf, hashes=np.array(hashes, dtype="S64"), seconds=np.float64(seconds), **parts)
        atomic_write_bytes(path, buf.getvalue())
        index = self._load_index()
        for row, h in enumerate(hashes):
            index.setdefault(h, (path, row))
        return path

    @staticmethod
    def _as_parts(out, n: int) -> dict[str, np.ndarray]:
        if hasattr(out, "_asdict"):  # NamedTuple such as lens.encoder.EncodeOutput
            out = out._asdict()
        parts = dict(out) if isinstance(out, Mapping) else {SINGLE: out}
        for name, arr in parts.items():
            if name in ("hashes", "seconds"):
                raise ValueError(f"part name {name!r} is reserved by the cache")
            arr = np.asarray(arr)
            if arr.ndim != 2 or arr.shape[0] != n:
                raise ValueError(f"encode function returned {arr.shape} for part {name!r}, expected ({n}, dim)")
            parts[name] = arr
        return parts

    # ------------------------------------------------------------------ the one entry point
    def get(
        self,
        texts: Sequence[str],
        encode: Callable[[list[str]], object],
        *,
        show_progress_bar: bool = False,
        desc: str = "encoding",
    ) -> CacheResult:
        """Vectors of ``texts``: stored ones are read, missing ones encoded with ``encode`` chunk by chunk
        (each chunk saved at once). ``encode(list_of_texts)`` returns an array (N, dim), or a mapping /
        NamedTuple of such arrays (one per part). Returns arrays in the order of ``texts``."""
        from tqdm.auto import tqdm

        from lens.encoder import reported_truncations

        texts = list(texts)
        if not texts:
            raise ValueError("no texts to encode")
        hashes = [text_hash(t) for t in texts]
        index = self._load_index()
        missing: dict[str, str] = {}
        for h, t in zip(hashes, texts):
            if h not in index and h not in missing:
                missing[h] = t
        n_unique = len(set(hashes))
        encode_seconds = 0.0
        if missing:
            logger.info("%s: %d of %d distinct texts are not cached; encoding them", desc, len(missing), n_unique)
            todo = sorted(missing.items(), key=lambda kv: -len(kv[1]))  # similar lengths share a chunk
            # a LENS encoder's truncations: one warning for every chunk together, with the count
            with reported_truncations("texts", desc), \
                    tqdm(total=len(todo), desc=desc, unit="text", disable=not show_progress_bar) as bar:
                for start in range(0, len(todo), self.chunk_size):
                    chunk = todo[start:start + self.chunk_size]
                    t0 = time.perf_counter()
                    parts = self._as_parts(encode([t for _, t in chunk]), len(chunk))
                    seconds = time.perf_counter() - t0
                    encode_seconds += seconds
                    self._write_chunk([h for h, _ in chunk], parts, seconds)
                    bar.update(len(chunk))
        return self._gather(hashes, encoded=len(missing), cached=n_unique - len(missing), encode_seconds=encode_seconds)

    def _gather(self, hashes: list[str], encoded: int, cached: int, encode_seconds: float) -> CacheResult:
        index = self._load_index()
        by_file: dict[Path, list[tuple[int, int]]] = {}
        for i, h in enumerate(hashes):
            path, row = index[h]
            by_file.setdefault(path, []).append((i, row))
        arrays: dict[str, np.ndarray] = {}
        rows_total, seconds_total = 0, 0.0
        for path, pairs in by_file.items():
            with np.load(path) as z:
                names = [n for n in z.files if n not in ("hashes", "seconds")]
                rows_total += len(z["hashes"])
                seconds_total += float(z["seconds"])
                rows = np.array([r for _, r in pairs])
                dest = np.array([i for i, _ in pairs])
                for name in names:
                    part = z[name]
                    if name not in arrays:
                        arrays[name] = np.zeros((len(hashes), part.shape[1]), dtype=part.dtype)
                    elif arrays[name].shape[1] != part.shape[1]:
                        raise ValueError(f"cache {self.directory}: part {name!r} has different widths across chunks")
                    arrays[name][dest] = part[rows]
        return CacheResult(arrays, encoded, cached, encode_seconds, rows_total, seconds_total)
