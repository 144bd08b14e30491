"""The saved-index manifest: its format, validation, file checksums and the encoder fingerprint check.

A saved index is a directory holding ``index.faiss`` (``faiss.write_index``), ``docs.sqlite`` (see
:mod:`index.metadata`) and ``manifest.json``, which records the format version, dimensions, weights,
index type and options, document count, the encoder fingerprint, a free-form ``info`` dict, and the
sha256 and size of both data files. Checksums are verified before either file is parsed, so FAISS never reads a damaged file.

``open_index`` is the one way to read a saved index: the manifest and both data files are opened together from
one version of the directory (``lens.atomic.open_generation``), so a load racing a save never mixes versions and
never reports a healthy index as damaged.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, BinaryIO, Mapping

from lens.atomic import Generation, open_generation, parse_json

__all__ = [
    "DOCS_FILE",
    "FORMAT_VERSION",
    "INDEX_FILE",
    "MANIFEST_FILE",
    "FingerprintMismatchError",
    "check_fingerprint",
    "file_record",
    "normalize_fingerprint",
    "open_index",
    "read_manifest",
    "validate_manifest",
    "verify_file",
    "verify_stream",
]

FORMAT_VERSION = 1
MANIFEST_FILE = "manifest.json"
INDEX_FILE = "index.faiss"
DOCS_FILE = "docs.sqlite"

_MISSING = "<missing>"


class FingerprintMismatchError(ValueError):
    """The saved index was built with different encoders than the caller expects."""


def _sha256_stream(f: BinaryIO, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    f.seek(0)
    while block := f.read(chunk):
        h.update(block)
    f.seek(0)
    return h.hexdigest()


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    """Hex sha256 of a file, read in chunks (constant memory)."""
    with open(path, "rb") as f:
        return _sha256_stream(f, chunk)


def file_record(path: Path) -> dict[str, Any]:
    """``{"sha256": ..., "bytes": ...}`` for one data file, as stored in the manifest."""
    return {"sha256": sha256_file(path), "bytes": path.stat().st_size}


def verify_stream(f: BinaryIO | None, path: Path, record: Mapping[str, Any]) -> None:
    """Raise unless the open file ``f`` (read from ``path``; None: missing) has the recorded size and sha256
    (size first: it is free). Leaves ``f`` at its start."""
    if f is None:
        raise FileNotFoundError(f"index file missing: {path}; the saved index is incomplete, rebuild it")
    size = os.fstat(f.fileno()).st_size
    if size != record["bytes"]:
        raise ValueError(
            f"index file {path} is damaged: {size} bytes, manifest says {record['bytes']} (truncated or "
            "overwritten?); restore it from a backup or rebuild the index"
        )
    digest = _sha256_stream(f)
    if digest != record["sha256"]:
        raise ValueError(
            f"index file {path} is damaged: sha256 {digest} does not match the manifest's "
            f"{record['sha256']}; restore it from a backup or rebuild the index"
        )


def verify_file(path: Path, record: Mapping[str, Any]) -> None:
    """Raise unless ``path`` exists with the recorded size and sha256."""
    if not path.is_file():
        verify_stream(None, path, record)
    with open(path, "rb") as f:
        verify_stream(f, path, record)


def normalize_fingerprint(fingerprint: Mapping[str, Any] | None, what: str = "fingerprint") -> dict[str, Any] | None:
    """A dict as it will read back from JSON (tuples become lists), so comparisons are fair."""
    if fingerprint is None:
        return None
    if not isinstance(fingerprint, Mapping):
        raise ValueError(f"{what} must be a dict or None, got {type(fingerprint).__name__}")
    try:
        return json.loads(json.dumps(dict(fingerprint), sort_keys=True, allow_nan=False))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{what} must be JSON-serialisable: {e}") from e


def check_fingerprint(expected: Mapping[str, Any] | None, found: Mapping[str, Any] | None, where: Path) -> None:
    """Refuse an index whose fingerprint differs from ``expected`` (None: no check).

    Every key of either side must match; the error lists each differing key with both values.
    """
    if expected is None:
        return
    expected = normalize_fingerprint(expected) or {}
    found = found or {}
    diffs = [
        f"{key}: expected {expected.get(key, _MISSING)!r}, index has {found.get(key, _MISSING)!r}"
        for key in sorted(set(expected) | set(found))
        if expected.get(key, _MISSING) != found.get(key, _MISSING)
    ]
    if diffs:
        raise FingerprintMismatchError(
            f"index {where} was built with different encoders than expected ("
            + "; ".join(diffs)
            + "). Rebuild the index with the current encoder, or load it with the encoder it was built with."
        )


def _need(m: Mapping[str, Any], key: str, types: tuple[type, ...], path: Path) -> Any:
    if key not in m:
        raise ValueError(f"index manifest {path} is damaged: key {key!r} is missing")
    value = m[key]
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        names = " or ".join("null" if t is type(None) else t.__name__ for t in types)
        raise ValueError(f"index manifest {path} is damaged: {key!r} should be {names}, got {value!r}")
    return value


def validate_manifest(m: Any, path: Path) -> dict[str, Any]:
    """Check the manifest's format version and the type of every field; return it unchanged."""
    if not isinstance(m, dict):
        raise ValueError(f"index manifest {path} is damaged: expected a JSON object")
    version = _need(m, "format_version", (int,), path)
    if version != FORMAT_VERSION:
        raise ValueError(
            f"index {path.parent} has format version {version}; this version of LENS reads format "
            f"{FORMAT_VERSION}. Rebuild the index with this version, or use the LENS version that wrote it."
        )
    _need(m, "index_type", (str,), path)
    _need(m, "index_options", (dict,), path)
    for key in ("lexicon_dim", "dense_dim"):
        _need(m, key, (int, type(None)), path)
    weights = _need(m, "weights", (list,), path)
    if len(weights) != 2 or not all(isinstance(w, (int, float)) and not isinstance(w, bool) for w in weights):
        raise ValueError(f"index manifest {path} is damaged: 'weights' should be two numbers, got {weights!r}")
    for key in ("count", "next_id"):
        if _need(m, key, (int,), path) < 0:
            raise ValueError(f"index manifest {path} is damaged: {key!r} is negative")
    _need(m, "trained", (bool,), path)
    _need(m, "fingerprint", (dict, type(None)), path)
    if "info" in m:
        _need(m, "info", (dict, type(None)), path)
    files = _need(m, "files", (dict,), path)
    for name in (INDEX_FILE, DOCS_FILE):
        rec = files.get(name)
        if not (
            isinstance(rec, dict)
            and isinstance(rec.get("sha256"), str)
            and isinstance(rec.get("bytes"), int)
            and not isinstance(rec.get("bytes"), bool)
        ):
            raise ValueError(f"index manifest {path} is damaged: no valid checksum record for {name}")
    return m


def open_index(directory: str | Path) -> tuple[dict[str, Any], Generation]:
    """The validated manifest of the saved index in ``directory`` and its files, all from one version.

    ``files`` of the returned generation holds ``manifest.json``, ``index.faiss`` and ``docs.sqlite`` (None when
    missing); close it (``with``) when done. An interrupted save is recovered first (``lens.atomic``).
    """
    directory = Path(directory)
    try:
        gen = open_generation(directory, (MANIFEST_FILE, INDEX_FILE, DOCS_FILE), what="index")
    except FileNotFoundError:
        raise FileNotFoundError(
            f"no saved index at {directory}: not found (build one with `lens index build`)") from None
    except NotADirectoryError:
        raise FileNotFoundError(f"no saved index at {directory}: it is a file, not an index directory") from None
    try:
        path = directory / MANIFEST_FILE
        f = gen.files[MANIFEST_FILE]
        if f is None:
            raise FileNotFoundError(f"index manifest not found: {path}")
        return validate_manifest(parse_json(f.read(), path, "index manifest"), path), gen
    except BaseException:
        gen.close()
        raise


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """The validated manifest of the saved index in ``directory`` (the one reader of ``manifest.json``)."""
    manifest, gen = open_index(directory)
    gen.close()
    return manifest
