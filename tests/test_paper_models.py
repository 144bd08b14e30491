"""The paper's released checkpoints (LENS-d4000 / d8000), on a tiny random Mistral written in exactly their layout.

The fixture is a bare MistralModel (2 layers, hidden 64, vocabulary 32,003) in two safetensors shards with an index,
its cluster head pickled whole by ``torch.save(nn.Linear)``, and a word-level tokenizer with BOS ``<s>`` = 1, EOS
``</s>`` = 2, ``<unk>`` = 0 and the three added tokens at 32000-32002. ``reference_vectors`` is the authors' forward
pass written out plainly; our encoder must give the same vectors.
"""

from __future__ import annotations

import ast
import json
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from conftest import WORDS, assert_close
from lens.attention import attention_mode, set_attention_mode
from lens.config import LensConfig
from lens.encoder import LensEncoder
from lens.inputs import encode_texts
from lens.instructions import INSTRUCTIONS
from lens.model_dir import convert_released
from lens.paper_models import (
    ADDED_TOKENS, HEAD_FILE, check_shard_keys, is_released_dir, load_head, load_released_decoder,
)

HIDDEN, K, VOCAB = 64, 24, 32003
ADDED = {"<instruct>": 32000, "<query>": 32001, "<response>": 32002}
SCIFACT = INSTRUCTIONS["scifact"][0]
QUERIES = ["gene expression in the mouse brain", "blood", "drug dose response in a clinical trial of cancer patients",
           "risk of <query> disease in human patients"]  # the last holds a second <query>: pooled from the last one
