"""Advanced tasks as retrieval (ATEB, Han et al.; RAR-b, Xiao et al.): reasoning, NLI / factuality and safety
preference sets read from their normalised schemas and posed as ranking a few candidate texts per query.

Every formulation gives a ``RankingTask``: queries, the distinct candidate texts (``documents``), per query the
rows of ``documents`` to rank, and the gold row. An embedder answers by scoring each query against its candidates
(``lens.eval.ateb`` runs the systems); ``task_metrics`` scores those answers and ``random_baseline`` gives chance
beside them (``lens.metrics``).

=========================== ==================================================================================
``multiple_choice``         the row's own choices (PIQA: goal -> 2 solutions; WinoGrande: sentence -> 2 options)
``answer_pool``             RAR-b's full setting: every distinct choice of the whole set is a candidate of every
                            query; one is the row's correct answer
``classification``          ATEB: the candidates are the task's label documents (label text, a one-sentence
                            explanation, a unique id: label augmentation); NLI pairs are one query text
                            (``NLI_TEMPLATE``)
``preference``              the prompt ranks [chosen, rejected]
``pair_classification``     premise -> its one hypothesis (a document, no instruction); gold is 1 when the label is
                            the positive one; scored by the cosine's average precision over all pairs (no threshold);
                            not MTEB's PairClassification score (its max_ap over several similarities)
=========================== ==================================================================================

Rows are dicts of the normalised schemas (``SCHEMAS``) as ``read_rows`` returns them; the reformulations are pure.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from lens.corpus import read_jsonl
from lens.instructions import ATEB_INSTRUCTIONS, GENERIC_INSTRUCTION, ateb_instruction
from lens.metrics import (average_precision, choice_accuracy, choice_correct, gold_ranks, ndcg_at_10_of_rank,
                          pool_ndcg_at_10, random_average_precision, random_choice_accuracy, random_ndcg_at_10)


__all__ = [
    "KINDS", "LABEL_DOCUMENTS", "METRICS", "NLI_TEMPLATE", "SCHEMAS", "TASKS", "RankingTask", "TaskSpec",
    "answer_pool", "check_row", "classification", "compose_label_document", "formulate", "label_document",
    "label_documents", "label_slug", "load_rows", "multiple_choice", "nli_text", "pair_classification",
    "per_query_measures", "per_query_values", "preference", "random_baseline", "read_rows", "sample_rows",
    "task_metrics",
]

# the normalised schemas of ../shared/data/ateb (SOURCES.md) -> the fields a row must have
SCHEMAS: dict[str, str] = {
    "multiple-choice": "id, query, choices (list of str), label (int, 0-based index into choices)",
    "classification": "id, text or premise + hypothesis (or sentence1 + sentence2), label (str)",
    "preference": "id, prompt, chosen, rejected (str; a response may be empty)",
}
KINDS = ("multiple-choice", "answer-pool", "classification", "preference", "pair-classification")
# what each formulation is measured by (the first is its main measure); chance is ``random_baseline``
METRICS: dict[str, tuple[str, ...]] = {
    "multiple-choice": ("accuracy",),
    "answer-pool": ("ndcg@10", "accuracy"),
    "classification": ("accuracy",),
    "preference": ("accuracy",),
    "pair-classification": ("ap",),
}
# An NLI pair as one query text: both sentences, each named, so that an embedder sees which is which. The same
# template serves DialFact (premise = the evidence, hypothesis = the dialogue response).
NLI_TEMPLATE = "Premise: {premise}\nHypothesis: {hypothesis}"


# ------------------------------------------------------------------------------------------- the registry
@dataclass(frozen=True)
class TaskSpec:
    """A development set: its file under ``<data>/ateb``, its schema and formulations (the first is the main one)."""

    name: str
    file: str
    schema: str
    kinds: tuple[str, ...]
    positive: str | None = None  # pair classification: the label that makes a pair positive

    def instruction(self, kind: str | None = None) -> str:
        """The query instruction of a formulation (``lens.instructions.ATEB_INSTRUCTIONS``, the one owner)."""
        return ateb_instruction(self.name, kind or self.kinds[0])


TASKS: dict[str, TaskSpec] = {
    "piqa": TaskSpec("piqa", "piqa/validation.jsonl.gz", "multiple-choice", ("multiple-choice", "answer-pool")),
    "winogrande": TaskSpec("winogrande", "winogrande/validation.jsonl.gz", "multiple-choice",
                           ("multiple-choice", "answer-pool")),
    "esnli": TaskSpec("esnli", "esnli/validation.jsonl.gz", "classification",
                      ("classification", "pair-classification"), positive="entailment"),
    "dialfact": TaskSpec("dialfact", "dialfact/test_small.jsonl.gz", "classification",
                         ("classification", "pair-classification"), positive="SUPPORTS"),
    "hh_rlhf_harmless": TaskSpec("hh_rlhf_harmless", "hh_rlhf_harmless/test.jsonl.gz", "preference", ("preference",)),
}

# Label augmentation (ATEB): each label of a classification task becomes a document of its label text, a
# one-sentence explanation and a unique id. Our own wording; bump "version" when a text changes, since results
# and trained models depend on it. The keys are the label strings exactly as the data files hold them.
LABEL_DOCUMENTS: dict[str, dict] = {
    "esnli": {"version": 1, "labels": {
        "entailment": ("Entailment",
                       "If the premise is true, the hypothesis must be true as well: the premise implies it."),
        "neutral": ("Neutral",
                    "The premise neither implies the hypothesis nor rules it out: it could be true or false."),
        "contradiction": ("Contradiction",
                          "If the premise is true, the hypothesis cannot be true: the two describe incompatible "
                          "situations."),
    }},
    "dialfact": {"version": 1, "labels": {
        "SUPPORTS": ("Supported",
                     "The evidence confirms what the dialogue response claims."),
        "REFUTES": ("Refuted",
                    "The evidence shows that what the dialogue response claims is false."),
        "NOT ENOUGH INFO": ("Not enough information",
                            "The evidence neither confirms nor contradicts the dialogue response's claim."),
    }},
}


def label_slug(text: str) -> str:
    """A readable id from a label: lower-case ASCII words joined by '-' ("NOT ENOUGH INFO" -> "not-enough-info")."""
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    if not slug:
        raise ValueError(f"label {text!r} has no letters or digits to make an id from")
    return slug


def compose_label_document(text: str, explanation: str, uid: str) -> str:
    """The one rule for a label document: ``"<label text>: <explanation> [<uid>]"``; the explanation is left out
    when empty or equal to the text (a label description that already explains itself)."""
    body = text.strip()
    if explanation.strip() and explanation.strip() != body:
        body = f"{body}: {explanation.strip()}"
    return f"{body} [{uid}]"


def label_document(task: str, label: str) -> str:
    """The label document of ``label`` in ``task``: label text + explanation + ``[task:label-id]``."""
    labels = _labels(task)
    if label not in labels:
        raise ValueError(f"unknown label {label!r} of task {task!r}; its labels: {', '.join(map(repr, labels))}")
    text, explanation = labels[label]
    return compose_label_document(text, explanation, f"{task}:{label_slug(label)}")


def label_documents(task: str) -> dict[str, str]:
    """``{label: label document}`` of a task, in ``LABEL_DOCUMENTS`` order."""
    return {label: label_document(task, label) for label in _labels(task)}


def _labels(task: str) -> Mapping[str, tuple[str, str]]:
    if task not in LABEL_DOCUMENTS:
        raise ValueError(f"no label documents for task {task!r}; tasks with labels: {', '.join(LABEL_DOCUMENTS)}")
    return LABEL_DOCUMENTS[task]["labels"]


def nli_text(premise: str, hypothesis: str) -> str:
    """An NLI pair as one query text (``NLI_TEMPLATE``)."""
    return NLI_TEMPLATE.format(premise=premise, hypothesis=hypothesis)


# ------------------------------------------------------------------------------------------- reading
def _str(obj: dict, key: str, where: str, empty_ok: bool = False) -> str:
    v = obj.get(key)
    if not isinstance(v, str) or (not empty_ok and not v.strip()):
        what = "a string" if empty_ok else "a non-empty string"
        raise ValueError(f"{where}: {key!r} must be {what}, got {v!r:.60}")
    return v


def check_row(obj: object, schema: str, where: str = "row") -> dict:
    """A row of ``schema`` validated and reduced to its normalised fields (``id`` as a string; ``sentence1`` /
    ``sentence2`` renamed ``premise`` / ``hypothesis``). Errors start with ``where`` (e.g. ``file:line``)."""
    if schema not in SCHEMAS:
        raise ValueError(f"unknown schema {schema!r}; valid: {', '.join(SCHEMAS)}")
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    rid = obj.get("id")
    if isinstance(rid, bool) or not isinstance(rid, (str, int)) or not str(rid).strip():
        raise ValueError(f"{where}: a {schema} row needs an 'id' (string or integer); fields: {SCHEMAS[schema]}")
    out: dict = {"id": str(rid)}
    if schema == "multiple-choice":
        out["query"] = _str(obj, "query", where)
        choices, label = obj.get("choices"), obj.get("label")
        if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) for c in choices):
            raise ValueError(f"{where}: 'choices' must be a list of at least 2 strings, got {choices!r:.80}")
        if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < len(choices):
            raise ValueError(f"{where}: 'label' must be an integer index into the {len(choices)} choices, "
                             f"got {label!r}")
        out.update(choices=list(choices), label=label)
    elif schema == "classification":
        out["label"] = _str(obj, "label", where)
        pair = next(((a, b) for a, b in (("premise", "hypothesis"), ("sentence1", "sentence2"))
                     if a in obj or b in obj), None)
        if pair is not None:
            out["premise"], out["hypothesis"] = _str(obj, pair[0], where), _str(obj, pair[1], where)
        elif "text" in obj:
            out["text"] = _str(obj, "text", where)
        else:
            raise ValueError(f"{where}: a classification row needs 'text', or 'premise' and 'hypothesis' "
                             "(or 'sentence1' and 'sentence2')")
    else:
        out["prompt"] = _str(obj, "prompt", where)
        out["chosen"] = _str(obj, "chosen", where, empty_ok=True)
        out["rejected"] = _str(obj, "rejected", where, empty_ok=True)
    return out


def read_rows(path: str | os.PathLike, schema: str) -> list[dict]:
    """The rows of a JSONL(.gz) file of ``schema`` (``check_row``); duplicate ids and an empty file are errors."""
    rows, seen = [], {}
    for n, obj in read_jsonl(path):
        row = check_row(obj, schema, f"{path}:{n}")
        if row["id"] in seen:
            raise ValueError(f"{path}:{n}: id {row['id']!r} already appeared on line {seen[row['id']]}")
        seen[row["id"]] = n
        rows.append(row)
    if not rows:
        raise ValueError(f"{path} holds no rows")
    return rows


def load_rows(name: str, ateb_dir: str | os.PathLike) -> list[dict]:
    """The rows of the development set ``name`` (``TASKS``) under ``ateb_dir`` (the folder holding the sets)."""
    spec = _spec(name)
    path = Path(ateb_dir) / spec.file
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: task {name!r} expects {spec.file} under {ateb_dir}")
    return read_rows(path, spec.schema)


def sample_rows(rows: Sequence[dict], max_rows: int | None, seed: int = 0) -> list[dict]:
    """At most ``max_rows`` rows drawn with ``seed`` (the same ones every run), in file order."""
    if max_rows is None or max_rows >= len(rows):
        return list(rows)
    if max_rows < 1:
        raise ValueError(f"max_rows must be >= 1, got {max_rows}")
    keep = np.sort(np.random.default_rng(seed).choice(len(rows), max_rows, replace=False))
    return [rows[int(i)] for i in keep]


def _spec(name: str) -> TaskSpec:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid: {', '.join(TASKS)}")
    return TASKS[name]


# ------------------------------------------------------------------------------------------- the task
@dataclass
class RankingTask:
    """Queries, the distinct candidate texts, and per query the rows of ``documents`` it ranks and the gold row.

    For ``pair-classification`` each query has exactly one candidate and ``gold`` is its 0/1 label. Queries with
    equal candidate lists may share one list object (the answer pool): treat ``candidates`` as read-only."""

    name: str
    kind: str
    instruction: str
    queries: list[str]
    documents: list[str]
    candidates: list[list[int]]
    gold: list[int]
    ids: list[str] = field(default_factory=list)  # per query: the row id it came from

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown kind {self.kind!r}; valid: {', '.join(KINDS)}")
        n = len(self.queries)
        if not (len(self.candidates) == len(self.gold) == n) or (self.ids and len(self.ids) != n):
            raise ValueError(f"{self.name}: {n} queries but {len(self.candidates)} candidate lists, "
                             f"{len(self.gold)} gold entries and {len(self.ids)} ids")
        checked = None
        for i, (cands, g) in enumerate(zip(self.candidates, self.gold)):
            if cands is not checked:
                if not cands or min(cands) < 0 or max(cands) >= len(self.documents):
                    raise ValueError(f"{self.name}: query {i} has no candidates or one outside the "
                                     f"{len(self.documents)} documents")
                checked = cands
            if self.kind == "pair-classification":
                if len(cands) != 1 or g not in (0, 1):
                    raise ValueError(f"{self.name}: pair query {i} needs one candidate and a 0/1 gold label")
            elif g not in cands:
                raise ValueError(f"{self.name}: query {i}'s gold row {g} is not among its candidates")

    def __len__(self) -> int:
        return len(self.queries)

    def gold_positions(self) -> list[int]:
        """Per query, where the gold row sits in its candidate list (its first occurrence; pair tasks: 0)."""
        if self.kind == "pair-classification":
            return [0] * len(self)
        where: dict[int, dict[int, int]] = {}  # per distinct list object (a shared pool is indexed once)
        out = []
        for cands, g in zip(self.candidates, self.gold):
            index = where.get(id(cands))
            if index is None:
                index = where[id(cands)] = {}
                for pos, row in enumerate(cands):
                    index.setdefault(row, pos)
            out.append(index[g])
        return out


class _Pool:
    """Distinct texts in first-seen order; ``add`` gives a text's row."""

    def __init__(self):
        self.texts: list[str] = []
        self.rows: dict[str, int] = {}

    def add(self, text: str) -> int:
        if text not in self.rows:
            self.rows[text] = len(self.texts)
            self.texts.append(text)
        return self.rows[text]


