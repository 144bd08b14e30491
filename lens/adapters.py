"""Two LoRA adapters stacked into one, exactly.

A model trained on top of another one's merged weights (``lens merge BOTTOM``, then ``lens train`` from it) is the
backbone plus two low-rank updates: ``W + s1 B1 A1 + s2 B2 A2``. That sum is itself one LoRA update of rank
``r1 + r2``: ``A = [A1; A2]`` and ``B = [s1 B1 | s2 B2]`` at scale 1 (``lora_alpha = r``). Shipping it that way keeps
the small form (the backbone by reference, e.g. the packaged GGUF, and an adapter) instead of a merged backbone.
A module only one of them adapts gets zeros from the other, so a continuation of the top layers only (the CPU path)
stacks onto a model trained on every layer.

The stacked rank is ``r1 + r2``; ``truncate_lora`` brings it back to a chosen rank by a truncated SVD of each
module's update (the best approximation of that rank in the Frobenius norm, Eckart-Young), so a shipped adapter keeps
the size of one trained at that rank; what each module keeps of its update's energy is returned and recorded.

``stack_lora`` and ``truncate_lora`` are the arithmetic on tensors; ``stack_adapter_dirs`` reads and writes PEFT
adapter directories.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from lens.atomic import read_json, write_json

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
_A, _B = ".lora_A.weight", ".lora_B.weight"


def lora_scale(config: Mapping) -> float:
    """The factor PEFT multiplies ``B @ A`` by: ``lora_alpha / r``."""
    return float(config["lora_alpha"]) / float(config["r"])


def _rank(tensors: Mapping[str, np.ndarray]) -> int:
    """The rank of a plain LoRA adapter's tensors (every ``lora_A`` has it as its first size)."""
    ranks = {int(np.shape(t)[0]) for name, t in tensors.items() if name.endswith(_A)}
    if len(ranks) != 1:
        raise ValueError(f"an adapter with ranks {sorted(ranks)}: stacking needs one rank for every module")
    return ranks.pop()


def _factors(tensors: Mapping[str, np.ndarray], module: str, rank: int, n_in: int,
             n_out: int) -> tuple[np.ndarray, np.ndarray]:
    """``module``'s (A, B) in float32, or zeros of ``rank`` when the adapter leaves the module alone."""
    if module + _A not in tensors:
        return np.zeros((rank, n_in), np.float32), np.zeros((n_out, rank), np.float32)
    return (np.asarray(tensors[module + _A], dtype=np.float32), np.asarray(tensors[module + _B], dtype=np.float32))


def stack_lora(bottom: Mapping[str, np.ndarray], bottom_scale: float, top: Mapping[str, np.ndarray],
               top_scale: float) -> dict[str, np.ndarray]:
    """One adapter's tensors (scale 1) whose update is ``bottom_scale * B1 A1 + top_scale * B2 A2`` on every module.

    A module only one of the two adapts gets a zero update from the other (its rows of ``A`` and columns of ``B``
    are zeros), so a continuation trained on the top layers only (``lora_layers``, the CPU path over a cached
    prefix) stacks onto a model trained on all of them. Pure arithmetic in float32; the caller picks the stored
    precision.
    """
    for name in (*bottom, *top):
        if not name.endswith((_A, _B)):
            raise ValueError(f"{name}: not a LoRA A or B matrix; only plain LoRA adapters can be stacked")
    r1, r2 = _rank(bottom), _rank(top)
    out: dict[str, np.ndarray] = {}
    for module in sorted({n[: -len(_A if n.endswith(_A) else _B)] for n in (*bottom, *top)}):
        a_name, b_name = module + _A, module + _B
        held = [t for t in (bottom, top) if a_name in t or b_name in t]
        if any((a_name in t) != (b_name in t) for t in held):
            raise ValueError(f"{module}: an adapter holds only one of its lora_A and lora_B matrices")
        n_in, n_out = np.shape(held[0][a_name])[1], np.shape(held[0][b_name])[0]
        (a1, b1), (a2, b2) = _factors(bottom, module, r1, n_in, n_out), _factors(top, module, r2, n_in, n_out)
        if a1.shape[1] != a2.shape[1]:
            raise ValueError(f"{a_name}: input sizes differ ({a1.shape[1]} vs {a2.shape[1]})")
        if b1.shape[0] != b2.shape[0]:
            raise ValueError(f"{b_name}: output sizes differ ({b1.shape[0]} vs {b2.shape[0]})")
        out[a_name] = np.concatenate([a1, a2], axis=0)
        out[b_name] = np.concatenate([bottom_scale * b1, top_scale * b2], axis=1)
    return out


