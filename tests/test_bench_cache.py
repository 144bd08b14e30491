"""lens.eval.cache: a second call encodes nothing, an interrupted run resumes, another fingerprint misses."""

from __future__ import annotations

import numpy as np
import pytest

from lens.eval.cache import EmbeddingCache, fingerprint_key, text_hash
from lens.encoder import EncodeOutput

FP = {"model": "fake", "sha256": "abc"}


class FakeEncoder:
    """Deterministic vectors from the text; records every text it was asked to encode."""

    def __init__(self, fail_after_calls: int | None = None):
        self.seen: list[str] = []
        self.calls = 0
        self.fail_after_calls = fail_after_calls

    def vec(self, text: str) -> np.ndarray:
        rng = np.random.default_rng(int(text_hash(text)[:8], 16))
        return rng.standard_normal(4).astype(np.float32)

    def __call__(self, texts):
        if self.fail_after_calls is not None and self.calls >= self.fail_after_calls:
            raise KeyboardInterrupt("simulated interruption")
        self.calls += 1
        self.seen += texts
        return np.stack([self.vec(t) for t in texts])


TEXTS = [f"text number {i}" + " pad" * (i % 5) for i in range(10)]


def test_second_call_encodes_nothing_and_returns_the_same_vectors(tmp_path):
    enc = FakeEncoder()
    cache = EmbeddingCache(tmp_path, FP, chunk_size=3)
    first = cache.get(TEXTS, enc)
    assert sorted(enc.seen) == sorted(TEXTS) and first.encoded == 10 and first.cached == 0
    np.testing.assert_array_equal(first.arrays["vectors"], np.stack([enc.vec(t) for t in TEXTS]))  # request order
    assert len(list(cache.directory.glob("chunk-*.npz"))) == 4  # ceil(10 / 3)

    enc2 = FakeEncoder()
    again = EmbeddingCache(tmp_path, FP, chunk_size=3).get(list(reversed(TEXTS)), enc2)  # a fresh process
    assert enc2.seen == [] and again.encoded == 0 and again.cached == 10
    np.testing.assert_array_equal(again.arrays["vectors"], first.arrays["vectors"][::-1])
    assert "from the cache" in again.rate_source
    assert again.rate == pytest.approx(first.rate)  # the rate stored when the vectors were encoded


def test_interrupted_run_resumes_with_only_the_missing_texts(tmp_path):
    enc = FakeEncoder(fail_after_calls=2)
    with pytest.raises(KeyboardInterrupt):
        EmbeddingCache(tmp_path, FP, chunk_size=4).get(TEXTS, enc)
    done = set(enc.seen)
    assert len(done) == 8  # two chunks of 4 were saved before the interruption

    enc2 = FakeEncoder()
    result = EmbeddingCache(tmp_path, FP, chunk_size=4).get(TEXTS, enc2)
    assert set(enc2.seen) == set(TEXTS) - done and len(enc2.seen) == 2
    assert result.encoded == 2 and result.cached == 8 and result.rate_source.startswith("mixed")
    np.testing.assert_array_equal(result.arrays["vectors"], np.stack([enc.vec(t) for t in TEXTS]))


def test_different_fingerprint_misses(tmp_path):
    EmbeddingCache(tmp_path, FP).get(TEXTS, FakeEncoder())
    enc = FakeEncoder()
    other = EmbeddingCache(tmp_path, {**FP, "sha256": "def"})
    assert other.directory != EmbeddingCache(tmp_path, FP).directory
    other.get(TEXTS, enc)
    assert sorted(enc.seen) == sorted(TEXTS)
    assert fingerprint_key({"a": 1, "b": 2}) == fingerprint_key({"b": 2, "a": 1})  # key order does not matter


