"""Atomic writes, the writer lock and crash recovery: a saved artefact is either the old one or the new one.

Every writer of a file or directory in ``lens`` and ``index`` goes through this module.

A directory ``NAME`` is written (``atomic_dir``) under ``DirectoryLock`` (``fcntl.flock`` on ``.NAME.lock``
beside it, which the kernel releases when its process ends), so a second writer fails at once, in three steps:

1. the new version is written into ``.NAME.tmp-S`` (``S``: a random suffix) and flushed to disk;
2. ``NAME`` is renamed to ``.NAME.old-S``, then ``.NAME.tmp-S`` to ``NAME``;
3. ``.NAME.old-S`` is removed.

Readers only ever see a complete version: ``open_generation`` opens every file through one handle on the
directory, so a swap between two opens cannot mix versions. A process killed between the renames of step 2 leaves
no ``NAME``, a complete ``.NAME.tmp-S`` and ``.NAME.old-S``; ``recover`` (run by the next writer, and by a reader
that finds ``NAME`` missing) puts the new version in place and says so. A temporary folder with no live writer is
stale; the next writer removes it.

OS failures while writing (disk full, file-size limit, quota, permission, read-only file system, I/O error)
raise ``StorageError``: one line naming the path, the cause and what to do. ``EFBIG`` counts as a full disk.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import shutil
import stat
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Iterator

try:
    import fcntl
except ImportError:  # Windows: no flock
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "DirectoryLock", "Generation", "LockedError", "STORAGE_ERRNOS", "StorageError", "atomic_dir",
    "atomic_write_bytes", "check_output_file", "ensure_present", "open_generation", "parse_json", "read_json",
    "recover", "storage_error", "storage_errors", "write_json",
]

logger = logging.getLogger(__name__)

_FULL = frozenset(e for e in (errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", None)) if e is not None)
_DENIED = frozenset((errno.EACCES, errno.EPERM))
# errnos that say "the storage refused the write", as opposed to a program error
STORAGE_ERRNOS = _FULL | _DENIED | {errno.EROFS, errno.EIO}

# Test hook: called with (old, new) between the two renames of a swap (tests kill the process here).
between_renames_hook: Callable[[Path, Path], None] | None = None

_WAIT_FOR_READERS_S = 3.0  # a writer waits this long for a reader's recovery or a dying writer, never for a writer


# ---------------------------------------------------------------------------------------------- errors
class StorageError(OSError):
    """Writing failed because of the storage (disk full, permission, read-only, I/O error), or another writer.

    ``str()`` is one line: the path, the cause and what to do (plus ``note``, which callers may extend, e.g. with
    what was kept). ``errno`` is the cause's errno; ``path`` the path being written.
    """

    def __init__(self, message: str, *, path: str | os.PathLike, code: int | None = None, note: str = "") -> None:
        super().__init__(code, message)
        self.message, self.path, self.note = message, Path(path), note
        self.filename = str(path)

    def __str__(self) -> str:
        return self.message + (f" ({self.note})" if self.note else "")


class LockedError(StorageError):
    """Another process (or thread) is writing the same directory; ``pid`` is the holder's, when known."""

    def __init__(self, target: Path, what: str, pid: int | None) -> None:
        who = "another thread of this process" if pid == os.getpid() else "another process"
        pid_text = f"pid {pid}" if pid else "pid unknown"
        super().__init__(
            f"{who} is writing {what} {target} ({pid_text}); wait for it to finish (the lock frees itself when "
            "that process ends), or write somewhere else",
            path=target, code=errno.EWOULDBLOCK,
        )
        self.pid = pid


def _reason(code: int | None, cause: BaseException | str) -> tuple[str, str]:
    """(what went wrong, what to do) for an OS error code."""
    if code in (errno.ENOSPC,):
        return "no space left on the device (disk full)", "free some space or write somewhere else, then run again"
    if code == getattr(errno, "EDQUOT", None):
        return "disk quota exceeded", "free some space or write somewhere else, then run again"
    if code == errno.EFBIG:
        return ("file too large (a file-size limit, treated as a full disk)",
                "raise the limit (ulimit -f), or write somewhere else, then run again")
    if code in _DENIED:
        return "permission denied", "choose a directory you can write to, or change its permissions"
    if code == errno.EROFS:
        return "read-only file system", "choose a writable location"
    if code == errno.EIO:
        return "input/output error (a failing disk or network file system?)", "check the storage and run again"
    text = cause.strerror if isinstance(cause, OSError) and cause.strerror else str(cause)
    return text, "check the storage and run again"


