"""The one owner of a LENS model directory: where ``"default"`` lives, reading and checking the files, writing them.

``lens cluster-vocab`` (``lens.vocab``), ``LensEncoder.save_pretrained`` and ``lens train`` all write through
``write_model_dir``, atomically and under the directory's writer lock (``lens.atomic.atomic_dir``: a second writer
fails at once, a full disk is a one-line ``StorageError``); ``LensEncoder.from_pretrained`` reads through
``read_model_dir``, which first restores a directory left missing by a killed save.

=========================== =====================================================================================
``config.json``             ``LensConfig`` (versioned)
``clusters.safetensors``    ``assignment`` (int32, one cluster per token, -1 if excluded) and, unless compact,
                            ``centroids`` (k x hidden: the cluster head); with ``config.term_channel``, the
                            term channel's ``term_weight`` (hidden) and ``term_bias`` (1) once trained
``clusters.tsv``            cluster, size, member tokens: for people to read
``adapter/``                a trained model's PEFT LoRA adapter (``config.adapter`` names it)
``backbone/``               a standalone (merged) model's backbone in transformers' format (``config.backbone``)
``modules.json``,           what lets sentence-transformers load the directory as a ``SparseEncoder``: the LENS
``config_sentence_``        module's import path, the default instruction as the ``query`` prompt, cosine
``transformers.json``       similarity (``sentence_transformers_files``; LENS itself never reads them)
=========================== =====================================================================================

Directories written before those two files existed get them from ``add_sentence_transformers_files``. A folder of
the paper's released checkpoints (``lens.paper_models``: a bare MistralModel and ``lm_head.pth``) reads as a model
directory too, its config made in memory.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from lens.atomic import atomic_dir, atomic_write_bytes, check_replace_target, ensure_present, read_json
from lens.clustering import clusters_tsv
from lens.config import ADAPTER_DIR, CLUSTERS_NAME, CLUSTERS_TSV, CONFIG_NAME, LensConfig
from lens.paper_models import ARCHITECTURE, HEAD_FILE, is_released_dir, load_released_tokenizer, read_released

__all__ = ["BACKBONE_DIR", "convert_released", "DEFAULT_MODEL_DIR", "ST_CONFIG_NAME", "ST_MODULE", "ST_MODULES_NAME", "ModelFiles",
           "add_sentence_transformers_files", "check_model_output", "check_model_target", "check_not_input",
           "foreign_model",
           "read_model_dir",
           "read_sentence_transformers_config", "resolve_model_dir", "sentence_transformers_config",
           "sentence_transformers_files", "stack_model_dirs", "write_model_dir"]

DEFAULT_MODEL_DIR = Path(__file__).parent / "default_model"
BACKBONE_DIR = "backbone"
TRANSFORMERS_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
# sentence-transformers' files; the module is named by its import path only (this layer never imports it)
ST_MODULES_NAME = "modules.json"
ST_CONFIG_NAME = "config_sentence_transformers.json"
ST_MODULE = "lens.integrations.sentence_transformers.LensSparseModule"


def resolve_model_dir(path: str | os.PathLike) -> Path:
    """``"default"`` -> the model shipped in the package; otherwise a directory with a LENS ``config.json``."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"model path must be a string or path, got {type(path).__name__}")
    directory = DEFAULT_MODEL_DIR if os.fspath(path) == "default" else Path(path).expanduser()
    if not directory.exists():
        ensure_present(directory, "model directory")  # a save killed between its renames: put it back
    if not (directory / CONFIG_NAME).is_file():
        if os.fspath(path) == "default":
            raise FileNotFoundError(
                f"no default LENS model is installed at {directory}; create one with "
                "`lens cluster-vocab --out DIR` and load DIR"
            )
        raise FileNotFoundError(_not_a_model_dir(path, directory))
    if _is_transformers_dir(directory) and not is_released_dir(directory):  # the paper's checkpoints load as they are
        raise FileNotFoundError(_not_a_model_dir(path, directory))
    return directory


