"""The paper's released checkpoints (``yibinlei/LENS-d4000`` / ``LENS-d8000``): recognise, read and load them.

A released folder holds a bare ``MistralModel`` (safetensors shards + index, keys with or without a ``model.``
prefix), its k x hidden cluster head pickled as a whole ``torch.nn.Linear`` in ``lm_head.pth``, and a tokenizer with
three added tokens (``<instruct>``, ``<query>``, ``<response>``). Its ``config.json`` is Mistral's, not a LENS one,
so ``read_released`` makes the ``LensConfig`` in memory with ``convention="paper"`` (``lens.config.CONVENTIONS``):
the authors' forward pass then runs through the same encoder code as every LENS model. ``lens.model_dir`` reads such
a folder through here; ``LensEncoder.from_pretrained`` loads its decoder with ``load_released_decoder``.

The head is read without running pickled code: ``torch.load(weights_only=True)`` with ``torch.nn.Linear`` as the
only added global, so any other class or callable in the pickle is refused before it is built; what loads must
then be a bias-free ``Linear`` (or its ``{"weight": ...}`` state) of float32 weights, k x the model's hidden size.

``lens.model_dir.convert_released`` writes a regular LENS model directory from such a folder (safetensors head, a
``config.json`` recording the paper convention, the backbone named by path); it lives beside the one writer, so this
module never imports ``lens.model_dir`` (which imports it).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from lens.backbone import matrix_sha256, quiet_loading
from lens.config import DEFAULT_INSTRUCTION, DEFAULT_QUERY_TEMPLATE, ClusteringConfig, LensConfig

__all__ = ["ADDED_TOKENS", "ATTENTION_IMPLEMENTATIONS", "HEAD_FILE", "check_shard_keys",
           "is_released_dir", "load_head", "load_released_decoder", "load_released_tokenizer", "read_released"]

logger = logging.getLogger(__name__)

HEAD_FILE = "lm_head.pth"
ADDED_TOKENS = ("<instruct>", "<query>", "<response>")  # ids 32000, 32001, 32002 in the release
ARCHITECTURE = "MistralModel"
ATTENTION_IMPLEMENTATIONS = ("sdpa", "eager")  # never flash attention: its kernels are causal-only in places
MAX_LENGTH = 512  # the reference pass's truncation
INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"


def _backbone_config(directory: Path) -> dict | None:
    try:
        data = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_released_dir(path: str | os.PathLike) -> bool:
    """True for a folder in the released layout: ``lm_head.pth`` beside a ``MistralModel`` ``config.json``."""
    directory = Path(path).expanduser()
    if not (directory / HEAD_FILE).is_file():
        return False
    data = _backbone_config(directory)
    return data is not None and "format_version" not in data and ARCHITECTURE in (data.get("architectures") or [])


def load_head(path: str | os.PathLike, hidden_size: int) -> np.ndarray:
    """The k x ``hidden_size`` float32 cluster head from ``lm_head.pth``, read without running pickled code.

    Accepts a pickled bias-free ``torch.nn.Linear`` (``torch.save(module)``) or its state dict with one
    ``weight``; anything else (another class or callable in the pickle, a bias, another shape or dtype) is a
    ValueError saying what was found.
    """
    import torch
    from torch import nn

    path = Path(path)
    try:
        with torch.serialization.safe_globals([nn.Linear]):
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # the restricted unpickler's refusal, or a damaged file
        message = str(e)
        called = re.search(r"GLOBAL ([\w.]+)", message)
        if called:  # torch suggests weights_only=False here: that would run the call
            raise ValueError(f"{path} is not a plain torch.nn.Linear head and was not loaded: its pickle asks to run "
                             f"{called.group(1)}, which a weights file never needs (nothing in it was run; never "
                             "load it with weights_only=False); fetch lm_head.pth again from the authors' "
                             "repository") from None
        first = (message.strip().splitlines() or [type(e).__name__])[0]
        raise ValueError(f"{path} is not a plain torch.nn.Linear head and was not loaded (only a bias-free Linear's "
                         f"weights are accepted; nothing in the file was run): {first[:300]}") from None
    if type(obj) is nn.Linear:
        if obj.bias is not None:
            raise ValueError(f"{path} holds a Linear with a bias; the LENS cluster head has none (bias=False)")
        weight = obj.weight
    elif isinstance(obj, Mapping) and set(obj) == {"weight"}:
        weight = obj["weight"]
    elif isinstance(obj, Mapping):
        extra = " (a bias: the LENS cluster head has none)" if "bias" in obj else ""
        raise ValueError(f"{path} holds a state dict with keys {sorted(map(str, obj))}{extra}; expected only 'weight'")
    else:
        raise ValueError(f"{path} holds a {type(obj).__name__}, not a torch.nn.Linear cluster head")
    if not isinstance(weight, torch.Tensor) or weight.ndim != 2:
        raise ValueError(f"{path}: the head's weight is not a matrix ({type(weight).__name__})")
    if weight.dtype != torch.float32:
        raise ValueError(f"{path}: the head's weight is {weight.dtype}; the released heads are float32")
    k, hidden = weight.shape
    if hidden != hidden_size or k < 1:
        raise ValueError(f"{path}: the head is {k} x {hidden}, the model's hidden size is {hidden_size}: this head "
                         "belongs to another model")
    matrix = weight.detach().contiguous().numpy().copy()
    if not np.isfinite(matrix).all():
        raise ValueError(f"{path}: the head holds NaN or infinite values; the file is damaged")
    return matrix


def _weight_names(directory: Path) -> list[str]:
    index = directory / INDEX_NAME
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{index} cannot be read as a safetensors index ({e})") from e
        missing = sorted({f for f in weight_map.values() if not (directory / f).is_file()})
        if missing:
            raise FileNotFoundError(f"{directory} lacks the weight shards {missing} that {INDEX_NAME} names; "
                                    "finish the download")
        return list(weight_map)
    if (directory / SINGLE_NAME).is_file():
        from safetensors import safe_open

        with safe_open(directory / SINGLE_NAME, framework="numpy") as f:
            return list(f.keys())
    raise FileNotFoundError(f"{directory} has no {INDEX_NAME} or {SINGLE_NAME}: no MistralModel weights")


def check_shard_keys(path: str | os.PathLike) -> str:
    """Check the weight names of a released folder; returns their prefix (``""`` or ``"model."``).

    A bare ``MistralModel`` has no LM head: an ``lm_head.*`` weight means the folder holds something else (the
    LENS head is ``lm_head.pth``), and is an error, as is a mix of prefixed and unprefixed names.
    """
    directory = Path(path)
    names = _weight_names(directory)
    stray = sorted(n for n in names if n.split(".")[0] == "lm_head" or n.startswith("model.lm_head"))
    if stray:
        raise ValueError(f"{directory} holds {stray[:3]} in its weights: a released LENS checkpoint is a bare "
                         f"MistralModel (its cluster head is {HEAD_FILE}); this folder is not one")
    prefixed = {n.startswith("model.") for n in names}
    if len(prefixed) != 1:
        raise ValueError(f"{directory}: weight names mix 'model.'-prefixed and bare ones; re-download the checkpoint")
    return "model." if prefixed == {True} else ""


def load_released_tokenizer(path: str | os.PathLike, vocab_size: int | None = None):
    """The folder's tokenizer, offline, checked for BOS, EOS and the three added tokens (within ``vocab_size``).

    The pad token is ``<unk>`` when it has none (the reference pass's); batches are padded on the left.
    """
    from transformers import AutoTokenizer

    directory = Path(path)
    with quiet_loading():
        tok = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    if tok.bos_token_id is None or tok.eos_token_id is None:
        raise ValueError(f"the tokenizer in {directory} lacks a BOS or EOS token; the released checkpoints use "
                         "Mistral's (<s> and </s>)")
    listed = {}
    if (directory / "added_tokens.json").is_file():
        listed = json.loads((directory / "added_tokens.json").read_text(encoding="utf-8"))
    for token in ADDED_TOKENS:
        tid = tok.convert_tokens_to_ids(token)
        if tid is not None and tid != tok.unk_token_id and vocab_size is not None and tid >= vocab_size:
            raise ValueError(f"the tokenizer in {directory} gives {token} id {tid}, past the model's vocabulary of "
                             f"{vocab_size} (config.json): a released LENS checkpoint's embeddings were resized to "
                             "hold the three added tokens; this config.json or these weights are not the release's")
        if tid is None or tid == tok.unk_token_id:
            raise ValueError(f"the tokenizer in {directory} has no usable {token} token (id {tid}); a released LENS "
                             f"checkpoint adds {', '.join(ADDED_TOKENS)}")
        if token in listed and listed[token] != tid:
            raise ValueError(f"{directory}: added_tokens.json gives {token} id {listed[token]}, the tokenizer {tid}")
    if tok.pad_token_id is None:
        tok.pad_token = tok.unk_token if tok.unk_token is not None else tok.eos_token
    tok.padding_side = "left"
    return tok


def read_released(path: str | os.PathLike) -> tuple[LensConfig, np.ndarray, np.ndarray]:
    """``(config, assignment, centroids)`` of a released folder: the ``LensConfig`` made in memory (convention
    "paper"), an assignment of -1 for every token (the release does not say which tokens formed each cluster) and
    the cluster head from ``lm_head.pth``."""
    directory = Path(path).expanduser().resolve()
    data = _backbone_config(directory)
    if data is None or not is_released_dir(directory):
        raise ValueError(f"{directory} is not a released LENS checkpoint (needs {HEAD_FILE} and a MistralModel "
                         "config.json)")
    try:
        hidden, vocab = int(data["hidden_size"]), int(data["vocab_size"])
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{directory / 'config.json'} lacks hidden_size or vocab_size ({e})") from e
    head = load_head(directory / HEAD_FILE, hidden)
    config = LensConfig(
        backbone=str(directory),
        clustering=ClusteringConfig(
            num_clusters=head.shape[0], vocab_size=vocab, hidden_size=hidden,
            lm_head_sha256=matrix_sha256(head),  # no LM head in a release: the cluster head's own hash
            backend="released", iterations=0,
        ),
        attention="bidirectional", pooling="max", max_length=MAX_LENGTH, query_template=DEFAULT_QUERY_TEMPLATE,
        default_instruction=DEFAULT_INSTRUCTION, convention="paper",
        extra={"source": "released LENS checkpoint", "head": HEAD_FILE},
    )
    return config, np.full(vocab, -1, dtype=np.int64), head


def _stored_bytes(directory: Path) -> int | None:
    """The decoder's size as its shards store it (the index's ``metadata.total_size``), or None."""
    try:
        return int(json.loads((directory / INDEX_NAME).read_text(encoding="utf-8"))["metadata"]["total_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_host_memory(directory: Path, dtype, available: int | None = None) -> None:
    """Refuse, before loading, a decoder that cannot fit in the host's memory in ``dtype``: the size comes from the
    shards' index (``metadata.total_size``, the released float32 bytes). Loading it anyway would end in the
    kernel's OOM kill, with no message."""
    import torch

    stored = _stored_bytes(directory)
    if stored is None:
        return  # no index with a size: nothing to go by
    need = stored * torch.finfo(dtype).bits // 32
    if available is None:
        from lens.host import available_memory

        available = available_memory()
    if available is not None and need > available:
        gb = lambda n: f"{n / 1e9:.1f} GB"  # noqa: E731
        raise ValueError(f"{directory}: its decoder needs about {gb(need)} of memory in {str(dtype).split('.')[-1]} "
                         f"on the CPU, and this machine has {gb(available)} available; run it on a GPU (float16, "
                         f"{gb(stored // 2)}), or load it in bfloat16 on the CPU "
                         "(LensEncoder.from_pretrained(DIR, dtype=torch.bfloat16): slower, and only where the CPU "
                         "has the memory)")


