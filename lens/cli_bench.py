"""`lens bench ...`: each benchmark is a ``lens.eval`` module with ``add_arguments(parser)`` and ``run(args)``
(those modules import their heavy code lazily); this module only wires them in as subcommands."""

from __future__ import annotations

import argparse
import importlib

# (subcommand, help, module): `lens bench --help` lists them in this order
BENCHMARKS: tuple[tuple[str, str, str], ...] = (
    ("beir", "BEIR-style evaluation of LENS against BM25, MiniLM and their fusions", "lens.eval.beir"),
    ("ateb", "advanced tasks as retrieval (ATEB / RAR-b development sets): reasoning, NLI, factuality, safety "
             "preference", "lens.eval.ateb"),
    ("ablation", "the paper's ablations on SciFact (clusters; attention x pooling)", "lens.eval.ablations"),
    ("significance", "paired t-test and randomization test between the systems of a saved `lens bench beir` run "
                     "(its per_query.json.gz; encodes nothing)", "lens.eval.significance"),
    ("runs", "judge TREC run files against qrels (nDCG@10, MAP, recall, ...) and test each against a baseline, "
             "query by query (encodes nothing)", "lens.eval.runs"),
    ("lexicality", "how much of a lexicon vector is exact match and how much expansion, and what each part "
                   "retrieves on its own", "lens.eval.lexicality"),
    ("sts", "STS Spearman of the lexicon and dense vectors against MiniLM, on STS-B, SICK-R or any "
            "sentence1/sentence2/score TSV; --by-stratum per group of pairs", "lens.eval.sts_bench"),
)


def _runner(module: str):
    """The command function of a benchmark module: its ``run(args)``, whose non-zero status becomes the exit code."""

    def func(args: argparse.Namespace) -> None:
        rc = importlib.import_module(module).run(args)
        if rc:
            raise SystemExit(rc)

    return func


def register(subparsers) -> None:
    """Add ``bench {beir,ateb,...}`` (``BENCHMARKS``) to ``lens``'s subcommands."""
    bench = subparsers.add_parser("bench", help="retrieval benchmarks").add_subparsers(dest="bench_command",
                                                                                      required=True)
    for name, help_text, module in BENCHMARKS:
        parser = bench.add_parser(name, help=help_text)
        importlib.import_module(module).add_arguments(parser)
        parser.set_defaults(func=_runner(module), command=f"bench {name}")
