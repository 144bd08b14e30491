"""The split forward (lower layers, then upper layers) reproduces the decoder's own forward."""

import pytest
import torch

from lens.attention import set_attention_mode
from lens.inputs import encode_texts, pad_batch, position_ids
from lens.layers import attention_bias, lower, upper
from lens.model import decoder_of
from conftest import FAMILIES, make_causal_lm


def _batch(tokenizer, side="right"):
    items = encode_texts(tokenizer, ["the cell protein", "a review of cancer drug trial results in mouse", "gene"], 32)
    return pad_batch(items, tokenizer.pad_token_id, side)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mode", ["bidirectional", "causal"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_split_forward_equals_decoder(tokenizer, family, mode, attn, side):
    decoder = set_attention_mode(decoder_of(make_causal_lm(family, len(tokenizer), attn)), mode)
    b = _batch(tokenizer, side)
    with torch.no_grad():
        ref = decoder(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                      position_ids=position_ids(b["attention_mask"]), use_cache=False).last_hidden_state
        for split in (0, 1, 2):
            got = upper(decoder, lower(decoder, b["input_ids"], b["attention_mask"], split), b["attention_mask"], split)
            real = b["attention_mask"].bool()
            torch.testing.assert_close(got[real], ref[real], atol=1e-5, rtol=1e-5)


def test_attention_bias_values():
    m = torch.tensor([[1, 1, 0]])
    bi = attention_bias(m, torch.float32, causal=False)[0, 0]
    lo = torch.finfo(torch.float32).min
    assert bi.tolist() == [[0, 0, lo]]  # (1, L): broadcast over the query rows
    ca = attention_bias(m, torch.float32, causal=True)[0, 0]
    assert ca.tolist() == [[0, lo, lo], [0, 0, lo], [0, 0, lo]]
