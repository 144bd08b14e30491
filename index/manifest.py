"""The saved-index manifest: its format, validation, file checksums and the encoder fingerprint check.

A saved index is a directory holding ``index.faiss`` (``faiss.write_index``), ``docs.sqlite`` (see
:mod:`index.metadata`) and ``manifest.json``, which records the format version, dimensions, weights,
index type and options, document count, the encoder fingerprint, a free-form ``info`` dict, and the
sha256 and size of both data files. Checksums are verified before either file is parsed, so FAISS never reads a damaged file.

``open_index`` is the one way to read a saved index: the manifest and every data file it records are opened
together from one version of the directory (``lens.atomic.open_generation``), so a load racing a save never mixes
versions and never reports a healthy index as damaged.

Optional fields (format 1 still; a reader that predates them refuses a sharded index as incomplete):

* ``top_m``: the documents' lexicon vectors kept only their ``top_m`` heaviest weights (``index.vectors.prune_top_m``)
  before normalisation; null when not pruned.
* an ``ivf-ondisk`` index records a third data file, ``index.ivfdata`` (its memory-mapped inverted lists).
* ``bm25``: the index keeps a BM25 part (``index.bm25_part``): its version, BM25 settings, documents and terms; its
  data file ``bm25.npz`` is recorded in ``files`` like the others.
* ``df`` and ``idf``: the index keeps its documents' non-zero lexicon clusters (``index.df_part``; its version,
  lexicon width and documents; data file ``df.npz``), and whether searches weigh the query lexicon by their idf by
  default. An index without them (built with ``--no-idf``, or saved before) searches as before and refuses idf.
* ``"layout": "sharded"``: the directory holds ``shard-00000/``, ``shard-00001/``, ... each a complete saved index
  with its own manifest; ``shards`` lists them (``dir``, ``count``) and ``files`` records the checksum of every
  shard's manifest and data files (``shard-00000/index.faiss``, ...). See :mod:`index.shards`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from pathlib import Path
from typing import Any, BinaryIO, Mapping, Sequence

from lens.atomic import Generation, open_generation, parse_json

logger = logging.getLogger(__name__)

__all__ = [
    "CASING_FILE",
    "DOCS_FILE",
    "FORMAT_VERSION",
    "INDEX_FILE",
    "LAYOUTS",
    "MANIFEST_FILE",
    "FingerprintMismatchError",
    "check_fingerprint",
    "data_files",
    "file_record",
    "normalize_fingerprint",
    "is_shard_dir",
    "layout_of",
    "open_index",
    "read_manifest",
    "shard_dir",
    "validate_manifest",
    "verify_file",
    "verify_stream",
]

FORMAT_VERSION = 1
MANIFEST_FILE = "manifest.json"
INDEX_FILE = "index.faiss"
DOCS_FILE = "docs.sqlite"
CASING_FILE = "casing.json.gz"  # the corpus's own casing table (lens.casing), when the index keeps one
LAYOUTS = ("single", "sharded")  # one FAISS index; or shard directories searched together (index.shards)
_SHARD_DIR = re.compile(r"shard-\d{5,}")  # a sharded index's shard directories (index.shards)
_SAFE_NAME = re.compile(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)?")  # a file, or a file in a shard directory
_OPEN_ATTEMPTS = 100

_MISSING = "<missing>"


def shard_dir(i: int) -> str:
    """The directory name of shard ``i`` of a sharded index."""
    return f"shard-{i:05d}"


def is_shard_dir(name: str) -> bool:
    """Whether ``name`` is the name of a sharded index's shard directory (``shard_dir``)."""
    return _SHARD_DIR.fullmatch(name) is not None


def layout_of(m: Mapping[str, Any]) -> str:
    """The layout of a validated manifest: ``"single"`` or ``"sharded"``."""
    return m.get("layout", "single")


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


