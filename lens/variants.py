"""Variants of a BEIR-layout retrieval set, for out-of-domain checks (``lens data variant``).

A user's corpus is rarely shaped like the sets a model was tuned on: records in capitals, title-only catalogues,
shouted or misspelt queries. Each variant rewrites the texts of a set and keeps its ids and qrels, so nDCG@10 on the
variant against the original says what the change alone costs a system (BM25 lowercases; a cased model may not).

The rewrites are pure functions of a text (and, for typos, of a seed and the query id), registered in ``VARIANTS``;
``write_variant`` reads a set with the one reader (``lens.corpus``) and writes the variant atomically beside a
``variant.json`` recording its source, rule and counts.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from lens.atomic import atomic_dir, check_replace_target, write_json
from lens.corpus import Document, iter_json_lines, load_corpus, load_queries, write_json_lines

VARIANT_FORMAT = 1
TYPO_RATE = 0.1  # share of a query's words (of 4+ letters) given one typo
_WORD = re.compile(r"[^\W\d_]{4,}")  # words of four or more letters: short words keep their meaning when cut
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


def typo_word(word: str, rng: random.Random) -> str:
    """``word`` with one keyboard-style slip: two neighbouring letters swapped, a letter dropped or doubled."""
    i = rng.randrange(1, len(word) - 1)  # never the first letter: people rarely get it wrong
    kind = rng.choice(("swap", "drop", "double"))
    if kind == "swap":
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    if kind == "drop":
        return word[:i] + word[i + 1:]
    return word[:i] + word[i] + word[i:]


def add_typos(text: str, seed: int, key: str, rate: float = TYPO_RATE) -> str:
    """``text`` with about ``rate`` of its words of 4+ letters misspelt once; the same (seed, key) gives the same
    typos in every run and on every machine (the generator is seeded from a hash, not Python's ``hash``)."""
    digest = hashlib.sha256(f"{seed}\0{key}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    return _WORD.sub(lambda m: typo_word(m.group(), rng) if rng.random() < rate else m.group(), text)


def first_sentence(text: str) -> str:
    return _SENTENCE_END.split(text.strip(), maxsplit=1)[0]


@dataclass(frozen=True)
class Variant:
    """A named rewrite: of each document (``doc``) and of each query (``query(text, seed, query id)``)."""

    description: str
    doc: Callable[[Document], Document] | None = None
    query: Callable[[str, int, str], str] | None = None


def _upper_doc(d: Document) -> Document:
    return Document(d.id, d.text.upper(), d.title.upper(), d.extra)


def _lower_doc(d: Document) -> Document:
    return Document(d.id, d.text.lower(), d.title.lower(), d.extra)


def _title_only(d: Document) -> Document:
    # BEIR joins title and text (lens.corpus.document_text); a title-only record keeps the title as its text.
    return Document(d.id, d.title.strip() or first_sentence(d.text), "", d.extra)


VARIANTS: dict[str, Variant] = {
    "upper-queries": Variant("queries upper-cased", query=lambda q, seed, qid: q.upper()),
    "upper-corpus": Variant("documents upper-cased", doc=_upper_doc),
    "upper-all": Variant("documents and queries upper-cased", doc=_upper_doc, query=lambda q, seed, qid: q.upper()),
    "lower-queries": Variant("queries lower-cased (as people type them)", query=lambda q, seed, qid: q.lower()),
    "lower-all": Variant("documents and queries lower-cased", doc=_lower_doc, query=lambda q, seed, qid: q.lower()),
    "title-only": Variant("documents reduced to their title (the first sentence where a record has none)",
                          doc=_title_only),
    "typos": Variant(f"about {TYPO_RATE:.0%} of each query's words of 4+ letters misspelt once (seeded)",
                     query=add_typos),
}


def get_variant(name: str) -> Variant:
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; valid: {', '.join(VARIANTS)}")
    return VARIANTS[name]


def rewrite_texts(texts: list[str], name: str, *, seed: int = 0, key: str = "") -> list[str]:
    """``texts`` (sentences of an STS set, say) under variant ``name``'s query rewrite; "original" keeps them. The
    i-th text's typos are keyed by ``key`` and i, so both sides of a pair get their own."""
    if name == "original":
        return list(texts)
    variant = get_variant(name)
    if variant.query is None:
        usable = ", ".join(n for n, v in VARIANTS.items() if v.query is not None)
        raise ValueError(f"variant {name!r} rewrites only documents; texts take original, {usable}")
    return [variant.query(t, seed, f"{key}{i}") for i, t in enumerate(texts)]


def _query_records(src: Path, queries: dict[str, str]) -> Iterator[dict]:
    """Each query as ``{"_id", "text"}`` with the fields beside them in the source's queries.jsonl (BEIR's
    ``metadata``) kept; a TSV of queries has none."""
    path = next((src / n for n in ("queries.jsonl", "queries.jsonl.gz") if (src / n).is_file()), None)
    extra: dict[str, dict] = {}
    if path is not None:
        for _, obj in iter_json_lines(path):
            if isinstance(obj, dict):
                qid = str(obj.get("_id", obj.get("id")))
                extra[qid] = {k: v for k, v in obj.items() if k not in ("_id", "id", "text")}
    for qid, text in queries.items():
        yield {"_id": qid, "text": text, **extra.get(qid, {})}


def _doc_record(d: Document) -> dict:
    return {"_id": d.id, "title": d.title, "text": d.text, **d.extra}


def check_variant_target(path: Path) -> None:
    """Refuse to write a variant over something that is not one: a file, or a non-empty directory without a
    ``variant.json`` (writing replaces the whole directory, so a user's folder must never be taken for a variant)."""
    check_replace_target(path, "variant.json", "variant directory", where="--out",
                         note="writing would replace it even with --overwrite")


def write_variant(source: str | os.PathLike, out: str | os.PathLike, name: str, *, seed: int = 0,
                  overwrite: bool = False) -> dict:
    """Write variant ``name`` of the BEIR-layout set at ``source`` to ``out`` (corpus, queries, every qrels file,
    ``variant.json``); returns what ``variant.json`` records. ``out`` must not exist unless ``overwrite``, and
    even then must be an earlier variant (it has ``variant.json``) or empty (``check_variant_target``)."""
    variant = get_variant(name)
    src, dst = Path(source), Path(out)
    if not src.is_dir():
        raise FileNotFoundError(f"BEIR directory not found: {src}")
    if src.resolve() == dst.resolve():
        raise ValueError(f"the variant would replace its source {src}: give another --out")
    if dst.exists() and not overwrite:
        raise FileExistsError(f"{dst} exists; remove it or pass --overwrite")
    check_variant_target(dst)
    qrels_dir = src / "qrels"
    qrels = sorted(qrels_dir.glob("*.tsv*")) if qrels_dir.is_dir() else []
    if not qrels:
        raise FileNotFoundError(f"{src} has no qrels/*.tsv: not a BEIR-layout set")
    docs = load_corpus(src)
    queries = load_queries(src)
    if name == "title-only" and not any(d.title.strip() for d in docs):
        raise ValueError(f"{src}: no document has a title, so a title-only variant would be its first sentences; "
                         "pick a set with titles")
    changed_docs = changed_queries = 0
    if variant.doc is not None:
        new = [variant.doc(d) for d in docs]
        changed_docs = sum(a.full_text != b.full_text for a, b in zip(docs, new))
        docs = new
    if variant.query is not None:
        new_q = {qid: variant.query(q, seed, qid) for qid, q in queries.items()}
        changed_queries = sum(new_q[q] != queries[q] for q in queries)
        queries = new_q
    record = {"format_version": VARIANT_FORMAT, "variant": name, "description": variant.description,
              "source": str(src), "source_name": src.name, "seed": seed, "documents": len(docs),
              "queries": len(queries), "documents_changed": changed_docs, "queries_changed": changed_queries}
    with atomic_dir(dst, what="variant directory") as tmp:
        write_json_lines(tmp / "corpus.jsonl.gz", (_doc_record(d) for d in docs))
        write_json_lines(tmp / "queries.jsonl.gz", _query_records(src, queries))
        (tmp / "qrels").mkdir()
        for f in qrels:
            shutil.copyfile(f, tmp / "qrels" / f.name)
        write_json(tmp / "variant.json", record)
    return record
