"""One text at a time through fixed-shape forwards, replayed from captured CUDA graphs (issue 42).

A single query costs a GPU little arithmetic but hundreds of kernel launches from Python: `encode_queries` on an
H100 took 18-25 ms p50 one query at a time, against 4.0 ms for the same forward replayed from a CUDA graph
(`benchmarks/results/speed_gpu.md`, fixed-shape path). A graph needs fixed shapes, so a text is padded to the
smallest length bucket that holds it (the attention mask hides the padding, so its vector does not change: 3e-8
in that run) and each bucket's graph is captured the first time it is needed. Longer texts, and batches, take
the ordinary path.

``FixedShapeForward(model, pad_id, side, buckets, mode)``: ``mode`` "cudagraph" (CUDA only) or "eager" (the same
padded forward run directly: what the tests compare on a CPU). A graph reads the weights where they were at
capture, so the graphs are dropped and captured again when any parameter has moved (a new adapter, ``.to()``).
A capture that fails is logged once and turns the path off: the encoder goes on with its ordinary path.
"""

from __future__ import annotations

import logging
import threading
from typing import Sequence

import numpy as np
import torch

from lens.inputs import Encoded, pad_batch

logger = logging.getLogger(__name__)

DEFAULT_BUCKETS = (32, 64, 128)  # tokens; a query behind the default instruction is ~40 (SciFact's: mean 42)
MODES = ("cudagraph", "eager")


class FixedShapeForward:
    """Raw (lexicon, dense) float32 rows of one encoded text from a forward of fixed shape (1, bucket)."""

    def __init__(self, model: torch.nn.Module, pad_id: int, side: str, buckets: Sequence[int] = DEFAULT_BUCKETS,
                 mode: str = "cudagraph"):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        buckets = sorted({int(b) for b in buckets})
        if not buckets or buckets[0] < 2:
            raise ValueError(f"buckets must be token lengths of at least 2, got {buckets!r}")
        self.model, self.pad_id, self.side, self.buckets, self.mode = model, pad_id, side, buckets, mode
        self.enabled = True
        self.off_reason: str | None = None  # why the path turned itself off (the capture's error)
        self._lock = threading.Lock()  # one set of static buffers per bucket: one text at a time
        self._graphs: dict[int, tuple[dict[str, torch.Tensor], object, object]] = {}
        self._weights: tuple[int, ...] | None = None

    def fits(self, item: Encoded) -> bool:
        """Whether ``item`` can take this path (it is on, and the text fits the largest bucket)."""
        return self.enabled and len(item.ids) <= self.buckets[-1]

    def __call__(self, item: Encoded) -> tuple[np.ndarray, np.ndarray] | None:
        """(lexicon, dense) of ``item``, unnormalised float32 as ``encode_items`` gives them; None when the path is
        off or cannot run (the caller then takes its ordinary path)."""
        if not self.fits(item):
            return None
        bucket = next(b for b in self.buckets if b >= len(item.ids))
        with self._lock, torch.inference_mode():
            try:
                static, graph, out = self._bucket(bucket)
            except Exception as e:  # a capture that fails must not break encoding: the ordinary path stays
                logger.warning("fixed-shape %s path turned off (bucket %d): %s: %s", self.mode, bucket,
                               type(e).__name__, e)
                self.enabled = False
                self.off_reason = f"{type(e).__name__}: {e}"
                self._graphs.clear()
                return None
            self._fill(static, item, bucket)
            if graph is not None:
                graph.replay()
            else:
                out = self.model(**static)
            return out.lexicon[0].float().cpu().numpy(), out.dense[0].float().cpu().numpy()

    # ------------------------------------------------------------------------------------------ internals
    def _fill(self, static: dict[str, torch.Tensor], item: Encoded, bucket: int) -> None:
        batch = pad_batch([item], self.pad_id, side=self.side)
        extra = bucket - batch["input_ids"].shape[1]
        pad = (0, extra) if self.side == "right" else (extra, 0)
        for k, v in batch.items():
            value = self.pad_id if k == "input_ids" else 0
            static[k].copy_(torch.nn.functional.pad(v, pad, value=value), non_blocking=True)

    def _bucket(self, bucket: int):
        weights = tuple(p.data_ptr() for p in self.model.parameters())
        if weights != self._weights:  # moved or replaced weights: graphs captured before would read stale memory
            self._graphs.clear()
            self._weights = weights
        if bucket not in self._graphs:
            self._graphs[bucket] = self._capture(bucket)
        return self._graphs[bucket]

    def _capture(self, bucket: int):
        device = next(self.model.parameters()).device
        static = {k: torch.zeros((1, bucket), dtype=torch.long, device=device)
                  for k in ("input_ids", "attention_mask", "pool_mask")}
        static["input_ids"].fill_(self.pad_id)
        static["attention_mask"][:, :2] = 1  # a two-token text to warm up and capture with
        static["pool_mask"][:, 1] = 1
        if self.mode == "eager":
            return static, None, None
        if device.type != "cuda":
            raise RuntimeError(f"CUDA graphs need a CUDA device; the model is on {device}")
        stream = torch.cuda.Stream(device)  # warm-up on a side stream, as torch.cuda.graphs asks
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            for _ in range(3):
                self.model(**static)
        torch.cuda.current_stream(device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = self.model(**static)
        logger.debug("captured a CUDA graph for texts of up to %d tokens", bucket)
        return static, graph, out
