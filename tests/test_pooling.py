"""Pooling, shift and masking against a naive per-token loop."""

import math

import pytest
import torch

from lens.inputs import Encoded, encode_texts, length_sorted_batches, pad_batch, position_ids
from lens.pooling import get_pooling, last_index, max_pool, mean_pool, shift_left, sum_pool, last_pool

from conftest import assert_close


def naive(hidden, head, token_mask, mode):
    """A token t's feature is log1p(relu(logit at t-1)); pool over tokens with token_mask[t] == 1."""
    B, L, _ = hidden.shape
    out = torch.zeros(B, head.shape[0], dtype=torch.float64)
    for b in range(B):
        feats = []
        for t in range(1, L):
            if token_mask[b, t]:
                logit = [float(hidden[b, t - 1] @ head[c]) for c in range(head.shape[0])]
                feats.append(torch.tensor([math.log1p(max(x, 0.0)) for x in logit], dtype=torch.float64))
        if feats:
            stack = torch.stack(feats)
            out[b] = {"max": stack.max(0).values, "sum": stack.sum(0), "last": stack[-1]}[mode]
    return out


def naive_mean(hidden, token_mask):
    B, L, H = hidden.shape
    out = torch.zeros(B, H, dtype=torch.float64)
    for b in range(B):
        rows = [hidden[b, t - 1].double() for t in range(1, L) if token_mask[b, t]]
        if rows:
            out[b] = torch.stack(rows).mean(0)
    return out


@pytest.fixture
def data():
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(3, 9, 8, generator=g)
    head = torch.randn(6, 8, generator=g)
    token_mask = torch.tensor(
        [[0, 1, 1, 1, 1, 0, 0, 0, 0], [0, 0, 0, 1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0, 0, 0, 0]]
    )  # row 2 has nothing to pool
    return hidden, head, token_mask


@pytest.mark.parametrize("mode", ["max", "sum", "last"])
@pytest.mark.parametrize("chunk_elements", [1, 7, 10_000])  # 1 forces one position per chunk
def test_pooling_matches_naive_loop(data, mode, chunk_elements):
    hidden, head, token_mask = data
    got = get_pooling(mode)(hidden, head, shift_left(token_mask), chunk_elements)
    assert_close(got, naive(hidden, head, token_mask, mode))


def test_empty_row_pools_to_zero(data):
    hidden, head, token_mask = data
    for fn in (max_pool, sum_pool, last_pool):
        assert torch.all(fn(hidden, head, shift_left(token_mask))[2] == 0)


def test_mean_pool_matches_naive(data):
    hidden, _, token_mask = data
    assert_close(mean_pool(hidden, shift_left(token_mask)), naive_mean(hidden, token_mask))


def test_shift_left_moves_each_token_to_its_left_neighbour():
    m = torch.tensor([[0, 0, 1, 1, 0], [1, 1, 1, 1, 1]])
    assert shift_left(m).tolist() == [[0, 1, 1, 0, 0], [1, 1, 1, 1, 0]]


def test_max_pool_gradient_is_finite(data):
    hidden, head, token_mask = data
    hidden = hidden.clone().requires_grad_(True)
    max_pool(hidden, head, shift_left(token_mask)).sum().backward()
    assert torch.isfinite(hidden.grad).all() and hidden.grad.abs().sum() > 0


def test_last_index():
    assert last_index(torch.tensor([[1, 1, 0], [0, 0, 0], [0, 1, 1]])).tolist() == [1, -1, 2]


def test_unknown_pooling_lists_valid_names():
    with pytest.raises(ValueError, match="valid: \\['last', 'max', 'sum'\\]"):
        get_pooling("mean")


def test_pool_mask_covers_text_and_eos_never_prompt(tokenizer):
    (enc,) = encode_texts(tokenizer, ["cell protein gene"], max_length=64, prompt="review the paper")
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    prompt = tokenizer("review the paper", add_special_tokens=False)["input_ids"]
    text = tokenizer("cell protein gene", add_special_tokens=False)["input_ids"]
    assert enc.ids == [bos, *prompt, *text, eos]
    assert enc.pool == [0, 0, 0, 0, 1, 1, 1, 1]
    assert not enc.truncated


def test_truncation_keeps_room_for_eos(tokenizer):
    (enc,) = encode_texts(tokenizer, ["cell " * 50], max_length=10)
    assert len(enc.ids) == 10 and enc.ids[-1] == tokenizer.eos_token_id and enc.truncated


def test_prompt_longer_than_max_length_is_a_clear_error(tokenizer):
    with pytest.raises(ValueError, match="shorten the instruction or raise max_length"):
        encode_texts(tokenizer, ["cell"], max_length=4, prompt="the a of and to in")


