"""The one reader of each data format: BEIR corpora / queries / qrels, plain JSONL, STS pairs, and a built-in
corpus from the stdlib; and the one rule for what text of a document gets encoded (``document_text``).

Files may be plain or gzipped and may have CRLF line endings. Every error names the file and line; a file that is
not UTF-8 gets one that says how to convert it (``decode_error_message``), and text that is not valid Unicode (a
lone surrogate, e.g. from a JSON ``"\\ud800"`` escape without its pair) is described by ``invalid_unicode``.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import hashlib
import json
import logging
import math
import os
import re
import threading
import zlib
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

PYDOC_TOPICS = "pydoc-topics"
CORPUS_NAMES = ("corpus.jsonl", "corpus.jsonl.gz")
QUERY_FILES = ("a BEIR directory, a queries.jsonl[.gz], a .tsv of id<TAB>text lines, or a .txt of one query a line "
               "(ids: 0-based line numbers, as lens encode gives them)")  # what load_queries reads


@dataclass
class Document:
    id: str
    text: str
    title: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def full_text(self) -> str:
        """What gets encoded and indexed: ``document_text(title, text)``."""
        return document_text(self.title, self.text)


def document_text(title: str | None, text: str) -> str:
    """The one rule for a document's text, used by training, indexing and every benchmark system.

    Title, a space, then text, stripped: BEIR's joining, which the BM25 / MiniLM reference numbers use and
    the shipped default was trained and evaluated with.
    """
    return f"{title or ''} {text}".strip()


class DocumentTexts(Sequence[str]):
    """The ``full_text`` of each of ``docs``, read when asked (a slice gives a list): what an encoder needs of a
    corpus without a second copy of its texts in memory (``docs`` may be a :class:`CorpusFile`)."""

    def __init__(self, docs: Sequence[Document]) -> None:
        self.docs = docs

    def __len__(self) -> int:
        return len(self.docs)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [d.full_text for d in self.docs[i]]
        return self.docs[i].full_text


_SURROGATE = re.compile("[\ud800-\udfff]")


def invalid_unicode(text: str) -> str | None:
    """None if ``text`` can be encoded as UTF-8, else what is wrong with it (a lone surrogate and where)."""
    found = _SURROGATE.search(text)
    if found is None:
        return None
    return (f"a lone surrogate U+{ord(found.group()):04X} at character {found.start()}, which is not valid Unicode "
            "(often a JSON \\ud83d-style escape without its pair, or bytes decoded with errors='surrogateescape')")


def decode_error_message(path: str | os.PathLike, error: UnicodeDecodeError) -> str:
    """A one-line explanation of a file that is not UTF-8: where the first bad byte is, and how to convert the file."""
    path = Path(path)
    line, column, byte = _first_bad_byte(path)
    where = f"line {line}, byte {column}: 0x{byte:02x}" if line else f"{error.reason}, byte 0x{error.object[error.start]:02x}"
    if path.suffix == ".gz":
        convert = f"`zcat {path.name} | iconv -f latin1 -t utf-8 | gzip > utf8-{path.name}`"
    else:
        convert = f"`iconv -f latin1 -t utf-8 {path.name} > utf8-{path.name}`"
    return (f"{path} is not UTF-8 text ({where}); LENS reads UTF-8 only: convert it, e.g. {convert} "
            "(if it is Latin-1 / Windows-1252), or re-save it as UTF-8 in your editor")


def _first_bad_byte(path: Path) -> tuple[int, int, int]:
    """(line, byte column, byte) of the first byte that is not UTF-8, or (0, 0, 0) if it cannot be found."""
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as f:
            for n, raw in enumerate(f, 1):
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    return n, e.start + 1, raw[e.start]
    except (OSError, EOFError):
        pass
    return 0, 0, 0


def _open_text(path: Path):
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", newline=None)
    return open(path, encoding="utf-8", newline=None)


def read_text_lines(path: Path) -> list[str]:
    """The lines of a .txt of one text a line, the one reader of that format (``lens encode --input``, ``lens
    search --queries-file``): UTF-8 (a BOM dropped), lines ending at "\\n" alone with a "\\r" before it dropped.
    ``str.splitlines`` would also split at form feeds, U+2028 and other separators inside a line, and every line
    number after one, which is a text's id, would be off."""
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(decode_error_message(path, e)) from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _first_existing(directory: Path, names: tuple[str, ...], what: str) -> Path:
    for name in names:
        if (directory / name).is_file():
            return directory / name
    raise FileNotFoundError(f"{directory} has no {what} (looked for {', '.join(names)})")


