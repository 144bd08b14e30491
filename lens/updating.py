"""Change a saved index in place: add documents (or replace them, by id) and remove documents, without a rebuild.

New documents are encoded by the encoders the index was built with (``lens.search.Searcher.open``: its recorded
LENS model and dense kind, refused if their fingerprint differs) and in the build's quantisation, from the same
text (``Document.full_text``) and with the same stored metadata (``lens.indexing.document_metadata``), so they
are indistinguishable from documents the build encoded. The index keeps its type, ``top_m`` (applied to the new
documents as they are added) and default weights; a BM25 part (``lens index build --bm25``) takes the new documents'
texts and drops the removed ones with the vectors, so it never falls out of step with them. The corpus casing table
an index keeps under a truecasing text rule gains the added documents' word forms (a removal leaves it as it is:
it holds forms, not counts).

Every id is checked before anything is encoded: an id already in the index is an error unless ``upsert``, and an
index that cannot change (HNSW for a replace or a removal, a memory-mapped ``ivf-ondisk``, a sharded index for an
addition) says what to do instead. The directory's writer lock (``lens.atomic.DirectoryLock``) is held from load
to save, so two changes at once cannot lose one another, and the save is atomic: a failure leaves the index as it
was. An addition keeps what it has encoded, chunk by chunk, until the save, so an interrupted one resumes
(``resume=True``, ``lens index add --resume``) instead of encoding everything again.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from index.targets import check_save_target
from lens.corpus import Document

logger = logging.getLogger(__name__)

__all__ = ["IndexChange", "add_documents", "remove_documents"]


@dataclass(frozen=True)
class IndexChange:
    """What a change did: documents ``added`` (new ids), ``replaced`` (upserted ids), ``removed``, and ``count``,
    the index's documents afterwards."""

    added: int = 0
    replaced: int = 0
    removed: int = 0
    count: int = 0


def add_documents(directory: str | os.PathLike, docs: Sequence[Document], *, upsert: bool = False,
                  model: str | os.PathLike | None = None, batch_size: int = 16, chunk_size: int = 64,
                  resume: bool = False, show_progress_bar: bool = True, encoder=None) -> IndexChange:
    """Encode ``docs`` as the index at ``directory`` was built and add them; save it again atomically.

    ``upsert``: replace the documents whose ids are already there (else that is an error, raised before anything
    is encoded). ``model``: the LENS model directory, when it has moved since the build (its fingerprint must
    still match the index's); ``encoder``: a ``HybridEncoder`` to encode with instead (as ``Searcher.open`` takes
    it: needed for an index built with an encoder made in memory). The vectors are saved ``chunk_size`` documents at a time beside the index
    (``lens.indexing.adding_dir``) until the index is saved, so an interrupted addition continues where it stopped
    when run again with ``resume`` (the same documents; without it, what an earlier run left is discarded).
    """
    from lens.atomic import DirectoryLock
    from lens.indexing import adding_dir, check_documents, encode_chunks, fill_index, stores_text
    from lens.search import Searcher

    docs = docs if isinstance(docs, Sequence) else list(docs)  # a CorpusFile stays where it lies
    if not len(docs):
        raise ValueError("no documents to add: the corpus is empty")
    check_documents(docs)
    directory = Path(directory)
    with DirectoryLock(directory, "index"):
        check_save_target(directory)  # the save at the end would refuse it: say so before the encoding
        searcher = Searcher.open(directory, model, encoder=encoder, read_only=False)
        index, encoder = searcher.index, searcher.encoder
        replaced = len(index.check_add([d.id for d in docs], upsert))  # before the encoding, not after it
        _match_quantize(encoder, searcher.record.quantize, directory)
        work = adding_dir(directory)
        chunks = encode_chunks(docs, work, encoder, chunk_size=chunk_size, batch_size=batch_size, resume=resume,
                               show_progress_bar=show_progress_bar)
        fill_index(index, chunks, docs, slice(0, len(docs)), upsert=upsert, store_text=stores_text(index.info))
        _extend_casing(index, docs, searcher.record)
        index.save(directory)
        shutil.rmtree(work)
    logger.info("added %d documents to %s (%d replaced)", len(docs) - replaced, directory, replaced)
    return IndexChange(added=len(docs) - replaced, replaced=replaced, count=len(index))


