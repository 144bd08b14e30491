"""The GPU defaults of issue 42, checked without a GPU: ``batch_size=None`` (32 on a CPU, ``auto_batch_size`` of the
free memory on CUDA), float32 pooling under a half-precision decoder, and the ``--device`` / ``--dtype`` options."""

import re

import numpy as np
import pytest
import torch

from lens.encoder import CPU_BATCH_SIZE, GPU_MAX_BATCH_SIZE, LensEncoder, auto_batch_size

from conftest import assert_close

GIB = 1 << 30
SMOLLM2 = dict(hidden=576, intermediate=1536, heads=9)  # SmolLM2-135M's shape


def test_auto_batch_size_grows_with_free_memory_and_shrinks_with_length():
    small = auto_batch_size(2 * GIB, seq_len=256, **SMOLLM2, maximum=10_000)
    big = auto_batch_size(8 * GIB, seq_len=256, **SMOLLM2, maximum=10_000)
    assert 1 <= small < big
    assert auto_batch_size(8 * GIB, seq_len=32, **SMOLLM2, maximum=10_000) > big  # queries: more to a forward
    # 8 GiB: (0.5 * 8 GiB - 256 MiB) / (256 * 2 * (8*576 + 3*1536 + 9*256)) bytes a text = 682.7 -> 680
    assert big == 680


def test_auto_batch_size_limits():
    assert auto_batch_size(80 * GIB, seq_len=256, **SMOLLM2) == GPU_MAX_BATCH_SIZE  # capped
    assert auto_batch_size(0, seq_len=256, **SMOLLM2) == 1  # nothing free: one at a time, never 0
    assert auto_batch_size(300 * (1 << 20), seq_len=256, **SMOLLM2, safety=1.0) == 7  # below a multiple: kept
    f32 = auto_batch_size(8 * GIB, seq_len=256, **SMOLLM2, dtype_bytes=4, maximum=10_000)
    assert f32 == 336  # float32 activations: about half as many (341.3 -> 336)
    with pytest.raises(ValueError, match="seq_len must be a positive integer"):
        auto_batch_size(GIB, seq_len=0, **SMOLLM2)
    with pytest.raises(ValueError, match="safety"):
        auto_batch_size(GIB, seq_len=8, **SMOLLM2, safety=0)


def test_batch_size_none_is_32_texts_a_forward_on_cpu(tiny_encoder, monkeypatch):
    sizes = []
    forward = tiny_encoder._forward
    monkeypatch.setattr(tiny_encoder, "_forward", lambda items: sizes.append(len(items)) or forward(items))
    monkeypatch.setattr(tiny_encoder, "cpu_batch_tokens", None)  # the token cap aside: only the count
    texts = [f"cell protein {i}" for i in range(CPU_BATCH_SIZE + 5)]
    got = tiny_encoder.encode(texts)
    assert sizes == [CPU_BATCH_SIZE, 5]
    assert_close(got, tiny_encoder.encode(texts, batch_size=CPU_BATCH_SIZE))
    assert tiny_encoder.default_batch_size() == CPU_BATCH_SIZE
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="batch_size must be a positive integer or None"):
            tiny_encoder.encode(texts[:2], batch_size=bad)


def test_default_batch_size_on_cuda_comes_from_free_memory(tiny_encoder, monkeypatch):
    """No GPU needed: the device and its free memory are made up."""
    monkeypatch.setattr(LensEncoder, "device", property(lambda self: torch.device("cuda", 0)))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (3 * GIB, 80 * GIB))
    config = tiny_encoder.model.decoder.config
    want = auto_batch_size(3 * GIB, hidden=config.hidden_size, intermediate=config.intermediate_size,
                           heads=config.num_attention_heads, seq_len=40, dtype_bytes=4,
                           num_clusters=tiny_encoder.num_clusters)
    assert tiny_encoder.default_batch_size(40) == want
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (0, 80 * GIB))
    assert tiny_encoder.default_batch_size(40) == 1


def test_half_precision_decoder_pools_in_float32(tiny_lens_dir, tiny_encoder):
    """bfloat16 weights (the CUDA default) pool their logits in float32; float32 models are as before."""
    assert tiny_encoder.model.upcast_logits is False
    bf16 = LensEncoder.from_pretrained(tiny_lens_dir, device="cpu", dtype=torch.bfloat16)
    assert bf16.model.upcast_logits is True and bf16.model.head.weight.dtype == torch.bfloat16
    texts = ["cell protein gene", "the review of the study was high", "cancer patients"]
    out = bf16.model(**{k: v for k, v in _batch(bf16, texts).items()})
    assert out.lexicon.dtype == torch.float32  # pooled in float32, not rounded back to 8 bits of mantissa
    got, want = bf16.encode(texts), tiny_encoder.encode(texts)
    assert got.dtype == np.float32
    cos = (got * want).sum(axis=1)
    assert (cos > 0.98).all(), cos  # the same vectors, within bfloat16's rounding of the weights


