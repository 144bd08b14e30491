"""BEIR-style benchmark of every system (bm25, minilm, fusions, LENS lexicon/dense/hybrid); same as `lens bench beir`.

    python benchmarks/beir.py scifact cranfield medline            # names under ../shared/data/{beir,classic}
    python benchmarks/beir.py ../shared/data/beir/scifact --systems bm25,minilm

Results go to benchmarks/results/beir/<dataset>/ and benchmarks/results/beir/README.md; see --help.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from lens.eval import script_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(script_main("lens.eval.beir", __doc__.split("\n")[0]))
