"""BEIR-style benchmark of every system (bm25, minilm, fusions, LENS lexicon/dense/hybrid); same as `lens bench beir`.

    python benchmarks/beir.py scifact cranfield medline            # names under ../shared/data/{beir,classic}
    python benchmarks/beir.py ../shared/data/beir/scifact --systems bm25,minilm

Results go to benchmarks/results/beir/<dataset>/ and benchmarks/results/beir/README.md; see --help.
"""

from __future__ import annotations

import sys

import _common  # noqa: F401 (this checkout on sys.path)

from lens.eval import script_main

if __name__ == "__main__":
    sys.exit(script_main("lens.eval.beir", __doc__.split("\n")[0]))
