"""Data-parallel training over processes started by ``torchrun`` or ``accelerate launch``.

Both launchers set ``WORLD_SIZE``, ``RANK`` and ``LOCAL_RANK`` (and ``MASTER_ADDR`` / ``MASTER_PORT``);
``init_from_env`` reads them and joins the process group: NCCL with one GPU per process (``cuda:LOCAL_RANK``), or
gloo on CPU. Without them training runs in one process, exactly as before.

How a step is split. Every rank runs the same plan (it comes from the seed), so every rank knows the step's
global batch. Rank r encodes a contiguous slice (``shard_slice``) of its queries and of its documents;
``gather_with_grad`` all-gathers the slices with autograd (``torch.distributed.nn.functional.all_gather``), so
every rank evaluates the objective on the global batch, exactly as one process would.

How gradients are scaled. Every rank computes the same loss L. The backward of ``all_gather`` is a
reduce-scatter that sums the ranks' gradients, so rank r's vectors receive ``world * dL/d(its vectors)`` and its
parameter gradients are ``world`` times its share of dL/dθ; the BCE bias, used after the gather, gets the whole
dL/db on every rank. Averaging every trainable gradient over the ranks (``all_reduce_gradients``) therefore
gives exactly the single-process dL/dθ and dL/db (the tests check it to 1e-5).

Why not ``DistributedDataParallel``: a step runs the model several times before its backward (queries, then
documents; with the cached loss a no-grad pass and a re-run per chunk) and the bias lives outside the model,
which DDP handles only with ``no_sync`` and unused-parameter bookkeeping. One all-reduce of the trainable
gradients (LoRA and head: about 117 M values for Mistral-7B with r=32 and k=8000) after the backward is exact and
simple; what it gives up is DDP's overlap of that communication with the backward, small next to a 7B step.
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass
from typing import Iterable

import torch
import torch.distributed as dist
from torch import Tensor

logger = logging.getLogger(__name__)

__all__ = [
    "DistributedContext", "all_reduce_gradients", "all_reduce_mean", "any_rank", "barrier", "check_same",
    "gather_pieces", "gather_with_grad", "init_from_env", "rank_seed", "shard_sizes", "shard_slice",
]


@dataclass(frozen=True)
class DistributedContext:
    """Where this process sits: ``world_size`` processes, this one ``rank`` (``local_rank`` on its node)."""

    world_size: int = 1
    rank: int = 0
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    backend: str | None = None  # "nccl" / "gloo"; None in a single process
    owns_group: bool = False  # init_from_env created the process group (close() destroys it)

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that writes checkpoints, logs, curves and the model."""
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    def barrier(self) -> None:
        barrier(self)

    def close(self, wait: bool = True) -> None:
        """Leave the process group if this context created it (at the end of ``lens train``).

        With ``wait`` every rank first waits for the others, so none tears its connections down while a peer is
        still inside the last collective (one CI run saw rank 1 abort at exit, "terminate called without an
        active exception", after rank 0 had destroyed the gloo group and finished). After a failure pass
        ``wait=False``: the other ranks may be inside another collective, and a barrier would hang."""
        if self.owns_group and dist.is_initialized():
            if wait:
                barrier(self)
            dist.destroy_process_group()


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from None


def init_from_env(device: str | None = None) -> DistributedContext:
    """The context of this process, joining the process group when launched by torchrun / accelerate.

    ``device`` is the config's (None: CUDA when present, else CPU). Distributed on CUDA, each process takes
    ``cuda:LOCAL_RANK`` and NCCL; on CPU, gloo. A process group that already exists is reused (and left open).
    """
    kind = device or ("cuda" if torch.cuda.is_available() else "cpu")
    initialized = dist.is_available() and dist.is_initialized()
    world = dist.get_world_size() if initialized else _env_int("WORLD_SIZE", 1)
    if world <= 1:
        return DistributedContext(device=torch.device(kind))
    if not dist.is_available():
        raise RuntimeError(f"WORLD_SIZE={world} but this torch build has no torch.distributed")
    rank = dist.get_rank() if initialized else _env_int("RANK", -1)
    if not 0 <= rank < world:
        raise ValueError(f"RANK must be set to 0..{world - 1} when WORLD_SIZE={world} (launch with torchrun or "
                         f"accelerate launch), got {os.environ.get('RANK')!r}")
    local_rank = _env_int("LOCAL_RANK", rank)
    if torch.device(kind).type == "cuda":
        if torch.device(kind).index is not None:
            raise ValueError(f"device {kind!r} names one GPU, but each of the {world} processes takes its own "
                             "(cuda:LOCAL_RANK); set device to 'cuda'")
        if local_rank >= torch.cuda.device_count():
            raise ValueError(f"LOCAL_RANK={local_rank} but this node has {torch.cuda.device_count()} GPU(s); "
                             "launch at most one process per GPU (--nproc_per_node)")
        where = torch.device("cuda", local_rank)
        torch.cuda.set_device(where)
        backend = "nccl"
    else:
        where, backend = torch.device(kind), "gloo"
    owns = False
    if not initialized:
        dist.init_process_group(backend, rank=rank, world_size=world)
        owns = True
    else:
        backend = str(dist.get_backend())
    logger.info("distributed: rank %d of %d (local rank %d) on %s, backend %s", rank, world, local_rank, where,
                backend)
    return DistributedContext(world, rank, local_rank, where, backend, owns)