def _extend_casing(index, docs: Sequence[Document], record) -> None:
    """Give the index's corpus casing table the word forms of the added documents that it has none for, counted by
    the build's own rule (``lens.indexing.corpus_casing``), so that queries find the new documents' own words
    ("KRAS", "miRNA") as well; a word the table has keeps its form (``CasingTable.extended_by``)."""
    from lens.indexing import corpus_casing

    table = index.casing_table
    added = None if table is None else corpus_casing(docs, record)
    if added is not None:
        index.set_casing_table(table.extended_by(added))


def _match_quantize(encoder, built: str | None, directory: Path) -> None:
    """Quantize ``encoder`` as the index's documents were encoded (the record's mode), or refuse one quantized
    otherwise: an index never mixes int8 and float32 vectors."""
    have = getattr(encoder.lens, "quantize", None)
    if built and have is None:
        encoder.lens.apply_quantize(built)
    elif have != built:
        raise ValueError(f"the documents of {directory} were encoded in {built or 'float32'} but this encoder is "
                         f"quantized ({have}); pass an encoder loaded without quantize=")


def remove_documents(directory: str | os.PathLike, ids: Sequence[str] | None = None, *,
                     filter: Mapping[str, Any] | None = None, allow_empty: bool = False) -> IndexChange:
    """Remove documents from the index at ``directory`` and save it again atomically: those with ``ids`` (an
    unknown id is a ``KeyError`` naming it, and nothing is removed), or those whose metadata matches ``filter``
    (``HybridIndex.ids_matching``; as ``search`` takes it: ``{"source": "wiki"}``), found under the same lock.
    A filter that matches nothing removes nothing and leaves the files as they were. A removal that would leave
    the index empty (a filter broader than meant, an ids file of every id) is refused and changes nothing unless
    ``allow_empty``. Needs no model."""
    from index import load_index
    from index.metadata import check_filter
    from lens.atomic import DirectoryLock

    if (ids is None) == (filter is None):
        raise ValueError("give the documents to remove by ids or by a metadata filter (one of the two)")
    if filter is not None:
        check_filter(filter)
    else:
        if isinstance(ids, (str, bytes)):
            raise ValueError(f"ids must be a list of document ids, got the single string {ids!r}: put it in a list")
        ids = list(dict.fromkeys(ids))
        if not ids:
            raise ValueError("no document ids to remove: give at least one")
    with DirectoryLock(Path(directory), "index"):
        check_save_target(directory)
        index = load_index(directory)
        if filter is not None:
            ids = index.ids_matching(filter)
            if not ids:
                note = index.missing_filter_fields(filter)
                logger.warning("no document in %s matches the filter %s: nothing removed%s", directory, filter,
                               f"; {note}" if note else "")
                return IndexChange(count=len(index))
        index.check_removable()  # a type that cannot remove says so before the question of emptying it
        if not allow_empty and len(ids) >= len(index) and all(i in index for i in ids):
            how = f"the filter {dict(filter)}" if filter is not None else "the ids given"
            raise ValueError(f"{how} would remove every document ({len(index)}) of {directory}, leaving it empty: "
                             "nothing was removed. To empty the index, allow it (lens index remove --allow-empty, "
                             "remove_documents(..., allow_empty=True)); to check what a filter matches first, "
                             "use --dry-run")
        index.remove(ids)
        index.save(directory)
    logger.info("removed %d documents from %s", len(ids), directory)
    return IndexChange(removed=len(ids), count=len(index))
