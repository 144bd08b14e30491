"""HybridIndex.save / load: round trips, atomicity, fingerprint refusal and damaged files."""

import json
import os

import faiss
import numpy as np
import pytest

from index import FingerprintMismatchError, HybridIndex
from index.manifest import sha256_file
from index.metadata import DocTable

DL, DD = 32, 8
FP = {"cluster_hash": "abc", "adapter_hash": "def", "dense_model": "mini"}


def data(n, seed):
    rng = np.random.default_rng(seed)
    lex = np.log1p(np.maximum(rng.standard_normal((n, DL)) + 0.3, 0)).astype(np.float32)
    return lex, rng.standard_normal((n, DD)).astype(np.float32)


def build(index_type="flat", n=300, seed=0, **options):
    lex, den = data(n, seed)
    index = HybridIndex(DL, DD, index_type, weights=(0.7, 0.3), fingerprint=FP, **options)
    index.add([f"d{i}" for i in range(n)], lex, den, metadata=[{"i": i} for i in range(n)])
    return index


QLEX, QDEN = data(6, seed=99)


def same_results(a, b):
    ra, rb = a.search(QLEX, QDEN, k=8), b.search(QLEX, QDEN, k=8)
    return all(x.ids == y.ids and np.array_equal(x.scores, y.scores) and x.metadata == y.metadata for x, y in zip(ra, rb))


@pytest.mark.parametrize(
    "index_type, options",
    [("flat", {}), ("hnsw", {"ef_search": 20}), ("ivf", {"nlist": 4}), ("sq8", {"min_train": 100}), ("fp16", {})],
)
def test_round_trip_identical_results(tmp_path, index_type, options):
    index = build(index_type, **options)
    assert index.is_trained
    index.save(tmp_path / "ix")
    loaded = HybridIndex.load(tmp_path / "ix", expected_fingerprint=FP)
    assert same_results(index, loaded)
    assert len(loaded) == 300 and "d5" in loaded and loaded.metadata("d5") == {"i": 5}
    assert loaded.weights == (0.7, 0.3) and loaded.fingerprint == FP and loaded.index_options == index.index_options
    loaded.add(["new"], QLEX[0], QDEN[0])  # ids keep counting from where they were
    assert loaded.search(QLEX[0], QDEN[0], k=1)[0].ids == ["new"]


def test_round_trip_of_untrained_staged_ivf(tmp_path):
    lex, den = data(50, seed=1)
    index = HybridIndex(DL, DD, "ivf", nlist=4)
    index.add([f"d{i}" for i in range(50)], lex, den)
    assert not index.is_trained
    index.save(tmp_path / "ix")
    loaded = HybridIndex.load(tmp_path / "ix")
    assert not loaded.is_trained and same_results(index, loaded)
    more_lex, more_den = data(200, seed=2)
    loaded.add([f"m{i}" for i in range(200)], more_lex, more_den)
    assert loaded.is_trained and len(loaded) == 250


def test_manifest_contents(tmp_path):
    index = build("hnsw")
    index.save(tmp_path / "ix")
    m = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    assert m["format_version"] == 1 and m["index_type"] == "hnsw" and m["count"] == 300
    assert m["lexicon_dim"] == DL and m["dense_dim"] == DD and m["weights"] == [0.7, 0.3] and m["mode"] == "hybrid"
    assert m["index_options"] == {"m": 32, "ef_construction": 40, "ef_search": 64} and m["fingerprint"] == FP
    assert m["files"]["index.faiss"]["sha256"] == sha256_file(tmp_path / "ix" / "index.faiss")
    assert m["files"]["docs.sqlite"]["bytes"] == (tmp_path / "ix" / "docs.sqlite").stat().st_size
    assert sorted(os.listdir(tmp_path / "ix")) == ["docs.sqlite", "index.faiss", "manifest.json"]


def test_load_overrides_search_options(tmp_path):
    build("hnsw").save(tmp_path / "ix")
    loaded = HybridIndex.load(tmp_path / "ix", ef_search=123)
    assert faiss.downcast_index(loaded.faiss_index.index).hnsw.efSearch == 123
    with pytest.raises(ValueError, match="cannot be changed after building.*search-time options: ef_search"):
        HybridIndex.load(tmp_path / "ix", m=8)


