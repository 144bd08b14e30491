"""The int8 recipe study: how close each way of quantizing the decoder keeps LENS vectors to float32's, and its speed.

For each recipe (outlier input channels kept in float32 per call; first decoder blocks left whole in float32) this
loads the model, quantizes its decoder with ``lens.quantize.quantize_decoder`` and encodes the same SciFact documents
(every 20th of the first 2,000) and queries (with SciFact's instruction) as float32 did, batch 16. It reports the
lexicon cosine to float32 (mean, min), the overlap of each query's top 10 among those documents with float32's, and
the CPU time of the documents against float32's (process CPU seconds; the study is small, so +-15% run to run).

    python benchmarks/int8_recipe.py --threads 2            # writes benchmarks/results/int8_recipe.{json,md}
    python benchmarks/int8_recipe.py --docs 8 --queries 4 --recipes 4:0 --out /tmp/r.json   # a quick check
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import time
from pathlib import Path

import numpy as np
import torch
from _common import RESULTS, data_dir, machine, write_results
from lens.eval.report import output_file
from lens.cli_args import Parser

SCIFACT = data_dir() / "beir" / "scifact"
INSTRUCTION = "Given a scientific claim, retrieve documents that support or refute the claim"
DEFAULT_RECIPES = "4:0,16:0,8:2,16:1,16:2,16:4,32:2"


def recipe_list(value: str) -> list[tuple[int, int]]:
    """``"OUTLIERS:FLOAT32_LAYERS,..."`` -> [(outliers, float32_layers), ...]."""
    try:
        return [tuple(int(x) for x in item.split(":")) for item in value.split(",")]  # type: ignore[misc]
    except ValueError:
        raise argparse.ArgumentTypeError(f"recipes are OUTLIERS:FLOAT32_LAYERS pairs, comma-separated, got {value!r}")


def encode(encoder, docs: list[str], queries: list[str]) -> tuple[np.ndarray, np.ndarray, float]:
    start = time.process_time()
    d = encoder.encode_documents(docs, batch_size=16, show_progress_bar=False, output="lexicon")
    seconds = time.process_time() - start
    q = encoder.encode_queries(queries, instruction=INSTRUCTION, batch_size=16, show_progress_bar=False,
                               output="lexicon")
    return np.asarray(d, dtype=np.float64), np.asarray(q, dtype=np.float64), seconds


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def top10_overlap(d: np.ndarray, q: np.ndarray, ref_d: np.ndarray, ref_q: np.ndarray) -> float:
    k = min(10, len(d))
    top = lambda s: np.argsort(-s, axis=1)[:, :k]  # noqa: E731
    return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(top(q @ d.T), top(ref_q @ ref_d.T))]))


def main() -> None:
    from lens.cmdline import command_line

    ap = Parser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="default")
    ap.add_argument("--docs", type=int, default=96)
    ap.add_argument("--queries", type=int, default=64)
    ap.add_argument("--recipes", type=recipe_list, default=recipe_list(DEFAULT_RECIPES),
                    help=f"OUTLIERS:FLOAT32_LAYERS pairs (default {DEFAULT_RECIPES})")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, default=RESULTS / "int8_recipe.json")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from lens.corpus import iter_corpus, load_queries
    from lens.encoder import LensEncoder
    from lens.quantize import DEFAULT_FLOAT32_LAYERS, DEFAULT_OUTLIERS, quantize_decoder

    docs = [d.full_text for d in itertools.islice(iter_corpus(SCIFACT), 0, 20 * args.docs, 20)]
    queries = list(load_queries(SCIFACT).values())[:args.queries]
    ref_d, ref_q, ref_s = encode(LensEncoder.from_pretrained(args.model), docs, queries)
    print(f"float32: {ref_s:.1f} CPU s for {len(docs)} documents", flush=True)
    rows = []
    for outliers, layers in args.recipes:
        encoder = LensEncoder.from_pretrained(args.model)
        n = quantize_decoder(encoder.model.decoder, "int8", outliers=outliers, float32_layers=layers)
        encoder.quantize = "int8"
        d, q, s = encode(encoder, docs, queries)
        cd, cq = cosines(d, ref_d), cosines(q, ref_q)
        row = {"outliers": outliers, "float32_layers": layers, "int8_linear_layers": n,
               "docs_cos_mean": float(cd.mean()), "docs_cos_min": float(cd.min()),
               "queries_cos_mean": float(cq.mean()), "queries_cos_min": float(cq.min()),
               "top10_overlap": top10_overlap(d, q, ref_d, ref_q), "cpu_s": s, "speedup": ref_s / s,
               "default": (outliers, layers) == (DEFAULT_OUTLIERS, DEFAULT_FLOAT32_LAYERS)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    m = machine(torch=True)
    result = {"command": command_line(),
              "date": dt.date.today().isoformat(), "torch": m["torch"], "threads": m["torch_threads"],
              "platform": m["platform"], "model": args.model, "docs": len(docs), "queries": len(queries),
              "float32_cpu_s": ref_s, "rows": rows}
    write_results(args.out, result, markdown(result), sort_keys=False)
    print(f"wrote {output_file(args.out, '.json')} and {output_file(args.out, '.md')}")


def markdown(r: dict) -> str:
    lines = [
        "# int8 recipes: closeness to float32 and speed", "",
        f"Command: `{r['command']}`  ",
        f"Date: {r['date']}; torch {r['torch']}, {r['threads']} threads; model `{r['model']}`; {r['docs']} SciFact "
        f"documents (every 20th of the first {20 * r['docs']}), {r['queries']} queries with SciFact's instruction, "
        "batch 16.", "",
        "Lexicon vectors against float32's: cosine (mean, min); top-10 overlap = share of each query's 10 best "
        "documents (of these) that float32 also ranks in its 10 best; speed-up = float32 CPU seconds / int8 CPU "
        "seconds for the documents (a small sample: +-15% run to run). The shipped default is marked.", "",
        "| outliers | float32 blocks | int8 linear layers | documents cos mean (min) | queries cos mean (min) | "
        "top-10 overlap | speed-up |",
        "|---:|---:|---:|---|---|---:|---:|",
    ]
    for x in r["rows"]:
        mark = " **(default)**" if x["default"] else ""
        lines.append(f"| {x['outliers']}{mark} | {x['float32_layers']} | {x['int8_linear_layers']} | "
                     f"{x['docs_cos_mean']:.4f} ({x['docs_cos_min']:.4f}) | {x['queries_cos_mean']:.4f} "
                     f"({x['queries_cos_min']:.4f}) | {x['top10_overlap']:.3f} | {x['speedup']:.2f}x |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
