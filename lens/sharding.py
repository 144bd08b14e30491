"""Encoding in several processes: a pool of worker processes (CPU, or one per GPU) or the ranks of ``torchrun``.

Work is split into contiguous shards (``lens.train.distributed.shard_slice``), one per worker or rank, so the
concatenation of the shards' results, in shard order, is what one process would have produced. Workers are started
with the ``spawn`` method (``torch.multiprocessing``; forking a process that already runs torch threads or CUDA is
unsafe) through ``concurrent.futures.ProcessPoolExecutor``, and each one uses ``torch threads // workers`` threads, so
N workers on one machine do not oversubscribe its cores. Each worker loads its own encoder from an
:class:`EncoderSpec` (a path and a dense kind, cheap to send) instead of receiving the parent's model.

Under ``torchrun`` (``WORLD_SIZE`` > 1) every rank runs the same command: :class:`RankGroup` joins the process group
(gloo on CPU, whatever device the encoder uses) and lets rank 0 prepare and finish the work while the others only
encode their shard; a failure on any rank is reported on every rank instead of leaving the others waiting.
"""

from __future__ import annotations

import logging
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Sequence

logger = logging.getLogger(__name__)

__all__ = [
    "EncoderSpec", "RankGroup", "check_devices", "encode_texts", "run_in_processes", "torchrun_rank", "worker_devices",
]

# how long ranks wait for each other at the end of the encoding (the slowest rank's whole shard)
RANK_TIMEOUT = timedelta(days=7)


@dataclass(frozen=True)
class EncoderSpec:
    """How a worker loads the hybrid encoder: a LENS model (directory or ``"default"``) and a dense kind
    (``lens.hybrid.DENSE_KINDS``)."""

    model: str
    dense: str = "minilm"

    @classmethod
    def of(cls, encoder) -> "EncoderSpec":
        """The spec of a loaded ``HybridEncoder`` (its LENS model must have been loaded from a directory)."""
        source = getattr(encoder.lens, "source_dir", None)
        if source is None:
            raise ValueError("this encoder was built in memory, so worker processes cannot load it again; save it "
                             "(save_pretrained) and pass EncoderSpec(directory, dense)")
        return cls(str(source), encoder.dense_kind)

    def load(self, device: str | None = None):
        """A ``HybridEncoder`` with both models on ``device`` (None: each model's default)."""
        from lens.encoder import LensEncoder
        from lens.hybrid import SEPARATE_DENSE, HybridEncoder, load_dense

        dense = load_dense(self.dense, device) if self.dense in SEPARATE_DENSE else None
        return HybridEncoder(LensEncoder.from_pretrained(self.model, device=device), self.dense, dense)


_LOADED: dict[tuple, Any] = {}  # this worker process's encoders, by what was loaded and on which device
_THREADS: int | None = None  # this worker process's share of the machine's threads (set by the pool)


def load_encoder(spec: EncoderSpec, device: str | None):
    """``spec.load(device)``, once per worker process (a worker may run more than one shard)."""
    return _load_once((spec, device), lambda: spec.load(device))


def _load_once(key: tuple, load: Callable[[], Any]):
    """``load()`` the first time ``key`` is asked for in this process, then the same object; the first load also
    sets the worker's torch threads."""
    if key not in _LOADED:
        _LOADED[key] = load()
        _set_torch_threads()
    return _LOADED[key]


def _set_torch_threads() -> None:
    """In a pool worker that uses torch: ``torch.set_num_threads`` to its share (also set through the env)."""
    if _THREADS is not None and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(_THREADS)


# ---------------------------------------------------------------------------------------------- devices
def check_devices(devices: Sequence[str]) -> list[str]:
    """The devices as given, each checked: ``cpu``, ``cuda`` or ``cuda:N`` with N below the GPU count."""
    import torch

    out = []
    for name in devices:
        try:
            dev = torch.device(name)
        except (RuntimeError, TypeError):
            raise ValueError(f"device {name!r} is not a device name; give e.g. cuda:0,cuda:1 or cpu") from None
        if dev.type == "cuda":
            count = torch.cuda.device_count()
            if count == 0:
                raise ValueError(f"device {name!r}: this machine has no CUDA GPU visible to torch")
            if dev.index is not None and dev.index >= count:
                raise ValueError(f"device {name!r}: this machine has {count} GPU(s) (cuda:0..cuda:{count - 1})")
        elif dev.type != "cpu":
            raise ValueError(f"device {name!r}: only cpu and cuda devices are supported")
        out.append(str(dev))
    return out


