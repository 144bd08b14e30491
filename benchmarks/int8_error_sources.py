"""Where the int8 recipe's error comes from, and what would cut it (issue 15): a float32 simulation.

Each linear layer of the decoder (after its first ``--float32-layers`` blocks) is replaced by a *fake-quantized* one
that rounds exactly as ``lens.quantize.Int8Linear`` does (7-bit symmetric weights per output row; activations
scaled per token to max |x| = 1 and rounded to 8-bit asymmetric levels; outlier input channels computed from the
float32 weights) but multiplies in float32, so each source of error can be switched on alone. It reports the
lexicon cosine to float32 on SciFact documents (mean, min) for:

- ``shipped``: the shipped recipe (16 outlier channels picked per call);
- ``weights``: weight rounding alone; ``activations``: activation rounding alone (16 per-call outliers);
- ``w8-a7``: the shipped recipe on the other grid fbgemm's AVX2 kernel allows without int16 saturation: 8-bit
  weights (|q| <= 127) and 7-bit activations (``reduce_range``);
- ``static-N``: N outlier channels fixed per layer from a calibration pass (the channels with the largest |x|);
- ``static-N-gptq``: the same, with weights rounded by GPTQ (Frantar et al. 2022: columns in order of decreasing
  Hessian diagonal, each column's rounding error spread over the columns not yet rounded, weighted by the inverse
  Hessian ``(X^T X + damp)^-1`` of the calibration inputs); the static outlier columns are left out of the problem.

Calibration texts are SQuAD *train* paragraphs, or (``--calibrate-on scifact``) SciFact documents other than the
ones measured: in-domain calibration, which a shipped recipe could not assume. Nothing here changes the shipped
recipe; it is the evidence for the next one.

    python benchmarks/int8_error_sources.py --threads 2
    python benchmarks/int8_error_sources.py --threads 2 --calibrate-on scifact --configs static-16,static-16-gptq \
        --out benchmarks/results/int8_error_sources-scifact.json
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn
from _common import RESULTS, data_dir, machine, script_command, write_results

from lens.quantize import WEIGHT_LEVELS  # (the shipped grid, simulated here)
from lens.cli_args import Parser

SCIFACT = data_dir() / "beir" / "scifact"
SQUAD = data_dir() / "train" / "squad" / "pairs.jsonl.gz"
ACT_LEVELS = 255
CONFIGS = ["shipped", "weights", "activations", "static-16", "static-16-gptq", "static-32-gptq", "w8-a7"]


def every_nth(items, step: int, offset: int, n: int) -> list:
    return list(itertools.islice(items, offset, offset + step * n, step))


def round_weights(w: Tensor, levels: int = WEIGHT_LEVELS) -> Tensor:
    """Per-row symmetric rounding to ``levels`` steps each side, returned in float32 (round to nearest)."""
    scale = w.abs().amax(1, keepdim=True).clamp(min=1e-12) / levels
    return (w / scale).round().clamp(-levels, levels) * scale


def gptq(w: Tensor, h: Tensor, levels: int = WEIGHT_LEVELS, block: int = 128, damp: float = 0.01) -> Tensor:
    """GPTQ rounding of ``w`` (N, K) on the same per-row grid as :func:`round_weights`, given ``h = X^T X`` (K, K)."""
    w, h = w.double().clone(), h.double().clone()
    k = w.shape[1]
    dead = torch.diag(h) == 0
    h[dead, dead] = 1
    w[:, dead] = 0
    scale = (w.abs().amax(1).clamp(min=1e-12) / levels)
    perm = torch.argsort(torch.diag(h), descending=True)
    w, h = w[:, perm], h[perm][:, perm]
    h += damp * torch.diag(h).mean() * torch.eye(k, dtype=h.dtype)
    hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    q = torch.zeros_like(w)
    for i1 in range(0, k, block):
        i2 = min(i1 + block, k)
        w1, err, h1 = w[:, i1:i2].clone(), torch.zeros(w.shape[0], i2 - i1, dtype=w.dtype), hinv[i1:i2, i1:i2]
        for i in range(i2 - i1):
            q[:, i1 + i] = (w1[:, i] / scale).round().clamp(-levels, levels) * scale
            e = (w1[:, i] - q[:, i1 + i]) / h1[i, i]
            w1[:, i:] -= e[:, None] * h1[i, i:][None, :]
            err[:, i] = e
        w[:, i2:] -= err @ hinv[i1:i2, i2:]
    return q[:, torch.argsort(perm)].float()


def round_activations(x: Tensor, levels: int = ACT_LEVELS) -> Tensor:
    """Per-token scaling to max |x| = 1, then 8-bit asymmetric rounding of the row (as fbgemm's dynamic linear)."""
    r = x.abs().amax(1, keepdim=True).clamp(min=1e-12)
    xs = x / r
    lo, hi = xs.amin(1, keepdim=True).clamp(max=0), xs.amax(1, keepdim=True).clamp(min=0)
    step = (hi - lo).clamp(min=1e-12) / levels
    zero = (-lo / step).round()
    return ((((xs / step).round() + zero).clamp(0, levels)) - zero) * step * r


class FakeInt8Linear(nn.Module):
    """float32 ``x @ q.T`` with ``q`` pre-rounded weights; outlier columns exact (per call or fixed)."""

    def __init__(self, linear: nn.Linear, q: Tensor, acts: bool, outliers: int = 0, fixed: Tensor | None = None,
                 act_levels: int = ACT_LEVELS):
        super().__init__()
        self.w, self.q, self.b = linear.weight.detach().float(), q, linear.bias
        self.acts, self.outliers, self.fixed, self.act_levels = acts, outliers, fixed, act_levels

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1]).float()
        cols = self.fixed if self.fixed is not None else (
            x.abs().amax(0).topk(self.outliers).indices if self.outliers else None)
        extra = 0.0
        if cols is not None:
            extra = x.index_select(1, cols) @ self.w.index_select(1, cols).t()
            x = x.index_fill(1, cols, 0.0)
        if self.acts:
            x = round_activations(x, self.act_levels)
        y = x @ self.q.t() + extra
        if self.b is not None:
            y = y + self.b
        return y.reshape(*shape[:-1], -1)