def write_json_lines(path: str | os.PathLike, records: Iterable[object], *, gz: bool | None = None) -> None:
    """Write ``records`` as JSON lines to ``path``, a line at a time; gzipped (``gz``, by default when ``path`` ends
    in .gz) with no time or name in the header, so the same records are the same bytes. Not atomic: callers write
    through ``lens.atomic`` (a temporary file or directory)."""
    gz = str(path).endswith(".gz") if gz is None else gz
    with open(path, "wb") as raw, \
            (gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") if gz else contextlib.nullcontext(raw)) as f:
        for r in records:
            f.write((json.dumps(r, ensure_ascii=False) + "\n").encode("utf-8"))


def iter_json_lines(path: str | os.PathLike) -> Iterator[tuple[int, object]]:
    """(line number, parsed value) for each non-blank line of a .jsonl or .jsonl.gz file."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory; give a .jsonl or .jsonl.gz file")
    if not path.is_file():
        raise FileNotFoundError(f"file not found: {path}")
    try:
        with _open_text(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                yield n, _json_value(path, n, line)
    except UnicodeDecodeError as e:
        raise ValueError(decode_error_message(path, e)) from None
    except (OSError, EOFError) as e:  # truncated gzip
        raise ValueError(f"{path} cannot be read ({e}); the file is damaged") from e


def read_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line of a .jsonl or .jsonl.gz file of JSON objects."""
    for n, obj in iter_json_lines(path):
        yield n, _checked_object(path, n, obj)


def _json_value(path: str | os.PathLike, n: int, line: str) -> object:
    """Line ``n`` of ``path`` parsed; json's own message at the file's line (json sees line 1) when it is not JSON."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{n}: not valid JSON ({e.msg}: line {n} column {e.colno})") from None


def _checked_object(path: str | os.PathLike, n: int, obj: object) -> dict:
    if not isinstance(obj, dict):
        raise ValueError(f"{path}:{n}: expected a JSON object, got {type(obj).__name__}")
    return obj


def corpus_file(path: str | os.PathLike) -> Path:
    """The corpus JSONL behind ``path``: a BEIR directory or the file itself."""
    p = Path(path)
    if p.is_dir():
        return _first_existing(p, CORPUS_NAMES, "corpus")
    if p.is_file():
        return p
    raise FileNotFoundError(
        f"corpus {os.fspath(path)!r} not found: give a BEIR directory, a corpus.jsonl[.gz], a JSONL of "
        f'{{"id", "text"[, "title"]}} records, a .tsv[.gz] of id<TAB>text lines, or {PYDOC_TOPICS!r}'
    )


def iter_corpus(path: str | os.PathLike) -> Iterator[Document]:
    """Documents of a corpus: a JSONL's records need an id (``_id`` or ``id``) and a ``text`` (Pyserini's
    ``contents`` is read too); ``title`` is optional, other fields are kept as metadata. A ``.tsv[.gz]`` holds
    ``id<TAB>text`` lines (MS MARCO's ``collection.tsv``), or the columns a header line names (an id column: ``id``,
    ``_id``, ``pid``, ``docid``; a text column: ``text``, ``passage``, ``contents``; ``title``; others kept as
    metadata: DPR's ``id<TAB>text<TAB>title``)."""
    if os.fspath(path) == PYDOC_TOPICS:
        yield from pydoc_passages()
        return
    file = corpus_file(path)
    if not is_tsv(file):
        for n, obj in read_jsonl(file):
            yield _document(file, n, obj)
        return
    columns, first = None, True
    try:
        with _open_text(file) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                if first:
                    first, columns = False, tsv_header(line)
                    if columns is not None:
                        continue
                yield _tsv_document(file, n, line, columns)
    except UnicodeDecodeError as e:
        raise ValueError(decode_error_message(file, e)) from None
    except (OSError, EOFError) as e:  # truncated gzip
        raise ValueError(f"{file} cannot be read ({e}); the file is damaged") from e


def is_tsv(file: Path) -> bool:
    return file.name.endswith((".tsv", ".tsv.gz"))


TSV_COLUMNS = {"id": ("id", "_id", "pid", "docid", "doc_id"), "text": ("text", "passage", "contents", "body"),
               "title": ("title",)}


def tsv_header(line: str) -> tuple[str, ...] | None:
    """The column names of a TSV corpus's header line (id, text, title, or a name of its own), or None when the
    line is a record (a header names one id column and one text column)."""
    names = [field.strip().lower() for field in line.rstrip("\r\n").split("\t")]
    roles = tuple(next((role for role, aliases in TSV_COLUMNS.items() if name in aliases), name) for name in names)
    return roles if roles.count("id") == 1 and roles.count("text") == 1 and len(set(roles)) == len(roles) else None


def _tsv_document(file: Path, n: int, line: str, columns: tuple[str, ...] | None) -> Document:
    fields = line.rstrip("\r\n").split("\t")
    if columns is None:
        if len(fields) != 2:
            raise ValueError(f"{file}:{n}: {len(fields)} tab-separated columns; a TSV corpus line is id<TAB>text, or "
                             "give a first line naming the columns (e.g. id<TAB>text<TAB>title)")
        columns = ("id", "text")
    elif len(fields) != len(columns):
        raise ValueError(f"{file}:{n}: {len(fields)} tab-separated columns where the header names {len(columns)} "
                         f"({', '.join(columns)})")
    return _document(file, n, dict(zip(columns, fields)))


def _document(file: Path, n: int, obj: dict) -> Document:
    """Line ``n``'s corpus record as a Document (the rules ``iter_corpus`` states)."""
    doc_id = obj.get("_id", obj.get("id"))
    if doc_id is None or (isinstance(doc_id, str) and not doc_id.strip()):
        raise ValueError(f"{file}:{n}: record has no id (expected an '_id' or 'id' field)")
    text_key = "text" if "text" in obj or "contents" not in obj else "contents"  # Pyserini's JsonCollection
    text = obj.get(text_key)
    if not isinstance(text, str):
        raise ValueError(f"{file}:{n}: record {doc_id!r} has no 'text' string (nor Pyserini's 'contents')")
    title = obj.get("title") or ""
    extra = {k: v for k, v in obj.items() if k not in ("_id", "id", text_key, "title")}
    return Document(str(doc_id), text, title if isinstance(title, str) else str(title), extra)


def load_corpus(path: str | os.PathLike) -> list[Document]:
    """All documents, refusing duplicate ids."""
    docs, seen = [], set()
    for doc in iter_corpus(path):
        if doc.id in seen:
            raise ValueError(_twice(path, doc.id))
        seen.add(doc.id)
        docs.append(doc)
    if not docs:
        raise ValueError(f"corpus {os.fspath(path)} holds no documents")
    return docs


def _twice(path: str | os.PathLike, doc_id: str) -> str:
    return f"corpus {os.fspath(path)}: document id {doc_id!r} appears twice"


def open_corpus(path: str | os.PathLike) -> Sequence[Document]:
    """The documents of a corpus, as ``load_corpus`` gives them, for work that reads them a slice at a time (an
    index build): a ``.jsonl`` or ``.tsv``, plain or gzipped (or a BEIR directory's ``corpus.jsonl[.gz]``), as a
    :class:`CorpusFile`, read where it lies; the built-in corpus (and a file whose lines end in a lone carriage
    return) loaded into memory."""
    if os.fspath(path) != PYDOC_TOPICS:
        corpus = CorpusFile.scan(corpus_file(path), name=path)
        if corpus is not None:
            return corpus
    return load_corpus(path)


class CorpusFile(Sequence[Document]):
    """A JSONL (or TSV) corpus read where it lies, for corpora larger than memory: one pass (:meth:`scan`) checks
    every record as ``load_corpus`` does (ids, texts, no id twice) and keeps each record's byte offset and line
    number (16 B a document); a document is parsed again each time it is read. Slices are views of the same file
    (an index build reads its documents a chunk at a time, in order), and a view pickles as its path and offsets,
    so worker processes read their own share. The file must not change while it is in use (a record read again
    that no longer parses raises ValueError naming its line).

    A gzipped file's offsets are in its decompressed stream. Gzip cannot seek, so each process keeps one reader of
    the file open (``_GzipLines``) that moves forward: reads in file order, as a build's, decompress the file once
    per pass; a read behind the reader starts it again from the top."""

    def __init__(self, path: Path, offsets: "np.ndarray", lines: "np.ndarray", *, tsv: bool = False,
                 columns: tuple[str, ...] | None = None, identity: tuple[int, ...] | None = None) -> None:
        self.path, self.offsets, self.lines = Path(path), offsets, lines
        self.tsv, self.columns = tsv, columns  # a TSV corpus, and its header's columns (None: id<TAB>text)
        self.identity = identity  # a gzipped file's (device, inode, size, mtime) when scanned: the one read again

    def _record(self, n: int, line: str) -> Document:
        if self.tsv:
            return _tsv_document(self.path, n, line, self.columns)
        return _document(self.path, n, _json_object(self.path, n, line))

    @classmethod
    def scan(cls, path: str | os.PathLike, name: str | os.PathLike | None = None) -> "CorpusFile | None":
        """The checked corpus at ``path`` (a plain .jsonl or .tsv; ``name`` is what errors call the corpus), or None
        for a file whose lines end in a lone carriage return (read by ``load_corpus`` instead)."""
        import numpy as np

        path = Path(path)
        name = path if name is None else name
        offsets, lines, hashes = array("q"), array("q"), array("Q")  # 24 B a document while scanning
        corpus = cls(path, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), tsv=is_tsv(path))
        try:
            with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as f:
                if path.suffix == ".gz":
                    corpus.identity = _identity(os.fstat(f.fileno()))
                offset, first = 0, True
                for n, raw in enumerate(f, 1):
                    start, offset = offset, offset + len(raw)
                    line = raw.decode("utf-8")
                    if not line.strip():
                        continue
                    if "\r" in line.rstrip("\r\n"):
                        return None  # old Mac line ends: text mode splits them, bytes do not
                    if first and corpus.tsv:
                        corpus.columns = tsv_header(line)
                        if corpus.columns is not None:
                            first = False
                            continue
                    first = False
                    doc = corpus._record(n, line)
                    offsets.append(start)
                    lines.append(n)
                    hashes.append(_id_hash(doc.id))
        except UnicodeDecodeError as e:
            raise ValueError(decode_error_message(path, e)) from None
        except (gzip.BadGzipFile, EOFError, zlib.error) as e:  # a truncated or damaged gzip
            raise ValueError(f"{path} cannot be read ({e}); the file is damaged") from e
        if not offsets:
            raise ValueError(f"corpus {os.fspath(name)} holds no documents")
        corpus.offsets, corpus.lines = np.frombuffer(offsets, dtype=np.int64), np.frombuffer(lines, dtype=np.int64)
        corpus._refuse_repeated_ids(np.frombuffer(hashes, dtype=np.uint64), name)
        return corpus

    def _refuse_repeated_ids(self, hashes: "np.ndarray", name: str | os.PathLike) -> None:
        """ValueError (as ``load_corpus``'s) for the first id that appears twice: ids are compared by a 64-bit hash
        (8 B a document, not a set of the ids), and the records of equal hashes read again to compare the ids."""
        import numpy as np

        order = np.argsort(hashes, kind="stable")
        ranked = hashes[order]
        same = np.flatnonzero(ranked[1:] == ranked[:-1])
        if not len(same):
            return
        candidates = np.unique(np.concatenate([order[same], order[same + 1]]))
        seen: dict[str, int] = {}
        for i in sorted(candidates.tolist()):  # file order: the second sighting is the one named
            doc_id = self[i].id
            if doc_id in seen:
                raise ValueError(_twice(name, doc_id) + f" (lines {self.lines[seen[doc_id]]} and {self.lines[i]})")
            seen[doc_id] = i

    def __len__(self) -> int:
        return len(self.offsets)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return CorpusFile(self.path, self.offsets[i], self.lines[i], tsv=self.tsv, columns=self.columns,
                              identity=self.identity)
        return next(iter(self._read([self._position(i)])))

    def __iter__(self) -> Iterator[Document]:
        return self._read(range(len(self)))

    def _position(self, i) -> int:
        import operator

        i = operator.index(i)
        if not -len(self) <= i < len(self):
            raise IndexError(f"document {i} of a corpus of {len(self)}")
        return i % len(self)

    def _read(self, positions) -> Iterator[Document]:
        with _lines(self.path, self.identity) as read_line:
            for i in positions:
                offset, n = int(self.offsets[i]), int(self.lines[i])
                try:
                    yield self._record(n, read_line(offset).decode("utf-8"))
                except (ValueError, UnicodeDecodeError, EOFError, zlib.error) as e:
                    raise ValueError(f"{self.path}:{n} changed since the corpus was read ({e}); a corpus must not "
                                     "change while it is indexed: run the command again") from None

    def __repr__(self) -> str:
        return f"CorpusFile({os.fspath(self.path)!r}, documents={len(self)})"


