"""``lens bench sts``: STS Spearman x 100 of a LENS model (lexicon, and its own dense vector) against
all-MiniLM-L6-v2 in one run, whole and, with ``--by-stratum``, per stratum of pairs.

A set is a name under ``<data dir>/sts`` (``stsbenchmark``, ``sick-r``: ``lens.eval.sts.STS_FILES``) or a path to a
TSV[.gz] with ``sentence1, sentence2, score, split`` columns, so any STS file can be judged offline. Each split is
judged apart. ``--pairing`` (``lens.eval.sts.PAIRINGS``) says how LENS encodes a pair: ``symmetric`` (MTEB's protocol:
both sentences as queries behind the instruction) or ``asymmetric`` (sentence2 as a document); each pairing is
encoded once and gives both the lexicon and the dense row. ``--by-stratum`` adds Spearman per stratum of pairs
(``lens.eval.sts.pair_stratum``: caption-like, headline-like, question, other) for the LENS lexicon of the first
pairing, MiniLM and plain word overlap.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path

from lens.cmdline import command_line, positive_int
from lens.eval.report import (add_markdown_only_arguments, add_result_overwrite_argument, check_benchmark_target,
                              markdown_only, write_benchmark)
from lens.eval.sts import PAIRINGS, STS_FILES, STS_INSTRUCTION

logger = logging.getLogger(__name__)

__all__ = ["add_arguments", "render", "resolve_sts_file", "run"]

OUTPUT = Path("benchmarks") / "results" / "sts"
STRATUM_SYSTEMS = ("lens-lexicon", "minilm", "word-overlap")


def resolve_sts_file(name: str, data: str | os.PathLike | None = None) -> Path:
    """An STS file: ``name`` itself when it is a file, else ``STS_FILES[name]`` under ``<data dir>/sts`` or under
    the data dir itself (so ``--data-dir`` may name the data root or its ``sts`` directory)."""
    from lens.eval.beir import data_dir

    path = Path(name).expanduser()
    if path.is_file():
        return path
    if name in STS_FILES:
        root = data_dir(data)
        for candidate in (root / "sts" / STS_FILES[name], root / STS_FILES[name]):
            if candidate.is_file():
                return candidate
        raise FileNotFoundError(f"STS set {name!r}: {root / 'sts' / STS_FILES[name]} not found; give --data-dir DIR "
                                "(the data root, or its sts directory) or set LENS_DATA_DIR")
    raise FileNotFoundError(f"STS set {name!r} is neither a file nor one of {', '.join(sorted(STS_FILES))}; give a "
                            "TSV[.gz] with sentence1, sentence2, score and split columns")


def _names(value: str, what: str, choices=None) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"{what} is empty")
    bad = [n for n in names if choices is not None and n not in choices]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown {what} {', '.join(bad)}; choose from {', '.join(choices)}")
    return names


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the options of ``lens bench sts`` (and ``benchmarks/sts.py``) to ``parser``."""
    parser.add_argument("sets", nargs="*", default=[],
                        help=f"STS sets: names ({', '.join(sorted(STS_FILES))}) or TSV[.gz] files (default "
                             "stsbenchmark)")
    parser.add_argument("--sets", dest="set_list", type=lambda v: _names(v, "--sets"), default=[],
                        help="the sets, comma-separated (added to the positional ones)")
    parser.add_argument("--model", default="default", help="LENS model name or directory (default: default)")
    parser.add_argument("--split", "--splits", dest="splits", type=lambda v: _names(v, "--split"), default=["test"],
                        help="split(s), comma-separated, each judged apart (default test)")
    parser.add_argument("--pairing", type=lambda v: _names(v, "--pairing", PAIRINGS), default=["symmetric"],
                        help=f"comma-separated, from {', '.join(PAIRINGS)} (default symmetric)")
    parser.add_argument("--instruction", default=None,
                        help=f'the LENS query instruction (default "{STS_INSTRUCTION}", MTEB\'s)')
    parser.add_argument("--by-stratum", action="store_true",
                        help="also Spearman per stratum of pairs (caption-like, headline-like, question, other)")
    parser.add_argument("--variant", "--variants", dest="variants", type=lambda v: _names(v, "--variant"),
                        default=["original"],
                        help="comma-separated rewrites of both sentences, each judged apart: original, or a variant "
                             "of `lens data variant` that rewrites queries (upper-all, lower-all, typos); default "
                             "original")
    parser.add_argument("--text-rule", "--text-rules", dest="text_rules", type=lambda v: _names(v, "--text-rule"),
                        default=None,
                        help="comma-separated text rules to load the LENS model under, each judged apart "
                             "(lens.inputs.TEXT_NORMALIZATIONS, or none); default: the model's own")
    parser.add_argument("--threads", type=positive_int, default=None, help="torch threads")
    parser.add_argument("--data-dir", "--data", dest="data_dir", type=Path, default=None,
                        help="where set names are looked up: DIR/sts or DIR itself (default: $LENS_DATA_DIR, else "
                             "../shared/data)")
    parser.add_argument("--output", "--out", type=Path, default=OUTPUT,
                        help=f"writes OUTPUT.json and OUTPUT.md (default {OUTPUT})")
    add_markdown_only_arguments(parser)
    add_result_overwrite_argument(parser)
    return parser


