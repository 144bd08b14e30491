"""Two LoRA adapters stacked into one (lens.adapters, `lens merge --onto`)."""

import json

import numpy as np
import pytest

from lens.adapters import stack_adapter_dirs, stack_lora, truncate_lora

NAME = "base_model.model.layers.0.self_attn.q_proj"


def _pair(rng, r, n_in=6, n_out=5):
    return {f"{NAME}.lora_A.weight": rng.normal(size=(r, n_in)).astype(np.float32),
            f"{NAME}.lora_B.weight": rng.normal(size=(n_out, r)).astype(np.float32)}


def test_stack_lora_is_the_sum_of_both_updates():
    rng = np.random.default_rng(0)
    bottom, top = _pair(rng, 3), _pair(rng, 2)
    out = stack_lora(bottom, 2.0, top, 0.5)
    a, b = out[f"{NAME}.lora_A.weight"], out[f"{NAME}.lora_B.weight"]
    assert a.shape == (5, 6) and b.shape == (5, 5)
    want = np.zeros((5, 6))  # naive: each update written out and added, entry by entry
    for scale, t in ((2.0, bottom), (0.5, top)):
        ba = t[f"{NAME}.lora_B.weight"] @ t[f"{NAME}.lora_A.weight"]
        for i in range(5):
            for j in range(6):
                want[i, j] += scale * ba[i, j]
    np.testing.assert_allclose(b @ a, want, rtol=1e-5, atol=1e-5)


def test_a_module_one_adapter_lacks_gets_a_zero_update_from_it():
    """A continuation trained on the top layers only stacks onto a model trained on all of them: each module's
    update is what the adapters that hold it add, the other's rows and columns zeros, every module at one rank."""
    rng = np.random.default_rng(1)
    bottom, top = _pair(rng, 3), _pair(rng, 2)
    other = _pair(rng, 3)
    bottom.update({k.replace("q_proj", "k_proj"): v for k, v in other.items()})  # bottom: q_proj and k_proj
    out = stack_lora(bottom, 2.0, top, 0.5)  # top: q_proj only
    k = NAME.replace("q_proj", "k_proj")
    assert out[f"{k}.lora_A.weight"].shape == (5, 6) and out[f"{NAME}.lora_A.weight"].shape == (5, 6)
    np.testing.assert_allclose(out[f"{k}.lora_B.weight"] @ out[f"{k}.lora_A.weight"],
                               2.0 * other[f"{NAME}.lora_B.weight"] @ other[f"{NAME}.lora_A.weight"], atol=1e-5)
    want = sum(s * t[f"{NAME}.lora_B.weight"] @ t[f"{NAME}.lora_A.weight"] for s, t in ((2.0, bottom), (0.5, top)))
    np.testing.assert_allclose(out[f"{NAME}.lora_B.weight"] @ out[f"{NAME}.lora_A.weight"], want, atol=1e-5)
    assert stack_lora(top, 1.0, bottom, 1.0).keys() == out.keys()  # the other way round too


def test_stack_lora_refuses_different_sizes_and_what_is_not_lora():
    rng = np.random.default_rng(1)
    with pytest.raises(ValueError, match="only one of its lora_A and lora_B"):
        stack_lora(_pair(rng, 2), 1.0, {f"{NAME}.lora_A.weight": np.zeros((2, 6))}, 1.0)
    with pytest.raises(ValueError, match="input sizes differ"):
        stack_lora(_pair(rng, 2), 1.0, _pair(rng, 2, n_in=7), 1.0)
    with pytest.raises(ValueError, match="not a LoRA"):
        stack_lora({"x.weight": np.zeros(2)}, 1.0, {"x.weight": np.zeros(2)}, 1.0)


def _adapter_dir(path, tensors, **config):
    from safetensors.numpy import save_file

    path.mkdir(parents=True)
    save_file(tensors, str(path / "adapter_model.safetensors"))
    base = {"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["q_proj"], "bias": "none",
            "use_dora": False, "use_rslora": False, "base_model_name_or_path": "bottom-base"}
    (path / "adapter_config.json").write_text(json.dumps({**base, **config}))
    return path


def test_stack_adapter_dirs_writes_one_peft_adapter(tmp_path):
    from safetensors.numpy import load_file

    rng = np.random.default_rng(2)
    bottom, top = _pair(rng, 2), _pair(rng, 2)
    out = tmp_path / "out"
    kept = stack_adapter_dirs(_adapter_dir(tmp_path / "b", bottom), _adapter_dir(tmp_path / "t", top, lora_alpha=2),
                              out, dtype=np.float32)
    assert kept == {NAME: 1.0}  # exact: nothing truncated
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["lora_alpha"] == 4 and config["base_model_name_or_path"] == "bottom-base"
    got = load_file(str(out / "adapter_model.safetensors"))
    delta = got[f"{NAME}.lora_B.weight"] @ got[f"{NAME}.lora_A.weight"]
    want = sum(s * t[f"{NAME}.lora_B.weight"] @ t[f"{NAME}.lora_A.weight"] for s, t in ((2.0, bottom), (1.0, top)))
    np.testing.assert_allclose(delta, want, rtol=1e-5, atol=1e-5)


