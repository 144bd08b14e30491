"""Reliability table: every bad input and fault we tried on LENS, what it did, and whether anything was lost.

Each row runs one fault for real (a second writer, a SIGKILL between the renames of a save, a file-size limit through
``RLIMIT_FSIZE`` standing in for a full disk, Ctrl-C as SIGINT, damaged files, odd inputs) on tiny random models built
in a temporary directory, and checks two things: the user got a clear message (one line, naming the path or the input,
saying what to do), and nothing that was saved before was lost. A row that falls short says so (verdict ``SHORT``).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/reliability.py [--out benchmarks/results/reliability.md]

A few minutes on a laptop CPU. Needs Linux (``fcntl``, ``RLIMIT_FSIZE``, ``/proc``-free but POSIX signals).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
from _common import REPO as ROOT, machine

# the fault programs, tiny models and corpora that tests/test_reliability.py uses too
from lens import testing as fixtures
from lens.testing import DISK_FULL_SAVE, HOLD_LOCK, KILL_BETWEEN_RENAMES, MAKE_INDEX, SAVE_LOOP, SLOW_BUILD, make_index
from lens.cli_args import Parser

WORDS = ("the a of and to in is was for on with as by at from that this it be are or an which review study cell cells "
         "protein gene genes cancer patients results data model method effect analysis high low increase show found "
         "using new two one between after we our human mouse blood brain risk treatment clinical trial disease drug "
         "dose response expression level").split()
LIMIT = 100_000  # bytes: the file-size limit that plays a full disk


# ---------------------------------------------------------------------------------------------- set-up
def tiny_backbone(directory: Path, seed: int) -> Path:
    """A tiny random Llama and a word-level tokenizer of this script's words, saved like a user's local HF model."""
    return fixtures.save_tiny_backbone(directory, seed, words=WORDS)


def write_corpus(path: Path, n: int, prefix: str = "d", seed: int = 0) -> Path:
    """A corpus in this script's vocabulary (the tiny backbone's): 3 to 11 words a document."""
    return fixtures.write_corpus(path, n, prefix, seed, words=WORDS, lengths=(3, 12))


@dataclass
class Run:
    rc: int
    out: str
    err: str
    seconds: float

    @property
    def line(self) -> str:
        """The line the user reads: the CLI's error line, else the last line of stderr."""
        lines = [ln for ln in self.err.splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("lens ") or ln.startswith("WARNING")]
        return (errors or lines or [""])[-1]


def _env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _limit(nbytes: int | None):
    if nbytes is None:
        return None

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit write() fails with EFBIG instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))

    return apply


def lens(*args: str, limit: int | None = None, timeout: float = 300) -> Run:
    """``lens ARGS`` in a fresh process (optionally under a file-size limit)."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "lens.cli", *map(str, args)], cwd=ROOT, env=_env(), capture_output=True,
                       text=True, timeout=timeout, preexec_fn=_limit(limit))
    return Run(p.returncode, p.stdout, p.stderr, time.perf_counter() - t0)


def python(code: str, *args: str, limit: int | None = None, timeout: float = 300) -> Run:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code, *map(str, args)], cwd=ROOT, env=_env(), capture_output=True,
                       text=True, timeout=timeout, preexec_fn=_limit(limit))
    return Run(p.returncode, p.stdout, p.stderr, time.perf_counter() - t0)


def _default_sigint() -> None:
    # a shell starts background jobs with SIGINT ignored, and children inherit that: restore the default so the
    # Ctrl-C rows test LENS, not how this script was launched
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def popen(argv: list[str], **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *argv], cwd=ROOT, env=_env(), text=True, preexec_fn=_default_sigint,
                            **kw)


def in_process(*args: str) -> Run:
    """``lens ARGS`` through ``lens.cli.main`` in this process (no model start-up cost per row)."""
    from lens.cli import main

    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in args])
    return Run(rc, out.getvalue(), err.getvalue(), time.perf_counter() - t0)


def wait_until(cond: Callable[[], bool], proc: subprocess.Popen | None = None, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process ended early with {proc.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError("timed out")
        time.sleep(0.05)


def same_results(a, b) -> bool:
    """Identical top-10 ids and scores for a few random queries (an index is whole and has the right vectors)."""
    rng = np.random.default_rng(3)
    q_lex = np.abs(rng.standard_normal((4, a.lexicon_dim))).astype(np.float32)
    q_den = rng.standard_normal((4, a.dense_dim)).astype(np.float32) if a.dense_dim else None
    ra, rb = a.search(q_lex, q_den, k=10), b.search(q_lex, q_den, k=10)
    return len(a) == len(b) and all(x.ids == y.ids and np.allclose(x.scores, y.scores, atol=1e-6) for x, y in zip(ra, rb))


def listing(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


# ---------------------------------------------------------------------------------------------- rows
@dataclass
class Row:
    group: str
    fault: str
    happened: str = ""
    kept: str = ""
    problems: list[str] = field(default_factory=list)
    skipped: str = ""  # why the fault could not be tried on this machine

    def need(self, cond: bool, why: str) -> None:
        if not cond:
            self.problems.append(why)

    @property
    def verdict(self) -> str:
        if self.skipped:
            return f"not tried: {self.skipped}"
        return "ok" if not self.problems else "SHORT: " + "; ".join(self.problems)


SCENARIOS: list[tuple[str, str, Callable]] = []


def scenario(group: str, fault: str):
    def register(fn):
        SCENARIOS.append((group, fault, fn))
        return fn

    return register


def one_line(run: Run, row: Row, *must: str) -> None:
    """The error is one line (no traceback) that holds each of ``must``."""
    row.happened = f"exit {run.rc} after {run.seconds:.1f} s: `{run.line[:700]}`"
    row.need("Traceback" not in run.err, "a traceback was printed")
    for text in must:
        row.need(text in run.line, f"message lacks {text!r}")


class Env:
    """The shared fixtures: tiny models and corpora in one temporary directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.backbone = tiny_backbone(root / "backbone", 0)
        self.other_backbone = tiny_backbone(root / "backbone-other", 7)
        self.model = root / "model-k16"
        run = lens("cluster-vocab", "--model", self.backbone, "--clusters", 16, "--out", self.model)
        if run.rc:
            raise RuntimeError(run.err)
        self.corpus = write_corpus(root / "corpus.jsonl", 40)
        self.index = root / "index"
        run = in_process("index", "build", "--corpus", self.corpus, "--output", self.index, "--model", self.model,
                         "--dense", "lens")
        if run.rc:
            raise RuntimeError(run.err)

    def fresh(self, name: str) -> Path:
        d = self.root / name
        d.mkdir()
        return d

    def encoder(self, dense: str = "none"):
        from lens.encoder import LensEncoder
        from lens.hybrid import HybridEncoder

        if not hasattr(self, "_lens"):
            self._lens = LensEncoder.from_pretrained(self.model)
        return HybridEncoder(self._lens, dense) if dense else self._lens


