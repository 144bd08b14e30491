"""The LENS model: a bidirectional decoder whose LM head is replaced by k cluster centroids."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from lens.attention import set_attention_mode
from lens.inputs import position_ids
from lens.layers import upper
from lens.pooling import DEFAULT_CHUNK_ELEMENTS, check_logit_position, get_pooling, logit_mask, mean_pool
from lens.quantize import is_quantized


class LensOutput(NamedTuple):
    lexicon: Tensor  # (B, K) cluster weights, >= 0, not normalised
    dense: Tensor  # (B, H) mean of last hidden states over the pooled positions


def decoder_of(causal_lm: nn.Module) -> nn.Module:
    """The decoder stack of a ``*ForCausalLM`` (its ``base_model``), without the LM head."""
    decoder = causal_lm.base_model
    if decoder is causal_lm:
        raise TypeError(f"{type(causal_lm).__name__} has no separate decoder (base_model)")
    return decoder


class LensModel(nn.Module):
    """Decoder + cluster head. The head is a new parameter, so a tied input embedding is never touched."""

    def __init__(
        self,
        decoder: nn.Module,
        centroids: Tensor,
        *,
        pooling: str = "max",
        attention: str = "bidirectional",
        chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
        upcast_logits: bool = False,
        logit_position: str = "next",
    ):
        super().__init__()
        check_logit_position(logit_position)
        hidden = decoder.config.hidden_size
        if centroids.ndim != 2 or centroids.shape[1] != hidden:
            raise ValueError(f"centroids must be (k, {hidden}) for this backbone, got {tuple(centroids.shape)}")
        self.decoder = set_attention_mode(decoder, attention)
        param = next(decoder.parameters())
        self.head = nn.Linear(hidden, centroids.shape[0], bias=False, device=param.device, dtype=param.dtype)
        with torch.no_grad():
            self.head.weight.copy_(centroids.to(param.dtype))
        self.pooling = pooling
        self._pool = get_pooling(pooling)
        self.chunk_elements = chunk_elements
        self.upcast_logits = upcast_logits  # log1p(relu) of the logits in float32 (the released checkpoints')
        self.logit_position = logit_position  # lens.pooling.LOGIT_POSITIONS: "next" (the paper's shift) or "own"

    @property
    def num_clusters(self) -> int:
        return self.head.weight.shape[0]

    def train(self, mode: bool = True) -> "LensModel":
        """``nn.Module.train``, refused for an int8 decoder (``lens.quantize``: packed weights, no gradients)."""
        if mode and is_quantized(self.decoder):
            raise ValueError("this model's decoder is quantized to int8 (inference only) and cannot be trained; "
                             "load the model without quantize= to train it")
        return super().train(mode)

    def hidden_states(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """Last hidden states (B, L, H); positions count real tokens only (left padding safe)."""
        out = self.decoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids(attention_mask),
            use_cache=False,
        )
        return out.last_hidden_state

    def pool(self, hidden: Tensor, attention_mask: Tensor, pool_mask: Tensor) -> LensOutput:
        """Lexicon and dense vectors from last hidden states (B, L, H); ``pool_mask`` marks the pooled tokens.

        A token's feature sits at its left neighbour (the logits predicting it), hence the shift; with
        ``logit_position="own"`` at its own position.
        """
        mask = logit_mask(pool_mask * attention_mask, self.logit_position)
        extra = {"upcast": True} if self.upcast_logits else {}
        lexicon = self._pool(hidden, self.head.weight, mask, self.chunk_elements, **extra)
        return LensOutput(lexicon, mean_pool(hidden, mask))

    def forward_from_layer(self, hidden: Tensor, attention_mask: Tensor, pool_mask: Tensor, layer: int,
                           checkpoint: bool = False) -> LensOutput:
        """``forward`` given the hidden states entering decoder layer ``layer`` (e.g. from a cache of the frozen
        layers below it); ``checkpoint`` recomputes each layer's activations in the backward pass."""
        last = upper(self.decoder, hidden, attention_mask, layer, checkpoint=checkpoint)
        return self.pool(last, attention_mask, pool_mask)

    def forward(self, input_ids: Tensor, attention_mask: Tensor, pool_mask: Tensor) -> LensOutput:
        """Lexicon and dense vectors from one forward pass; ``pool_mask`` marks the tokens that are pooled."""
        return self.pool(self.hidden_states(input_ids, attention_mask), attention_mask, pool_mask)
