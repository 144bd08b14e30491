"""The writer lock of a directory: ``DirectoryLock``, ``fcntl.flock`` on ``.NAME.lock`` beside it.

One writer at a time per directory: a second writer fails at once with ``LockedError`` instead of both
interleaving their files, and the kernel releases the lock when its process ends, so a killed writer never blocks
the next one. Readers use ``_writer_holds`` to tell a live writer's swap from a dead one's leftovers without taking
the lock. Tests replace ``fcntl`` here (``lens.atomic.lock.fcntl``) to stand for a platform without ``flock``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from lens.atomic.errors import LockedError, StorageError, storage_errors

try:
    import fcntl
except ImportError:  # Windows: no flock
    fcntl = None  # type: ignore[assignment]

_WAIT_FOR_READERS_S = 3.0  # a writer waits this long for a reader's recovery or a dying writer, never for a writer


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