def shard_slice(n: int, rank: int, world: int) -> slice:
    """Rank ``rank``'s contiguous share of ``n`` items: sizes differ by at most one, the first ranks take the
    extra ones (as ``numpy.array_split``), and the slices of ranks 0..world-1 tile ``range(n)`` in order."""
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"rank must lie in 0..{world - 1} for world size {world}, got {rank}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    base, extra = divmod(n, world)
    start = rank * base + min(rank, extra)
    return slice(start, start + base + (1 if rank < extra else 0))


def shard_sizes(n: int, world: int) -> list[int]:
    """The length of every rank's ``shard_slice`` of ``n`` items, in rank order."""
    return [len(range(n)[shard_slice(n, r, world)]) for r in range(world)]


def gather_pieces(tensor: Tensor, sizes: list[int] | None = None) -> list[Tensor]:
    """Every rank's ``tensor`` (first dimensions may differ), in rank order, with gradients.

    ``sizes`` are the ranks' first dimensions when known (otherwise they are exchanged first). Shorter tensors
    are padded for the collective and cut back after. When gradients are on, the input is made to require one:
    the backward of the gather is itself a collective, so every rank must run it, even one with no rows.
    """
    world, rank = dist.get_world_size(), dist.get_rank()
    if sizes is None:
        mine = torch.tensor([tensor.shape[0]], device=tensor.device)
        every = [torch.zeros_like(mine) for _ in range(world)]
        dist.all_gather(every, mine)
        sizes = [int(s) for s in every]
    if len(sizes) != world or sizes[rank] != tensor.shape[0]:
        raise ValueError(f"sizes {sizes} do not match world size {world} and this rank's {tensor.shape[0]} rows")
    if torch.is_grad_enabled() and not tensor.requires_grad:
        tensor = tensor.detach().requires_grad_()
    longest = max(sizes)
    if tensor.shape[0] < longest:
        tensor = torch.cat([tensor, tensor.new_zeros((longest - tensor.shape[0], *tensor.shape[1:]))])
    from torch.distributed.nn.functional import all_gather

    with warnings.catch_warnings():  # deprecated in favour of a private module; its autograd is what we need
        warnings.simplefilter("ignore", FutureWarning)
        pieces = all_gather(tensor)
    return [p[:s] for p, s in zip(pieces, sizes)]


def gather_with_grad(tensor: Tensor, sizes: list[int] | None = None) -> Tensor:
    """The ranks' ``tensor``s concatenated along the first dimension, in rank order, with gradients
    (see ``gather_pieces``; the backward sums the ranks' gradients)."""
    return torch.cat(gather_pieces(tensor, sizes))


def all_reduce_gradients(params: Iterable[Tensor], ctx: DistributedContext) -> None:
    """Average ``.grad`` over the ranks in place (float32 buffers, one all-reduce per device).

    A parameter with no gradient on some rank (its slice was empty) counts as zero there; one with no gradient on
    every rank (a loss term this step does not use) keeps ``None``, as in one process, so the optimiser skips it.
    """
    if not ctx.enabled:
        return
    params = list(params)
    if not params:
        return
    present = torch.tensor([p.grad is not None for p in params], dtype=torch.int32, device=ctx.device)
    dist.all_reduce(present, op=dist.ReduceOp.MAX)
    for p, has in zip(params, present.tolist()):
        if has and p.grad is None:
            p.grad = torch.zeros_like(p)
    grads = [p.grad for p in params if p.grad is not None]
    by_device: dict[torch.device, list[Tensor]] = {}
    for g in grads:
        by_device.setdefault(g.device, []).append(g)
    for device, group in by_device.items():
        flat = torch.cat([g.detach().reshape(-1).float() for g in group])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat /= ctx.world_size
        offset = 0
        for g in group:
            g.copy_(flat[offset: offset + g.numel()].view_as(g))
            offset += g.numel()


def all_reduce_mean(value: float | Tensor, ctx: DistributedContext) -> float:
    """The mean of a number over the ranks (the number itself in one process)."""
    if not ctx.enabled:
        return float(value)
    t = torch.tensor([float(value)], dtype=torch.float64, device=ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return float(t) / ctx.world_size


def any_rank(flag: bool, ctx: DistributedContext) -> bool:
    """True on every rank when ``flag`` is true on any (the flag itself in one process)."""
    if not ctx.enabled:
        return bool(flag)
    t = torch.tensor([1 if flag else 0], dtype=torch.int64, device=ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(int(t))


def check_same(value: int, ctx: DistributedContext, what: str) -> None:
    """Raise on every rank when the ranks disagree on an integer (a step read from a checkpoint, say)."""
    if not ctx.enabled:
        return
    t = torch.tensor([value, -value], dtype=torch.int64, device=ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    high, low = int(t[0]), -int(t[1])
    if high != low:
        raise RuntimeError(f"the ranks disagree on {what}: values from {low} to {high}")


def barrier(ctx: DistributedContext) -> None:
    """Wait for every rank (nothing in one process)."""
    if ctx.enabled:
        if ctx.backend == "nccl":
            dist.barrier(device_ids=[ctx.local_rank])
        else:
            dist.barrier()


def rank_seed(seed: int, rank: int, step: int) -> int:
    """The torch seed of ``rank`` at ``step`` for what is random per rank (LoRA dropout): distinct across ranks and
    steps, and a function of the step alone, so a run resumed on any number of ranks draws the same."""
    return (seed * 1_000_003 + step * 10_007 + rank + 1) % (2 ** 63)
