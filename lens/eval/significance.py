"""Are the differences in a BEIR run's table real? Paired tests over its queries (``lens bench significance``).

``lens bench beir`` saves every system's value for every query (``<run>/<set>/per_query.json.gz``). For each pair
``A:B`` and set, this reports the mean of A and of B on the same queries, the difference, how many queries each
wins, and two-sided p-values of a paired t-test and a paired randomization test (``lens.metrics.paired_test``:
10,000 seeded sign flips). It reads the saved run and encodes nothing. The default pairs are issue 10's goals
(lexicon against BM25 and SPLADE-tiny, hybrid against both BM25+MiniLM fusions and mpnet). A side written
``SYSTEM@RUN`` is read from another run folder (the same set and queries, e.g. one model setting against another:
``lens-lexicon@results/ood/tagA/upper-queries:lens-lexicon@results/ood/tagB/upper-queries``). A ``lens bench ateb``
run is read the same way, a set named ``TASK/FORMULATION`` (``piqa/answer-pool``; ``lens.ateb.per_query_measures``:
accuracy, and nDCG@10 for an answer pool).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lens.cmdline import command_line, positive_int, seed_int
from lens.eval.report import (PER_QUERY_FILE, add_markdown_only_arguments, add_result_overwrite_argument,
                               check_benchmark_target, markdown_only, per_query_path, read_per_query, write_benchmark)
from lens.metrics import paired_test

GOALS = ("lens-lexicon:bm25", "lens-lexicon:splade-tiny", "lens-hybrid:bm25+minilm", "lens-hybrid:bm25+minilm-rrf",
         "lens-hybrid:mpnet")
ALPHA = 0.05


def pair_list(value: str) -> list[tuple[str, str]]:
    """``--pairs``: comma-separated ``A:B`` system pairs."""
    pairs = [tuple(p.split(":")) for p in value.split(",") if p.strip()]
    if not pairs or any(len(p) != 2 or not all(p) for p in pairs):
        raise argparse.ArgumentTypeError(f"--pairs takes comma-separated SYSTEM_A:SYSTEM_B such as "
                                         f"lens-lexicon:bm25; got {value!r}")
    return [(a.strip(), b.strip()) for a, b in pairs]


def compare(per_query: dict, a: str, b: str, measure: str, resamples: int, seed: int) -> dict:
    """The paired test of systems ``a`` and ``b`` on ``measure`` over the run's queries."""
    missing = [s for s in (a, b) if s not in per_query]
    if missing:
        raise ValueError(f"system(s) {missing} not in this run (it has {', '.join(sorted(per_query))})")
    if set(per_query[a]) != set(per_query[b]):
        raise ValueError(f"{a} and {b} were scored on different queries; rerun them in one `lens bench beir` run")
    queries = sorted(per_query[a])
    saved = set.intersection(*(set(v) for s in (a, b) for v in per_query[s].values())) if queries else set()
    if measure not in saved:
        raise ValueError(f"measure {measure!r} is not saved for every query; saved: {', '.join(sorted(saved))}")
    r = paired_test([per_query[a][q][measure] for q in queries], [per_query[b][q][measure] for q in queries],
                    resamples=resamples, seed=seed)
    return {"a": a, "b": b, **r.__dict__}


def verdict(row: dict, a: str = "A", b: str = "B") -> str:
    """A row in words: which system (``a``: the first, ``b``: the second) is ahead and whether both tests put the
    gap below ``ALPHA``."""
    if row["diff"] == 0:
        return "level"
    ahead = f"{a} ahead" if row["diff"] > 0 else f"{b} ahead"
    significant = row["p_ttest"] < ALPHA and row["p_randomization"] < ALPHA
    return f"{ahead}, {'significant' if significant else 'not significant'}"


