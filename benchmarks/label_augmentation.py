"""Does label-augmented training data help the advanced tasks, and what does it cost retrieval? (issue 11)

Two runs at the same budget (steps, batch, examples per task, the shipped default's settings), from
``training_study.py``:

- ``retrieval-only``: the retrieval sets of the mixture (SQuAD, NQ, WikiQA, PubMedQA, SciFact train);
- ``label-augmented``: the same + the classification and NLI sets written as retrieval of label documents (label
  text + explanation + id; the task's other labels as negatives; `make train-data-labels`).

Each is judged by the study (SciFact held-out queries, STS-B dev, held-out validation loss) and by ``lens bench
ateb`` on the five development sets, beside MiniLM and the shipped default in the same run. Dialfact, Winogrande
and PIQA are evaluated whole; e-SNLI and HH-RLHF (9,842 and 2,312 rows of long texts) on a seeded subset of
``--max-rows`` rows, the same for every system. Writes ``<output>.json`` and ``<output>.md``.

    make train-data-mixture train-data-labels
    python benchmarks/label_augmentation.py --steps 300 --per-task 1000 --threads 2
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
from pathlib import Path

from _common import REPO, script_command, write_markdown as write_markdown_file, write_results
from lens.eval.report import output_file
from lens.cli_args import Parser

logger = logging.getLogger("label_augmentation")

RUNS = ["retrieval-only", "label-augmented"]
WHOLE = ["dialfact", "winogrande", "piqa"]
SUBSET = ["esnli", "hh_rlhf_harmless"]
SYSTEMS = "minilm,lens-lexicon,lens-hybrid"
# The goal is judged on one measure per task: the accuracy of its main formulation.
PRIMARY = {"dialfact": "classification", "esnli": "classification", "piqa": "multiple-choice",
           "winogrande": "multiple-choice", "hh_rlhf_harmless": "preference"}


def parse_args(argv=None) -> argparse.Namespace:
    p = Parser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--per-task", type=int, default=1000)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-rows", type=int, default=1000, help="rows of e-SNLI and HH-RLHF evaluated (seeded subset)")
    p.add_argument("--work", type=Path, default=REPO / ".cache/lens-study")
    p.add_argument("--output", type=Path, default=REPO / "benchmarks/results/label_augmentation")
    p.add_argument("--skip-training", action="store_true", help="use the runs already under --work/runs")
    return p.parse_args(argv)


def evaluate(model: str, out: Path, args) -> None:
    """``lens bench ateb`` for one model: the small sets whole, the large ones on the seeded subset."""
    common = [sys.executable, "-m", "lens.cli", "bench", "ateb", "--model", model, "--systems", SYSTEMS,
              "--threads", str(args.threads), "--output", str(out), "--no-plot"]
    subprocess.run([*common, "--tasks", ",".join(WHOLE)], check=True, cwd=REPO)
    subprocess.run([*common, "--tasks", ",".join(SUBSET), "--max-rows", str(args.max_rows)], check=True, cwd=REPO)


def collect(models: dict[str, Path]) -> list[dict]:
    """One row per (task, formulation, measure): random, MiniLM and each model's lexicon and hybrid scores."""
    from lens.atomic import read_json

    rows: dict[tuple, dict] = {}
    for label, root in models.items():
        for path in sorted(root.glob("*/results.json")):
            r = read_json(path, "ATEB results")
            for kind, f in r["formulations"].items():
                for m in f["metrics"]:
                    row = rows.setdefault((r["task"], kind, m), {
                        "task": r["task"], "formulation": kind, "measure": m, "rows": r["rows"],
                        "of_rows": r["of_rows"], "random": f["random"][m]})
                    row.setdefault("minilm", f["systems"]["minilm"][m])
                    row[f"{label}/lexicon"] = f["systems"]["lens-lexicon"][m]
                    row[f"{label}/hybrid"] = f["systems"]["lens-hybrid"][m]
    return list(rows.values())


def write_markdown(path: Path, rows: list[dict], study: dict, labels: list[str], command: str, args) -> None:
    """The table alone at ``path``."""
    write_markdown_file(path, "\n".join(markdown_lines(rows, study, labels, command, args)) + "\n")


