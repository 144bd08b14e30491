"""int8 inference on CPU: the decoder's linear layers computed in int8, the cluster head and pooling left in float32.

torch's own ``quantize_dynamic`` loses too much on LLM activations (lexicon vectors of SmolLM2 at cosine ~0.8 to
float32): one scale per tensor, a few channels and tokens hundreds of times larger than the rest, and 7-bit
activations (``reduce_range``) to avoid int16 saturation in the AVX2 kernels. ``Int8Linear`` runs the same fbgemm
kernel (``torch.ops.quantized.linear_dynamic``) differently:

- weights: symmetric per output row, 7 bits (|q| <= 63), so that a pair of u8 x s8 products fits in int16 and the
  activations can use all 8 bits (``reduce_range=False``) with no saturation;
- activations: each row (token) scaled to max |x| = 1 before the kernel and scaled back after (``W (x / r) * r``
  is exact), so one token's outliers never crush the others' precision;
- the ``outliers`` input channels with the largest |x| in the call are left out of the int8 product and computed
  in float32 (LLM.int8()'s decomposition, with the channels picked per call): they are the few channels that would
  otherwise set every token's scale.

``quantize_decoder`` replaces every ``nn.Linear`` of a decoder in place (inference only: no gradients, no saving).
Outlier channels and the activation range are picked per call, so a text's int8 vector also moves slightly (~1e-3)
with the texts batched beside it.
The float32 weights are kept for the outlier columns (memory: float32 + int8 copies of the linear weights).

Why this operator: ``torch.ao.quantization`` and quantized tensors are deprecated in torch 2.13 in favour of torchao,
but torchao's int8 CPU paths run ``torch._int_mm``, ~40x slower than fbgemm here without ``torch.compile``, and
weight-only int8 (``torch._weight_int8pack_mm``) is slower than float32. ``torch.ops.quantized.linear_dynamic`` is
still there and ~1.7x float32's matrix throughput on an AVX2 core; if a torch build lacks it, quantizing fails with
a clear error and float32 still works.
"""

from __future__ import annotations

import logging
import warnings

import torch
from torch import Tensor, nn

logger = logging.getLogger(__name__)

QUANTIZE_MODES = ("int8",)  # None (the default everywhere) means float32
WEIGHT_LEVELS = 63  # 7-bit symmetric weights: u8 activation x s8 weight pairs stay within int16 (no saturation)
# Input channels per call kept in float32, and the first decoder blocks left whole in float32 (their activations carry
# the model's largest outliers). Chosen on the default of the time (SmolLM2-135M, k 4000) by
# `benchmarks/int8_recipe.py` (results/int8_recipe-previous-default.md): lexicon cosine to float32 on SciFact
# documents 0.9919 with 4 outliers and no float32 block, 0.9958 with 16 and 2; the shipped default (k 8000, all
# layers trained) gives 0.9913 and 0.9953 (results/int8_recipe.md). The closeness costs speed: the float32 outlier
# product is ~20% of an int8 linear's time here; `speed_encode.md` measured int8 at 1.9-2.0x float32's docs/s with
# these settings. SmoothQuant-style channel scaling (alpha 0.5) was no closer than none (an exploration, not
# committed).
DEFAULT_OUTLIERS = 16
DEFAULT_FLOAT32_LAYERS = 2
# Bumped whenever the arithmetic above changes, so cached int8 vectors of an older recipe are never reused.
RECIPE_VERSION = 2
ENGINES = ("x86", "fbgemm")  # the quantized engines whose dynamic linear these settings are checked against


def check_quantize(quantize: str | None, device: str | torch.device | None = None) -> str | None:
    """``quantize`` if valid for ``device`` (None: float32, always valid), else a ValueError saying what to do."""
    if quantize is None:
        return None
    if quantize not in QUANTIZE_MODES:
        raise ValueError(f"unknown quantize {quantize!r}; valid: {', '.join(QUANTIZE_MODES)} (or None for float32)")
    if device is not None and torch.device(device).type != "cpu":
        raise ValueError(f"quantize={quantize!r} is a CPU path (fbgemm int8 kernels); on {device} load in float32 "
                         "or bfloat16 (quantize=None), or pass device='cpu'")
    return quantize


def recipe(mode: str | None) -> str | None:
    """A label of the quantisation arithmetic (``"int8-v2"``), None for float32: what keys cached int8 vectors."""
    return None if mode is None else f"{check_quantize(mode)}-v{RECIPE_VERSION}"