def worker_devices(workers: int, devices: Sequence[str] | None) -> list[str]:
    """One device per worker: ``devices`` (their count is the worker count), else ``workers`` times ``cpu``."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer (processes encoding in parallel), got {workers!r}")
    if not devices:
        return ["cpu"] * workers
    devices = check_devices(devices)
    if workers not in (1, len(devices)):
        raise ValueError(f"{workers} workers but {len(devices)} devices ({', '.join(devices)}); each worker takes one "
                         "device: give as many devices as workers, or leave --workers out")
    return devices


# ---------------------------------------------------------------------------------------------- the pool
def _init_worker(threads: int) -> None:
    """Before the worker imports anything heavy: its share of threads for OpenMP / MKL, and for torch when the
    encoder loads (``torch.set_num_threads``)."""
    global _THREADS
    _THREADS = threads
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(threads)


def run_in_processes(fn: Callable[[Any], Any], tasks: Sequence[Any]) -> list[Any]:
    """``[fn(t) for t in tasks]``, each task in its own spawned process (``fn`` must be a module-level function).

    Every task runs to its end even when another fails (what they wrote is kept for a resume); then the first
    failure is raised. Each process gets ``torch.get_num_threads() // len(tasks)`` threads (at least 1).
    """
    import torch
    import torch.multiprocessing as tmp

    threads = max(1, torch.get_num_threads() // max(1, len(tasks)))  # the parent's threads, shared out
    results, failures = [], []
    with ProcessPoolExecutor(max_workers=len(tasks), mp_context=tmp.get_context("spawn"),
                             initializer=_init_worker, initargs=(threads,)) as pool:
        futures = [pool.submit(fn, task) for task in tasks]
        try:
            for i, future in enumerate(futures):
                try:
                    results.append(future.result())
                except Exception as e:  # noqa: BLE001 - reported below, after the other workers finish
                    failures.append((i, e))
                    results.append(None)
        except BaseException:  # Ctrl-C: the workers got it too; do not start the queued ones
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    if failures:
        i, e = failures[0]
        if hasattr(e, "add_note"):
            e.add_note(f"(in worker {i} of {len(tasks)}; {len(failures)} worker(s) failed)")
        raise e
    return results


# ---------------------------------------------------------------------------------------------- lens encode
@dataclass(frozen=True)
class _TextTask:
    model: str
    device: str
    texts: list[str]
    queries: bool
    instruction: str | None
    kwargs: dict


def _encode_texts_task(task: _TextTask):
    from lens.encoder import LensEncoder

    encoder = _load_once(("lens", task.model, task.device),
                         lambda: LensEncoder.from_pretrained(task.model, device=task.device))
    if task.queries:
        return encoder.encode_queries(task.texts, instruction=task.instruction, **task.kwargs)
    return encoder.encode_documents(task.texts, **task.kwargs)


def encode_texts(encoder, texts: Sequence[str], *, queries: bool = False, instruction: str | None = None,
                 workers: int = 1, devices: Sequence[str] | None = None, **kwargs: Any):
    """``encoder.encode_queries(texts, instruction=...)`` or ``encoder.encode_documents(texts)`` (a ``LensEncoder``;
    ``kwargs`` passed on), in ``workers`` processes (one per device of ``devices``) that each encode a contiguous
    share of the texts: the rows come back in input order, as one process gives them."""
    import numpy as np

    from lens.train.distributed import shard_slice

    devices = worker_devices(workers, devices)
    if len(devices) == 1 and devices[0] == "cpu":
        if queries:
            return encoder.encode_queries(texts, instruction=instruction, **kwargs)
        return encoder.encode_documents(texts, **kwargs)
    source = getattr(encoder, "source_dir", None)
    if source is None:
        raise ValueError("workers load the model from its directory, but this encoder was built in memory; save it "
                         "first (save_pretrained)")
    texts = list(texts)
    kwargs = {**kwargs, "show_progress_bar": False}  # several bars would interleave
    tasks = [_TextTask(str(source), dev, texts[shard_slice(len(texts), r, len(devices))], queries, instruction, kwargs)
             for r, dev in enumerate(devices)]
    parts = run_in_processes(_encode_texts_task, [t for t in tasks if t.texts])
    return np.concatenate(parts)


# ---------------------------------------------------------------------------------------------- torchrun
def torchrun_rank() -> tuple[int, int, int] | None:
    """``(rank, world_size, local_rank)`` when launched by torchrun with more than one process, else None."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    except ValueError:
        raise ValueError(f"environment variable WORLD_SIZE={os.environ['WORLD_SIZE']!r} is not an integer") from None
    if world <= 1:
        return None
    try:
        rank = int(os.environ["RANK"])
        local = int(os.environ.get("LOCAL_RANK", rank))
    except (KeyError, ValueError):
        raise ValueError(f"WORLD_SIZE={world} but RANK is not set to 0..{world - 1}; launch with torchrun") from None
    if not 0 <= rank < world:
        raise ValueError(f"RANK={rank} is outside 0..{world - 1} (WORLD_SIZE={world})")
    return rank, world, local


class RankGroup:
    """The ranks of one torchrun launch, for the two points where a build waits: after rank 0 prepared the work,
    and after every rank encoded its shard. Messages are errors (None: fine)."""

    def __init__(self) -> None:
        import torch.distributed as dist

        from lens.train.distributed import init_from_env

        self.ctx = init_from_env("cpu")  # gloo: these are CPU-side messages, the encoder picks its own device
        self.rank, self.world = self.ctx.rank, self.ctx.world_size
        self._group = dist.new_group(backend="gloo", timeout=RANK_TIMEOUT)

    def share(self, error: str | None) -> None:
        """Send rank 0's outcome (its error, or None) to every rank; the other ranks raise if it failed."""
        import torch.distributed as dist

        box = [error]
        dist.broadcast_object_list(box, src=0, group=self._group)
        if box[0] is not None and self.rank:
            raise ValueError(f"rank 0 failed: {box[0]}")

    def gather(self, error: str | None) -> list[tuple[int, str]]:
        """Wait for every rank (long timeout: the slowest rank's whole shard); returns the ranks that failed and
        their errors."""
        import torch.distributed as dist

        errors: list[str | None] = [None] * self.world
        dist.all_gather_object(errors, error, group=self._group)
        return [(r, e) for r, e in enumerate(errors) if e is not None]

    def close(self) -> None:
        self.ctx.close()
