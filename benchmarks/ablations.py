"""The paper's ablations on SciFact with the current LENS model, one command each (slow on CPU: ~25 min a variant).

    python benchmarks/ablations.py clusters              # k = 2000, 4000, 8000, unclustered vocabulary (Figure 3)
    python benchmarks/ablations.py attention-pooling     # causal/bidirectional x max/sum/last (Table 5)

Results go to benchmarks/results/beir/scifact-ablation-{clusters,attention-pooling}/; see --help.
--max-docs/--max-queries subsample for smoke tests only (written to a separate *-subsample folder).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from lens.bench.ablations import add_arguments, run  # noqa: E402


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