DOCS = ["protein gene expression in mouse brain cells", "the review", "clinical trial of drug dose and response, "
        "with high and low dose effects on blood levels after treatment in two studies", "cancer"]
ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------------- the fixture
def make_tokenizer(directory: Path) -> None:
    """A word-level tokenizer of 32,003 tokens saved as tokenizer.json + tokenizer_config.json (+ added_tokens.json)."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", "<s>", "</s>", *dict.fromkeys(WORDS + [".", ",", ":", "?", "claim", "documents", "support",
                                                             "refute", "retrieve", "given", "scientific", "Given"])]
    vocab = {w: i for i, w in enumerate(words)}
    vocab.update({f"w{i}": i for i in range(len(words), 32000)})
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.add_special_tokens([AddedToken(t, special=True) for t in ("<unk>", "<s>", "</s>")])
    core.add_special_tokens([AddedToken(t, special=True) for t in ADDED])
    core.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    assert [tok.convert_tokens_to_ids(t) for t in ADDED] == list(ADDED.values()) and len(tok) == VOCAB
    tok.save_pretrained(directory)
    (directory / "added_tokens.json").write_text(json.dumps(ADDED))


def write_shards(directory: Path, state: dict[str, torch.Tensor], prefix: str = "") -> None:
    """``state`` in two safetensors shards with ``model.safetensors.index.json``, names behind ``prefix``."""
    from safetensors.torch import save_file

    names = sorted(state)
    weight_map = {}
    for i, part in enumerate((names[: len(names) // 2], names[len(names) // 2:]), start=1):
        shard = f"model-0000{i}-of-00002.safetensors"
        save_file({prefix + n: state[n].contiguous() for n in part}, directory / shard, metadata={"format": "pt"})
        weight_map.update({prefix + n: shard for n in part})
    total = sum(t.numel() * t.element_size() for t in state.values())
    (directory / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))


def make_released(directory: Path, prefix: str = "", extra: dict | None = None) -> Path:
    from transformers import MistralConfig, MistralModel

    directory.mkdir(parents=True, exist_ok=True)
    config = MistralConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                           bos_token_id=1, eos_token_id=2, architectures=["MistralModel"])
    torch.manual_seed(0)
    model = MistralModel(config)
    config.save_pretrained(directory)
    write_shards(directory, {**model.state_dict(), **(extra or {})}, prefix)
    torch.manual_seed(1)
    torch.save(nn.Linear(HIDDEN, K, bias=False), directory / HEAD_FILE)  # the whole module, as released
    make_tokenizer(directory)
    return directory


@pytest.fixture(scope="module")
def released(tmp_path_factory) -> Path:
    return make_released(tmp_path_factory.mktemp("released") / "LENS-tiny")


@pytest.fixture(scope="module")
def encoder(released) -> LensEncoder:
    return LensEncoder.from_pretrained(released, device="cpu")


def copy_without(src: Path, dst: Path, skip: tuple[str, ...] = ()) -> Path:
    shutil.copytree(src, dst, ignore=lambda d, names: [n for n in names if n in skip])
    return dst


# ---------------------------------------------------------------------------------------------- the reference pass
def reference_vectors(directory: Path, texts: list[str], instruction: str | None = None,
                      max_length: int = 512) -> np.ndarray:
    """The authors' forward pass, plainly: the text as one string with its ``</s>``, BOS by the tokenizer, left
    padding, truncation; bidirectional model without position ids; the head on every position; the window; then
    max of log1p(relu) and L2 normalisation."""
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    tok.padding_side, tok.pad_token = "left", "<unk>"
    model = AutoModel.from_pretrained(directory, local_files_only=True, dtype=torch.float32).eval()
    set_attention_mode(model, "bidirectional")
    head = torch.load(directory / HEAD_FILE, weights_only=False)  # our own fixture's file
    if instruction is None:
        strings = [f"{t}</s>" for t in texts]
    else:
        strings = [f"<instruct>{instruction}\n<query>{t}</s>" for t in texts]
    batch = tok(strings, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        hidden = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       use_cache=False).last_hidden_state
        logits = head(hidden).float()  # (B, L, K)
    mask = batch["attention_mask"].clone()
    L = mask.shape[1]
    if instruction is None:
        mask[:, -2:] = 0  # BOS kept, the last token and </s> out
    else:
        query = tok.convert_tokens_to_ids("<query>")
        mask.zero_()
        for i, row in enumerate(batch["input_ids"]):
            start = int((row == query).nonzero().max())  # the last <query>
            mask[i, start: L - 2] = 1
    vectors = (torch.log1p(torch.relu(logits)) * mask[..., None]).max(dim=1).values
    return F.normalize(vectors, dim=-1).numpy()


# ---------------------------------------------------------------------------------------------- (a) the vectors
def test_the_layout_is_recognised(released, encoder):
    assert is_released_dir(released) and check_shard_keys(released) == ""
    assert encoder.config.convention == "paper" and encoder.num_clusters == K and encoder.max_seq_length == 512
    assert attention_mode(encoder.model.decoder) == "bidirectional"
    assert type(encoder.model.decoder).__name__ == "MistralModel" and encoder.causal_lm is None
    assert encoder.tokenizer.pad_token_id == 0 and encoder.fingerprint()["lens_convention"] == "paper"


def test_ids_are_the_reference_tokenisation(released, encoder):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(released, local_files_only=True)
    ours = encode_texts(encoder.tokenizer, QUERIES, 512, f"<instruct>{SCIFACT}\n<query>", convention="paper")
    for item, text in zip(ours, QUERIES):
        ids = tok(f"<instruct>{SCIFACT}\n<query>{text}</s>")["input_ids"]
        assert item.ids == ids and ids[:2] == [1, ADDED["<instruct>"]] and ids[-1] == 2
        last_query = max(i for i, t in enumerate(ids) if t == ADDED["<query>"])
        assert item.pool == [int(last_query < i < len(ids) - 1) for i in range(len(ids))]


@pytest.mark.parametrize("instruction", [None, SCIFACT])
def test_vectors_equal_the_reference_pass(released, encoder, instruction):
    texts = QUERIES if instruction else DOCS
    expected = reference_vectors(released, texts, instruction)
    if instruction is None:
        ours = encoder.encode_documents(texts, batch_size=3)
    else:
        ours = encoder.encode_queries(texts, instruction=instruction, batch_size=3)
    assert ours.dtype == np.float32
    assert_close(ours, expected, atol=1e-6)
    assert np.abs(expected).max() > 0.05  # not trivially zero


def test_a_cut_text_equals_the_reference_cut(released, encoder):
    encoder.max_seq_length = 12  # cuts the long document and the instruction's queries: </s> is lost
    try:
        assert_close(encoder.encode_documents(DOCS), reference_vectors(released, DOCS, max_length=12), atol=1e-6)
        short = "Given a claim"
        assert_close(encoder.encode_queries(QUERIES, instruction=short),
                     reference_vectors(released, QUERIES, short, max_length=12), atol=1e-6)
        with pytest.raises(ValueError, match="<query>"):  # the instruction leaves no <query> within 12 tokens
            encoder.encode_queries(QUERIES, instruction=SCIFACT)
    finally:
        encoder.max_seq_length = 512


def test_a_released_folder_works_where_a_model_path_goes(released, encoder, tmp_path):
    """``convert_released`` writes a regular LENS directory recording the paper convention: the same vectors."""
    out = convert_released(released, tmp_path / "converted")
    config = json.loads((out / "config.json").read_text())
    assert config["convention"] == "paper" and config["backbone"] == str(released.resolve())
    assert LensConfig.load(out).convention == "paper"
    again = LensEncoder.from_pretrained(out, device="cpu")
    assert np.array_equal(again.encode_queries(QUERIES), encoder.encode_queries(QUERIES))
    assert np.array_equal(again.encode_documents(DOCS), encoder.encode_documents(DOCS))



def test_lens_convert_command(released, encoder, tmp_path, capsys):
    from lens.cli import main

    assert main(["convert", str(released), "--out", str(tmp_path / "cli")]) == 0
    assert "the paper convention" in capsys.readouterr().out
    again = LensEncoder.from_pretrained(tmp_path / "cli", device="cpu")
    assert np.array_equal(again.encode_documents(DOCS), encoder.encode_documents(DOCS))
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "notes.txt").write_text("mine")
    assert main(["convert", str(released), "--out", str(tmp_path / "user")]) == 2
    assert (tmp_path / "user" / "notes.txt").read_text() == "mine"
    (tmp_path / "cli" / "train_log.csv").write_text("step,loss\n")  # a model of the user's, trained further
    assert main(["convert", str(released), "--out", str(tmp_path / "cli")]) == 2
    assert "already holds a trained LENS model (train_log.csv); pass --overwrite" in capsys.readouterr().err
    assert (tmp_path / "cli" / "train_log.csv").is_file()
    assert main(["convert", str(released), "--out", str(tmp_path / "cli"), "--overwrite"]) == 0
    before = sorted(p.name for p in released.iterdir())
    assert main(["convert", str(released), "--out", str(released / "lens")]) == 2
    assert "inside the released folder" in capsys.readouterr().err
    assert sorted(p.name for p in released.iterdir()) == before


def test_our_own_configs_are_unchanged(tmp_path):
    """The new field is not written for our own convention, reads as "lens" when absent, and is checked."""
    from lens.config import ClusteringConfig

    config = LensConfig("default", ClusteringConfig(4, 10, 8, "0" * 64))
    assert "convention" not in config.to_dict() and LensConfig.from_dict(config.to_dict()).convention == "lens"
    with pytest.raises(ValueError, match="convention 'other'"):
        LensConfig.from_dict({**config.to_dict(), "convention": "other"})


# ---------------------------------------------------------------------------------------------- (b) the head file
class OpenFile:
    """Pickles as a call of ``open(path, "w")``: unpickling it would create the file."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