def _is_transformers_dir(directory: Path) -> bool:
    """A transformers model (its own ``config.json``, weights beside it) rather than a LENS directory."""
    if not any((directory / n).is_file() for n in TRANSFORMERS_WEIGHTS):
        return False
    try:
        config = json.loads((directory / CONFIG_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False  # LensConfig.load says what is wrong with it
    return isinstance(config, dict) and "model_type" in config and "clustering" not in config


def _not_a_model_dir(path, directory: Path) -> str:
    """Why ``directory`` cannot be loaded as a LENS model, and what to do, by what it holds."""
    name = os.fspath(path)
    if not directory.exists():
        hub = "/" in name and not os.path.isabs(name) and len(Path(name).parts) == 2
        hint = (" LENS loads models offline, from local directories only: for a Hugging Face id, download the "
                "repository and pass its directory" if hub else "")
        return (f"'{name}' does not exist: pass a LENS model directory (from `lens cluster-vocab`, `lens train` or "
                f"save_pretrained) or 'default'.{hint}")
    if (directory / CLUSTERS_NAME).is_file() and not (directory / CONFIG_NAME).is_file():
        return (f"'{name}' holds a LENS model's {CLUSTERS_NAME} but no {CONFIG_NAME}: the directory is incomplete; "
                f"restore {CONFIG_NAME} from where it was copied or from a backup (it cannot be re-created from the "
                "other files)")
    try:
        backbone_config = json.loads((directory / CONFIG_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        backbone_config = None
    if isinstance(backbone_config, dict) and ARCHITECTURE in (backbone_config.get("architectures") or []):
        return (f"'{name}' holds a bare {ARCHITECTURE} (a released LENS checkpoint's decoder) but no {HEAD_FILE}, its "
                f"cluster head: download {HEAD_FILE} into it too (docs/paper-models.md)")
    if any((directory / n).is_file() for n in TRANSFORMERS_WEIGHTS):
        if backbone_config is None:
            return (f"'{name}' holds model weights but no readable {CONFIG_NAME}: the download or copy is incomplete; "
                    "fetch the folder again")
        return (f"'{name}' is a backbone (transformers weights), not a LENS model directory; make one from it with "
                f"`lens cluster-vocab --model {name} --out DIR` and load DIR")
    return (f"'{name}' is not a LENS model directory (no {CONFIG_NAME}); create one with "
            "`lens cluster-vocab --model BACKBONE --out DIR`")


@dataclass
class ModelFiles:
    """A model directory's contents, read and checked against its config."""

    directory: Path
    config: LensConfig
    assignment: np.ndarray  # (vocab,) int64, -1 for tokens in no cluster
    centroids: np.ndarray | None  # (k, hidden) float32, None in the compact form (recomputed from the backbone)
    term: np.ndarray | None = None  # (hidden + 1,) float32: the term channel's weight, then its bias; None: untrained
    centroids_dtype: type = np.float32  # how the file stores the centroids (float16 for a trained head)

    @property
    def adapter_dir(self) -> Path | None:
        return None if self.config.adapter is None else self.directory / self.config.adapter

    @property
    def backbone(self) -> str:
        """The backbone reference, resolved against the directory when it carries its own (merged) backbone; a
        bundled one that is missing or holds no weights is an incomplete directory (a clear error here)."""
        bundled = self.directory / self.config.backbone
        if self.config.backbone == BACKBONE_DIR:
            if not bundled.is_dir():
                raise FileNotFoundError(
                    f"{self.directory} is incomplete: its config names the model's own merged backbone "
                    f"({BACKBONE_DIR}/) but {bundled} is missing; copy {BACKBONE_DIR}/ back from where the model came "
                    "from, or save the model again")
            if not any(bundled.glob("*.safetensors")) and not (bundled / "pytorch_model.bin").is_file():
                raise FileNotFoundError(
                    f"{self.directory} is incomplete: {bundled} holds no weights (*.safetensors); copy them back "
                    "from where the model came from, or save the model again")
        return str(bundled.resolve()) if bundled.is_dir() else self.config.backbone


def read_model_dir(path: str | os.PathLike) -> ModelFiles:
    """Read ``config.json`` and ``clusters.safetensors``; errors say which file is wrong and what to do."""
    from safetensors.numpy import load_file

    directory = resolve_model_dir(path)
    if is_released_dir(directory):  # the paper's checkpoint: no LENS config.json, one made in memory
        return ModelFiles(directory, *read_released(directory))
    config = LensConfig.load(directory)
    try:
        tensors = load_file(directory / CLUSTERS_NAME)
    except Exception as e:  # safetensors raises its own error types for damaged files
        raise ValueError(f"{directory / CLUSTERS_NAME} cannot be read ({e}); re-create the directory") from e
    if "assignment" not in tensors:
        raise ValueError(f"{directory / CLUSTERS_NAME} has no 'assignment' tensor; re-create the directory")
    assignment = tensors["assignment"].astype(np.int64)
    centroids = tensors.get("centroids")
    k, c = config.num_clusters, config.clustering
    if assignment.shape != (c.vocab_size,) or (assignment.size and not -1 <= assignment.min() <= assignment.max() < k):
        raise ValueError(f"{directory / CLUSTERS_NAME} does not match its config.json (vocabulary {c.vocab_size}, "
                         f"k={k}); re-create the directory")
    stored = np.float32
    if centroids is not None:
        stored, centroids = centroids.dtype.type, centroids.astype(np.float32)
        if centroids.shape != (k, c.hidden_size):
            raise ValueError(f"{directory / CLUSTERS_NAME}: centroids are {centroids.shape}, config.json says "
                             f"({k}, {c.hidden_size}); re-create the directory")
    term = None
    if ("term_weight" in tensors) != ("term_bias" in tensors):
        raise ValueError(f"{directory / CLUSTERS_NAME} holds one of term_weight / term_bias without the other; "
                         "re-save the model")
    if "term_weight" in tensors:
        if not config.term_channel:
            raise ValueError(f"{directory / CLUSTERS_NAME} holds term-channel weights but config.json has no "
                             "term_channel; set \"term_channel\": true in config.json or re-save the model")
        term = np.concatenate([tensors["term_weight"].reshape(-1), tensors["term_bias"].reshape(-1)]).astype(np.float32)
        if term.shape != (c.hidden_size + 1,):
            raise ValueError(f"{directory / CLUSTERS_NAME}: term_weight / term_bias hold {term.size} values, the "
                             f"backbone's hidden size is {c.hidden_size}; re-save the model")
    if config.adapter is not None and not (directory / config.adapter).is_dir():
        raise FileNotFoundError(f"{directory} names the adapter {config.adapter!r} but {directory / config.adapter} "
                                "is missing; re-run `lens train` or copy the adapter back")
    return ModelFiles(directory, config, assignment, centroids, term, stored)


def check_model_target(path: str | os.PathLike) -> Path:
    """Refuse to write a model over something that is not one: a file, a non-empty directory without a
    ``config.json``, or one whose ``config.json`` is not a LENS model's (a Hugging Face model's backbone, say):
    writing replaces the whole directory, so a user's folder must never be taken for a model."""
    path = check_replace_target(path, CONFIG_NAME, "LENS model directory")
    what = foreign_model(path)
    if what is not None:
        raise FileExistsError(f"{path} holds {what}, not a LENS model directory; writing would replace it: choose a "
                              "new or empty directory")
    return path


def _config_data(directory: Path) -> tuple[dict | None, str | None]:
    """``directory/config.json`` read once: (its object when it is a LENS model's, else None; what it is when it is
    not one, else None). Both None: there is no config.json."""
    path = directory / CONFIG_NAME
    if not path.is_file():
        return None, None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None, "a config.json that is not JSON"
    if isinstance(data, dict) and "clustering" in data and "format_version" in data:
        return data, None
    if isinstance(data, dict) and isinstance(data.get("model_type"), str):
        return None, f"a Hugging Face model (model_type {data['model_type']!r})"
    return None, "a config.json that is not a LENS model's"


def foreign_model(directory: str | os.PathLike) -> str | None:
    """What ``directory`` holds when its ``config.json`` is not a LENS model's (e.g. ``"a Hugging Face model
    (model_type 'llama')"``); None when it is one, or there is none."""
    return _config_data(Path(directory))[1]


def _backbone_of(source: Path) -> Path | None:
    """The backbone directory or file the LENS model at ``source`` names (resolved), if it is one on disk."""
    data, _ = _config_data(source)
    backbone = None if data is None else data.get("backbone")
    if not isinstance(backbone, str) or backbone == "default":
        return None
    path = Path(backbone) if Path(backbone).is_absolute() else source / backbone
    return path.resolve() if path.exists() else None


def check_not_input(out: str | os.PathLike, inputs: Sequence[str | os.PathLike | None]) -> Path:
    """Refuse an output directory that is one of the command's own inputs, or the backbone an input model names
    (even with ``--overwrite``)."""
    out = Path(out)
    for source in inputs:
        if source is None or os.fspath(source) == "default" or not Path(source).exists():
            continue
        if out.resolve() == Path(source).resolve():
            raise FileExistsError(f"--out {out} is also this command's input {source}: writing would replace what it "
                                  "reads; choose a new --out")
        if Path(source).is_dir() and _backbone_of(Path(source)) == out.resolve():
            raise FileExistsError(f"--out {out} is the backbone of this command's input {source}: writing would "
                                  "replace the weights it reads; choose a new --out")
    return out


# What LENS's writers put in a model directory (the model's files, a training or MNTP run's checkpoint, logs, card
# and prefix cache; the shipped default's "base", its base run's record): anything else there is a user's
MODEL_DIR_ENTRIES = frozenset({CONFIG_NAME, CLUSTERS_NAME, CLUSTERS_TSV, ADAPTER_DIR, BACKBONE_DIR, ST_MODULES_NAME,
                               ST_CONFIG_NAME, "README.md", "curves.png", "train_config.json", "train_log.csv",
                               "checkpoint", "prefix-cache", "mntp_config.json", "mntp_log.csv", "base"})


def check_model_output(out: str | os.PathLike, inputs: Sequence[str | os.PathLike | None] = (), *,
                       overwrite: bool = False, keeps_others: bool = False) -> Path:
    """The check of a command that writes a model directory (``lens cluster-vocab``, ``merge``, ``mntp``): never
    over one of its own ``inputs`` (or the backbone one names), over a LENS model only with ``overwrite``
    (``--overwrite``), and never over a folder that is not a model (``check_model_target``), nor, for a writer that
    replaces the whole directory (not ``keeps_others``: training and MNTP keep what else it holds), over a model
    beside which a user keeps other files. The Python API (``write_model_dir``) replaces a LENS model as asked."""
    out = check_model_target(check_not_input(out, inputs))
    if (out / CONFIG_NAME).is_file() and not overwrite:
        held = [n for n in ("adapter", "checkpoint", "backbone", "train_log.csv") if (out / n).exists()]
        what = f"a trained LENS model ({', '.join(held)})" if held else "a LENS model"
        raise FileExistsError(f"{out} already holds {what}; pass --overwrite to replace it, or choose a new --out")
    if (out / CONFIG_NAME).is_file() and not keeps_others:  # the writer replaces the whole directory
        foreign = sorted(p.name for p in out.iterdir() if p.name not in MODEL_DIR_ENTRIES and not p.name.startswith("."))
        if foreign:
            raise FileExistsError(f"{out} also holds files that are not the model's ({', '.join(foreign[:5])}"
                                  f"{', ...' if len(foreign) > 5 else ''}): writing replaces the whole directory, even "
                                  "with --overwrite, so they would be lost; move them out or choose a new --out")
    return out


def write_model_dir(
    path: str | os.PathLike,
    config: LensConfig,
    assignment: np.ndarray,
    centroids: np.ndarray | None,
    tokenizer,
    *,
    centroids_dtype=np.float32,
    adapter: Path | Callable[[Path], None] | None = None,
    backbone: Callable[[Path], None] | None = None,
    files: Mapping[str, bytes] | None = None,
    keep_existing: bool = False,
    term: np.ndarray | None = None,
) -> Path:
    """Write a model directory atomically (all of it, or nothing; ``config.json`` last).

    ``centroids=None`` writes the compact form. ``adapter`` is a PEFT adapter directory to copy or a function
    that writes one into the path it is given (``config.adapter`` names it). ``backbone`` writes a merged
    backbone into ``config.backbone``. ``files`` adds files (e.g. a model card). ``keep_existing`` keeps what
    else an existing directory holds (a training run's checkpoint and logs). ``term`` (hidden + 1: weight, then
    bias) is the term channel's, written only with ``config.term_channel``.
    """
    from safetensors.numpy import save

    if (adapter is None) != (config.adapter is None):
        raise ValueError("config.adapter must name the adapter directory exactly when an adapter is written")
    if not keep_existing:
        check_model_target(path)
    tensors = {"assignment": np.ascontiguousarray(assignment, dtype=np.int32)}
    if centroids is not None:
        tensors["centroids"] = np.ascontiguousarray(np.asarray(centroids, dtype=np.float32).astype(centroids_dtype))
    if term is not None:
        if not config.term_channel:
            raise ValueError("term-channel weights are written only for a config with term_channel on")
        term = np.asarray(term, dtype=np.float32).reshape(-1)
        tensors["term_weight"], tensors["term_bias"] = np.ascontiguousarray(term[:-1]), np.ascontiguousarray(term[-1:])
    with atomic_dir(path, keep_existing=keep_existing, what="model directory") as tmp:
        if backbone is not None:
            backbone(tmp / config.backbone)
        if isinstance(adapter, (str, os.PathLike)):
            shutil.copytree(adapter, tmp / config.adapter)
        elif adapter is not None:
            adapter(tmp / config.adapter)
        atomic_write_bytes(tmp / CLUSTERS_NAME, save(tensors))
        atomic_write_bytes(tmp / CLUSTERS_TSV, clusters_tsv(assignment, config.num_clusters, tokenizer).encode("utf-8"))
        for name, data in {**sentence_transformers_files(config), **(files or {})}.items():
            atomic_write_bytes(tmp / name, data)
        config.save(tmp)
    return Path(path)


# a trained directory's own records, carried into its stacked form
TRAINING_RECORDS = ("README.md", "train_config.json", "train_log.csv", "curves.png")


def stack_model_dirs(top: str | os.PathLike, bottom: str | os.PathLike, out: str | os.PathLike,
                     fraction: float = 1.0, rank: int | None = None) -> Path:
    """Write ``top`` -- trained with ``lens train`` from ``bottom`` merged (``lens merge``) -- in the small form:
    ``bottom``'s backbone reference and one adapter, the two stacked exactly (``lens.adapters``), with ``top``'s
    cluster head, settings and training records (``lens merge TOP --onto BOTTOM``).

    ``fraction`` < 1 writes the model that far along the straight line from ``bottom``'s weights to ``top``'s
    instead (``--fraction``; weight-space ensembling, as WiSE-FT does for fine-tuned models): ``top``'s adapter
    update times ``fraction``, and each head weight (centroids, term channel) ``bottom``'s + ``fraction`` x
    (``top``'s - ``bottom``'s). It keeps part of what a continuation learnt and part of what it lost, with one
    model's cost at inference; the two must share their clusters.

    ``rank`` (``--rank``) writes the stacked adapter at that rank instead of the exact ``r1 + r2``: each module's
    update cut to its best approximation of that rank (``lens.adapters.truncate_lora``), so the adapter keeps the
    size of one trained at that rank; the least share of a module's update energy kept is recorded in
    ``config.extra["stacked"]``."""
    from lens.adapters import ADAPTER_CONFIG, stack_adapter_dirs
    from lens.backbone import load_tokenizer, resolve_backbone

    if not 0 < fraction <= 1:
        raise ValueError(f"--fraction must be in (0, 1] (1: MODEL itself; 0.5: half way from ONTO), got {fraction}")
    top_files, bottom_files = read_model_dir(top), read_model_dir(bottom)
    for name, files in (("MODEL", top_files), ("--onto", bottom_files)):
        if files.adapter_dir is None:
            raise ValueError(f"{name} {files.directory} has no adapter; --onto stacks two trained adapters (MODEL "
                             "trained with `lens train` from `lens merge ONTO`)")
    heads = [getattr(f.config.clustering, "lm_head_sha256", None) for f in (top_files, bottom_files)]
    if None not in heads and heads[0] != heads[1]:
        raise ValueError(f"{top_files.directory} and {bottom_files.directory} were clustered from different LM heads; "
                         "MODEL must have been trained from ONTO merged (`lens merge ONTO`)")
    config = LensConfig.from_dict(top_files.config.to_dict())
    config.backbone, config.adapter = bottom_files.config.backbone, "adapter"
    centroids, term = top_files.centroids, top_files.term
    if fraction != 1:
        centroids, term = _interpolated_head(bottom_files, top_files, fraction)
        config.extra = {**config.extra, "interpolated": {
            "fraction": fraction, "from": bottom_files.directory.name, "to": top_files.directory.name,
            "note": "weights bottom + fraction x (top - bottom): lens merge TO --onto FROM --fraction F"}}
    records = {n: (top_files.directory / n).read_bytes() for n in TRAINING_RECORDS
               if (top_files.directory / n).is_file()}

    def adapter(dest: Path) -> None:  # called by write_model_dir before it saves the config
        kept = stack_adapter_dirs(bottom_files.adapter_dir, top_files.adapter_dir, dest, fraction=fraction, rank=rank)
        if rank is not None:  # the rank written: R, or r1 + r2 where that is smaller (nothing then cut)
            written = int(read_json(dest / ADAPTER_CONFIG, "PEFT adapter config")["r"])
            config.extra = {**config.extra, "stacked": {
                "rank": written, "min_energy_kept": round(min(kept.values()), 6),
                "mean_energy_kept": round(float(np.mean(list(kept.values()))), 6),
                "note": "each module's stacked LoRA update cut to its best approximation of this rank (truncated "
                        "SVD); energy: the share of the update's squared Frobenius norm kept"}}

    return write_model_dir(out, config, top_files.assignment, centroids,
                           load_tokenizer(resolve_backbone(bottom_files.backbone)),
                           centroids_dtype=top_files.centroids_dtype, term=term, files=records, adapter=adapter)


def _interpolated_head(bottom: ModelFiles, top: ModelFiles, fraction: float) -> tuple[np.ndarray, np.ndarray | None]:
    """The cluster head (centroids, term channel) ``fraction`` of the way from ``bottom``'s to ``top``'s; refused
    unless both hold the same clusters and heads of the same shape (a continuation of ``bottom`` does)."""
    if not np.array_equal(bottom.assignment, top.assignment):
        raise ValueError(f"{top.directory} and {bottom.directory} assign tokens to different clusters; --fraction "
                         "interpolates the heads of a model and its own continuation (trained from it merged)")
    if bottom.centroids is None or top.centroids is None or bottom.centroids.shape != top.centroids.shape:
        raise ValueError(f"{top.directory} and {bottom.directory} need trained cluster heads of the same shape to be "
                         "interpolated (clusters.safetensors with centroids in both)")
    if (bottom.term is None) != (top.term is None):
        raise ValueError(f"only one of {top.directory} and {bottom.directory} has a term channel; --fraction needs "
                         "it in both or in neither")

    def mix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = a.astype(np.float32), b.astype(np.float32)
        return a + np.float32(fraction) * (b - a)

    return mix(bottom.centroids, top.centroids), None if top.term is None else mix(bottom.term, top.term)


def sentence_transformers_config(config: LensConfig) -> dict:
    """``config_sentence_transformers.json`` of a directory: a ``SparseEncoder`` whose ``query`` prompt is the
    default instruction (the LENS module puts it in ``config.query_template`` and never pools it), documents with
    no prompt, and cosine similarity (LENS vectors are compared by cosine). No versions or dates: the same
    model gives the same bytes."""
    return {
        "model_type": "SparseEncoder",
        "prompts": {"query": config.default_instruction, "document": ""},
        "default_prompt_name": None,
        "similarity_fn_name": "cosine",
    }


def sentence_transformers_files(config: LensConfig) -> dict[str, bytes]:
    """``modules.json`` and ``config_sentence_transformers.json``: ``SparseEncoder(path)`` loads the directory
    through the one LENS module (saved in the root, so its files are the directory's own)."""
    modules = [{"idx": 0, "name": "0", "path": "", "type": ST_MODULE}]

    def dump(obj) -> bytes:
        return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode("utf-8")

    return {ST_MODULES_NAME: dump(modules), ST_CONFIG_NAME: dump(sentence_transformers_config(config))}


def read_sentence_transformers_config(path: str | os.PathLike) -> dict:
    """The directory's ``config_sentence_transformers.json`` (a ``SparseEncoder`` save keeps the user's prompts
    and ``max_active_dims`` there), or what ``write_model_dir`` would write when it has none."""
    directory = resolve_model_dir(path)
    if (directory / ST_CONFIG_NAME).is_file():
        return read_json(directory / ST_CONFIG_NAME, "sentence-transformers config")
    config = read_released(directory)[0] if is_released_dir(directory) else LensConfig.load(directory)
    return sentence_transformers_config(config)


def add_sentence_transformers_files(path: str | os.PathLike) -> Path:
    """Give a model directory written before ``write_model_dir`` wrote them the sentence-transformers files it
    lacks (existing ones are kept); atomically, under the directory's writer lock. Returns the directory."""
    files = read_model_dir(path)
    missing = {name: data for name, data in sentence_transformers_files(files.config).items()
               if not (files.directory / name).is_file()}
    if missing:
        with atomic_dir(files.directory, keep_existing=True, what="model directory") as tmp:
            for name, data in missing.items():
                atomic_write_bytes(tmp / name, data)
    return files.directory


def convert_released(src: str | os.PathLike, dst: str | os.PathLike) -> Path:
    """Write a regular LENS model directory at ``dst`` for the paper's released folder ``src``
    (``lens.paper_models``): its head as ``clusters.safetensors``, a ``config.json`` recording the paper convention
    and naming ``src`` as the backbone (the 7B weights are not copied: keep ``src`` where it is). Returns ``dst``."""
    config, assignment, head = read_released(src)
    tokenizer = load_released_tokenizer(config.backbone, config.clustering.vocab_size)
    return write_model_dir(dst, config, assignment, head, tokenizer)
