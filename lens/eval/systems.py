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
``lens-hybrid``     ``index.HybridIndex``: LENS lexicon + MiniLM dense, score = w_lex cos_lex + w_dense cos_dense
=================== ===============================================================================================

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

from lens.eval.cache import CacheResult, EmbeddingCache
from lens.corpus import Document

logger = logging.getLogger(__name__)

__all__ = [
    "ALL_SYSTEMS", "BM25", "FusionSystem", "LensResource", "MiniLMResource", "Resources", "System", "make_systems",
]

ALL_SYSTEMS = ("bm25", "minilm", "bm25+minilm", "bm25+minilm-rrf", "lens-lexicon", "lens-dense", "lens-hybrid")
DEFAULT_DEPTH = 1000  # hits kept per query (and per component run before fusion)

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
    """One LENS encoder (loaded on first use) and its cached document vectors (lexicon + dense)."""

    def __init__(self, model: str = "default", *, attention: str | None = None, pooling: str | None = None,
                 cache_root: str | os.PathLike, batch_size: int = 16, chunk_size: int = 128,
                 show_progress_bar: bool = True):
        self.model_path, self.attention, self.pooling = model, attention, pooling
        self.cache_root, self.batch_size, self.chunk_size = cache_root, batch_size, chunk_size
        self.show_progress_bar = show_progress_bar
        self._encoder = None
        self.load_seconds: float | None = None
        self._docs_memo: tuple[tuple, CacheResult] | None = None

    @property
    def encoder(self):
        if self._encoder is None:
            from lens.encoder import LensEncoder

            t0 = time.perf_counter()
            self._encoder = LensEncoder.from_pretrained(self.model_path, attention=self.attention, pooling=self.pooling)
            self.load_seconds = time.perf_counter() - t0
            logger.info("loaded LENS model %s in %.1fs (k=%d)", self.model_path, self.load_seconds,
                        self._encoder.num_clusters)
        return self._encoder

    def cache_fingerprint(self) -> dict:
        enc = self.encoder
        return {"kind": "lens-documents", "output": "both", "normalize": True, **enc.fingerprint(),
                "max_seq_length": enc.max_seq_length, "backbone": enc.config.backbone}

    def documents(self, texts: list[str]) -> CacheResult:
        """Unit lexicon and dense vectors of documents, from the cache or encoded once (``output="both"``)."""
        key = (len(texts), hash(tuple(texts)))
        if self._docs_memo is None or self._docs_memo[0] != key:
            cache = EmbeddingCache(self.cache_root, self.cache_fingerprint(), chunk_size=self.chunk_size)
            enc = self.encoder

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


class MiniLMResource:
    """The packaged all-MiniLM-L6-v2 and its cached document vectors."""

    def __init__(self, *, cache_root: str | os.PathLike, batch_size: int = 64, chunk_size: int = 512,
                 show_progress_bar: bool = True):
        self.cache_root, self.batch_size, self.chunk_size = cache_root, batch_size, chunk_size
        self.show_progress_bar = show_progress_bar
        self._encoder = None
        self._docs_memo: tuple[tuple, CacheResult] | None = None

    @property
    def encoder(self):
        if self._encoder is None:
            from lens.dense import DenseEncoder

            self._encoder = DenseEncoder.from_pretrained("minilm")
        return self._encoder

    def cache_fingerprint(self) -> dict:
        enc = self.encoder
        return {"kind": "dense-documents", "model": enc.name, "sha256": enc.fingerprint(),
                "max_seq_length": enc.max_seq_length, "normalize": True}

    def documents(self, texts: list[str]) -> CacheResult:
        key = (len(texts), hash(tuple(texts)))
        if self._docs_memo is None or self._docs_memo[0] != key:
            cache = EmbeddingCache(self.cache_root, self.cache_fingerprint(), chunk_size=self.chunk_size)
            enc = self.encoder
            result = cache.get(texts, lambda chunk: enc.encode(chunk, batch_size=self.batch_size, show_progress_bar=False),
                               show_progress_bar=self.show_progress_bar, desc="MiniLM documents")
            self._docs_memo = (key, result)
        return self._docs_memo[1]

    def query(self, text: str) -> np.ndarray:
        return self.encoder.encode([text], batch_size=1, show_progress_bar=False)


