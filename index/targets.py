"""Where an index may be saved: a save replaces its whole directory, so it is allowed only over nothing, an empty
directory or a saved LENS index holding nothing else (``check_save_target``), and a command that would replace an
index says so first (``existing_index``)."""

from __future__ import annotations

import os
from pathlib import Path

from lens.atomic import existing_parent, parse_json

from .bm25_part import BM25_FILE
from .df_part import DF_FILE
from .manifest import CASING_FILE, DOCS_FILE, INDEX_FILE, MANIFEST_FILE, is_shard_dir, read_manifest
from .ondisk import DATA_FILE

__all__ = ["check_save_target", "existing_index"]

_INDEX_ENTRIES = frozenset((INDEX_FILE, DOCS_FILE, MANIFEST_FILE, DATA_FILE, BM25_FILE, CASING_FILE, DF_FILE,
                            ".DS_Store"))  # .DS_Store: macOS junk


def check_save_target(directory: str | os.PathLike) -> Path:
    """Refuse to save an index over something that is not one: a file, or a directory holding other files.

    Saving replaces the whole directory, so ``--output ~/Documents`` must never be taken for an index.
    """
    directory = Path(directory)
    if directory.is_symlink() and not directory.exists():
        raise FileExistsError(f"{directory} is a broken symbolic link; remove it or choose another directory")
    if directory.exists() and not directory.is_dir():
        raise FileExistsError(f"{directory} exists and is a file, not an index directory; choose another path")
    existing_parent(directory, "index")
    if directory.is_dir():
        other = sorted(n for n in os.listdir(directory) if n not in _INDEX_ENTRIES and not is_shard_dir(n))
        if other:
            shown = ", ".join(other[:3]) + (", ..." if len(other) > 3 else "")
            if (directory / MANIFEST_FILE).is_file():  # an index with a user's files beside it
                raise FileExistsError(
                    f"{directory} is a LENS index but also holds files LENS did not write ({shown}); saving replaces "
                    "the whole directory, so they would be lost: move them out of it, then run the command again")
            raise FileExistsError(
                f"{directory} exists and is not a LENS index (it holds {shown}); saving would replace it: "
                "choose a new or empty directory")
        _check_index_names_are_lens(directory)
    return directory


def _check_index_names_are_lens(directory: Path) -> None:
    """Refuse a directory whose entries carry an index's file names but is not a saved LENS index: a plain FAISS
    folder's ``index.faiss``, an app's ``manifest.json``, a ``shard-00000`` folder of a user's own (names alone do
    not make an index; a save would replace what they hold)."""
    names = [n for n in os.listdir(directory) if n != ".DS_Store"]
    if not names:
        return
    path = directory / MANIFEST_FILE
    try:
        data = parse_json(path.read_bytes(), path, "index manifest")
    except (OSError, ValueError):
        data = None
    # a LENS index manifest of any format version (an older or newer LENS's index is replaced as before)
    if not (isinstance(data, dict) and "format_version" in data and isinstance(data.get("files"), dict)):
        why = ("it has no manifest.json" if not path.exists() else
               "its manifest.json is not a LENS index's (not JSON, or without format_version and files)")
        raise FileExistsError(
            f"{directory} holds {', '.join(sorted(names)[:3])}{', ...' if len(names) > 3 else ''} but is not a saved "
            f"LENS index: {why}; saving would replace it: choose a new or empty directory, or remove this one "
            "yourself if it is an index you no longer need") from None
    for name in names:
        shard = directory / name
        if not is_shard_dir(name):
            continue
        other = sorted(n for n in os.listdir(shard) if n not in _INDEX_ENTRIES) if shard.is_dir() else [name]
        if other:
            raise FileExistsError(
                f"{directory} is a LENS index but {shard} holds files LENS did not write ({', '.join(other[:3])}"
                f"{', ...' if len(other) > 3 else ''}); saving replaces the whole directory, so they would be lost: "
                "move them out of it, then run the command again")


def existing_index(directory: str | os.PathLike) -> str | None:
    """``"DIR already holds a LENS index (N documents)"`` when ``directory`` is a directory with anything in it
    (``check_save_target`` refuses what is not an index), else None: what a command that would replace an index says
    before it refuses to, unless asked."""
    directory = Path(directory)
    if not directory.is_dir() or not [n for n in directory.iterdir() if n.name != ".DS_Store"]:
        return None
    try:
        count = f" ({read_manifest(directory)['count']} documents)"
    except (OSError, ValueError, KeyError):
        count = ""
    return f"{directory} already holds a LENS index{count}"
