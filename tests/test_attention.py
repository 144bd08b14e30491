"""Bidirectional attention, checked by behaviour on tiny Llama, Mistral and Qwen2 models."""

import pytest
import torch

from lens.attention import attention_mode, set_attention_mode
from lens.inputs import encode_texts, pad_batch
from lens.model import LensModel, decoder_of

from conftest import FAMILIES, assert_close, make_causal_lm

TEXT = "cell protein gene cancer patients"
OTHER = "the a of"


def first_token_state(decoder, tokenizer, texts, side, changed_last):
    """Hidden state at the first real token of texts[0], after swapping its last word (or not)."""
    texts = list(texts)
    if changed_last:
        texts[0] = texts[0].rsplit(" ", 1)[0] + " brain"
    items = encode_texts(tokenizer, texts, max_length=64)
    batch = pad_batch(items, tokenizer.pad_token_id, side=side)
    model = LensModel(decoder, torch.zeros(4, decoder.config.hidden_size), attention=attention_mode(decoder))
    with torch.no_grad():
        hidden = model.hidden_states(batch["input_ids"], batch["attention_mask"])
    first = int(batch["attention_mask"][0].nonzero()[0])
    return hidden[0, first]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("texts,side", [((TEXT,), "right"), ((TEXT, OTHER), "right"), ((TEXT, OTHER), "left"),
                                        ((OTHER, TEXT), "right"), ((OTHER, TEXT), "left")])
def test_position_zero_sees_the_last_token(tokenizer, family, attn, texts, side):
    decoder = decoder_of(make_causal_lm(family, len(tokenizer), attn_implementation=attn))
    set_attention_mode(decoder, "bidirectional")
    a = first_token_state(decoder, tokenizer, texts, side, changed_last=False)
    b = first_token_state(decoder, tokenizer, texts, side, changed_last=True)
    assert (a - b).abs().max() > 1e-4, "bidirectional attention did not reach position 0"

    set_attention_mode(decoder, "causal")  # the ablation mode: position 0 must not see the future
    a = first_token_state(decoder, tokenizer, texts, side, changed_last=False)
    b = first_token_state(decoder, tokenizer, texts, side, changed_last=True)
    assert_close(a, b, atol=1e-6)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("attention", ["bidirectional", "causal"])
def test_vector_same_alone_and_in_padded_batch(tokenizer, family, side, attention):
    decoder = decoder_of(make_causal_lm(family, len(tokenizer)))
    torch.manual_seed(1)
    model = LensModel(decoder, torch.randn(8, decoder.config.hidden_size), attention=attention)
    texts = ["cell", "protein gene cancer patients results data model", "the review of the study"]

    def run(batch_texts):
        batch = pad_batch(encode_texts(tokenizer, batch_texts, max_length=64), tokenizer.pad_token_id, side=side)
        with torch.no_grad():
            return model(**batch)

    together = run(texts)
    for i, t in enumerate(texts):
        alone = run([t])
        assert_close(together.lexicon[i], alone.lexicon[0], atol=1e-5)
        assert_close(together.dense[i], alone.dense[0], atol=1e-5)


WINDOWED = {"mistral": {"sliding_window": 2}, "qwen2": {"sliding_window": 2, "use_sliding_window": True,
                                                         "max_window_layers": 0}}


@pytest.mark.parametrize("family", sorted(WINDOWED))
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("attention", ["bidirectional", "causal"])
def test_a_sliding_window_is_cleared_so_encoding_and_training_attend_alike(tokenizer, family, attn, attention):
    """A backbone with a sliding window shorter than the text: the encoder's forward (transformers' masks) and the
    training path over a cached prefix (lens.layers' own mask) give the same states, every position attending
    over the whole text as the paper's reference does (the window made the first differ from the second)."""
    from lens.layers import lower, upper

    decoder = decoder_of(make_causal_lm(family, len(tokenizer), attn_implementation=attn, **WINDOWED[family]))
    torch.manual_seed(1)
    model = LensModel(decoder, torch.randn(8, decoder.config.hidden_size), attention=attention)
    texts = ["cell protein gene cancer patients results data model", "the review of the study"]
    batch = pad_batch(encode_texts(tokenizer, texts, max_length=64), tokenizer.pad_token_id, side="right")
    with torch.no_grad():
        forward = model.hidden_states(batch["input_ids"], batch["attention_mask"])
        cached = upper(decoder, lower(decoder, batch["input_ids"], batch["attention_mask"], 1),
                       batch["attention_mask"], 1)
    real = batch["attention_mask"].bool()
    assert_close(forward[real], cached[real], atol=1e-5)
    last = int(real[0].sum()) - 1  # the last token sees the first, 9 positions back, across a window of 2
    changed = ["brain" + texts[0][4:], texts[1]]
    batch2 = pad_batch(encode_texts(tokenizer, changed, max_length=64), tokenizer.pad_token_id, side="right")
    with torch.no_grad():
        moved = model.hidden_states(batch2["input_ids"], batch2["attention_mask"])
    assert (moved[0, last] - forward[0, last]).abs().max() > 1e-4


def test_modes_and_flags(tokenizer):
    model = make_causal_lm("llama", len(tokenizer))
    set_attention_mode(model, "bidirectional")
    assert model.config.is_causal is False
    assert all(not m.is_causal for m in model.modules() if hasattr(m, "is_causal"))
    assert attention_mode(model) == "bidirectional"
    with pytest.raises(ValueError, match="not one of"):
        set_attention_mode(model, "sideways")


@pytest.mark.parametrize("family", FAMILIES)
def test_input_embeddings_untouched_and_head_separate(tokenizer, family):
    causal = make_causal_lm(family, len(tokenizer))
    emb = causal.get_input_embeddings().weight.detach().clone()
    model = LensModel(decoder_of(causal), torch.randn(5, 32))
    with torch.no_grad():
        model.head.weight.mul_(2.0)
    assert model.head.weight.data_ptr() != causal.get_input_embeddings().weight.data_ptr()
    assert torch.equal(causal.get_input_embeddings().weight, emb)
    with pytest.raises(ValueError, match="centroids must be"):
        LensModel(decoder_of(causal), torch.randn(5, 31))
