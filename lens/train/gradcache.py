"""The cached contrastive loss (GradCache; Gao et al. 2021, "Scaling Deep Contrastive Learning Batch Size under
Memory Limited Setup"): a batch of any size with the activation memory of one chunk, and the same loss and
gradients as the whole batch in one pass.

A contrastive loss couples every query with every document, so a batch cannot simply be cut into micro-batches
(each would see only its own negatives). But the loss depends on the model only through the embeddings, so:

1. embed the queries and documents chunk by chunk under ``no_grad`` (no activations kept);
2. compute the loss on those embeddings, made leaves that require gradients, and backpropagate to them:
   this gives dL/d(embedding) for every text (and the gradients of parameters used only in the loss, such as
   the BCE bias);
3. embed each chunk again, now with gradients, and call ``backward(gradient=...)`` with that chunk's rows of
   dL/d(embedding): the chain rule then accumulates exactly dL/dθ in the parameters, chunk by chunk.

The random state before each chunk's first pass is replayed for its second, so dropout draws the same masks.
The loss function may all-gather the embeddings across ranks (``lens.train.distributed``): step 2 then runs the
gather's backward, and step 3 only this rank's chunks. Gradient checkpointing inside the model composes: it
recomputes activations within step 3.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Sequence

import torch
from torch import Tensor

__all__ = ["GradCache"]

Embed = Callable[[list], Tensor]  # texts (any items) -> (n, K) embeddings, with gradients when enabled
LossFn = Callable[[Tensor, Tensor], tuple[Tensor, dict]]  # (queries, documents) -> (loss, per-term values)


class _RandomState:
    """The CPU and current CUDA generators' states, to replay a chunk's random draws."""

    def __init__(self):
        self.cpu = torch.get_rng_state()
        self.cuda_device = torch.cuda.current_device() if torch.cuda.is_initialized() else None
        self.cuda = torch.cuda.get_rng_state(self.cuda_device) if self.cuda_device is not None else None

    @contextlib.contextmanager
    def replay(self) -> Iterator[None]:
        """A context in which the generators start from this state; the outer state comes back after it."""
        devices = [self.cuda_device] if self.cuda_device is not None else []
        with torch.random.fork_rng(devices=devices):
            torch.set_rng_state(self.cpu)
            if self.cuda is not None:
                torch.cuda.set_rng_state(self.cuda, self.cuda_device)
            yield


class GradCache:
    """Chunked forward and backward of a loss over (queries, documents) embeddings; see the module docstring."""

    def __init__(self, embed: Embed, chunk_size: int):
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.embed = embed
        self.chunk_size = chunk_size

    def _chunks(self, items: Sequence) -> list[list]:
        return [list(items[s: s + self.chunk_size]) for s in range(0, len(items), self.chunk_size)]

    def _first_pass(self, items: Sequence) -> tuple[Tensor, list[_RandomState]]:
        """Embeddings of ``items`` without activations, and the random state before each chunk."""
        states, parts = [], []
        with torch.no_grad():
            for chunk in self._chunks(items):
                states.append(_RandomState())
                parts.append(self.embed(chunk))
            reps = torch.cat(parts) if parts else self.embed([])
        return reps.detach().requires_grad_(), states

    def _second_pass(self, items: Sequence, states: list[_RandomState], grad: Tensor | None) -> None:
        """Re-embed each chunk with gradients and push its rows of dL/d(embedding) into the parameters."""
        if grad is None:  # the loss did not depend on these embeddings
            return
        for i, (chunk, state) in enumerate(zip(self._chunks(items), states)):
            with state.replay():
                out = self.embed(chunk)
            if out.requires_grad:
                start = i * self.chunk_size
                out.backward(gradient=grad[start: start + len(chunk)].to(out.dtype))

    def backward(self, queries: Sequence, documents: Sequence, loss_fn: LossFn,
                 divide_by: int = 1) -> tuple[Tensor, dict]:
        """Accumulate the gradients of ``loss_fn(q, d) / divide_by`` into the parameters; returns the (undivided,
        detached) loss and ``loss_fn``'s per-term values."""
        q, q_states = self._first_pass(queries)
        d, d_states = self._first_pass(documents)
        loss, terms = loss_fn(q, d)
        (loss / divide_by).backward()
        self._second_pass(queries, q_states, q.grad)
        self._second_pass(documents, d_states, d.grad)
        return loss.detach(), terms
