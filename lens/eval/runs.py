"""Judge TREC run files against qrels, and test their differences (``lens bench runs``).

The other end of ``lens search --run`` and ``lens bench beir --save-runs``, and of any tool that writes the format
(Pyserini, ranx, a reranker): each run's mean of each measure over the qrels' queries (``lens.metrics.evaluate``:
pytrec_eval; a query the run does not answer scores 0, as ``trec_eval -c`` counts it -- trec_eval without ``-c``,
and BEIR's ``EvaluateRetrieval``, average over the answered queries only), and each run against a baseline (the first run unless ``--baseline``),
query by query, with the paired tests of ``lens bench significance`` (``lens.metrics.paired_test``). It encodes
nothing.

    lens bench runs lens.trec bm25.trec --qrels scifact            # a BEIR set by name, its test qrels
    lens bench runs runs/*.trec --qrels qrels.txt --measures ndcg@10,map,recall@1000 --json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path
from typing import Mapping, Sequence

from lens.cmdline import positive_int, seed_int

logger = logging.getLogger(__name__)

__all__ = ["add_arguments", "compare_runs", "load_qrels_arg", "run", "run_names"]


def _measures(value: str) -> tuple[str, ...]:
    from lens.metrics import MEASURES

    names = tuple(dict.fromkeys(m.strip().lower() for m in value.split(",") if m.strip()))
    unknown = [m for m in names if m not in MEASURES]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"unknown measure {unknown[0] if unknown else value!r}; "
                                         f"choose from {', '.join(MEASURES)}")
    return names


def load_qrels_arg(value: str | os.PathLike, split: str = "test",
                   data: str | os.PathLike | None = None) -> tuple[dict[str, dict[str, int]], Path]:
    """(qrels, the file read) from ``--qrels``: a qrels file (BEIR's TSV, or TREC's ``qid 0 docid grade``), or a BEIR
    directory or set name (``lens.eval.beir.resolve_dataset``), whose ``qrels/<split>.tsv`` is read."""
    from lens.corpus import load_qrels
    from lens.eval.beir import resolve_dataset

    path = Path(value).expanduser()
    if not path.is_file():
        try:
            path = resolve_dataset(value, data) / "qrels" / f"{split}.tsv"
        except FileNotFoundError as e:
            raise FileNotFoundError(f"--qrels {os.fspath(value)!r} is neither a qrels file nor a BEIR directory or "
                                    f"set name: {e}") from None
    qrels = load_qrels(path)
    if not qrels:
        raise ValueError(f"{path} holds no judgements")
    return qrels, path


def run_names(paths: Sequence[Path]) -> list[str]:
    """A short name per run file: its file name without ``.trec`` / ``.run`` / ``.txt``, or the path where two
    would share one."""
    stems = [p.name.removesuffix(".gz") for p in paths]
    stems = [s[: -len(ext)] if (ext := Path(s).suffix) in (".trec", ".run", ".txt", ".tsv") else s for s in stems]
    if len(set(stems)) == len(stems):
        return stems
    if len({os.fspath(p) for p in paths}) != len(paths):
        raise ValueError("the same run file is given twice")
    return [os.fspath(p) for p in paths]


def compare_runs(qrels: Mapping[str, Mapping[str, int]], runs: Mapping[str, Mapping[str, Mapping[str, float]]],
                 measures: Sequence[str], baseline: str, resamples: int = 10_000, seed: int = 0) -> dict:
    """Every run's mean of each measure over the qrels' queries (and how many of them it answers), and each other
    run against ``baseline`` on each measure, paired over the same queries."""
    from lens.metrics import evaluate, paired_test

    if baseline not in runs:
        raise ValueError(f"baseline {baseline!r} is not one of the runs ({', '.join(runs)})")
    scores, per_query = {}, {}
    for name, r in runs.items():
        answered = sum(1 for q in qrels if r.get(q))
        if not answered:
            raise ValueError(f"run {name} answers none of the qrels' {len(qrels)} queries (its query ids are like "
                             f"{next(iter(r), None)!r}, the qrels' like {next(iter(qrels))!r}): are these the "
                             "qrels of its queries (set, split)?")
        if answered < len(qrels):
            logger.warning("run %s answers %d of the qrels' %d queries; the others score 0", name, answered,
                           len(qrels))
        ev = evaluate(qrels, r, tuple(measures))
        scores[name] = {"queries_answered": answered, **ev.mean}
        per_query[name] = ev.per_query
    queries = sorted(qrels)
    tests = []
    if len(queries) >= 2:
        for name in runs:
            if name == baseline:
                continue
            for m in measures:
                t = paired_test([per_query[name][q][m] for q in queries], [per_query[baseline][q][m] for q in queries],
                                resamples=resamples, seed=seed)
                tests.append({"run": name, "baseline": baseline, "measure": m, **t.__dict__})
    return {"queries": len(queries), "measures": list(measures), "baseline": baseline, "runs": scores,
            "tests": tests}


def render(result: dict, qrels_path: str) -> list[str]:
    """The comparison as Markdown: a table of means, then the paired tests."""
    from lens.eval.significance import ALPHA, verdict

    measures = result["measures"]
    lines = [f"qrels: {qrels_path} ({result['queries']} queries); a query a run does not answer scores 0", "",
             "| run | answered | " + " | ".join(measures) + " |", "|---|---:|" + "---:|" * len(measures)]
    for name, row in result["runs"].items():
        mark = " (baseline)" if name == result["baseline"] and result["tests"] else ""
        lines.append(f"| {name}{mark} | {row['queries_answered']} | " +
                     " | ".join(f"{row[m]:.4f}" for m in measures) + " |")
    if result["tests"]:
        lines += ["", f"Paired over the {result['queries']} queries against {result['baseline']} (p: two-sided "
                  f"t-test / randomization; 'significant': both < {ALPHA}):", "",
                  "| run | measure | run - baseline | W / T / L | p (t-test) | p (randomization) | verdict |",
                  "|---|---|---:|---|---:|---:|---|"]
        for t in result["tests"]:
            lines.append(f"| {t['run']} | {t['measure']} | {t['diff']:+.4f} | {t['wins']} / {t['ties']} / "
                         f"{t['losses']} | {t['p_ttest']:.3g} | {t['p_randomization']:.3g} | "
                         f"{verdict(t, 'run', 'baseline')} |")
    return lines


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the options of ``lens bench runs`` to ``parser``."""
    from lens.eval.beir import DATA_DIR_ENV, DATA_DIR_HELP, DEFAULT_DATA_DIR
    from lens.metrics import DEFAULT_MEASURES, MEASURES

    parser.add_argument("runs", nargs="+", type=Path, help="TREC run files (qid Q0 docid rank score tag)")
    parser.add_argument("--qrels", required=True,
                        help="a qrels file (BEIR TSV, or TREC 'qid 0 docid grade'), or a BEIR directory or set name: "
                             + DATA_DIR_HELP)
    parser.add_argument("--split", default="test", help="the qrels split of a BEIR directory (default test)")
    parser.add_argument("--data-dir", default=None,
                        help=f"where set names are looked up (default: ${DATA_DIR_ENV}, else {DEFAULT_DATA_DIR} "
                             "relative to the current folder)")
    parser.add_argument("--measures", type=_measures, default=DEFAULT_MEASURES,
                        help=f"comma-separated, of {', '.join(MEASURES)} (default {','.join(DEFAULT_MEASURES)})")
    parser.add_argument("--baseline", default=None,
                        help="the run the others are tested against, by name or file (default: the first)")
    parser.add_argument("--resamples", type=positive_int, default=10_000, help="sign flips of the randomization test (default 10000)")
    parser.add_argument("--seed", type=seed_int, default=0, help="seed of the randomization test (default 0)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    return parser


def run(args: argparse.Namespace) -> int:
    from lens.trec import read_run

    qrels, qrels_path = load_qrels_arg(args.qrels, args.split, args.data_dir)
    names = run_names(args.runs)
    runs = {}
    for name, path in zip(names, args.runs):
        if not path.is_file():
            raise FileNotFoundError(f"run file not found: {path}")
        runs[name] = read_run(path)
    baseline = names[0]
    if args.baseline is not None:
        by_file = {os.fspath(p): n for p, n in zip(args.runs, names)}
        baseline = by_file.get(args.baseline, args.baseline)
    result = compare_runs(qrels, runs, args.measures, baseline, args.resamples, args.seed)
    if args.json:
        print(json.dumps({"qrels": os.fspath(qrels_path), **result}, indent=2))
    else:
        print("\n".join(render(result, os.fspath(qrels_path))))
    return 0