def truncate_lora(tensors: Mapping[str, np.ndarray], rank: int) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Scale-1 LoRA tensors whose update ``B @ A`` on each module is the best rank-``rank`` approximation of the
    given one's, and for each module the share of its update's squared Frobenius norm that is kept (1.0: exact).

    Each update ``B A`` (``B``: out x r, ``A``: r x in) is factored through thin QRs of ``B`` and ``A^T`` and the SVD
    of their r x r core, so the out x in matrix is never formed; the singular values are split evenly (square roots)
    between the new ``B`` and ``A``. Modules already at or under ``rank`` are returned as they are."""
    if rank < 1:
        raise ValueError(f"a LoRA rank must be at least 1, got {rank}")
    out: dict[str, np.ndarray] = {}
    kept: dict[str, float] = {}
    for a_name in sorted(n for n in tensors if n.endswith(_A)):
        module = a_name[: -len(_A)]
        b_name = module + _B
        if b_name not in tensors:
            raise ValueError(f"{module}: an adapter holds only one of its lora_A and lora_B matrices")
        a, b = np.asarray(tensors[a_name], np.float64), np.asarray(tensors[b_name], np.float64)
        if a.shape[0] <= rank:
            out[a_name], out[b_name], kept[module] = tensors[a_name], tensors[b_name], 1.0
            continue
        qb, rb = np.linalg.qr(b)
        qa, ra = np.linalg.qr(a.T)
        u, sv, vt = np.linalg.svd(rb @ ra.T, full_matrices=False)
        k = min(rank, sv.size)  # a module narrower than rank has fewer directions: the rest are zeros
        root = np.sqrt(sv[:k])
        new_b, new_a = np.zeros((b.shape[0], rank), np.float32), np.zeros((rank, a.shape[1]), np.float32)
        new_b[:, :k], new_a[:k] = (qb @ u[:, :k]) * root, root[:, None] * (vt[:k] @ qa.T)
        out[b_name], out[a_name] = new_b, new_a
        total = float(np.sum(sv ** 2))
        kept[module] = float(np.sum(sv[:k] ** 2) / total) if total > 0 else 1.0
    return out, kept


def _names(targets) -> list[str]:
    """PEFT's ``target_modules`` as a list (it may be one name, or a regular expression PEFT matches whole)."""
    if isinstance(targets, str):
        raise ValueError(f"target_modules {targets!r} is a pattern; stacking needs a list of module names")
    return list(targets)


def _read_config(directory: Path) -> dict:
    path = directory / ADAPTER_CONFIG
    if not path.is_file():
        raise FileNotFoundError(f"{directory} is not a PEFT adapter directory (no {ADAPTER_CONFIG})")
    config = read_json(path, "PEFT adapter config")
    if config.get("peft_type") != "LORA":
        raise ValueError(f"{path}: peft_type {config.get('peft_type')!r}; only LoRA adapters can be stacked")
    # under these the update is not scale * B @ A on the listed modules alone
    for key, value in (("use_dora", config.get("use_dora")), ("use_rslora", config.get("use_rslora")),
                       ("bias", config.get("bias", "none") != "none" and config.get("bias"))):
        if value:
            raise ValueError(f"{path}: {key}={value!r} is not a plain LoRA update; stacking supports none")
    if (config.get("rank_pattern") or config.get("alpha_pattern") or config.get("modules_to_save")
            or config.get("layers_to_transform") is not None):
        raise ValueError(f"{path}: per-module ranks or alphas, layer subsets (layers_to_transform) or fully trained "
                         "modules are not supported by stacking")
    return config


def stack_adapter_dirs(bottom: str | os.PathLike, top: str | os.PathLike, out: str | os.PathLike,
                       dtype=np.float16, fraction: float = 1.0, rank: int | None = None) -> dict[str, float]:
    """Write into ``out`` one PEFT adapter equal to ``bottom``'s update plus ``top``'s (``top`` trained on the
    weights ``bottom`` merged into its backbone), ``top``'s times ``fraction`` (1: all of it; 0.5: the weights half
    way from ``bottom``'s to ``top``'s). Its base model is ``bottom``'s; weights stored as ``dtype``. ``rank``
    (default: exact, ``r1 + r2``) truncates each module's update to that rank (``truncate_lora``). Returns the
    share of each module's update energy kept (all 1.0 when exact)."""
    from safetensors.numpy import load_file, save_file

    bottom, top, out = Path(bottom), Path(top), Path(out)
    c1, c2 = _read_config(bottom), _read_config(top)
    tensors = stack_lora(load_file(bottom / ADAPTER_WEIGHTS), lora_scale(c1), load_file(top / ADAPTER_WEIGHTS),
                         fraction * lora_scale(c2))
    stacked = int(c1["r"]) + int(c2["r"])
    kept = {name[: -len(_A)]: 1.0 for name in tensors if name.endswith(_A)}
    if rank is not None and rank < stacked:
        tensors, kept = truncate_lora(tensors, rank)
    rank = stacked if rank is None else min(rank, stacked)
    targets = list(dict.fromkeys([*_names(c1["target_modules"]), *_names(c2["target_modules"])]))  # both's modules
    config = {**c1, "r": rank, "lora_alpha": rank, "target_modules": targets}  # scale 1: the scales are folded into B
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: np.ascontiguousarray(v.astype(dtype)) for k, v in tensors.items()}, str(out / ADAPTER_WEIGHTS))
    write_json(out / ADAPTER_CONFIG, config)
    return kept