def _checked(rows: Iterable[dict], schema: str) -> list[dict]:
    out = [check_row(r, schema, f"row {i} ({r.get('id', '?') if isinstance(r, dict) else '?'})")
           for i, r in enumerate(rows)]
    if not out:
        raise ValueError("no rows to reformulate")
    return out


def _instruction(name: str, kind: str, given: str | None) -> str:
    if given is not None:
        return given
    return ateb_instruction(name, kind) if name.lower() in ATEB_INSTRUCTIONS else GENERIC_INSTRUCTION


# ------------------------------------------------------------------------------------------- reformulations
def multiple_choice(rows: Iterable[dict], name: str = "multiple-choice", instruction: str | None = None) -> RankingTask:
    """Each row ranks its own choices; gold = the labelled choice.

    WinoGrande follows RAR-b: the query is the sentence with its blank ``_`` and the candidates are the bare
    options (two names or nouns). We keep it (rather than filling the blank, which would make each candidate the
    whole query with one word changed) so that numbers compare with RAR-b's and MTEB's WinoGrande, and so that
    the answer pool (``answer_pool``) stays a real test: a filled sentence repeats its query, so in a pool the two
    fills of a query's own sentence would win on word overlap alone. Identical choices of one row share a document
    row; they tie, and a tie counts as wrong (``lens.metrics.choice_accuracy``).
    ``instruction`` defaults to the task's (``lens.instructions``) when ``name`` is a known task.
    """
    rows = _checked(rows, "multiple-choice")
    pool = _Pool()
    candidates = [[pool.add(c) for c in r["choices"]] for r in rows]
    gold = [cands[r["label"]] for cands, r in zip(candidates, rows)]
    return RankingTask(name, "multiple-choice", _instruction(name, "multiple-choice", instruction),
                       [r["query"] for r in rows], pool.texts, candidates, gold, [r["id"] for r in rows])