@contextlib.contextmanager
def _lines(path: Path, identity: tuple[int, ...] | None) -> Iterator[Callable[[int], bytes]]:
    """``read_line(offset)``: the line of ``path`` that starts at byte ``offset`` (of the decompressed stream for a
    .gz, through this process's ``_GzipLines`` of the file with that ``identity``)."""
    if path.suffix != ".gz":
        with open(path, "rb") as f:
            def read_line(offset: int) -> bytes:
                f.seek(offset)
                return f.readline()

            yield read_line
        return
    yield _GzipLines.of(path, identity).read_line


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class _GzipLines:
    """One process's forward reader of a gzipped file: a line at a decompressed offset at or after the last one read
    costs the bytes between them; one before it, a fresh pass from the top. Kept open (one per file and version,
    ``of``; the last few), so that the chunks a build reads in order continue one pass. The file opened must be the
    version scanned (``identity``): one replaced since is an error, never other documents."""

    _open: dict[tuple, "_GzipLines"] = {}
    _guard = threading.Lock()
    KEPT = 4

    def __init__(self, path: Path, identity: tuple[int, ...] | None) -> None:
        self.path, self.identity, self.lock, self._file = path, identity, threading.Lock(), None

    @classmethod
    def of(cls, path: Path, identity: tuple[int, ...] | None) -> "_GzipLines":
        key = (path.resolve(), identity)
        with cls._guard:
            if key not in cls._open:
                while len(cls._open) >= cls.KEPT:  # the oldest lets go of its file
                    cls._open.pop(next(iter(cls._open))).close()
                cls._open[key] = cls(path, identity)
            return cls._open[key]

    def close(self) -> None:
        with self.lock:
            if self._file is not None:
                self._file.close()
            self._file = None

    def read_line(self, offset: int) -> bytes:
        with self.lock:
            if self._file is None or offset < self._file.tell():
                if self._file is not None:
                    self._file.close()
                self._file = gzip.open(self.path, "rb")
                if self.identity is not None and _identity(os.fstat(self._file.fileno())) != self.identity:
                    self._file.close()
                    self._file = None
                    raise ValueError("the file was replaced")
            self._file.seek(offset)  # forward: decompresses and drops the bytes between
            return self._file.readline()


