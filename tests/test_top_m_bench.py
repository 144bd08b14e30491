"""The pure parts of benchmarks/top_m.py: CSR bytes arithmetic and the --m parser."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
from bench_helpers import load_script


@pytest.fixture(scope="module")
def top_m():
    return load_script("top_m")


def test_csr_bytes_matches_scipy_with_narrow_ids(top_m):
    sparse = pytest.importorskip("scipy.sparse")
    rng = np.random.default_rng(0)
    x = rng.random((7, 300)) * (rng.random((7, 300)) < 0.2)
    x[3] = 0  # an empty row still has its row pointer
    m = sparse.csr_matrix(x.astype(np.float32))
    m.indices = m.indices.astype(np.uint16)
    m.indptr = m.indptr.astype(np.int64)
    expected = m.data.nbytes + m.indices.nbytes + m.indptr.nbytes
    assert top_m.csr_bytes(np.count_nonzero(x, axis=1), 300) == expected


def test_csr_bytes_by_hand_and_wide_ids(top_m):
    assert top_m.csr_bytes([64, 64], 4000) == 2 * 64 * 6 + 3 * 8
    assert top_m.csr_bytes([1], 2**16) == 6 + 16  # cluster ids 0..65535 still fit uint16
    assert top_m.csr_bytes([1], 2**16 + 1) == 8 + 16  # one more cluster needs uint32 ids
    with pytest.raises(ValueError, match="0..10"):
        top_m.csr_bytes([11], 10)


def test_m_list(top_m):
    assert top_m.m_list("256,64,256, 128") == [256, 64, 128]
    for bad in ("", "0,64", "64,x", "-1"):
        with pytest.raises(argparse.ArgumentTypeError, match="--m takes comma-separated integers >= 1"):
            top_m.m_list(bad)