def storage_error(path: str | os.PathLike, cause: BaseException | str, note: str = "",
                  code: int | None = None) -> StorageError:
    """A ``StorageError`` for ``path`` from an OS error (or a message), with a one-line explanation."""
    code = code if code is not None else getattr(cause, "errno", None)
    reason, advice = _reason(code, cause)
    other = getattr(cause, "filename", None)
    where = f", at {other}" if other and Path(other) != Path(path) else ""
    return StorageError(f"cannot write {path}: {reason}{where}; {advice}", path=path, code=code, note=note)


@contextlib.contextmanager
def storage_errors(path: str | os.PathLike, note: str = "") -> Iterator[None]:
    """Turn an OS failure of the storage raised inside into a ``StorageError`` for ``path``."""
    try:
        yield
    except StorageError:
        raise
    except OSError as e:
        if e.errno in STORAGE_ERRNOS:
            raise storage_error(path, e, note) from e
        raise


# ---------------------------------------------------------------------------------------------- the lock
@dataclass
class _Held:
    fd: int
    thread: int
    count: int
    purpose: str


_HELD: dict[str, _Held] = {}
_HELD_GUARD = threading.Lock()


def _lock_path(target: Path) -> Path:
    return target.parent / f".{target.name}.lock"


def _read_holder(fd: int) -> tuple[int | None, str]:
    """(pid, purpose) written in a lock file by its holder; (None, "") while it is still being written."""
    try:
        text = os.pread(fd, 64, 0).decode("ascii", "replace").split()
    except OSError:
        return None, ""
    pid = int(text[0]) if text and text[0].isdigit() else None
    return pid, text[1] if len(text) > 1 else ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class DirectoryLock:
    """The one writer lock of a directory: ``fcntl.flock`` on ``.NAME.lock`` beside it.

    A second writer (another process, or another thread of this one) fails at once with ``LockedError`` naming
    the holder's pid; the same thread may take it again (a build holds it while its save takes it too). The lock
    file holds ``PID PURPOSE`` and is removed on release; the kernel drops the lock when its process dies, so a
    killed writer never blocks the next one. ``purpose="recover"`` is a reader repairing an interrupted swap:
    writers wait a moment for it rather than fail.
    """

    def __init__(self, target: str | os.PathLike, what: str = "directory", *, purpose: str = "write") -> None:
        self.target = Path(target).resolve()
        self.what, self.purpose = what, purpose
        self.path = _lock_path(self.target)
        self._key = str(self.path)

    def __enter__(self) -> "DirectoryLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def acquire(self) -> None:
        """Take the lock or raise ``LockedError`` (after a short wait only if the holder is not a live writer)."""
        if fcntl is None:  # an OSError, so optional caches (the converted backbone) are skipped, not fatal
            raise StorageError(
                f"cannot write {self.target}: LENS locks the directories it writes with fcntl.flock, which this "
                f"platform ({os.name}) lacks; run it on Linux or macOS (on Windows: inside WSL)",
                path=self.target, code=errno.ENOSYS)
        deadline = time.monotonic() + _WAIT_FOR_READERS_S
        while True:
            with _HELD_GUARD:
                held = _HELD.get(self._key)
                if held is not None:
                    if held.thread == threading.get_ident():
                        held.count += 1
                        return
                    holder = (os.getpid(), held.purpose)  # another thread of this process
                else:
                    fd, holder = self._try_flock()
                    if fd is not None:
                        try:  # who holds it, for the others' message (best effort: a full disk must not stop us)
                            os.ftruncate(fd, 0)
                            os.pwrite(fd, f"{os.getpid()} {self.purpose}\n".encode("ascii"), 0)
                        except OSError:
                            pass
                        _HELD[self._key] = _Held(fd, threading.get_ident(), 1, self.purpose)
                        return
            pid, purpose = holder
            writer = pid is not None and purpose == "write" and _alive(pid)
            if writer or time.monotonic() > deadline:
                raise LockedError(self.target, self.what, pid)
            time.sleep(0.01)  # a reader recovering, a holder just starting, or a dead holder's leftover file

    def _try_flock(self) -> tuple[int | None, tuple[int | None, str]]:
        """(fd holding the lock, _) or (None, the holder's (pid, purpose))."""
        with storage_errors(self.path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            while True:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = _read_holder(fd)
                    os.close(fd)
                    return None, holder
                except BaseException:
                    os.close(fd)
                    raise
                # the previous holder may have removed the file between our open and our flock: retry on the new one
                try:
                    same = os.path.samestat(os.fstat(fd), os.stat(self.path))
                except FileNotFoundError:
                    same = False
                if same:
                    return fd, (None, "")
                os.close(fd)

    def release(self) -> None:
        """Release (the last release of a re-entered lock removes the lock file, then unlocks)."""
        with _HELD_GUARD:
            held = _HELD.get(self._key)
            if held is None:
                return
            held.count -= 1
            if held.count:
                return
            del _HELD[self._key]
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            os.close(held.fd)


def _writer_holds(target: Path) -> bool:
    """True if a live writer holds ``target``'s lock (checked without taking it, so no writer is disturbed)."""
    path = _lock_path(target)
    with _HELD_GUARD:
        if str(path) in _HELD:
            return True
    if fcntl is None:
        return False
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False  # no lock file: no writer
    try:
        pid, purpose = _read_holder(fd)
        if pid is None or purpose != "write" or not _alive(pid):
            return False
        try:  # the file names a live writer; make sure it really holds the lock (its pid may have been reused)
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------- recovery
def _leftovers(target: Path) -> tuple[dict[str, Path], dict[str, Path]]:
    """({suffix: .NAME.tmp-S}, {suffix: .NAME.old-S}) beside ``target``."""
    pattern = re.compile(rf"^\.{re.escape(target.name)}\.(tmp|old)-([a-z0-9_]{{8}})$")
    tmps: dict[str, Path] = {}
    olds: dict[str, Path] = {}
    try:
        names = os.listdir(target.parent)
    except OSError:
        return tmps, olds
    for name in names:
        m = pattern.match(name)
        if m:
            (tmps if m.group(1) == "tmp" else olds)[m.group(2)] = target.parent / name
    return tmps, olds


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def recover(target: str | os.PathLike, what: str = "directory") -> list[str]:
    """Finish an interrupted swap of ``target`` and remove stale temporary folders; the caller holds the lock.

    If ``target`` is missing and ``.NAME.old-S`` exists, a writer died between its two renames: its
    ``.NAME.tmp-S`` is complete (the first rename happens only after the new version is written), so it goes
    in place; without it, the old version goes back. Every other temporary folder has no live writer (the caller
    holds the lock) and is removed. Returns what was done, one sentence per action (also logged).
    """
    target = Path(target).resolve()
    tmps, olds = _leftovers(target)
    done: list[str] = []
    if not os.path.lexists(target) and olds:
        suffix = max(olds, key=lambda s: _mtime(olds[s]))
        if suffix in tmps:
            os.replace(tmps.pop(suffix), target)
            shutil.rmtree(olds.pop(suffix), ignore_errors=True)
            done.append(f"restored {what} {target}: a save was interrupted between its two renames; the new "
                        f"version it had finished (.{target.name}.tmp-{suffix}) is now in place and the previous "
                        "version it replaced is removed")
        else:
            os.replace(olds.pop(suffix), target)
            done.append(f"restored {what} {target}: a save was interrupted; the previous version "
                        f"(.{target.name}.old-{suffix}) is back in place")
        _fsync_dir(target.parent)
    for path in [*tmps.values(), *olds.values()]:
        shutil.rmtree(path, ignore_errors=True)
        done.append(f"removed {path.name}, a stale temporary folder of {what} {target} left by an interrupted save")
    for line in done:
        logger.warning("%s", line)
    return done


def ensure_present(target: str | os.PathLike, what: str = "directory", wait: float = 10.0) -> None:
    """For readers: if ``target`` is missing because a save is mid-swap, wait for it; if a writer died there, recover.

    Returns when ``target`` exists or when there is nothing to restore (it simply is not there).
    """
    target = Path(target).resolve()
    deadline = time.monotonic() + wait
    while not os.path.lexists(target):
        if not _leftovers(target)[1]:
            return  # no moved-aside version: nothing to restore
        if not _writer_holds(target):
            try:
                with DirectoryLock(target, what, purpose="recover"):
                    recover(target, what)
                continue
            except LockedError:
                pass
            except OSError as e:  # e.g. a read-only directory: cannot repair here
                logger.warning("%s %s is missing after an interrupted save and cannot be restored here (%s); "
                               "run any LENS command that writes it, or `mv` the .%s.tmp-* folder back", what,
                               target, e, target.name)
                return
        if time.monotonic() > deadline:
            raise StorageError(f"{what} {target} is being replaced by another process and is missing right now; "
                               "try again in a moment", path=target, code=errno.EBUSY)
        time.sleep(0.005)


# ---------------------------------------------------------------------------------------------- reading
class Generation:
    """Files of one version of a directory, opened together (``files[name]`` is a binary file, or None if missing).

    Use as a context manager; the files stay readable even if a writer replaces the directory meanwhile.
    """

    def __init__(self, directory: Path, files: dict[str, BinaryIO | None]) -> None:
        self.directory, self.files = directory, files

    def close(self) -> None:
        for f in self.files.values():
            if f is not None:
                f.close()

    def __enter__(self) -> "Generation":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _open_once(directory: Path, names: Iterable[str]) -> Generation | None:
    """One attempt; None if the directory was replaced while its files were being opened."""
    files: dict[str, BinaryIO | None] = {}
    use_dir_fd = os.open in os.supports_dir_fd and hasattr(os, "O_DIRECTORY")
    before = os.stat(directory)
    if not stat.S_ISDIR(before.st_mode):  # from the same stat: a second look could race a swap
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(directory))
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY) if use_dir_fd else None
    try:
        if dfd is not None:
            before = os.fstat(dfd)
        for name in names:
            try:
                fd = os.open(name, os.O_RDONLY, dir_fd=dfd) if dfd is not None else os.open(directory / name, os.O_RDONLY)
            except FileNotFoundError:
                files[name] = None
                continue
            files[name] = os.fdopen(fd, "rb")
        try:
            now = os.stat(directory)
        except FileNotFoundError:
            now = None
        # Through the directory handle every file comes from one version; a missing one might be a removal racing
        # the opens (the old version's clean-up), so that case is retried when the directory has been replaced.
        replaced = now is None or not os.path.samestat(before, now)
        if replaced and (dfd is None or any(f is None for f in files.values())):
            Generation(directory, files).close()
            return None
        return Generation(directory, files)
    except BaseException:
        Generation(directory, files).close()
        raise
    finally:
        if dfd is not None:
            os.close(dfd)