def test_duplicates_are_encoded_once_and_new_texts_extend_the_cache(tmp_path):
    enc = FakeEncoder()
    cache = EmbeddingCache(tmp_path, FP)
    out = cache.get(["a", "b", "a"], enc)
    assert sorted(enc.seen) == ["a", "b"]
    np.testing.assert_array_equal(out.arrays["vectors"][0], out.arrays["vectors"][2])
    out = cache.get(["b", "c"], enc)
    assert sorted(enc.seen) == ["a", "b", "c"] and out.encoded == 1 and out.cached == 1
    assert len(cache) == 3 and "c" in cache and "zzz" not in cache


def test_several_parts_namedtuple_and_mapping(tmp_path):
    def both(texts):
        n = len(texts)
        return EncodeOutput(np.full((n, 3), 1.0, np.float32), np.arange(n * 2, dtype=np.float32).reshape(n, 2))

    out = EmbeddingCache(tmp_path, FP).get(["x", "y"], both)
    assert set(out.arrays) == {"lexicon", "dense"}
    assert out.arrays["lexicon"].shape == (2, 3) and out.arrays["dense"].shape == (2, 2)
    out2 = EmbeddingCache(tmp_path, FP).get(["y"], lambda t: pytest.fail("must not encode"))
    np.testing.assert_array_equal(out2.arrays["dense"][0], out.arrays["dense"][1])


def test_damaged_chunk_is_ignored_and_re_encoded(tmp_path):
    cache = EmbeddingCache(tmp_path, FP, chunk_size=5)
    cache.get(TEXTS, FakeEncoder())
    victim = sorted(cache.directory.glob("chunk-*.npz"))[0]
    victim.write_bytes(b"not a zip file")
    enc = FakeEncoder()
    out = EmbeddingCache(tmp_path, FP, chunk_size=5).get(TEXTS, enc)
    assert len(enc.seen) == 5 and out.encoded == 5


def test_bad_encoder_output_and_arguments(tmp_path):
    with pytest.raises(ValueError, match="expected"):
        EmbeddingCache(tmp_path, FP).get(["a", "b"], lambda t: np.zeros((1, 3)))
    with pytest.raises(ValueError, match="chunk_size"):
        EmbeddingCache(tmp_path, FP, chunk_size=0)
    with pytest.raises(ValueError, match="no texts"):
        EmbeddingCache(tmp_path, FP).get([], FakeEncoder())


def test_int8_lens_vectors_are_cached_apart_from_float32(tmp_path, tiny_lens_dir):
    """The LENS fingerprint ignores quantisation on purpose; the benchmark cache must not: an int8 encoder neither
    reads nor writes the float32 entries (and float32's key is the one it had before int8 existed)."""
    from lens.eval.systems import LensResource
    from lens.quantize import recipe

    docs = ["cell protein gene", "cancer patients", "drug dose response in mouse"]
    f32 = LensResource(str(tiny_lens_dir), cache_root=tmp_path, show_progress_bar=False)
    want = f32.documents(docs)
    assert "quantize" not in f32.cache_fingerprint()
    f32_chunks = {p: p.read_bytes() for p in tmp_path.rglob("chunk-*.npz")}

    int8 = LensResource(str(tiny_lens_dir), cache_root=tmp_path, show_progress_bar=False, quantize="int8")
    got = int8.documents(docs)
    assert int8.cache_fingerprint()["quantize"] == recipe("int8")  # the versioned recipe, not just the mode
    assert got.encoded == 3 and got.cached == 0  # nothing read from the float32 entries
    assert not np.allclose(got.arrays["lexicon"], want.arrays["lexicon"], atol=1e-6)
    assert {p: p.read_bytes() for p in f32_chunks} == f32_chunks  # nothing written into them
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 2  # two cache directories
    again = LensResource(str(tiny_lens_dir), cache_root=tmp_path, show_progress_bar=False, quantize="int8")
    assert again.documents(docs).cached == 3  # the int8 entries serve int8 runs

    # quantized after loading: the key follows the encoder, and so does the in-process memo
    f32.encoder.apply_quantize("int8")
    assert f32.cache_fingerprint() == int8.cache_fingerprint()
    late = f32.documents(docs)
    assert late.cached == 3 and np.array_equal(late.arrays["lexicon"], got.arrays["lexicon"])
