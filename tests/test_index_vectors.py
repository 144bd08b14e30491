"""index.vectors: normalisation and hybrid query/document vectors against naive reference code."""

import math

import numpy as np
import pytest

from index.vectors import (as_matrix, balanced_weights, check_dim, check_finite, cosine_spread, document_vectors,
                           l2_normalize, mass_share, mean_weights, query_vectors, resolve_weights, support_mask,
                           weight_pair, weights_spec)


def naive_unit(row):
    norm = math.sqrt(sum(float(v) * float(v) for v in row))
    return [float(v) / norm if norm > 0 else 0.0 for v in row]


def naive_cos(a, b):
    na = math.sqrt(sum(float(x) ** 2 for x in a))
    nb = math.sqrt(sum(float(x) ** 2 for x in b))
    if na == 0 or nb == 0:
        return 0.0
    return sum(float(x) * float(y) for x, y in zip(a, b)) / (na * nb)


def test_l2_normalize_matches_naive_and_keeps_zero_rows_zero():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 9)).astype(np.float32)
    x[2] = 0.0
    out = l2_normalize(x)
    assert out.dtype == np.float32 and out.shape == x.shape
    assert not np.isnan(out).any()
    for row, got in zip(x, out):
        np.testing.assert_allclose(got, naive_unit(row), atol=1e-6)
    assert (out[2] == 0).all()
    np.testing.assert_allclose(np.linalg.norm(out[[0, 1, 3, 4, 5]], axis=1), 1.0, atol=1e-6)


def test_l2_normalize_extreme_magnitudes_and_float64_input():
    x = np.array([[1e-30, 2e-30, 0.0], [3e25, 4e25, 0.0], [1e-45, 0.0, 0.0]], dtype=np.float64)
    out = l2_normalize(x)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out[0], [1 / math.sqrt(5), 2 / math.sqrt(5), 0.0], rtol=1e-6)
    np.testing.assert_allclose(out[1], [0.6, 0.8, 0.0], rtol=1e-6)
    assert (out[2] == 0).all()  # denormal norm: treated as zero, not inf/NaN


def test_l2_normalize_into_out_slice():
    x = np.arange(12, dtype=np.float32).reshape(3, 4) + 1
    wide = np.zeros((3, 6), dtype=np.float32)
    l2_normalize(x, out=wide[:, 1:5])
    np.testing.assert_allclose(wide[:, 1:5], l2_normalize(x))
    assert (wide[:, 0] == 0).all() and (wide[:, 5] == 0).all()
    with pytest.raises(ValueError, match="out must be float32"):
        l2_normalize(x, out=np.zeros((3, 4)))


def test_document_vectors_concatenates_unit_parts():
    rng = np.random.default_rng(1)
    lex, den = np.abs(rng.standard_normal((5, 7))), rng.standard_normal((5, 3))
    doc = document_vectors(lex, den)
    assert doc.shape == (5, 10) and doc.dtype == np.float32 and doc.flags.c_contiguous
    for i in range(5):
        np.testing.assert_allclose(doc[i, :7], naive_unit(lex[i]), atol=1e-6)
        np.testing.assert_allclose(doc[i, 7:], naive_unit(den[i]), atol=1e-6)
    np.testing.assert_allclose(document_vectors(lex, None), l2_normalize(lex))
    np.testing.assert_allclose(document_vectors(None, den), l2_normalize(den))
    with pytest.raises(ValueError, match="same number of rows"):
        document_vectors(lex, den[:4])
    with pytest.raises(ValueError, match="at least one"):
        document_vectors(None, None)


def test_query_times_document_is_weighted_cosine_sum():
    rng = np.random.default_rng(2)
    dl, dd = 11, 5
    lex_d, den_d = np.abs(rng.standard_normal((8, dl))), rng.standard_normal((8, dd))
    lex_q, den_q = np.abs(rng.standard_normal((3, dl))), rng.standard_normal((3, dd))
    w_lex, w_dense = np.array([0.3, 1.0, 0.0]), np.array([0.7, 0.25, 2.0])
    scores = query_vectors(lex_q, den_q, w_lex, w_dense) @ document_vectors(lex_d, den_d).T
    for qi in range(3):
        for di in range(8):
            expected = w_lex[qi] * naive_cos(lex_q[qi], lex_d[di]) + w_dense[qi] * naive_cos(den_q[qi], den_d[di])
            assert scores[qi, di] == pytest.approx(expected, abs=1e-5)


def test_query_vectors_scalar_weights_and_validation():
    q = query_vectors(np.ones((2, 3)), np.ones((2, 2)), 2.0, 0.5)
    np.testing.assert_allclose(np.linalg.norm(q[:, :3], axis=1), 2.0, rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(q[:, 3:], axis=1), 0.5, rtol=1e-6)
    with pytest.raises(ValueError, match="w_lex must be finite and >= 0"):
        query_vectors(np.ones((1, 3)), np.ones((1, 2)), -1.0, 1.0)
    with pytest.raises(ValueError, match="one value per query"):
        query_vectors(np.ones((2, 3)), np.ones((2, 2)), [1.0, 1.0, 1.0], 1.0)


