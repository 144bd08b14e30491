"""int8 inference (lens.quantize): the int8 linear against float maths, the encoder's int8 vectors against float32's,
and the option refused where it cannot work."""

import json
import logging

import numpy as np
import pytest
import torch

from lens.cli import main
from lens.encoder import LensEncoder
from lens.quantize import QUANTIZE_MODES, Int8Linear, check_quantize, is_quantized, quantize_decoder

from conftest import assert_close, make_causal_lm

DOCS = ["cell protein gene", "the review of the study was high", "cancer patients", "drug dose response in mouse"]


def rel_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).norm() / want.norm())


def activations(rows: int, cols: int, outlier: float, seed: int = 0) -> torch.Tensor:
    """Random activations with one channel ``outlier`` times larger, and one token 20 times larger (as LLMs have)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g)
    x[:, 3] *= outlier
    x[0] *= 20
    return x


@pytest.fixture(scope="module")
def linear():
    torch.manual_seed(0)
    return torch.nn.Linear(64, 48, bias=True)


def test_int8_linear_is_close_to_float(linear):
    x = activations(24, 64, outlier=1.0)
    want = linear(x).detach()
    with torch.inference_mode():
        got = Int8Linear.from_linear(linear, outliers=0)(x)
    assert got.shape == want.shape and got.dtype == torch.float32
    assert rel_error(got, want) < 0.02


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.ao.quantization, the baseline compared with
def test_outlier_channels_keep_precision_where_one_scale_per_tensor_loses_it(linear):
    """A channel 100x larger than the rest: computed in float32 it no longer sets every token's scale."""
    x = activations(24, 64, outlier=100.0)
    want = linear(x).detach()
    with torch.inference_mode():
        plain = rel_error(Int8Linear.from_linear(linear, outliers=0)(x), want)
        split = rel_error(Int8Linear.from_linear(linear, outliers=2)(x), want)
        torch_default = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(linear), {torch.nn.Linear},
                                                               dtype=torch.qint8)
        baseline = rel_error(torch_default(x), want)
    assert split < 0.02 and split < plain / 2
    assert split < baseline / 4  # torch's per-tensor, 7-bit activations


def test_no_int16_saturation_at_full_range():
    """Positive activations at their maximum against the largest weights: the worst case for the AVX2 kernels'
    int16 pair sums (8-bit weights would saturate there; 7-bit ones never do)."""
    w = torch.full((8, 64), 0.5)
    w[:, ::2] = 1.0
    x = torch.rand(16, 64, generator=torch.Generator().manual_seed(1)) * 0.01 + 1.0  # all near the row maximum
    lin = torch.nn.Linear(64, 8, bias=False)
    with torch.no_grad():
        lin.weight.copy_(w)
    with torch.inference_mode():
        got = Int8Linear.from_linear(lin, outliers=0)(x)
    assert rel_error(got, x @ w.t()) < 0.01


def naive_int8(linear: torch.nn.Linear, x: torch.Tensor, outliers: int) -> torch.Tensor:
    """The recipe written out step by step: float32 outlier channels, per-token scaling, the packed 7-bit weights."""
    w = linear.weight.detach().float()
    cols = x.abs().max(dim=0).values.argsort(descending=True)[:outliers]
    rest = x.clone()
    rest[:, cols] = 0.0
    rows = rest.abs().max(dim=1, keepdim=True).values.clamp(min=1e-12)
    scale = w.abs().max(dim=1).values.clamp(min=1e-12) / 63
    q = torch.quantize_per_channel(w, scale.double(), torch.zeros_like(scale, dtype=torch.long), 0, torch.qint8)
    packed = torch.ops.quantized.linear_prepack(q, None)
    y = torch.ops.quantized.linear_dynamic(rest / rows, packed, reduce_range=False) * rows
    return y + x[:, cols] @ w[:, cols].t() + linear.bias.detach()


@pytest.mark.parametrize("outliers", [0, 3])
def test_int8_linear_computes_the_recipe_and_leaves_its_input_alone(linear, outliers):
    x = activations(24, 64, outlier=30.0)
    before = x.clone()
    with torch.inference_mode():
        got = Int8Linear.from_linear(linear, outliers=outliers)(x)
        want = naive_int8(linear, x, outliers)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert torch.equal(x, before)


