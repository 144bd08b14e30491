"""Consistent reads: a directory's files from one version of it, and JSON read with errors that name the file.

Readers only ever see a complete version: ``open_generation`` opens every file through one handle on the
directory, so a swap between two opens cannot mix versions, and it first waits for (or recovers) a swap in
progress (``lens.atomic.recovery.ensure_present``).
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import stat
import time
from pathlib import Path
from typing import Any, BinaryIO, Iterable

from lens.atomic.errors import StorageError
from lens.atomic.recovery import _leftovers, ensure_present


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
    """Read JSON (gzipped when ``path`` ends in ``.gz``, as ``write_json`` writes it) with an error that names the
    file and says what is wrong with it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} not found: {path}")
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:
            raise ValueError(f"{what} {path} is not a complete gzip file ({e}); the file is damaged: recreate it") from e
    return parse_json(data, path, what)