def linears(encoder, float32_layers: int) -> list[tuple[nn.Module, str, nn.Linear]]:
    """The linear layers ``quantize_decoder`` would replace: every block's but the first ``float32_layers``."""
    return [(parent, name, child) for block in list(encoder.model.decoder.layers)[float32_layers:]
            for parent in block.modules()
            for name, child in parent.named_children() if type(child) is nn.Linear]


def calibrate(encoder, targets, texts: list[str]) -> tuple[dict, dict]:
    """``X^T X`` and per-channel max |x| of every target's input over ``texts`` (one at a time: no padding)."""
    hess = {id(c): torch.zeros(c.in_features, c.in_features, dtype=torch.float64) for *_, c in targets}
    peak = {id(c): torch.zeros(c.in_features) for *_, c in targets}

    def hook(module, inputs):
        x = inputs[0].reshape(-1, inputs[0].shape[-1]).detach()
        hess[id(module)] += x.double().t() @ x.double()
        peak[id(module)] = torch.maximum(peak[id(module)], x.abs().amax(0).float())

    handles = [c.register_forward_pre_hook(hook) for *_, c in targets]
    try:
        encoder.encode_documents(texts, batch_size=1, show_progress_bar=False, output="lexicon")
    finally:
        for h in handles:
            h.remove()
    return hess, peak


