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
``quantize="auto"`` (``resolve_quantize``) is int8 only on a CPU where a two-second probe, measured once per host and
cached, runs int8 clearly faster than float32 (~2x on some x86 hosts, 1.05-1.3x on others); else float32.
Outlier channels and the activation range are picked per call, and 8-bit rounding turns the last-bit differences of
float32 kernels that block a batch differently into whole steps, so a token's int8 output depends on the tokens in the
same call (texts batched together would move each other's vectors: cosine ~0.997, ``benchmarks/int8_batching.py``);
``LensEncoder`` therefore runs an int8 text in a forward of its own (``batch_invariant``), where its vector is a
function of the text alone.
The float32 weights are kept for the outlier columns (memory: float32 + int8 copies of the linear weights).

Why this operator: ``torch.ao.quantization`` and quantized tensors are deprecated in torch 2.13 in favour of torchao,
but torchao's int8 CPU paths run ``torch._int_mm``, ~40x slower than fbgemm here without ``torch.compile``, and
weight-only int8 (``torch._weight_int8pack_mm``) is slower than float32. ``torch.ops.quantized.linear_dynamic`` is
still there and ~1.7x float32's matrix throughput on an AVX2 core; if a torch build lacks it, quantizing fails with
a clear error and float32 still works.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import math
import platform
import time
import warnings
from pathlib import Path

import torch
from torch import Tensor, nn

from .host import cpu_info

logger = logging.getLogger(__name__)

AUTO = "auto"  # not a mode itself: resolve_quantize turns it into "int8" or None on this host
QUANTIZE_MODES = ("int8", AUTO)  # the valid quantize= values; None (the default everywhere) means float32
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
RECIPE_VERSION = 3  # 3: an encoder runs int8 texts one per forward (batch_invariant)
ENGINES = ("x86", "fbgemm")  # the quantized engines whose dynamic linear these settings are checked against


def check_quantize(quantize: str | None, device: str | torch.device | None = None) -> str | None:
    """``quantize`` if a concrete mode valid for ``device`` (None: float32, always valid), else a ValueError saying
    what to do. ``"auto"`` is refused here: ``resolve_quantize`` turns it into a concrete mode first."""
    if quantize is None:
        return None
    if quantize not in QUANTIZE_MODES:
        raise ValueError(f"unknown quantize {quantize!r}; valid: {', '.join(QUANTIZE_MODES)} (or None for float32)")
    if quantize == AUTO:
        raise ValueError("quantize='auto' is not a mode of its own: resolve it first with "
                         "lens.quantize.resolve_quantize('auto', device), which gives 'int8' or None (float32)")
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


# ------------------------------------------------------------------------------------------------ quantize="auto"
# int8 is not faster everywhere: fbgemm's int8 kernels gain ~2x over float32 on some x86 hosts and almost nothing on
# others (an AVX2-only host measured 1.05x for the whole model: int8 linear 68.7 GOP/s against float32 matmul 54.7
# GFLOP/s, where speed_encode.md's host has 812 against 119 per CPU-second). "auto" picks int8 only where a short
# timing on this host shows it clearly faster, once per host.
AUTO_MIN_SPEEDUP = 1.15  # int8 must run the probe at least this many times faster than float32
# The probe: one decoder block of the default's backbone (SmolLM2-135M: hidden 576, MLP 1536, 9 query heads, 3 key /
# value heads), its seven linear layers at their real shapes plus attention, norms and the gated MLP, over one text
# of 256 tokens. Float32 and int8 copies of it run in turn until the budget is spent; the best of each counts.
# It runs on one thread and counts that thread's CPU time: on a 2-core host shared with other jobs, wall-clock
# ratios at 2 threads swung from 0.59 to 0.92 between runs a minute apart (threads spinning while the other waited for
# a core), CPU-time ratios on one thread from 1.10 to 1.30, around the 1.25-1.3x that the whole model's encode
# measured there (16 pydoc passages, 2 threads, OMP_WAIT_POLICY=PASSIVE). Two seconds of repeats keep the best times
# close to an idle host's.
PROBE_SHAPE = {"hidden": 576, "intermediate": 1536, "heads": 9, "kv_heads": 3}
PROBE_TOKENS = (1, 256)  # (batch, length): one text of the default's max_seq_length (int8 runs one text per forward)
PROBE_BUDGET_S = 2.0
PROBE_REPEATS = (3, 50)  # at least, at most, each
PROBE_VERSION = 2  # bumped when the probe changes, so an older cached measurement is taken again


def resolve_quantize(mode: str | None, device: str | torch.device | None = None) -> str | None:
    """The concrete mode to load a model with on ``device`` (None: torch's default, CUDA when available): "int8" or
    None (float32), never "auto".

    A concrete ``mode`` is returned as ``check_quantize`` checks it. ``"auto"`` gives float32 on a GPU or wherever
    int8 cannot run, and on CPU "int8" only where the probe (``int8_speedup``: measured once per host, then read
    from the cache) ran int8 at least ``AUTO_MIN_SPEEDUP`` times faster than float32.
    """
    if mode != AUTO:
        return check_quantize(mode, device)
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"  # where lens.backbone.load_backbone puts a model
    if torch.device(device).type != "cpu":
        logger.info("quantize auto: float32 on %s (int8 is a CPU path)", device)
        return None
    try:
        speedup = int8_speedup()
    except ValueError as e:  # no fbgemm engine or operators in this torch build
        logger.info("quantize auto: float32 (int8 cannot run here: %s)", e)
        return None
    chosen = "int8" if speedup >= AUTO_MIN_SPEEDUP else None
    logger.info("quantize auto: %s (the int8 probe ran %.2fx float32's speed on this host; int8 needs %.2fx)",
                chosen or "float32", speedup, AUTO_MIN_SPEEDUP)
    return chosen


def int8_speedup(*, refresh: bool = False) -> float:
    """int8's speed over float32's on this host (``measure_int8_speedup``), cached per ``host_key()``.

    The cache is a small JSON file under LENS's cache directory (``lens.backbone.cache_root``: ``$LENS_CACHE_DIR`` or
    ``~/.cache/lens``; ``$LENS_NO_CACHE`` measures every time), written atomically; an unreadable, corrupt or
    foreign one is measured again and replaced. ``refresh`` measures again regardless.
    """
    from lens.atomic import write_json
    from lens.backbone import cache_root

    key = host_key()
    root = cache_root()
    path = None if root is None else root / "quantize-auto" / f"{_digest(key)}.json"
    if path is not None and not refresh:
        cached = _read_speedup(path, key)
        if cached is not None:
            return cached
    result = measure_int8_speedup()
    if path is not None:
        try:
            write_json(path, {"key": key, **result, "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        except OSError as e:  # lens.atomic.StorageError (read-only, full): still a result, measured next time again
            logger.warning("quantize auto: could not cache the measurement (%s); it is taken again next time", e)
    return float(result["speedup"])


def host_key() -> dict:
    """What a cached measurement holds for: the CPU (model, a hash of its flags), torch's version, thread count and
    quantized engine, and the int8 recipe and probe versions."""
    cpu, flags = cpu_info()
    return {"cpu": cpu, "cpu_flags": hashlib.sha256(flags.encode()).hexdigest()[:16], "machine": platform.machine(),
            "torch": torch.__version__, "threads": torch.get_num_threads(),
            "engine": torch.backends.quantized.engine, "recipe": RECIPE_VERSION, "probe": PROBE_VERSION}


def measure_int8_speedup(shape: dict | None = None, tokens: tuple[int, int] = PROBE_TOKENS,
                         budget_s: float = PROBE_BUDGET_S) -> dict:
    """Time the probe block (``PROBE_SHAPE`` unless ``shape``) in float32 and in int8 (``quantize_decoder``), in
    turn, on one thread (torch's thread count is restored after); returns the best CPU times (ms) and ``speedup``
    (float32 time / int8 time). Raises ValueError where int8 cannot run. The caller's random state is left as it
    was."""
    shape = dict(PROBE_SHAPE if shape is None else shape)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        block = _ProbeBlock(**shape).eval()
        x = torch.randn(*tokens, shape["hidden"])
    int8 = copy.deepcopy(block)
    quantize_decoder(int8, "int8", float32_layers=0)
    times: dict[str, list[float]] = {"float32": [], "int8": []}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # all the work in this thread: its CPU time is the kernels' time, whatever else runs
    try:
        with torch.inference_mode():
            block(x), int8(x)  # warm-up: first-call allocations and kernel selection
            start = time.perf_counter()
            while True:
                for name, module in (("float32", block), ("int8", int8)):
                    t0 = time.thread_time()
                    module(x)
                    times[name].append(time.thread_time() - t0)
                n = len(times["int8"])
                if n >= PROBE_REPEATS[1] or (n >= PROBE_REPEATS[0] and time.perf_counter() - start >= budget_s):
                    break
    finally:
        torch.set_num_threads(threads)
    best = {name: min(t) for name, t in times.items()}
    return {"float32_ms": round(best["float32"] * 1e3, 3), "int8_ms": round(best["int8"] * 1e3, 3),
            "speedup": best["float32"] / best["int8"], "repeats": n, "tokens": list(tokens), "shape": shape}


class _ProbeBlock(nn.Module):
    """A pre-norm decoder block (grouped-query attention, gated SiLU MLP) with a decoder's seven linear layers."""

    def __init__(self, hidden: int, intermediate: int, heads: int, kv_heads: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        kv = kv_heads * self.head_dim
        self.q_proj, self.o_proj = nn.Linear(hidden, hidden, bias=False), nn.Linear(hidden, hidden, bias=False)
        self.k_proj, self.v_proj = nn.Linear(hidden, kv, bias=False), nn.Linear(hidden, kv, bias=False)
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        self.norm1, self.norm2 = nn.RMSNorm(hidden), nn.RMSNorm(hidden)

    def forward(self, x: Tensor) -> Tensor:  # (B, T, H)
        b, t, _ = x.shape
        h = self.norm1(x)
        q = self.q_proj(h).view(b, t, self.heads, self.head_dim).transpose(1, 2)  # (B, heads, T, D)
        k, v = (p(h).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2) for p in (self.k_proj, self.v_proj))
        groups = self.heads // self.kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        a = nn.functional.scaled_dot_product_attention(q, k, v)
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, t, -1))
        h = self.norm2(x)
        return x + self.down_proj(nn.functional.silu(self.gate_proj(h)) * self.up_proj(h))


def _read_speedup(path: Path, key: dict) -> float | None:
    """The cached speedup at ``path`` if it is a valid measurement for ``key``, else None (logged)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:  # unreadable, not UTF-8, not JSON
        logger.warning("quantize auto: the cached measurement %s is unreadable (%s); measuring again", path, e)
        return None
    speedup = data.get("speedup") if isinstance(data, dict) else None
    valid = (isinstance(speedup, (int, float)) and not isinstance(speedup, bool) and math.isfinite(speedup)
             and speedup > 0)
    if not valid or data.get("key") != key:
        logger.warning("quantize auto: the cached measurement %s is not a valid one for this host; measuring again",
                       path)
        return None
    return float(speedup)


def _digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]

