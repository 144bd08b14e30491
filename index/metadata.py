"""Document table: string document ids <-> int64 FAISS ids, plus optional per-document JSON metadata.

An index loaded to be changed keeps the table in an in-memory SQLite database, so that saving over the directory
it was loaded from never touches an open file; :meth:`DocTable.save` and :meth:`DocTable.load` copy it to and from
``docs.sqlite`` (a consistent snapshot). An index loaded to search (``read_only``: ``lens search``, ``lens serve``)
queries ``docs.sqlite`` where it lies instead, read-only and immutable, so a searcher's memory holds the pages the
operating system caches, not the whole table (ids and every document's metadata); a save over the directory
replaces the file, never changes it, so the open one stays the version that was verified.

Schema (version 1)::

    ids(int_id INTEGER PRIMARY KEY, doc_id TEXT NOT NULL UNIQUE, meta TEXT)   -- meta: JSON object or NULL
    info(key TEXT PRIMARY KEY, value TEXT)                                     -- 'schema_version'

Beside it, while the index is in use and never saved, an in-memory :class:`FieldIndex` for each metadata field
that filters have asked for twice (:meth:`DocTable.matching`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import threading
from array import array
from collections import OrderedDict
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator, Mapping, Sequence

import numpy as np

__all__ = ["DocTable", "FieldIndex", "check_filter", "check_ids", "encode_metadata", "field_path", "missing_fields"]

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1
_BATCH = 500  # ids per IN (...) query; well under SQLite's bound-parameter limit
FIELDS_SAMPLE = 200  # documents whose metadata field names are listed (a filter on a missing field, index info)
_FIELDS_SHOWN = 8  # of those names, the ones shown
_MATCH_CACHE = 16  # filters whose matching ids a table remembers
_SCAN_VALUES = 200  # a filter field's values per SQL query when scanned (SQLite's expression depth limit is 1000)
FIELD_INDEX_MAX_VALUES = 100_000  # a field with more distinct values is scanned, not indexed (memory: see FieldIndex)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS ids (int_id INTEGER PRIMARY KEY, doc_id TEXT NOT NULL UNIQUE, meta TEXT);
CREATE TABLE IF NOT EXISTS info (key TEXT PRIMARY KEY, value TEXT);
"""


def check_ids(ids: Sequence[str], what: str, dedupe: bool = False) -> list[str]:
    """Document ids as a list of non-empty strings; an id given twice in one ``what`` call is an error (or dropped,
    keeping the first, if ``dedupe``)."""
    if isinstance(ids, (str, bytes)) or not isinstance(ids, (Sequence, np.ndarray)):
        raise ValueError(f"ids must be a list of strings, got {type(ids).__name__}")
    out = []
    for i in ids:
        if not isinstance(i, str) or not i:
            raise ValueError(f"document ids must be non-empty strings, got {i!r}")
        out.append(str(i))
    if dedupe:
        return list(dict.fromkeys(out))
    seen: set[str] = set()
    for i in out:
        if i in seen:
            raise ValueError(f"document id {i!r} appears more than once in this {what} call")
        seen.add(i)
    return out


def encode_metadata(meta: Any, doc_id: str) -> str | None:
    """JSON text for one document's metadata (a dict) or None; errors name the document."""
    if meta is None:
        return None
    if not isinstance(meta, dict):
        raise ValueError(f"metadata for document {doc_id!r} must be a dict or None, got {type(meta).__name__}")
    try:
        return json.dumps(meta, ensure_ascii=False, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"metadata for document {doc_id!r} is not JSON-serialisable: {e}") from e


FilterValue = str | int | float | bool
# a checked filter: ((field, (value, ...)), ...); a document matches when every field holds one of its values
Filter = tuple[tuple[str, tuple[FilterValue, ...]], ...]


