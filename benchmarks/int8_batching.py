"""How far a text's vector moves with the texts batched beside it: float32, int8 as the encoder runs it, int8 batched.

    python benchmarks/int8_batching.py --set cranfield --texts 16 --threads 1

The same texts (the first ``--texts`` documents of ``--set``, or its queries with ``--queries``, behind its
instruction) are encoded once as one batch and once each on its own, with the shipped default in float32, in int8 as
``LensEncoder`` runs it (``batch_invariant``: one text per forward, whatever ``batch_size`` says) and in int8 with
batching turned back on (``batch_invariant = False``). Per mode: the cosine between a text's two lexicon vectors
(min, mean), their absolute difference (mean over the non-zero weights, max), the cosine of the batched vectors to
float32's for scale, and the batched call's texts per second (best of ``--repeats``, wall clock). Float32 moves by
rounding alone; int8 rounds each activation to 8 bits with ranges and outlier channels taken over the call, so a
batch moves a text's vector (a difference in the last bits of a float32 layer below can also flip a rounding). That
move is what one text per forward removes, at the throughput this measures.

Writes ``benchmarks/results/int8_batching.json`` and ``.md``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from _common import RESULTS, add_data_dir_argument, machine, machine_description, script_command, write_results
from lens.cli_args import Parser

OUT = RESULTS / "int8_batching"


def _compare(alone: np.ndarray, batched: np.ndarray) -> dict:
    cos = (alone * batched).sum(axis=1)
    diff = np.abs(alone - batched)
    nonzero = (alone != 0) | (batched != 0)
    return {"cos_min": float(cos.min()), "cos_mean": float(cos.mean()),
            "diff_mean": float(diff[nonzero].mean()) if nonzero.any() else 0.0, "diff_max": float(diff.max())}


MODES = {"float32": (None, True), "int8": ("int8", True), "int8-batched": ("int8", False)}


def measure(model: str, texts: list[str], queries: bool, instruction: str | None, repeats: int) -> dict:
    import time

    from lens.encoder import LensEncoder

    def encode(enc, batch: list[str], size: int) -> np.ndarray:
        if queries:
            return enc.encode_queries(batch, instruction=instruction, batch_size=size, show_progress_bar=False)
        return enc.encode_documents(batch, batch_size=size, show_progress_bar=False)

    out, reference, encoders = {}, None, {}
    for mode, (quantize, invariant) in MODES.items():
        if quantize not in encoders:
            encoders[quantize] = LensEncoder.from_pretrained(model, quantize=quantize)
        enc = encoders[quantize]
        enc.batch_invariant = invariant
        encode(enc, texts[:2], 2)  # warm-up
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            batched = encode(enc, texts, len(texts))
            seconds.append(time.perf_counter() - start)
        alone = np.stack([encode(enc, [t], 1)[0] for t in texts])
        row = _compare(alone, batched)
        row["texts_per_s"] = len(texts) / min(seconds)
        if reference is None:
            reference = batched
        else:
            row["cos_to_float32_mean"] = float((batched * reference).sum(axis=1).mean())
        out[mode] = row
    return out


def render(meta: dict) -> list[str]:
    what = "queries (behind the set's instruction)" if meta["queries"] else "documents"
    lines = ["# A text's vector alone and in a batch: float32 against int8", "", f"Command: `{meta['command']}`", "",
             f"Model `{meta['model']}`; the first {meta['texts']} {what} of `{meta['set']}`, encoded as one batch and "
             "each on its own; lexicon vectors (unit length). `int8`: as `LensEncoder` runs it (one text per forward, "
             "`batch_invariant`); `int8-batched`: with `batch_invariant = False`. diff: absolute difference of a "
             "text's two vectors, mean over the non-zero weights and max. texts/s: the batched call, best of "
             f"{meta['repeats']}, {meta['threads']} thread(s).", "",
             "| mode | cosine alone / batched, min | mean | mean diff | max diff | batched cosine to float32, mean "
             "| texts/s |",
             "|---|---|---|---|---|---|---|"]
    for mode, r in meta["modes"].items():
        to_f32 = f"{r['cos_to_float32_mean']:.5f}" if "cos_to_float32_mean" in r else "-"
        lines.append(f"| {mode} | {r['cos_min']:.6f} | {r['cos_mean']:.6f} | {r['diff_mean']:.2e} | "
                     f"{r['diff_max']:.2e} | {to_f32} | {r['texts_per_s']:.2f} |")
    return lines + ["", f"Machine: {meta['machine_line']}."]


def main(argv: list[str] | None = None) -> int:
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--set", default="cranfield", help="a set name under the data directory or a BEIR directory")
    p.add_argument("--texts", type=int, default=16)
    p.add_argument("--queries", action="store_true", help="the set's queries instead of its documents")
    p.add_argument("--model", default="default")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=2, help="timed batched calls per mode (the best counts)")
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
            "texts": len(texts), "queries": args.queries, "repeats": args.repeats, "threads": args.threads,
            "modes": measure(args.model, texts, args.queries, lookup(data.name).text if args.queries else None,
                             args.repeats),
            "machine": machine(torch=True), "machine_line": machine_description()}
    print(write_results(args.out, meta, render(meta)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
