"""index.rows.RowBlocks: rows of varying length under int64 labels, checked against a plain dict of lists."""

import numpy as np
import pytest

from index.rows import RowBlocks


def _as_dict(rows: RowBlocks) -> dict[int, list[int]]:
    labels, values, offsets = rows.flat()
    return {int(l): values[offsets[i] : offsets[i + 1]].tolist() for i, l in enumerate(labels)}


def test_adds_and_removes_match_a_reference_in_order():
    rng = np.random.default_rng(0)
    rows, ref = RowBlocks(np.uint16, "the test part"), {}
    next_label = 0
    for step in range(40):
        if step % 3 == 2 and ref:
            gone = rng.choice(list(ref), size=min(len(ref), 3), replace=False).tolist() + [10_000]
            dropped = rows.remove(gone)
            want = [v for l in list(ref) if l in gone for v in ref[l]]
            assert sorted(dropped.tolist()) == sorted(want) and dropped.dtype == np.uint16
            for l in gone:
                ref.pop(l, None)
        else:
            new = [rng.integers(0, 500, size=rng.integers(0, 6)) for _ in range(rng.integers(1, 5))]
            labels = list(range(next_label, next_label + len(new)))
            next_label += len(new)
            added = rows.add(new, labels)
            assert added.tolist() == [int(v) for r in new for v in r]
            ref.update({l: r.tolist() for l, r in zip(labels, new)})
        assert _as_dict(rows) == ref and list(_as_dict(rows)) == list(ref)  # the same rows, in the order added
        assert rows.labels.tolist() == list(ref) and len(rows) == len(ref)
        assert rows.lengths().tolist() == [len(r) for r in ref.values()]
        assert rows.values().tolist() == [v for r in ref.values() for v in r]
    blocks = len(rows._blocks)  # each block has one offset more than its rows; the flat copy has one in all
    assert blocks > 1 and rows.nbytes == sum(a.nbytes for a in rows.flat()) + 8 * (blocks - 1)


def test_refused_additions_change_nothing():
    rows = RowBlocks(np.int32, "the test part")
    rows.add([np.array([1, 2]), np.array([3])], [5, 6])
    for labels in ([6, 7], [8, 8]):
        with pytest.raises(ValueError, match="the test part already holds some"):
            rows.add([np.array([9]), np.array([9])], labels)
    with pytest.raises(ValueError, match="the test part needs one row per document: got 1 rows for 2"):
        rows.add([np.array([9])], [8, 9])
    assert _as_dict(rows) == {5: [1, 2], 6: [3]}


def test_from_flat_and_map_values():
    rows = RowBlocks.from_flat(np.array([3, 1]), np.array([4, 5, 6], np.int64), np.array([0, 2, 3]), np.int32, "p")
    assert _as_dict(rows) == {3: [4, 5], 1: [6]} and rows.values().dtype == np.int32
    rows.map_values(np.array([0, 0, 0, 0, 10, 11, 12]))
    assert _as_dict(rows) == {3: [10, 11], 1: [12]}
    assert len(RowBlocks.from_flat(np.zeros(0), np.zeros(0), np.zeros(1), np.int32, "p")) == 0
    assert not rows.labels.flags.writeable  # shared until the rows change: callers cannot alter it
    assert rows.remove([3, 1]).tolist() == [10, 11, 12] and len(rows) == 0 and rows.flat()[2].tolist() == [0]