def check_fingerprint(expected: Mapping[str, Any] | None, found: Mapping[str, Any] | None, where: Path,
                      unrecorded_ok: Sequence[str] = ()) -> None:
    """Refuse an index whose fingerprint differs from ``expected`` (None: no check).

    Every key of either side must match; the error lists each differing key with both values. ``unrecorded_ok``:
    keys an encoder added to its fingerprint later, which an index built before does not have: their absence from
    the index is accepted with a warning (a different value is still refused).
    """
    if expected is None:
        return
    expected = normalize_fingerprint(expected) or {}
    found = found or {}
    unrecorded = [k for k in unrecorded_ok if k in expected and k not in found]
    if unrecorded:
        logger.warning("index %s predates the fingerprint key(s) %s, so they cannot be checked; rebuild it to have "
                       "them checked", where, unrecorded)
        expected = {k: v for k, v in expected.items() if k not in unrecorded}
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
    top_m = m.get("top_m")
    if top_m is not None and (isinstance(top_m, bool) or not isinstance(top_m, int) or top_m < 1):
        raise ValueError(f"index manifest {path} is damaged: 'top_m' should be a positive integer or null, "
                         f"got {top_m!r}")
    layout = m.get("layout", "single")
    if layout not in LAYOUTS:
        raise ValueError(f"index manifest {path}: unknown layout {layout!r} (this LENS reads {', '.join(LAYOUTS)}); "
                         "use the LENS version that wrote it")
    files = _need(m, "files", (dict,), path)
    for name, rec in files.items():
        if not (isinstance(name, str) and _SAFE_NAME.fullmatch(name) and ".." not in name.split("/")):
            raise ValueError(f"index manifest {path} is damaged: {name!r} is not a file name of an index")
        if not (
            isinstance(rec, dict)
            and isinstance(rec.get("sha256"), str)
            and isinstance(rec.get("bytes"), int)
            and not isinstance(rec.get("bytes"), bool)
        ):
            raise ValueError(f"index manifest {path} is damaged: no valid checksum record for {name}")
    for name in _required_files(m, path):
        if name not in files:
            raise ValueError(f"index manifest {path} is damaged: no valid checksum record for {name}")
    return m


def _required_files(m: Mapping[str, Any], path: Path) -> list[str]:
    """The data files a manifest must record: both files, or each shard's manifest and both files."""
    if m.get("layout", "single") == "single":
        return [INDEX_FILE, DOCS_FILE]
    shards = m.get("shards")
    if not isinstance(shards, list) or not shards:
        raise ValueError(f"index manifest {path} is damaged: a sharded index needs a non-empty 'shards' list")
    names = []
    for shard in shards:
        name = shard.get("dir") if isinstance(shard, dict) else None
        count = shard.get("count") if isinstance(shard, dict) else None
        if not (isinstance(name, str) and _SAFE_NAME.fullmatch(name) and "/" not in name and name != "..") or not (
                isinstance(count, int) and not isinstance(count, bool) and count >= 0):
            raise ValueError(f"index manifest {path} is damaged: bad shard entry {shard!r}")
        names += [f"{name}/{MANIFEST_FILE}", f"{name}/{INDEX_FILE}", f"{name}/{DOCS_FILE}"]
    return names


def data_files(m: Mapping[str, Any]) -> list[str]:
    """Every file a validated manifest records (relative to the index directory), in a stable order."""
    return sorted(m["files"])


def open_index(directory: str | Path) -> tuple[dict[str, Any], Generation]:
    """The validated manifest of the saved index in ``directory`` and its files, all from one version.

    ``files`` of the returned generation holds ``manifest.json`` and every data file the manifest records (None
    when missing); close it (``with``) when done. An interrupted save is recovered first (``lens.atomic``). A
    manifest naming files not opened yet (an on-disk or sharded index) is opened again with them, until the
    manifest read names only files opened with it.
    """
    directory = Path(directory)
    names = [MANIFEST_FILE, INDEX_FILE, DOCS_FILE]
    for _ in range(_OPEN_ATTEMPTS):
        gen = _open(directory, names)
        try:
            path = directory / MANIFEST_FILE
            f = gen.files[MANIFEST_FILE]
            if f is None:
                raise FileNotFoundError(f"index manifest not found: {path}")
            m = validate_manifest(parse_json(f.read(), path, "index manifest"), path)
        except BaseException:
            gen.close()
            raise
        wanted = [MANIFEST_FILE, *data_files(m)]
        if set(wanted) <= set(names):
            return m, gen
        gen.close()  # the manifest names more files: open them with it, from one version
        names = wanted
    raise ValueError(f"index {directory} kept changing while it was being opened; try again")


def _open(directory: Path, names: list[str]) -> Generation:
    try:
        return open_generation(directory, names, what="index")
    except FileNotFoundError:
        raise FileNotFoundError(
            f"no saved index at {directory}: not found (build one with `lens index build`)") from None
    except NotADirectoryError:
        raise FileNotFoundError(f"no saved index at {directory}: it is a file, not an index directory") from None


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """The validated manifest of the saved index in ``directory`` (the one reader of ``manifest.json``)."""
    manifest, gen = open_index(directory)
    gen.close()
    return manifest
