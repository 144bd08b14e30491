"""``train_config.json``: one versioned dataclass describing a (multi-stage) training run."""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from index.vectors import weight_pair
from lens.atomic import read_json, write_json

TRAIN_FORMAT_VERSION = 1
BIAS_INITS = ("fitted", "siglip")  # TrainConfig.bias_init
LR_SCHEDULES = ("run", "stage")  # TrainConfig.lr_schedule
# TrainConfig fields a resumed run may change: they do not change what a step computes (where it runs and how
# fast; GradCache's chunk gives the same gradients; bf16 follows the device by default) or are for people only
RESUMABLE_CHANGES = {"device", "threads", "bf16", "gradient_checkpointing", "cache_chunk", "checkpoint_every",
                     "notes"}
ALL_PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass
class StageConfig:
    """One stage: its data files, loss and length (``steps``, or ``epochs`` over the data)."""

    name: str
    data: list[str]  # JSONL(.gz) files of TrainExample lines
    loss: str = "infonce"  # a name of lens.train.objectives.OBJECTIVES, or a weighted sum like "infonce+0.5*bce"
    steps: int | None = None
    epochs: float = 1.0
    batch_size: int | None = None  # overrides TrainConfig.batch_size (global, as it is)
    max_negatives: int | None = None  # hard negatives per query (None: all the data has)
    lr: float | None = None  # overrides TrainConfig.lr for this stage
    max_examples: int | None = None  # a seeded random subset of the stage's data
    max_per_task: int | None = None  # a seeded random subset of at most this many examples of each task

    def loss_weights(self) -> dict[str, float]:
        """``"infonce+0.5*bce"`` -> ``{"infonce": 1.0, "bce": 0.5}`` (names from the objectives' registry)."""
        from lens.train.objectives import parse_loss

        return parse_loss(self.loss, where=f"stage {self.name!r}")