def load_released_decoder(path: str | os.PathLike, *, dtype=None, device: str | None = None,
                          attn_implementation: str = "sdpa"):
    """``(decoder, tokenizer)`` of a released folder: its ``MistralModel`` (every weight present, nothing else)
    and its tokenizer. ``dtype`` defaults to float16 on CUDA (the reference pass's) and float32 on CPU."""
    import torch
    from transformers import AutoModel

    directory = Path(path).expanduser().resolve()
    if attn_implementation not in ATTENTION_IMPLEMENTATIONS:
        raise ValueError(f"attn_implementation={attn_implementation!r}: a released LENS checkpoint runs with "
                         f"{' or '.join(ATTENTION_IMPLEMENTATIONS)} attention (bidirectional masks)")
    check_shard_keys(directory)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if dtype is None:
        dtype = torch.float16 if str(device).startswith("cuda") else torch.float32
    if not str(device).startswith("cuda"):
        check_host_memory(directory, dtype)
    logger.info("loading the released LENS decoder %s (%s)", directory, dtype)
    try:
        with quiet_loading():
            model, info = AutoModel.from_pretrained(directory, local_files_only=True, dtype=dtype,
                                                    attn_implementation=attn_implementation, output_loading_info=True)
    except (MemoryError, torch.OutOfMemoryError):
        raise
    except Exception as e:  # a damaged shard, a config.json that is not the weights' own: one line, not a traceback
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        if "can't allocate memory" in str(e) or "not enough memory" in str(e):  # torch's CPU allocator
            size = _stored_bytes(directory)
            need = f" (its shards hold {size / 1e9:.1f} GB)" if size else ""
            raise ValueError(f"loading {directory} ran out of memory{need}: run it on a GPU (float16) or on a host "
                             f"with more memory available ({first[:120]})") from e
        raise ValueError(f"the weights in {directory} could not be loaded ({type(e).__name__}: {first[:200]}); a shard "
                         "is damaged or config.json is not the one shipped with them: re-download the folder") from e
    if type(model).__name__ != ARCHITECTURE:
        raise ValueError(f"{directory} loads as {type(model).__name__}, not a {ARCHITECTURE}")
    wrong = {k: sorted(map(str, v))[:3] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")
             if (v := info.get(k))}
    if wrong:
        raise ValueError(f"the weights in {directory} do not match its config.json ({wrong}); re-download it")
    model.to(device)
    model.eval()
    return model, load_released_tokenizer(directory, model.config.vocab_size)
