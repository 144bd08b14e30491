"""The fixed-shape single-text path (lens.fixed_shape): a text padded to a length bucket gives the vectors of the
ordinary path; the encoder takes it only for one text at a time; a capture that cannot run turns it off without
changing a vector. CUDA graphs themselves need a GPU (benchmarks/speed_gpu.py measures them there); on a CPU the
same padded forward runs eagerly."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from conftest import FAMILIES, assert_close
from lens.encoder import LensEncoder
from lens.fixed_shape import FixedShapeForward
from lens.inputs import PADDING_SIDE, encode_texts
from lens.testing import save_tiny_backbone

QUERIES = ["cell protein gene", "the review of the study was high", "cancer patients drug dose response in mouse"]


@pytest.fixture(scope="module", params=FAMILIES)
def family_encoder(request, tmp_path_factory):
    from lens.vocab import cluster_vocab

    d = tmp_path_factory.mktemp(f"fixed-{request.param}")
    backbone = save_tiny_backbone(d / "backbone", family=request.param)
    cluster_vocab(d / "lens", str(backbone), 16)
    return LensEncoder.from_pretrained(d / "lens")


def eager_path(enc: LensEncoder, buckets=(8, 16, 32)) -> FixedShapeForward:
    return FixedShapeForward(enc.model, enc.tokenizer.pad_token_id, PADDING_SIDE[enc.config.convention], buckets,
                             mode="eager")


def test_padded_to_a_bucket_gives_the_ordinary_rows(family_encoder):
    enc = family_encoder
    path = eager_path(enc)
    prompt = enc.config.query_template.format(instruction=enc.config.default_instruction)
    for item in encode_texts(enc.tokenizer, QUERIES, 32, prompt):
        got = path(item)
        assert got is not None
        with torch.inference_mode():
            want = enc._forward([item])
        assert_close(got[0], want.lexicon[0].numpy(), atol=1e-5)
        assert_close(got[1], want.dense[0].numpy(), atol=1e-5)


def test_a_text_longer_than_the_largest_bucket_is_left_to_the_batch_path(tiny_encoder):
    path = eager_path(tiny_encoder, buckets=(4,))
    item = encode_texts(tiny_encoder.tokenizer, ["cell protein gene cancer"], 32)[0]  # start + 4 words + EOS
    assert not path.fits(item) and path(item) is None


def test_encoder_takes_the_path_for_one_text_only(tiny_lens_dir):
    enc = LensEncoder.from_pretrained(tiny_lens_dir)
    want_one = enc.encode_queries(QUERIES[2])
    want_all = enc.encode_queries(QUERIES)
    calls = []
    path = eager_path(enc)
    enc.single_text_path = path
    original = path.__call__

    class Spy(FixedShapeForward):
        def __call__(self, item):
            calls.append(len(item.ids))
            return original(item)

    path.__class__ = Spy
    assert_close(enc.encode_queries(QUERIES[2]), want_one, atol=1e-6)
    assert_close(enc.encode_queries([QUERIES[2]]), want_one[None], atol=1e-6)
    assert len(calls) == 2
    assert_close(enc.encode_queries(QUERIES), want_all, atol=0)  # a batch: the ordinary path
    assert len(calls) == 2
    enc.cuda_graphs = False  # turned off: the ordinary path even for one text
    enc.encode_queries(QUERIES[0])
    assert len(calls) == 2


def test_moved_weights_are_picked_up(tiny_lens_dir):
    enc = LensEncoder.from_pretrained(tiny_lens_dir)
    enc.single_text_path = eager_path(enc)
    before = enc.encode_queries(QUERIES[0])
    with torch.no_grad():  # a new head (as merging another adapter would): new storage, new vectors
        enc.model.head.weight = torch.nn.Parameter(enc.model.head.weight.detach().flip(0).clone())
    after = enc.encode_queries(QUERIES[0])
    enc.cuda_graphs = False
    assert_close(after, enc.encode_queries(QUERIES[0]), atol=1e-6)
    assert not np.allclose(before, after)


def test_a_capture_that_fails_turns_the_path_off_and_encoding_goes_on(tiny_lens_dir, caplog):
    enc = LensEncoder.from_pretrained(tiny_lens_dir)
    want = enc.encode_queries(QUERIES[1])
    path = FixedShapeForward(enc.model, enc.tokenizer.pad_token_id, "right", mode="cudagraph")  # on a CPU model
    enc.single_text_path = path
    with caplog.at_level(logging.WARNING, logger="lens.fixed_shape"):
        got = enc.encode_queries(QUERIES[1])
    assert_close(got, want, atol=0)
    assert not path.enabled and "CUDA graphs need a CUDA device" in caplog.text


def test_the_encoder_makes_no_path_off_cuda(tiny_lens_dir):
    enc = LensEncoder.from_pretrained(tiny_lens_dir)
    enc.encode_queries(QUERIES[0])
    assert enc.single_text_path is None


@pytest.mark.parametrize("bad", [dict(mode="compiled"), dict(buckets=()), dict(buckets=(1, 8))])
def test_bad_settings_are_refused(tiny_encoder, bad):
    with pytest.raises(ValueError):
        FixedShapeForward(tiny_encoder.model, 0, "right", **bad)