@dataclass
class TrainConfig:
    """Everything that defines a training run except where it writes (the output directory)."""

    stages: list[StageConfig]
    model: str = "default"  # LENS directory holding the clusters (and backbone reference) to start from
    backbone: str | None = None  # overrides the model directory's backbone
    # LoRA (defaults: the paper's r=32, alpha=64 on every attention and MLP projection)
    lora_r: int = 32
    lora_alpha: int = 64
    lora_dropout: float = 0.0
    lora_targets: list[str] = field(default_factory=lambda: list(ALL_PROJECTIONS))
    lora_layers: int | None = None  # train the top N layers only (None: every layer; 0: none, the decoder frozen)
    train_head: bool = True  # the cluster head (k x hidden) is trained too
    # optimisation
    lr: float = 1e-4
    head_lr: float | None = None  # None: same as lr
    term_lr: float | None = None  # the term channel's (LensConfig.term_channel); None: same as head_lr
    bias_lr: float = 0.05  # the BCE logit bias learns fast (SigLIP / BiXSE)
    # the bias at a BCE stage's start: "fitted" = SigLIP's -log(N-1) minus bce_scale x the mean cosine of the stage's
    # first batch (lexicon vectors are non-negative, so pairs do not start near cosine 0); "siglip" = -log(N-1)
    bias_init: str = "fitted"
    weight_decay: float = 0.0
    warmup_steps: int = 0
    # "run": one warm-up, then a linear decay to 0 over the whole run, every stage on it (a later stage starts part
    # way down); "stage": each stage warms up and decays over its own steps (GTE's stages, trained one after the
    # other); the optimizer's state carries over either way
    lr_schedule: str = "run"
    max_grad_norm: float = 1.0
    batch_size: int = 16  # the global batch: under torchrun each rank encodes a slice of it
    grad_accum: int = 1  # micro-batches per step; each has its own in-batch negatives
    # the cached contrastive loss (GradCache): texts per chunk (None: off). The whole batch's loss and gradients
    # with the activations of one chunk; with torchrun the batch is split over the ranks first
    cache_chunk: int | None = None
    temperature: float = 0.02
    bce_scale: float = 20.0
    graded_floor: float = 0.7
    # bce-teacher: a teacher cosine c (`lens data teacher`, MiniLM by default) is the probability
    # sigmoid((c - teacher_center) / teacher_width), blended with the 0/1 label (graded_floor weighs the label);
    # the defaults are lens.train.losses.TEACHER_CENTER / TEACHER_WIDTH (written out: this module imports no torch)
    teacher_center: float = 0.5
    teacher_width: float = 0.1
    # the ``hybrid`` loss: the frozen dense peer ("minilm" or a sentence-transformers directory) and the
    # (w_lex, w_dense) of the hybrid score it trains for (the index's default is 0.5,0.5)
    hybrid_peer: str = "minilm"
    hybrid_weights: list[float] = field(default_factory=lambda: [0.5, 0.5])
    query_max_length: int = 64  # instruction + query
    doc_max_length: int = 192
    max_length: int | None = None  # the trained model's encoding length (None: keep the starting model's)
    seed: int = 0
    # bookkeeping
    checkpoint_every: int = 50
    eval_every: int = 50
    val_data: list[str] = field(default_factory=list)
    val_examples: int = 256
    instructions: dict[str, str] = field(default_factory=dict)  # task -> query instruction
    notes: list[str] = field(default_factory=list)  # free text for people (how to launch it); the trainer ignores it
    # hardware
    device: str | None = None  # None: cuda when present, else cpu
    bf16: bool | None = None  # autocast to bfloat16 (None: on CUDA only; there the frozen decoder is bf16 too)
    gradient_checkpointing: bool | None = None  # (None: on CUDA only)
    threads: int | None = None
    format_version: int = TRAIN_FORMAT_VERSION

    def __post_init__(self):
        if not self.stages:
            raise ValueError("a training config needs at least one stage")
        self.stages = [s if isinstance(s, StageConfig) else StageConfig(**s) for s in self.stages]
        for s in self.stages:
            s.loss_weights()
            for name in ("max_examples", "max_per_task"):
                if getattr(s, name) is not None and getattr(s, name) < 1:
                    raise ValueError(f"stage {s.name!r}: {name} must be >= 1 (or null), got {getattr(s, name)}")
            if s.batch_size is not None and s.batch_size < 1:
                raise ValueError(f"stage {s.name!r}: batch_size must be >= 1 (or null for the run's), got {s.batch_size}")
            if s.max_negatives is not None and s.max_negatives < 0:
                raise ValueError(f"stage {s.name!r}: max_negatives must be >= 0 (or null for all), got "
                                 f"{s.max_negatives}")
            if s.lr is not None and not s.lr > 0:
                raise ValueError(f"stage {s.name!r}: lr must be > 0 (or null for the run's), got {s.lr}")
            if s.steps is not None and s.steps < 1:
                raise ValueError(f"stage {s.name!r}: steps must be >= 1 (or null to use epochs), got {s.steps}")
            if not s.epochs > 0:
                raise ValueError(f"stage {s.name!r}: epochs must be > 0, got {s.epochs}")
        w_lex, w_dense = weight_pair(self.hybrid_weights, "hybrid_weights")
        if w_lex == 0:
            raise ValueError("hybrid_weights: the lexicon weight must be > 0 (the hybrid loss trains the lexicon)")
        self.hybrid_weights = [w_lex, w_dense]
        if self.lora_layers is not None and self.lora_layers < 0:
            raise ValueError(f"lora_layers must be >= 0 (0: the decoder frozen; null: every layer), got "
                             f"{self.lora_layers}")
        for name in ("batch_size", "grad_accum", "lora_r", "query_max_length", "doc_max_length"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("checkpoint_every", "val_examples"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.eval_every < 0:
            raise ValueError(f"eval_every must be >= 0 (0: no validation), got {self.eval_every}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be >= 1 (or null for the machine's default), got {self.threads}")
        if not self.lora_alpha > 0 or not self.lora_targets:
            raise ValueError(f"lora_alpha must be > 0 and lora_targets name at least one projection, got "
                             f"{self.lora_alpha} and {self.lora_targets}")
        if self.cache_chunk is not None and self.cache_chunk < 1:
            raise ValueError(f"cache_chunk must be >= 1 (or null for no cached loss), got {self.cache_chunk}")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        for name in ("lr", "head_lr", "term_lr"):
            if getattr(self, name) is not None and not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0 (or null where it may be), got {getattr(self, name)}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule must be one of {LR_SCHEDULES}, got {self.lr_schedule!r}")
        if self.bias_init not in BIAS_INITS:
            raise ValueError(f"bias_init must be one of {BIAS_INITS}, got {self.bias_init!r}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict, source: str = "train config") -> "TrainConfig":
        version = data.get("format_version", TRAIN_FORMAT_VERSION)
        if version != TRAIN_FORMAT_VERSION:
            raise ValueError(f"{source} has format_version {version!r}; this LENS reads {TRAIN_FORMAT_VERSION}")
        check_fields(cls, data, source)
        stages = data.get("stages", [])
        if not isinstance(stages, list):
            raise ValueError(f"{source}: 'stages' must be a list of stage objects, got {type(stages).__name__}")
        for i, stage in enumerate(stages):
            if not isinstance(stage, dict):
                raise ValueError(f"{source}: stage {i} must be an object, got {type(stage).__name__}")
            check_fields(StageConfig, stage, f"{source}, stage {stage.get('name', i)!r}")
        try:
            return cls(**{**data, "stages": [StageConfig(**s) for s in stages]})
        except TypeError as e:
            raise ValueError(f"{source} is not a valid training config: {e}") from e

    def save(self, path: str | Path) -> None:
        write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> "TrainConfig":
        """The config in ``path``, its ``extends`` chain resolved (``resolve_extends``)."""
        return cls.from_dict(resolve_extends(path), source=str(path))


def _matches(value: Any, hint: Any) -> bool:
    """Whether a JSON value fits a field's type hint (int, float, bool, str, list[...], dict[str, ...], X | None);
    a float field takes an int, an int field never a bool or a float."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin is list:
        return isinstance(value, list) and all(_matches(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(isinstance(k, str) and _matches(v, args[1]) for k, v in value.items())
    return True  # a type this check does not know: left to the dataclass


def _type_name(hint: Any) -> str:
    """A field's type as an error names it: ``int or null``, ``list[str]``."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(hint))
    if hint is type(None):
        return "null"
    if typing.get_args(hint):  # list[str], dict[str, str]
        return str(hint).replace("typing.", "")
    return getattr(hint, "__name__", str(hint))


def check_fields(cls: type, data: dict, source: str) -> None:
    """Refuse, naming the key, a field ``cls`` does not have or a value of the wrong JSON type (``"4"`` for a
    number, ``1.5`` steps, a string where a list is wanted), before any of it is used."""
    hints = typing.get_type_hints(cls)
    known = set(hints) & {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{source}: unknown field(s) {unknown}; known fields: {sorted(known)}")
    for key, value in data.items():
        if key != "stages" and not _matches(value, hints[key]):
            raise ValueError(f"{source}: {key!r} must be {_type_name(hints[key])}, got {value!r} "
                             f"({type(value).__name__})")


def resume_changes(saved: dict, config: TrainConfig) -> list[str]:
    """The settings of ``config`` that differ from a run's saved ``train_config.json`` (``saved``), as
    ``"field: saved X, given Y"``, those a resume may change (``RESUMABLE_CHANGES``) left out."""
    old, new = TrainConfig.from_dict(saved, source="the saved train_config.json").to_dict(), config.to_dict()
    changes = [f"{k}: saved {old.get(k)!r}, given {v!r}" for k, v in new.items()
               if k not in RESUMABLE_CHANGES | {"stages"} and not _same(k, old.get(k), v)]
    if len(old["stages"]) != len(new["stages"]):
        changes.append(f"stages: saved {len(old['stages'])}, given {len(new['stages'])}")
    else:
        changes += [f"stage {b['name']!r} {k}: saved {a.get(k)!r}, given {v!r}"
                    for a, b in zip(old["stages"], new["stages"]) for k, v in b.items() if not _same(k, a.get(k), v)]
    return changes


PATH_FIELDS = frozenset({"model", "backbone", "data", "val_data"})  # a file or directory (or a list of them)


def _same(field: str, old: Any, new: Any) -> bool:
    """Equal settings; paths compare by the file they name (``m`` and ``/abs/m`` alike), from this directory."""
    if old == new or field not in PATH_FIELDS:
        return old == new
    olds, news = ([old], [new]) if not isinstance(old, list) else (old, new)
    if not isinstance(news, list) or len(olds) != len(news):
        return False
    return all(isinstance(a, str) and isinstance(b, str) and os.path.realpath(a) == os.path.realpath(b)
               for a, b in zip(olds, news))


def resolve_extends(path: str | Path, _chain: tuple[Path, ...] = ()) -> dict:
    """The fields of the training config file ``path`` with its ``"extends": "BASE.json"`` (a path relative to
    ``path``'s folder) resolved: the base's fields, each field the file names replacing the base's, except
    ``stages``, whose entries name a base stage each and change only the fields they give (``{"name": "labelled",
    "loss": "infonce+bm25"}``), the base's order kept. So a variant of a recipe states only what it changes, and the
    run saves the whole resolved config (``train_config.json``)."""
    path = Path(path)
    data = read_json(path, "training config")
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a training config is a JSON object, got {type(data).__name__}")
    if "extends" not in data:
        return data
    base_name = data.pop("extends")
    if not isinstance(base_name, str) or not base_name:
        raise ValueError(f"{path}: extends must name a base config file (relative to {path.parent}), got "
                         f"{base_name!r}")
    here = path.resolve()
    if here in _chain:
        raise ValueError(f"{path}: extends goes round in a circle: {' -> '.join(str(p) for p in (*_chain, here))}")
    base_path = path.parent / base_name
    if not base_path.is_file():
        raise ValueError(f"{path}: extends {base_name!r}, but {base_path} is not a file")
    base = resolve_extends(base_path, (*_chain, here))
    merged = {**base, **{k: v for k, v in data.items() if k != "stages"}}
    if "stages" in data:
        merged["stages"] = _merge_stages(base.get("stages", []), data["stages"], path, base_path)
    return merged


def _merge_stages(base: list, changes: list, path: Path, base_path: Path) -> list[dict]:
    """``base``'s stages with each entry of ``changes`` (a stage name and the fields it changes) applied."""
    stages = [dict(s) for s in base]
    names = [s.get("name") for s in stages]
    if not isinstance(changes, list):
        raise ValueError(f"{path}: stages must be a list of {{\"name\": ..., changed fields}}, got "
                         f"{type(changes).__name__}")
    for change in changes:
        name = change.get("name") if isinstance(change, dict) else None
        if name not in names:
            raise ValueError(f"{path}: stage {name!r} is not a stage of {base_path} ({', '.join(map(str, names))}); "
                             "an extending config changes the base's stages by name; to define other stages, "
                             "write the config without extends")
        stages[names.index(name)].update(change)
    return stages