def test_a_fraction_of_the_top_adapter_is_the_weights_that_far_from_the_bottom(tmp_path):
    from safetensors.numpy import load_file

    rng = np.random.default_rng(4)
    bottom, top = _pair(rng, 2), _pair(rng, 2)
    out = tmp_path / "out"
    stack_adapter_dirs(_adapter_dir(tmp_path / "b", bottom), _adapter_dir(tmp_path / "t", top, lora_alpha=2), out,
                       dtype=np.float32, fraction=0.25)
    got = load_file(str(out / "adapter_model.safetensors"))
    delta = got[f"{NAME}.lora_B.weight"] @ got[f"{NAME}.lora_A.weight"]
    want = sum(s * t[f"{NAME}.lora_B.weight"] @ t[f"{NAME}.lora_A.weight"] for s, t in ((2.0, bottom), (0.25, top)))
    np.testing.assert_allclose(delta, want, rtol=1e-5, atol=1e-5)


def test_truncate_lora_is_the_best_approximation_of_that_rank():
    """Against the naive route: the update written out in full and cut by its own SVD (Eckart-Young)."""
    rng = np.random.default_rng(5)
    tensors = _pair(rng, 4, n_in=7, n_out=6)
    out, kept = truncate_lora(tensors, 2)
    a, b = out[f"{NAME}.lora_A.weight"], out[f"{NAME}.lora_B.weight"]
    assert a.shape == (2, 7) and b.shape == (6, 2)
    full = tensors[f"{NAME}.lora_B.weight"].astype(np.float64) @ tensors[f"{NAME}.lora_A.weight"]
    u, s, vt = np.linalg.svd(full)
    np.testing.assert_allclose(b @ a, (u[:, :2] * s[:2]) @ vt[:2], rtol=1e-5, atol=1e-5)
    assert kept[NAME] == pytest.approx(float(np.sum(s[:2] ** 2) / np.sum(s ** 2)))
    assert 0 < kept[NAME] < 1
    same, kept_all = truncate_lora(tensors, 4)  # at its own rank: unchanged
    assert kept_all == {NAME: 1.0} and same[f"{NAME}.lora_A.weight"] is tensors[f"{NAME}.lora_A.weight"]
    with pytest.raises(ValueError, match="at least 1"):
        truncate_lora(tensors, 0)
    narrow = _pair(rng, 4, n_in=7, n_out=2)  # an update of rank 2 at most, cut to 3: exact, padded with zeros
    out, kept = truncate_lora(narrow, 3)
    assert out[f"{NAME}.lora_A.weight"].shape == (3, 7) and kept[NAME] == pytest.approx(1.0)
    np.testing.assert_allclose(out[f"{NAME}.lora_B.weight"] @ out[f"{NAME}.lora_A.weight"],
                               narrow[f"{NAME}.lora_B.weight"] @ narrow[f"{NAME}.lora_A.weight"], atol=1e-5)


def test_stacked_adapter_dirs_truncated_to_a_rank(tmp_path):
    """Two rank-2 adapters stacked (rank 4) and cut back to rank 2: the config says rank 2 at scale 1, and the
    update is the best rank-2 approximation of the exact stacked one."""
    from safetensors.numpy import load_file

    rng = np.random.default_rng(6)
    bottom, top = _pair(rng, 2), _pair(rng, 2)
    kept = stack_adapter_dirs(_adapter_dir(tmp_path / "b", bottom), _adapter_dir(tmp_path / "t", top), tmp_path / "o",
                              dtype=np.float32, fraction=0.5, rank=2)
    config = json.loads((tmp_path / "o" / "adapter_config.json").read_text())
    assert config["r"] == 2 and config["lora_alpha"] == 2
    got = load_file(str(tmp_path / "o" / "adapter_model.safetensors"))
    exact = sum(s * t[f"{NAME}.lora_B.weight"] @ t[f"{NAME}.lora_A.weight"] for s, t in ((2.0, bottom), (1.0, top)))
    u, s, vt = np.linalg.svd(exact)
    np.testing.assert_allclose(got[f"{NAME}.lora_B.weight"] @ got[f"{NAME}.lora_A.weight"],
                               (u[:, :2] * s[:2]) @ vt[:2], rtol=1e-4, atol=1e-4)
    assert 0 < kept[NAME] < 1


@pytest.mark.parametrize("setting, message", [({"use_dora": True}, "use_dora"), ({"use_rslora": True}, "use_rslora"),
                                              ({"peft_type": "IA3"}, "only LoRA"),
                                              ({"layers_to_transform": [0]}, "layer subsets"),
                                              ({"modules_to_save": ["lm_head"]}, "not supported")])
def test_stack_adapter_dirs_refuses_what_is_not_a_plain_lora(tmp_path, setting, message):
    rng = np.random.default_rng(3)
    with pytest.raises(ValueError, match=message):
        stack_adapter_dirs(_adapter_dir(tmp_path / "b", _pair(rng, 2)), _adapter_dir(tmp_path / "t", _pair(rng, 2),
                                                                                     **setting), tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="not a PEFT adapter directory"):
        stack_adapter_dirs(tmp_path / "missing", tmp_path / "t", tmp_path / "out2")
