"""A LENS model directory as a sentence-transformers ``SparseEncoder`` (the ``st`` extra, sentence-transformers >= 5).

``LensSparseModule`` is the whole LENS pipeline as one input module: it tokenises ``[BOS] + prompt + text + [EOS]``
with ``lens.inputs`` (so the pooling mask leaves the prompt out: a query's instruction shapes its vector but is
never pooled), runs the ``LensModel`` (bidirectional decoder, cluster head, shifted max pooling of
``log1p(relu)``), gives blank texts all-zero vectors and L2-normalises, exactly as ``LensEncoder.encode`` does by
default. ``SparseEncoder.encode_query`` / ``encode_document`` / ``similarity`` (cosine) / ``decode`` (a cluster's
label is its first member tokens, as ``LensEncoder.explain`` lists them) / ``max_active_dims`` then work unchanged.

A prompt is an instruction: the module puts it into the model's ``query_template`` (a prompt already in the
template's form is used as it is), so ``encode_query(texts, prompt=instruction)`` equals
``LensEncoder.encode_queries(texts, instruction=instruction)``; the directory's ``query`` prompt is its default
instruction and ``document`` has none.

Loading: every directory ``lens.model_dir`` writes carries ``modules.json`` naming this module. sentence-transformers
>= 6 imports a module class from outside its own package only with ``trust_remote_code=True`` (for a local
directory too), so either ``SparseEncoder(path, trust_remote_code=True)`` or ``load_sparse_encoder(path)``, which
builds the module here and needs no flag. ``add_st_files`` upgrades a directory written before those files existed.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from lens.atomic import DirectoryLock
from lens.encoder import LABEL_TOKENS, LensEncoder, check_texts, cluster_label
from lens.extras import require
from lens.inputs import PADDING_SIDE, encode_model_texts, pad_batch, query_prompt
from lens.model_dir import (
    ST_CONFIG_NAME,
    ST_MODULES_NAME,
    add_sentence_transformers_files,
    read_sentence_transformers_config,
)

require("sentence_transformers", "st", what="the sentence-transformers integration", package="sentence-transformers")
try:  # sentence-transformers >= 6
    from sentence_transformers.base.modules.input_module import InputModule
except ImportError:  # 5.x
    from sentence_transformers.models import InputModule

__all__ = ["ClusterVocabulary", "LensSparseModule", "add_st_files", "cluster_label", "load_sparse_encoder",
           "query_prompt"]

logger = logging.getLogger(__name__)

class ClusterVocabulary:
    """The backbone's tokenizer, whose output vocabulary is the clusters: ``SparseEncoder.decode`` names an
    embedding's dimensions with ``tokenizer.convert_ids_to_tokens``, so this names cluster ids; everything else
    is the real tokenizer's."""

    def __init__(self, encoder: LensEncoder, tokens: int = LABEL_TOKENS):
        self._encoder = encoder
        self._tokens = tokens
        self._labels: dict[int, str] = {}

    def convert_ids_to_tokens(self, ids, skip_special_tokens: bool = False):
        """Cluster id(s) -> label(s) such as ``"review|reviews|reviewed"``."""
        if isinstance(ids, int):
            return self.label(ids)
        return [self.label(int(i)) for i in ids]

    def label(self, cluster: int) -> str:
        if not 0 <= cluster < self._encoder.num_clusters:
            raise IndexError(f"cluster {cluster} out of range: this model has {self._encoder.num_clusters} clusters")
        if self._tokens == LABEL_TOKENS:  # LensEncoder.decode's names, unique
            return self._encoder.cluster_names()[cluster]
        if cluster not in self._labels:
            tokens = self._encoder.cluster_tokens(cluster, 4 * self._tokens)  # " n" and "n" read alike
            self._labels[cluster] = cluster_label(tokens, cluster, self._tokens)
        return self._labels[cluster]

    def __call__(self, *args, **kwargs):
        return self._encoder.tokenizer(*args, **kwargs)

    def __getattr__(self, name: str):
        if name.startswith("_"):  # copy / pickle probe these before __init__ ran
            raise AttributeError(name)
        return getattr(self._encoder.tokenizer, name)


