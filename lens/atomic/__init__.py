"""Atomic writes, the writer lock and crash recovery: a saved artefact is either the old one or the new one.

Every writer of a file or directory in ``lens`` and ``index`` goes through this package. Its modules, bottom up
(each imports only those above it in this list):

- ``errors``: ``StorageError`` (disk full, permission, read-only, I/O error: one line), ``LockedError``;
- ``lock``: ``DirectoryLock``, the one writer lock of a directory (``flock`` on ``.NAME.lock``);
- ``recovery``: ``recover`` / ``ensure_present``, repairing a swap that a killed writer left half-done;
- ``reads``: ``open_generation`` (a directory's files from one version), ``read_json`` / ``parse_json``;
- ``writes``: ``atomic_dir`` (temporary directory + two renames), ``atomic_file`` / ``publish_file`` (a
  temporary file + a rename), ``atomic_write_bytes``, ``write_json``.

Import from ``lens.atomic``; the modules are an internal layout.
"""

from __future__ import annotations

from lens.atomic.errors import STORAGE_ERRNOS, LockedError, StorageError, storage_error, storage_errors
from lens.atomic.lock import DirectoryLock
from lens.atomic.reads import Generation, open_generation, parse_json, read_json
from lens.atomic.recovery import ensure_present, recover
from lens.atomic.writes import (atomic_dir, atomic_file, atomic_write_bytes, check_output_file, check_replace_target,
                               existing_parent, publish_file, write_json)

__all__ = [
    "DirectoryLock", "Generation", "LockedError", "STORAGE_ERRNOS", "StorageError", "atomic_dir", "atomic_file",
    "atomic_write_bytes", "check_output_file", "check_replace_target", "ensure_present", "existing_parent",
    "open_generation",
    "parse_json", "publish_file", "read_json",
    "recover", "storage_error", "storage_errors", "write_json",
]
