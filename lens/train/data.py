"""Training examples for LENS fine-tuning: the JSONL format, converters from the shared data, and task batching.

One example per line::

    {"query": str, "positive": str, "negatives": [str, ...], "score": float, "max_score": float,
     "teacher": [float, ...], "task": str, "instruction": str}

``score``/``max_score`` are an optional graded label of the query-positive pair on the scale ``[0, max_score]``;
``teacher`` holds optional teacher scores for ``[positive] + negatives``. Only ``query`` and ``positive`` are
required. Converters never read a test split: training on it would leak into the benchmark.
"""

from __future__ import annotations

import logging
import hashlib
import math
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from lens.atomic import atomic_file
from lens.corpus import Document, iter_json_lines, load_beir, load_corpus, read_sts, write_json_lines

logger = logging.getLogger(__name__)

__all__ = [
    "NEGATIVE_RANKS", "NLI_TRIPLET_SETS", "TrainExample", "beir_pairs", "bm25_rankings", "label_ids", "label_pairs",
    "pairs_file", "read_examples", "shared_pairs", "shared_pairs_split", "sts_pairs",
    "Step", "holdout_queries", "sample_examples", "split_holdout", "plan_steps", "task_batches", "weak_pairs", "write_examples",
]

FIELDS = ("query", "positive", "negatives", "score", "max_score", "teacher", "task", "instruction")
# Hard negatives come from these ranks (0-based, counted after judged documents are removed). The very top of an
# unjudged ranking often holds relevant documents nobody judged (false negatives), so the first three are skipped,
# as GTE and E5 do when mining; below rank 30 BM25 negatives stop being hard.
NEGATIVE_RANKS = (3, 30)
STS_MAX_SCORE = 5.0  # STS-B is scored 0-5, SICK-R 1-5: both keep their raw score on the scale R = 5


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".jsonl", ".tsv"):
        name = name.removesuffix(suffix)
    return name


def _names_test(name: str) -> bool:
    """Whether a split or file name names a test split: ``test`` as one of its words, alone or numbered or lettered
    (test, Test, test_small, dev-test, scifact.test, test2, test1k, CoNLL's testa), not inside another word
    (latest, contest, testing)."""
    return any(re.fullmatch(r"test(\d\w*|[a-z])?", word) for word in re.split(r"[^a-z0-9]+", name.strip().lower()))


def refuse_test(split: str, what: str = "split") -> None:
    """Refuse a test split by name (training on it leaks into the benchmark), and a split that is a path: a split
    is a file name under ``qrels/`` (or a value of an STS file's split column)."""
    if "/" in split or "\\" in split or split.strip() in ("", ".", ".."):
        raise ValueError(f"{what} {split!r} is not a split name: give a name such as train or dev (the qrels file "
                         "qrels/NAME.tsv)")
    if _names_test(split):
        raise ValueError(f"refusing {what} {split!r}: never train on a test split (use train or dev)")