def render(results: dict) -> list[str]:
    """The markdown of a saved ``lens bench sts`` run (also one saved before its settings moved into ``_meta``, by
    ``benchmarks/sts.py``: command and model at the top level, MTEB's instruction)."""
    meta = {"instruction": STS_INSTRUCTION, **{k: results[k] for k in ("command", "model") if k in results},
            **(results.get("_meta") or {})}
    instruction = meta["instruction"]
    protocol = " (MTEB's protocol)" if instruction == STS_INSTRUCTION else " (not MTEB's STS instruction)"
    lines = ["# STS: Spearman x 100 (cosine of the pair's vectors)", "", "```bash", meta["command"], "```", "",
             f"LENS model: `{meta['model']}`. Pairing `symmetric` encodes both sentences as queries behind "
             f"\"{instruction}\"{protocol}; `asymmetric` encodes sentence2 as a document. MiniLM encodes both plainly. "
             "Seconds include encoding (a pairing's lexicon row encodes, its dense row reuses).", "",
             "| set | split | variant | text rule | system | pairing | Spearman | pairs | seconds |",
             "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['set']} | {r['split']} | {r.get('variant', 'original')} | {r.get('rule') or '-'} | {r['system']} "
              f"| {r['pairing']} | {_fmt(r['spearman'])} | {r['pairs']} | {r['seconds']:.0f} |" for r in results["rows"]]
    if results.get("strata"):
        lines += ["", "## By stratum", "",
                  f"LENS lexicon ({results['strata'][0]['pairing']} pairing), MiniLM and word overlap (the Jaccard "
                  "overlap of the two sentences' words: a model that matches words and nothing else), Spearman x 100 "
                  "per stratum of pairs (`lens.eval.sts.pair_stratum`; by shape, as the files carry no genre): "
                  "*question* if a sentence ends with ?, *caption-like* if both begin with a determiner or number and "
                  "have at most 15 words (image captions), *headline-like* if neither ends in sentence punctuation "
                  "(news headlines), *other* for the rest (forum posts, news prose). A stratum under 10 pairs has no "
                  "correlation.", "",
                  "| set | split | stratum | pairs | LENS lexicon | MiniLM | word overlap | LENS - MiniLM |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in results["strata"]:
            lens, minilm = r["lens-lexicon"], r["minilm"]
            gap = None if lens is None or minilm is None else lens - minilm
            lines.append(f"| {r['set']} | {r['split']} | {r['stratum']} | {r['pairs']} | {_fmt(lens)} | "
                         f"{_fmt(minilm)} | {_fmt(r['word-overlap'])} | {_fmt(gap, sign=True)} |")
    notes = meta.get("notes") or []
    return lines + (["", "Notes:", *[f"- {n}" for n in notes]] if notes else [])


def _fmt(v: float | None, sign: bool = False) -> str:
    if v is None:  # too few pairs for a correlation, or a system whose scores are all equal
        return "–"
    return f"{v:+.1f}" if sign else f"{v:.1f}"


def _number(v: float) -> float | None:
    """NaN (a stratum too small for a correlation) as None: JSON has no NaN."""
    return None if v != v else v


def _judge_split(name: str, split: str, s1: list[str], s2: list[str], gold, lens, minilm, pairings: list[str],
                 instruction: str, by_stratum: bool, variant: str = "original") -> tuple[list[dict], list[dict]]:
    """One set's split: the whole-split rows (MiniLM unless ``minilm`` is None, then each pairing's lexicon and dense
    rows) and, with ``by_stratum``, the stratum rows. Each row's pair cosines are computed once and serve the strata
    too. Rows name the ``variant`` of the sentences and the LENS model's text rule."""
    import numpy as np

    from lens.eval.sts import lens_pair_encoder, pair_cosines, pair_stratum, spearman, spearman_by_stratum
    from lens.eval.sts import word_overlap

    rows = []
    rule = getattr(getattr(lens, "config", None), "text_normalization", None) or "none"

    def add(system: str, pairing: str, a, b, started: float) -> np.ndarray:
        cosines = pair_cosines(a, b)
        rows.append({"set": name, "split": split, "variant": variant,
                     "rule": None if system == "minilm" else rule,
                     "system": system, "pairing": pairing,
                     "spearman": _number(100 * spearman(cosines, gold)), "pairs": len(gold),
                     "seconds": time.perf_counter() - started})
        logger.info("%s", rows[-1])
        return cosines

    t = time.perf_counter()
    scores = {} if minilm is None else {"minilm": add("minilm", "-", minilm.encode(s1, show_progress_bar=False),
                                                      minilm.encode(s2, show_progress_bar=False), t)}
    for pairing in pairings:  # each pairing encoded once: its lexicon and dense rows share it
        t = time.perf_counter()
        a, b = lens_pair_encoder(lens, output="both", pairing=pairing, instruction=instruction)(s1, s2)
        lexicon = add("lens-lexicon", pairing, a.lexicon, b.lexicon, t)
        scores.setdefault("lens-lexicon", lexicon)  # the strata read the first pairing
        add("lens-dense", pairing, a.dense, b.dense, time.perf_counter())
    if not by_stratum:
        return rows, []
    strata = [pair_stratum(x, y) for x, y in zip(s1, s2)]
    scores["word-overlap"] = np.array([word_overlap(x, y) for x, y in zip(s1, s2)])
    by = {system: spearman_by_stratum(scores[system], gold, strata) for system in STRATUM_SYSTEMS}
    return rows, [{"set": name, "split": split, "stratum": stratum, "pairs": n, "pairing": pairings[0],
                   **{system: _number(by[system][stratum][1]) for system in STRATUM_SYSTEMS}}
                  for stratum, (n, _) in by["minilm"].items()]


def run(args: argparse.Namespace) -> int:
    if markdown_only(args, args.output, render):
        return 0
    from lens.dense import DenseEncoder
    from lens.encoder import LensEncoder
    from lens.eval.beir import torch_threads
    from lens.eval.sts import load_sts

    check_benchmark_target(args.output, overwrite=args.overwrite)  # a user's file or an earlier result: before work
    names = list(args.sets) + list(args.set_list) or ["stsbenchmark"]
    files = {name: resolve_sts_file(name, args.data_dir) for name in names}  # every set found before encoding
    # every set and split read (and checked) before a model loads, once each
    pairs = {(name, split): load_sts(path, split, judged=True)
             for name, path in files.items() for split in args.splits}
    instruction = STS_INSTRUCTION if args.instruction is None else args.instruction
    from lens.variants import rewrite_texts

    for variant in args.variants:  # a bad name is refused before any encoding
        rewrite_texts([], variant)
    # one encoder per text rule asked for (None: the model's own); the weights are read once per rule
    lenses = [LensEncoder.from_pretrained(args.model, **({} if rule is None else {"text_normalization": rule}))
              for rule in (args.text_rules or [None])]
    minilm = DenseEncoder.from_pretrained()
    rows, strata_rows = [], []
    with torch_threads(args.threads):
        for name, path in files.items():
            for split in args.splits:
                s1, s2, gold = pairs[name, split]
                for variant in args.variants:
                    a = rewrite_texts(s1, variant, key=f"{name}:{split}:1:")
                    b = rewrite_texts(s2, variant, key=f"{name}:{split}:2:")
                    for i, lens in enumerate(lenses):  # MiniLM once per variant; strata of the first variant/rule
                        first = variant == args.variants[0] and i == 0
                        whole, strata = _judge_split(name, split, a, b, gold, lens, minilm if i == 0 else None,
                                                     args.pairing, instruction, args.by_stratum and first,
                                                     variant=variant)
                        rows += whole
                        strata_rows += strata
    command = getattr(args, "bench_command_line", None) or command_line()
    meta = {"command": command, "model": args.model, "instruction": instruction, "variants": args.variants,
            "files": {name: str(path) for name, path in files.items()},
            "load_avg_1min_after": os.getloadavg()[0], "notes": list(args.note)}
    results = {"_meta": meta, "rows": rows, "strata": strata_rows}
    print(write_benchmark(args.output, results, render(results), overwrite=args.overwrite), end="")
    return 0