def check_filter(filter: Mapping[str, Any] | None) -> Filter | None:
    """A metadata filter ``{field: value}`` or ``{field: [value, ...]}`` checked and normalised (None stays None).

    A document matches when, for every field, its metadata's ``field`` equals one of the values, or is a list
    holding one. A dotted field reaches into nested objects (``metadata.author``: the ``author`` of the object
    under ``metadata``, as BEIR corpora keep it), so a key holding a dot is not reachable. Values are strings,
    numbers or booleans, compared by JSON type (``1`` never matches ``"1"`` or ``true``)."""
    if filter is None:
        return None
    if not isinstance(filter, Mapping) or not filter:
        raise ValueError(f"a filter is a non-empty dict of metadata field -> value(s), got {filter!r}")
    out = []
    for field, values in filter.items():
        if not isinstance(field, str) or not field or '"' in field:
            raise ValueError(f"filter field {field!r} must be a non-empty string without double quotes")
        if "" in field.split("."):
            raise ValueError(f"filter field {field!r} has an empty name between its dots; write a nested field as "
                             "OUTER.INNER, e.g. metadata.author")
        if isinstance(values, np.ndarray):
            values = values.tolist()
        values = tuple(values) if isinstance(values, (list, tuple, set, frozenset)) else (values,)
        if not values:
            raise ValueError(f"filter field {field!r} has an empty list of values; give at least one")
        values = tuple(v.item() if isinstance(v, np.generic) else v for v in values)  # numpy's scalars, as Python's
        for v in values:
            if not isinstance(v, (str, int, float)) or (isinstance(v, float) and v != v):
                raise ValueError(f"filter field {field!r}: values must be strings, numbers or booleans, got {v!r}")
        out.append((field, values))
    return tuple(out)


def field_path(field: str) -> str:
    """The SQLite JSON path of a (checked) filter field: ``metadata.author`` -> ``$."metadata"."author"``."""
    return "$" + "".join(f'."{name}"' for name in field.split("."))


def field_names(tables: Sequence["DocTable"]) -> list[str]:
    """The dotted metadata field names a filter can name, over ``tables`` (an index's, or each of its shards'),
    sorted: from each table's first ``FIELDS_SAMPLE`` documents with metadata (a sample, so that saying them costs
    no scan of a large table)."""
    return sorted({name for t in tables for name in t.field_names()})


def missing_fields(tables: Sequence["DocTable"], filter: Filter) -> str | None:
    """Why ``filter`` (from :func:`check_filter`) can match nothing, when one of its fields is held by no document
    of ``tables`` (an index's, or each of its shards'): the field, and a few that the documents do have; None
    when every field is held somewhere (then it is the values that match nothing)."""
    missing = [field for field, _ in filter if not any(t.has_field(field) for t in tables)]
    if not missing:
        return None
    held = field_names(tables)
    shown = ", ".join(held[:_FIELDS_SHOWN]) + (", ..." if len(held) > _FIELDS_SHOWN else "")
    fields = ", ".join(repr(f) for f in missing)
    return (f"no document has the metadata field{'s' if len(missing) > 1 else ''} {fields}; "
            + (f"fields they have: {shown} (a dot reaches into a nested object, e.g. metadata.author)" if held
               else "the documents have no metadata fields"))