def answer_pool(rows: Iterable[dict], name: str = "answer-pool", instruction: str | None = None) -> RankingTask:
    """RAR-b's full-set setting: every distinct choice of the whole set (right and wrong ones, deduplicated by
    exact text) is a candidate of every query; gold = the row's correct answer. Scored by nDCG@10 (one relevant).

    Wrong choices stay in the pool: they are the hardest candidates, written for that very query. WinoGrande is
    posed as in ``multiple_choice`` (bare options), so its pool is every option word of the set; an answer that is
    right for one row and wrong for another is one document, relevant where it is gold."""
    rows = _checked(rows, "multiple-choice")
    pool = _Pool()
    for r in rows:
        for c in r["choices"]:
            pool.add(c)
    everything = list(range(len(pool.texts)))  # one list shared by every query
    gold = [pool.rows[r["choices"][r["label"]]] for r in rows]
    return RankingTask(name, "answer-pool", _instruction(name, "answer-pool", instruction),
                       [r["query"] for r in rows], pool.texts, [everything] * len(rows), gold, [r["id"] for r in rows])


def _query_text(row: dict) -> str:
    return row["text"] if "text" in row else nli_text(row["premise"], row["hypothesis"])


def classification(rows: Iterable[dict], label_docs: Mapping[str, str], name: str = "classification",
                   instruction: str | None = None) -> RankingTask:
    """ATEB's classification as retrieval: every query ranks the task's label documents (``label_docs``: label ->
    document, e.g. ``label_documents("esnli")``); gold = its label's document. An NLI row's query is its premise
    and hypothesis in ``NLI_TEMPLATE`` (DialFact: the evidence as premise, the dialogue response as hypothesis)."""
    rows = _checked(rows, "classification")
    labels = list(label_docs)
    if len(labels) < 2:
        raise ValueError(f"classification needs at least 2 label documents, got {len(labels)}")
    docs = [label_docs[label] for label in labels]
    if len(set(docs)) != len(docs):
        raise ValueError("two labels share one label document: give each label its own text (and unique id)")
    gold = []
    for r in rows:
        if r["label"] not in label_docs:
            same = [label for label in labels if label.casefold() == str(r["label"]).casefold()]
            hint = f" (labels are case-sensitive: {same[0]!r}?)" if same else ""
            raise ValueError(f"row {r['id']!r}: label {r['label']!r} has no label document{hint}; labels: "
                             f"{', '.join(map(repr, labels))}")
        gold.append(labels.index(r["label"]))
    everything = list(range(len(docs)))
    return RankingTask(name, "classification", _instruction(name, "classification", instruction),
                       [_query_text(r) for r in rows], docs, [everything] * len(rows), gold, [r["id"] for r in rows])


