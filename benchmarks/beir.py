"""BEIR-style benchmark of every system (bm25, minilm, fusions, LENS lexicon/dense/hybrid); same as `lens bench beir`.

    python benchmarks/beir.py scifact cranfield medline            # names under ../shared/data/{beir,classic}
    python benchmarks/beir.py ../shared/data/beir/scifact --systems bm25,minilm

Results go to benchmarks/results/beir/<dataset>/ and benchmarks/results/beir/README.md; see --help.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from lens.bench.beir import add_arguments, run  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_arguments(parser)
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