def _batch(encoder, texts):
    from lens.inputs import encode_texts, pad_batch

    items = encode_texts(encoder.tokenizer, texts, encoder.max_seq_length)
    return pad_batch(items, encoder.tokenizer.pad_token_id)


def test_lens_bench_beir_batch_size_and_device_defaults(monkeypatch):
    from lens.eval.beir import CPU_LENS_BATCH_SIZE, lens_batch_size

    assert lens_batch_size(7, "cuda") == 7 and lens_batch_size(7, "cpu") == 7
    assert lens_batch_size(None, "cpu") == CPU_LENS_BATCH_SIZE
    assert lens_batch_size(None, "cuda:0") is None  # the encoder chooses from free memory
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert lens_batch_size(None, None) == CPU_LENS_BATCH_SIZE  # no GPU: today's CPU default
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert lens_batch_size(None, None) is None


def test_bfloat16_vectors_are_cached_apart_from_float32(tiny_lens_dir, tmp_path):
    from lens.eval.systems import LensResource

    f32 = LensResource(str(tiny_lens_dir), cache_root=tmp_path, show_progress_bar=False, device="cpu")
    bf16 = LensResource(str(tiny_lens_dir), cache_root=tmp_path, show_progress_bar=False, device="cpu",
                        dtype="bfloat16")
    assert "dtype" not in f32.cache_fingerprint()  # float32 keys stay as they were
    assert bf16.cache_fingerprint()["dtype"] == "bfloat16"
    texts = ["cell protein gene", "cancer patients"]
    a, b = f32.documents(texts), bf16.documents(texts)
    assert not np.array_equal(a.arrays["lexicon"], b.arrays["lexicon"])


@pytest.mark.parametrize("argv, message", [
    (["--device", "gpu"], "not a device name"),
    (["--device", "tpu:0"], "not a device name|only cpu and cuda"),
])
def test_lens_encode_refuses_a_wrong_device(tmp_path, tiny_lens_dir, argv, message, capsys):
    from lens.cli import main

    src = tmp_path / "in.txt"
    src.write_text("cell protein\ncancer\n")
    rc = main(["encode", "--model", str(tiny_lens_dir), "--input", str(src), "--output", str(tmp_path / "o.npy"),
               *argv])
    assert rc == 2
    assert re.search(message, capsys.readouterr().err)


def test_lens_encode_on_cpu_with_device_and_default_batch(tmp_path, tiny_lens_dir, tiny_encoder):
    from lens.cli import main

    src = tmp_path / "in.txt"
    src.write_text("cell protein\ncancer patients\n")
    out = tmp_path / "o.npy"
    assert main(["encode", "--model", str(tiny_lens_dir), "--input", str(src), "--output", str(out),
                 "--device", "cpu"]) == 0
    assert_close(np.load(out), tiny_encoder.encode(["cell protein", "cancer patients"]))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without a GPU")
def test_lens_encode_device_cuda_without_a_gpu_says_so(tmp_path, tiny_lens_dir, capsys):
    from lens.cli import main

    src = tmp_path / "in.txt"
    src.write_text("cell protein\n")
    assert main(["encode", "--model", str(tiny_lens_dir), "--input", str(src), "--output", str(tmp_path / "o.npy"),
                 "--device", "cuda"]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err


def test_harness_encodes_more_documents_a_call_on_cuda(tiny_lens_dir, tmp_path):
    """LENS documents per harness call (and cache chunk): 128 on a CPU, 1024 on CUDA, or what is given."""
    from types import SimpleNamespace

    from lens.eval.systems import LensResource

    res = LensResource(str(tiny_lens_dir), cache_root=tmp_path, show_progress_bar=False, device="cpu")
    assert res.texts_per_call == 128
    res._encoder = SimpleNamespace(device=torch.device("cuda", 0))  # an encoder on a GPU, as far as this asks
    assert res.texts_per_call == 1024
    assert LensResource(str(tiny_lens_dir), cache_root=tmp_path, chunk_size=7).texts_per_call == 7
