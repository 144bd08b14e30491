"""Atomic writes: a saved file or directory is either the old version or the new one, never a mix.

A directory ``NAME`` is written (``atomic_dir``) under its ``DirectoryLock``, so a second writer fails at once,
in three steps:

1. the new version is written into ``.NAME.tmp-S`` (``S``: a random suffix) and flushed to disk;
2. ``NAME`` is renamed to ``.NAME.old-S``, then ``.NAME.tmp-S`` to ``NAME``;
3. ``.NAME.old-S`` is removed.

A writer killed between the renames of step 2 is repaired by ``lens.atomic.recovery.recover``. A single file is
written to a temporary file beside it and renamed (``atomic_write_bytes``, ``write_json``). An OS failure of
the storage raises ``StorageError`` and changes nothing.

``between_renames_hook`` is a test hook and lives here, where ``_swap`` reads it: set
``lens.atomic.writes.between_renames_hook`` (the package re-exports only the public API).
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import json
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

from lens.atomic.errors import STORAGE_ERRNOS, LockedError, StorageError, storage_error, storage_errors
from lens.atomic.lock import DirectoryLock
from lens.atomic.recovery import _fsync_dir, recover

# Test hook: called with (old, new) between the two renames of a swap (tests kill the process here).
between_renames_hook: Callable[[Path, Path], None] | None = None


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
    swap): a training run's checkpoint and logs survive the model being written into the same directory. The
    files the body wrote get the mode a plain ``open()`` would (``_usual_modes``), whatever wrote them.
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
            _usual_modes(tmp)
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


def check_replace_target(path: str | os.PathLike, marker: str, kind: str, *, where: str = "directory",
                         note: str = "writing would replace it") -> Path:
    """Refuse to write a directory artefact (a ``kind`` such as a model directory, which holds ``marker``) over a
    file or over a non-empty directory without ``marker``: writing replaces the whole directory, so a user's folder
    must never be taken for one. ``where`` names what to choose instead (``directory``, ``--out``)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"{path} exists and is a file, not a {kind}; choose another {where}")
    existing_parent(path, kind)
    if path.is_dir() and not (path / marker).is_file() and any(path.iterdir()):
        raise FileExistsError(f"{path} exists, is not empty and is not a {kind} (no {marker}); {note}: choose a new "
                              f"or empty {where}")
    return path


def _usual_modes(root: Path) -> None:
    """Give every file under ``root`` the mode a plain ``open()`` would (0666 less the umask; 0777 less it where an
    execute bit is set): writers that go through a temporary file of their own (safetensors' ``save_file``, under
    PEFT's ``save_pretrained``) leave mkstemp's 0600, unreadable to the group a saved model is shared with."""
    mask = _umask()
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                continue
            mode = (0o777 if st.st_mode & 0o111 else 0o666) & ~mask
            if stat.S_IMODE(st.st_mode) != mode:
                os.chmod(path, mode)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and a rename.

    A new file gets the mode a plain ``open()`` would (0666 less the umask), a replaced one keeps its own. An OS
    failure of the storage raises ``StorageError`` and leaves neither a temporary file nor a change.
    """
    with atomic_file(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary file beside ``path`` (created empty) for the caller to write; when the block ends without an
    error it is flushed to disk and renamed to ``path`` (``publish_file``), else removed. An OS failure of the
    storage raises ``StorageError`` and leaves ``path`` as it was."""
    path = Path(path)
    with storage_errors(path, "nothing was written"):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        os.close(fd)
        tmp = Path(name)
        try:
            yield tmp
            publish_file(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise


def publish_file(tmp: str | os.PathLike, path: str | os.PathLike) -> None:
    """Rename the finished file ``tmp`` (on ``path``'s file system) to ``path``, after flushing it to disk: a
    replaced file keeps its mode, a new one gets what a plain ``open()`` would give (not mkstemp's 0600)."""
    tmp, path = Path(tmp), Path(path)
    with storage_errors(path, "nothing was written"):
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except FileNotFoundError:
            mode = 0o666 & ~_umask()
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        _fsync_dir(path.parent)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as stable, human-readable JSON (sorted keys, trailing newline), atomically; gzipped when
    ``path`` ends in ``.gz`` (with no timestamp or name in the header, so the same object gives the same bytes)."""
    data = (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
    if str(path).endswith(".gz"):
        data = gzip.compress(data, compresslevel=9, mtime=0)
    atomic_write_bytes(path, data)


def existing_parent(path: str | os.PathLike, what: str = "output") -> Path:
    """The nearest existing folder above ``path``, where writing it starts; refused (``NotADirectoryError``) when
    that is a file, as the folders in between could not be made (the OS says only 'File exists')."""
    parent = Path(path).parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise NotADirectoryError(f"{what} {path}: {parent} is a file, not a directory; choose another path")
    return parent


def check_output_file(path: str | os.PathLike, what: str = "output") -> Path:
    """Refuse, before any work starts, an output file path that cannot be written: a directory, or a place
    without write permission (the nearest existing parent is checked)."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{what} {path} is a directory; give a file name, e.g. {path / 'vectors.npy'}")
    parent = existing_parent(path, what)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise storage_error(path, PermissionError(errno.EACCES, "permission denied"), "nothing was done")
    return path