def _leaf_names(meta: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    """The dotted names of the fields a filter can match in one document's metadata (nested objects entered)."""
    for key, value in meta.items():
        if isinstance(value, Mapping):
            yield from _leaf_names(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


def _value_condition(value: FilterValue) -> tuple[str, list[Any]]:
    """SQL over one ``json_each`` row (its ``type`` and ``value``) true when the row equals ``value``."""
    if isinstance(value, bool):
        return "type = ?", ["true" if value else "false"]
    if isinstance(value, (int, float)):
        return "type IN ('integer', 'real') AND value = ?", [value]
    return "type = 'text' AND value = ?", [value]


def _json_key(json_type: str, value: Any) -> tuple | None:
    """The key of one ``json_each`` row (its ``type`` and ``value``) that :func:`value_key` of an equal filter value
    has: numbers by value (``1`` and ``1.0`` are one key), booleans and strings apart; others (null, arrays,
    objects) never match a filter and have none."""
    if json_type == "text":
        return ("t", value)
    if json_type in ("integer", "real"):
        return ("n", value)
    if json_type in ("true", "false"):
        return ("b", json_type == "true")
    return None


def value_key(value: FilterValue) -> tuple:
    """The key of a filter value (see :func:`_json_key`); bool before int, as ``True`` is an int in Python: two
    values with one key are equal as a filter compares them (``1`` and ``1.0``; never ``1`` and ``"1"`` or ``true``)."""
    if isinstance(value, bool):
        return ("b", value)
    return ("n", value) if isinstance(value, (int, float)) else ("t", value)


class FieldIndex:
    """The postings of one metadata field: for each value, the int ids (ascending, unique) of the documents whose
    field is that value or a list holding it, as :meth:`DocTable.matching`'s scan reads them.

    One int64 array of ids grouped by value and a dict from value to its group: 8 bytes per (document, value) and
    a dict entry per distinct value, so a field with more than ``max_values`` distinct values (an id, a title) is
    not indexed (:meth:`build` returns None). A value's lookup is a slice; several values are merged in numpy."""

    def __init__(self, codes: dict[tuple, int], ids: np.ndarray, starts: np.ndarray) -> None:
        self._codes, self._ids, self._starts = codes, ids, starts
        self._bound = int(ids.max()) + 1 if len(ids) else 0  # ids lie in [0, bound)

    @classmethod
    def build(cls, rows: Iterable[tuple[str, Any, int]], max_values: int = FIELD_INDEX_MAX_VALUES
              ) -> "FieldIndex | None":
        """From ``(json type, value, int id)`` rows (``json_each`` over the field); None past ``max_values``."""
        codes: dict[tuple, int] = {}
        row_codes, row_ids = array("q"), array("q")
        for json_type, value, int_id in rows:
            key = _json_key(json_type, value)
            if key is None:
                continue
            code = codes.get(key)
            if code is None:
                if len(codes) >= max_values:
                    return None
                code = codes[key] = len(codes)
            row_codes.append(code)
            row_ids.append(int_id)
        c = np.frombuffer(row_codes, dtype=np.int64) if row_codes else np.zeros(0, dtype=np.int64)
        i = np.frombuffer(row_ids, dtype=np.int64) if row_ids else np.zeros(0, dtype=np.int64)
        order = np.lexsort((i, c))  # by value, then by id
        c, i = c[order], i[order]
        keep = np.ones(len(c), dtype=bool)  # a list holding a value twice gives its document once
        keep[1:] = (c[1:] != c[:-1]) | (i[1:] != i[:-1])
        c, i = c[keep], i[keep]
        return cls(codes, i, np.searchsorted(c, np.arange(len(codes) + 1)))

    def __len__(self) -> int:
        """The number of (document, value) postings."""
        return len(self._ids)

    @property
    def nbytes(self) -> int:
        """Bytes of the id arrays (the value dict's Python objects are not counted)."""
        return self._ids.nbytes + self._starts.nbytes

    def lookup(self, values: Iterable[FilterValue]) -> np.ndarray:
        """The int ids (ascending, unique) of the documents holding any of ``values``."""
        parts = []
        for v in values:
            code = self._codes.get(value_key(v))
            if code is not None:
                parts.append(self._ids[self._starts[code] : self._starts[code + 1]])
        if not parts:
            return np.zeros(0, dtype=np.int64)
        if len(parts) == 1:
            return parts[0].copy()
        merged = np.concatenate(parts)
        if len(merged) * 32 >= self._bound:  # many ids: a bitmap (np.unique of 500,000: 0.4 s here)
            seen = np.zeros(self._bound, dtype=bool)
            seen[merged] = True
            return np.flatnonzero(seen).astype(np.int64, copy=False)
        merged.sort()
        return merged[np.concatenate(([True], merged[1:] != merged[:-1]))]


def _batches(items: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), _BATCH):
        yield items[i : i + _BATCH]


class DocTable:
    """The id map and metadata of one index (in memory, or a saved file read in place; thread-safe through one
    lock)."""

    def __init__(self, conn: sqlite3.Connection | None = None, *, read_only: str | None = None) -> None:
        """``conn``: the database (default: a new, empty one in memory); ``read_only``: None for a table that can
        change, else the message a write raises (the table is a saved file opened read-only)."""
        self._conn = conn or sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        self._conn.isolation_level = None  # explicit transactions only (see transaction())
        self._lock = threading.RLock()
        self._read_only = read_only
        if read_only is None:
            with self._lock:
                self._conn.executescript(_SCHEMA)
                self._conn.execute(
                    "INSERT OR IGNORE INTO info(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
                )
        self._matches: OrderedDict[tuple, np.ndarray] = OrderedDict()  # filter -> int ids, the latest few
        self._filtered: set[str] = set()  # fields a filter has scanned for: the next one gets a field index
        self._fields: dict[str, FieldIndex | None] = {}  # field -> its index, None: too many values (until a change)
        self._held: dict[str, bool] = {}  # field -> whether a document holds it (has_field, until a change)
        self._changed()

    def _changed(self) -> None:
        """After any write (and at start): the count again, and no remembered filter matches or field index."""
        self._count = self._query_count()
        self._matches.clear()
        self._fields.clear()
        self._held.clear()

    @property
    def indexed_fields(self) -> frozenset[str]:
        """The metadata fields with a :class:`FieldIndex` now (filtered twice since the table last changed)."""
        return frozenset(f for f, ix in self._fields.items() if ix is not None)

    # ---- reads ------------------------------------------------------------------------------

    def _query_count(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM ids").fetchone()[0])

    def __len__(self) -> int:
        return self._count

    def __contains__(self, doc_id: object) -> bool:
        if not isinstance(doc_id, str):
            return False
        with self._lock:
            return self._conn.execute("SELECT 1 FROM ids WHERE doc_id = ?", (doc_id,)).fetchone() is not None

    def lookup(self, doc_ids: Sequence[str]) -> dict[str, int]:
        """``doc_id -> int_id`` for those of ``doc_ids`` that are present."""
        found: dict[str, int] = {}
        with self._lock:
            for batch in _batches(list(doc_ids)):
                q = f"SELECT doc_id, int_id FROM ids WHERE doc_id IN ({','.join('?' * len(batch))})"
                found.update(self._conn.execute(q, batch).fetchall())
        return found

    def fetch(self, int_ids: Iterable[int]) -> dict[int, tuple[str, dict | None]]:
        """``int_id -> (doc_id, metadata)`` for the given FAISS ids (unknown ids are left out)."""
        ids = sorted({int(i) for i in int_ids})
        out: dict[int, tuple[str, dict | None]] = {}
        with self._lock:
            for batch in _batches(ids):
                q = f"SELECT int_id, doc_id, meta FROM ids WHERE int_id IN ({','.join('?' * len(batch))})"
                for int_id, doc_id, meta in self._conn.execute(q, batch):
                    out[int_id] = (doc_id, json.loads(meta) if meta is not None else None)
        return out

    def doc_ids(self, int_ids: Iterable[int]) -> list[str]:
        """The document ids of FAISS ids ``int_ids``, in int-id order (unknown ids are left out)."""
        ids = sorted({int(i) for i in int_ids})
        out: list[str] = []
        with self._lock:
            for batch in _batches(ids):
                q = f"SELECT doc_id FROM ids WHERE int_id IN ({','.join('?' * len(batch))}) ORDER BY int_id"
                out += [r[0] for r in self._conn.execute(q, batch)]
        return out

    def metadata(self, doc_id: str) -> dict | None:
        """Metadata of one document; KeyError if it is not in the table."""
        with self._lock:
            row = self._conn.execute("SELECT meta FROM ids WHERE doc_id = ?", (doc_id,)).fetchone()
        if row is None:
            raise KeyError(f"document {doc_id!r} is not in the index")
        return json.loads(row[0]) if row[0] is not None else None

    def matching(self, filter: Filter) -> np.ndarray:
        """The int ids (ascending, int64, read-only) of the documents that ``filter`` (from :func:`check_filter`)
        matches, each field's value read with SQLite's JSON functions (an array: any of its items).

        The first filter on a field scans the table. A second filter on the same field (another tenant, another
        source) builds that field's :class:`FieldIndex` first, in one pass like a scan; from then on every value
        of the field is a lookup in memory (``benchmarks/filter_speed.py`` measures both). A field with more
        than ``FIELD_INDEX_MAX_VALUES`` distinct values is scanned every time instead. The index lives until the
        table changes; it is never saved. The last ``_MATCH_CACHE`` filters' matches are kept too, so a filter
        searched again costs neither."""
        key = tuple((field, tuple((type(v).__name__, v) for v in values)) for field, values in filter)  # 1 != True
        with self._lock:
            if key in self._matches:
                self._matches.move_to_end(key)
                return self._matches[key]
            for field, _ in filter:
                if field in self._filtered and field not in self._fields:
                    self._fields[field] = self._index_field(field)
            indexes = {field: self._fields.get(field) for field, _ in filter}
            scanned = tuple(part for part in filter if indexes[part[0]] is None)
            found = self._scan(scanned) if scanned else None
            for field, values in filter:
                if indexes[field] is not None:
                    ids = indexes[field].lookup(values)
                    found = ids if found is None else np.intersect1d(found, ids, assume_unique=True)
            self._filtered.update(field for field, _ in filter)
            found.flags.writeable = False
            self._matches[key] = found
            if len(self._matches) > _MATCH_CACHE:
                self._matches.popitem(last=False)
            return found

    def has_field(self, field: str) -> bool:
        """Whether any document's metadata holds ``field`` (a checked filter field; dotted: nested); remembered
        until the table changes, as a missing field costs a scan."""
        q = "SELECT 1 FROM ids WHERE meta IS NOT NULL AND json_type(meta, ?) IS NOT NULL LIMIT 1"
        with self._lock:
            if field not in self._held:
                self._held[field] = self._conn.execute(q, (field_path(field),)).fetchone() is not None
            return self._held[field]

    def field_names(self, sample: int = FIELDS_SAMPLE) -> set[str]:
        """The dotted names of the metadata fields of the first ``sample`` documents with metadata (what a filter
        can name; a sample, so that saying them costs no scan)."""
        with self._lock:
            rows = self._conn.execute("SELECT meta FROM ids WHERE meta IS NOT NULL LIMIT ?", (sample,)).fetchall()
        return {name for (meta,) in rows for name in _leaf_names(json.loads(meta))}

    def _index_field(self, field: str) -> FieldIndex | None:
        """The :class:`FieldIndex` of ``field`` from its ``json_each`` rows, as :meth:`_scan` reads them."""
        path = field_path(field)
        rows = self._conn.execute("SELECT j.type, j.value, ids.int_id FROM ids, json_each(ids.meta, ?) AS j "
                                  "WHERE ids.meta IS NOT NULL AND json_type(ids.meta, ?) != 'object'", (path, path))
        index = FieldIndex.build(rows, FIELD_INDEX_MAX_VALUES)
        if index is None:
            logger.info("metadata field %r has more than %d distinct values: filters on it scan the table",
                        field, FIELD_INDEX_MAX_VALUES)
        return index

    def _scan(self, filter: Filter) -> np.ndarray:
        """The documents matching every field of ``filter``, by SQL: one query per field and group of at most
        ``_SCAN_VALUES`` values (SQLite refuses an expression deeper than 1000 terms), united per field and
        intersected across fields."""
        found = None
        for field, values in filter:
            path = field_path(field)
            matches = [self._scan_values(path, values[i:i + _SCAN_VALUES]) for i in range(0, len(values), _SCAN_VALUES)]
            ids = matches[0] if len(matches) == 1 else np.unique(np.concatenate(matches))
            found = ids if found is None else np.intersect1d(found, ids, assume_unique=True)
            if not found.size:
                break
        return found

    def _scan_values(self, path: str, values: Sequence[Any]) -> np.ndarray:
        conditions = [_value_condition(v) for v in values]
        q = ("SELECT int_id FROM ids WHERE meta IS NOT NULL AND EXISTS (SELECT 1 FROM json_each(ids.meta, ?) "
             f"WHERE json_type(ids.meta, ?) != 'object' AND ({' OR '.join(f'({c})' for c, _ in conditions)})) "
             "ORDER BY int_id")
        params = [path, path] + [p for _, ps in conditions for p in ps]
        with self._lock:
            rows = self._conn.execute(q, params).fetchall()
        return np.array([r[0] for r in rows], dtype=np.int64)

    @property
    def read_only(self) -> bool:
        """True for a saved table opened where it lies (:meth:`read` with ``in_place``): writes are refused."""
        return self._read_only is not None

    def int_ids(self) -> np.ndarray:
        """All int ids, ascending (int64; streamed from SQLite, so the only copy is the array)."""
        with self._lock:
            rows = self._conn.execute("SELECT int_id FROM ids ORDER BY int_id")
            return np.fromiter((r[0] for r in rows), dtype=np.int64, count=self._count)

    def iter_doc_ids(self, batch: int = 10_000) -> Iterator[list[str]]:
        """Every document id in int-id order, ``batch`` at a time (constant memory on a large table)."""
        last = -1
        while True:
            with self._lock:
                rows = self._conn.execute(
                    "SELECT int_id, doc_id FROM ids WHERE int_id > ? ORDER BY int_id LIMIT ?", (last, batch)
                ).fetchall()
            if not rows:
                return
            last = rows[-1][0]
            yield [r[1] for r in rows]

    def max_int_id(self) -> int:
        """Largest int id in use, or -1 when empty."""
        with self._lock:
            value = self._conn.execute("SELECT MAX(int_id) FROM ids").fetchone()[0]
        return -1 if value is None else int(value)

    # ---- writes -----------------------------------------------------------------------------

    def _check_writable(self) -> None:
        if self._read_only is not None:
            raise ValueError(self._read_only)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """All writes inside are committed together, or rolled back if the body raises."""
        self._check_writable()
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                yield
            except BaseException:
                self._conn.execute("ROLLBACK")
                self._changed()
                raise
            self._conn.execute("COMMIT")
            self._changed()

    def insert(self, int_ids: Sequence[int], doc_ids: Sequence[str], metas: Sequence[str | None]) -> None:
        """Insert rows (``metas`` already JSON-encoded, see :func:`encode_metadata`)."""
        self._check_writable()
        with self._lock:
            self._conn.executemany(
                "INSERT INTO ids(int_id, doc_id, meta) VALUES (?, ?, ?)",
                zip((int(i) for i in int_ids), doc_ids, metas),
            )
            self._changed()

    def delete(self, int_ids: Sequence[int]) -> None:
        """Delete rows by int id."""
        self._check_writable()
        with self._lock:
            self._conn.executemany("DELETE FROM ids WHERE int_id = ?", ((int(i),) for i in int_ids))
            self._changed()

    # ---- persistence ------------------------------------------------------------------------

    def close(self) -> None:
        """Close the database (a table read in place then lets go of its file); the table is unusable after."""
        with self._lock:
            self._conn.close()

    def save(self, path: str | Path) -> None:
        """Write a consistent snapshot to a new SQLite file at ``path``.

        The image is taken under the table's lock and written by Python, so a full disk raises an ``OSError``
        with its errno (SQLite's own writer would only say "disk I/O error").
        """
        path = Path(path)
        with self._lock:
            data = self._conn.serialize() if hasattr(self._conn, "serialize") else None
        if data is None:  # SQLite without serialize: the online backup API
            dst = sqlite3.connect(str(path))
            try:
                with self._lock:
                    self._conn.backup(dst)
            finally:
                dst.close()
            return
        with open(path, "wb") as f:
            f.write(data)

    @classmethod
    def load(cls, path: str | Path) -> "DocTable":
        """Copy ``path`` into memory; a damaged or foreign file raises ValueError naming it."""
        path = Path(path).resolve()
        if not path.is_file():
            raise FileNotFoundError(f"document table not found: {path}")
        with open(path, "rb") as f:
            return cls.read(f, path)

    @classmethod
    def read(cls, f: BinaryIO, path: str | Path, *, in_place: bool = False) -> "DocTable":
        """The SQLite file open as ``f`` (read from ``path``, named in errors), checked.

        By default it is copied into memory, to be changed and saved. ``in_place``: query the file where it lies,
        read-only and immutable (a searcher's table: memory is the pages the OS caches, not the table). The file
        SQLite opens is checked to be the one open as ``f`` (the version verified with its manifest): if ``path``
        was replaced since, the table is copied into memory from ``f`` instead. Writes to it are refused.
        """
        path = Path(path).resolve()
        if in_place:
            conn = _open_in_place(f, path)
            if conn is not None:
                _check_table(conn, path)
                return cls(conn, read_only=f"the document table {path} was opened read-only, where it lies; "
                                          "load the index with read_only=False to change it")
        mem = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        f.seek(0)
        data = f.read()
        try:
            if hasattr(mem, "deserialize"):
                mem.deserialize(data)
            else:  # pragma: no cover - SQLite without deserialize: back up from the path
                src = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
                try:
                    src.backup(mem)
                finally:
                    src.close()
        except sqlite3.Error as e:
            mem.close()
            raise _damaged(path, e) from e
        del data
        _check_table(mem, path)
        return cls(mem)


def _open_in_place(f: BinaryIO, path: Path) -> sqlite3.Connection | None:
    """``path`` opened read-only and immutable by SQLite, if it is still the file open as ``f``; else None.

    A save over the directory replaces files (a new inode under the name), never writes into one, so a name that
    still leads to ``f``'s inode once SQLite has opened it led there when SQLite opened it; the inode stays alive
    while the connection holds it open, whatever is saved or removed afterwards.
    """
    conn = sqlite3.connect(f"{path.as_uri()}?mode=ro&immutable=1", uri=True, check_same_thread=False,
                           isolation_level=None)
    try:
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # SQLite opens the file here at the latest
        now, verified = os.stat(path), os.fstat(f.fileno())
    except (sqlite3.Error, OSError) as e:
        conn.close()  # not a database SQLite can open (the copy's checks name what is wrong), or removed meanwhile
        logger.info("%s could not be read in place (%s): reading the verified file into memory", path, e)
        return None
    if (now.st_dev, now.st_ino) != (verified.st_dev, verified.st_ino):
        conn.close()
        logger.info("%s was replaced after it was verified: reading the verified version into memory", path)
        return None
    return conn


def _check_table(conn: sqlite3.Connection, path: Path) -> None:
    """Refuse (ValueError naming ``path`` and what to do) a damaged or foreign table; closes ``conn`` then."""
    try:
        check = conn.execute("PRAGMA integrity_check").fetchone()[0]
        if check != "ok":
            raise ValueError(f"integrity check failed: {check}")
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not {"ids", "info"} <= tables:
            raise ValueError(f"tables 'ids' and 'info' expected, found {sorted(tables)}")
        row = conn.execute("SELECT value FROM info WHERE key='schema_version'").fetchone()
        if row is None or row[0] != str(SCHEMA_VERSION):
            raise ValueError(f"schema version {row and row[0]!r}, expected {SCHEMA_VERSION}")
    except (sqlite3.Error, ValueError) as e:
        conn.close()
        raise _damaged(path, e) from e


def _damaged(path: Path, why: Exception) -> ValueError:
    return ValueError(f"document table {path} is damaged or not a LENS index table ({why}); "
                      "restore it from a backup or rebuild the index")
