"""Two LoRA adapters stacked into one, exactly.

A model trained on top of another one's merged weights (``lens merge BOTTOM``, then ``lens train`` from it) is the
backbone plus two low-rank updates: ``W + s1 B1 A1 + s2 B2 A2``. That sum is itself one LoRA update of rank
``r1 + r2``: ``A = [A1; A2]`` and ``B = [s1 B1 | s2 B2]`` at scale 1 (``lora_alpha = r``). Shipping it that way keeps
the small form (the backbone by reference, e.g. the packaged GGUF, and an adapter) instead of a merged backbone.

``stack_lora`` is the arithmetic on tensors; ``stack_adapter_dirs`` reads and writes PEFT adapter directories.
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


def stack_lora(bottom: Mapping[str, np.ndarray], bottom_scale: float, top: Mapping[str, np.ndarray],
               top_scale: float) -> dict[str, np.ndarray]:
    """One adapter's tensors (scale 1) whose update is ``bottom_scale * B1 A1 + top_scale * B2 A2`` on every module.

    Both must adapt the same modules (the same ``...lora_A.weight`` / ``...lora_B.weight`` names). Pure arithmetic in
    float32; the caller picks the stored precision.
    """
    if set(bottom) != set(top):
        only = sorted(set(bottom) ^ set(top))[:3]
        raise ValueError(f"the two adapters adapt different modules (e.g. {only}): stacking needs the same targets "
                         "and layers in both")
    out: dict[str, np.ndarray] = {}
    for name in bottom:
        if name.endswith(_A):
            a1, a2 = (np.asarray(t[name], dtype=np.float32) for t in (bottom, top))
            if a1.shape[1] != a2.shape[1]:
                raise ValueError(f"{name}: input sizes differ ({a1.shape[1]} vs {a2.shape[1]})")
            out[name] = np.concatenate([a1, a2], axis=0)
        elif name.endswith(_B):
            b1, b2 = (np.asarray(t[name], dtype=np.float32) for t in (bottom, top))
            if b1.shape[0] != b2.shape[0]:
                raise ValueError(f"{name}: output sizes differ ({b1.shape[0]} vs {b2.shape[0]})")
            out[name] = np.concatenate([bottom_scale * b1, top_scale * b2], axis=1)
        else:
            raise ValueError(f"{name}: not a LoRA A or B matrix; only plain LoRA adapters can be stacked")
    return out


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
    if config.get("rank_pattern") or config.get("alpha_pattern") or config.get("modules_to_save"):
        raise ValueError(f"{path}: per-module ranks, alphas or fully trained modules are not supported by stacking")
    return config


def stack_adapter_dirs(bottom: str | os.PathLike, top: str | os.PathLike, out: str | os.PathLike,
                       dtype=np.float16, fraction: float = 1.0) -> Path:
    """Write into ``out`` one PEFT adapter equal to ``bottom``'s update plus ``top``'s (``top`` trained on the
    weights ``bottom`` merged into its backbone), ``top``'s times ``fraction`` (1: all of it; 0.5: the weights half
    way from ``bottom``'s to ``top``'s). Its base model is ``bottom``'s; weights stored as ``dtype``."""
    from safetensors.numpy import load_file, save_file

    bottom, top, out = Path(bottom), Path(top), Path(out)
    c1, c2 = _read_config(bottom), _read_config(top)
    if sorted(c1["target_modules"]) != sorted(c2["target_modules"]):
        raise ValueError(f"the adapters target different modules: {sorted(c1['target_modules'])} vs "
                         f"{sorted(c2['target_modules'])}")
    tensors = stack_lora(load_file(bottom / ADAPTER_WEIGHTS), lora_scale(c1), load_file(top / ADAPTER_WEIGHTS),
                         fraction * lora_scale(c2))
    rank = int(c1["r"]) + int(c2["r"])
    config = {**c1, "r": rank, "lora_alpha": rank}  # scale 1: the scales are folded into B
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: np.ascontiguousarray(v.astype(dtype)) for k, v in tensors.items()}, str(out / ADAPTER_WEIGHTS))
    write_json(out / ADAPTER_CONFIG, config)
    return out
