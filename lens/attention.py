"""Switch a decoder between causal and bidirectional attention.

transformers 5.x builds a bidirectional mask when ``config.is_causal`` is False. That alone is not enough:
when no padding mask is needed the mask is skipped and SDPA / flash attention fall back to each attention
module's own ``is_causal`` flag, which would silently make attention causal again. So both are set here, and
the tests check the behaviour (position 0 sees the last token), not the version.

A backbone's sliding window (Mistral, Qwen2 with ``use_sliding_window``) is cleared in both modes: LENS attends
over the whole text, as the paper's reference does, and as ``lens.layers``' own mask (the training path over a
cached prefix) does, so that training and encoding see the same attention whatever the text's length.
"""

from __future__ import annotations

import logging

from torch import nn

logger = logging.getLogger(__name__)

MODES = ("bidirectional", "causal")
TESTED_FAMILIES = ("llama", "mistral", "qwen2")


def set_attention_mode(model: nn.Module, mode: str) -> nn.Module:
    """Make every attention layer of ``model`` causal or bidirectional, in place; returns the model."""
    if mode not in MODES:
        raise ValueError(f"attention mode {mode!r} is not one of {MODES}")
    causal = mode == "causal"
    config = getattr(model, "config", None)
    if config is None:
        raise TypeError(f"expected a transformers model with a .config, got {type(model).__name__}")
    if config.model_type not in TESTED_FAMILIES:
        logger.warning(
            "attention switching is tested for %s; %r may need checking (see tests/test_attention.py)",
            TESTED_FAMILIES,
            config.model_type,
        )
    config.is_causal = causal
    flags = 0
    for module in model.modules():
        if isinstance(getattr(module, "is_causal", None), bool):
            module.is_causal = causal
            flags += 1
        sub_config = getattr(module, "config", None)
        if sub_config is not None and sub_config is not config:
            sub_config.is_causal = causal
    if flags == 0:
        raise ValueError(f"found no attention module with an is_causal flag in {type(model).__name__}")
    _clear_sliding_window(model, config)
    return model


def _clear_sliding_window(model: nn.Module, config) -> None:
    """Make every layer of ``model`` attend over the whole sequence: its config's and its modules' sliding window
    (and the layer types that select a windowed mask) cleared, in place."""
    window, types = getattr(config, "sliding_window", None), getattr(config, "layer_types", None) or []
    if window is None and "sliding_attention" not in types:
        return
    config.sliding_window = None
    if getattr(config, "use_sliding_window", False):
        config.use_sliding_window = False
    if types:
        config.layer_types = ["full_attention" if t == "sliding_attention" else t for t in types]
    for module in model.modules():
        if isinstance(getattr(module, "sliding_window", None), int):
            module.sliding_window = None
        if getattr(module, "has_sliding_layers", False) is True:
            module.has_sliding_layers = False
        for name in ("attention_type", "layer_type"):
            if getattr(module, name, None) == "sliding_attention":
                setattr(module, name, "full_attention")
    logger.debug("sliding window %s cleared: LENS attends over the whole text", window)


def attention_mode(model: nn.Module) -> str:
    """The mode the model's config says it is in."""
    return "causal" if getattr(model.config, "is_causal", True) else "bidirectional"
