"""The LENS model: a bidirectional decoder whose LM head is replaced by k cluster centroids."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

import torch
from torch import Tensor, nn

from lens.attention import set_attention_mode
from lens.inputs import position_ids
from lens.layers import upper
from lens.pooling import (DEFAULT_CHUNK_ELEMENTS, TERM_BIAS_INIT, check_logit_position, floor_terms, get_pooling,
                          logit_mask, mean_pool, merge_terms, term_weights)
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
        term_clusters: Tensor | None = None,
        term_channel: bool | None = None,
        term_floor: float | None = None,
    ):
        """``term_clusters`` (vocab,): each token's cluster (negative: none, e.g. special tokens), for the two
        own-token rules. ``term_channel`` (default: on when ``term_clusters`` is given) turns on the explicit term
        channel: each pooled token's cluster gets a learned weight from its own position, merged by max
        (``lens.pooling.merge_terms``); its weights start at ``TERM_BIAS_INIT`` for every token (``self.term``, trained
        with the head). ``term_floor`` (``LensConfig.term_floor``) raises each pooled token's cluster to at least
        that share of the vector's heaviest weight (``lens.pooling.floor_terms``), after the channel, in training as
        at inference."""
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
        self.term: nn.Linear | None = None
        if term_channel is None:
            term_channel = term_clusters is not None
        if (term_channel or term_floor is not None) and term_clusters is None:
            raise ValueError("the term channel and the term floor need term_clusters (each token's cluster)")
        if term_floor is not None and not 0.0 <= float(term_floor) <= 1.0:
            raise ValueError(f"term_floor must be within [0, 1] (a share of the heaviest weight), got {term_floor!r}")
        self.term_floor = None if term_floor is None else float(term_floor)
        if term_clusters is not None:
            self.register_buffer("term_clusters", term_clusters.to(device=param.device, dtype=torch.long),
                                 persistent=False)
        if term_channel:
            self.term = nn.Linear(hidden, 1, device=param.device, dtype=torch.float32)
            with torch.no_grad():
                self.term.weight.zero_()
                self.term.bias.fill_(TERM_BIAS_INIT)

    def term_vector(self) -> "np.ndarray | None":
        """The term channel's weight then bias, (hidden + 1,) float32 (what a model directory stores); None without
        one."""
        if self.term is None:
            return None
        return torch.cat([self.term.weight.detach()[0], self.term.bias.detach()]).float().cpu().numpy()

    def load_term_vector(self, vector: "np.ndarray") -> None:
        """Set the term channel's weight and bias from ``term_vector``'s layout."""
        if self.term is None:
            raise ValueError("this model has no term channel to load weights into")
        v = torch.as_tensor(vector, dtype=torch.float32).reshape(-1)
        if v.numel() != self.term.weight.shape[1] + 1:
            raise ValueError(f"term vector of {v.numel()} values for hidden size {self.term.weight.shape[1]}")
        with torch.no_grad():
            self.term.weight.copy_(v[:-1].reshape(1, -1))
            self.term.bias.copy_(v[-1:])

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

    def pool(self, hidden: Tensor, attention_mask: Tensor, pool_mask: Tensor,
             input_ids: Tensor | None = None) -> LensOutput:
        """Lexicon and dense vectors from last hidden states (B, L, H); ``pool_mask`` marks the pooled tokens.

        A token's feature sits at its left neighbour (the logits predicting it), hence the shift; with
        ``logit_position="own"`` at its own position. The term channel and the term floor (when on) need
        ``input_ids``.
        """
        tokens = pool_mask * attention_mask
        mask = logit_mask(tokens, self.logit_position)
        extra = {"upcast": True} if self.upcast_logits else {}
        lexicon = self._pool(hidden, self.head.weight, mask, self.chunk_elements, **extra)
        if (self.term is not None or self.term_floor is not None) and input_ids is None:
            raise ValueError("this model has a term channel or a term floor, which needs the input_ids to pool")
        if self.term is not None:
            weights = term_weights(hidden.float(), self.term.weight[0].float(), self.term.bias[0].float())
            lexicon = merge_terms(lexicon.float(), self.term_clusters[input_ids], weights, tokens)
        if self.term_floor is not None:
            lexicon = floor_terms(lexicon, self.term_clusters[input_ids], tokens, self.term_floor)
        return LensOutput(lexicon, mean_pool(hidden, mask))

    def forward_from_layer(self, hidden: Tensor, attention_mask: Tensor, pool_mask: Tensor, layer: int,
                           checkpoint: bool = False, input_ids: Tensor | None = None) -> LensOutput:
        """``forward`` given the hidden states entering decoder layer ``layer`` (e.g. from a cache of the frozen
        layers below it); ``checkpoint`` recomputes each layer's activations in the backward pass."""
        last = upper(self.decoder, hidden, attention_mask, layer, checkpoint=checkpoint)
        return self.pool(last, attention_mask, pool_mask, input_ids)

    def forward(self, input_ids: Tensor, attention_mask: Tensor, pool_mask: Tensor) -> LensOutput:
        """Lexicon and dense vectors from one forward pass; ``pool_mask`` marks the tokens that are pooled."""
        return self.pool(self.hidden_states(input_ids, attention_mask), attention_mask, pool_mask, input_ids)
