"""Storage errors: a write the storage refused becomes one line naming the path, the cause and what to do.

OS failures while writing (disk full, file-size limit, quota, permission, read-only file system, I/O error)
raise ``StorageError``; ``EFBIG`` counts as a full disk. ``LockedError`` is the ``StorageError`` of a directory
that another writer holds (``lens.atomic.lock``). At the bottom of the package: the lock, recovery and writing
modules all raise these.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import Iterator

_FULL = frozenset(e for e in (errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", None)) if e is not None)
_DENIED = frozenset((errno.EACCES, errno.EPERM))
# errnos that say "the storage refused the write", as opposed to a program error
STORAGE_ERRNOS = _FULL | _DENIED | {errno.EROFS, errno.EIO}


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
