"""Concurrent writers, interrupted saves, full disks and odd inputs: nothing is lost and every error says what to do.

Faults that need a real second process (a writer holding the lock, a kill between the renames of a save, a file-size
limit) run small Python subprocesses; the rest run in process on the tiny random model of conftest.
"""

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from index import HybridIndex
from lens.atomic import DirectoryLock, LockedError, StorageError, atomic_dir, recover, storage_error
from lens.cli import main
from lens.encoder import LensEncoder
from lens.hybrid import HybridEncoder

from corpus_helpers import write_corpus
from fault_scripts import DISK_FULL_SAVE, HOLD_LOCK, KILL_BETWEEN_RENAMES, SAVE_LOOP, SLOW_BUILD, make_index

ROOT = Path(__file__).resolve().parents[1]
DL, DD = 24, 8


def _env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def run_py(code: str, *args: str, timeout: float = 300, preexec=None, **popen) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=timeout, preexec_fn=preexec, **popen)


def popen_py(code: str, *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=ROOT, env=_env(), text=True, **kw)


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"helper process ended early ({proc.returncode})"
        assert time.monotonic() < deadline, f"timed out waiting for {path}"
        time.sleep(0.05)


def top_ids(index: HybridIndex, k: int = 5) -> list[list[str]]:
    rng = np.random.default_rng(42)
    q_lex = np.abs(rng.standard_normal((3, index.lexicon_dim))).astype(np.float32)
    q_den = rng.standard_normal((3, index.dense_dim)).astype(np.float32) if index.dense_dim else None
    return [r.ids for r in index.search(q_lex, q_den, k=k)]


# ---------------------------------------------------------------------------------------------- the writer lock
def test_lock_is_reentrant_per_thread_and_refuses_other_threads(tmp_path):
    target = tmp_path / "ix"
    with DirectoryLock(target, "index") as lock:
        assert lock.path == tmp_path / ".ix.lock" and lock.path.read_text().split() == [str(os.getpid()), "write"]
        with DirectoryLock(target, "index"):  # the same thread again (a build holding it while its save takes it)
            pass
        errors = []
        t = threading.Thread(target=lambda: errors.append(_try_lock(target)))
        t.start()
        t.join()
        assert isinstance(errors[0], LockedError) and f"pid {os.getpid()}" in str(errors[0])
        assert lock.path.exists()
    assert not (tmp_path / ".ix.lock").exists()  # removed on release: nothing left beside the index
    with DirectoryLock(target, "index"):  # free again
        pass


def _try_lock(target):
    try:
        with DirectoryLock(target, "index"):
            return None
    except LockedError as e:
        return e


def test_a_platform_without_flock_gets_a_clear_error(tmp_path, monkeypatch):
    import lens.atomic.lock

    monkeypatch.setattr(lens.atomic.lock, "fcntl", None)
    with pytest.raises(StorageError, match="fcntl.flock, which this platform .* lacks; run it on Linux or macOS"):
        make_index("a", 5, 0).save(tmp_path / "ix")
    assert os.listdir(tmp_path) == []


def test_model_directory_writer_is_locked_too(tiny_encoder, tmp_path):
    out, ready = tmp_path / "model", tmp_path / "ready"
    holder = popen_py(HOLD_LOCK, str(out), "model directory", str(ready), stdin=subprocess.PIPE)
    try:
        wait_for(ready, holder, 60)
        with pytest.raises(LockedError, match=rf"another process is writing model directory .*model \(pid {holder.pid}\)"):
            tiny_encoder.save_pretrained(out)
        assert not out.exists() and sorted(os.listdir(tmp_path)) == [".model.lock", "ready"]
    finally:
        holder.communicate("", timeout=60)
    tiny_encoder.save_pretrained(out)  # the holder is gone: the lock is free
    assert (out / "config.json").is_file() and not (tmp_path / ".model.lock").exists()


def test_a_killed_writer_never_blocks_the_next(tmp_path):
    target, ready = tmp_path / "ix", tmp_path / "ready"
    holder = popen_py(HOLD_LOCK, str(target), "index", str(ready), stdin=subprocess.PIPE)
    wait_for(ready, holder, 60)
    holder.kill()
    holder.wait(60)
    assert (tmp_path / ".ix.lock").exists()  # left by the killed process, but the kernel dropped its lock
    make_index("a", 10, 0).save(target)
    assert len(HybridIndex.load(target)) == 10 and sorted(os.listdir(tmp_path)) == ["ix", "ready"]


