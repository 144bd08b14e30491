"""STS Spearman (x100) of LENS (lexicon, its own dense vector) against all-MiniLM-L6-v2, in one run; the same as
`lens bench sts` (``lens.eval.sts_bench``).

    python benchmarks/sts.py --model default --sets stsbenchmark --threads 2

``--pairing symmetric`` (the default; MTEB's protocol) encodes both sentences as queries behind the STS instruction;
``asymmetric`` encodes sentence2 as a document (the protocol of the earlier results). Give both, comma-separated,
to compare them in one run. Results go to benchmarks/results/sts.{json,md} (``--out``); see --help.
"""

from __future__ import annotations

import sys

import _common  # noqa: F401 (this checkout on sys.path)

from lens.eval import script_main

if __name__ == "__main__":
    sys.exit(script_main("lens.eval.sts_bench", __doc__.split("\n")[0]))