@pytest.mark.parametrize("side", ["left", "right"])
def test_pad_batch_and_positions(side):
    items = [Encoded([5, 6, 7], [0, 1, 1], False), Encoded([8, 9], [0, 1], False)]
    b = pad_batch(items, pad_id=0, side=side)
    assert b["attention_mask"].sum(1).tolist() == [3, 2]
    pos = position_ids(b["attention_mask"])
    real = pos[b["attention_mask"].bool()]
    assert real.tolist() == [0, 1, 2, 0, 1]
    with pytest.raises(ValueError):
        pad_batch(items, 0, side="middle")


@pytest.mark.parametrize("batch_size,max_tokens", [(3, None), (3, 20), (8, 20), (8, 1), (2, 1000)])
def test_length_sorted_batches(batch_size, max_tokens):
    lengths = [5, 12, 3, 12, 7, 1, 9, 4]
    batches = length_sorted_batches(lengths, batch_size, max_tokens)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(lengths)))  # every index once
    assert [lengths[i] for i in flat] == sorted(lengths, reverse=True)  # longest first
    assert flat.index(1) < flat.index(3)  # ties keep input order
    for b in batches:
        assert 1 <= len(b) <= batch_size
        if max_tokens is not None and len(b) > 1:
            assert lengths[b[0]] * len(b) <= max_tokens
    if max_tokens is None:
        assert [len(b) for b in batches] == [3, 3, 2]
    if (batch_size, max_tokens) == (8, 20):
        assert batches == [[1], [3], [6, 4], [0, 7, 2, 5]]  # 12 | 12 (2 x 12 > 20) | 2 x 9 | 4 x 5 = 20


# ------------------------------------------------------------------ the own-token floor (LensConfig.term_floor)
def test_term_floor_against_a_loop():
    import numpy as np

    from lens.pooling import term_floor

    rng = np.random.default_rng(0)
    w = np.maximum(rng.normal(size=(3, 12)), 0).astype(np.float32)
    w[2] = 0.0  # a blank row stays blank
    own = [np.array([1, 1, 5, -1]), np.array([], dtype=np.int64), np.array([3])]
    got = term_floor(w, own, 0.5)
    want = w.copy()
    for b in range(3):
        for c in set(own[b].tolist()):
            if c >= 0:
                want[b, c] = max(w[b, c], 0.5 * w[b].max())
    np.testing.assert_array_equal(got, want)
    assert got[0, 1] >= 0.5 * w[0].max() and got is not w and np.array_equal(w[1], got[1])
    # relative to the row's maximum: commutes with scaling, so with L2 normalisation
    np.testing.assert_allclose(term_floor(3.0 * w, own, 0.5), 3.0 * got, rtol=1e-6)
    assert np.array_equal(term_floor(w, own, 0.0), w)


def test_floor_terms_in_torch_is_the_numpy_floor_and_differentiable():
    """The model's floor (``floor_terms``, applied in the forward so training sees it) against ``term_floor``, the
    numpy reference, on the same own tokens given as positions, with padding and special tokens (-1) masked out."""
    import numpy as np
    import torch

    from lens.pooling import floor_terms, term_floor

    g = torch.Generator().manual_seed(2)
    lexicon = torch.relu(torch.randn(3, 10, generator=g)).requires_grad_(True)
    clusters = torch.randint(-1, 10, (3, 6), generator=g)
    mask = torch.rand(3, 6, generator=g) > 0.3
    got = floor_terms(lexicon, clusters, mask, 0.4)
    own = [clusters[b][mask[b]].numpy() for b in range(3)]
    np.testing.assert_allclose(got.detach().numpy(), term_floor(lexicon.detach().numpy(), own, 0.4), rtol=1e-6)
    got.sum().backward()
    assert lexicon.grad is not None and float(lexicon.grad.abs().sum()) > 0
    with pytest.raises(ValueError, match=r"within \[0, 1\]"):
        floor_terms(lexicon, clusters, mask, 1.5)


def test_term_floor_refuses_bad_input():
    import numpy as np

    from lens.pooling import term_floor

    with pytest.raises(ValueError, match=r"within \[0, 1\]"):
        term_floor(np.ones((1, 3)), [np.array([0])], 1.5)
    with pytest.raises(ValueError, match="2 cluster lists for 1 rows"):
        term_floor(np.ones((1, 3)), [np.array([0]), np.array([1])], 0.5)


def test_logit_mask_next_shifts_and_own_keeps_positions():
    from lens.pooling import logit_mask

    m = torch.tensor([[0, 1, 1, 0], [1, 0, 1, 1]])
    assert logit_mask(m, "next").tolist() == [[1, 1, 0, 0], [0, 1, 1, 0]]
    assert logit_mask(m, "own").tolist() == m.tolist()
    with pytest.raises(ValueError, match="unknown logit_position 'prev'"):
        logit_mask(m, "prev")
