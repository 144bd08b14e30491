"""LENS: lexicon-based text embeddings from causal LLMs.

The vocabulary's output embeddings are clustered, the clusters replace the LM head, the decoder attends both
ways, and a text's vector is the max over its positions of ``log(1 + relu(cluster logits))``.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["LensEncoder", "LensConfig", "__version__"]


def __getattr__(name: str):
    # Lazy: `import lens` (e.g. for the CLI's --help) must not pay for torch/transformers.
    if name == "LensEncoder":
        from lens.encoder import LensEncoder

        return LensEncoder
    if name == "LensConfig":
        from lens.config import LensConfig

        return LensConfig
    raise AttributeError(f"module 'lens' has no attribute {name!r}")
