"""A training run's resumable state: LoRA adapter, cluster head, BCE bias, optimiser moments, RNG and step.

``lens train`` saves all of it; the MNTP warm-up (``lens.train.mntp``) has no head or bias to train and saves
the rest.

Written as safetensors + JSON (no pickles) into one directory, replaced atomically, so an interrupted save
leaves the previous checkpoint whole.

Nothing in it depends on the number of processes: the state is the same on every rank, the step is the global
step of a plan every rank derives from the seed, so a run written by N ranks resumes on M. (The RNG state is rank
0's; distributed runs reseed per rank and step instead, see ``lens.train.distributed.rank_seed``.)
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Mapping

import torch
from torch import Tensor, nn

from lens.atomic import atomic_dir, atomic_write_bytes, read_json, write_json

__all__ = ["load_checkpoint", "save_checkpoint"]

STATE_TENSORS = "state.safetensors"
STATE_JSON = "state.json"


def save_checkpoint(path: str | Path, *, peft_model: nn.Module | None, optimizer: torch.optim.Optimizer, step: int,
                    plan_length: int, head: Tensor | None = None, bias: Tensor | None = None,
                    world_size: int = 1, extra: Mapping[str, Tensor] | None = None,
                    inputs_sha256: str | None = None, config: Mapping | None = None) -> None:
    """Write the state after ``step`` optimiser steps of a plan of ``plan_length`` steps to ``path``
    (``world_size``, the number of processes that ran them, is recorded for people; resuming ignores it);
    ``extra`` names more trained tensors (the term channel's), restored by ``load_checkpoint``'s ``extra``;
    ``inputs_sha256`` identifies what the run trains on (its start model and examples), checked on resume;
    ``config``, the run's settings, is kept with the state (``checkpoint_config``), so a resume is checked against
    the settings the state was made with, whatever has been written beside it since."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save

    tensors = {} if peft_model is None else {
        f"adapter.{k}": v.detach().cpu().contiguous() for k, v in get_peft_model_state_dict(peft_model).items()}
    if head is not None:
        tensors["head"] = head.detach().cpu().contiguous()
    if bias is not None:
        tensors["bias"] = bias.detach().cpu().reshape(1)
    for name, value in (extra or {}).items():
        tensors[f"extra.{name}"] = value.detach().cpu().contiguous()
    tensors["rng"] = torch.get_rng_state()
    state = optimizer.state_dict()
    for idx, st in state["state"].items():
        for name, value in st.items():
            tensors[f"optim.{idx}.{name}"] = torch.as_tensor(value).detach().cpu().contiguous()
    groups = [{k: v for k, v in g.items() if k != "params"} | {"params": g["params"]} for g in state["param_groups"]]
    with atomic_dir(path) as tmp:
        atomic_write_bytes(tmp / STATE_TENSORS, save(tensors))
        write_json(tmp / STATE_JSON, {"step": step, "param_groups": groups, "plan_length": plan_length,
                                      "world_size": world_size, "inputs_sha256": inputs_sha256,
                                      **({"config": dict(config)} if config is not None else {})})


def checkpoint_step(path: str | Path) -> int | None:
    """The step the checkpoint in ``path`` was saved at, or None when there is none there (or it is unreadable)."""
    try:
        return int(read_json(Path(path) / STATE_JSON, "checkpoint state")["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def discard_checkpoint(path: str | Path) -> None:
    """Remove the checkpoint in ``path`` of a run started again (``--overwrite``): the old state must not outlive
    it, or a crash then ``--resume`` would go on from it."""
    if Path(path).is_dir():
        shutil.rmtree(path)


def checkpoint_config(path: str | Path) -> dict | None:
    """The settings the checkpoint in ``path`` was written under, or None (written before they were kept)."""
    config = read_json(Path(path) / STATE_JSON, "checkpoint state").get("config")
    return config if isinstance(config, dict) else None


def load_checkpoint(path: str | Path, *, peft_model: nn.Module | None, optimizer: torch.optim.Optimizer,
                    plan_length: int,
                    device: torch.device, head: Tensor | None = None, bias: Tensor | None = None,
                    extra: Mapping[str, Tensor] | None = None, inputs_sha256: str | None = None) -> int:
    """Restore the state saved in ``path`` in place; returns the step to continue from. A checkpoint that records
    other ``inputs_sha256`` (another start model or other examples) is refused."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    path = Path(path)
    meta = read_json(path / STATE_JSON, "checkpoint state")
    saved_inputs = meta.get("inputs_sha256")
    if saved_inputs and inputs_sha256 and saved_inputs != inputs_sha256:
        raise ValueError(f"{path} was written by a run on another start model or other training examples (the "
                         "data files or the model changed since); resume with the same --model and data, or train "
                         "to a new --out")
    if meta["plan_length"] != plan_length:
        raise ValueError(f"{path} was written for a plan of {meta['plan_length']} steps, this config makes "
                         f"{plan_length}; resume with the same config and data")
    try:
        tensors = load_file(path / STATE_TENSORS)
    except Exception as e:  # safetensors' own error types for a damaged file
        raise ValueError(f"{path / STATE_TENSORS} cannot be read ({e}); delete {path} to start over") from e
    adapter = {k[len("adapter."):]: v for k, v in tensors.items() if k.startswith("adapter.")}
    if (peft_model is None) != (not adapter):
        raise ValueError(f"{path} was written by a run {'with' if adapter else 'without'} LoRA layers, this config "
                         f"has {'none' if peft_model is None else 'some'}; resume with the same config")
    if peft_model is not None:
        set_peft_model_state_dict(peft_model, adapter)
    targets = [("head", head), ("bias", bias)] + [(f"extra.{k}", v) for k, v in (extra or {}).items()]
    for name, target in targets:
        if target is None:
            continue
        if name not in tensors:
            raise ValueError(f"{path} holds no {name}: it was not written by `lens train`; resume the run that "
                             "wrote it")
        with torch.no_grad():
            target.copy_(tensors[name].reshape(target.shape))
    torch.set_rng_state(tensors["rng"])
    state: dict = {"state": {}, "param_groups": meta["param_groups"]}
    for key, value in tensors.items():
        if key.startswith("optim."):
            _, idx, name = key.split(".", 2)
            state["state"].setdefault(int(idx), {})[name] = value.to(device) if name != "step" else value
    optimizer.load_state_dict(state)
    return int(meta["step"])
