"""The paper's ablations on SciFact with the current LENS model, one command each (slow on CPU: ~25 min a variant).

    python benchmarks/ablations.py clusters              # k = 2000, 4000, 8000, unclustered vocabulary (Figure 3)
    python benchmarks/ablations.py attention-pooling     # causal/bidirectional x max/sum/last (Table 5)

Results go to benchmarks/results/beir/scifact-ablation-{clusters,attention-pooling}/; see --help.
--max-docs/--max-queries subsample for smoke tests only (written to a separate *-subsample folder).
"""

from __future__ import annotations

import sys

import _common  # noqa: F401 (this checkout on sys.path)

from lens.eval import script_main

if __name__ == "__main__":
    sys.exit(script_main("lens.eval.ablations", __doc__.split("\n")[0]))