def test_3d_input_and_bias(linear):
    x = activations(10, 64, outlier=5.0).reshape(2, 5, 64)
    with torch.inference_mode():
        got = Int8Linear.from_linear(linear, outliers=4)(x)
    assert got.shape == (2, 5, 48)
    assert rel_error(got, linear(x).detach()) < 0.02


def test_quantize_decoder_replaces_every_linear_in_place():
    decoder = make_causal_lm("llama", 64).base_model
    n_linear = sum(type(m) is torch.nn.Linear for m in decoder.modules())
    embed = decoder.embed_tokens.weight
    assert quantize_decoder(decoder, float32_layers=0) == n_linear == 2 * 7
    assert is_quantized(decoder) and not any(type(m) is torch.nn.Linear for m in decoder.modules())
    assert decoder.embed_tokens.weight is embed  # embeddings (and norms) stay float32


@pytest.mark.parametrize("float32_layers,kept", [(1, 1), (2, 1), (5, 1)])
def test_quantize_decoder_keeps_the_first_blocks_float32_but_quantizes_at_least_one(float32_layers, kept):
    decoder = make_causal_lm("llama", 64).base_model  # 2 blocks of 7 linear layers
    assert quantize_decoder(decoder, float32_layers=float32_layers) == 7 * (2 - kept)
    for i, block in enumerate(decoder.layers):
        linear = [type(m) is torch.nn.Linear for m in block.modules() if isinstance(m, (torch.nn.Linear, Int8Linear))]
        assert len(linear) == 7 and all(linear) == (i < kept) and (any(linear) == (i < kept))


def test_the_recipe_label_keys_cached_int8_vectors():
    from lens.quantize import RECIPE_VERSION, recipe

    assert recipe(None) is None and recipe("int8") == f"int8-v{RECIPE_VERSION}"
    with pytest.raises(ValueError, match="valid: int8"):
        recipe("int4")


def test_quantize_decoder_refuses_what_it_cannot_run():
    decoder = make_causal_lm("llama", 64).base_model.to(torch.bfloat16)
    with pytest.raises(ValueError, match="float32 decoder on CPU"):
        quantize_decoder(decoder)


@pytest.mark.parametrize("mode,device,match", [
    ("int4", "cpu", "valid: int8"), ("int8", "cuda", "CPU path"), ("int8", "cuda:1", "CPU path"),
])
def test_check_quantize(mode, device, match):
    with pytest.raises(ValueError, match=match):
        check_quantize(mode, device)
    assert check_quantize(None, "cuda") is None and check_quantize("int8", "cpu") == "int8"
    assert QUANTIZE_MODES == ("int8", "auto")


def test_check_quantize_wants_auto_resolved_first():
    from lens.quantize import recipe

    for call in (lambda: check_quantize("auto", "cpu"), lambda: recipe("auto")):
        with pytest.raises(ValueError, match="resolve_quantize"):
            call()


# ---------------------------------------------------------------------------------------------- quantize="auto"
@pytest.fixture
def probe(monkeypatch, tmp_path):
    """The int8 probe replaced by a stub whose speedup the test sets; the cache in a temporary directory."""
    import lens.quantize as q

    monkeypatch.setenv("LENS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LENS_NO_CACHE", raising=False)
    calls = []

    class Probe:
        speedup = 2.0
        cache = tmp_path / "cache" / "quantize-auto"

        @staticmethod
        def calls() -> int:
            return len(calls)

    def fake_measure():
        calls.append(1)
        return {"float32_ms": 10.0, "int8_ms": 10.0 / Probe.speedup, "speedup": Probe.speedup}

    monkeypatch.setattr(q, "measure_int8_speedup", fake_measure)
    return Probe


@pytest.mark.parametrize("speedup,want", [(2.0, "int8"), (1.15, "int8"), (1.1, None), (1.0, None), (0.5, None)])
def test_auto_picks_int8_only_where_clearly_faster(probe, speedup, want):
    from lens.quantize import resolve_quantize

    probe.speedup = speedup
    assert resolve_quantize("auto", "cpu") == want
    assert probe.calls() == 1


@pytest.mark.parametrize("device", ["cuda", "cuda:1", "mps"])
def test_auto_is_float32_on_a_gpu_without_measuring(probe, device):
    from lens.quantize import resolve_quantize

    assert resolve_quantize("auto", device) is None
    assert probe.calls() == 0


def test_auto_without_a_device_follows_where_models_load(probe, monkeypatch):
    from lens.quantize import resolve_quantize

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_quantize("auto") is None and probe.calls() == 0
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_quantize("auto") == "int8" and probe.calls() == 1