def test_two_builds_of_one_index(tiny_lens_dir, tiny_encoder, tmp_path, capsys):
    """The second build fails at once naming the first's pid; the first finishes and its index is intact."""
    corpus_a = write_corpus(tmp_path / "a.jsonl", 20, "a", 0)
    corpus_b = write_corpus(tmp_path / "b.jsonl", 15, "b", 1)
    ix, started, go = tmp_path / "ix", tmp_path / "started", tmp_path / "go"
    argv = ["index", "build", "--output", str(ix), "--model", str(tiny_lens_dir), "--dense", "none", "--chunk-size", "6"]
    first = popen_py(SLOW_BUILD, str(started), str(go), *argv, "--corpus", str(corpus_a),
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(started, first)
        t0 = time.perf_counter()
        assert main([*argv, "--corpus", str(corpus_b)]) == 2
        elapsed = time.perf_counter() - t0
        err = capsys.readouterr().err
        assert f"another process is writing index {ix.resolve()} (pid {first.pid})" in err
        assert err.count("\n") == 1 and elapsed < 5  # one line, before loading any model
        assert (tmp_path / ".ix.partial" / "state.json").is_file()  # the first build's work is untouched
    finally:
        go.touch()
        out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    built = HybridIndex.load(ix)
    assert len(built) == 20 and all(f"a{i}" in built for i in range(20)) and "b0" not in built
    from lens.corpus import load_corpus
    from lens.indexing import build_index

    reference = build_index(load_corpus(corpus_a), tmp_path / "ref", HybridEncoder(tiny_encoder, "none"),
                            chunk_size=6, show_progress_bar=False)
    q = tiny_encoder.encode_queries(["cancer drug", "brain"])
    for got, want in zip(built.search(q, k=20), reference.search(q, k=20)):
        assert got.ids == want.ids and np.allclose(got.scores, want.scores, atol=1e-6)
    assert sorted(os.listdir(tmp_path)) == ["a.jsonl", "b.jsonl", "go", "ix", "ref", "started"]


# ---------------------------------------------------------------------------------------------- save / load race
def _check_version(index: HybridIndex, expected: dict) -> None:
    key = "a" if "a0" in index else "b"
    assert len(index) == {"a": 300, "b": 200}[key] and top_ids(index) == expected[key]


def test_loads_racing_saves_never_see_damage(tmp_path):
    target = tmp_path / "ix"
    expected = {"a": top_ids(make_index("a", 300, 0)), "b": top_ids(make_index("b", 200, 1))}
    saver = popen_py(SAVE_LOOP, str(target), "6", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert saver.stdout.readline().strip() == "ready"
    loads = 0
    while saver.poll() is None:
        _check_version(HybridIndex.load(target), expected)  # any error (e.g. "damaged") fails the test
        loads += 1
    out, err = saver.communicate()
    assert saver.returncode == 0, err
    saves = int(out.split()[-1])
    assert saves > 20 and loads > 20, (saves, loads)
    _check_version(HybridIndex.load(target), expected)
    assert sorted(os.listdir(tmp_path)) == ["ix"]


def test_loads_racing_saves_in_threads(tmp_path):
    target = tmp_path / "ix"
    versions = [make_index("a", 300, 0), make_index("b", 200, 1)]
    expected = {"a": top_ids(versions[0]), "b": top_ids(versions[1])}
    versions[0].save(target)
    stop, failures, saves = threading.Event(), [], [0]

    def saver():
        try:
            while not stop.is_set():
                versions[saves[0] % 2].save(target)
                saves[0] += 1
        except BaseException as e:  # pragma: no cover - reported below
            failures.append(e)

    t = threading.Thread(target=saver)
    t.start()
    loads, t0 = 0, time.monotonic()
    try:
        while time.monotonic() - t0 < 3:
            _check_version(HybridIndex.load(target), expected)
            loads += 1
    finally:
        stop.set()
        t.join()
    assert not failures and saves[0] > 10 and loads > 10


# ---------------------------------------------------------------------------------------------- killed saves
@pytest.fixture
def killed_save(tmp_path):
    """A directory where a save of index b over index a was killed between its two renames."""
    target = tmp_path / "ix"
    done = run_py(KILL_BETWEEN_RENAMES, str(target), timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    names = sorted(os.listdir(tmp_path))
    assert "ix" not in names and [n[:8] for n in names] == [".ix.lock", ".ix.old-", ".ix.tmp-"]
    return target


def test_load_after_a_kill_between_renames_recovers(killed_save, caplog):
    with caplog.at_level(logging.WARNING, logger="lens.atomic"):
        index = HybridIndex.load(killed_save)
    assert len(index) == 200 and "b0" in index  # the finished new version is put in place
    assert top_ids(index) == top_ids(make_index("b", 200, 1))
    messages = [r.getMessage() for r in caplog.records]
    assert any("restored index" in m and "interrupted between its two renames" in m for m in messages)
    assert sorted(os.listdir(killed_save.parent)) == ["ix"]


def test_a_save_after_a_kill_recovers_first(killed_save):
    make_index("c", 50, 2).save(killed_save)
    assert len(HybridIndex.load(killed_save)) == 50 and sorted(os.listdir(killed_save.parent)) == ["ix"]


def test_kill_with_only_the_old_copy_left_restores_it(killed_save, capsys):
    import shutil

    (tmp,) = killed_save.parent.glob(".ix.tmp-*")
    shutil.rmtree(tmp)
    assert main(["index", "info", str(killed_save)]) == 0  # info reads through the same recovery
    assert "300 documents" in capsys.readouterr().out
    assert len(HybridIndex.load(killed_save)) == 300


def test_stale_temporary_folders_are_removed_by_the_next_save(tmp_path, caplog):
    target = tmp_path / "ix"
    make_index("a", 10, 0).save(target)
    stale = tmp_path / ".ix.tmp-abcd1234"
    stale.mkdir()
    (stale / "index.faiss").write_bytes(b"half")
    with caplog.at_level(logging.WARNING, logger="lens.atomic"):
        make_index("b", 12, 1).save(target)
    assert sorted(os.listdir(tmp_path)) == ["ix"] and len(HybridIndex.load(target)) == 12
    assert any("stale temporary folder" in r.getMessage() for r in caplog.records)


def test_recover_leaves_a_healthy_directory_alone(tmp_path):
    (tmp_path / "d").mkdir()
    with DirectoryLock(tmp_path / "d"):
        assert recover(tmp_path / "d") == []


# ---------------------------------------------------------------------------------------------- full disks
LIMIT = 100_000


def test_disk_full_during_save_is_one_line_and_changes_nothing(tmp_path):
    target = tmp_path / "ix"
    done = run_py(DISK_FULL_SAVE, str(target), str(LIMIT), timeout=120)
    kind, message = done.stdout.strip().split("\n")
    assert kind == "StorageError 27", done.stderr  # EFBIG
    assert message.startswith(f"cannot write {target}: file too large") and "nothing was changed" in message
    assert sorted(os.listdir(tmp_path)) == ["ix"]  # no temporary folder, no lock file
    assert len(HybridIndex.load(target)) == 20  # the previous version, intact


DISK_FULL_CLI = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
from lens.cli import main
args = sys.argv[2:]
cut = args.index("--")
print("rc", main(args[:cut]), file=sys.stderr)
print("rc", main(args[cut + 1:]), file=sys.stderr)
"""


def test_disk_full_in_the_cli(tiny_lens_dir, tmp_path, monkeypatch, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(f"cell gene {i}" for i in range(2000)) + "\n")  # 2000 x 16 float32 > LIMIT
    corpus = write_corpus(tmp_path / "corpus.jsonl", 1000, "d", 0)
    out, ix = tmp_path / "out" / "v.npy", tmp_path / "out" / "ix"
    done = run_py(DISK_FULL_CLI, str(LIMIT),
                  "encode", "--model", str(tiny_lens_dir), "--input", str(texts), "--output", str(out), "--",
                  "index", "build", "--corpus", str(corpus), "--output", str(ix), "--model", str(tiny_lens_dir),
                  "--dense", "lens", "--chunk-size", "100", timeout=400)
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith(("lens ", "rc "))]
    assert lines[0].startswith(f"lens encode: error: cannot write {out}: file too large"), done.stderr
    assert "1024 of 2000 texts are encoded and kept" in lines[0] and "--resume" in lines[0]  # the first chunk
    assert lines[1] == "rc 2" and "Traceback" not in done.stderr
    assert lines[2].startswith(f"lens index build: error: cannot write {ix.resolve()}: file too large"), done.stderr
    assert "10 encoded chunks are kept" in lines[2] and "--resume" in lines[2] and lines[3] == "rc 2"
    # no .npy, no index, no temporary file: the work kept for a resume
    assert sorted(os.listdir(tmp_path / "out")) == [".ix.partial", ".v.npy.partial"]
    import lens.indexing as indexing
    import lens.sharding as sharding

    monkeypatch.setattr(indexing, "encode_chunk", lambda *a: pytest.fail("a kept chunk was encoded again"))
    assert main(["index", "build", "--corpus", str(corpus), "--output", str(ix), "--model", str(tiny_lens_dir),
                 "--dense", "lens", "--chunk-size", "100", "--resume"]) == 0
    encoded = []
    real = sharding.encode_texts
    monkeypatch.setattr(sharding, "encode_texts", lambda enc, texts, **kw: encoded.append(len(texts)) or real(
        enc, texts, **kw))
    assert main(["encode", "--model", str(tiny_lens_dir), "--input", str(texts), "--output", str(out), "--resume"]) == 0
    assert encoded == [2000 - 1024]  # the kept chunk was not encoded again
    want = LensEncoder.from_pretrained(tiny_lens_dir).encode_documents([f"cell gene {i}" for i in range(2000)])
    assert np.allclose(np.load(out), want, atol=1e-5)
    assert len(HybridIndex.load(ix)) == 1000 and sorted(os.listdir(tmp_path / "out")) == ["ix", "v.npy"]


def test_storage_error_messages():
    import errno

    for code, words in ((errno.ENOSPC, "no space left on the device (disk full)"), (errno.EFBIG, "file too large"),
                        (errno.EACCES, "permission denied"), (errno.EROFS, "read-only file system")):
        e = storage_error("/x/ix", OSError(code, os.strerror(code)), note="kept")
        assert isinstance(e, OSError) and e.errno == code and "\n" not in str(e)
        assert str(e).startswith(f"cannot write /x/ix: {words}") and str(e).endswith("(kept)")


def test_json_gz_round_trip_is_byte_stable_and_a_damaged_file_is_named(tmp_path):
    """A ``.gz`` path is written gzipped with no timestamp (the same object, the same bytes: a rewritten result
    file shows no diff) and read back whole; a truncated one is an error naming the file, not a crash."""
    import gzip
    import json

    from lens.atomic import read_json, write_json

    obj = {"b": [1, 2.5, None], "a": {"é": "x"}}
    write_json(tmp_path / "one.json.gz", obj)
    time.sleep(1.1)  # a header with a timestamp would differ after a second
    write_json(tmp_path / "two.json.gz", obj)
    data = (tmp_path / "one.json.gz").read_bytes()
    assert data == (tmp_path / "two.json.gz").read_bytes() and data[:2] == b"\x1f\x8b"
    assert json.loads(gzip.decompress(data)) == obj == read_json(tmp_path / "one.json.gz")
    write_json(tmp_path / "plain.json", obj)  # any other name stays plain JSON
    assert json.loads((tmp_path / "plain.json").read_text()) == obj
    (tmp_path / "cut.json.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"results .*cut.json.gz is not a complete gzip file.*recreate it"):
        read_json(tmp_path / "cut.json.gz", "results")


def test_body_failure_in_atomic_dir_leaves_nothing(tmp_path):
    import errno

    with pytest.raises(StorageError, match="no space left"):
        with atomic_dir(tmp_path / "d") as tmp:
            (tmp / "f").write_bytes(b"x")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert os.listdir(tmp_path) == []


def test_a_foreign_writers_disk_full_is_a_storage_error_too(tmp_path):
    """safetensors' Rust writer reports "(os error 27)" in its own exception type (``lens merge``)."""
    with pytest.raises(StorageError, match=r"cannot write .*merged: file too large") as e:
        with atomic_dir(tmp_path / "merged", what="model directory"):
            raise RuntimeError("Error while serializing: I/O error: File too large (os error 27)")
    assert e.value.errno == 27 and os.listdir(tmp_path) == []
    with pytest.raises(RuntimeError, match="unrelated"):  # other failures pass through untouched
        with atomic_dir(tmp_path / "merged"):
            raise RuntimeError("unrelated")


# ---------------------------------------------------------------------------------------------- odd inputs
@pytest.mark.parametrize("texts,match", [
    ({"a": "cell gene"}, "is a dict: pass a list of strings"),
    ({"cell", "gene"}, "is a set, which has no order: pass a list"),
    (frozenset({"cell"}), "is a frozenset, which has no order"),
    ({"a": 1}.keys(), "is a dict_keys, which has no order"),
    (b"cell gene", "is bytes; decode it first"),
])
def test_encoder_refuses_mappings_sets_and_bytes(tiny_encoder, texts, match):
    for method in (tiny_encoder.encode, tiny_encoder.encode_queries, tiny_encoder.encode_documents):
        with pytest.raises(TypeError, match=match):
            method(texts)
    with pytest.raises(TypeError, match=match):
        HybridEncoder(tiny_encoder, "lens").encode_documents(texts)
    with pytest.raises(TypeError, match=match):
        HybridEncoder(tiny_encoder, "none").encode_queries(texts)


def test_invalid_unicode_is_named_by_index(tiny_encoder):
    with pytest.raises(ValueError, match=r"texts\[1\] holds a lone surrogate U\+D800 at character 5"):
        tiny_encoder.encode(["cell", "gene \ud800 drug"])
    with pytest.raises(ValueError, match="instruction holds a lone surrogate"):
        tiny_encoder.encode_queries(["cell"], instruction="find \udc80")
    from lens.search import check_queries

    with pytest.raises(TypeError, match="queries is a dict"):
        check_queries({"q": "cell"})
    assert check_queries("cell gene") == ["cell gene"]


def test_cli_encode_output_directory_fails_before_any_work(tmp_path, capsys):
    (tmp_path / "t.txt").write_text("cell\n")
    # the model does not even exist: the output is checked first
    assert main(["encode", "--model", str(tmp_path / "no-model"), "--input", str(tmp_path / "t.txt"),
                 "--output", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"--output {tmp_path} is a directory; give a file name" in err and "no-model" not in err


@pytest.mark.parametrize("name,content,where", [
    ("latin1.txt", "caf\u00e9 cell\n".encode("latin-1"), "line 1, byte 4: 0xe9"),
    ("latin1.jsonl", b'{"text": "ok"}\n' + '{"text": "caf\u00e9"}\n'.encode("latin-1"), "line 2, byte 14: 0xe9"),
])
def test_cli_non_utf8_input_names_the_file_and_the_fix(tiny_lens_dir, tmp_path, capsys, name, content, where):
    path = tmp_path / name
    path.write_bytes(content)
    assert main(["encode", "--model", str(tiny_lens_dir), "--input", str(path), "--output", str(tmp_path / "o.npy")]) == 2
    err = capsys.readouterr().err
    assert f"{path} is not UTF-8 text ({where})" in err and "iconv -f latin1 -t utf-8" in err
    assert err.count("\n") == 1 and not (tmp_path / "o.npy").exists()


def test_cli_lone_surrogate_in_jsonl_names_the_line(tiny_lens_dir, tmp_path, capsys):
    path = tmp_path / "s.jsonl"
    path.write_text('{"text": "fine"}\n{"text": "bad \\ud800 text"}\n')
    assert main(["encode", "--model", str(tiny_lens_dir), "--input", str(path), "--output", str(tmp_path / "o.npy")]) == 2
    assert f"{path}:2: the text holds a lone surrogate U+D800" in capsys.readouterr().err


def test_index_build_names_a_document_with_invalid_unicode(tiny_lens_dir, tmp_path, capsys):
    path = tmp_path / "c.jsonl"
    path.write_text('{"_id": "d1", "text": "fine"}\n{"_id": "d2", "text": "bad \\udc00"}\n')
    assert main(["index", "build", "--corpus", str(path), "--output", str(tmp_path / "ix"), "--model",
                 str(tiny_lens_dir), "--dense", "none"]) == 2
    assert "document 'd2': its text holds a lone surrogate U+DC00" in capsys.readouterr().err


@pytest.fixture
def small_index(tiny_lens_dir, tmp_path):
    corpus = write_corpus(tmp_path / "c.jsonl", 8, "d", 0)
    ix = tmp_path / "ix"
    assert main(["index", "build", "--corpus", str(corpus), "--output", str(ix), "--model", str(tiny_lens_dir),
                 "--dense", "lens"]) == 0
    return ix


@pytest.mark.parametrize("argv", [["--weights", "-1,2"], ["--weights=-1,2"], ["--weights", "-.5,1"]])
def test_negative_weights_are_refused_clearly(small_index, capsys, argv):
    capsys.readouterr()
    assert main(["search", str(small_index), "cell", *argv]) == 2
    err = capsys.readouterr().err
    assert "negative weights are not supported" in err and "expected one argument" not in err


def test_search_help_documents_the_equals_form(capsys):
    assert main(["search", "--help"]) == 0
    assert "--weights=VALUE" in " ".join(capsys.readouterr().out.split())


def test_index_info_verifies_and_fails_on_damage(small_index, capsys, caplog):
    capsys.readouterr()
    assert main(["index", "info", str(small_index)]) == 0
    assert "checked: sizes and sha256" in capsys.readouterr().out
    path = small_index / "docs.sqlite"
    raw = bytearray(path.read_bytes())
    raw[100] ^= 0xFF
    path.write_bytes(bytes(raw))
    assert main(["index", "info", str(small_index)]) == 2
    captured = capsys.readouterr()
    assert f"index file {path} is damaged: sha256" in captured.err and captured.out == ""
    assert main(["index", "info", str(small_index), "--no-verify"]) == 0
    captured = capsys.readouterr()  # the summary still comes, without what the damaged table would have said
    assert "NOT checked (--no-verify)" in captured.out and "metadata fields" not in captured.out
    assert "metadata fields not read: document table" in caplog.text


def test_saving_over_a_folder_that_is_not_an_index_is_refused(tmp_path, capsys):
    folder = tmp_path / "Documents"
    folder.mkdir()
    (folder / "thesis.tex").write_text("precious")
    with pytest.raises(FileExistsError, match="is not a LENS index .*thesis.tex.*choose a new or empty directory"):
        make_index("a", 5, 0).save(folder)
    assert (folder / "thesis.tex").read_text() == "precious" and sorted(os.listdir(tmp_path)) == ["Documents"]
    assert main(["index", "build", "--corpus", "pydoc-topics", "--output", str(folder), "--model", "nowhere"]) == 2
    assert "is not a LENS index" in capsys.readouterr().err


def test_files_named_as_an_index_holds_them_do_not_make_an_index(tmp_path, capsys):
    """A plain FAISS folder's index.faiss, an app's manifest.json, a shard-00000 folder of one's own: the names an
    index uses, but a save would replace what they hold; refused, and nothing is lost."""
    import faiss

    ix = make_index("a", 5, 0)
    faiss_dir, app_dir = tmp_path / "faiss", tmp_path / "app"
    faiss_dir.mkdir(), app_dir.mkdir()
    faiss.write_index(faiss.IndexFlatL2(4), str(faiss_dir / "index.faiss"))
    (app_dir / "manifest.json").write_text('{"name": "app"}')
    for folder, why in ((faiss_dir, "it has no manifest.json"), (app_dir, "its manifest.json is not a LENS index.s")):
        before = {p.name: p.read_bytes() for p in folder.iterdir()}
        with pytest.raises(FileExistsError, match=f"is not a saved LENS index: {why}"):
            ix.save(folder)
        assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
        assert main(["index", "build", "--corpus", "pydoc-topics", "--output", str(folder), "--model",
                     "nowhere"]) == 2
        assert "is not a saved LENS index" in capsys.readouterr().err
    saved = tmp_path / "saved"
    ix.save(saved)  # a LENS index with a folder of the user's named as a shard beside its files
    (saved / "shard-00000").mkdir()
    (saved / "shard-00000" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="shard-00000 holds files LENS did not write \\(notes.txt\\)"):
        ix.save(saved)
    assert (saved / "shard-00000" / "notes.txt").read_text() == "mine"
    (saved / "shard-00000" / "notes.txt").unlink()
    (saved / "shard-00000").rmdir()
    ix.save(saved)  # the index itself is replaced as before
    manifest = json.loads((saved / "manifest.json").read_text())
    (saved / "manifest.json").write_text(json.dumps({**manifest, "format_version": 0}))
    ix.save(saved)  # and so is an index of another LENS's format version


def test_a_path_under_a_file_is_named(tiny_encoder, tmp_path, capsys):
    """An index or model path whose parent is a file: the file is named (the OS said only 'File exists')."""
    (tmp_path / "notes").write_text("mine")
    with pytest.raises(NotADirectoryError, match=r"index .*notes/ix/new: .*notes is a file, not a directory"):
        make_index("a", 5, 0).save(tmp_path / "notes" / "ix" / "new")
    with pytest.raises(NotADirectoryError, match=r"LENS model directory .*notes/model: .*notes is a file"):
        tiny_encoder.save_pretrained(tmp_path / "notes" / "model")
    assert main(["index", "build", "--corpus", "pydoc-topics", "--output", str(tmp_path / "notes" / "ix"),
                 "--model", "nowhere"]) == 2
    assert "notes is a file, not a directory; choose another path" in capsys.readouterr().err
    assert (tmp_path / "notes").read_text() == "mine"


def test_saving_a_model_over_a_foreign_folder_is_refused(tiny_encoder, tmp_path):
    folder = tmp_path / "stuff"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a LENS model directory"):
        tiny_encoder.save_pretrained(folder)
    assert (folder / "notes.txt").read_text() == "mine"


def test_damaged_chunk_is_encoded_again_on_resume(tiny_encoder, tmp_path, monkeypatch):
    import lens.indexing as indexing
    from lens.corpus import load_corpus

    docs = load_corpus(write_corpus(tmp_path / "c.jsonl", 12, "d", 0))
    enc = HybridEncoder(tiny_encoder, "none")
    real, calls = indexing.encode_chunk, []

    def crash_on_third(*args):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(indexing, "encode_chunk", crash_on_third)
    with pytest.raises(KeyboardInterrupt):
        indexing.build_index(docs, tmp_path / "ix", enc, chunk_size=4, show_progress_bar=False)
    assert not (tmp_path / ".ix.lock").exists()  # released on the interrupt
    (tmp_path / ".ix.partial" / "chunk-000000.npz").write_bytes(b"PK\x03\x04 truncated")
    calls.clear()
    monkeypatch.setattr(indexing, "encode_chunk", lambda *a: calls.append(1) or real(*a))
    index = indexing.build_index(docs, tmp_path / "ix", enc, chunk_size=4, resume=True, show_progress_bar=False)
    assert len(calls) == 2  # the damaged chunk and the missing one
    full = indexing.build_index(docs, tmp_path / "full", enc, chunk_size=4, show_progress_bar=False)
    q = tiny_encoder.encode_queries(["cancer"])
    assert index.search(q, k=12)[0].ids == full.search(q, k=12)[0].ids


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_read_only_directory_is_a_storage_error(tmp_path):
    (tmp_path / "ro").mkdir()
    os.chmod(tmp_path / "ro", 0o555)
    try:
        with pytest.raises(StorageError, match="permission denied"):
            make_index("a", 5, 0).save(tmp_path / "ro" / "ix")
    finally:
        os.chmod(tmp_path / "ro", 0o755)


def test_saved_files_get_the_usual_modes(tmp_path):
    """Files written in an atomic_dir get what a plain open() gives, even by a writer that leaves mkstemp's 0600
    (safetensors' save_file, under PEFT's save_pretrained); atomic_write_bytes keeps a replaced file's mode."""
    from safetensors.numpy import save_file

    from lens.atomic import atomic_write_bytes

    old = os.umask(0o022)
    try:
        with atomic_dir(tmp_path / "model") as tmp:
            (tmp / "adapter").mkdir()
            save_file({"w": np.zeros(2, dtype=np.float32)}, str(tmp / "adapter" / "adapter_model.safetensors"))
            (tmp / "run.sh").write_text("#!/bin/sh\n")
            os.chmod(tmp / "run.sh", 0o700)
        assert (tmp_path / "model" / "adapter" / "adapter_model.safetensors").stat().st_mode & 0o777 == 0o644
        assert (tmp_path / "model" / "run.sh").stat().st_mode & 0o777 == 0o755
        atomic_write_bytes(tmp_path / "new.json", b"{}")
        assert (tmp_path / "new.json").stat().st_mode & 0o777 == 0o644
        os.chmod(tmp_path / "new.json", 0o640)
        atomic_write_bytes(tmp_path / "new.json", b"[]")
        assert (tmp_path / "new.json").stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)