def _json_object(path: Path, n: int, line: str) -> dict:
    """Line ``n`` of ``path`` as a JSON object, or ValueError as ``read_jsonl`` words it."""
    return _checked_object(path, n, _json_value(path, n, line))


def _id_hash(doc_id: str) -> int:
    # surrogatepass: an id holding a lone surrogate is refused later, by name (lens.indexing.check_documents)
    return int.from_bytes(hashlib.blake2b(doc_id.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


QUERY_TSV_HEADER = ({"query-id", "query_id", "qid", "id", "_id"}, {"text", "query", "query-text", "query_text"})


def load_queries(path: str | os.PathLike) -> dict[str, str]:
    """Queries ``{query id: text}`` from a BEIR queries.jsonl[.gz] (``_id``/``id`` and ``text``), a BEIR directory,
    a ``.tsv[.gz]`` of ``id<TAB>text`` lines (MS MARCO's and Pyserini's topic files; a header line such as
    ``query-id<TAB>text`` is skipped), or a ``.txt`` of one query a line, whose id is its 0-based line number (as
    ``lens encode`` numbers a .txt's texts; blank lines skipped, still counted). A query id given twice is an error
    naming both lines (a run would silently lose one of them); another file type is named with the ones read."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"queries {os.fspath(path)!r} not found: give {QUERY_FILES}")
    if p.is_dir():
        p = _first_existing(p, ("queries.jsonl", "queries.jsonl.gz"), "queries")
    out: dict[str, str] = {}
    lines: dict[str, int] = {}

    def keep(qid: str, text: str, n: int) -> None:
        if qid in lines:
            raise ValueError(f"{p}: query id {qid!r} appears twice (lines {lines[qid]} and {n}); give each query "
                             "its own id")
        out[qid], lines[qid] = text, n

    if p.suffix == ".txt":
        for i, line in enumerate(read_text_lines(p)):
            if "\t" in line:  # Anserini's topics-*.txt are id<TAB>text: read as queries they would carry their ids
                raise ValueError(f"{p}:{i + 1}: a tab in a .txt of one query a line; a file of id<TAB>text lines "
                                 "(as Anserini's topics .txt) is read as such when named .tsv")
            if line.strip():
                keep(str(i), line, i + 1)
        return out
    if not (is_tsv(p) or p.name.endswith((".jsonl", ".jsonl.gz"))):
        raise ValueError(f"queries {p}: not a file type read as queries; give {QUERY_FILES}")
    if is_tsv(p):
        with _open_text(p) as f:
            first = True
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                qid, sep, text = line.rstrip("\r\n").partition("\t")
                header = first and qid.strip().lower() in QUERY_TSV_HEADER[0] \
                    and text.strip().lower() in QUERY_TSV_HEADER[1]
                first = False
                if header:
                    continue
                if not sep or not qid.strip() or not text.strip():
                    raise ValueError(f"{p}:{n}: a query line is 'id<TAB>text'")
                keep(qid.strip(), text, n)
        return out
    for n, obj in read_jsonl(p):
        qid, text = obj.get("_id", obj.get("id")), obj.get("text")
        if qid is None or not isinstance(text, str):
            raise ValueError(f"{p}:{n}: a query needs an '_id' and a 'text' string")
        keep(str(qid), text, n)
    return out


def load_qrels(path: str | os.PathLike) -> dict[str, dict[str, int]]:
    """``{qid: {doc id: grade}}`` from BEIR's qrels TSV (``query-id<TAB>corpus-id<TAB>score``, header optional) or
    a TREC qrels file (``qid iteration docid grade``, separated by tabs or spaces)."""
    p = Path(path)
    if not p.is_file():
        gz = p.with_name(p.name + ".gz")
        if not gz.is_file():
            raise FileNotFoundError(f"qrels file not found: {p}")
        p = gz
    qrels: dict[str, dict[str, int]] = {}
    with _open_text(p) as f:
        for n, line in enumerate(f, 1):
            cols = line.rstrip("\r\n").split("\t")
            if len(cols) == 1:  # no tab: TREC's space-separated columns
                cols = line.split()
            if not line.strip() or (n == 1 and cols[0] == "query-id"):
                continue
            if len(cols) == 4:  # TREC style: qid, iteration, doc id, grade
                cols = [cols[0], cols[2], cols[3]]
            if len(cols) != 3:
                raise ValueError(f"{p}:{n}: expected query-id, corpus-id and score separated by tabs (BEIR), or "
                                 "qid, iteration, docid and grade (TREC)")
            try:
                grade = int(float(cols[2]))
            except ValueError:
                raise ValueError(f"{p}:{n}: score {cols[2]!r} is not a number") from None
            qrels.setdefault(cols[0], {})[cols[1]] = grade
    return qrels


def load_beir(directory: str | os.PathLike, split: str = "test"):
    """(corpus, queries restricted to the split's qrels, qrels) of a BEIR-layout directory."""
    d = Path(directory)
    if not d.is_dir():
        raise FileNotFoundError(f"BEIR directory not found: {d}")
    qrels = load_qrels(d / "qrels" / f"{split}.tsv")
    queries = load_queries(d)
    missing = [q for q in qrels if q not in queries]
    if missing:
        raise ValueError(f"{d}: {len(missing)} queries of qrels/{split}.tsv are not in the queries file, e.g. {missing[0]!r}")
    return load_corpus(d), {q: queries[q] for q in qrels}, qrels


PASSAGE_FIELDS = ("document", "passage")  # what a passage adds to its document's metadata: the id, its 0-based place
_WORD = re.compile(r"\S+")


def check_passage_sizes(words: int, overlap: int) -> None:
    """``split_passages``' sizes checked: ``words`` a positive integer, ``overlap`` from 0 to ``words - 1``."""
    from index.vectors import check_positive_int

    check_positive_int(words, "words", "words per passage")
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < words:
        raise ValueError(f"overlap must be an integer from 0 to words - 1 ({words - 1}), got {overlap!r}")


def split_passages(doc: Document, words: int, overlap: int = 0) -> list[Document]:
    """``doc`` as passages of at most ``words`` whitespace-separated words, each starting ``words - overlap`` words
    after the one before, so that neighbours share ``overlap`` words and every word lies in one; a passage's text is
    the document's between its first and last word, as written.

    Each passage keeps the document's title (``document_text`` gives every passage its title, as a long
    document's context) and metadata, with ``document`` (the document's id) and ``passage`` (its 0-based place)
    added (``PASSAGE_FIELDS``), under the id ``{id}#{place}``: an index of passages removes a document's with the
    filter ``document=ID`` and ranks documents by their best passage with ``collapse="document"``. A document of at
    most ``words`` words is one passage, its text unchanged."""
    check_passage_sizes(words, overlap)
    taken = [name for name in PASSAGE_FIELDS if name in doc.extra]
    if len(taken) == len(PASSAGE_FIELDS):
        raise ValueError(f"document {doc.id!r} is already passage {doc.extra['passage']!r} of document "
                         f"{doc.extra['document']!r} (its metadata has {' and '.join(PASSAGE_FIELDS)}): the corpus is "
                         "split into passages already; index it as it is (lens search --collapse document ranks its "
                         "documents), or split the documents it came from")
    if taken:
        raise ValueError(f"document {doc.id!r} has its own metadata field {taken[0]!r}, which a passage uses for its "
                         "document: rename that field in the corpus")
    spans = [m.span() for m in _WORD.finditer(doc.text)]
    if len(spans) <= words:
        texts = [doc.text]
    else:
        step = words - overlap
        starts = range(0, len(spans) - overlap, step)
        texts = [doc.text[spans[a][0]:spans[min(a + words, len(spans)) - 1][1]] for a in starts]
    return [Document(f"{doc.id}#{n}", text, doc.title, {**doc.extra, "document": doc.id, "passage": n})
            for n, text in enumerate(texts)]


def pydoc_passages(max_chars: int = 1000) -> list[Document]:
    """The Python documentation topics in the standard library (``pydoc_data.topics``), split into passages.

    Paragraphs are packed into passages of at most ``max_chars`` characters (a longer paragraph stands
    alone); ids are ``topic#n``, the topic name is the title, and the metadata says which passage of which topic
    it is, as ``split_passages`` writes it (``PASSAGE_FIELDS``). Available wherever Python is.
    """
    from pydoc_data.topics import topics

    docs = []
    for name in sorted(topics):
        paras = [re.sub(r"\s+", " ", p).strip() for p in re.split(r"\n\s*\n", topics[name])]
        current: list[str] = []
        chunks = []
        for p in filter(None, paras):
            if current and sum(len(c) + 1 for c in current) + len(p) > max_chars:
                chunks.append(" ".join(current))
                current = []
            current.append(p)
        if current:
            chunks.append(" ".join(current))
        docs += [Document(f"{name}#{i}", text, name, {"document": name, "passage": i})
                 for i, text in enumerate(chunks)]
    return docs


STS_COLUMNS = ("sentence1", "sentence2", "score", "split")


@dataclass
class StsPairs:
    """One split of an STS file: two sentence lists and the gold scores, row-aligned, and each pair's line."""

    sentence1: list[str]
    sentence2: list[str]
    scores: list[float]
    lines: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.scores)


def read_sts(path: str | os.PathLike, split: str) -> StsPairs:
    """The pairs of one split of an STS TSV (``sentence1, sentence2, score, split``; plain or .gz).

    The files are written by Python's ``csv`` with minimal quoting (a field holding a double quote is quoted),
    so they are read in ``csv``'s default quoting mode. Every error names the file and line.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"STS file not found: {p}; expected a TSV[.gz] with columns {', '.join(STS_COLUMNS)}")
    try:
        with _open_text(p) as f:
            rows = list(csv.reader(f, delimiter="\t"))
    except UnicodeDecodeError as e:
        raise ValueError(decode_error_message(p, e)) from None
    except (OSError, EOFError) as e:
        raise ValueError(f"{p} cannot be read ({e}); the file is damaged") from e
    if not rows or tuple(rows[0][:4]) != STS_COLUMNS:
        raise ValueError(f"{p}:1: expected the header {', '.join(STS_COLUMNS)}")
    out = StsPairs([], [], [])
    splits, blank = set(), []
    for n, row in enumerate(rows[1:], 2):
        if len(row) != len(rows[0]):  # a stray tab in a sentence shifts the score and split columns
            raise ValueError(f"{p}:{n}: expected {len(rows[0])} tab-separated columns as in the header, got "
                             f"{len(row)}; a tab inside a sentence must be removed or the field quoted")
        splits.add(row[3])
        if row[3] != split:
            continue
        try:
            score = float(row[2])
        except ValueError:
            raise ValueError(f"{p}:{n}: score {row[2]!r} is not a number") from None
        if not math.isfinite(score):
            raise ValueError(f"{p}:{n}: score {row[2]!r} is not a finite number; give the pair's gold score")
        if not row[0].strip() or not row[1].strip():
            blank.append(n)
        out.sentence1.append(row[0])
        out.sentence2.append(row[1])
        out.scores.append(score)
        out.lines.append(n)
    if not len(out):
        raise ValueError(f"{p}: no pairs in split {split!r}; the file's splits: {', '.join(sorted(splits)) or 'none'}")
    if blank:
        lines = ", ".join(map(str, blank[:5])) + (", ..." if len(blank) > 5 else "")
        logger.warning("%s: %d pair(s) of split %r have a blank sentence (lines %s), whose vector is zero: their "
                       "cosine is 0", p, len(blank), split, lines)
    return out