def apply(config: str, encoder, targets, calibration: list[str]) -> None:
    if config.startswith("static"):
        n = int(config.split("-")[1])
        hess, peak = calibrate(encoder, targets, calibration)
    for parent, name, child in targets:
        w = child.weight.detach().float()
        if config == "shipped":
            new = FakeInt8Linear(child, round_weights(w), acts=True, outliers=16)
        elif config == "weights":
            new = FakeInt8Linear(child, round_weights(w), acts=False)
        elif config == "w8-a7":  # the other grid the AVX2 kernel allows: 8-bit weights, 7-bit activations
            new = FakeInt8Linear(child, round_weights(w, 127), acts=True, outliers=16, act_levels=127)
        elif config == "activations":
            new = FakeInt8Linear(child, w, acts=True, outliers=16)
        else:
            cols = peak[id(child)].topk(n).indices
            if config.endswith("gptq"):
                h = hess[id(child)].clone()
                h[cols, :] = 0
                h[:, cols] = 0  # exact columns: out of the rounding problem
                q = gptq(w.index_fill(1, cols, 0.0), h)
            else:
                q = round_weights(w.index_fill(1, cols, 0.0))
            new = FakeInt8Linear(child, q, acts=True, fixed=cols)
        setattr(parent, name, new)


def main(argv=None) -> int:
    from int8_recipe import cosines

    from lens.corpus import iter_corpus, read_jsonl
    from lens.encoder import LensEncoder

    ap = Parser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="default")
    ap.add_argument("--docs", type=int, default=48)
    ap.add_argument("--calibration", type=int, default=16, help="calibration texts")
    ap.add_argument("--calibrate-on", choices=["squad", "scifact"], default="squad",
                    help="SQuAD train paragraphs (out of domain), or other SciFact documents than those measured")
    ap.add_argument("--float32-layers", type=int, default=2)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, default=RESULTS / "int8_error_sources.json")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    docs = [d.full_text for d in every_nth(iter_corpus(SCIFACT), 40, 0, args.docs)]
    calibration = ([r["positive"] for _, r in every_nth(read_jsonl(SQUAD), 97, 3, args.calibration)]
                   if args.calibrate_on == "squad" else
                   [d.full_text for d in every_nth(iter_corpus(SCIFACT), 40, 7, args.calibration)])
    ref = np.asarray(LensEncoder.from_pretrained(args.model).encode_documents(
        docs, batch_size=16, show_progress_bar=False, output="lexicon"), np.float64)
    rows = []
    for config in args.configs.split(","):
        encoder = LensEncoder.from_pretrained(args.model)
        targets = linears(encoder, args.float32_layers)
        t = time.perf_counter()
        with torch.no_grad():
            apply(config, encoder, targets, calibration)
        setup_s = time.perf_counter() - t
        d = np.asarray(encoder.encode_documents(docs, batch_size=16, show_progress_bar=False, output="lexicon"),
                       np.float64)
        cos = cosines(d, ref)
        rows.append({"config": config, "cos_mean": float(cos.mean()), "cos_min": float(cos.min()),
                     "one_minus_cos": float(1 - cos.mean()), "setup_s": setup_s, "layers": len(targets)})
        print(rows[-1], flush=True)
    command = script_command(argv, __file__)
    result = {"command": command, "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__,
              "machine": machine()["processor"], "docs": len(docs),
              "calibration": len(calibration), "calibrate_on": args.calibrate_on,
              "float32_layers": args.float32_layers, "rows": rows}
    lines = ["# int8 error sources (float32 simulation)", "", f"Command: `{command}`  ", f"Date: {result['date']}; "
             f"torch {torch.__version__}; {len(docs)} SciFact documents (every 40th), {len(calibration)} "
             f"{'SQuAD train paragraphs' if args.calibrate_on == 'squad' else 'other SciFact documents'} for "
             f"calibration; the first {args.float32_layers} blocks float32 (as shipped). See the "
             "script's docstring for what each row simulates.", "",
             "| config | lexicon cosine to float32, mean (min) | 1 - cosine | calibration + rounding s |",
             "|---|---|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['config']} | {r['cos_mean']:.5f} ({r['cos_min']:.5f}) | {r['one_minus_cos']:.5f} | "
                     f"{r['setup_s']:.0f} |")
    write_results(args.out, result, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