def test_concrete_modes_pass_through_checked(probe):
    from lens.quantize import resolve_quantize

    assert resolve_quantize(None, "cuda") is None and resolve_quantize("int8", "cpu") == "int8"
    with pytest.raises(ValueError, match="CPU path"):
        resolve_quantize("int8", "cuda")
    with pytest.raises(ValueError, match="valid: int8, auto"):
        resolve_quantize("int4", "cpu")
    assert probe.calls() == 0


def test_auto_measures_once_per_host_and_reuses_the_cache(probe, monkeypatch):
    from lens.quantize import host_key, resolve_quantize

    assert resolve_quantize("auto", "cpu") == "int8"
    (cached,) = probe.cache.glob("*.json")
    record = json.loads(cached.read_text())
    assert record["key"] == host_key() and record["speedup"] == 2.0
    probe.speedup = 0.5  # a second measurement would now say float32: the cached one is used instead
    assert resolve_quantize("auto", "cpu") == "int8" and probe.calls() == 1
    threads = torch.get_num_threads()
    try:  # another thread count is another host key: measured again, in its own file
        torch.set_num_threads(threads + 1)
        assert resolve_quantize("auto", "cpu") is None and probe.calls() == 2
    finally:
        torch.set_num_threads(threads)
    assert len(list(probe.cache.glob("*.json"))) == 2
    assert resolve_quantize("auto", "cpu") == "int8" and probe.calls() == 2


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe", b"[]", b'{"speedup": "fast"}', b'{"speedup": NaN}',
                                     b'{"speedup": 2.0, "key": {"cpu": "another"}}', b""])
def test_a_corrupt_or_foreign_cache_is_measured_again(probe, content, caplog):
    from lens.quantize import host_key, resolve_quantize

    assert resolve_quantize("auto", "cpu") == "int8"
    (cached,) = probe.cache.glob("*.json")
    cached.write_bytes(content)
    probe.speedup = 0.9
    with caplog.at_level(logging.WARNING, logger="lens.quantize"):
        assert resolve_quantize("auto", "cpu") is None
    assert probe.calls() == 2 and "measuring again" in caplog.text
    record = json.loads(cached.read_text())
    assert record["key"] == host_key() and record["speedup"] == 0.9
    assert resolve_quantize("auto", "cpu") is None and probe.calls() == 2  # the rewritten file is read again


def test_an_unwritable_cache_still_resolves(probe, monkeypatch, caplog):
    from lens.quantize import resolve_quantize

    blocker = probe.cache.parent
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("a file where the cache directory should be")
    with caplog.at_level(logging.WARNING, logger="lens.quantize"):
        assert resolve_quantize("auto", "cpu") == "int8"
    assert "could not cache" in caplog.text
    monkeypatch.setenv("LENS_NO_CACHE", "1")  # no cache at all: measured every time, nothing written
    assert resolve_quantize("auto", "cpu") == "int8" and resolve_quantize("auto", "cpu") == "int8"
    assert probe.calls() == 3 and blocker.is_file()


def test_auto_is_float32_where_int8_cannot_run(probe, monkeypatch):
    import lens.quantize as q

    def no_engine():
        raise ValueError("int8 needs torch's quantized engine x86 or fbgemm, but it is 'qnnpack'")

    monkeypatch.setattr(q, "measure_int8_speedup", no_engine)
    assert q.resolve_quantize("auto", "cpu") is None
    assert not probe.cache.exists()


def test_the_probe_measures_both_paths_and_leaves_the_caller_as_it_was():
    """The real measurement on a small shape: no timing asserted, only what it reports and what it leaves."""
    from lens.quantize import measure_int8_speedup

    threads = torch.get_num_threads()
    state = torch.random.get_rng_state()
    result = measure_int8_speedup({"hidden": 32, "intermediate": 64, "heads": 4, "kv_heads": 2}, tokens=(2, 8),
                                  budget_s=0.0)
    assert torch.get_num_threads() == threads and torch.equal(torch.random.get_rng_state(), state)
    assert result["repeats"] >= 3 and result["float32_ms"] > 0 and result["int8_ms"] > 0
    assert result["speedup"] == pytest.approx(result["float32_ms"] / result["int8_ms"], rel=1e-2)


