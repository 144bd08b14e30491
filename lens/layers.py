"""Run a decoder's layers in two parts: a frozen lower part and a trainable upper part.

Training LoRA on the top layers only means the lower layers give the same output for a text at every step, so
their output can be computed once (``no_grad``) and cached. These functions reproduce the decoder's own forward
(embeddings, rotary positions, the layers, the final norm) for Llama-style decoders (Llama, Mistral, Qwen2) with
an explicit attention mask, so ``upper(lower(x))`` equals the decoder's ``last_hidden_state``; a test checks it.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from lens.attention import attention_mode
from lens.inputs import position_ids


def num_layers(decoder: nn.Module) -> int:
    return len(decoder.layers)


def attention_bias(attention_mask: Tensor, dtype: torch.dtype, causal: bool) -> Tensor:
    """Additive (B, 1, L, L) mask (``(B, 1, 1, L)``, broadcast over queries, when not causal): 0 where a query may attend to a key, the dtype's minimum elsewhere.

    Keys that are padding are always masked; ``causal`` also masks keys to the right. Padded query rows still
    see the real keys, so no row is fully masked (no NaN).
    """
    keys = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, L)
    allowed = keys
    if causal:
        L = attention_mask.shape[1]
        tri = torch.ones(L, L, dtype=torch.bool, device=attention_mask.device).tril()
        allowed = allowed & tri[None, None]
        allowed = allowed | ~keys.any(-1, keepdim=True)  # guard: an all-padding row attends to everything
    bias = torch.zeros(allowed.shape, dtype=dtype, device=attention_mask.device)
    return bias.masked_fill(~allowed, torch.finfo(dtype).min)


def run_layers(decoder: nn.Module, hidden: Tensor, attention_mask: Tensor, start: int, end: int,
               checkpoint: bool = False) -> Tensor:
    """Hidden states after layers ``[start, end)`` given the hidden states entering layer ``start``.

    ``start == 0`` takes ``hidden`` as the token embeddings. No final norm (see ``final_norm``). ``checkpoint``
    recomputes each layer in the backward pass instead of keeping its activations (gradient checkpointing).
    """
    if not 0 <= start <= end <= num_layers(decoder):
        raise ValueError(f"layer range [{start}, {end}) is outside 0..{num_layers(decoder)}")
    if start == end:
        return hidden
    causal = attention_mode(decoder) == "causal"
    pos = position_ids(attention_mask)
    mask = attention_bias(attention_mask, hidden.dtype, causal)
    rotary = decoder.rotary_emb(hidden, position_ids=pos)
    for layer in decoder.layers[start:end]:
        kwargs = dict(attention_mask=mask, position_embeddings=rotary, position_ids=pos, use_cache=False)
        if checkpoint and torch.is_grad_enabled():
            from torch.utils.checkpoint import checkpoint as recompute

            hidden = recompute(layer, hidden, use_reentrant=False, **kwargs)
        else:
            hidden = layer(hidden, **kwargs)
    return hidden


def embed(decoder: nn.Module, input_ids: Tensor) -> Tensor:
    return decoder.embed_tokens(input_ids)


def final_norm(decoder: nn.Module, hidden: Tensor) -> Tensor:
    return decoder.norm(hidden)


def lower(decoder: nn.Module, input_ids: Tensor, attention_mask: Tensor, split: int) -> Tensor:
    """Hidden states entering layer ``split`` (the frozen part's output)."""
    return run_layers(decoder, embed(decoder, input_ids), attention_mask, 0, split)


def upper(decoder: nn.Module, hidden: Tensor, attention_mask: Tensor, split: int, checkpoint: bool = False) -> Tensor:
    """Last hidden states (normed) from the hidden states entering layer ``split``."""
    return final_norm(decoder, run_layers(decoder, hidden, attention_mask, split, num_layers(decoder), checkpoint))