class System:
    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


class MyLinear(nn.Linear):
    pass


def planted_heads(marker: Path) -> dict[str, object]:
    with_payload = nn.Linear(HIDDEN, K, bias=False)
    with_payload.note = OpenFile(marker)  # a payload inside an otherwise good Linear
    return {"open": OpenFile(marker), "system": System(marker), "inside": with_payload,
            "state": {"weight": torch.zeros(K, HIDDEN), "x": OpenFile(marker)}, "subclass": MyLinear(HIDDEN, K, False)}


@pytest.mark.parametrize("kind", ["open", "system", "inside", "state", "subclass"])
def test_a_planted_pickle_is_refused_and_never_runs(tmp_path, kind):
    marker = tmp_path / "ran"
    path = tmp_path / HEAD_FILE
    torch.save(planted_heads(marker)[kind], path)
    with pytest.raises(ValueError, match="not a plain torch.nn.Linear head and was not loaded") as e:
        load_head(path, HIDDEN)
    assert not marker.exists()
    if kind == "system":  # the refused call is named, and torch's advice to turn the check off is not passed on
        assert "its pickle asks to run posix.system" in str(e.value) or "nt.system" in str(e.value)
        assert "never load it with weights_only=False" in str(e.value)


def test_a_planted_pickle_in_a_folder_is_refused_on_loading(released, tmp_path):
    marker = tmp_path / "ran"
    folder = copy_without(released, tmp_path / "planted", skip=(HEAD_FILE,))
    torch.save(System(marker), folder / HEAD_FILE)
    with pytest.raises(ValueError, match="not loaded"):
        LensEncoder.from_pretrained(folder, device="cpu")
    assert not marker.exists()


