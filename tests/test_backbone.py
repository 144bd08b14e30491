"""Backbone references: what is accepted, what is refused and how, and the LM head read from files."""

import numpy as np
import pytest

from lens.backbone import load_backbone, load_lm_head, matrix_sha256, resolve_backbone

from conftest import make_causal_lm


def test_missing_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found.*accepted: 'default'"):
        resolve_backbone(tmp_path / "nope")


def test_hub_id_is_refused_with_a_hint():
    with pytest.raises(FileNotFoundError, match="never downloads"):
        resolve_backbone("mistralai/Mistral-7B-v0.1")


def test_non_causal_lm_directory(tmp_path):
    from transformers import BertConfig

    BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
               architectures=["BertModel"]).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="'bert' model.*not a causal LM"):
        resolve_backbone(tmp_path)


def test_directory_without_config(tmp_path):
    with pytest.raises(ValueError, match="no config.json"):
        resolve_backbone(tmp_path)


def test_file_that_is_not_gguf(tmp_path):
    f = tmp_path / "weights.bin"
    f.write_bytes(b"x")
    with pytest.raises(ValueError, match="not a .gguf"):
        resolve_backbone(f)


def test_wrong_type():
    with pytest.raises(TypeError, match="accepted"):
        resolve_backbone(42)


def test_load_local_directory(tiny_backbone_dir, tokenizer):
    model, tok = load_backbone(tiny_backbone_dir, device="cpu")
    assert model.config.model_type == "llama" and not model.training
    assert tok.eos_token_id == tokenizer.eos_token_id and tok.padding_side == "right"


@pytest.mark.parametrize("family", ["llama", "mistral"])  # tied and untied LM heads
def test_lm_head_from_files_equals_loaded_model(tmp_path, tokenizer, family):
    model = make_causal_lm(family, len(tokenizer))
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    from_files = load_lm_head(tmp_path)
    expected = model.get_output_embeddings().weight.detach().numpy()
    assert np.array_equal(from_files, expected)
    assert matrix_sha256(from_files) == matrix_sha256(expected)
    assert matrix_sha256(from_files) != matrix_sha256(from_files[:-1])


def test_gguf_cache_key_follows_content_not_path_or_mtime(tmp_path, monkeypatch):
    """A reinstall (same bytes, new path and mtime) reuses the converted copy; different bytes never do."""
    import os

    from lens.backbone import BackboneRef, file_fingerprint, gguf_cache_dir

    monkeypatch.setenv("LENS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LENS_NO_CACHE", raising=False)
    data = np.random.default_rng(0).integers(0, 256, size=3 << 20, dtype=np.uint8).tobytes()
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "m.gguf").write_bytes(data)
    os.utime(tmp_path / "b" / "m.gguf", (1, 1))
    key = [gguf_cache_dir(BackboneRef("x", tmp_path / n, "m.gguf")) for n in ("a", "b")]
    assert key[0] == key[1] and key[0].parent == tmp_path / "cache" / "gguf"
    # a change in the middle of a large file is outside the sampled bytes; a change at either end is seen
    for offset in (0, len(data) - 1):
        changed = bytearray(data)
        changed[offset] ^= 0xFF
        (tmp_path / "c.gguf").write_bytes(bytes(changed))
        assert file_fingerprint(tmp_path / "c.gguf") != file_fingerprint(tmp_path / "a" / "m.gguf")
    (tmp_path / "d.gguf").write_bytes(data + b"\0")  # one more byte: another size
    assert file_fingerprint(tmp_path / "d.gguf") != file_fingerprint(tmp_path / "a" / "m.gguf")


def test_old_mtime_keyed_copies_of_the_same_gguf_are_removed(tmp_path):
    """After a conversion, copies the old cache key (``{stem}-{size}-{mtime}``) made of the same file go; nothing
    else under the cache does."""
    from lens.backbone import remove_stale_copies

    gguf = tmp_path / "model.Q4_1.gguf"
    gguf.write_bytes(b"GGUF" + bytes(100))
    root = tmp_path / "cache" / "gguf"
    names = {"stale": "model.Q4_1-104-1700000000", "other_size": "model.Q4_1-105-1700000000",
             "new_key": "model.Q4_1-0123456789abcdef", "other_model": "other-104-1700000000",
             "prefix": "model.Q4_1-104-17x"}
    for name in names.values():
        (root / name).mkdir(parents=True)
        (root / name / "config.json").write_text("{}")
    (root / "model.Q4_1-104-1800000000.lock").write_text("1")  # a file, not a copy
    removed = remove_stale_copies(gguf, root)
    assert [p.name for p in removed] == [names["stale"]]
    assert sorted(p.name for p in root.iterdir()) == sorted(
        [n for k, n in names.items() if k != "stale"] + ["model.Q4_1-104-1800000000.lock"])
    assert remove_stale_copies(gguf, tmp_path / "missing") == []


def test_cache_home_follows_lens_cache_dir_then_xdg_then_home(tmp_path, monkeypatch):
    from pathlib import Path

    from lens.backbone import cache_home, cache_root

    monkeypatch.setenv("LENS_CACHE_DIR", str(tmp_path / "lens-own"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("LENS_NO_CACHE", raising=False)
    assert cache_home() == tmp_path / "lens-own" == cache_root()
    monkeypatch.delenv("LENS_CACHE_DIR")
    assert cache_home() == tmp_path / "xdg" / "lens"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_home() == Path.home() / ".cache" / "lens"
    monkeypatch.setenv("LENS_NO_CACHE", "1")
    assert cache_root() is None