def test_check_finite_names_bad_rows():
    x = np.zeros((10, 4), dtype=np.float32)
    x[3, 1] = np.nan
    x[7, 0] = np.inf
    with pytest.raises(ValueError, match=r"lexicon vectors contain NaN or inf in row\(s\) 3, 7$"):
        check_finite(x, "lexicon")
    with pytest.raises(ValueError, match=r"row\(s\) 103, 107"):
        check_finite(x, "lexicon", row_offset=100)
    check_finite(np.ones((2, 2)), "dense")  # no error
    many = np.full((15, 2), np.nan)
    with pytest.raises(ValueError, match="and 5 more"):
        check_finite(many, "dense")


def test_check_dim_message():
    with pytest.raises(ValueError) as e:
        check_dim(np.zeros((2, 3999)), 4000, "lexicon")
    assert str(e.value) == "lexicon vectors have 3999 columns but this index was built with 4000"


def test_as_matrix_shapes_dtypes_and_torch():
    assert as_matrix(np.arange(4.0), "dense").shape == (1, 4)
    with pytest.raises(ValueError, match="1-D .* or 2-D"):
        as_matrix(np.zeros((2, 2, 2)), "dense")
    with pytest.raises(ValueError, match="numeric"):
        as_matrix(np.array(["a", "b"]), "dense")
    torch = pytest.importorskip("torch")
    t = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.bfloat16)
    arr = as_matrix(t, "lexicon")
    assert isinstance(arr, np.ndarray) and arr.dtype == np.float32
    np.testing.assert_array_equal(arr, [[1, 2], [3, 4]])


def test_as_matrix_takes_sparse_vectors_as_dense_rows():
    """``encode(..., convert_to="sparse")`` output (SciPy CSR) and torch sparse tensors go into an index as they are."""
    scipy_sparse = pytest.importorskip("scipy.sparse")
    torch = pytest.importorskip("torch")
    dense = np.array([[0.0, 2.0, 0.0], [1.0, 0.0, 0.5]], dtype=np.float32)
    np.testing.assert_array_equal(as_matrix(scipy_sparse.csr_matrix(dense), "lexicon"), dense)
    np.testing.assert_array_equal(as_matrix(torch.from_numpy(dense).to_sparse(), "lexicon"), dense)
    np.testing.assert_array_equal(as_matrix(torch.from_numpy(dense).to_sparse_csr(), "lexicon"), dense)


def test_prune_top_m_matches_a_naive_sort():
    from index.vectors import prune_top_m

    rng = np.random.default_rng(0)
    x = np.maximum(rng.normal(size=(7, 50)), 0).astype(np.float32)
    for m in (1, 3, 10, 50, 80):
        got = prune_top_m(x, m)
        for row, out in zip(x, got):
            order = sorted(range(len(row)), key=lambda j: -row[j])[: min(m, len(row))]
            want = np.zeros_like(row)
            want[order] = row[order]
            np.testing.assert_array_equal(out, want)
    assert not np.shares_memory(prune_top_m(x, 50), x)


def test_prune_top_m_rejects_bad_m():
    from index.vectors import prune_top_m

    with pytest.raises(ValueError, match="positive integer"):
        prune_top_m(np.ones((2, 3)), 0)
    with pytest.raises(ValueError, match="2-D"):
        prune_top_m(np.ones(3), 1)


# ----------------------------------------------------------------------------------------- balanced weights
def naive_spread(rows, query_rows):
    """Mean over the query rows of the population std of their cosines to every other nonzero row."""
    live = [r for r in rows if any(v != 0 for v in r)]
    stds = []
    for qi in query_rows:
        cos = [naive_cos(live[qi], live[j]) for j in range(len(live)) if j != qi]
        mean = sum(cos) / len(cos)
        stds.append(math.sqrt(sum((c - mean) ** 2 for c in cos) / len(cos)))
    return sum(stds) / len(stds)


def test_cosine_spread_matches_naive():
    rng = np.random.default_rng(3)
    x = np.abs(rng.normal(size=(12, 5))).astype(np.float32)
    x[4] = 0  # a zero row is not a document with a direction: left out
    live = np.delete(x, 4, axis=0)
    queries = np.random.default_rng(0).permutation(len(live))[:5]
    assert cosine_spread(x, queries=5, seed=0) == pytest.approx(naive_spread(x.tolist(), queries), rel=1e-5)
    assert cosine_spread(x[:2]) == 0.0  # fewer than 3 rows: nothing to spread


