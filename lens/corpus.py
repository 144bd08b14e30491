"""The one reader of each data format: BEIR corpora / queries / qrels, plain JSONL, STS pairs, and a built-in
corpus from the stdlib; and the one rule for what text of a document gets encoded (``document_text``).

Files may be plain or gzipped and may have CRLF line endings. Every error names the file and line; a file that is
not UTF-8 gets one that says how to convert it (``decode_error_message``), and text that is not valid Unicode (a
lone surrogate, e.g. from a JSON ``"\\ud800"`` escape without its pair) is described by ``invalid_unicode``.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

PYDOC_TOPICS = "pydoc-topics"
CORPUS_NAMES = ("corpus.jsonl", "corpus.jsonl.gz")
QUERY_FILES = "a BEIR directory, a queries.jsonl[.gz], or a .tsv of id<TAB>text lines"  # what load_queries reads


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


def _first_existing(directory: Path, names: tuple[str, ...], what: str) -> Path:
    for name in names:
        if (directory / name).is_file():
            return directory / name
    raise FileNotFoundError(f"{directory} has no {what} (looked for {', '.join(names)})")


def iter_json_lines(path: str | os.PathLike) -> Iterator[tuple[int, object]]:
    """(line number, parsed value) for each non-blank line of a .jsonl or .jsonl.gz file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"file not found: {path}")
    try:
        with _open_text(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    yield n, json.loads(line)
                except json.JSONDecodeError as e:  # json's own message, at the file's line (it sees line 1)
                    raise ValueError(f"{path}:{n}: not valid JSON ({e.msg}: line {n} column {e.colno})") from None
    except UnicodeDecodeError as e:
        raise ValueError(decode_error_message(path, e)) from None
    except (OSError, EOFError) as e:  # truncated gzip
        raise ValueError(f"{path} cannot be read ({e}); the file is damaged") from e


def read_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line of a .jsonl or .jsonl.gz file of JSON objects."""
    for n, obj in iter_json_lines(path):
        if not isinstance(obj, dict):
            raise ValueError(f"{path}:{n}: expected a JSON object, got {type(obj).__name__}")
        yield n, obj


def corpus_file(path: str | os.PathLike) -> Path:
    """The corpus JSONL behind ``path``: a BEIR directory or the file itself."""
    p = Path(path)
    if p.is_dir():
        return _first_existing(p, CORPUS_NAMES, "corpus")
    if p.is_file():
        return p
    raise FileNotFoundError(
        f"corpus {os.fspath(path)!r} not found: give a BEIR directory, a corpus.jsonl[.gz], a JSONL of "
        f'{{"id", "text"[, "title"]}} records, or {PYDOC_TOPICS!r}'
    )


def iter_corpus(path: str | os.PathLike) -> Iterator[Document]:
    """Documents of a corpus: records need an id (``_id`` or ``id``) and a ``text``; ``title`` is optional."""
    if os.fspath(path) == PYDOC_TOPICS:
        yield from pydoc_passages()
        return
    file = corpus_file(path)
    for n, obj in read_jsonl(file):
        doc_id = obj.get("_id", obj.get("id"))
        if doc_id is None or (isinstance(doc_id, str) and not doc_id.strip()):
            raise ValueError(f"{file}:{n}: record has no id (expected an '_id' or 'id' field)")
        text = obj.get("text")
        if not isinstance(text, str):
            raise ValueError(f"{file}:{n}: record {doc_id!r} has no 'text' string")
        title = obj.get("title") or ""
        extra = {k: v for k, v in obj.items() if k not in ("_id", "id", "text", "title")}
        yield Document(str(doc_id), text, title if isinstance(title, str) else str(title), extra)


def load_corpus(path: str | os.PathLike) -> list[Document]:
    """All documents, refusing duplicate ids."""
    docs, seen = [], set()
    for doc in iter_corpus(path):
        if doc.id in seen:
            raise ValueError(f"corpus {os.fspath(path)}: document id {doc.id!r} appears twice")
        seen.add(doc.id)
        docs.append(doc)
    if not docs:
        raise ValueError(f"corpus {os.fspath(path)} holds no documents")
    return docs


def load_queries(path: str | os.PathLike) -> dict[str, str]:
    """Queries ``{query id: text}`` from a BEIR queries.jsonl[.gz] (``_id``/``id`` and ``text``), a BEIR directory,
    or a ``.tsv`` of ``id<TAB>text`` lines (MS MARCO's and Pyserini's topic files)."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"queries {os.fspath(path)!r} not found: give {QUERY_FILES}")
    if p.is_dir():
        p = _first_existing(p, ("queries.jsonl", "queries.jsonl.gz"), "queries")
    out = {}
    if p.suffix == ".tsv":
        with _open_text(p) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                qid, sep, text = line.rstrip("\r\n").partition("\t")
                if not sep or not qid.strip() or not text.strip():
                    raise ValueError(f"{p}:{n}: a query line is 'id<TAB>text'")
                out[qid.strip()] = text
        return out
    for n, obj in read_jsonl(p):
        qid, text = obj.get("_id", obj.get("id")), obj.get("text")
        if qid is None or not isinstance(text, str):
            raise ValueError(f"{p}:{n}: a query needs an '_id' and a 'text' string")
        out[str(qid)] = text
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


def pydoc_passages(max_chars: int = 1000) -> list[Document]:
    """The Python documentation topics in the standard library (``pydoc_data.topics``), split into passages.

    Paragraphs are packed into passages of at most ``max_chars`` characters (a longer paragraph stands
    alone); ids are ``topic#n`` and the topic name is the title. Available wherever Python is.
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
        docs += [Document(f"{name}#{i}", text, name) for i, text in enumerate(chunks)]
    return docs


STS_COLUMNS = ("sentence1", "sentence2", "score", "split")


@dataclass
class StsPairs:
    """One split of an STS file: two sentence lists and the gold scores, row-aligned."""

    sentence1: list[str]
    sentence2: list[str]
    scores: list[float]

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
    for n, row in enumerate(rows[1:], 2):
        if len(row) < 4:
            raise ValueError(f"{p}:{n}: expected at least 4 tab-separated columns, got {len(row)}")
        if row[3] != split:
            continue
        try:
            score = float(row[2])
        except ValueError:
            raise ValueError(f"{p}:{n}: score {row[2]!r} is not a number") from None
        out.sentence1.append(row[0])
        out.sentence2.append(row[1])
        out.scores.append(score)
    if not len(out):
        raise ValueError(f"{p}: no pairs in split {split!r}")
    return out