def preference(rows: Iterable[dict], name: str = "preference", instruction: str | None = None) -> RankingTask:
    """The prompt (the conversation so far) ranks [chosen, rejected]; gold = chosen. An empty response is a
    document like any other (an all-zero vector for the LENS systems, so it ties or loses)."""
    rows = _checked(rows, "preference")
    pool = _Pool()
    candidates = [[pool.add(r["chosen"]), pool.add(r["rejected"])] for r in rows]
    return RankingTask(name, "preference", _instruction(name, "preference", instruction),
                       [r["prompt"] for r in rows], pool.texts, candidates, [c[0] for c in candidates],
                       [r["id"] for r in rows])


def pair_classification(rows: Iterable[dict], positive: str, name: str = "pair-classification",
                        instruction: str | None = None, drop: Sequence[str] = ()) -> RankingTask:
    """MTEB's pair classification: the query is the premise (sentence1), its one candidate the hypothesis
    (sentence2); gold = 1 when the row's label is ``positive`` (e.g. "entailment", "SUPPORTS"), else 0, so every
    other label is negative. Rows whose label is in ``drop`` are left out (MTEB's XNLI drops "neutral"; the
    registry keeps every row). Scored by average precision of the pair scores."""
    rows = [r for r in _checked(rows, "classification") if r["label"] not in set(drop)]
    if not rows:
        raise ValueError(f"no rows left after dropping the labels {list(drop)}")
    for r in rows:
        if "premise" not in r:
            raise ValueError(f"row {r['id']!r}: pair classification needs 'premise' and 'hypothesis' (or "
                             "'sentence1' and 'sentence2'), not 'text'")
    pool = _Pool()
    candidates = [[pool.add(r["hypothesis"])] for r in rows]
    gold = [int(r["label"] == positive) for r in rows]
    if not any(gold):
        raise ValueError(f"{name}: no row has the positive label {positive!r}, so average precision is undefined: "
                         "give rows of both labels (with --max-rows, more rows)")
    return RankingTask(name, "pair-classification", _instruction(name, "pair-classification", instruction),
                       [r["premise"] for r in rows], pool.texts, candidates, gold, [r["id"] for r in rows])


