"""``load_index``: the one loader that opens a saved index directory of either layout.

It sits above both layouts (``index.store`` for one index, ``index.shards`` for shards searched together), so
neither of them imports the other to load a directory: the manifest and data files are opened once
(``index.manifest.open_index``, one version of the directory), and the manifest's layout picks the class that
parses them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from .manifest import layout_of, open_index
from .shards import ShardedIndex
from .store import HybridIndex

__all__ = ["load_index"]


def load_index(directory: str | os.PathLike, expected_fingerprint: Mapping[str, Any] | None = None, *,
               read_only: bool = False, **search_options: Any) -> HybridIndex | ShardedIndex:
    """Load the saved index at ``directory``, verified before it is trusted: a ``HybridIndex``, or a
    ``ShardedIndex`` for a sharded directory (same search interface). ``expected_fingerprint``, ``read_only``
    and ``search_options`` are those of ``HybridIndex.load``."""
    directory = Path(directory)
    m, gen = open_index(directory)
    with gen:
        cls = ShardedIndex if layout_of(m) == "sharded" else HybridIndex
        return cls.from_files(directory, m, gen.files, expected_fingerprint, search_options, read_only)