@pytest.mark.parametrize("head,message", [
    (nn.Linear(HIDDEN, K, bias=True), "with a bias"),
    (nn.Linear(HIDDEN // 2, K, bias=False), f"hidden size is {HIDDEN}"),
    (nn.Linear(HIDDEN, K, bias=False).double(), "float64"),
    (nn.Linear(HIDDEN, K, bias=False).half(), "float16"),
    ({"weight": torch.zeros(K, HIDDEN), "bias": torch.zeros(K)}, "keys"),
    ({"weight": torch.zeros(HIDDEN)}, "not a matrix"),
    (torch.zeros(K, HIDDEN), "holds a Tensor"),
])
def test_a_head_that_is_not_the_release_s_is_refused(tmp_path, head, message):
    torch.save(head, tmp_path / HEAD_FILE)
    with pytest.raises(ValueError, match=message):
        load_head(tmp_path / HEAD_FILE, HIDDEN)


def test_a_state_dict_head_loads_as_the_module(released, tmp_path):
    module = torch.load(released / HEAD_FILE, weights_only=False)
    torch.save(module.state_dict(), tmp_path / HEAD_FILE)
    assert np.array_equal(load_head(tmp_path / HEAD_FILE, HIDDEN), load_head(released / HEAD_FILE, HIDDEN))
    assert np.array_equal(load_head(released / HEAD_FILE, HIDDEN), module.weight.detach().numpy())


def test_the_allow_list_is_not_left_open(tmp_path, released):
    """Loading a head leaves torch's weights-only allow-list as it was."""
    load_head(released / HEAD_FILE, HIDDEN)
    torch.save(nn.Linear(HIDDEN, K, bias=False), tmp_path / "x.pth")
    with pytest.raises(pickle.UnpicklingError):
        torch.load(tmp_path / "x.pth", weights_only=True)


# ---------------------------------------------------------------------------------------------- (c) the shards
def test_model_prefixed_shards_load_the_same_vectors(released, encoder, tmp_path):
    folder = copy_without(released, tmp_path / "prefixed", skip=("model.safetensors.index.json",
                                                                  "model-00001-of-00002.safetensors",
                                                                  "model-00002-of-00002.safetensors"))
    decoder, _ = load_released_decoder(released, device="cpu")
    write_shards(folder, decoder.state_dict(), prefix="model.")
    assert check_shard_keys(folder) == "model."
    prefixed = LensEncoder.from_pretrained(folder, device="cpu")
    assert np.array_equal(prefixed.encode_queries(QUERIES), encoder.encode_queries(QUERIES))
    assert np.array_equal(prefixed.encode_documents(DOCS), encoder.encode_documents(DOCS))


@pytest.mark.parametrize("prefix", ["", "model."])
def test_a_stray_lm_head_weight_is_an_error(tmp_path, prefix):
    folder = make_released(tmp_path / "stray", prefix=prefix, extra={"lm_head.weight": torch.zeros(VOCAB, HIDDEN)})
    with pytest.raises(ValueError, match="lm_head.weight"):
        LensEncoder.from_pretrained(folder, device="cpu")


@pytest.mark.parametrize("change,message", [("drop", "missing_keys"), ("add", "unexpected_keys")])
def test_weights_must_match_the_config_exactly(released, tmp_path, change, message):
    decoder, _ = load_released_decoder(released, device="cpu")
    state = dict(decoder.state_dict())
    if change == "drop":
        del state["norm.weight"]
    else:
        state["extra.weight"] = torch.zeros(2)
    folder = copy_without(released, tmp_path / change, skip=("model.safetensors.index.json",
                                                              "model-00001-of-00002.safetensors",
                                                              "model-00002-of-00002.safetensors"))
    write_shards(folder, state)
    with pytest.raises(ValueError, match=message):
        LensEncoder.from_pretrained(folder, device="cpu")


def test_missing_weights_and_flash_attention_are_refused(released, tmp_path):
    folder = copy_without(released, tmp_path / "partial", skip=("model-00002-of-00002.safetensors",))
    with pytest.raises(FileNotFoundError, match="model-00002-of-00002"):
        LensEncoder.from_pretrained(folder, device="cpu")
    with pytest.raises(ValueError, match="sdpa or eager"):
        load_released_decoder(released, device="cpu", attn_implementation="flash_attention_2")


def test_eager_attention_gives_the_same_vectors(released, encoder):
    eager = LensEncoder.from_pretrained(released, device="cpu", attn_implementation="eager")
    assert_close(eager.encode_queries(QUERIES), encoder.encode_queries(QUERIES), atol=1e-6)


def test_a_tokenizer_without_the_added_tokens_is_refused(released, tmp_path):
    from transformers import PreTrainedTokenizerFast

    folder = copy_without(released, tmp_path / "no-added", skip=("tokenizer.json", "tokenizer_config.json",
                                                                 "added_tokens.json", "special_tokens_map.json"))
    from conftest import make_tokenizer as plain_tokenizer

    tok: PreTrainedTokenizerFast = plain_tokenizer()
    tok.save_pretrained(folder)
    with pytest.raises(ValueError, match="no usable <instruct>"):
        LensEncoder.from_pretrained(folder, device="cpu")


def test_nothing_imports_flash_attention():
    for path in sorted((ROOT / "lens").rglob("*.py")) + sorted((ROOT / "index").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] == "flash_attn" for n in names), path


# ---------------------------------------------------------------------------------------------- integrations
def test_mteb_encodes_a_released_folder(released, encoder):
    pytest.importorskip("mteb", minversion="2")
    import mteb
    from datasets import Dataset
    from mteb.types import PromptType
    from torch.utils.data import DataLoader

    from lens.integrations.mteb import LensMTEBEncoder

    model = LensMTEBEncoder(released, device="cpu")
    assert model.mteb_model_meta.name == f"lens/{released.name}" and model.mteb_model_meta.embed_dim == K
    scifact = mteb.get_task("SciFact").metadata
    where = dict(task_metadata=scifact, hf_split="test", hf_subset="default")

    def batches(texts):
        return DataLoader(Dataset.from_dict({"text": texts}), batch_size=2)

    queries = model.encode(batches(QUERIES), prompt_type=PromptType.query, **where)
    assert_close(queries, reference_vectors(released, QUERIES, SCIFACT), atol=1e-6)
    docs = model.encode(batches(DOCS), prompt_type=PromptType.document, **where)
    assert_close(docs, reference_vectors(released, DOCS), atol=1e-6)


def test_sentence_transformers_encodes_a_released_folder(released, encoder):
    pytest.importorskip("sentence_transformers", minversion="5")
    from lens.integrations.sentence_transformers import load_sparse_encoder

    model = load_sparse_encoder(encoder)
    queries = model.encode_query(QUERIES, prompt=SCIFACT, convert_to_tensor=True)
    dense = queries.to_dense() if queries.is_sparse else queries
    assert_close(dense, reference_vectors(released, QUERIES, SCIFACT), atol=1e-6)
    docs = model.encode_document(DOCS, convert_to_tensor=True)
    dense = docs.to_dense() if docs.is_sparse else docs
    assert_close(dense, reference_vectors(released, DOCS), atol=1e-6)


def test_added_tokens_are_the_release_s():
    assert ADDED_TOKENS == tuple(ADDED)


@pytest.mark.parametrize("name", ["max", "sum", "last"])
def test_half_precision_logits_are_pooled_in_float32(name):
    """The released pass's precision: half-precision logits, log1p(relu) in float32; without upcast, as before."""
    from lens.pooling import get_pooling

    torch.manual_seed(0)
    hidden, head = torch.randn(3, 7, 16).half(), torch.randn(5, 16).half()
    mask = torch.ones(3, 7, dtype=torch.long)
    mask[0, :3] = 0
    pool = get_pooling(name)
    up, plain = pool(hidden, head, mask, upcast=True), pool(hidden, head, mask)
    assert up.dtype == torch.float32 and plain.dtype == torch.float16
    acts = torch.log1p(torch.relu((hidden @ head.t()).float())) * mask[..., None]  # (B, L, K) in float32
    expected = {"max": acts.max(dim=1).values, "sum": acts.sum(dim=1), "last": acts[:, -1]}[name]
    assert_close(up, expected, atol=1e-6 if name != "sum" else 1e-5)


def test_training_refuses_a_released_checkpoint(released, tmp_path):
    """Training tokenises and pools the LENS way: a paper-convention model is refused with a clear error."""
    from lens.train.config import StageConfig, TrainConfig
    from lens.train.data import TrainExample, write_examples
    from lens.train.trainer import Trainer

    data = tmp_path / "toy.jsonl"
    write_examples(data, [TrainExample("a query", "a passage", task="toy")])
    cfg = TrainConfig(model=str(released), stages=[StageConfig("s", [str(data)], loss="infonce", steps=1)],
                      batch_size=1, eval_every=0)
    with pytest.raises(ValueError, match="'paper' convention .* start from `lens cluster-vocab`"):
        Trainer(cfg, tmp_path / "out", show_progress_bar=False)


def test_a_damaged_or_incomplete_download_gets_one_line_saying_what_to_do(released, tmp_path):
    """A folder without lm_head.pth, a half-written shard and a config.json that is not the weights' own: each is an
    error naming what is wrong and what to do (one line from `lens`), never transformers' or safetensors' traceback."""
    no_head = copy_without(released, tmp_path / "no-head", skip=(HEAD_FILE,))
    with pytest.raises(FileNotFoundError, match=f"bare MistralModel .* but no {HEAD_FILE}, its cluster head: download"):
        LensEncoder.from_pretrained(no_head, device="cpu")
    cut = copy_without(released, tmp_path / "cut", skip=())
    shard = cut / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:20])
    with pytest.raises(ValueError, match="could not be loaded .*re-download the folder"):
        LensEncoder.from_pretrained(cut, device="cpu")
    other = copy_without(released, tmp_path / "other-config", skip=())
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "hidden_size": 32}))
    with pytest.raises(ValueError, match="could not be loaded|do not match its config.json|head is"):
        LensEncoder.from_pretrained(other, device="cpu")


