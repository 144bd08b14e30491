"""index.fusion against hand-computed values."""

import numpy as np
import pytest

from index.fusion import FUSION, as_run, get_fusion, minmax_fusion, rrf
from index.store import SearchResult

A = {"a": 3.0, "b": 2.0, "c": 1.0}
B = {"b": 0.9, "d": 0.5}


def test_rrf_hand_values():
    ids, scores = rrf([A, B], k=60)
    expected = {"a": 1 / 61, "b": 1 / 62 + 1 / 61, "c": 1 / 63, "d": 1 / 62}
    assert ids == ["b", "a", "d", "c"]
    np.testing.assert_allclose(scores, [expected[i] for i in ids], rtol=1e-12)


def test_rrf_weights_k_and_limit():
    ids, scores = rrf([A, B], weights=[1.0, 3.0], k=0, limit=2)
    # b: 1/2 + 3/1 = 3.5; d: 3/2 = 1.5; a: 1/1 = 1
    assert ids == ["b", "d"]
    np.testing.assert_allclose(scores, [3.5, 1.5])


def test_rrf_ties_share_rank_and_break_by_id():
    ids, scores = rrf([{"y": 1.0, "x": 1.0, "z": 0.0}], k=1)
    assert ids == ["x", "y", "z"]  # x and y both rank 1 -> equal score, ordered by id
    np.testing.assert_allclose(scores, [1 / 2, 1 / 2, 1 / 4])


def test_rrf_only_order_matters():
    scaled = {k: v * 1000 - 5 for k, v in A.items()}
    assert rrf([A, B])[0] == rrf([scaled, B])[0]
    np.testing.assert_allclose(rrf([A, B])[1], rrf([scaled, B])[1])


def test_minmax_hand_values():
    runs = [{"a": 10.0, "b": 5.0, "c": 0.0}, {"b": 2.0, "d": 4.0}]
    ids, scores = minmax_fusion(runs, weights=[3, 1])
    # weights -> 0.75, 0.25; run1: a=1, b=.5, c=0; run2: b=0, d=1
    assert ids == ["a", "b", "d", "c"]
    np.testing.assert_allclose(scores, [0.75, 0.375, 0.25, 0.0])


def test_minmax_all_equal_run_is_one_and_missing_is_zero():
    ids, scores = minmax_fusion([{"a": 0.3, "b": 0.3}, {"c": 7.0}, {"a": 1.0, "c": 0.0}])
    # run1 -> a=b=1; run2 (single hit) -> c=1; run3 -> a=1, c=0; equal weights 1/3
    got = dict(zip(ids, scores))
    assert got == pytest.approx({"a": 2 / 3, "b": 1 / 3, "c": 1 / 3})
    assert ids == ["a", "b", "c"]


def test_empty_runs():
    assert minmax_fusion([{}, {}])[0] == []
    assert rrf([])[0] == []


def test_validation_errors():
    with pytest.raises(ValueError, match="non-finite"):
        rrf([{"a": float("nan")}])
    with pytest.raises(ValueError, match="2 weights for 1 runs"):
        minmax_fusion([A], weights=[1, 2])
    with pytest.raises(ValueError, match="not all zero"):
        minmax_fusion([A, B], weights=[0, 0])
    with pytest.raises(ValueError, match=">= 0"):
        rrf([A], k=-1)
    with pytest.raises(ValueError, match="mapping"):
        rrf([["a", "b"]])


def test_registry():
    assert get_fusion("rrf") is rrf and get_fusion("minmax") is minmax_fusion
    assert set(FUSION) == {"rrf", "minmax"}
    with pytest.raises(ValueError, match="unknown fusion 'sum'; valid choices: minmax, rrf"):
        get_fusion("sum")


def test_as_run_from_search_result():
    res = SearchResult(["x", "y"], np.array([0.5, 0.25], dtype=np.float32), [None, None])
    assert as_run(res) == {"x": 0.5, "y": 0.25}