# ---------------------------------------------------------------------------------------------- the encoder
@pytest.fixture(scope="module")
def int8_encoder(tiny_lens_dir):
    return LensEncoder.from_pretrained(tiny_lens_dir, quantize="int8")


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_int8_vectors_are_close_to_float32(int8_encoder, tiny_encoder):
    """Cosine > 0.99 to float32 for documents and queries, both vectors; not equal (it is quantized)."""
    for fn in ("encode_documents", "encode_queries"):
        got = getattr(int8_encoder, fn)(DOCS, output="both")
        want = getattr(tiny_encoder, fn)(DOCS, output="both")
        for g, w in zip(got, want):
            assert cosines(g, w).min() > 0.99
        assert not np.allclose(got.lexicon, want.lexicon, atol=1e-6)
    assert int8_encoder.quantize == "int8" and tiny_encoder.quantize is None
    assert is_quantized(int8_encoder.model) and not is_quantized(tiny_encoder.model)
    # the head and the pooling are float32: the same hidden states give the same vector
    assert int8_encoder.model.head.weight.dtype == torch.float32
    assert_close(int8_encoder.model.head.weight, tiny_encoder.model.head.weight, atol=0)


def test_int8_encoder_keeps_the_fingerprint(int8_encoder, tiny_encoder):
    """Same model, approximate arithmetic: an index built in float32 can be searched with int8 queries."""
    assert int8_encoder.fingerprint() == tiny_encoder.fingerprint()


def test_int8_encoder_is_inference_only(int8_encoder, tmp_path):
    with pytest.raises(ValueError, match="cannot be trained"):
        int8_encoder.model.train()
    int8_encoder.model.eval()  # switching to eval stays allowed
    with pytest.raises(ValueError, match="cannot be saved"):
        int8_encoder.save_pretrained(tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="already quantized"):
        int8_encoder.apply_quantize("int8")


def test_from_pretrained_auto_loads_the_resolved_mode(tiny_lens_dir, probe):
    probe.speedup = 2.0
    fast = LensEncoder.from_pretrained(tiny_lens_dir, quantize="auto", device="cpu")
    assert fast.quantize == "int8" and is_quantized(fast.model)
    probe.speedup = 1.0
    for f in probe.cache.glob("*.json"):  # measured again: now on a host where int8 is no faster
        f.unlink()
    slow = LensEncoder.from_pretrained(tiny_lens_dir, quantize="auto", device="cpu")
    assert slow.quantize is None and not is_quantized(slow.model)
    assert slow.apply_quantize("auto").quantize is None  # still float32: the cached measurement says so
    # options that rule int8 out make "auto" float32 without measuring, where "int8" would be refused
    calls = probe.calls()
    kept = LensEncoder.from_pretrained(tiny_lens_dir, quantize="auto", merge_adapter=False)
    assert kept.quantize is None and probe.calls() == calls


@pytest.mark.parametrize("kwargs,match", [
    ({"quantize": "int4"}, "valid: int8"),
    ({"quantize": "int8", "device": "cuda"}, "CPU path"),
    ({"quantize": "int8", "dtype": torch.bfloat16}, "starts from float32"),
    ({"quantize": "int8", "merge_adapter": False}, "adapter merged"),
])
def test_from_pretrained_refuses_bad_quantize(tiny_lens_dir, kwargs, match):
    with pytest.raises(ValueError, match=match):
        LensEncoder.from_pretrained(tiny_lens_dir, **kwargs)


# ---------------------------------------------------------------------------------------------- the CLI
def test_cli_encode_with_quantize(tiny_lens_dir, int8_encoder, tmp_path, capsys):
    (tmp_path / "t.txt").write_text("cell gene\ncancer patients\n")
    out = tmp_path / "v.npy"
    argv = ["encode", "--model", str(tiny_lens_dir), "--input", str(tmp_path / "t.txt"), "--output", str(out)]
    assert main(argv + ["--quantize", "int8"]) == 0
    assert_close(np.load(out), int8_encoder.encode(["cell gene", "cancer patients"]))
    assert main(argv + ["--quantize", "int8", "--workers", "2", "--overwrite"]) == 2
    assert "single CPU process" in capsys.readouterr().err
    assert main(argv + ["--quantize", "fp16", "--overwrite"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_cli_index_records_quantize_and_search_warns_on_a_mismatch(tiny_lens_dir, tmp_path, capsys, caplog):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(DOCS)))
    ix = tmp_path / "ix"
    assert main(["index", "build", "--corpus", str(corpus), "--output", str(ix), "--model", str(tiny_lens_dir),
                 "--dense", "none", "--quantize", "int8"]) == 0
    assert json.loads((ix / "manifest.json").read_text())["info"]["lens_quantize"] == "int8"
    capsys.readouterr()
    with caplog.at_level(logging.WARNING, logger="lens"):
        assert main(["search", str(ix), "cancer", "-k", "2", "--quantize", "int8"]) == 0
        assert not [r for r in caplog.records if "encoded" in r.message]
        assert main(["search", str(ix), "cancer", "-k", "2"]) == 0
    (warning,) = [r.getMessage() for r in caplog.records if "encoded" in r.message]
    assert "encoded int8" in warning and "in float32" in warning and "--quantize int8" in warning
    assert "cancer" in capsys.readouterr().out


