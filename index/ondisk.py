"""IVF inverted lists on disk: written to ``index.ivfdata`` beside ``index.faiss`` and memory-mapped at load.

FAISS's ``OnDiskInvertedLists`` keeps every list in one file and records that file's *name* inside the index file.
A saved index records the bare name ``index.ivfdata``; :func:`map_lists` points the loaded lists at the data file
the caller opened (and checksummed) from the same version of the directory, so neither the current directory nor
a save racing the load decides which file is mapped.

Building past memory: fill the lists a part at a time, :func:`spill` each part to a file (the lists are then
emptied), and let :func:`write_ondisk` merge every spilled part into one data file with
``faiss.contrib.ondisk.merge_ondisk``, reading the parts memory-mapped. Only one part's lists are ever in memory.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import BinaryIO, Iterator, Sequence

import faiss
import numpy as np

__all__ = ["DATA_FILE", "is_mapped", "map_lists", "mapped_bytes", "spill", "write_ondisk"]

logger = logging.getLogger(__name__)

DATA_FILE = "index.ivfdata"


def _lists(index: faiss.Index):
    return faiss.downcast_InvertedLists(faiss.extract_index_ivf(index).invlists)


def is_mapped(index: faiss.Index) -> bool:
    """True when ``index``'s inverted lists are an ``OnDiskInvertedLists`` (memory-mapped from a file)."""
    return isinstance(_lists(index), faiss.OnDiskInvertedLists)


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """Silence FAISS's C-level ``printf`` ("resizing FILE to N bytes") while the data file grows."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # no real stdout (captured): nothing to silence
        yield
        return
    sys.stdout.flush()
    saved = os.dup(fd)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), fd)
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


def spill(index: faiss.Index, path: Path) -> int:
    """Write ``index`` (an IVF with in-memory lists) to ``path`` and empty its lists; returns the vectors moved."""
    n = int(index.ntotal)
    faiss.write_index(index, str(path))
    index.reset()  # keeps the trained quantiser, drops the lists
    return n


def write_ondisk(index: faiss.Index, spilled: Sequence[Path], index_path: Path, data_path: Path, work: Path) -> None:
    """Save the IVF ``index`` as ``index_path`` + ``data_path`` (the lists, named in the index by their file name).

    Lists already memory-mapped (a loaded index) are copied byte for byte; otherwise the lists held in memory and
    those ``spilled`` before are merged into ``data_path`` by ``merge_ondisk`` (the in-memory part is spilled
    first, to a temporary file in ``work``). ``index`` itself is left unchanged.
    """
    from faiss.contrib.ondisk import merge_ondisk

    if is_mapped(index):
        lists = _lists(index)
        with open(data_path, "wb") as f:
            if lists.totsize:
                f.write(memoryview(mapped_bytes(index)))
        _write_named(index, lists, index_path)
        return
    merged = _empty_clone(index)
    if index.ntotal == 0 and not spilled:  # nothing to map: an empty data file and empty lists
        ivf = faiss.extract_index_ivf(merged)
        data_path.write_bytes(b"")
        lists = faiss.OnDiskInvertedLists(ivf.nlist, ivf.code_size, str(data_path))
        ivf.replace_invlists(lists, True)
        lists.this.disown()
        _write_named(merged, _lists(merged), index_path)
        return
    parts, tail = list(spilled), None
    if index.ntotal:
        fd, name = tempfile.mkstemp(prefix=".lists-", suffix=".faiss", dir=work)
        os.close(fd)
        tail = Path(name)
        faiss.write_index(index, str(tail))
        parts.append(tail)
    try:
        with _quiet_stdout():
            merge_ondisk(merged, [str(p) for p in parts], str(data_path))
        _write_named(merged, _lists(merged), index_path)
    finally:
        del merged  # unmaps data_path
        if tail is not None:
            tail.unlink(missing_ok=True)
    logger.debug("merged %d part(s) of inverted lists into %s", len(parts), data_path)


def _empty_clone(index: faiss.Index) -> faiss.Index:
    """A trained, empty ``IndexIVFFlat`` with a copy of ``index``'s quantiser (none of its lists)."""
    ivf = faiss.extract_index_ivf(index)
    clone = faiss.IndexIVFFlat(faiss.clone_index(ivf.quantizer), ivf.d, ivf.nlist, ivf.metric_type)
    clone.nprobe = ivf.nprobe
    return clone


def _write_named(index: faiss.Index, lists, index_path: Path) -> None:
    """Write ``index`` with its on-disk lists recorded under the bare name :data:`DATA_FILE`."""
    real = lists.filename
    lists.filename = DATA_FILE
    try:
        faiss.write_index(index, str(index_path))
    finally:
        lists.filename = real


def map_lists(index: faiss.Index, data: BinaryIO, path: Path) -> None:
    """Memory-map the lists of ``index`` (read with ``IO_FLAG_SKIP_IVF_DATA``) from the open data file ``data``.

    The mapping is made through the open file (``/proc/self/fd``), so it is the file that was checksummed even if
    the directory is replaced meanwhile; the lists are read-only.
    """
    lists = _lists(index)
    if not isinstance(lists, faiss.OnDiskInvertedLists):
        raise ValueError(f"{path.parent / 'index.faiss'} holds in-memory inverted lists, not on-disk ones; "
                         "rebuild the index")
    size = os.fstat(data.fileno()).st_size
    if size < lists.totsize:
        raise ValueError(f"{path} has {size} bytes but the index needs {lists.totsize}; rebuild the index")
    if lists.totsize == 0:  # an empty index: nothing to map (mmap refuses a length of 0)
        return
    via = next((f"{d}/{data.fileno()}" for d in ("/proc/self/fd", "/dev/fd") if os.path.isdir(d)), str(path))
    lists.filename = via
    lists.read_only = True
    try:
        lists.do_mmap()
    except RuntimeError as e:
        raise ValueError(f"could not memory-map {path} ({e}); rebuild the index") from e
    lists.filename = str(path)  # what a later message or a re-save names; the mapping stays on the open file


def mapped_bytes(index: faiss.Index) -> np.ndarray:
    """A read-only view of the whole memory-mapped data file of ``index`` (for checks and measurements)."""
    lists = _lists(index)
    return faiss.rev_swig_ptr(lists.ptr, lists.totsize)
