"""LENS in MTEB (the ``mteb`` extra, mteb >= 2): ``LensMTEBEncoder`` follows mteb's ``EncoderProtocol``.

mteb calls ``encode`` with a DataLoader of batches, the task's metadata and a prompt type. The prompt type picks
the side: a query, or a text of a symmetric task (STS, classification, clustering, pair classification,
summarization: no prompt type), gets the task's instruction behind the model's query template and is pooled
without it; a document gets none. The instruction is ``lens.instructions.mteb_instruction``'s: the paper's
(Table 8), else the task's own prompt from mteb's metadata, else a generic one for its task type. Vectors are
``LensEncoder``'s (unit length) and compared by cosine.

    import mteb
    from lens.integrations.mteb import LensMTEBEncoder

    model = LensMTEBEncoder("models/lens-mistral")
    mteb.evaluate(model, mteb.get_tasks(tasks=["SciFact"]), cache=mteb.ResultCache("results"))

``mteb_model_meta`` names the model ``lens/<directory name>`` and gives a revision that identifies its vectors
(a hash of ``LensEncoder.fingerprint``), so results of different models never share a folder.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping

import numpy as np
import torch

from lens.encoder import LensEncoder
from lens.extras import MissingExtraError, require
from lens.instructions import mteb_instruction
from lens.model_dir import DEFAULT_MODEL_DIR

_mteb = require("mteb", "mteb", what="the MTEB integration")
if int(_mteb.__version__.split(".")[0]) < 2:
    raise MissingExtraError(f"the MTEB integration follows mteb >= 2's model protocol; mteb {_mteb.__version__} is "
                            "installed: pip install 'mteb>=2'")
from mteb.models import ModelMeta  # noqa: E402
from mteb.models.abs_encoder import AbsEncoder  # noqa: E402

__all__ = ["LensMTEBEncoder", "fingerprint_revision", "model_meta"]

logger = logging.getLogger(__name__)


class LensMTEBEncoder(AbsEncoder):
    """A ``LensEncoder`` for ``mteb.evaluate``.

    ``model`` is a LENS directory, ``"default"`` or a loaded ``LensEncoder``. ``instructions`` maps a task name to
    the instruction to use instead of ours. ``name`` / ``revision`` / ``languages`` go to ``mteb_model_meta``.
    ``path`` is how ``ModelMeta.load_model`` passes the directory (its first argument then is the model's name).
    """

    def __init__(
        self,
        model: str | os.PathLike | LensEncoder = "default",
        revision: str | None = None,
        *,
        path: str | os.PathLike | None = None,
        name: str | None = None,
        device: str | None = None,
        dtype: torch.dtype | None = None,
        instructions: Mapping[str, str] | None = None,
        languages: list[str] | None = None,
    ):
        if path is not None:  # ModelMeta.load_model(): loader(name, revision=..., path=...)
            name, model = (str(model) if name is None else name), path
        self.encoder = model if isinstance(model, LensEncoder) else LensEncoder.from_pretrained(
            model, device=device, dtype=dtype)
        self.instructions = dict(instructions or {})
        for task, text in self.instructions.items():
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"the instruction for {task!r} is empty or not a string; give a task description "
                                 "or leave the task out")
        self.mteb_model_meta = model_meta(self.encoder, name=name, revision=revision, languages=languages)

    def instruction(self, task_metadata, prompt_type=None) -> str | None:
        """The instruction put before the texts of ``task_metadata``'s task on the ``prompt_type`` side; None for
        documents."""
        side = getattr(prompt_type, "value", prompt_type)
        if side == "document":
            return None
        own = task_metadata.prompt
        if isinstance(own, Mapping):
            own = own.get("query")
        return mteb_instruction(task_metadata.name, task_metadata.type, own,
                                override=self.instructions.get(task_metadata.name)).text

    def encode(self, inputs, *, task_metadata, hf_split: str, hf_subset: str, prompt_type=None,
               **kwargs) -> np.ndarray:
        """(N, k) float32 unit vectors of the texts in ``inputs`` (batches with a ``"text"`` list), in order.

        ``batch_size`` and ``show_progress_bar`` (mteb's ``encode_kwargs``) are honoured; the rest is ignored.
        """
        texts = []
        for batch in inputs:
            if "text" not in batch:
                raise ValueError(f"LENS encodes text; task {task_metadata.name} gives batches with "
                                 f"{sorted(batch)} and no 'text'")
            texts.extend(batch["text"])
        if not texts:
            return np.zeros((0, self.encoder.num_clusters), dtype=np.float32)
        options = {"batch_size": kwargs.get("batch_size", 32),
                   "show_progress_bar": kwargs.get("show_progress_bar", False)}
        instruction = self.instruction(task_metadata, prompt_type)
        logger.info("%s (%s, %s): %d texts, instruction %r", task_metadata.name, hf_subset, hf_split, len(texts),
                    instruction)
        if instruction is None:
            return self.encoder.encode_documents(texts, **options)
        return self.encoder.encode_queries(texts, instruction=instruction, **options)


def model_meta(encoder: LensEncoder, *, name: str | None = None, revision: str | None = None,
               languages: list[str] | None = None) -> ModelMeta:
    """mteb's metadata of ``encoder``: the name results are filed under, a revision from its fingerprint, its size,
    dimension and sequence length, cosine similarity, instructions used; a loader that reloads it from its
    directory."""
    source = encoder.source_dir
    if name is None:
        stem = "default" if source is not None and source.resolve() == DEFAULT_MODEL_DIR.resolve() else (
            source.name if source is not None else "in-memory")
        name = f"lens/{stem}"
    if revision is None:
        revision = fingerprint_revision(encoder.fingerprint())
    return ModelMeta(
        loader=LensMTEBEncoder if source is not None else None,
        loader_kwargs={"path": str(source)} if source is not None else {},
        name=name,
        revision=revision,
        release_date=None,
        languages=list(languages) if languages is not None else ["eng-Latn"],
        n_parameters=sum(p.numel() for p in encoder.model.parameters()),
        memory_usage_mb=None,
        max_tokens=encoder.max_seq_length,
        embed_dim=encoder.num_clusters,
        license=None,
        open_weights=None,
        public_training_code=None,
        public_training_data=None,
        framework=["PyTorch"],
        similarity_fn_name="cosine",
        use_instructions=True,
        training_datasets=None,
        model_type=["sparse"],
    )


def fingerprint_revision(fingerprint: Mapping[str, object]) -> str:
    """A short, stable revision string for an encoder's fingerprint (same vectors, same revision)."""
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode("utf-8")).hexdigest()[:12]