class Resources:
    """Encoders shared by the systems of one run (each loaded at most once, on first use)."""

    def __init__(self, *, model: str = "default", cache_root: str | os.PathLike, lens_batch_size: int = 16,
                 dense_batch_size: int = 64, show_progress_bar: bool = True):
        self.model = model
        self.lens = LensResource(model, cache_root=cache_root, batch_size=lens_batch_size,
                                 show_progress_bar=show_progress_bar)
        self.minilm = MiniLMResource(cache_root=cache_root, batch_size=dense_batch_size,
                                     show_progress_bar=show_progress_bar)


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

    def _index(self, ids, lexicon, dense, weights=None, fingerprint=None):
        from index import HybridIndex

        t0 = time.perf_counter()
        index = HybridIndex(None if lexicon is None else lexicon.shape[1], None if dense is None else dense.shape[1],
                            "flat", weights=weights, fingerprint=fingerprint)
        index.add(ids, lexicon=lexicon, dense=dense)
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


class MiniLM(_VectorSystem):
    name = "minilm"

    def __init__(self, minilm: MiniLMResource):
        super().__init__()
        self.minilm = minilm

    def _build(self, docs):
        vecs = self.minilm.documents([d.full_text for d in docs])
        self.index, build_s = self._index([d.id for d in docs], None, vecs.arrays["vectors"])
        self._finish_costs([vecs], build_s)

    def search(self, query, k):
        return self._run(self.index.search(dense=self.minilm.query(query), k=k)[0])

    def describe(self):
        return f"{self.minilm.encoder.name}, max {self.minilm.encoder.max_seq_length} tokens, mean pooling, cosine"


class LensLexicon(_VectorSystem):
    name = "lens-lexicon"

    def __init__(self, lens: LensResource, instruction: str, name: str | None = None, own_resource: bool = False):
        super().__init__()
        self.lens, self.instruction = lens, instruction
        self.name = name or self.name
        self.own_resource = own_resource  # release() also frees the encoder (ablation variants)

    def _build(self, docs):
        vecs = self.lens.documents([d.full_text for d in docs])
        self.index, build_s = self._index([d.id for d in docs], vecs.arrays["lexicon"], None)
        self._finish_costs([vecs], build_s)

    def search(self, query, k):
        return self._run(self.index.search(lexicon=self.lens.query(query, self.instruction, "lexicon"), k=k)[0])

    def describe(self):
        c = self.lens.encoder.config
        return (f"LENS {self.lens.model_path} lexicon (k={c.num_clusters}, {c.attention} attention, "
                f"{c.pooling} pooling), cosine")

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

    def __init__(self, lens: LensResource, minilm: MiniLMResource, instruction: str, weights=(0.5, 0.5)):
        super().__init__()
        self.lens, self.minilm, self.instruction = lens, minilm, instruction
        self.weights = tuple(float(w) for w in weights)

    def _build(self, docs):
        texts = [d.full_text for d in docs]
        lex, dense = self.lens.documents(texts), self.minilm.documents(texts)
        self.index, build_s = self._index([d.id for d in docs], lex.arrays["lexicon"], dense.arrays["vectors"],
                                          weights=self.weights)
        self._finish_costs([lex, dense], build_s)

    def search(self, query, k):
        lexicon = self.lens.query(query, self.instruction, "lexicon")
        dense = self.minilm.query(query)
        return self._run(self.index.search(lexicon=lexicon, dense=dense, k=k, weights=self.weights)[0])

    def describe(self):
        return (f"index.HybridIndex: LENS {self.lens.model_path} lexicon + MiniLM dense, "
                f"weights (lex, dense) = {self.weights}")


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
    "minilm": lambda get, r, instr, w, depth: MiniLM(r.minilm),
    "bm25+minilm": lambda get, r, instr, w, depth: FusionSystem(
        "bm25+minilm", [get("bm25"), get("minilm")], "minmax", [0.5, 0.5], depth),
    "bm25+minilm-rrf": lambda get, r, instr, w, depth: FusionSystem(
        "bm25+minilm-rrf", [get("bm25"), get("minilm")], "rrf", None, depth),
    "lens-lexicon": lambda get, r, instr, w, depth: LensLexicon(r.lens, instr),
    "lens-dense": lambda get, r, instr, w, depth: LensDense(r.lens, instr),
    "lens-hybrid": lambda get, r, instr, w, depth: LensHybrid(r.lens, r.minilm, instr, w),
}
assert tuple(SYSTEMS) == ALL_SYSTEMS


def make_systems(names: Sequence[str], resources: Resources, instruction: str, *, weights=(0.5, 0.5),
                 depth: int = DEFAULT_DEPTH) -> list[System]:
    """The named systems, sharing components (a fusion reuses the bm25/minilm instances)."""
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        raise ValueError(f"unknown system {unknown[0]!r}; valid: {', '.join(SYSTEMS)}")
    made: dict[str, System] = {}

    def get(name: str) -> System:
        if name not in made:
            made[name] = SYSTEMS[name](get, resources, instruction, weights, depth)
        return made[name]

    return [get(n) for n in names]