def quantize_decoder(decoder: nn.Module, mode: str = "int8", outliers: int = DEFAULT_OUTLIERS,
                     float32_layers: int = DEFAULT_FLOAT32_LAYERS) -> int:
    """Replace the ``nn.Linear`` layers inside ``decoder`` by ``Int8Linear``, in place; returns how many.

    The linear layers of the first ``float32_layers`` decoder blocks (``decoder.layers``; always at least one block
    is quantized) stay float32, as do embeddings and norms. The decoder must be on CPU in float32 and carry no LoRA
    layers (merge the adapter first).
    """
    check_quantize(mode)
    engine = _engine()
    param = next(decoder.parameters())
    if param.device.type != "cpu" or param.dtype != torch.float32:
        raise ValueError(f"int8 quantisation needs a float32 decoder on CPU, got {param.dtype} on {param.device}; "
                         "load it with device='cpu' and the default dtype")
    if any("lora" in name.lower() for name, _ in decoder.named_modules()):
        raise ValueError("the decoder holds unmerged LoRA layers; load it with merge_adapter=True to quantize it")
    blocks = getattr(decoder, "layers", None)
    kept: set[int] = set()
    if isinstance(blocks, nn.ModuleList) and float32_layers > 0:
        kept = {id(m) for block in list(blocks)[:min(float32_layers, len(blocks) - 1)] for m in block.modules()}
    targets = [(parent, name, child) for parent in decoder.modules() for name, child in parent.named_children()
               if type(child) is nn.Linear and id(child) not in kept]
    try:
        replacements = [Int8Linear.from_linear(child, outliers) for _, _, child in targets]
    except (AttributeError, NotImplementedError, RuntimeError) as e:
        raise ValueError(f"int8 needs torch's fbgemm operators (torch.ops.quantized.linear_prepack / linear_dynamic), "
                         f"which this torch build cannot run ({type(e).__name__}: {str(e)[:200]}); use "
                         "quantize=None") from e
    for (parent, name, _), new in zip(targets, replacements):
        setattr(parent, name, new)
    logger.info("int8 (%s engine): %d linear layers quantized (%d left float32), %d outlier channels each", engine,
                len(targets), sum(type(m) is nn.Linear for m in decoder.modules()), outliers)
    return len(targets)


def is_quantized(module: nn.Module) -> bool:
    """True when any layer of ``module`` is an ``Int8Linear``."""
    return any(isinstance(m, Int8Linear) for m in module.modules())


class Int8Linear(nn.Module):
    """``x @ W.T + b`` with int8 weights and per-token int8 activations; see the module docstring."""

    def __init__(self, weight: Tensor, bias: Tensor | None, outliers: int = DEFAULT_OUTLIERS):
        super().__init__()
        weight = weight.detach().float().contiguous()  # (N, K)
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        self.outliers = max(0, min(int(outliers), self.in_features - 1))
        scale = weight.abs().amax(dim=1).clamp(min=1e-12) / WEIGHT_LEVELS
        with warnings.catch_warnings():  # quantized tensors are deprecated in torch; the fbgemm kernels still run
            warnings.filterwarnings("ignore", message=".*quantized tensor creation functions", category=UserWarning)
            q = torch.quantize_per_channel(weight, scale.double(), torch.zeros_like(scale, dtype=torch.long), 0,
                                           torch.qint8)
        self._packed = torch.ops.quantized.linear_prepack(q, None)
        # float32 and transposed (K, N): an outlier channel's weights are one contiguous row to gather
        self.register_buffer("weight_t", weight.t().contiguous(), persistent=False)
        self.register_buffer("bias", None if bias is None else bias.detach().float().clone(), persistent=False)

    @classmethod
    def from_linear(cls, linear: nn.Linear, outliers: int = DEFAULT_OUTLIERS) -> "Int8Linear":
        return cls(linear.weight, linear.bias, outliers)

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape
        x = x.reshape(-1, self.in_features).float()  # (M, K)
        magnitude = x.abs()
        if self.outliers:
            cols = magnitude.amax(dim=0).topk(self.outliers).indices  # the channels that would set the scales
            magnitude.index_fill_(1, cols, 0.0)
        rows = magnitude.amax(dim=1, keepdim=True).clamp_(min=1e-12)  # (M, 1): one scale per token
        scaled = x / rows  # a new tensor: the caller's is never changed
        if self.outliers:
            scaled.index_fill_(1, cols, 0.0)
        y = torch.ops.quantized.linear_dynamic(scaled, self._packed, reduce_range=False).mul_(rows)
        if self.outliers:  # the outlier channels' share, in float32
            y.addmm_(x.index_select(1, cols), self.weight_t.index_select(0, cols))
        if self.bias is not None:
            y += self.bias
        return y.reshape(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, outliers={self.outliers}"


def _engine() -> str:
    engine = torch.backends.quantized.engine
    if engine not in ENGINES:
        usable = [e for e in torch.backends.quantized.supported_engines if e in ENGINES]
        hint = (f"set torch.backends.quantized.engine = {usable[0]!r} first" if usable else
                "this torch build has none of them: use quantize=None")
        raise ValueError(f"int8 needs torch's quantized engine {' or '.join(ENGINES)}, but it is {engine!r}; {hint}")
    return engine