# ---- concurrent writers ----------------------------------------------------------------------------------------
@scenario("concurrency", "two `lens index build` runs to one `--output`, different corpora")
def two_builds(env: Env, row: Row) -> None:
    d = env.fresh("two-builds")
    a, b = write_corpus(d / "a.jsonl", 30, "a", 1), write_corpus(d / "b.jsonl", 25, "b", 2)
    ix, started, go = d / "ix", d / "started", d / "go"
    common = ["index", "build", "--output", str(ix), "--model", str(env.model), "--dense", "none", "--chunk-size", "8"]
    first = popen(["-c", SLOW_BUILD, str(started), str(go), *common, "--corpus", str(a)], stdout=subprocess.PIPE,
                  stderr=subprocess.PIPE)
    try:
        wait_until(started.exists, first)
        second = lens(*common, "--corpus", b)
    finally:
        go.touch()
        _, err = first.communicate(timeout=300)
    one_line(second, row, "another process is writing index", f"(pid {first.pid})")
    row.happened = f"2nd {row.happened}; 1st: exit {first.returncode}"
    row.need(second.rc == 2 and first.returncode == 0, "exit codes")
    from index import HybridIndex
    from lens.corpus import load_corpus
    from lens.indexing import build_index

    built = HybridIndex.load(ix)
    clean = build_index(load_corpus(a), d / "clean", env.encoder("none"), chunk_size=8, show_progress_bar=False)
    intact = same_results(built, clean) and "b0" not in built
    row.need(intact, "the first build's index differs from a clean build")
    row.kept = f"1st index whole: {len(built)}/30 documents, same results as a clean build: {intact}"


@scenario("concurrency", "`lens cluster-vocab --out M` while another process writes M")
def two_model_writers(env: Env, row: Row) -> None:
    d = env.fresh("two-models")
    out, ready = d / "m", d / "ready"
    holder = popen(["-c", HOLD_LOCK, str(out), "model directory", str(ready)], stdin=subprocess.PIPE)
    try:
        wait_until(ready.exists, holder)
        run = lens("cluster-vocab", "--model", env.backbone, "--clusters", 8, "--out", out)
    finally:
        holder.communicate("", timeout=60)
    one_line(run, row, "another process is writing model directory", f"(pid {holder.pid})")
    row.need(run.rc == 2 and run.seconds < 30, "did not fail at once")
    row.kept = "the other writer's directory untouched (the refused run wrote nothing)"
    row.need(not out.exists(), "something was written")