def test_a_decoder_larger_than_the_hosts_memory_is_refused_before_loading(released):
    from lens.paper_models import check_host_memory

    size = json.loads((released / "model.safetensors.index.json").read_text())["metadata"]["total_size"]
    check_host_memory(released, torch.float32, available=size + 1)
    with pytest.raises(ValueError, match=r"needs about .* GB of memory in float32 on the CPU.*run it on a GPU"):
        check_host_memory(released, torch.float32, available=size - 1)
    check_host_memory(released, torch.bfloat16, available=size // 2 + 1)  # half the bytes in bfloat16


def test_running_out_of_memory_while_loading_is_not_called_a_damaged_download(released, monkeypatch):
    import transformers

    def out_of_memory(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
                           "you tried to allocate 28400000000 bytes.")

    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", out_of_memory)
    with pytest.raises(ValueError, match="ran out of memory .*run it on a GPU") as e:
        load_released_decoder(released, device="cpu")
    assert "re-download" not in str(e.value)


def test_loading_on_a_cpu_checks_the_memory_first(released, monkeypatch):
    from lens import host

    monkeypatch.setattr(host, "available_memory", lambda: 1)
    with pytest.raises(ValueError, match="needs about .* on the CPU, and this machine has 0.0 GB available"):
        LensEncoder.from_pretrained(released, device="cpu")