class LensSparseModule(InputModule):
    """A ``LensEncoder`` as sentence-transformers' only module of a ``SparseEncoder``; saved in the model root, whose
    files are the LENS directory's own (``config.json`` etc.), so it has no configuration file of its own."""

    save_in_root: bool = True
    config_keys: list[str] = []

    def __init__(self, encoder: LensEncoder):
        super().__init__()
        if not isinstance(encoder, LensEncoder):
            raise TypeError(f"LensSparseModule wraps a LensEncoder, got {type(encoder).__name__}; load one with "
                            "LensEncoder.from_pretrained(path)")
        self.encoder = encoder  # not an nn.Module: held as a plain attribute
        self.lens = encoder.model  # registered, so SparseEncoder's .to(device) / parameters() reach the weights
        self.tokenizer = ClusterVocabulary(encoder)

    @property
    def max_seq_length(self) -> int:
        return self.encoder.max_seq_length

    @max_seq_length.setter
    def max_seq_length(self, value: int) -> None:
        self.encoder.max_seq_length = value

    def get_embedding_dimension(self) -> int:
        return self.encoder.num_clusters

    def preprocess(self, inputs, prompt: str | None = None, **kwargs) -> dict[str, Tensor]:
        """Token ids, attention mask, pooling mask (the text and EOS, never BOS or prompt) and blank flags."""
        texts = check_texts(list(inputs), "inputs")
        tokenizer = self.encoder.tokenizer
        items = encode_model_texts(tokenizer, self.encoder.config, texts, self.max_seq_length,
                                   query_prompt(self.encoder.config.query_template, prompt),
                                   casing=self.encoder.casing_table)  # a corpus's own table, as LensEncoder.encode
        n_cut = sum(it.truncated for it in items)
        if n_cut:
            logger.warning("%d of %d texts were longer than max_seq_length=%d tokens and were truncated",
                           n_cut, len(items), self.max_seq_length)
        features = pad_batch(items, tokenizer.pad_token_id, side=PADDING_SIDE[self.encoder.config.convention])
        features["blank"] = torch.tensor([not t.strip() for t in texts], dtype=torch.bool)
        return features

    def forward(self, features: dict[str, Any], **kwargs) -> dict[str, Any]:
        out = self.lens(features["input_ids"], features["attention_mask"], features["pool_mask"])
        lexicon = out.lexicon.float()  # (B, K)
        blank = features.get("blank")
        if blank is not None:  # LensEncoder never runs a blank text: its vector is zero
            lexicon = lexicon.masked_fill(blank.to(lexicon.device)[:, None], 0.0)
        features["sentence_embedding"] = F.normalize(lexicon, p=2, dim=-1)  # zero rows stay zero
        return features

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        """Write the LENS directory into ``output_path`` (``LensEncoder.save_pretrained``), keeping the
        ``config_sentence_transformers.json`` that ``SparseEncoder.save`` wrote there first (the user's prompts)."""
        save_into(self.encoder, Path(output_path))

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", token: bool | str | None = None,
             cache_folder: str | None = None, revision: str | None = None, local_files_only: bool = False,
             model_kwargs: dict[str, Any] | None = None, **kwargs) -> "LensSparseModule":
        """Read the LENS directory with ``LensEncoder.from_pretrained``; ``model_kwargs`` may give ``dtype``
        (or ``torch_dtype``) and ``attn_implementation``. Other loading options do not apply to a LENS directory."""
        directory = Path(model_name_or_path) / subfolder
        if not directory.is_dir():  # a Hub repository: its files, downloaded
            directory = Path(cls.load_dir_path(model_name_or_path, subfolder=subfolder, token=token,
                                               cache_folder=cache_folder, revision=revision,
                                               local_files_only=local_files_only))
        options = dict(model_kwargs or {})
        dtype = options.pop("dtype", None)
        dtype = options.pop("torch_dtype", None) if dtype is None else dtype
        if isinstance(dtype, str):
            dtype = None if dtype == "auto" else getattr(torch, dtype)
        attn = options.pop("attn_implementation", "sdpa")
        if options:
            logger.warning("model_kwargs %s do not apply to LENS models; ignored", sorted(options))
        return cls(LensEncoder.from_pretrained(directory, dtype=dtype, attn_implementation=attn))

    def __repr__(self) -> str:
        source = self.encoder.source_dir
        return f"LensSparseModule(clusters={self.encoder.num_clusters}, source={str(source) if source else None!r})"


def load_sparse_encoder(model: str | os.PathLike | LensEncoder = "default", *, device: str | None = None,
                        dtype: torch.dtype | None = None, **kwargs):
    """A ``SparseEncoder`` over a LENS directory (or ``"default"``, or a loaded ``LensEncoder``), without
    ``trust_remote_code``: the module is built here and handed over with the directory's prompts, similarity and
    ``max_active_dims`` (``kwargs`` such as ``prompts`` or ``max_active_dims`` override them)."""
    from sentence_transformers import SparseEncoder

    if isinstance(model, LensEncoder):
        encoder = model
    else:
        encoder = LensEncoder.from_pretrained(model, device=device, dtype=dtype)
    settings = read_sentence_transformers_config(encoder.source_dir) if encoder.source_dir else {}
    prompts = {**settings.get("prompts", {"query": encoder.config.default_instruction, "document": ""}),
               **kwargs.pop("prompts", {})}
    options = {"default_prompt_name": settings.get("default_prompt_name"),
               "similarity_fn_name": settings.get("similarity_fn_name", "cosine"),
               "max_active_dims": settings.get("max_active_dims"), **kwargs}
    return SparseEncoder(modules=[LensSparseModule(encoder)], device=device or str(encoder.device), prompts=prompts,
                         **options)


def add_st_files(path: str | os.PathLike) -> Path:
    """Make a LENS directory written before LENS wrote ``modules.json`` and ``config_sentence_transformers.json``
    loadable by ``SparseEncoder(path, trust_remote_code=True)`` (``lens.model_dir.add_sentence_transformers_files``)."""
    return add_sentence_transformers_files(path)


def save_into(encoder: LensEncoder, target: Path) -> None:
    """``encoder``'s directory written into ``target``, which already holds ``SparseEncoder.save``'s files.

    ``LensEncoder.save_pretrained`` writes a fresh directory (atomically) beside ``target``; its entries then
    replace ``target``'s, under ``target``'s writer lock, except the sentence-transformers files ``target``
    already has. Not atomic as a whole, like ``SparseEncoder.save`` itself: use ``save_pretrained`` for that.
    """
    target = Path(target).resolve()
    target.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.st-", dir=target.parent))
    try:
        encoder.save_pretrained(staging / "model")
        with DirectoryLock(target, "model directory"):
            for entry in sorted((staging / "model").iterdir()):
                dest = target / entry.name
                if entry.name in (ST_CONFIG_NAME, ST_MODULES_NAME) and dest.exists():
                    continue
                if dest.is_dir() and not dest.is_symlink():
                    shutil.rmtree(dest)
                elif dest.exists() or dest.is_symlink():
                    dest.unlink()
                os.replace(entry, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