def formulate(name: str, kind: str, rows: Iterable[dict]) -> RankingTask:
    """The registered formulation ``kind`` of the development set ``name`` (``TASKS``), with its instruction."""
    spec = _spec(name)
    if kind not in spec.kinds:
        raise ValueError(f"task {name!r} has no {kind!r} formulation; it has: {', '.join(spec.kinds)}")
    instruction = spec.instruction(kind)
    if kind == "multiple-choice":
        return multiple_choice(rows, name, instruction)
    if kind == "answer-pool":
        return answer_pool(rows, name, instruction)
    if kind == "classification":
        return classification(rows, label_documents(name), name, instruction)
    if kind == "preference":
        return preference(rows, name, instruction)
    return pair_classification(rows, spec.positive, name, instruction)


# ------------------------------------------------------------------------------------------- scoring
def _check_scores(task: RankingTask, scores_per_query: Sequence[Sequence[float]]) -> None:
    if len(scores_per_query) != len(task):
        raise ValueError(f"{task.name}: {len(scores_per_query)} score lists for {len(task)} queries")
    for i, (s, c) in enumerate(zip(scores_per_query, task.candidates)):
        if len(s) != len(c):
            raise ValueError(f"{task.name}: query {i} has {len(c)} candidates but {len(s)} scores")