# ------------------------------------------------------------------------------------------------ the format
@dataclass
class TrainExample:
    query: str
    positive: str
    negatives: list[str] = field(default_factory=list)  # hard negatives; in-batch negatives come on top
    score: float | None = None  # graded label of (query, positive) on [0, max_score]
    max_score: float | None = None  # the label scale R
    teacher: list[float] | None = None  # teacher scores for [positive] + negatives
    task: str = "default"  # batches hold one task each
    instruction: str | None = None  # query instruction (None: the trainer's default)

    def to_json(self) -> dict:
        """A JSON object with the unset optional fields left out."""
        out = {"query": self.query, "positive": self.positive, "negatives": list(self.negatives)}
        for key in ("score", "max_score", "teacher"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        out["task"] = self.task
        if self.instruction is not None:
            out["instruction"] = self.instruction
        return out

    @classmethod
    def from_json(cls, obj: object, source: str = "<example>", default_task: str = "default") -> TrainExample:
        """Validate a parsed JSON object; errors start with ``source`` (e.g. ``file:line``) and say what is wrong."""

        def fail(msg: str):
            raise ValueError(f"{source}: {msg}")

        if not isinstance(obj, dict):
            fail(f"expected a JSON object, got {type(obj).__name__}")
        unknown = sorted(set(obj) - set(FIELDS))
        if unknown:
            raw = {"negative", "qid"} & set(unknown)  # a shared set's own line (../shared/data/train)
            hint = "; a raw shared training set: convert it first with `lens data shared FILE --out OUT.jsonl.gz`" \
                if raw else ""
            fail(f"unknown field(s) {', '.join(map(repr, unknown))}; the fields are {', '.join(FIELDS)}{hint}")
        for key in ("query", "positive"):
            if not isinstance(obj.get(key), str) or not obj[key].strip():
                fail(f"{key!r} must be a non-empty string")
        negatives = obj.get("negatives", [])
        if not isinstance(negatives, list) or not all(isinstance(n, str) for n in negatives):
            fail("'negatives' must be a list of strings")
        numbers = {}
        for key in ("score", "max_score"):
            v = obj.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
                fail(f"{key!r} must be a finite number, got {v!r}")
            numbers[key] = None if v is None else float(v)
        if numbers["max_score"] is not None and numbers["max_score"] <= 0:
            fail(f"'max_score' must be positive, got {numbers['max_score']}")
        if None not in numbers.values() and not 0 <= numbers["score"] <= numbers["max_score"]:
            fail(f"'score' {numbers['score']} is outside [0, max_score={numbers['max_score']}]")
        teacher = obj.get("teacher")
        if teacher is not None:
            if not isinstance(teacher, list) or not all(
                    isinstance(t, (int, float)) and not isinstance(t, bool) for t in teacher):
                fail("'teacher' must be a list of numbers")
            if len(teacher) != 1 + len(negatives):
                fail(f"'teacher' has {len(teacher)} scores; expected 1 + {len(negatives)} negatives "
                     f"= {1 + len(negatives)} (positive first)")
            teacher = [float(t) for t in teacher]
        task = obj.get("task", default_task)
        if not isinstance(task, str) or not task.strip():
            fail("'task' must be a non-empty string")
        instruction = obj.get("instruction")
        if instruction is not None and not isinstance(instruction, str):
            fail("'instruction' must be a string")
        return cls(obj["query"], obj["positive"], list(negatives), numbers["score"], numbers["max_score"],
                   teacher, task, instruction)


def read_examples(path: str | os.PathLike, task: str | None = None) -> list[TrainExample]:
    """Examples of a .jsonl or .jsonl.gz file; a line without ``task`` gets ``task`` or else the file's stem."""
    path = Path(path)
    if path.is_dir():
        held = sorted(p.name for p in path.iterdir() if p.name.endswith((".jsonl", ".jsonl.gz")))
        usual = [n for n in held if _stem(Path(n)) in ("pairs", "train")] or held or ["FILE"]  # never suggest dev/test
        raise IsADirectoryError(f"{path} is a folder, not a training file (it holds {', '.join(held) or 'no .jsonl[.gz]'})"
                                f"; pass a file of it, converted with `lens data shared {path / usual[0]} "
                                "--out OUT.jsonl.gz` if it is a shared set")
    default = task or _stem(path)
    return [TrainExample.from_json(obj, f"{path}:{n}", default) for n, obj in iter_json_lines(path)]


def write_examples(path: str | os.PathLike, examples: Iterable[TrainExample]) -> None:
    """Write examples as JSONL (gzipped, with mtime 0, if ``path`` ends in .gz) through a temporary file, a line
    at a time (a large set is never held as one text)."""
    with atomic_file(path) as tmp:
        write_json_lines(tmp, (e.to_json() for e in examples), gz=str(path).endswith(".gz"))


# ------------------------------------------------------------------------------------------------ BEIR + mining
Miner = Callable[[list[str], list[str]], "np.ndarray"]


def bm25_rankings(query_texts: Sequence[str], doc_texts: Sequence[str], k: int) -> list[np.ndarray]:
    """Top-``k`` document indices per query (score > 0 only) by the benchmark's BM25 (``lens.bm25``)."""
    from lens.bm25 import BM25Index

    return [ids for ids, _ in BM25Index(doc_texts).search(query_texts, k)]


def _score_rankings(miner: Miner, query_texts: list[str], doc_texts: list[str], k: int) -> list[np.ndarray]:
    """Top-``k`` document indices per query from a ``(queries x documents)`` score matrix (e.g. the current model)."""
    scores = np.asarray(miner(query_texts, doc_texts), dtype=np.float64)
    if scores.shape != (len(query_texts), len(doc_texts)):
        raise ValueError(f"the miner returned scores of shape {scores.shape}; expected "
                         f"(queries, documents) = ({len(query_texts)}, {len(doc_texts)})")
    return list(np.argsort(-scores, axis=1, kind="stable")[:, :k])


def _pick_negatives(ranked: list[int], n: int, ranks: tuple[int, int], rng: np.random.Generator,
                    allowed: Callable[[int], bool], num_docs: int) -> list[int]:
    """``n`` documents sampled from ``ranked[lo:hi]`` (kept in rank order); short pools fill up from lower ranks,
    then the skipped top, then random documents. ``ranked`` holds no judged document already."""
    lo, hi = ranks
    pool = ranked[lo:hi]
    if len(pool) >= n:
        return [pool[i] for i in sorted(rng.choice(len(pool), n, replace=False))]
    picked = pool + ranked[hi:hi + n - len(pool)]
    picked += ranked[:lo][: n - len(picked)]
    seen = set(ranked)
    for i in rng.permutation(num_docs):  # the query matched too few documents: fill with random ones
        if len(picked) >= n:
            break
        if int(i) not in seen and allowed(int(i)):
            picked.append(int(i))
    return picked


def beir_pairs(beir_dir: str | os.PathLike, split: str = "train", num_negatives: int = 7,
               miner: str | Miner = "bm25", seed: int = 0, instruction: str | None = None,
               max_queries: int | None = None, negative_ranks: tuple[int, int] = NEGATIVE_RANKS,
               holdout: float = 0.0) -> list[TrainExample]:
    """One example per (query, judged positive) of a BEIR split, with mined hard negatives.

    ``miner`` is ``"bm25"`` (the benchmark's baseline) or a callable ``(query texts, document texts) -> scores``
    (e.g. the model being trained). Every document judged for the query, at any grade, is excluded from its
    negatives; the rest are sampled with ``seed`` from ``negative_ranks`` (see ``NEGATIVE_RANKS``). Documents
    are ``Document.full_text`` (``lens.corpus.document_text``), as everything else encodes them. Binary qrels give no ``score``; graded ones give
    ``score`` = grade and ``max_score`` = the split's top grade. The first ``max_queries`` queries are used.
    ``holdout`` leaves that fraction of the split's queries out (``holdout_queries``), to judge training on.
    """
    refuse_test(split)
    if num_negatives < 0:
        raise ValueError(f"num_negatives must be >= 0, got {num_negatives}")
    if not callable(miner) and miner != "bm25":
        raise ValueError(f"unknown miner {miner!r}: give 'bm25' or a callable (query texts, doc texts) -> scores")
    corpus, queries, qrels = load_beir(beir_dir, split)
    name = Path(beir_dir).resolve().name
    qids = [q for q in qrels if any(g > 0 for g in qrels[q].values())]
    if holdout:
        held = set(holdout_queries(qids, holdout))
        qids = [q for q in qids if q not in held]
    if max_queries is not None:
        qids = qids[:max_queries]
    top_grade = max((g for q in qids for g in qrels[q].values()), default=1)
    graded = top_grade > 1
    texts = [d.full_text for d in corpus]
    index_of = {d.id: i for i, d in enumerate(corpus)}
    depth = negative_ranks[1] + max((len(qrels[q]) for q in qids), default=0)
    query_texts = [queries[q] for q in qids]
    if num_negatives == 0:
        rankings = [np.empty(0, dtype=np.int64)] * len(qids)
    elif callable(miner):
        rankings = _score_rankings(miner, query_texts, texts, depth)
    else:
        rankings = bm25_rankings(query_texts, texts, depth)

    examples, missing = [], 0
    for qi, (qid, ranking) in enumerate(zip(qids, rankings)):
        judged = {index_of[d] for d in qrels[qid] if d in index_of}
        rng = np.random.default_rng([seed, qi])
        for doc_id, grade in qrels[qid].items():
            if grade <= 0:
                continue
            if doc_id not in index_of:
                missing += 1
                continue
            positive = texts[index_of[doc_id]]

            def allowed(i: int) -> bool:  # also keeps out exact copies of the positive under another id
                return i not in judged and texts[i] != positive

            ranked = [int(i) for i in ranking if allowed(int(i))]
            negs = _pick_negatives(ranked, num_negatives, negative_ranks, rng, allowed, len(texts)) \
                if num_negatives else []
            examples.append(TrainExample(
                queries[qid], positive, [texts[i] for i in negs], float(grade) if graded else None,
                float(top_grade) if graded else None, task=name, instruction=instruction))
    if missing:
        logger.warning("%s: %d judged positives are not in the corpus; skipped", name, missing)
    short = sum(len(e.negatives) < num_negatives for e in examples)
    if short:
        logger.warning("%s: %d of %d examples got fewer than %d hard negatives (the corpus has %d documents, and "
                       "judged ones and copies of the positive are never negatives)", name, short, len(examples),
                       num_negatives, len(texts))
    return examples


def _holdout_unit(key: str) -> float:
    """A stable number in [0, 1) for ``key`` (the same in every run, order and subset)."""
    return int(hashlib.sha256(f"lens-holdout|{key}".encode()).hexdigest()[:12], 16) / 16**12


def _check_fraction(fraction: float) -> None:
    if not 0 <= fraction < 1:
        raise ValueError(f"holdout must be in [0, 1), got {fraction}")


def holdout_queries(qids: Sequence[str], fraction: float) -> list[str]:
    """A fixed ``fraction`` of ``qids`` held out of training (to judge training runs on), chosen by a hash of each
    id, so the same query is held out whatever the order or subset of ids."""
    _check_fraction(fraction)
    return [q for q in qids if _holdout_unit(q) < fraction]


def split_holdout(examples: Sequence[TrainExample], fraction: float) -> tuple[list[TrainExample], list[TrainExample]]:
    """(kept, held out): examples whose query text hashes below ``fraction`` are held out, every row of a repeated
    query on the same side, so no held-out query was seen in training."""
    _check_fraction(fraction)
    kept, held = [], []
    for e in examples:
        (held if _holdout_unit(e.query) < fraction else kept).append(e)
    return kept, held


# ------------------------------------------------------------------------------------------------ weak pairs
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
# A text without capitals (Cranfield, MEDLINE) has no capital to start a sentence: any letter or digit does, after a
# word of two or more letters or digits, the mark attached or detached ("speeds . experiments", as tokenised
# collections write it), so "e.g. the" and "u.s. air" are not sentence ends.
_UNCASED_SENTENCE_END = re.compile(r"(?:(?<=[a-z0-9]{2}[.!?])|(?<=[a-z0-9]{2} [.!?]))\s+(?=[\"'(\[]?[a-z0-9])")


def _split_first_sentence(text: str) -> tuple[str, str]:
    text = text.strip()
    pattern = _SENTENCE_END if any(c.isupper() for c in text) else _UNCASED_SENTENCE_END
    parts = pattern.split(text, maxsplit=1)
    return (parts[0].strip(), parts[1].strip()) if len(parts) == 2 else (text, "")


def seeded_subset(items: list, max_items: int | None, seed: int) -> list:
    """A seeded random subset of at most ``max_items``, in the original order (``--max-pairs``)."""
    if max_items is None or len(items) <= max_items:
        return items
    keep = np.sort(np.random.default_rng(seed).choice(len(items), max_items, replace=False))
    return [items[i] for i in keep]


def weak_pairs(corpus_or_dir: str | os.PathLike | Sequence[Document], mode: str = "title",
               max_pairs: int | None = None, seed: int = 0, min_chars: int = 20,
               name: str | None = None) -> list[TrainExample]:
    """GTE's first-stage weak pairs from any corpus; no hard negatives (in-batch only).

    ``"title"``: query = title, positive = text (documents without a title are skipped). ``"first-sentence"``:
    query = the first sentence of the text, positive = the rest. Pairs whose positive is shorter than
    ``min_chars`` are skipped. ``max_pairs`` keeps a seeded random subset, in corpus order. ``task`` is
    ``weak-<name>`` (by default the directory's name, or the file's stem).
    """
    if mode not in ("title", "first-sentence"):
        raise ValueError(f"unknown mode {mode!r}: choose 'title' or 'first-sentence'")
    if isinstance(corpus_or_dir, (str, os.PathLike)):
        p = Path(corpus_or_dir).resolve()
        if name is None:  # a BEIR directory or its corpus.jsonl: the directory's name; else the file's stem
            name = p.name if p.is_dir() else p.parent.name if _stem(p) == "corpus" else _stem(p)
        beir_dir = p if p.is_dir() else p.parent
        judged = [f.name for f in sorted((beir_dir / "qrels").glob("*.tsv*")) if _names_test(_stem(f))] \
            if (beir_dir / "qrels").is_dir() else []
        if judged:
            logger.warning("%s is judged for evaluation (qrels/%s): weak pairs from its documents put the evaluation "
                           "corpus into training, and its scores then prove nothing", beir_dir, judged[0])
        docs = load_corpus(corpus_or_dir)
    else:
        docs, name = list(corpus_or_dir), name or "corpus"
    pairs = []
    skipped = {"no title" if mode == "title" else "no sentence end": 0, f"text under {min_chars} characters": 0,
               "query same as text": 0}
    for d in docs:
        if mode == "title":
            query, positive = d.title.strip(), d.text.strip()
        else:
            query, positive = _split_first_sentence(d.text)
        if not query or (mode != "title" and not positive):
            skipped["no title" if mode == "title" else "no sentence end"] += 1
        elif len(positive) < min_chars:
            skipped[f"text under {min_chars} characters"] += 1
        elif query == positive:
            skipped["query same as text"] += 1
        else:
            pairs.append((query, positive))
    if sum(skipped.values()):
        logger.warning("weak pairs (%s) from %d of %d documents; skipped: %s", mode, len(pairs), len(docs),
                       ", ".join(f"{n} {why}" for why, n in skipped.items() if n))
    return [TrainExample(q, p, task=f"weak-{name}") for q, p in seeded_subset(pairs, max_pairs, seed)]


# ------------------------------------------------------------------------------------------------ STS, shared
def sts_pairs(tsv_gz_path: str | os.PathLike, split: str = "train",
              min_score: float | None = None, task: str | None = None) -> list[TrainExample]:
    """Scored sentence pairs of one split of an STS TSV (read by ``lens.corpus.read_sts``).

    The raw score is kept with ``max_score`` 5 (STS-B is 0-5, SICK-R 1-5): a graded loss turns it into a target
    (``bce-graded``: ``graded_floor + (1 - graded_floor) * score / 5``), while a contrastive one takes every pair as a
    positive (the trainer warns of pairs under half the scale); ``min_score`` drops pairs below it, and a pair with a blank sentence is
    dropped (both counted in a warning). ``task`` (default ``sts``, the name a config's ``instructions`` and
    ``paper-mistral-7b.json`` use) names the examples; give STS-B and SICK-R their own to batch them apart.
    """
    refuse_test(split)
    pairs = read_sts(tsv_gz_path, split)
    task = task or "sts"
    out, low, blank = [], 0, 0
    for s1, s2, score, line in zip(pairs.sentence1, pairs.sentence2, pairs.scores, pairs.lines):
        if not 0 <= score <= STS_MAX_SCORE:
            raise ValueError(f"{tsv_gz_path}:{line}: score {score} is outside [0, {STS_MAX_SCORE}]; the STS "
                             "training pairs are scored on 0-5 (STS-B) or 1-5 (SICK-R)")
        if min_score is not None and score < min_score:
            low += 1
        elif not (s1.strip() and s2.strip()):
            blank += 1
        else:
            out.append(TrainExample(s1, s2, score=score, max_score=STS_MAX_SCORE, task=task))
    if low or blank:
        logger.warning("%s: %d of %d pairs of split %r kept; %d scored under --min-score %s, %d with a blank sentence",
                       tsv_gz_path, len(out), len(pairs), split, low, min_score, blank)
    if not out:
        raise ValueError(f"{tsv_gz_path}: no usable pairs in split {split!r}")
    return out


def shared_pairs(path: str | os.PathLike, *, instruction: str | None = None, max_pairs: int | None = None,
                 seed: int = 0, holdout: float = 0.0) -> list[TrainExample]:
    """Pairs of a shared training set (``query``, ``positive``, optional single ``negative``); task = its directory.

    ``instruction`` is stored with every example; ``max_pairs`` keeps a seeded random subset (per-task sampling
    of a mixture), in file order. Extra fields (``source_row``, ids) are ignored. ``holdout`` leaves that fraction
    of the queries out before sampling (``split_holdout``), as ``beir_pairs`` does, to judge training on unseen
    queries. Always a list, with or without ``holdout``; ``shared_pairs_split`` also gives the held-out examples.

    ``path`` is a .jsonl[.gz] file or a set's directory (its pairs.jsonl.gz, else train.jsonl.gz). Rows with the
    same query and positive merge (their negatives pooled); a negative that is a positive of the same query is
    dropped. WikiQA's several positives per question stay separate examples; ``task_batches`` keeps them apart.
    """
    return shared_pairs_split(path, instruction=instruction, max_pairs=max_pairs, seed=seed, holdout=holdout)[0]


def shared_pairs_split(path: str | os.PathLike, *, instruction: str | None = None, max_pairs: int | None = None,
                       seed: int = 0, holdout: float = 0.0) -> tuple[list[TrainExample], list[TrainExample]]:
    """(kept, held out) of ``shared_pairs`` from one read of the file: ``kept`` is what ``shared_pairs`` returns,
    ``held out`` every example of the held-out queries (never sampled; empty without ``holdout``)."""
    p = pairs_file(path)
    task = p.resolve().parent.name
    merged: dict[tuple[str, str], list[str]] = {}
    positives: dict[str, set[str]] = {}
    for q, pos, neg in _pair_rows(p):
        negs = merged.setdefault((q, pos), [])
        if neg and neg.strip() and neg not in negs:
            negs.append(neg)
        positives.setdefault(q, set()).add(pos)
    out = [TrainExample(q, pos, [x for x in negs if x not in positives[q]], task=task, instruction=instruction)
           for (q, pos), negs in merged.items()]
    kept, held = split_holdout(out, holdout) if holdout else (out, [])
    return seeded_subset(kept, max_pairs, seed), held


def shared_texts(path: str | os.PathLike) -> Iterator[str]:
    """Every text (query, positive, negative) of a shared set's file (``pairs_file``; never a test split)."""
    for row in _pair_rows(pairs_file(path)):
        yield from (t for t in row if t is not None)


def _pair_rows(p: Path) -> Iterator[tuple[str, str, str | None]]:
    """(query, positive, negative or None) of each row of a shared set's file, as written; checked: non-empty
    ``query`` and ``positive`` strings, an optional string ``negative``. Other fields are ignored."""
    for n, obj in iter_json_lines(p):
        q, pos, neg = (obj.get(k) if isinstance(obj, dict) else None for k in ("query", "positive", "negative"))
        if not (isinstance(q, str) and q.strip() and isinstance(pos, str) and pos.strip()):
            raise ValueError(f"{p}:{n}: expected an object with non-empty 'query' and 'positive' strings")
        if neg is not None and not isinstance(neg, str):
            raise ValueError(f"{p}:{n}: 'negative' must be a string")
        yield q, pos, neg


# ------------------------------------------------------------------------------------------------ label documents
# Shared sets of NLI triplets (premise, entailed hypothesis, contradicting hypothesis) -> the task whose label
# documents (lens.ateb.LABEL_DOCUMENTS) name their labels: SNLI's labels are e-SNLI's.
NLI_TRIPLET_SETS = {"snli-cad": "esnli"}


def pairs_file(path: str | os.PathLike) -> Path:
    """A shared set's file: ``path`` itself, or a directory's pairs.jsonl[.gz], else train.jsonl[.gz]; never test."""
    p = Path(path)
    if p.is_dir():
        files = [p / n for n in ("pairs.jsonl.gz", "pairs.jsonl", "train.jsonl.gz", "train.jsonl") if (p / n).is_file()]
        if not files:
            raise FileNotFoundError(f"{p} has no pairs.jsonl[.gz] or train.jsonl[.gz]")
        p = files[0]
    if _names_test(_stem(p)):
        raise ValueError(f"{p}: refusing a test split (its name says test): never train on a test split")
    return p


def _label_groups(edges: Sequence[tuple[str, str | None]]) -> dict[str, str]:
    """Label -> a representative of its group: labels joined by a (positive, given negative) row belong together.
    The shared sets draw a row's negative from the labels of the same (sub)task, so the groups are the subtasks
    (TweetEval's emotion, hate, irony, ... stay apart)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for pos, neg in edges:
        a = find(pos)
        if neg is not None:
            b = find(neg)
            if a != b:
                parent[max(a, b)] = min(a, b)
    return {label: find(label) for label in parent}


def label_ids(labels: Sequence[str], groups: Mapping[str, str] | None = None) -> dict[str, str]:
    """A short unique id per label description: within a group of labels, the leading words they all share are
    dropped ("Banking customer query about: card arrival" -> "card-arrival"), the rest slugged
    (``lens.ateb.label_slug``); a clash gets "-2", "-3", ... in sorted order."""
    from lens.ateb import label_slug

    groups = groups or {label: "" for label in labels}
    members: dict[str, list[str]] = {}
    for label in sorted(set(labels)):
        members.setdefault(groups[label], []).append(label)
    ids, taken = {}, set()
    for group in sorted(members):
        names = members[group]
        words = [n.split() for n in names]
        shared = 0
        if len(names) > 1:
            while all(len(w) > shared + 1 and w[shared] == words[0][shared] for w in words):
                shared += 1
        for name, w in zip(names, words):
            rest = " ".join(w[shared:])
            base = label_slug(rest if re.search(r"[A-Za-z0-9]", rest) else name)
            uid, k = base, 1
            while uid in taken:
                k += 1
                uid = f"{base}-{k}"
            taken.add(uid)
            ids[name] = uid
    return ids


def _pick_labels(options: Sequence[str], n: int, first: str | None, rng: np.random.Generator) -> list[str]:
    """``first`` (the row's given negative) if it is an option, then options drawn with ``rng``, ``n`` in all."""
    picked = [first] if first in options else []
    rest = [o for o in options if o != first]
    picked += [rest[i] for i in rng.permutation(len(rest))]
    return picked[:n]


def label_pairs(path: str | os.PathLike, task: str | None = None, *, num_negatives: int = 3, seed: int = 0,
                instruction: str | None = None, nli: str | None = None) -> list[TrainExample]:
    """Classification as retrieval of label documents (ATEB's label augmentation), for training.

    A label-description set (tweeteval, clinc150, banking77, trec-qc: ``query`` -> ``positive`` = its label's
    description) gives one example per row whose positive is the label's document and whose negatives are
    ``num_negatives`` other labels of the same (sub)task (``_label_groups``): the row's given negative first,
    then others drawn with ``seed``; never a label that is a positive of the same query. A label document is
    written the ATEB way (``lens.ateb.compose_label_document``): label text + explanation + unique id
    ``[task:id]``. These sets' descriptions are already one-line explanations ("Question asking for a date (numeric
    value)"), so the description is the label text and stands for the explanation too (written once, not
    repeated); the id comes from it (``label_ids``).

    An NLI triplet set (``nli``: the task of its labels' documents, by default ``NLI_TRIPLET_SETS`` by directory,
    e.g. snli-cad -> esnli) gives per row the premise + entailed hypothesis (``lens.ateb.nli_text``) -> the
    entailment document and, when the row has a negative, premise + contradiction -> the contradiction document;
    the negatives are that task's other label documents. ``task`` (default: the directory's name) names the
    examples and the ids.
    """
    from lens.ateb import compose_label_document, label_document, label_documents, nli_text

    if num_negatives < 0:
        raise ValueError(f"num_negatives must be >= 0, got {num_negatives}")
    p = pairs_file(path)
    task = task or p.resolve().parent.name
    nli = nli if nli is not None else NLI_TRIPLET_SETS.get(task)
    rows = [(q, pos.strip(), neg.strip() if neg and neg.strip() else None) for q, pos, neg in _pair_rows(p)]
    if not rows:
        raise ValueError(f"{p} holds no rows")

    out = []
    if nli:
        docs = label_documents(nli)  # raises for a task without label documents, naming those with them
        for needed in ("entailment", "contradiction"):
            if needed not in docs:
                raise ValueError(f"--nli {nli!r}: its labels {list(docs)} have no {needed!r}")
        for i, (premise, entailed, contradicting) in enumerate(rows):
            rng = np.random.default_rng([seed, i])
            for hypothesis, label in ((entailed, "entailment"), (contradicting, "contradiction")):
                if hypothesis is None:
                    continue
                others = _pick_labels([x for x in docs if x != label], num_negatives, None, rng)
                out.append(TrainExample(nli_text(premise, hypothesis), label_document(nli, label),
                                        [docs[x] for x in others], task=task, instruction=instruction))
        return out

    groups = _label_groups([(pos, neg) for _, pos, neg in rows])
    ids = label_ids(list(groups), groups)
    docs = {label: compose_label_document(label, "", f"{task}:{ids[label]}") for label in groups}
    by_group: dict[str, list[str]] = {}
    for label in sorted(groups):
        by_group.setdefault(groups[label], []).append(label)
    positives: dict[str, set[str]] = {}
    for q, pos, _ in rows:
        positives.setdefault(q, set()).add(pos)
    for i, (q, pos, neg) in enumerate(rows):
        rng = np.random.default_rng([seed, i])
        options = [x for x in by_group[groups[pos]] if x not in positives[q]]
        negatives = _pick_labels(options, num_negatives, neg, rng) if num_negatives else []
        out.append(TrainExample(q, docs[pos], [docs[x] for x in negatives], task=task, instruction=instruction))
    if num_negatives and any(len(by_group[g]) <= num_negatives for g in set(groups.values())):
        logger.info("%s: some label groups have %d or fewer other labels; their examples get fewer negatives",
                    task, num_negatives)
    return out


# ------------------------------------------------------------------------------------------------ batching
def _fill_batches(indices: list[int], examples: Sequence[TrainExample], batch_size: int) -> list[list[int]]:
    """Greedy: each batch takes the next examples whose query and positive are new to it; clashing ones wait for
    the next batch. When only clashing examples are left a batch closes short."""
    batches, pending = [], list(indices)
    while pending:
        batch, queries, positives, later = [], set(), set(), []
        for pos, i in enumerate(pending):
            if len(batch) == batch_size:
                later.extend(pending[pos:])
                break
            e = examples[i]
            if e.query in queries or e.positive in positives:
                later.append(i)
                continue
            batch.append(i)
            queries.add(e.query)
            positives.add(e.positive)
        batches.append(batch)
        pending = later
    return batches


def sample_examples(examples: Sequence[TrainExample], seed: int, max_per_task: int | None = None,
                    max_examples: int | None = None) -> list[TrainExample]:
    """A seeded subset in file order: at most ``max_per_task`` examples of each task (so a mixture's small tasks
    are not drowned by its large ones), then at most ``max_examples`` in all."""
    rng = np.random.default_rng(seed)
    keep = np.arange(len(examples))
    if max_per_task is not None:
        by_task: dict[str, list[int]] = {}
        for i, e in enumerate(examples):
            by_task.setdefault(e.task, []).append(i)
        keep = np.sort(np.concatenate([rng.permutation(idx)[:max_per_task] for _, idx in sorted(by_task.items())]))
    if max_examples is not None and max_examples < len(keep):
        keep = np.sort(rng.permutation(keep)[:max_examples])
    return [examples[int(i)] for i in keep]


def task_batches(examples: Sequence[TrainExample], batch_size: int, seed: int,
                 drop_last: bool = False) -> list[list[int]]:
    """Example indices in batches of one task each (the paper draws each batch from one task), order shuffled
    with ``seed``. Within a batch no two examples share a query or a positive text where that can be avoided:
    they would be false in-batch negatives. ``drop_last`` drops every batch shorter than ``batch_size``."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    rng = np.random.default_rng(seed)
    by_task: dict[str, list[int]] = {}
    for i, e in enumerate(examples):
        by_task.setdefault(e.task, []).append(i)
    batches = []
    for task in sorted(by_task):
        order = [by_task[task][j] for j in rng.permutation(len(by_task[task]))]
        batches += _fill_batches(order, examples, batch_size)
    if drop_last:
        batches = [b for b in batches if len(b) == batch_size]
    return [batches[j] for j in rng.permutation(len(batches))]


@dataclass
class Step:
    """One planned optimiser step: its stage and the example indices of its batch."""

    stage: int
    batch: list[int]


def _training_batches(examples: Sequence[TrainExample], batch_size: int, seed: int, stage: str) -> list[list[int]]:
    """One epoch's batches that train (``task_batches`` with ``seed``): those of 2 or more examples, since a batch
    of one has no in-batch negative."""
    found = [b for b in task_batches(examples, batch_size, seed) if len(b) >= 2]
    if not found:
        raise ValueError(
            f"stage {stage!r}: no batch of 2 or more examples can be formed, because its examples share their query "
            "or positive text (a batch never holds two of the same, they would be false negatives); give the stage "
            "examples with distinct queries and positives")
    return found


def plan_steps(config, data: list[list[TrainExample]]) -> list[Step]:
    """Every step of every stage, fixed by the seed, so a resumed run takes the same batches."""
    plan: list[Step] = []
    for si, (stage, examples) in enumerate(zip(config.stages, data)):
        bs = stage.batch_size or config.batch_size
        if bs < 2:
            raise ValueError(f"stage {stage.name!r}: batch size {bs}; contrastive training needs batches of 2 or more "
                             "(each example's in-batch negatives are the others' positives)")
        if len(examples) < 2:
            raise ValueError(f"stage {stage.name!r} has {len(examples)} example(s); in-batch negatives need >= 2")
        if bs > len(examples):
            logger.warning("stage %r: batch size %d is larger than its %d examples; its batches hold %d at most",
                           stage.name, bs, len(examples), len(examples))
        alone = sorted(t for t, n in Counter(e.task for e in examples).items() if n == 1)
        if alone:  # a batch holds one task, and a batch of one has no in-batch negative: never trained on
            logger.warning("stage %r: %d task(s) with a single example are never trained on (a batch holds one task "
                           "and needs 2 examples): %s", stage.name, len(alone), ", ".join(alone[:5]))
        seed = config.seed + 1000 * si
        batches = _training_batches(examples, bs, seed, stage.name)  # an epoch: its batches that train, each once
        total = stage.steps if stage.steps is not None else max(1, math.ceil(stage.epochs * len(batches)))
        epoch = 1
        while len(batches) < total:
            batches += _training_batches(examples, bs, seed + epoch, stage.name)
            epoch += 1
        plan += [Step(si, b) for b in batches[:total]]
    return plan