@pytest.mark.parametrize("fail_in", ["faiss", "docs"])
def test_save_failing_midway_keeps_previous_index(tmp_path, monkeypatch, fail_in):
    target = tmp_path / "ix"
    old = build()
    old.save(target)
    newer = build(seed=5)
    newer.add(["extra"], QLEX[0], QDEN[0])

    def partial_faiss(index, path):
        with open(path, "wb") as f:
            f.write(b"\x00" * 100)
        raise OSError("disk full (simulated)")

    def partial_docs(self, path):
        with open(path, "wb") as f:
            f.write(b"SQLite format 3\x00 partial")
        raise OSError("disk full (simulated)")

    if fail_in == "faiss":
        monkeypatch.setattr(faiss, "write_index", partial_faiss)
    else:
        monkeypatch.setattr(DocTable, "save", partial_docs)
    with pytest.raises(OSError, match="simulated"):
        newer.save(target)
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == ["ix"]  # no temporary directory left behind
    loaded = HybridIndex.load(target, expected_fingerprint=FP)
    assert len(loaded) == 300 and "extra" not in loaded and same_results(old, loaded)
    assert not same_results(newer, loaded)


def test_save_over_the_directory_it_was_loaded_from(tmp_path):
    build().save(tmp_path / "ix")
    loaded = HybridIndex.load(tmp_path / "ix")
    loaded.remove(["d0", "d1"])
    loaded.save(tmp_path / "ix")
    again = HybridIndex.load(tmp_path / "ix")
    assert len(again) == 298 and "d0" not in again and same_results(loaded, again)


def test_fingerprint_mismatch_refused(tmp_path):
    build().save(tmp_path / "ix")
    other = {**FP, "adapter_hash": "zzz", "extra": 1}
    with pytest.raises(FingerprintMismatchError) as e:
        HybridIndex.load(tmp_path / "ix", expected_fingerprint=other)
    msg = str(e.value)
    assert "adapter_hash: expected 'zzz', index has 'def'" in msg
    assert "extra: expected 1, index has '<missing>'" in msg
    assert "cluster_hash" not in msg and "Rebuild the index" in msg and "load it with the encoder" in msg
    assert isinstance(e.value, ValueError)
    HybridIndex.load(tmp_path / "ix", expected_fingerprint=dict(FP))  # matching: fine
    HybridIndex.load(tmp_path / "ix")  # no expectation: no check


def test_info_round_trip(tmp_path):
    info = {"dense": "minilm", "lens_model": "default", "shape": (2, 3)}
    HybridIndex(DL, DD, info=info).save(tmp_path / "ix")
    loaded = HybridIndex.load(tmp_path / "ix")
    assert loaded.info == {"dense": "minilm", "lens_model": "default", "shape": [2, 3]}
    assert json.loads((tmp_path / "ix" / "manifest.json").read_text())["info"] == loaded.info
    with pytest.raises(ValueError, match="info must be a dict or None"):
        HybridIndex(DL, DD, info="minilm")


def test_fingerprint_json_normalised(tmp_path):
    HybridIndex(DL, DD, fingerprint={"dims": (1, 2)}).save(tmp_path / "ix")
    assert HybridIndex.load(tmp_path / "ix", expected_fingerprint={"dims": (1, 2)}).fingerprint == {"dims": [1, 2]}
    with pytest.raises(ValueError, match="JSON-serialisable"):
        HybridIndex(DL, DD, fingerprint={"x": object()})


@pytest.fixture
def saved(tmp_path):
    build().save(tmp_path / "ix")
    return tmp_path / "ix"


def test_truncated_index_file(saved):
    path = saved / "index.faiss"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ValueError, match=f"index file {path} is damaged: .* bytes, manifest says"):
        HybridIndex.load(saved)


def test_flipped_bytes_in_index_file(saved):
    path = saved / "index.faiss"
    raw = bytearray(path.read_bytes())
    for pos in (10, len(raw) // 2, len(raw) - 3):
        raw[pos] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=f"index file {path} is damaged: sha256"):
        HybridIndex.load(saved)


def _rewrite_with_matching_hash(saved, name, content):
    (saved / name).write_bytes(content)
    mpath = saved / "manifest.json"
    m = json.loads(mpath.read_text())
    m["files"][name] = {"sha256": sha256_file(saved / name), "bytes": len(content)}
    mpath.write_text(json.dumps(m))


def test_unreadable_faiss_file_with_matching_hash(saved):
    _rewrite_with_matching_hash(saved, "index.faiss", b"NOPE" + b"\x00" * 60)
    with pytest.raises(ValueError, match="could not be read by FAISS"):
        HybridIndex.load(saved)