def task_metrics(task: RankingTask, scores_per_query: Sequence[Sequence[float]]) -> dict[str, float]:
    """The measures of ``METRICS[task.kind]`` from one score per candidate of each query. Pair classification:
    AP over every pair's score (NaN when no pair is positive)."""
    _check_scores(task, scores_per_query)
    if task.kind == "pair-classification":
        scores = [float(s[0]) for s in scores_per_query]
        return {"ap": average_precision(scores, task.gold) if any(task.gold) else float("nan")}
    gold = task.gold_positions()
    out = {"accuracy": choice_accuracy(scores_per_query, gold)}
    if task.kind == "answer-pool":
        out = {"ndcg@10": pool_ndcg_at_10(scores_per_query, gold), **out}
    return out


def per_query_values(task: RankingTask, scores_per_query: Sequence[Sequence[float]]) -> dict[str, list]:
    """Compact per-query outcomes to store: ``correct`` (0/1), the gold ``rank`` for a pool, the pair ``score``."""
    _check_scores(task, scores_per_query)
    if task.kind == "pair-classification":
        return {"score": [float(s[0]) for s in scores_per_query]}
    gold = task.gold_positions()
    if task.kind == "answer-pool":
        return {"rank": [int(r) for r in gold_ranks(scores_per_query, gold)]}
    return {"correct": [int(c) for c in choice_correct(scores_per_query, gold)]}


def per_query_measures(values: Mapping[str, Sequence]) -> list[dict[str, float]]:
    """Each query's measures from what ``per_query_values`` stored for it: ``rank`` gives nDCG@10 and accuracy (as
    ``pool_ndcg_at_10`` and ``choice_accuracy`` average them), ``correct`` accuracy. A pair's ``score`` has none
    (average precision is a measure of the whole list, not of one query), so ``ValueError``."""
    if "rank" in values:
        ranks = values["rank"]
        return [{"ndcg@10": float(n), "accuracy": float(r == 1)} for n, r in zip(ndcg_at_10_of_rank(ranks), ranks)]
    if "correct" in values:
        return [{"accuracy": float(c)} for c in values["correct"]]
    raise ValueError(f"no per-query measure in {sorted(values)}: pair classification's average precision is not "
                     "a mean over queries, so it has no paired test")


def random_baseline(task: RankingTask) -> dict[str, float]:
    """Chance on each measure of the task: accuracy = mean 1/candidates; nDCG@10 with one relevant among N,
    exactly; AP = the positive rate."""
    if task.kind == "pair-classification":
        return {"ap": random_average_precision(task.gold)}
    n = [len(c) for c in task.candidates]
    out = {"accuracy": random_choice_accuracy(n)}
    if task.kind == "answer-pool":
        out = {"ndcg@10": random_ndcg_at_10(n), **out}
    return out
