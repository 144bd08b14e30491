"""The paper's ablations, each one command, evaluating ``lens-lexicon`` variants on one dataset (default SciFact).

``clusters``           number of clusters k = 2000 / 4000 / 8000 / the unclustered vocabulary (the paper's
                       Figure 3). Each k's model directory is made by ``lens.vocab.cluster_vocab`` (compact, seed 0)
                       from the backbone of ``--model`` and kept under ``<cache>/models/``.
``attention-pooling``  attention causal / bidirectional x pooling max / sum / last (the paper's Table 5), through
                       ``LensEncoder.from_pretrained(model, attention=..., pooling=...)``.

Results use the runner's format, in ``<output>/<dataset>-ablation-clusters/`` and
``<output>/<dataset>-ablation-attention-pooling/``; systems are named ``lens-lexicon-k2000``,
``lens-lexicon-causal-max``, ... Document vectors go through the same embedding cache as ``lens bench beir``.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["ABLATIONS", "CLUSTER_COUNTS", "add_arguments", "cluster_model", "run"]

ABLATIONS = ("clusters", "attention-pooling")
CLUSTER_COUNTS = ("2000", "4000", "8000", "vocab")


def _cluster_list(value: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    for v in items:
        if v != "vocab" and not (v.isdigit() and int(v) > 1):
            raise argparse.ArgumentTypeError(f"cluster counts are integers > 1 or 'vocab', got {v!r}")
    if not items:
        raise argparse.ArgumentTypeError("give at least one cluster count")
    return items


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    from lens.cmdline import positive_int
    from lens.eval.beir import DATA_DIR_HELP, add_data_argument, add_run_location_arguments, add_thread_arguments
    from lens.eval.report import add_result_overwrite_argument

    parser.add_argument("ablation", choices=ABLATIONS, help="which ablation to run")
    parser.add_argument("--dataset", default="scifact",
                        help="BEIR directory or set name (default scifact): " + DATA_DIR_HELP)
    add_data_argument(parser)
    parser.add_argument("--split", default="test", help="the qrels split to judge on (default test)")
    parser.add_argument("--model", default="default",
                        help="the LENS model whose backbone (clusters) or directory (attention-pooling) is ablated")
    parser.add_argument("--clusters", type=_cluster_list, default=list(CLUSTER_COUNTS),
                        help="cluster counts for the clusters ablation (default 2000,4000,8000,vocab)")
    parser.add_argument("--instruction", default=None, help="override the dataset's query instruction")
    add_run_location_arguments(parser, "embedding and clustering cache", "hits retrieved per query")
    parser.add_argument("--lens-batch-size", type=positive_int, default=4,
                        help="LENS documents per forward pass (default 4)")
    parser.add_argument("--max-docs", type=positive_int, default=None,
                        help="SMOKE TESTS ONLY: keep at most this many documents (judged ones first)")
    parser.add_argument("--max-queries", "--queries", dest="max_queries", type=positive_int, default=None,
                        help="SMOKE TESTS ONLY: keep the first N queries")
    parser.add_argument("--no-plot", action="store_true", help="skip ndcg.png")
    add_result_overwrite_argument(
        parser, "replace the ablation's earlier run in the results root (refused without it)")
    add_thread_arguments(parser)
    return parser


def cluster_model(model: str, k: str, cache_dir: Path) -> Path:
    """A LENS directory clustering ``model``'s backbone into ``k`` clusters ('vocab' = none), made once by
    ``lens.vocab.cluster_vocab`` (compact, seed 0) under ``<cache_dir>/models/``."""
    from lens.model_dir import read_model_dir
    from lens.vocab import cluster_vocab

    config = read_model_dir(model).config
    out = Path(cache_dir) / "models" / f"{config.clustering.lm_head_sha256[:16]}-k{k}"
    if not (out / "config.json").is_file():
        logger.info("creating %s (backbone %s, k=%s)", out, config.backbone, k)
        cluster_vocab(out, config.backbone, k if k == "vocab" else int(k), compact=True)
    return out


def variants(args, cache_dir: Path, instruction: str):
    from lens.eval.systems import LensLexicon, LensResource

    def resource(model, **kw):
        return LensResource(model, cache_root=cache_dir, batch_size=args.lens_batch_size, **kw)

    if args.ablation == "clusters":
        return [LensLexicon(resource(str(cluster_model(args.model, k, cache_dir))), instruction,
                            name=f"lens-lexicon-{'vocab' if k == 'vocab' else 'k' + k}", own_resource=True)
                for k in args.clusters]
    from lens.attention import MODES
    from lens.pooling import POOLING

    # every attention mode x every pooling, from their registries
    return [LensLexicon(resource(args.model, attention=a, pooling=p), instruction, name=f"lens-lexicon-{a}-{p}",
                        own_resource=True)
            for a in MODES for p in POOLING]


def run(args: argparse.Namespace) -> int:
    from lens.eval import report
    from lens.cmdline import command_line
    from lens.eval.beir import (DEFAULT_CACHE_DIR, DEFAULT_OUTPUT_DIR, check_run_folders, data_dir, load_dataset,
                                resolve_dataset, run_dataset, summary_table)
    from lens.instructions import lookup

    command = getattr(args, "bench_command_line", None) or command_line()
    cache_dir = Path(args.cache_dir or DEFAULT_CACHE_DIR)
    out_root = Path(args.output_dir or DEFAULT_OUTPUT_DIR)
    path = resolve_dataset(args.dataset, args.data_dir)
    folder, = check_run_folders([path], args.split, bool(args.max_docs or args.max_queries), out_root,
                                args.overwrite, suffix=f"-ablation-{args.ablation}", data_root=data_dir(args.data_dir))
    report.check_readme_target(out_root)  # a user's README where ours would go: refused before any work
    report.require_bench_extras(plot=not args.no_plot)
    data = load_dataset(path, args.split, args.max_docs, args.max_queries)
    instruction = lookup(data.name, args.instruction)
    systems = variants(args, cache_dir, instruction.text)
    extra = {"instruction": instruction.text, "instruction_source": instruction.source, "cache_dir": str(cache_dir),
             "ablation": args.ablation, "reproduce": {"kind": "ablation"}}
    results = run_dataset(data, systems, depth=args.depth, out_dir=out_root / folder, command=command,
                          model=args.model, extra_info=extra, plot=not args.no_plot, release_each=True,
                          threads=args.threads, query_threads=args.query_threads, overwrite=args.overwrite)
    readme = report.write_readme(out_root)
    print(summary_table(results) + f"\n\nresults in {out_root / folder} (README: {readme})")
    return 0
