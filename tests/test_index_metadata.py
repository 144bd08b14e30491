"""index.metadata.DocTable: id map, metadata, transactions and SQLite persistence."""

import os
import sqlite3

import numpy as np
import pytest

from index.metadata import DocTable, encode_metadata


def filled():
    t = DocTable()
    t.insert([0, 1, 5], ["a", "b", "c"], [encode_metadata({"title": "A"}, "a"), None, encode_metadata({"n": [1, 2]}, "c")])
    return t


def test_lookup_fetch_contains_len():
    t = filled()
    assert len(t) == 3 and "b" in t and "z" not in t and 5 not in t
    assert t.lookup(["c", "z", "a"]) == {"c": 5, "a": 0}
    assert t.fetch([5, 0, 7, 5]) == {0: ("a", {"title": "A"}), 5: ("c", {"n": [1, 2]})}
    assert t.metadata("b") is None and t.metadata("a") == {"title": "A"}
    with pytest.raises(KeyError, match="'zz' is not in the index"):
        t.metadata("zz")
    assert t.max_int_id() == 5 and DocTable().max_int_id() == -1
    np.testing.assert_array_equal(t.int_ids(), [0, 1, 5])


def test_lookup_many_ids_in_batches():
    t = DocTable()
    n = 1234  # more than one IN (...) batch
    t.insert(range(n), [f"id{i}" for i in range(n)], [None] * n)
    found = t.lookup([f"id{i}" for i in range(0, n, 3)] + ["missing"])
    assert found == {f"id{i}": i for i in range(0, n, 3)}
    assert len(t.fetch(range(n))) == n


def test_transaction_rolls_back_on_error():
    t = filled()
    with pytest.raises(RuntimeError):
        with t.transaction():
            t.delete([0])
            t.insert([9], ["new"], [None])
            assert len(t) == 3
            raise RuntimeError("boom")
    assert len(t) == 3 and "a" in t and "new" not in t
    with t.transaction():
        t.delete([0, 1])
    assert len(t) == 1 and t.lookup(["c"]) == {"c": 5}


def test_unique_doc_id_enforced():
    t = filled()
    with pytest.raises(sqlite3.IntegrityError):
        t.insert([10], ["a"], [None])


def test_encode_metadata_errors():
    assert encode_metadata(None, "x") is None
    with pytest.raises(ValueError, match="metadata for document 'x' must be a dict or None, got list"):
        encode_metadata([1], "x")
    with pytest.raises(ValueError, match="'y' is not JSON-serialisable"):
        encode_metadata({"f": object()}, "y")
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        encode_metadata({"f": float("nan")}, "y")


def test_save_load_round_trip(tmp_path):
    t = filled()
    t.save(tmp_path / "docs.sqlite")
    u = DocTable.load(tmp_path / "docs.sqlite")
    assert len(u) == 3 and u.fetch([0, 1, 5]) == t.fetch([0, 1, 5])
    u.insert([6], ["d"], [None])  # the loaded copy lives in memory: the file is not changed
    assert len(DocTable.load(tmp_path / "docs.sqlite")) == 3


@pytest.mark.parametrize("in_place", [None, False, True])  # load(); read() copying; read() in place
def test_load_damaged_or_foreign_file(tmp_path, in_place):
    load = DocTable.load if in_place is None else lambda path: _open_table(path, in_place)
    bad = tmp_path / "docs.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(ValueError, match=f"document table {bad} is damaged"):
        load(bad)
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE x (y)")
    con.commit()
    con.close()
    with pytest.raises(ValueError, match="not a LENS index table"):
        load(other)
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "nope.sqlite")


def _open_table(path, in_place=True):
    with open(path, "rb") as f:
        return DocTable.read(f, path, in_place=in_place)


def _file_backed(table, path) -> bool:
    """Whether SQLite reads ``table`` from the file ``path`` (its main database's file name)."""
    return dict((row[1], row[2]) for row in table._conn.execute("PRAGMA database_list"))["main"] == str(path.resolve())


def test_read_in_place_answers_as_the_copy_and_refuses_writes(tmp_path):
    """``in_place`` (a searcher's load) queries the saved file where it lies, not a copy in memory: the same
    answers, filters included, and every write refused with what to do."""
    filled().save(tmp_path / "docs.sqlite")
    copy, lean = _open_table(tmp_path / "docs.sqlite", False), _open_table(tmp_path / "docs.sqlite")
    assert lean.read_only and not copy.read_only and _file_backed(lean, tmp_path / "docs.sqlite")
    assert not _file_backed(copy, tmp_path / "docs.sqlite")
    assert len(lean) == 3 and "b" in lean and lean.lookup(["c", "a", "z"]) == copy.lookup(["c", "a", "z"])
    assert lean.fetch([0, 1, 5]) == copy.fetch([0, 1, 5]) and lean.metadata("a") == {"title": "A"}
    np.testing.assert_array_equal(lean.int_ids(), [0, 1, 5])
    assert lean.max_int_id() == 5 and list(lean.iter_doc_ids(batch=2)) == [["a", "b"], ["c"]]
    for _ in range(3):  # a scan, then the field's index, then the remembered match
        np.testing.assert_array_equal(lean.matching((("n", (2,)),)), [5])
    for write in (lambda: lean.insert([9], ["d"], [None]), lambda: lean.delete([0]), lambda: lean.transaction().__enter__()):
        with pytest.raises(ValueError, match="opened read-only.*read_only=False"):
            write()
    assert len(_open_table(tmp_path / "docs.sqlite", False)) == 3


def test_read_in_place_keeps_the_verified_version(tmp_path):
    """A save replaces the file under its name: a table opened in place keeps answering from the version it
    opened, and a name that no longer leads to the verified file is read from that file, into memory."""
    path = tmp_path / "docs.sqlite"
    filled().save(path)
    lean = _open_table(path)
    other = DocTable()
    other.insert([0], ["only"], [None])
    other.save(tmp_path / "new.sqlite")
    os.replace(tmp_path / "new.sqlite", path)  # what an atomic save over the directory does to the name
    assert len(lean) == 3 and lean.fetch([5]) == {5: ("c", {"n": [1, 2]})}
    assert _open_table(path).lookup(["only", "a"]) == {"only": 0}

    filled().save(tmp_path / "old.sqlite")
    with open(tmp_path / "old.sqlite", "rb") as f:  # verified, then replaced before SQLite opens the name
        os.replace(path, tmp_path / "old.sqlite")
        table = DocTable.read(f, tmp_path / "old.sqlite", in_place=True)
    assert not table.read_only and not _file_backed(table, tmp_path / "old.sqlite") and table.lookup(["a", "only"]) == {"a": 0}

