"""Pooling maths for LENS, as pure functions over tensors.

Shapes: B batch, L sequence length, H hidden size, K clusters.

A token's lexicon feature is the cluster logits at its *left neighbour* (the position that predicts it), so a
mask over tokens becomes a mask over logit positions by a shift of one to the left (``shift_left``). The
weight of cluster c is then ``pool_t log(1 + relu(h_t . w_c))`` over the masked positions t. Logits are made
chunk by chunk along the sequence so the (B, L, K) tensor never exists at once.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

import torch
from torch import Tensor

DEFAULT_CHUNK_ELEMENTS = 1 << 24  # B * chunk * K logits per step: 64 MB in float32


def shift_left(token_mask: Tensor) -> Tensor:
    """Mask over logit positions from a mask over tokens: ``out[:, j] = token_mask[:, j + 1]``, last = 0.

    The first token of a sequence has no left neighbour, so it can never be pooled: LENS puts a BOS or the
    instruction before every text.
    """
    out = torch.zeros_like(token_mask)
    out[:, :-1] = token_mask[:, 1:]
    return out


def _chunk_len(batch: int, length: int, k: int, chunk_elements: int) -> int:
    return max(1, min(length, chunk_elements // max(1, batch * k)))


def lexicon_logits(hidden: Tensor, head: Tensor) -> Tensor:
    """Cluster logits ``(B, T, K)`` from hidden states ``(B, T, H)`` and the head ``(K, H)``."""
    return hidden @ head.t()


def max_pool(hidden: Tensor, head: Tensor, mask: Tensor, chunk_elements: int = DEFAULT_CHUNK_ELEMENTS, *,
             upcast: bool = False) -> Tensor:
    """``max_t log1p(relu(logit_t))`` over masked positions -> (B, K); a row with no position gives zeros.

    ``log1p(relu(.))`` is monotone, so the max is taken over raw logits and the activation applied once.
    ``upcast`` applies it to the logits in float32 (the released checkpoints' precision; exact: the max of
    half-precision logits is one of them).
    """
    B, L, _ = hidden.shape
    K = head.shape[0]
    step = _chunk_len(B, L, K, chunk_elements)
    best = None
    for s in range(0, L, step):
        logits = lexicon_logits(hidden[:, s : s + step], head)  # (B, T, K); its dtype may differ under autocast
        m = mask[:, s : s + step, None].bool()
        logits = logits.masked_fill(~m, float("-inf"))  # -inf in any dtype; relu(-inf) = 0 for empty rows
        top = logits.amax(dim=1)
        best = top if best is None else torch.maximum(best, top)
    return torch.log1p(torch.relu(best.float() if upcast else best))


def sum_pool(hidden: Tensor, head: Tensor, mask: Tensor, chunk_elements: int = DEFAULT_CHUNK_ELEMENTS, *,
             upcast: bool = False) -> Tensor:
    """``sum_t log1p(relu(logit_t))`` over masked positions -> (B, K) (the paper's sum-pooling ablation);
    ``upcast``: in float32."""
    B, L, _ = hidden.shape
    K = head.shape[0]
    step = _chunk_len(B, L, K, chunk_elements)
    total = hidden.new_zeros((B, K), dtype=torch.float32 if upcast else None)
    for s in range(0, L, step):
        logits = lexicon_logits(hidden[:, s : s + step], head)
        acts = torch.log1p(torch.relu(logits.float() if upcast else logits))
        total = total + (acts * mask[:, s : s + step, None].to(acts.dtype)).sum(dim=1)
    return total


def last_pool(hidden: Tensor, head: Tensor, mask: Tensor, chunk_elements: int = DEFAULT_CHUNK_ELEMENTS, *,
              upcast: bool = False) -> Tensor:
    """``log1p(relu(logit))`` at the last masked position of each row -> (B, K); zeros for an empty row;
    ``upcast``: in float32."""
    last = last_index(mask)
    rows = hidden[torch.arange(hidden.shape[0], device=hidden.device), last.clamp(min=0)]  # (B, H)
    logits = rows @ head.t()
    acts = torch.log1p(torch.relu(logits.float() if upcast else logits))
    return acts * (last >= 0)[:, None].to(acts.dtype)


def last_index(mask: Tensor) -> Tensor:
    """Index of the last nonzero entry of each row of a (B, L) mask; -1 where the row is empty."""
    L = mask.shape[1]
    positions = torch.arange(L, device=mask.device).expand_as(mask)
    return torch.where(mask.bool(), positions, torch.full_like(positions, -1)).amax(dim=1)


def mean_pool(hidden: Tensor, mask: Tensor) -> Tensor:
    """Mean of hidden states over masked positions -> (B, H); zeros for an empty row."""
    m = mask[..., None].to(hidden.dtype)
    return (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)


def term_floor(weights: np.ndarray, clusters: Sequence[np.ndarray], floor: float) -> np.ndarray:
    """Exact match kept: each row's own-token clusters raised to at least ``floor`` x the row's largest weight.

    ``weights`` (B, K) are pooled lexicon weights (before normalisation); ``clusters[b]`` the clusters of row b's own
    tokens (negative ids, tokens left out of every cluster, are ignored). A weight is only ever raised (merged by
    max), so expansion is kept; the floor is relative to the row's maximum, so the rule is the same for a vector
    and any positive multiple of it (it commutes with L2 normalisation). Returns a new array.
    """
    if not 0.0 <= floor <= 1.0:
        raise ValueError(f"term floor must be within [0, 1] (a share of the heaviest weight), got {floor!r}")
    if len(clusters) != weights.shape[0]:
        raise ValueError(f"{len(clusters)} cluster lists for {weights.shape[0]} rows")
    out = np.array(weights, dtype=np.float32, copy=True)
    for b, own in enumerate(clusters):
        own = np.unique(np.asarray(own, dtype=np.int64))
        own = own[own >= 0]
        if own.size:
            out[b, own] = np.maximum(out[b, own], floor * out[b].max())
    return out


# The term channel's starting bias: every own token weighs log1p(1) = 0.69 before training (w starts at zero, so
# all of a text's tokens start equal; a bias of 0 would sit on relu's kink, where no gradient flows).
TERM_BIAS_INIT = 1.0


def term_weights(hidden: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """Each position's own-term weight ``log1p(relu(h_t . w + b))`` -> (B, L), from hidden states (B, L, H), a
    weight vector (H,) and a scalar bias: the explicit term channel (uniCOIL-style), one saturated weight per token,
    read at the token's own position (which has seen the token under causal attention too)."""
    return torch.log1p(torch.relu(hidden @ weight + bias))


def merge_terms(lexicon: Tensor, clusters: Tensor, weights: Tensor, mask: Tensor) -> Tensor:
    """``lexicon`` (B, K) with the cluster of each masked position raised to at least that position's weight.

    ``clusters`` (B, L) is each position's token's cluster (negative: a token in no cluster, left out), ``weights``
    (B, L) the term weights (``term_weights``), ``mask`` (B, L) the positions whose tokens count. Merged by max, so
    the expansion is kept and a cluster hit twice keeps its heaviest term; gradients reach whichever weight wins.
    """
    keep = mask.bool() & (clusters >= 0)
    w = torch.where(keep, weights.to(lexicon.dtype), torch.zeros((), dtype=lexicon.dtype, device=lexicon.device))
    return lexicon.scatter_reduce(1, clusters.clamp(min=0), w, reduce="amax", include_self=True)


def floor_terms(lexicon: Tensor, clusters: Tensor, mask: Tensor, floor: float) -> Tensor:
    """``term_floor`` on pooled weights in torch, differentiable (the model applies it, so training sees it): each
    masked position's token cluster (``clusters`` (B, L), negative: none) raised to at least ``floor`` x its row's
    largest weight, merged by max (``merge_terms``)."""
    if not 0.0 <= floor <= 1.0:
        raise ValueError(f"term floor must be within [0, 1] (a share of the heaviest weight), got {floor!r}")
    weights = (floor * lexicon.amax(dim=1, keepdim=True)).expand(-1, clusters.shape[1])
    return merge_terms(lexicon, clusters, weights, mask)


POOLING: dict[str, Callable[..., Tensor]] = {"max": max_pool, "sum": sum_pool, "last": last_pool}

# Which position's logits stand for a token (``LensConfig.logit_position``): "next", the paper's, is the position
# before it (the logits that predict it: ``shift_left``), which under causal attention has never seen the token, so
# the lexicon can only predict a word, not copy it; "own" is the token's own position (LACONIC-style own logits),
# which has seen it and can learn to keep it (issue 39's exact-terms lever). A mask over tokens -> over positions.
LOGIT_POSITIONS: dict[str, Callable[[Tensor], Tensor]] = {"next": shift_left, "own": lambda token_mask: token_mask}


def check_logit_position(position: str) -> str:
    """``position`` if it names a ``LOGIT_POSITIONS`` entry, else a ValueError listing the valid names."""
    if position not in LOGIT_POSITIONS:
        raise ValueError(f"unknown logit_position {position!r}; valid: {sorted(LOGIT_POSITIONS)}")
    return position


def logit_mask(token_mask: Tensor, position: str = "next") -> Tensor:
    """The mask over logit positions that pools the tokens of ``token_mask`` (``LOGIT_POSITIONS[position]``)."""
    return LOGIT_POSITIONS[check_logit_position(position)](token_mask)


def get_pooling(name: str) -> Callable[..., Tensor]:
    """The pooling function registered under ``name``."""
    try:
        return POOLING[name]
    except KeyError:
        raise ValueError(f"unknown pooling {name!r}; valid: {sorted(POOLING)}") from None