def markdown_lines(rows: list[dict], study: dict, labels: list[str], command: str, args) -> list[str]:
    lines = ["# Label-augmented training data: with vs without (issue 11)", "", f"Command: `{command}`", "",
             f"Two runs of {args.steps} steps (batch 16, one task per batch, at most {args.per_task} examples per "
             "task) with the shipped default's settings (causal attention, top 8 layers LoRA r32/a64 + cluster head, "
             "k 4000, lr 1e-3, InfoNCE + 0.2 x FLOPS), differing only in the data: **retrieval-only** = SQuAD, NQ, "
             "WikiQA, PubMedQA-L, SciFact train (80% of its queries); **label-augmented** = the same + TweetEval, "
             "CLINC150, Banking77, TREC-QC and SNLI-CAD as retrieval of label documents (label text + explanation "
             "+ id, the task's other labels as negatives: `make train-data-labels`). No ATEB development set and "
             "no test split is trained on (SNLI-CAD comes from SNLI *train*; e-SNLI is SNLI dev). "
             "`default` is the shipped model (1,400 steps on a mixture holding the same classification sets with "
             "plain label descriptions), for reference.", "",
             "## Retrieval and similarity (the study's judges, no test split)", "",
             "| run | SciFact held-out nDCG@10 | STS-B dev Spearman | val loss | s/step |", "|---|---|---|---|---|"]
    for name in RUNS:
        s = study.get(name)
        if s:
            lines.append(f"| {name} | {s['scifact_ndcg']:.4f} | {s['stsb_dev']:.1f} | {s['val_loss']:.3f} | "
                         f"{s['step_s']:.2f} |")
    bm25 = study.get("_meta", {}).get("bm25_ndcg")
    if bm25 is not None:
        lines += ["", f"SciFact held-out: the lexicon reranking BM25's top 20 for {study['_meta']['judge_queries']} "
                      f"SciFact train queries no run trains on (BM25's own order: {bm25:.4f}). Val loss: InfoNCE on "
                      "fixed held-out batches of the new sets (their plain label-description form)."]
    cols = ["random", "minilm"] + [f"{m}/{k}" for k in ("lexicon", "hybrid") for m in labels]
    lines += ["", "## ATEB development sets (`lens bench ateb`, same run)", "",
              "| task | formulation | measure | rows | " + " | ".join(cols) + " |",
              "|---|---|---|---|" + "---|" * len(cols)]
    for r in rows:
        cells = " | ".join(f"{r[c]:.3f}" if c in r else "" for c in cols)
        lines.append(f"| {r['task']} | {r['formulation']} | {r['measure']} | {r['rows']} of {r['of_rows']} | "
                     f"{cells} |")
    lines += ["", "Goal (issue 11): the lexicon above MiniLM on at least three of the five tasks and above random on "
              "all five, on each task's main accuracy (" + ", ".join(f"{t} {k}" for t, k in PRIMARY.items()) + "):", ""]
    main = [r for r in rows if PRIMARY.get(r["task"]) == r["formulation"] and r["measure"] == "accuracy"]
    for m in labels:
        key = f"{m}/lexicon"
        above = [r["task"] for r in main if r.get(key, float("nan")) > r["minilm"]]
        below_random = [r["task"] for r in main if not r.get(key, float("nan")) > r["random"]]
        lines.append(f"- {m}: above MiniLM on {len(above)} of {len(main)} ({', '.join(above) or 'none'}); "
                     f"not above random on {', '.join(below_random) or 'none'}")
    lines += ["", f"e-SNLI and HH-RLHF: a seeded subset of {args.max_rows} rows (seed 0), the same for every "
                  "system; the other sets whole. One training seed per run, and sampling noise: the binomial "
                  f"standard error of an accuracy near 0.5 on {args.max_rows} rows is "
                  f"{(0.25 / max(args.max_rows, 1)) ** 0.5:.3f}."]
    return lines


def main(argv=None) -> int:
    from lens.atomic import read_json

    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    study_out = args.output.with_name(args.output.name + "_study")
    if not args.skip_training:
        import training_study

        training_study.main(["--variants", ",".join(RUNS), "--steps", str(args.steps), "--per-task",
                             str(args.per_task), "--threads", str(args.threads), "--no-untrained", "--work",
                             str(args.work), "--output", str(study_out)])
    models = {"default": "default", **{name: str(args.work / "runs" / name) for name in RUNS}}
    roots = {}
    for label, model in models.items():
        roots[label] = args.output / label
        logger.info("ATEB for %s (%s)", label, model)
        evaluate(model, roots[label], args)
    rows = collect(roots)
    study = read_json(output_file(study_out, ".json"), "study results")
    command = script_command(argv, __file__)
    print(write_results(args.output, {"study": study, "ateb": rows, "command": command},
                        markdown_lines(rows, study, list(models), command, args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