@scenario("concurrency", "loads racing a process that saves the same index in a loop (5 s)")
def save_load_race(env: Env, row: Row) -> None:
    from index import HybridIndex

    d = env.fresh("race")
    target = d / "ix"
    expected = {300: make_index("a", 300, 0), 200: make_index("b", 200, 1)}
    saver = popen(["-c", SAVE_LOOP, str(target), "5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    saver.stdout.readline()
    loads, errors, wrong = 0, {}, 0
    while saver.poll() is None:
        try:
            got = HybridIndex.load(target)
            loads += 1
            wrong += not same_results(got, expected.get(len(got), expected[300]))
        except Exception as e:  # noqa: BLE001 - counted and reported
            key = f"{type(e).__name__}: {str(e)[:80]}"
            errors[key] = errors.get(key, 0) + 1
    out, _ = saver.communicate()
    saves = int(out.split()[-1])
    row.happened = f"{loads} loads during {saves} saves: {sum(errors.values())} errors, {wrong} mixed versions"
    row.need(not errors and not wrong, f"errors: {errors}")
    row.need(loads > 20 and saves > 20, "too few iterations to mean anything")
    row.kept = f"every load was one whole version; leftovers after: {listing(d)}"
    row.need(listing(d) == ["ix"], "leftovers")


# ---- interrupted saves ----------------------------------------------------------------------------------------
@scenario("interrupted saves", "SIGKILL between the two renames of an index save, then `lens index info`")
def kill_between_renames(env: Env, row: Row) -> None:
    from index import HybridIndex

    d = env.fresh("kill-swap")
    target = d / "ix"
    killed = python(KILL_BETWEEN_RENAMES, target)
    row.need(killed.rc == -signal.SIGKILL, "the save was not killed")
    before = listing(d)
    info = lens("index", "info", target)
    row.happened = f"left {before}; `lens index info`: exit {info.rc}, `{info.line[:500]}`"
    row.need(info.rc == 0 and "restored index" in info.err, "not restored or not said")
    got = HybridIndex.load(target)
    row.need(same_results(got, make_index("b", 200, 1)) and listing(d) == ["ix"], "wrong version or leftovers")
    row.kept = f"the finished new version (200 docs) in place, nothing left beside it: {listing(d)}"


KILL_MODEL_SWAP = """
import os, signal, sys
import lens.atomic.writes
from lens.encoder import LensEncoder
enc = LensEncoder.from_pretrained(sys.argv[1])
enc.save_pretrained(sys.argv[2])
lens.atomic.writes.between_renames_hook = lambda old, new: os.kill(os.getpid(), signal.SIGKILL)
enc.save_pretrained(sys.argv[2])
"""


@scenario("interrupted saves", "SIGKILL between the two renames of `save_pretrained`, then `lens encode` with it")
def kill_model_swap(env: Env, row: Row) -> None:
    d = env.fresh("kill-model")
    target = d / "m"
    killed = python(KILL_MODEL_SWAP, env.model, target)
    row.need(killed.rc == -signal.SIGKILL, "the save was not killed")
    (d / "t.txt").write_text("cell gene\n")
    run = lens("encode", "--model", target, "--input", d / "t.txt", "--output", d / "v.npy")
    row.happened = f"`lens encode`: exit {run.rc}, `{run.line[:500]}`"
    row.need(run.rc == 0 and "restored model directory" in run.err, "not restored or not said")
    row.need(listing(d) == ["m", "t.txt", "v.npy"], f"leftovers {listing(d)}")
    row.kept = "model directory restored; encoding works"


KILL_BODY = MAKE_INDEX + """
import os, signal, sys
import index.faiss_ops
make("a", 300, 0).save(sys.argv[1])
def half(index, path):
    open(path, "wb").write(b"\\0" * 1000)
    os.kill(os.getpid(), signal.SIGKILL)
index.faiss_ops.write_faiss = half
make("b", 200, 1).save(sys.argv[1])
"""


@scenario("interrupted saves", "SIGKILL while a save writes index.faiss; then a load, then another save")
def kill_in_body(env: Env, row: Row) -> None:
    from index import HybridIndex

    d = env.fresh("kill-body")
    target = d / "ix"
    python(KILL_BODY, target)
    left = listing(d)
    loaded = HybridIndex.load(target)
    row.need(same_results(loaded, make_index("a", 300, 0)), "the previous version was not intact")
    make_index("c", 50, 2).save(target)
    row.happened = f"left {left}; load gave the previous version; next save removed the stale folder (warning logged)"
    row.need(listing(d) == ["ix"], f"stale folder not removed: {listing(d)}")
    row.kept = "previous version intact until the next save replaced it"


# ---- full disks -----------------------------------------------------------------------------------------------
@scenario("full disk", f"`lens encode` with a {LIMIT // 1000} kB file-size limit (EFBIG, like ENOSPC); then "
                      "`--resume`")
def disk_full_encode(env: Env, row: Row) -> None:
    d = env.fresh("full-encode")
    (d / "t.txt").write_text("\n".join(f"cell gene {i}" for i in range(3000)) + "\n")
    out = d / "out" / "v.npy"
    run = lens("encode", "--model", env.model, "--input", d / "t.txt", "--output", out, limit=LIMIT)
    one_line(run, row, f"cannot write {out}: file too large", "1024 of 3000 texts are encoded and kept", "--resume")
    row.need(run.rc == 2, "exit code")
    kept = listing(d / "out")
    row.need(kept == [".v.npy.partial"], "no output, only the work kept for a resume")
    again = lens("encode", "--model", env.model, "--input", d / "t.txt", "--output", out, "--resume")
    whole = again.rc == 0 and np.load(out).shape == (3000, 16)
    row.kept = (f"no output; out/ holds {kept} (the chunk written, kept); `--resume` without the limit: exit "
                f"{again.rc}, {'the whole 3000-row matrix' if whole else 'no whole matrix'}, out/ then holds "
                f"{listing(d / 'out')}")
    row.need(whole and listing(d / "out") == ["v.npy"], "resume did not finish the export")


@scenario("full disk", f"`lens index build` whose final save hits a {LIMIT // 1000} kB limit; then `--resume`")
def disk_full_build(env: Env, row: Row) -> None:
    import lens.indexing as indexing

    d = env.fresh("full-build")
    corpus = write_corpus(d / "c.jsonl", 1000, "d", 5)
    args = ["index", "build", "--corpus", corpus, "--output", d / "ix", "--model", env.model, "--dense", "lens",
            "--chunk-size", "100"]
    run = lens(*args, limit=LIMIT)
    one_line(run, row, "file too large", "encoded chunks are kept", "--resume")
    row.need(run.rc == 2, "exit code")
    calls = []
    real = indexing.encode_chunk
    indexing.encode_chunk = lambda *a: calls.append(1) or real(*a)
    try:
        resumed = in_process(*args, "--resume")
    finally:
        indexing.encode_chunk = real
    row.need(resumed.rc == 0 and not calls, "resume failed or encoded again")
    row.kept = (f"10 chunks kept; `--resume` (no limit) finished with {len(calls)} chunks re-encoded; "
                f"then {listing(d)}")


@scenario("full disk", "`HybridIndex.save` over an existing index with a file-size limit")
def disk_full_save(env: Env, row: Row) -> None:
    from index import HybridIndex

    d = env.fresh("full-save")
    run = python(DISK_FULL_SAVE, d / "ix", LIMIT)
    kind, _, message = run.out.strip().partition("\n")  # "<type> <errno>", then the message
    row.happened = f"`{(kind.partition(' ')[0] + ': ' + message)[:700]}`"
    row.need(kind.startswith("StorageError ") and message.startswith("cannot write")
             and "nothing was changed" in message, "message")
    row.need(same_results(HybridIndex.load(d / "ix"), make_index("a", 20, 0)) and listing(d) == ["ix"], "lost")
    row.kept = f"previous index intact and loads; {listing(d)}"


@scenario("full disk", "`lens cluster-vocab` with a 1 kB file-size limit")
def disk_full_cluster(env: Env, row: Row) -> None:
    d = env.fresh("full-cluster")
    run = lens("cluster-vocab", "--model", env.backbone, "--clusters", 8, "--out", d / "m", limit=1000)
    one_line(run, row, f"cannot write {(d / 'm').resolve()}", "file too large")
    row.need(run.rc == 2, "exit code")
    row.kept = f"nothing partial: {listing(d)}"
    row.need(listing(d) == [], "partial files")


@scenario("full disk", "`lens merge` (the backbone written by safetensors' Rust code) with a 30 kB file-size limit")
def disk_full_merge(env: Env, row: Row) -> None:
    d = env.fresh("full-merge")
    _adapter_model(env, d / "trained")
    run = lens("merge", d / "trained", "--out", d / "merged", limit=30_000)
    one_line(run, row, f"cannot write {(d / 'merged').resolve()}", "file too large")
    row.need(run.rc == 2, "exit code")
    row.kept = f"nothing partial: {listing(d)}"
    row.need(listing(d) == ["trained"], "partial files")


@scenario("full disk", "permission denied / read-only file system")
def permission(env: Env, row: Row) -> None:
    if os.geteuid() == 0:
        row.skipped = "this run is root, which ignores file permissions"
        row.happened = ("- (tests/test_reliability.py checks it when not root; EACCES/EROFS take the same "
                        "StorageError path as the full disk, with 'permission denied' / 'read-only file system')")
        row.kept = "-"
        return
    d = env.fresh("read-only")
    os.chmod(d, 0o555)
    try:
        run = lens("index", "build", "--corpus", env.corpus, "--output", d / "ix", "--model", env.model,
                   "--dense", "none")
    finally:
        os.chmod(d, 0o755)
    one_line(run, row, "permission denied")
    row.kept = "nothing written"


# ---- Ctrl-C ---------------------------------------------------------------------------------------------------
@scenario("Ctrl-C", "SIGINT during `lens encode`")
def sigint_encode(env: Env, row: Row) -> None:
    d = env.fresh("int-encode")
    (d / "t.txt").write_text("\n".join("cell gene drug dose brain risk " * (1 + i % 5) for i in range(60000)) + "\n")
    log = open(d / "stderr.txt", "w+")
    p = popen(["-m", "lens.cli", "encode", "--model", str(env.model), "--input", str(d / "t.txt"), "--output",
               str(d / "out" / "v.npy")], stderr=log, stdout=subprocess.DEVNULL)
    wait_until(lambda: "encode:" in (d / "stderr.txt").read_text(), p)
    time.sleep(2)
    p.send_signal(signal.SIGINT)
    p.wait(60)
    log.close()
    run = Run(p.returncode, "", (d / "stderr.txt").read_text(), 0)
    row.happened = f"exit {p.returncode}: `{run.line}`"
    row.need(p.returncode == 130 and "interrupted" in run.line and "Traceback" not in run.err, "not a clean stop")
    out = listing(d / "out") if (d / "out").exists() else []
    said = "texts are encoded and kept" in run.err and "--resume" in run.err
    row.kept = (f"no output; out/ holds {out or 'nothing'}"
                + (" (the chunks written, kept for `--resume`, as the warning says)" if said else ""))
    row.need("v.npy" not in out and (out == [] or (out == [".v.npy.partial"] and said)), "partial output")


def _interrupted_build(env: Env, row: Row, sig: int, name: str) -> None:
    from index import HybridIndex
    from lens.corpus import load_corpus
    from lens.indexing import build_index

    d = env.fresh(name)
    corpus = write_corpus(d / "c.jsonl", 3000, "d", 9)
    args = ["index", "build", "--corpus", str(corpus), "--output", str(d / "ix"), "--model", str(env.model),
            "--dense", "none", "--chunk-size", "50"]
    p = popen(["-m", "lens.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    partial = d / ".ix.partial"
    wait_until(lambda: partial.is_dir() and len(list(partial.glob("chunk-*.npz"))) >= 3, p)
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    kept = len(list(partial.glob("chunk-*.npz")))
    run = Run(p.returncode, "", err, 0)
    resumed = lens(*args, "--resume")
    clean = build_index(load_corpus(corpus), d / "clean", env.encoder("none"), chunk_size=50, show_progress_bar=False)
    whole = resumed.rc == 0 and same_results(HybridIndex.load(d / "ix"), clean)
    if sig == signal.SIGINT:
        row.happened = f"exit {p.returncode}: `{run.line[:500]}`"
        row.need(p.returncode == 130 and "--resume" in run.line and "Traceback" not in err, "message")
    else:
        row.happened = f"killed (exit {p.returncode}, no message possible); `--resume` after it: exit {resumed.rc}"
    row.need(whole, "resume did not give the same index as a clean build")
    row.kept = f"{kept} chunks kept; `--resume` finished, same results as a clean build: {whole}"


@scenario("Ctrl-C", "SIGINT during `lens index build` (3000 documents), then `--resume`")
def sigint_build(env: Env, row: Row) -> None:
    _interrupted_build(env, row, signal.SIGINT, "int-build")


@scenario("Ctrl-C", "SIGKILL during `lens index build`, then `--resume` (the lock must not outlive the process)")
def sigkill_build(env: Env, row: Row) -> None:
    _interrupted_build(env, row, signal.SIGKILL, "kill-build")


# ---- odd inputs -----------------------------------------------------------------------------------------------
def _api_error(row: Row, call: Callable, *must: str) -> None:
    try:
        call()
    except (TypeError, ValueError) as e:
        row.happened = f"{type(e).__name__}: `{e}`"
        for text in must:
            row.need(text in str(e), f"message lacks {text!r}")
    else:
        row.happened = "accepted silently"
        row.need(False, "no error")
    row.kept = "-"


@scenario("inputs", "`LensEncoder.encode({'a': 'text'})` (a dict)")
def api_dict(env: Env, row: Row) -> None:
    _api_error(row, lambda: env.encoder(None).encode({"a": "cell gene"}), "pass a list")


@scenario("inputs", "`LensEncoder.encode({'x', 'y'})` (a set) and `HybridEncoder.encode_queries(set)`")
def api_set(env: Env, row: Row) -> None:
    _api_error(row, lambda: env.encoder(None).encode({"cell", "gene"}), "no order")
    try:
        env.encoder("lens").encode_queries({"cell"})
        row.need(False, "HybridEncoder accepted a set")
    except TypeError:
        pass


@scenario("inputs", "a text with a lone surrogate (`'gene \\ud800'`)")
def api_surrogate(env: Env, row: Row) -> None:
    _api_error(row, lambda: env.encoder(None).encode(["cell", "gene \ud800"]), "texts[1]", "lone surrogate")


@scenario("inputs", "`lens encode --output DIR` (an existing directory)")
def output_dir(env: Env, row: Row) -> None:
    d = env.fresh("out-dir")
    (d / "t.txt").write_text("cell\n" * 50000)
    run = in_process("encode", "--model", env.model, "--input", d / "t.txt", "--output", d)
    one_line(run, row, "is a directory; give a file name")
    row.need(run.rc == 2 and run.seconds < 2, "not at once")
    row.kept = "nothing encoded or written"


@scenario("inputs", "a Latin-1 `.txt` given to `lens encode`")
def latin1_txt(env: Env, row: Row) -> None:
    d = env.fresh("latin1")
    (d / "t.txt").write_bytes("ok\ncaf\u00e9 au lait\n".encode("latin-1"))
    run = in_process("encode", "--model", env.model, "--input", d / "t.txt", "--output", d / "v.npy")
    one_line(run, row, str(d / "t.txt"), "line 2", "iconv -f latin1 -t utf-8")
    row.kept = "-"


@scenario("inputs", "a Latin-1 corpus JSONL given to `lens index build`")
def latin1_corpus(env: Env, row: Row) -> None:
    d = env.fresh("latin1-corpus")
    (d / "c.jsonl").write_bytes(b'{"_id": "1", "text": "ok"}\n' + '{"_id": "2", "text": "na\u00efve"}\n'.encode("latin-1"))
    run = in_process("index", "build", "--corpus", d / "c.jsonl", "--output", d / "ix", "--model", env.model,
                     "--dense", "none")
    one_line(run, row, "not UTF-8", "line 2", "iconv")
    row.kept = "-"


@scenario("inputs", "a JSONL text with an unpaired `\\ud800` escape given to `lens encode`")
def surrogate_jsonl(env: Env, row: Row) -> None:
    d = env.fresh("surrogate")
    (d / "t.jsonl").write_text('{"text": "fine"}\n{"text": "bad \\ud800 text"}\n')
    run = in_process("encode", "--model", env.model, "--input", d / "t.jsonl", "--output", d / "v.npy")
    one_line(run, row, "t.jsonl:2", "lone surrogate")
    row.kept = "-"


@scenario("inputs", "a corpus record with a lone surrogate given to `lens index build`")
def surrogate_corpus(env: Env, row: Row) -> None:
    d = env.fresh("surrogate-corpus")
    (d / "c.jsonl").write_text('{"_id": "x1", "text": "fine"}\n{"_id": "x2", "text": "bad \\udc80"}\n')
    run = in_process("index", "build", "--corpus", d / "c.jsonl", "--output", d / "ix", "--model", env.model,
                     "--dense", "none")
    one_line(run, row, "document 'x2'", "lone surrogate")
    row.kept = "-"


@scenario("inputs", "`lens search --weights -1,2` and `--weights=-1,2`")
def negative_weights(env: Env, row: Row) -> None:
    a = in_process("search", env.index, "cell", "--weights", "-1,2")
    b = in_process("search", env.index, "cell", "--weights=-1,2")
    one_line(a, row, "negative weights are not supported")
    row.need(b.rc == 2 and "negative weights are not supported" in b.line, "the = form")
    row.kept = "-"


@scenario("inputs", "a huge text (one 6 MB line, 1M words) given to `lens encode`")
def huge_text(env: Env, row: Row) -> None:
    d = env.fresh("huge")
    (d / "t.txt").write_text("cell gene drug dose brain " * 200_000 + "\nshort text\n")
    run = lens("encode", "--model", env.model, "--input", d / "t.txt", "--output", d / "v.npy")
    row.happened = f"exit {run.rc} after {run.seconds:.1f} s: `{run.line[:200]}`"
    row.need(run.rc == 0 and "truncated" in run.err, "no truncation warning")
    row.kept = "vectors written; the long text truncated to max_seq_length with one warning"


def _train(env: Env, data: Path, out: Path, timeout: float) -> tuple[str, bool]:
    """(what `lens train --steps 1` did, whether it finished) on a training file."""
    try:
        run = lens("train", "--data", data, "--model", env.model, "--steps", 1, "--lora-layers", 1, "--batch-size", 2,
                   "--out", out, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"still running after {timeout:.0f} s (stopped)", False
    return f"exit {run.rc} after {run.seconds:.0f} s" + (f": `{run.line[:160]}`" if run.rc else ""), run.rc == 0


@scenario("inputs", "a training JSONL with one huge line (a 2.4 MB positive): `lens data stats`, `lens train --steps 1`")
def huge_training_line(env: Env, row: Row) -> None:
    d = env.fresh("huge-train")
    with open(d / "train.jsonl", "w") as f:
        for i in range(8):
            pos = f"cancer drug {i} " * (200_000 if i == 3 else 2)
            f.write(json.dumps({"query": f"cell gene {i}", "positive": pos, "negatives": ["brain risk"]}) + "\n")
    stats = lens("data", "stats", d / "train.jsonl")
    trained, ok = _train(env, d / "train.jsonl", d / "t", 180)
    row.happened = f"`lens data stats`: exit {stats.rc} in {stats.seconds:.1f} s; `lens train`: {trained}"
    row.need(stats.rc == 0 and ok, "stats or training failed")
    row.kept = "the example is truncated to the training max length like any long text"


@scenario("inputs", "a training JSONL whose 8 examples all share one query: `lens train --steps 1`")
def one_query_training(env: Env, row: Row) -> None:
    d = env.fresh("one-query")
    with open(d / "train.jsonl", "w") as f:
        for i in range(8):
            f.write(json.dumps({"query": "cell gene", "positive": f"cancer drug {i}", "negatives": ["brain risk"]})
                    + "\n")
    try:
        run = lens("train", "--data", d / "train.jsonl", "--model", env.model, "--steps", 1, "--lora-layers", 1,
                   "--batch-size", 2, "--out", d / "t", timeout=60)
    except subprocess.TimeoutExpired:
        row.happened = "`lens train`: still running after 60 s (stopped)"
        row.need(False, "hangs")
        return
    row.happened = f"`lens train`: exit {run.rc} after {run.seconds:.0f} s: `{run.line[:300]}`"
    row.need(run.rc == 2 and "share their query" in run.line and "Traceback" not in run.err, "no clear error")
    row.kept = "nothing written" if not (d / "t" / "adapter").exists() else "a model was written"


# ---- damaged files ---------------------------------------------------------------------------------------------
def _copy(env: Env, source: Path, name: str, as_: str) -> Path:
    """A copy of ``source`` (the shared index or model) at ``<fresh folder NAME>/AS_``, to damage."""
    d = env.fresh(name)
    shutil.copytree(source, d / as_)
    return d / as_


@scenario("damaged files", "`lens index info` on an index whose docs.sqlite has one flipped byte")
def info_damaged(env: Env, row: Row) -> None:
    ix = _copy(env, env.index, "info-damaged", "ix")
    raw = bytearray((ix / "docs.sqlite").read_bytes())
    raw[100] ^= 0xFF
    (ix / "docs.sqlite").write_bytes(bytes(raw))
    run = in_process("index", "info", ix)
    one_line(run, row, "docs.sqlite is damaged: sha256", "rebuild")
    row.need(run.rc == 2 and not run.out, "exit code / printed a summary")
    quick = in_process("index", "info", ix, "--no-verify")
    row.need(quick.rc == 0 and "NOT checked" in quick.out, "--no-verify")
    row.kept = "the file is only read; `--no-verify` prints the summary and says it did not check"


@scenario("damaged files", "`lens search` on an index whose index.faiss was truncated")
def truncated_faiss(env: Env, row: Row) -> None:
    ix = _copy(env, env.index, "truncated", "ix")
    data = (ix / "index.faiss").read_bytes()
    (ix / "index.faiss").write_bytes(data[: len(data) // 2])
    run = in_process("search", ix, "cell gene")
    one_line(run, row, "index.faiss is damaged", "manifest says")
    row.kept = "-"


@scenario("damaged files", "a model directory whose clusters.safetensors is garbage")
def corrupt_clusters(env: Env, row: Row) -> None:
    m = _copy(env, env.model, "bad-clusters", "m")
    (m / "clusters.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    (m.parent / "t.txt").write_text("cell\n")
    run = in_process("encode", "--model", m, "--input", m.parent / "t.txt", "--output", m.parent / "v.npy")
    one_line(run, row, "clusters.safetensors cannot be read", "re-create")
    row.kept = "-"


def _adapter_model(env: Env, target: Path) -> None:
    from peft import LoraConfig, get_peft_model

    from lens.config import LensConfig
    from lens.encoder import LensEncoder
    from lens.model_dir import write_model_dir

    enc = LensEncoder.from_pretrained(env.model)
    peft = get_peft_model(enc.model.decoder, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    config = LensConfig.from_dict(enc.config.to_dict())
    config.adapter = "adapter"
    write_model_dir(target, config, enc.assignment, enc.model.head.weight.detach().float().numpy(), enc.tokenizer,
                    adapter=lambda dest: peft.save_pretrained(dest))


@scenario("damaged files", "a trained model directory whose adapter weights are garbage")
def corrupt_adapter(env: Env, row: Row) -> None:
    d = env.fresh("bad-adapter")
    _adapter_model(env, d / "m")
    (d / "t.txt").write_text("cell\n")
    good = in_process("encode", "--model", d / "m", "--input", d / "t.txt", "--output", d / "v.npy")
    row.need(good.rc == 0, f"the intact adapter did not load: {good.line}")
    (d / "m" / "adapter" / "adapter_model.safetensors").write_bytes(b"garbage" * 10)
    run = in_process("encode", "--model", d / "m", "--input", d / "t.txt", "--output", d / "v2.npy")
    one_line(run, row, "LoRA adapter in", "cannot be loaded")
    row.kept = "-"


@scenario("damaged files", "a model directory pointed at another backbone (same shapes, other weights)")
def other_backbone(env: Env, row: Row) -> None:
    m = _copy(env, env.model, "other-backbone", "m")
    config = json.loads((m / "config.json").read_text())
    config["backbone"] = str(env.other_backbone)
    (m / "config.json").write_text(json.dumps(config))
    (m.parent / "t.txt").write_text("cell\n")
    run = in_process("encode", "--model", m, "--input", m.parent / "t.txt", "--output", m.parent / "v.npy")
    one_line(run, row, "not the one these clusters were made from")
    row.kept = "-"


@scenario("damaged files", "`lens search --model M2` on an index built with another clustering M1")
def other_model_search(env: Env, row: Row) -> None:
    d = env.fresh("other-model")
    m2 = d / "m2"
    lens("cluster-vocab", "--model", env.backbone, "--clusters", 16, "--seed", 5, "--out", m2)
    run = in_process("search", env.index, "cell", "--model", m2)
    one_line(run, row, "built with different encoders", "lens_clusters")
    row.kept = "-"


@scenario("inputs", "`lens index build --output` / `cluster-vocab --out` naming a folder of the user's files")
def foreign_output(env: Env, row: Row) -> None:
    d = env.fresh("foreign")
    (d / "Documents").mkdir()
    (d / "Documents" / "thesis.tex").write_text("precious")
    a = in_process("index", "build", "--corpus", env.corpus, "--output", d / "Documents", "--model", env.model)
    b = in_process("cluster-vocab", "--model", env.backbone, "--clusters", 8, "--out", d / "Documents")
    one_line(a, row, "is not a LENS index", "choose a new or empty directory")
    row.need(b.rc == 2 and "not a LENS model directory" in b.line, "cluster-vocab")
    row.happened += f"; cluster-vocab: `{b.line[:300]}`"
    row.need((d / "Documents" / "thesis.tex").read_text() == "precious" and listing(d) == ["Documents"], "lost")
    row.kept = "the folder untouched"


# ---------------------------------------------------------------------------------------------- report
def markdown(rows: list[Row], seconds: float, command: str) -> str:
    short = [r for r in rows if r.problems and not r.skipped]
    skipped = [r for r in rows if r.skipped]
    m = machine()
    lines = [
        "# Reliability: bad inputs and faults",
        "",
        f"- Command: `{command}` ({seconds / 60:.1f} min)",
        f"- Date: {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')}",
        f"- Machine: {m['cores']} CPUs, Python {m['python']}, {m['system']} {m['release']}; euid {os.geteuid()}",
        "- Models: tiny random Llama backbones (2 layers, hidden 32) clustered to k=16, built in a temporary "
        "directory; a full disk is played by `RLIMIT_FSIZE` with SIGXFSZ ignored (writes fail with EFBIG, which LENS "
        "treats like ENOSPC).",
        f"- Result: {len(rows) - len(short) - len(skipped)} of {len(rows)} rows give a clear message and lose nothing"
        + (f"; {len(short)} {'falls' if len(short) == 1 else 'fall'} short (verdict SHORT)" if short else "")
        + (f"; {len(skipped)} could not be tried here" if skipped else "") + ".",
        "",
        "| group | fault | what happened | what was kept | verdict |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [r.group, r.fault, r.happened, r.kept, r.verdict]
        lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    lines += [
        "",
        "How to read it: *what happened* is the exit code and the line the user reads (stderr), or the exception; "
        "*what was kept* is checked by the script (the previous index loads with the same search results, a resumed "
        "build equals a clean one, no temporary or partial file remains).",
        "",
        "Not tried here (and why):",
        "",
        "- Windows: there is no `fcntl`, so every writer stops with a one-line `StorageError` that says to use Linux, "
        "macOS or WSL (no lock means no safe concurrent writes).",
        "- Network file systems: `flock` across NFS clients depends on the client and server; locks were only "
        "tried on a local file system.",
        "- Power loss: data files, the manifest and the parent directory after a swap are fsync'd, but the merged "
        "backbone that transformers' `save_pretrained` writes is not; a power cut cannot be simulated here.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "reliability.md")
    p.add_argument("--only", default=None, help="run the rows whose function name contains this")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="lens-reliability-") as tmp:
        env = Env(Path(tmp))
        for group, fault, fn in SCENARIOS:
            if args.only and args.only not in fn.__name__:
                continue
            row = Row(group, fault)
            start = time.perf_counter()
            try:
                fn(env, row)
            except Exception as e:  # noqa: BLE001 - the table reports it
                row.happened = row.happened or f"the script itself failed: {type(e).__name__}: {e}"
                row.problems.append(f"{type(e).__name__}: {e}")
                traceback.print_exc()
            print(f"[{time.perf_counter() - start:5.1f} s] {row.verdict[:70]:70s} {fault}", flush=True)
            rows.append(row)
    command = "OMP_NUM_THREADS=1 .venv/bin/python benchmarks/reliability.py" + (f" --only {args.only}" if args.only else "")
    from lens.atomic import atomic_write_bytes

    atomic_write_bytes(args.out, markdown(rows, time.perf_counter() - t0, command).encode("utf-8"))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