def open_generation(directory: str | os.PathLike, names: Iterable[str], what: str = "directory") -> Generation:
    """Open ``names`` in ``directory``, all from the same version of it, recovering an interrupted swap first.

    Raises FileNotFoundError if ``directory`` does not exist, NotADirectoryError if it is a file.
    """
    directory = Path(directory)
    names = list(names)
    for _ in range(1000):
        ensure_present(directory, what)
        try:
            gen = _open_once(directory, names)
        except FileNotFoundError:
            # mid-swap (a moved-aside version exists) or swapped since (it exists again): try again
            if not _leftovers(directory.resolve())[1] and not os.path.lexists(directory):
                raise FileNotFoundError(errno.ENOENT, f"{what} not found", str(directory)) from None
            gen = None
        if gen is not None:
            return gen
        time.sleep(0.001)
    raise StorageError(f"{what} {directory} kept changing while it was being read; try again",
                       path=directory, code=errno.EBUSY)


def parse_json(data: bytes, path: str | os.PathLike, what: str = "file") -> Any:
    """Parse JSON bytes read from ``path``, with an error that names the file and says what is wrong with it."""
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{what} {path} is not valid JSON ({e}); the file is damaged: recreate it") from e


def read_json(path: str | os.PathLike, what: str = "file") -> Any:
    """Read JSON with an error that names the file and says what is wrong with it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} not found: {path}")
    return parse_json(path.read_bytes(), path, what)


# ---------------------------------------------------------------------------------------------- writing
def _fsync_dir(directory: Path) -> None:
    """Make renames in ``directory`` durable (best effort: not every platform can open a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _swap(tmp: Path, target: Path) -> None:
    """Steps 2 and 3 of the protocol (module docstring); the caller holds the lock."""
    suffix = tmp.name.rsplit(".tmp-", 1)[1]
    old = target.parent / f".{target.name}.old-{suffix}"
    moved = False
    if os.path.lexists(target):
        os.replace(target, old)
        moved = True
    if between_renames_hook is not None:
        between_renames_hook(old, tmp)
    try:
        os.replace(tmp, target)
    except BaseException:
        if moved:
            os.replace(old, target)  # put the previous version back
        raise
    _fsync_dir(target.parent)
    if moved:
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def atomic_dir(target: str | os.PathLike, *, keep_existing: bool = False, what: str = "directory") -> Iterator[Path]:
    """Yield a fresh temporary directory beside ``target``; on success it replaces ``target``.

    Holds ``target``'s ``DirectoryLock`` throughout (``LockedError`` if another writer has it) and first
    ``recover``s what an earlier interrupted writer left. If the body raises, the temporary directory is removed
    and ``target`` is untouched; an OS failure of the storage becomes a ``StorageError`` naming ``target``.
    ``keep_existing`` carries every entry of the old ``target`` that the body did not write into the new version
    (hard links where the file system allows, so nothing is copied and the old version stays whole until the
    swap): a training run's checkpoint and logs survive the model being written into the same directory.
    """
    target = Path(target).resolve()
    note = "nothing was changed: the previous version, if any, is intact"
    with DirectoryLock(target, what):
        with storage_errors(target, note):
            recover(target, what)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
        try:
            os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; a saved artefact gets the usual permissions
            yield tmp
            if keep_existing and target.is_dir():
                for entry in target.iterdir():
                    if not (tmp / entry.name).exists():
                        _link_tree(entry, tmp / entry.name)
            _swap(tmp, target)
        except BaseException as e:
            shutil.rmtree(tmp, ignore_errors=True)
            code = e.errno if isinstance(e, OSError) else _foreign_errno(e)
            if isinstance(e, LockedError) or code not in STORAGE_ERRNOS:
                raise
            where = e.path if isinstance(e, StorageError) else (
                Path(e.filename) if isinstance(e, OSError) and e.filename else None)
            inside = where is not None and (where == tmp or tmp in where.parents)
            if isinstance(e, StorageError) and where is not None and not inside:
                raise  # about another path, which it names
            # name what the user asked to write, and the file of the new version that failed (relative to it)
            shown = None if where is None or where == tmp else str(where.relative_to(tmp) if inside else where)
            raise storage_error(target, OSError(code, "", shown), note) from e


def _foreign_errno(e: BaseException) -> int | None:
    """The errno quoted by a writer that is not Python's (safetensors' Rust: "... (os error 27)"), if any."""
    found = re.search(r"\(os error (\d+)\)", str(e)) if isinstance(e, Exception) else None
    return int(found.group(1)) if found else None


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # no hard links here (another file system, FAT, ...): copy
        shutil.copy2(src, dst)


def _link_tree(src: Path, dst: Path) -> None:
    if src.is_dir() and not src.is_symlink():
        shutil.copytree(src, dst, symlinks=True, copy_function=_link_or_copy)
    elif src.is_symlink():
        os.symlink(os.readlink(src), dst)
    else:
        _link_or_copy(str(src), str(dst))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and a rename.

    An OS failure of the storage raises ``StorageError`` and leaves neither a temporary file nor a change.
    """
    path = Path(path)
    with storage_errors(path, "nothing was written"):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o666 & ~_umask())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as stable, human-readable JSON (sorted keys, trailing newline), atomically."""
    text = json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    atomic_write_bytes(path, text.encode("utf-8"))


def check_output_file(path: str | os.PathLike, what: str = "output") -> Path:
    """Refuse, before any work starts, an output file path that cannot be written: a directory, or a place
    without write permission (the nearest existing parent is checked)."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{what} {path} is a directory; give a file name, e.g. {path / 'vectors.npy'}")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise NotADirectoryError(f"{what} {path}: {parent} is a file, not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise storage_error(path, PermissionError(errno.EACCES, "permission denied"), "nothing was done")
    return path
