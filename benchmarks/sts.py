"""STS Spearman (x100) of LENS (lexicon, its own dense vector) against all-MiniLM-L6-v2, in one run; the same as
`lens bench sts` (``lens.eval.sts_bench``).

    python benchmarks/sts.py --model default --sets stsbenchmark --threads 2

``--pairing symmetric`` (the default; MTEB's protocol) encodes both sentences as queries behind the STS instruction;
``asymmetric`` encodes sentence2 as a document (the protocol of the earlier results). Give both, comma-separated,
to compare them in one run. Results go to benchmarks/results/sts.{json,md} (``--out``); see --help.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from lens.eval import script_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(script_main("lens.eval.sts_bench", __doc__.split("\n")[0]))