def render(results: dict) -> list[str]:
    meta = results["_meta"]
    lines = ["# Paired significance tests on a benchmark run", "", "```bash", meta["command"], "```", "",
             f"Run: `{meta['run']}`; measure {meta['measure']}, over each set's queries. "
             f"p: two-sided, paired t-test and paired randomization test ({meta['resamples']:,} seeded sign flips; "
             "`lens.metrics.paired_test`). 'significant' means both p < "
             f"{ALPHA}. W / T / L: queries where A scores above / equal to / below B.", "",
             "| set | A | B | mean A | mean B | A - B | W / T / L | p (t-test) | p (randomization) | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, rows in results["sets"].items():
        for r in rows:
            lines.append(f"| {name} | {r['a']} | {r['b']} | {r['mean_a']:.4f} | {r['mean_b']:.4f} | {r['diff']:+.4f} | "
                         f"{r['wins']} / {r['ties']} / {r['losses']} | {r['p_ttest']:.3g} | "
                         f"{r['p_randomization']:.3g} | {verdict(r)} |")
    notes = meta.get("notes") or []
    return lines + (["", "Notes:", *[f"- {n}" for n in notes]] if notes else [])


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the options of ``lens bench significance`` (and ``benchmarks/significance.py``) to ``parser``."""
    parser.add_argument("--run", type=Path, default=Path("benchmarks/results/beir"),
                        help="a `lens bench beir` or `lens bench ateb` output folder (default benchmarks/results/beir)")
    parser.add_argument("--sets", default=None,
                        help="comma-separated set folders of the run (of an ATEB run: TASK/FORMULATION, such as "
                             "piqa/answer-pool; default: every set the run holds)")
    parser.add_argument("--pairs", type=pair_list, default=pair_list(",".join(GOALS)),
                        help=f"comma-separated A:B system pairs of the run (default {','.join(GOALS)}: each LENS "
                             "system against the baseline it should beat; a run without one of those systems needs "
                             "--pairs)")
    parser.add_argument("--measure", default="ndcg@10", help="a per-query measure of the run (default ndcg@10)")
    parser.add_argument("--resamples", type=positive_int, default=10_000, help="sign flips of the randomization test (default 10000)")
    parser.add_argument("--seed", type=seed_int, default=0, help="seed of the randomization test (default 0)")
    add_markdown_only_arguments(parser, output="benchmarks/results/significance")
    add_result_overwrite_argument(parser)
    return parser


def run_sets(run: Path) -> list[str]:
    """The sets ``run`` holds: each folder with a per-query file, an ATEB task's as one ``TASK/FORMULATION`` per
    formulation (its values carry ``ids`` and ``systems``)."""
    names = []
    for folder in sorted(p for p in run.iterdir() if p.is_dir()) if run.is_dir() else []:
        if not per_query_path(folder).is_file():
            continue
        saved = read_per_query(folder)
        if saved and all(isinstance(v, dict) and {"ids", "systems"} <= set(v) for v in saved.values()):
            names += [f"{folder.name}/{f}" for f in sorted(saved)]
        else:
            names.append(folder.name)
    return names


def read_set(run: Path, name: str) -> dict:
    """``{system: {query id: {measure: value}}}`` of set ``name`` of ``run``: a BEIR run's ``NAME/per_query.json.gz``,
    or, for ``TASK/FORMULATION``, that formulation of an ATEB run's ``TASK/per_query.json.gz``."""
    if per_query_path(run / name).is_file() or "/" not in name:
        return read_per_query(run / name)
    task, formulation = name.split("/", 1)
    from lens.ateb import per_query_measures

    path = per_query_path(run / task)
    saved = read_per_query(run / task, "ATEB per-query results", f"lens bench ateb --tasks {task}")
    if formulation not in saved:
        raise ValueError(f"{path} has no formulation {formulation!r}; it has: {', '.join(sorted(saved))}")
    block = saved[formulation]
    if len(set(block["ids"])) != len(block["ids"]):
        raise ValueError(f"{path}: {formulation} repeats query ids, so its queries cannot be paired")
    return {system: dict(zip(block["ids"], per_query_measures(values)))
            for system, values in block["systems"].items()}


def _sides(run: Path, name: str, sides: tuple[str, str]) -> dict:
    """``{side: its per-query values}`` of set ``name``: ``SYSTEM`` from ``run``, ``SYSTEM@OTHER_RUN`` from the
    other run's folder (each run's ``per_query.json.gz`` read once)."""
    runs: dict[Path, dict] = {}
    out = {}
    for side in sides:
        system, _, other = side.partition("@")
        folder = Path(other) if other else run
        if folder not in runs:
            runs[folder] = read_set(folder, name)
        if system not in runs[folder]:
            raise ValueError(f"system {system!r} not in {'this run' if folder == run else folder} (it has "
                             f"{', '.join(sorted(runs[folder]))}); give --pairs of those")
        out[side] = runs[folder][system]
    return out


def run(args: argparse.Namespace) -> int:
    if markdown_only(args, args.output, render):
        return 0
    check_benchmark_target(args.output, overwrite=args.overwrite)  # a user's file, or an earlier result: before work
    present = run_sets(args.run)
    names = [s for s in args.sets.split(",") if s] if args.sets is not None else present
    if not names:
        raise FileNotFoundError(f"{args.run} holds no set with a {PER_QUERY_FILE}: give the --run of a "
                                "`lens bench beir` or `lens bench ateb` output folder")
    sets = {}
    for name in names:
        try:
            sets[name] = [compare(_sides(args.run, name, (a, b)), a, b, args.measure, args.resamples, args.seed)
                          for a, b in args.pairs]
        except FileNotFoundError as e:  # input errors: the CLI reports them in one line with status 2
            raise FileNotFoundError(f"{args.run / name}: {e}; this run holds: {', '.join(present) or 'no set'}") \
                from None
        except ValueError as e:
            raise ValueError(f"{args.run / name}: {e}") from None
    command = getattr(args, "bench_command_line", None) or command_line()
    results = {"_meta": {"command": command, "run": str(args.run), "measure": args.measure,
                         "resamples": args.resamples, "seed": args.seed, "notes": list(args.note)}, "sets": sets}
    print(write_benchmark(args.output, results, render(results), overwrite=args.overwrite))
    return 0
