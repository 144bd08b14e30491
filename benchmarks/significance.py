"""Paired significance tests between the systems of a saved BEIR run; same as `lens bench significance`.

    python benchmarks/significance.py                     # issue 10's goal pairs on benchmarks/results/beir
    python benchmarks/significance.py --pairs lens-hybrid:mpnet --sets scifact

Results go to benchmarks/results/significance.{json,md}; see --help.
"""

from __future__ import annotations

import sys

import _common  # noqa: F401 (this checkout on sys.path)

from lens.eval import script_main

if __name__ == "__main__":
    sys.exit(script_main("lens.eval.significance", __doc__.split("\n")[0]))
