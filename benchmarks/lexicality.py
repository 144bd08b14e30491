"""How much of a lexicon vector is exact match and how much expansion; same as `lens bench lexicality`.

    python benchmarks/lexicality.py --splade --threads 2      # the shipped default and SPLADE-tiny, three sets
    python benchmarks/lexicality.py cranfield --model train-out/my-model

Results go to benchmarks/results/lexicality.{json,md}; see --help.
"""

from __future__ import annotations

import sys

import _common  # noqa: F401 (this checkout on sys.path)

from lens.eval import script_main

if __name__ == "__main__":
    sys.exit(script_main("lens.eval.lexicality", __doc__.split("\n")[0]))
