"""Crash recovery: finish or undo a directory swap that a killed writer left half-done.

A writer (``lens.atomic.writes.atomic_dir``) replaces ``NAME`` by renaming it to ``.NAME.old-S`` and then its
finished ``.NAME.tmp-S`` to ``NAME``. A process killed between those two renames leaves no ``NAME``, a complete
``.NAME.tmp-S`` and ``.NAME.old-S``; ``recover`` (run by the next writer, and through ``ensure_present`` by a
reader that finds ``NAME`` missing) puts the new version in place and says so. A temporary folder with no live
writer is stale; the next writer removes it. Kept apart from the writing code because readers need it too.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import time
from pathlib import Path

from lens.atomic.errors import LockedError, StorageError
from lens.atomic.lock import DirectoryLock, _writer_holds

logger = logging.getLogger(__name__)


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