def test_balanced_weights_are_inverse_to_spread():
    rng = np.random.default_rng(1)
    lex = np.abs(rng.normal(size=(40, 8)))
    dense = rng.normal(size=(40, 6))
    s_lex, s_dense = cosine_spread(lex), cosine_spread(dense)
    w = balanced_weights(lex, dense)
    assert sum(w) == pytest.approx(1.0)
    assert w[0] * s_lex == pytest.approx(w[1] * s_dense)  # both parts move a ranking alike
    assert s_lex < s_dense and w[0] > w[1]  # non-negative vectors spread less, so the lexicon weighs more
    assert balanced_weights(lex, lex) == pytest.approx((0.5, 0.5))  # the same vectors twice: equal say
    assert balanced_weights(lex * 7.0, dense) == pytest.approx(w)  # cosines: the scale of a vector does not count
    assert balanced_weights(np.ones((5, 3)), dense[:5]) == (0.5, 0.5)  # identical documents: nothing to balance
    with pytest.raises(ValueError, match="same documents"):
        balanced_weights(lex, dense[:10])


def test_balanced_weights_sample_large_inputs_reproducibly():
    rng = np.random.default_rng(2)
    lex, dense = np.abs(rng.normal(size=(300, 8))), rng.normal(size=(300, 4))
    w = balanced_weights(lex, dense, max_rows=100, queries=20)
    assert w == balanced_weights(lex, dense, max_rows=100, queries=20)
    assert w == pytest.approx(balanced_weights(lex, dense), abs=0.05)  # a sample of 100 is close to all 300


def test_resolve_and_mean_weights():
    rng = np.random.default_rng(4)
    lex, dense = np.abs(rng.normal(size=(20, 8))), rng.normal(size=(20, 4))
    assert weights_spec(" Balanced ") == "balanced" and weights_spec("0.7,0.3") == (0.7, 0.3)
    with pytest.raises(ValueError, match="--weights must be two numbers"):
        weights_spec("balance", "--weights")
    assert resolve_weights(None, lex, dense) is None
    assert resolve_weights("Balanced", lex, dense) == balanced_weights(lex, dense)
    assert resolve_weights("balanced", lex, None) is None  # one part alone keeps its default
    assert resolve_weights("0.7,0.3", lex, dense) == (0.7, 0.3)
    with pytest.raises(ValueError, match="two numbers"):
        resolve_weights("blanced", lex, dense)
    assert mean_weights([(0.6, 0.4), (0.6, 0.4)], [0, 0]) == (0.6, 0.4)
    assert mean_weights([(0.6, 0.4), (0.8, 0.2)], [30, 10]) == pytest.approx((0.65, 0.35))
    assert mean_weights([(0.6, 0.4), (0.8, 0.2)], [0, 0]) == pytest.approx((0.7, 0.3))
    with pytest.raises(ValueError, match="one count"):
        mean_weights([(0.6, 0.4), (0.8, 0.2)], [1])


def test_support_mask_marks_each_rows_ids_and_rejects_ids_out_of_range():
    mask = support_mask([[0, 2, 2], [], [3]], 4)
    expected = np.zeros((3, 4), dtype=bool)
    for i, ids in enumerate([[0, 2, 2], [], [3]]):
        for j in ids:
            expected[i, j] = True
    assert mask.dtype == bool and (mask == expected).all()
    with pytest.raises(ValueError, match=r"row 1 has an id outside \[0, 4\)"):
        support_mask([[1], [4]], 4)


def test_mass_share_matches_a_loop_and_is_nan_for_an_empty_row():
    rng = np.random.default_rng(0)
    x = np.maximum(rng.normal(size=(5, 7)), 0).astype(np.float32)
    x[3] = 0
    mask = rng.random((5, 7)) < 0.4
    got = mass_share(x, mask)
    for i in range(5):
        total = sum(float(v) for v in x[i])
        on = sum(float(x[i, j]) for j in range(7) if mask[i, j])
        if total == 0:
            assert np.isnan(got[i])
        else:
            assert got[i] == pytest.approx(on / total)
    with pytest.raises(ValueError, match="non-negative"):
        mass_share(-x - 1, mask)
    with pytest.raises(ValueError, match="one shape"):
        mass_share(x, mask[:, :3])


@pytest.mark.parametrize("weights", [(1e-300, 1e-300), (1e154, 1e154), (1e-320, 0.0), "0.5,1e12"])
def test_weights_too_small_or_large_for_float32_scores_are_refused(weights):
    """A weight that float32 scores would flush to 0 or overflow is refused with what to do, not a search that
    quietly returns nothing."""
    from index.bm25_fusion import query_weights

    with pytest.raises(ValueError, match="each non-zero weight must lie between 1e-09 and 1e\\+09"):
        weight_pair(weights)
    three = (weights + ",0.1") if isinstance(weights, str) else (*weights, 0.1)
    with pytest.raises(ValueError, match="each non-zero weight must lie between"):
        query_weights(three)
    assert weight_pair((1e-9, 1e9)) == (1e-9, 1e9) and weight_pair("0,1") == (0.0, 1.0)
