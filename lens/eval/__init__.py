"""Benchmark harness: BEIR-style retrieval evaluation of LENS against BM25 and MiniLM baselines.

Modules: ``instructions`` (per-dataset query instructions), ``cache`` (on-disk embedding cache), ``systems``
(the retrieval systems), ``report`` (result files), ``beir`` (the runner: ``add_arguments``/``run``),
``ablations`` (the paper's cluster-count and attention x pooling ablations). Metrics live in ``lens.metrics``.
"""

from __future__ import annotations


def script_main(module: str, description: str, argv: list[str] | None = None) -> int:
    """``main`` of a benchmark script: the module's ``add_arguments`` + ``-v``, logging set up (an earlier result
    of the script's own is replaced, as ``--overwrite`` does for ``lens bench``), then ``run``; bad
    input (a missing file, an output it would replace, a wrong value) is one line on stderr and status 2, as
    ``lens bench`` reports it (``-v``: the traceback)."""
    import argparse
    import importlib
    import logging
    import sys

    mod = importlib.import_module(module)
    parser = argparse.ArgumentParser(description=description, allow_abbrev=False)  # as `lens`: options in full
    mod.add_arguments(parser)
    # the repository's scripts rewrite their own committed results when rerun, as every benchmark script here does
    # (never a file they did not write); `lens bench` asks for --overwrite
    parser.set_defaults(overwrite=True)
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return mod.run(args)
    except (FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError, ValueError) as e:
        if args.verbose:
            raise
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 2