def test_faiss_file_of_other_width(saved):
    other = faiss.IndexIDMap(faiss.IndexFlatIP(DL + DD + 1))
    tmp = saved.parent / "other.faiss"
    faiss.write_index(other, str(tmp))
    _rewrite_with_matching_hash(saved, "index.faiss", tmp.read_bytes())
    with pytest.raises(ValueError, match="inconsistent: index.faiss has width 41"):
        HybridIndex.load(saved)


def test_damaged_docs_db(saved):
    path = saved / "docs.sqlite"
    raw = bytearray(path.read_bytes())
    raw[200] ^= 0x55
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=f"index file {path} is damaged: sha256"):
        HybridIndex.load(saved)
    _rewrite_with_matching_hash(saved, "docs.sqlite", b"garbage" * 500)
    with pytest.raises(ValueError, match=f"document table {path.resolve()} is damaged"):
        HybridIndex.load(saved)


def test_damaged_manifest(saved):
    mpath = saved / "manifest.json"
    good = mpath.read_text()
    mpath.write_text(good[: len(good) // 2])
    with pytest.raises(ValueError, match=f"index manifest {mpath} is not valid JSON"):
        HybridIndex.load(saved)
    m = json.loads(good)
    del m["count"]
    mpath.write_text(json.dumps(m))
    with pytest.raises(ValueError, match="key 'count' is missing"):
        HybridIndex.load(saved)
    m = json.loads(good)
    m["format_version"] = 2
    mpath.write_text(json.dumps(m))
    with pytest.raises(ValueError, match="format version 2; this version of LENS reads format 1"):
        HybridIndex.load(saved)
    m = json.loads(good)
    m["count"] = 5
    mpath.write_text(json.dumps(m))
    with pytest.raises(ValueError, match="inconsistent: index.faiss holds 300 vectors, docs.sqlite 300 ids, manifest count 5"):
        HybridIndex.load(saved)
    m = json.loads(good)
    m["index_type"] = "pq"
    mpath.write_text(json.dumps(m))
    with pytest.raises(ValueError, match="unknown index type 'pq'; valid choices"):
        HybridIndex.load(saved)


def test_missing_files(saved, tmp_path):
    with pytest.raises(FileNotFoundError, match="no saved index"):
        HybridIndex.load(tmp_path / "nothing")
    (saved / "docs.sqlite").unlink()
    with pytest.raises(FileNotFoundError, match="index file missing"):
        HybridIndex.load(saved)
    (saved / "manifest.json").unlink()
    with pytest.raises(FileNotFoundError, match="index manifest not found"):
        HybridIndex.load(saved)


def test_a_fingerprint_key_added_later_may_be_missing_from_an_older_index(tmp_path, caplog):
    from index.manifest import check_fingerprint

    newer = {**FP, "weights_hash": "w1"}
    with caplog.at_level("WARNING"):
        check_fingerprint(newer, dict(FP), tmp_path / "ix", unrecorded_ok=("weights_hash",))  # an older index
    assert "predates the fingerprint key(s) ['weights_hash']" in caplog.text
    with pytest.raises(FingerprintMismatchError, match="weights_hash: expected 'w1', index has 'w0'"):
        check_fingerprint(newer, {**FP, "weights_hash": "w0"}, tmp_path / "ix", unrecorded_ok=("weights_hash",))
    with pytest.raises(FingerprintMismatchError, match="weights_hash"):
        check_fingerprint(newer, dict(FP), tmp_path / "ix")  # not declared: still refused


def test_a_read_only_load_reads_its_document_table_in_place_and_keeps_its_version(tmp_path):
    """``load(read_only=True)`` (lens search, lens serve) queries docs.sqlite where it lies instead of copying it
    into memory; a save over the directory meanwhile does not change what it answers."""
    index = build()
    index.save(tmp_path / "ix")
    ro, full = HybridIndex.load(tmp_path / "ix", read_only=True), HybridIndex.load(tmp_path / "ix")
    assert ro.doc_table.read_only and not full.doc_table.read_only
    assert same_results(ro, full) and ro.metadata("d7") == {"i": 7}
    assert ro.ids_matching({"i": 3}) == ["d3"]
    full.remove([f"d{i}" for i in range(100)])
    full.save(tmp_path / "ix")
    assert len(HybridIndex.load(tmp_path / "ix", read_only=True)) == 200
    assert len(ro) == 300 and same_results(ro, index) and ro.metadata("d7") == {"i": 7}
