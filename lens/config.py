"""``config.json`` of a LENS model directory: one versioned dataclass, checked on load."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from lens.atomic import read_json, write_json

FORMAT_VERSION = 1
CONFIG_NAME = "config.json"
CLUSTERS_NAME = "clusters.safetensors"
CLUSTERS_TSV = "clusters.tsv"
ADAPTER_DIR = "adapter"

# The paper's instruction format: "<instruct>{task}\n<query>{q}"; the query text follows the template.
DEFAULT_QUERY_TEMPLATE = "<instruct>{instruction}\n<query>"
DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"

# How texts become token ids and which positions are pooled (``LensConfig.convention``):
# "lens": prompt and text tokenised apart, ``[BOS] prompt text [EOS]``; the text's tokens and the EOS are pooled at
#         their left neighbour (the logits predicting them); right padding; logits in the model's dtype.
# "paper": the released checkpoints' reference pass (``lens.paper_models``): ``prompt + text + "</s>"`` tokenised as
#         one string behind BOS and cut at max_length (a cut text loses its EOS); pooled logit positions run from the
#         last ``<query>`` token (queries) or BOS (documents) to the third-to-last position; left padding; logits
#         upcast to float32 before ``log1p(relu)``.
CONVENTIONS = ("lens", "paper")


@dataclass
class ClusteringConfig:
    """How the vocabulary was clustered; enough to rebuild the same clusters and to check the backbone."""

    num_clusters: int  # k: the lexicon vector's dimension
    vocab_size: int  # rows of the LM head
    hidden_size: int  # columns of the LM head
    lm_head_sha256: str  # fingerprint of the LM-head matrix that was clustered
    seed: int = 0
    iterations: int = 20
    backend: str = "faiss"
    exclude_special: bool = False
    num_excluded: int = 0  # tokens left out of every cluster (assignment -1)


@dataclass
class LensConfig:
    """Everything needed to rebuild a LensEncoder from its directory (besides the weight files)."""

    backbone: str  # "default", a local HF directory or a .gguf path
    clustering: ClusteringConfig
    attention: str = "bidirectional"  # or "causal" (ablation)
    pooling: str = "max"  # "max" (paper), "sum" or "last" (ablations)
    max_length: int = 512  # tokens per sequence, BOS + prompt + text + EOS
    query_template: str = DEFAULT_QUERY_TEMPLATE
    default_instruction: str = DEFAULT_INSTRUCTION
    adapter: str | None = None  # subdirectory holding a PEFT adapter, or None
    # Applied to every text (documents and queries, not the instruction) before tokenising, so an index and its
    # queries agree: None keeps the text as it is, "lowercase" / "casefold" make "HEART" and "heart" the same tokens
    # (a cased vocabulary splits them into different tokens and clusters), "lowercase-shouted" lower-cases only the
    # texts written in capitals (lens.inputs.TEXT_NORMALIZATIONS).
    text_normalization: str | None = None
    # Exact match kept (lens.pooling.term_floor): each of a text's own tokens' clusters weighs at least this share of
    # the vector's heaviest weight, merged by max with the predicted (expansion) weights. None: pooling alone.
    term_floor: float | None = None
    # Which position's logits stand for a token (lens.pooling.LOGIT_POSITIONS): "next" (the paper's: the position
    # that predicts it) or "own" (its own position). Not written when "next", so such configs read as before.
    logit_position: str = "next"
    # The explicit term channel (lens.pooling.merge_terms): each of a text's own tokens' clusters gets a learned
    # weight from the token's own position (``term_weight`` / ``term_bias`` in clusters.safetensors; absent: their
    # starting values), merged by max with the pooled weights. Not written when False.
    term_channel: bool = False
    # Echo input (lens.inputs): each text written twice, the second copy pooled, so under causal attention the
    # position that stands for a token has read it. About twice the compute per text. Not written when False.
    echo: bool = False
    format_version: int = FORMAT_VERSION
    extra: dict = field(default_factory=dict)  # free-form notes (e.g. training provenance)
    convention: str = "lens"  # CONVENTIONS: "lens" or "paper" (the released checkpoints); not written when "lens"

    @property
    def num_clusters(self) -> int:
        return self.clustering.num_clusters

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        if data.get("convention") == "lens":  # the default is not written: such a config reads as it did before
            del data["convention"]
        for name, default in (("logit_position", "next"), ("term_channel", False), ("echo", False)):  # likewise
            if data.get(name) == default:
                del data[name]
        return data

    @classmethod
    def from_dict(cls, data: dict, source: str = "config") -> "LensConfig":
        version = data.get("format_version")
        if version != FORMAT_VERSION:
            raise ValueError(
                f"{source} has format_version {version!r}; this version of LENS reads {FORMAT_VERSION}. "
                "Upgrade LENS or re-create the directory with `lens cluster-vocab`."
            )
        data = dict(data)
        try:
            data["clustering"] = ClusteringConfig(**data["clustering"])
            config = cls(**data)
        except (KeyError, TypeError) as e:
            raise ValueError(f"{source} is not a LENS config ({e}); re-create it with `lens cluster-vocab`") from e
        if config.convention not in CONVENTIONS:
            raise ValueError(f"{source} has convention {config.convention!r}; valid: {', '.join(CONVENTIONS)}")
        if not isinstance(config.echo, bool):
            raise ValueError(f"{source} has echo {config.echo!r}; valid: true or false")
        if config.echo and config.convention != "lens":
            raise ValueError(f"{source} has echo on with convention {config.convention!r}: echo needs the LENS "
                             "convention; set \"echo\": false")
        return config

    def save(self, directory: str | Path) -> None:
        write_json(Path(directory) / CONFIG_NAME, self.to_dict())

    @classmethod
    def load(cls, directory: str | Path) -> "LensConfig":
        path = Path(directory) / CONFIG_NAME
        return cls.from_dict(read_json(path, "LENS config"), source=str(path))
