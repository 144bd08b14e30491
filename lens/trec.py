"""TREC run files: the one reader and writer of ``qid Q0 docid rank score tag`` lines.

A run file is what trec_eval, pytrec_eval, ranx and Pyserini exchange: for each query its ranked documents, one per
line, six whitespace-separated columns. LENS writes one from a saved index (``lens search --queries-file ... --run``)
and from each system of a benchmark (``lens bench beir --save-runs``), so its rankings can be judged and tested for
significance with the field's tools. Ranks are written 1, 2, ... in trec_eval's order (descending score, ties by
document id descending: ``lens.metrics.ranked``), so readers that re-sort by score (trec_eval does) and readers of
the rank column see the order that was judged; scores are written in full (Python's shortest round-trip form), so
a run read back scores exactly as it did when judged (rounded to 6 decimals, scores 1e-7 apart became ties that
trec_eval breaks by id: SciFact's BM25 nDCG@10 moved from 0.68630 to 0.68597).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Iterable, Mapping, Sequence

__all__ = ["read_run", "run_lines", "write_run"]

Ranking = Mapping[str, float] | Sequence[tuple[str, float]]


def _check_token(value: str, what: str, qid: str) -> str:
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise ValueError(f"query {qid!r}: a {what} in a TREC run must be a non-empty string without whitespace, "
                         f"got {value!r}")
    return value


def check_query_ids(qids: Iterable[str]) -> None:
    """Refuse (ValueError naming it) a query id a TREC run cannot hold (empty, or with whitespace): checked before
    any query is encoded, so that no search is lost to it."""
    for qid in qids:
        _check_token(qid, "query id", qid)


def run_lines(run: Mapping[str, Ranking], tag: str = "lens", depth: int | None = None) -> Iterable[str]:
    """The lines of a run (``{qid: {docid: score}}`` or ``{qid: [(docid, score), ...]}``), queries in the order
    given, each query's documents in trec_eval's order (``lens.metrics.ranked``), at most ``depth`` of them (None:
    all); a document listed twice for a query is refused (trec_eval refuses such a run)."""
    from lens.metrics import ranked

    _check_token(tag, "run tag", "-")
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 1):
        raise ValueError(f"depth must be a positive number of documents per query (or None: all), got {depth!r}")
    for qid, ranking in run.items():
        _check_token(qid, "query id", qid)
        pairs = list(ranking.items()) if isinstance(ranking, Mapping) else list(ranking)
        scores: dict[str, float] = {}
        for docid, score in pairs:
            _check_token(docid, "document id", qid)
            if not math.isfinite(float(score)):
                raise ValueError(f"query {qid!r}: document {docid!r} has score {score!r}; a run needs finite scores")
            if docid in scores:
                raise ValueError(f"query {qid!r}: document {docid!r} is listed twice; a run ranks a document once")
            scores[docid] = float(score)
        for rank, (docid, score) in enumerate(ranked(scores)[:depth], 1):
            yield f"{qid} Q0 {docid} {rank} {score!r} {tag}\n"


def write_run(path: str | os.PathLike, run: Mapping[str, Ranking], tag: str = "lens",
              depth: int | None = None) -> Path:
    """Write ``run`` as a TREC run file at ``path`` atomically (whole or not at all); returns the path."""
    from lens.atomic import atomic_write_bytes

    text = "".join(run_lines(run, tag, depth))  # every line checked before anything is written
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, text.encode("utf-8"))
    return path


def read_run(path: str | os.PathLike) -> dict[str, dict[str, float]]:
    """``{qid: {docid: score}}`` from a TREC run file (``.gz`` read as gzip); a malformed line, a non-finite score
    or a document listed twice for a query (trec_eval refuses such a run) is an error naming the file and line."""
    import gzip

    run: dict[str, dict[str, float]] = {}
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                fields = line.split()
                if not fields:
                    continue
                if len(fields) != 6:
                    raise ValueError(f"{path}:{n}: a TREC run line has 6 columns (qid Q0 docid rank score tag), got "
                                     f"{len(fields)}")
                qid, _, docid, _, score, _ = fields
                try:
                    value = float(score)
                except ValueError:
                    raise ValueError(f"{path}:{n}: score {score!r} is not a number") from None
                if not math.isfinite(value):
                    raise ValueError(f"{path}:{n}: score {score!r}; a run needs finite scores")
                ranking = run.setdefault(qid, {})
                if docid in ranking:
                    raise ValueError(f"{path}:{n}: document {docid!r} is listed twice for query {qid!r}; a run ranks "
                                     "a document once per query (trec_eval refuses the file)")
                ranking[docid] = value
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start}); a TREC run is a text file"
                         + ("" if str(path).endswith(".gz") else " (a gzipped run must end in .gz)")) from None
    except (gzip.BadGzipFile, EOFError) as e:
        raise ValueError(f"{path}: not a whole gzip file ({e}); a .gz run is read as gzip") from None
    return run
