"""Where a model's STS Spearman comes from, per stratum of pairs (captions, headlines, questions, the rest) and
split; the same as `lens bench sts --by-stratum` (``lens.eval.sts_bench``).

    python benchmarks/sts_breakdown.py --sets stsbenchmark,sick-r --splits dev,test --threads 2

STS-B's genre labels (captions, news, forums) are not in the shared file, so pairs are grouped by their shape
(``lens.eval.sts.pair_stratum``). LENS encodes both sentences as queries behind the STS instruction (MTEB's
protocol); MiniLM encodes them plainly; ``word overlap`` is the Jaccard overlap of the two sentences' words
(``lens.eval.sts.word_overlap``), the score of a model that matches words and nothing else. Results go to
benchmarks/results/sts_breakdown.{json,md}; see --help.
"""

from __future__ import annotations

import sys

from _common import RESULTS

from lens.eval import script_main


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    defaults = ["--by-stratum", "--splits", "dev,test", "--output", str(RESULTS / "sts_breakdown")]
    return script_main("lens.eval.sts_bench", __doc__.split("\n")[0], defaults + argv)


if __name__ == "__main__":
    sys.exit(main())