@pytest.mark.parametrize("speedup,recorded", [(2.0, "int8"), (1.0, None)])
def test_cli_auto_records_the_concrete_mode_and_its_queries_match(tiny_lens_dir, tmp_path, probe, speedup, recorded,
                                                                  caplog):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(DOCS)))
    probe.speedup = speedup
    ix = str(tmp_path / "ix")
    assert main(["index", "build", "--corpus", str(corpus), "--output", ix, "--model", str(tiny_lens_dir),
                 "--dense", "none", "--quantize", "auto"]) == 0
    assert json.loads((tmp_path / "ix" / "manifest.json").read_text())["info"]["lens_quantize"] == recorded
    with caplog.at_level(logging.WARNING, logger="lens"):
        assert main(["search", ix, "cancer", "-k", "2", "--quantize", "auto"]) == 0
        assert not [r for r in caplog.records if "encoded" in r.message]  # same host: the same mode
        assert main(["search", ix, "cancer", "-k", "2", "--quantize", "int8"]) == 0
    assert bool([r for r in caplog.records if "encoded" in r.message]) == (recorded is None)


def test_index_build_refuses_workers_for_an_int8_encoder(int8_encoder, tmp_path):
    """Workers load the model again from its directory, in float32: an int8 encoder stays in this process."""
    from lens.corpus import Document
    from lens.hybrid import HybridEncoder
    from lens.indexing import build_index

    docs = [Document(f"d{i}", "", t) for i, t in enumerate(DOCS)]
    with pytest.raises(ValueError, match="one CPU process"):
        build_index(docs, tmp_path / "ix", HybridEncoder(int8_encoder, "none"), chunk_size=2, workers=2,
                    show_progress_bar=False)
    assert not (tmp_path / "ix").exists()


def test_an_int8_vector_does_not_depend_on_the_texts_batched_beside_it(int8_encoder, tiny_encoder):
    """int8 ranges and outlier channels are taken over a forward, so the encoder gives each text a forward of its
    own: the same vectors alone and in any batch, whatever batch_size asks for (sentence-transformers' contract)."""
    texts = ["cell", "the review of the study was high and the dose was low", "cancer patients", "a"]
    sizes = []
    forward = int8_encoder._forward

    def spy(items):
        sizes.append(len(items))
        return forward(items)

    int8_encoder._forward = spy
    try:
        batched = int8_encoder.encode_documents(texts, batch_size=4, output="both")
        queries = int8_encoder.encode_queries(texts, batch_size=32)
    finally:
        del int8_encoder._forward
    assert sizes == [1] * 8
    for i, text in enumerate(texts):
        alone = int8_encoder.encode_documents([text], output="both")
        assert np.array_equal(alone.lexicon[0], batched.lexicon[i])
        assert np.array_equal(alone.dense[0], batched.dense[i])
        assert np.array_equal(int8_encoder.encode_queries([text])[0], queries[i])
    # float32 batches as it always did (its batches move a vector by float rounding only)
    sizes.clear()
    tiny_encoder._forward, plain = spy, tiny_encoder._forward
    forward = plain
    try:
        tiny_encoder.encode_documents(texts, batch_size=4)
    finally:
        del tiny_encoder._forward
    assert sizes == [4]


def test_int8_batching_can_be_turned_back_on(tiny_lens_dir):
    encoder = LensEncoder.from_pretrained(tiny_lens_dir, quantize="int8")
    encoder.batch_invariant = False
    sizes = []
    forward = encoder._forward
    encoder._forward = lambda items: sizes.append(len(items)) or forward(items)
    encoder.encode_documents(["cell", "cancer patients", "drug dose"], batch_size=2)
    assert sorted(sizes) == [1, 2]
