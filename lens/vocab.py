"""The method's first step as one call: cluster a backbone's LM head and write a LENS model directory.

``lens cluster-vocab`` and the cluster-count ablation both call ``cluster_vocab``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path


from lens.clustering import BACKENDS, cluster_rows, identity_clustering, size_summary
from lens.config import ClusteringConfig, LensConfig
from lens.inputs import check_text_normalization
from lens.model_dir import write_model_dir

logger = logging.getLogger(__name__)

__all__ = ["VocabClustering", "cluster_vocab"]


@dataclass
class VocabClustering:
    """What ``cluster_vocab`` wrote, for its closing summary."""

    path: Path
    backbone: str
    num_clusters: int
    num_excluded: int
    seconds: float
    sizes: dict  # lens.clustering.size_summary
    objective: float  # final KMeans objective (0 for the unclustered vocabulary)


def backbone_context(ref) -> int | None:
    """The positions a transformers backbone directory was built for (``max_position_embeddings`` in its
    ``config.json``); None for a GGUF file or when its config does not say."""
    if ref.gguf_file is not None:
        return None
    try:
        n = json.loads((Path(ref.directory) / "config.json").read_text(encoding="utf-8")).get("max_position_embeddings")
    except (OSError, ValueError, AttributeError):
        return None
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def cluster_vocab(
    out: str | os.PathLike,
    model: str | os.PathLike = "default",
    clusters: int | str = 4000,
    *,
    iterations: int = 20,
    seed: int = 0,
    backend: str = "faiss",
    exclude_special: bool = False,
    compact: bool = False,
    attention: str = "bidirectional",
    text_normalization: str | None = None,
    term_floor: float | None = None,
    logit_position: str = "next",
    term_channel: bool = False,
    echo: bool = False,
    show_progress_bar: bool = False,
) -> VocabClustering:
    """KMeans on ``model``'s LM-head rows into ``clusters`` groups (``"vocab"``: one per token), written to ``out``.

    The same seed gives byte-identical files. ``compact`` leaves the centroids out: they are the cluster means,
    recomputed from the (hash-checked) backbone on loading. ``attention`` is what the decoder will use, saved in
    the config (the paper: ``"bidirectional"``; ``"causal"`` keeps the backbone's pretrained mask), and so are the
    text rule (``text_normalization``: ``lens.inputs.TEXT_NORMALIZATIONS``), the own-token floor (``term_floor``)
    and which position's logits stand for a token (``logit_position``: ``lens.pooling.LOGIT_POSITIONS``), and
    whether the model gets the explicit term channel (``term_channel``, trained by ``lens train``) and echo input
    (``echo``: each text written twice, the second copy pooled; ``lens.inputs``).
    """
    from lens.attention import MODES
    from lens.backbone import load_lm_head, load_tokenizer, matrix_sha256, resolve_backbone, special_token_ids

    if attention not in MODES:
        raise ValueError(f"unknown attention {attention!r}; valid: {', '.join(MODES)}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown clustering backend {backend!r}; valid: {', '.join(BACKENDS)}")
    check_text_normalization(text_normalization)
    if term_floor is not None and not 0.0 <= term_floor <= 1.0:
        raise ValueError(f"term_floor must be within [0, 1] (a share of the heaviest weight), got {term_floor!r}")
    from lens.pooling import check_logit_position

    check_logit_position(logit_position)
    start = time.perf_counter()
    ref = resolve_backbone(model)
    matrix = load_lm_head(ref)
    tokenizer = load_tokenizer(ref)
    exclude: list[int] = []
    if exclude_special:
        exclude = special_token_ids(tokenizer, len(matrix))
    unused = list(range(len(tokenizer), len(matrix)))  # padding rows no token id reaches (Qwen2's 151,936 for 151,665)
    if unused:
        logger.info("leaving out the LM head's %d rows past the tokenizer's %d tokens (no text can produce them)",
                    len(unused), len(tokenizer))
        exclude = sorted(set(exclude) | set(unused))
    logger.info("LM head %d x %d from %s; excluding %d tokens", *matrix.shape, ref.reference, len(exclude))
    if clusters == "vocab":
        result = identity_clustering(matrix, exclude)
    else:
        result = cluster_rows(matrix, int(clusters), iterations=iterations, seed=seed, backend=backend,
                              exclude=exclude, show_progress_bar=show_progress_bar)
    k = len(result.centroids)
    context = backbone_context(ref)
    lengths = {}
    if context is not None and context < LensConfig.max_length:  # positions it never saw: cut texts there instead
        logger.info("the backbone has %d positions: texts are cut at %d tokens (not %d)", context, context,
                    LensConfig.max_length)
        lengths["max_length"] = context
    config = LensConfig(
        **lengths,
        backbone=ref.reference,
        attention=attention,
        text_normalization=text_normalization,
        term_floor=term_floor,
        logit_position=logit_position,
        term_channel=term_channel,
        echo=echo,
        clustering=ClusteringConfig(
            num_clusters=k, vocab_size=int(matrix.shape[0]), hidden_size=int(matrix.shape[1]),
            lm_head_sha256=matrix_sha256(matrix), seed=seed, iterations=iterations, backend=backend,
            exclude_special=exclude_special, num_excluded=len(exclude),
        ),
    )
    write_model_dir(out, config, result.assignment, None if compact else result.centroids, tokenizer)
    return VocabClustering(Path(out), ref.reference, k, len(exclude), time.perf_counter() - start,
                           size_summary(result.sizes), float(result.objective[-1]))
