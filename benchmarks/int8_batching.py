"""How far a text's vector moves with the texts batched beside it, float32 against int8 (``lens.quantize``).

    python benchmarks/int8_batching.py --set cranfield --texts 16 --threads 1

The same texts (the first ``--texts`` documents of ``--set``, or its queries with ``--queries``, behind its
instruction) are encoded once as one batch and once each on its own, with the shipped default in float32 and in
int8. Per mode: the cosine between a text's two lexicon vectors (min, mean) and their absolute difference (mean over
the non-zero weights, max), and the cosine of the batched int8 vectors to float32's for scale. Float32 moves by
rounding alone; int8 rounds each activation to 8 bits, so a difference in the last bits of a float32 layer below it
(matrix kernels block a batch differently) can flip a rounding, and its outlier channels are picked over the whole
call. The move is what separates two int8 runs that batch the same texts differently (``lens serve`` batches
concurrent requests; the harness times queries one at a time, the studies batch them).

Writes ``benchmarks/results/int8_batching.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from _common import RESULTS, add_data_dir_argument, machine, script_command, write_results

OUT = RESULTS / "int8_batching"


def _compare(alone: np.ndarray, batched: np.ndarray) -> dict:
    cos = (alone * batched).sum(axis=1)
    diff = np.abs(alone - batched)
    nonzero = (alone != 0) | (batched != 0)
    return {"cos_min": float(cos.min()), "cos_mean": float(cos.mean()),
            "diff_mean": float(diff[nonzero].mean()) if nonzero.any() else 0.0, "diff_max": float(diff.max())}


def measure(model: str, texts: list[str], queries: bool, instruction: str | None) -> dict:
    from lens.encoder import LensEncoder

    def encode(enc, batch: list[str], size: int) -> np.ndarray:
        if queries:
            return enc.encode_queries(batch, instruction=instruction, batch_size=size)
        return enc.encode_documents(batch, batch_size=size)

    out, reference = {}, None
    for mode in (None, "int8"):
        enc = LensEncoder.from_pretrained(model, quantize=mode)
        batched = encode(enc, texts, len(texts))
        alone = np.stack([encode(enc, [t], 1)[0] for t in texts])
        row = _compare(alone, batched)
        if reference is None:
            reference = batched
        else:
            row["cos_to_float32_mean"] = float((batched * reference).sum(axis=1).mean())
        out[mode or "float32"] = row
    return out


def render(meta: dict) -> list[str]:
    what = "queries (behind the set's instruction)" if meta["queries"] else "documents"
    lines = ["# A text's vector alone and in a batch: float32 against int8", "", f"Command: `{meta['command']}`", "",
             f"Model `{meta['model']}`; the first {meta['texts']} {what} of `{meta['set']}`, encoded as one batch and "
             "each on its own; lexicon vectors (unit length). diff: absolute difference of a text's two vectors, mean "
             "over the non-zero weights and max.", "",
             "| mode | cosine alone / batched, min | mean | mean diff | max diff | batched cosine to float32, mean |",
             "|---|---|---|---|---|---|"]
    for mode, r in meta["modes"].items():
        to_f32 = f"{r['cos_to_float32_mean']:.5f}" if "cos_to_float32_mean" in r else "-"
        lines.append(f"| {mode} | {r['cos_min']:.6f} | {r['cos_mean']:.6f} | {r['diff_mean']:.2e} | "
                     f"{r['diff_max']:.2e} | {to_f32} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--set", default="cranfield", help="a set name under the data directory or a BEIR directory")
    p.add_argument("--texts", type=int, default=16)
    p.add_argument("--queries", action="store_true", help="the set's queries instead of its documents")
    p.add_argument("--model", default="default")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=OUT)
    add_data_dir_argument(p)
    args = p.parse_args(argv)
    if args.texts < 2:
        p.error("--texts must be at least 2 (a batch)")
    import torch

    from lens.eval import beir
    from lens.instructions import lookup

    torch.set_num_threads(args.threads)
    data = beir.load_dataset(args.set, data=args.data_dir)
    pool = list(data.queries.values()) if args.queries else [d.full_text for d in data.docs]
    texts = [t for t in pool if t.strip()][: args.texts]
    meta = {"command": script_command(argv, "benchmarks/int8_batching.py"), "model": args.model, "set": data.name,
            "texts": len(texts), "queries": args.queries,
            "modes": measure(args.model, texts, args.queries, lookup(data.name).text if args.queries else None),
            "machine": machine(torch=True)}
    print(write_results(args.out, meta, render(meta)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
