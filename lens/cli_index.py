"""`lens index`, `lens search` and `lens serve`: the commands over a saved hybrid index, and their parsers
(``register``). Heavy imports happen inside each command."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import NoReturn

from lens.cli_args import add_quantize_argument, add_registry_argument
from lens.cmdline import check_quantize_workers, positive_int

logger = logging.getLogger("lens")


def cmd_index_build(args: argparse.Namespace) -> None:
    import contextlib

    from lens.corpus import open_corpus
    from lens.indexing import DEFAULT_IDF, build_saved, check_build_options, check_build_output, partial_dir
    from lens.sharding import EncoderSpec, torchrun_rank, worker_devices

    from index.targets import check_save_target
    from lens.atomic import DirectoryLock

    start = time.perf_counter()
    devices = [d.strip() for d in args.devices.split(",") if d.strip()] if args.devices else None
    check_build_options(args.workers, args.shards, args.top_m)
    if devices:
        worker_devices(args.workers, devices)  # a wrong device fails now, not after the corpus loads
    ranked = torchrun_rank()  # under torchrun every rank runs this; rank 0 alone writes the output
    check_quantize_workers(args.quantize, ranked is not None or args.workers > 1 or bool(devices))
    first = ranked is None or ranked[0] == 0
    if first:
        check_save_target(args.output)  # before any work: never build over a folder that is not an index
        check_build_output(args.output, resume=args.resume, overwrite=args.overwrite)  # nor over one unasked
    # a second build of the same output fails now, not after loading
    with DirectoryLock(args.output, "index") if first else contextlib.nullcontext():
        docs = open_corpus(args.corpus)  # a plain .jsonl / .tsv is read where it lies, a chunk at a time
        check_build_options(args.workers, args.shards, args.top_m, len(docs))  # before the model loads
        if ranked is not None or args.workers > 1 or devices:
            encoder = EncoderSpec(str(args.model), args.dense)  # each worker (rank) loads its own, on its device
        else:
            from lens.hybrid import HybridEncoder

            encoder = HybridEncoder.from_pretrained(args.model, args.dense, quantize=args.quantize)
        info = {"corpus": str(args.corpus)}  # the build records the encoders itself (lens.index_record)
        try:
            manifest = build_saved(docs, args.output, encoder, index_type=args.index, chunk_size=args.chunk_size,
                                   batch_size=args.batch_size, resume=args.resume, info=info, workers=args.workers,
                                   devices=devices, shards=args.shards, top_m=args.top_m, weights=args.weights,
                                   bm25=args.bm25, store_text=args.store_text,
                                   idf=DEFAULT_IDF if args.idf is None else args.idf)
        except KeyboardInterrupt:
            _interrupted(partial_dir(args.output))
    if manifest is None:  # a torchrun rank other than 0: rank 0 wrote the index and reports it
        return
    shards = f", {len(manifest['shards'])} shards" if manifest.get("layout") == "sharded" else ""
    print(f"indexed {_documents(manifest['count'])} into {args.output} ({manifest['mode']}, {args.index}{shards}) "
          f"in {time.perf_counter() - start:.1f}s")


def _part_manifests(m: dict, files: dict) -> list[dict]:
    """The manifest of each searched part: the index's own, or each shard's (read from the open, verified files)."""
    import json

    if m.get("layout") != "sharded":
        return [m]
    out = []
    for entry in m["shards"]:
        f = files.get(f"{entry['dir']}/manifest.json")
        if f is not None:
            f.seek(0)
            out.append(json.loads(f.read()))
    return out


def cmd_index_info(args: argparse.Namespace) -> None:
    import os

    from index.manifest import data_files, open_index, verify_stream
    from index.metadata import FIELDS_SAMPLE
    from index.ondisk import DATA_FILE
    from index.manifest import CASING_FILE

    m, gen = open_index(args.dir)
    with gen:
        if not args.no_verify:  # damage is an error (exit 2), printed before any summary
            for name in data_files(m):
                verify_stream(gen.files.get(name), args.dir / name, m["files"][name])
        size = sum(os.fstat(f.fileno()).st_size for f in gen.files.values() if f is not None)
        parts = _part_manifests(m, gen.files)
        try:
            fields = _metadata_fields(args.dir, m, gen.files)
        except ValueError as e:  # a damaged table: an error when checked (above), a note with --no-verify
            fields = None
            logger.warning("metadata fields not read: %s", e)
    record = _info_record(args, m, size, parts, fields)
    if args.json:
        print(json.dumps(record, indent=2, ensure_ascii=False))
        return
    print(f"{args.dir}: {m['count']} documents, {record['mode']} ({m['index_type']}), "
          f"dims lexicon={m['lexicon_dim']} dense={m['dense_dim']}, weights={m['weights']}, "
          f"{size / 1e6:.1f} MB on disk")
    names = ", ".join(data_files(m)) if len(m["files"]) <= 3 else f"all {len(m['files'])} files"
    print(f"  checked: sizes and sha256 of {names} match the manifest" if not args.no_verify
          else "  NOT checked (--no-verify): sizes and sha256 of the data files")
    sharded = record["shards"] is not None
    if sharded:
        counts = ", ".join(f"{s['dir']}: {s['documents']}" for s in record["shards"])
        print(f"  shards: {len(record['shards'])} searched together ({counts})")
    if any(name.split("/")[-1] == DATA_FILE for name in m["files"]):
        print(f"  inverted lists: {DATA_FILE}, memory-mapped when loaded (read-only)")
    if record["top_m"] is not None:
        print(f"  top-m: each document keeps its {record['top_m']} heaviest lexicon weights (queries are not pruned)")
    if record["casing"]:
        print(f"  casing: the corpus's own casing table ({CASING_FILE}): queries in capitals come back to the "
              "corpus's forms of their words")
    idf, without_df = record["idf"], sum(p.get("df") is None for p in parts)
    if idf["kept"]:
        where = f" in all {len(parts)} shards" if sharded else ""
        print(f"  idf: the documents' cluster frequencies are kept{where}; searches weigh the query lexicon by them "
              f"{'by default (--no-idf: not)' if idf['default'] else 'when asked (lens search --idf)'}")
    elif without_df < len(parts):
        print(f"  idf: none: {without_df} of {len(parts)} shards keep no cluster frequencies (built "
              "with --no-idf or before indexes kept them), so searches weigh no query by idf; rebuild those inputs "
              "with `lens index build` and merge again")
    bm25, with_bm25 = record["bm25"], sum(p.get("bm25") is not None for p in parts)
    if with_bm25:
        where = f" in {with_bm25} of {len(m['shards'])} shards" if sharded else ""
        print(f"  bm25: a BM25 part of {bm25['documents']} documents{where}, "
              + (f"searched at weight {bm25['default_weight']} unless --weights LEX,DENSE[,BM25] says otherwise"
                 if bm25["searchable"] else "not searchable: every shard needs one (rebuild the others with lens "
                 "index build)"))
    else:
        print("  bm25: none (built with --no-bm25, as a sharded ivf-ondisk index without --bm25, or before indexes "
              "kept one): searches use the vectors alone; `lens index build` keeps one by default")
    fields = record["metadata_fields"]
    if fields is not None:
        print(f"  metadata fields (of the first {FIELDS_SAMPLE} documents with metadata{' per shard' if sharded else ''}"
              f"; what --filter can name): {', '.join(fields)}" if fields else "  metadata fields: none")
    for key, value in sorted(record["info"].items()):
        print(f"  {key}: {value}")
    for key, value in sorted(record["fingerprint"].items()):
        print(f"  fingerprint.{key}: {value}")


def _metadata_fields(directory: Path, m: dict, files: dict) -> list[str]:
    """The dotted metadata field names a filter can name, from the first documents with metadata of the index or
    of each shard (a sample, read from the open, verified document tables where they lie)."""
    from index.metadata import DocTable, field_names
    from index.manifest import DOCS_FILE

    dirs = [e["dir"] for e in m["shards"]] if m.get("layout") == "sharded" else [""]
    names = [f"{sub}/{DOCS_FILE}" if sub else DOCS_FILE for sub in dirs]
    tables = [DocTable.read(files[name], directory / name, in_place=True) for name in names if files.get(name)]
    try:
        return field_names(tables)
    finally:
        for table in tables:
            table.close()


def _info_record(args: argparse.Namespace, m: dict, size: int, parts: list[dict], fields: list[str] | None) -> dict:
    """What ``lens index info`` says, worked out once: printed as text, or as this object with ``--json``."""
    from index.bm25_fusion import DEFAULT_BM25_WEIGHT
    from index.manifest import CASING_FILE

    sharded = m.get("layout") == "sharded"
    bm25 = [p["bm25"] for p in parts if p.get("bm25") is not None]
    kept = bool(parts) and all(p.get("df") is not None for p in parts)
    return {
        "dir": str(args.dir), "documents": m["count"], "mode": m.get("mode", "hybrid"), "index_type": m["index_type"],
        "dims": {"lexicon": m["lexicon_dim"], "dense": m["dense_dim"]}, "weights": m["weights"], "bytes": size,
        "verified": not args.no_verify,
        "shards": [{"dir": s["dir"], "documents": s["count"]} for s in m["shards"]] if sharded else None,
        "top_m": m.get("top_m"),
        "casing": any(name.split("/")[-1] == CASING_FILE for name in m["files"]),
        "idf": {"kept": kept, "default": kept and all(p.get("idf") for p in parts)},
        "bm25": {"documents": sum(e.get("documents", 0) for e in bm25),
                 "searchable": bool(bm25) and len(bm25) == len(m.get("shards") or [m]),
                 "default_weight": DEFAULT_BM25_WEIGHT},
        "metadata_fields": fields, "info": m.get("info") or {}, "fingerprint": m.get("fingerprint") or {},
    }


def cmd_index_merge(args: argparse.Namespace) -> None:
    from index.shards import merge_indexes

    manifest = merge_indexes(args.out, args.inputs, overwrite=args.overwrite)
    print(f"merged {len(args.inputs)} indexes into {args.out}: {manifest['count']} documents in "
          f"{len(manifest['shards'])} shards ({manifest['mode']}, {manifest['index_type']})")


def _documents(n: int) -> str:
    """``n`` documents, in words ("1 document", "2 documents")."""
    return f"{n} document" + ("" if n == 1 else "s")


def _interrupted(work: Path) -> NoReturn:
    """Re-raise Ctrl-C, saying where the chunks encoded so far are kept for ``--resume`` (when there are some)."""
    if any(work.glob("chunk-*.npz")):
        raise KeyboardInterrupt(f"the chunks encoded so far are kept in {work}; run the same command with "
                                "--resume to continue") from None
    raise KeyboardInterrupt


def cmd_index_add(args: argparse.Namespace) -> None:
    from lens.corpus import open_corpus
    from lens.indexing import adding_dir
    from lens.updating import add_documents

    start = time.perf_counter()
    docs = open_corpus(args.corpus)
    try:
        change = add_documents(args.dir, docs, upsert=args.upsert, model=args.model, batch_size=args.batch_size,
                               chunk_size=args.chunk_size, resume=args.resume)
    except KeyboardInterrupt:
        _interrupted(adding_dir(args.dir))
    replaced = f" ({change.replaced} replaced)" if change.replaced else ""
    print(f"added {_documents(change.added + change.replaced)} to {args.dir}{replaced}: "
          f"{_documents(change.count)} now, "
          f"in {time.perf_counter() - start:.1f}s")


def cmd_index_remove(args: argparse.Namespace) -> None:
    from lens.updating import remove_documents

    ids = list(args.ids)
    if args.ids_file is not None:
        if not args.ids_file.is_file():
            raise FileNotFoundError(f"--ids-file {args.ids_file}: no such file (give ids as arguments, or a file of "
                                    "one id per line)")
        from lens.corpus import read_text_lines

        ids += [line.strip() for line in read_text_lines(args.ids_file) if line.strip()]
    flt = _filter_of(args.filter)
    if flt is not None and ids:
        raise ValueError("give ids (or --ids-file) or --filter, not both")
    if flt is None and not ids:
        raise ValueError("no document ids to remove: give them as arguments, in --ids-file (one per line), or "
                         "choose them by --filter FIELD=VALUE")
    if args.dry_run:
        from index import load_index

        index = load_index(args.dir, read_only=True)
        given = list(dict.fromkeys(ids))
        found = index.ids_matching(flt) if flt is not None else [i for i in given if i in index]
        unknown = [i for i in given if i not in index]  # none with a filter: no ids are given with one
        shown = ", ".join(found[:10]) + (f", ... ({len(found) - 10} more)" if len(found) > 10 else "")
        print(f"would remove {len(found)} of {len(index)} documents from {args.dir}" + (f": {shown}" if found else ""))
        if unknown:
            print(f"but {len(unknown)} given id(s) are not in the index ({', '.join(unknown[:10])}"
                  f"{', ...' if len(unknown) > 10 else ''}): the removal itself would fail and remove nothing")
        elif found and len(found) == len(index) and not args.allow_empty:
            print("that is every document: the removal itself is refused without --allow-empty")
        note = None if found or flt is None else index.missing_filter_fields(flt)
        if note is not None:
            logger.warning("the filter %s cannot match: %s", flt, note)
        return
    try:
        change = remove_documents(args.dir, None if flt is not None else ids, filter=flt,
                                  allow_empty=args.allow_empty)
    except KeyError as e:  # an unknown id: nothing was removed
        raise ValueError(e.args[0]) from None
    except KeyboardInterrupt:
        raise KeyboardInterrupt(f"{args.dir} holds the index as it was, or without those documents if the save had "
                                f"finished (a save is atomic): lens index info {args.dir} counts them") from None
    print(f"removed {_documents(change.removed)} from {args.dir}: {_documents(change.count)} left")


def build_weights_arg(value: str) -> tuple[float, float] | str:
    return weights_arg(value, balanced=True)


def query_weights_arg(value: str) -> tuple[float, ...]:
    """``--weights`` of ``lens search`` / ``lens serve``: LEX,DENSE or LEX,DENSE,BM25."""
    from index.bm25_fusion import query_weights

    try:
        return query_weights(value, "--weights")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--weights: ").removeprefix("--weights ")) from None


def weights_arg(value: str, balanced: bool = False) -> tuple[float, float] | str:
    from index.vectors import weight_pair, weights_spec

    try:
        return (weights_spec if balanced else weight_pair)(value, "--weights")
    except ValueError as e:  # argparse puts "argument --weights: " in front already
        raise argparse.ArgumentTypeError(str(e).removeprefix("--weights: ").removeprefix("--weights ")) from None


def filter_item_arg(value: str) -> tuple[str, object]:
    """``FIELD=VALUE`` of ``--filter``: the value read as JSON when it parses to what a filter matches (2020, true,
    ["a", "b"], "007"), else as a string (``source=null`` and ``source=NaN`` are the words: a filter matches no
    null or non-finite value)."""
    import math

    field, sep, raw = value.partition("=")
    if not sep or not field:
        raise argparse.ArgumentTypeError(f"expected FIELD=VALUE (e.g. source=wiki), got {value!r}")
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = raw
    if parsed is None or isinstance(parsed, dict) or (isinstance(parsed, float) and not math.isfinite(parsed)):
        parsed = raw
    return field, parsed


def _filter_of(items: list[tuple[str, object]] | None) -> dict | None:
    """The repeated ``--filter`` items as one filter; a field given twice matches either value."""
    if not items:
        return None
    out: dict[str, list] = {}
    for field, value in items:
        out.setdefault(field, []).extend(value if isinstance(value, list) else [value])
    return out


def _run_target(path: Path) -> None:
    """Refuse a --run path that cannot be a file, before any model loads."""
    if path.is_dir():
        raise IsADirectoryError(f"--run {path} is a directory; give the path of the run file to write")


def _search_queries(args: argparse.Namespace) -> dict[str, str]:
    """``{query id: text}``: the --queries-file's, or the positional queries numbered 1, 2, ..."""
    from lens.corpus import QUERY_FILES, load_queries

    if args.queries_file is not None:
        if args.query:
            raise ValueError("give queries as arguments or in --queries-file, not both")
        if not args.queries_file.exists():
            raise FileNotFoundError(f"--queries-file {args.queries_file} not found: give {QUERY_FILES}")
        queries = load_queries(args.queries_file)
        if not queries:
            raise ValueError(f"{args.queries_file} holds no queries")
        return queries
    if not args.query:
        raise ValueError("no query: give one or more as arguments, or a file of them with --queries-file")
    if len(args.query) > 1 and all(len(q.split()) == 1 for q in args.query):  # `lens search IX heat transfer`
        logger.warning("searching %d one-word queries (%s): each argument is a query; quote a query of several "
                       "words (\"%s\")", len(args.query), ", ".join(args.query), " ".join(args.query))
    return {str(i): q for i, q in enumerate(args.query, 1)}


def cmd_search(args: argparse.Namespace) -> None:
    from lens.search import Searcher, check_queries, hit_records

    from lens.cli_encode import task_instruction

    queries = _search_queries(args)
    check_queries(list(queries.values()), list(queries) if args.queries_file else None)  # before the models load
    instruction = task_instruction(args, query=True)
    if args.run is not None:
        from lens.trec import check_query_ids

        _run_target(args.run)
        check_query_ids(queries)
    searcher = Searcher.open(args.dir, args.model, args.quantize)
    _quantize_mismatch(searcher.index, searcher.encoder.lens.quantize)  # as loaded: "auto" resolved
    results = searcher.search(list(queries.values()), k=args.k, weights=args.weights, instruction=instruction,
                              filter=_filter_of(args.filter), batch_size=args.batch_size, depth=args.depth,
                              idf=args.idf, collapse=args.collapse, collapse_depth=args.collapse_depth,
                              show_progress_bar=len(queries) > args.batch_size)
    if args.run is not None:
        from lens.search import collapsed_run
        from lens.trec import write_run

        def rows(h):  # collapsed: each hit's group (a passage's document), what qrels judge
            return list(zip(h.ids, h.scores)) if args.collapse is None else collapsed_run(h, args.collapse)

        write_run(args.run, {qid: rows(h) for qid, h in zip(queries, results)}, tag=args.run_tag)
        as_json = args.json or args.jsonl
        print(f"wrote the top {args.k} of {len(queries)} queries to {args.run} (TREC run, tag {args.run_tag})",
              file=sys.stderr if as_json else sys.stdout)  # with --json / --jsonl, stdout holds the JSON alone
        if not as_json:
            return
    if args.json or args.jsonl:
        records = [{"query_id": qid, "query": q, "hits": hit_records(h)}
                   for (qid, q), h in zip(queries.items(), results)]
        print(json.dumps(records, indent=2, ensure_ascii=False) if args.json
              else "\n".join(json.dumps(r, ensure_ascii=False) for r in records))
        return
    for query, hits in zip(queries.values(), results):
        print(f"\n{query}")
        if not hits.ids:
            print("  no results")
        for r, (doc_id, score, meta) in enumerate(zip(hits.ids, hits.scores, hits.metadata), 1):
            meta = meta or {}
            snippet = " ".join(str(meta.get("snippet", "")).split())[:100]
            title = f"[{meta['title']}] " if meta.get("title") else ""
            print(f"{r:>3}. {score:7.4f}  {doc_id}  {title}{snippet}")


def _quantize_mismatch(index, quantize: str | None) -> None:
    """Warn when queries will be encoded otherwise than the index's documents were (float32 vs int8)."""
    built = (index.info or {}).get("lens_quantize")
    if built != quantize:
        logger.warning("the index's documents were encoded %s and the queries are encoded %s: scores are close to, "
                       "not the same as, a matched pair's (%s to match)", built or "in float32",
                       quantize or "in float32", f"pass --quantize {built}" if built else "drop --quantize")


def cmd_serve(args: argparse.Namespace) -> int:
    from lens.serve import SearchService, make_server

    if (args.dir is None) == (args.backends is None):
        raise ValueError("give an index DIR to serve, or --backends URL,... to be the front end of indexes served "
                         "on other machines (each by `lens serve DIR`), not both")

    try:  # bound before the models load: a port in use fails at once, not after them
        server = make_server(None, args.host, args.port)
    except OSError as e:  # a port in use, a privileged port, an address not of this machine: say which
        raise ValueError(f"cannot listen on {args.host}:{args.port} ({e.strerror or e}); choose another --port "
                         "(0: any free one) or --host") from e
    try:
        try:
            service = SearchService(args.dir, args.model, quantize=args.quantize, max_queries=args.max_queries,
                                    max_k=args.max_k, weights=args.weights, idf=args.idf, backends=args.backends,
                                    timeout=args.timeout)
        except ConnectionError as e:  # a backend down or not lens serve: one line, not a traceback
            raise ValueError(str(e)) from None
        _quantize_mismatch(service.searcher.index, service.searcher.encoder.lens.quantize)
        service.search({"query": "warm up"})  # the first encode is slow: pay it before the first user
        server.service = service  # requests that came meanwhile waited in the socket's queue
        host, port = server.server_address[:2]
        what = args.dir if args.dir is not None else f"{len(args.backends)} backends"
        print(f"serving {what} ({len(service.searcher.index)} documents) on http://{host}:{port} "
              f"(POST /search, GET /search?q=..., /health, /info); Ctrl-C stops", flush=True)
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopped")
    finally:
        server.server_close()
    return 0


# ---------------------------------------------------------------------------------------------- parsers
def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a TCP port is an integer from 0 to 65535, got {value!r}")
    return port


def _urls(value: str) -> list[str]:
    urls = [u.strip() for u in value.split(",") if u.strip()]
    if not urls or not all(u.startswith(("http://", "https://")) for u in urls):
        raise argparse.ArgumentTypeError(f"--backends takes http:// URLs separated by commas, e.g. "
                                         f"http://10.0.0.1:8080,http://10.0.0.2:8080; got {value!r}")
    return urls


def register(subparsers) -> None:
    """Add ``index {build,info,merge,add,remove}``, ``search`` and ``serve`` to ``lens``'s subcommands."""
    ix = subparsers.add_parser("index", help="build or inspect a hybrid FAISS index").add_subparsers(
        dest="index_command", required=True)
    b = ix.add_parser("build", help="encode a corpus and save a hybrid index")
    b.add_argument("--corpus", required=True,
                   help="a BEIR directory, a corpus.jsonl[.gz], a JSONL of {id, text[, title]}, a .tsv[.gz] of "
                        "id<TAB>text (or of the columns its header names), or 'pydoc-topics'")
    b.add_argument("--output", required=True, type=Path,
                   help="index directory to write: a new or empty one (an index there is replaced only with "
                        "--overwrite)")
    b.add_argument("--model", default="default", help="LENS model directory or 'default'")
    add_registry_argument(b, "--dense", registry="lens.hybrid:DENSE_KINDS", default="minilm", metavar="KIND",
                          help="dense part: %(choices)s (default %(default)s; minilm = the packaged "
                               "all-MiniLM-L6-v2, mpnet = all-mpnet-base-v2 after `make peers`, lens = the LENS "
                               "model's own dense vector)")
    add_registry_argument(b, "--index", registry="index.factory:INDEX_TYPES", default="flat", metavar="TYPE",
                          help="FAISS index type: %(choices)s (default %(default)s)")
    b.add_argument("--resume", action="store_true", help="continue an interrupted build from its last chunk")
    b.add_argument("--overwrite", action="store_true",
                   help="replace the index already in --output (atomically: it stays whole until the new one is "
                        "saved); without it a build refuses an --output that holds an index")
    b.add_argument("--chunk-size", type=positive_int, default=None,
                   help="documents per saved chunk (the unit of --resume; default 64 on a CPU, 1024 on a GPU)")
    b.add_argument("--batch-size", type=positive_int, default=None,
                   help="documents per forward pass (default 16 on a CPU; on a GPU as many as its free memory holds)")
    b.add_argument("--workers", type=positive_int, default=1, metavar="N",
                   help="encode in N processes, each on a contiguous shard of the corpus (CPU threads are split "
                        "between them); under torchrun each rank is one worker")
    b.add_argument("--devices", default=None, metavar="LIST",
                   help="comma-separated devices, one worker on each, e.g. cuda:0,cuda:1 (under torchrun: the "
                        "device of each LOCAL_RANK)")
    b.add_argument("--shards", type=positive_int, default=1, metavar="S",
                   help="write S shard indexes, built one at a time and searched together (ivf-ondisk: S parts "
                        "merged into one on-disk file); bounds the build's memory to one shard")
    b.add_argument("--top-m", type=positive_int, default=None, metavar="M",
                   help="keep the M heaviest lexicon weights of each document (before normalising); recorded in "
                        "the index, queries are not pruned")
    add_quantize_argument(b, "; recorded in the index")
    b.add_argument("--store-text", action="store_true",
                   help="keep each document's whole text in the index: hits carry it (metadata \"text\", beside the "
                        "300-character snippet), so a RAG pipeline needs no document store of its own; costs the "
                        "texts' bytes on disk (docs.sqlite), and `lens index add` keeps it")
    b.add_argument("--bm25", action=argparse.BooleanOptionalAction, default=None,
                   help="keep a BM25 part (bm25s, stemming, stopwords) of the documents' texts, searched with a third "
                        "weight (0.1 unless lens search --weights LEX,DENSE,BM25 says otherwise); on unless "
                        "--no-bm25, except for ivf-ondisk with --shards, whose vectors go to disk while the part "
                        "would stay in memory (docs/index-and-search.md#bm25-part)")
    b.add_argument("--idf", action=argparse.BooleanOptionalAction, default=None,
                   help="searches weigh each query's lexicon by its clusters' inverse document frequencies in this "
                        "corpus (BM25's idf) unless `lens search --no-idf` says otherwise; on unless --no-idf "
                        "(docs/index-and-search.md#idf)")
    b.add_argument("--weights", type=build_weights_arg, default=None, metavar="LEX,DENSE|balanced",
                   help="the index's default query weights (`lens search --weights` overrides them per search): two "
                        "numbers (default 0.5,0.5), or 'balanced': each part weighted inversely to the spread of its "
                        "cosines over a sample of the corpus (see benchmarks/results/hybrid_weights.md)")
    b.set_defaults(func=cmd_index_build, command="index build")
    i = ix.add_parser("info", help="describe a saved index after checking its files (exit 2 if damaged)")
    i.add_argument("dir", type=Path)
    i.add_argument("--no-verify", action="store_true",
                   help="skip reading the data files to check their sizes and sha256 (faster on a large index)")
    i.add_argument("--json", action="store_true", help="print the summary as one JSON object (for scripts)")
    i.set_defaults(func=cmd_index_info, command="index info")
    mg = ix.add_parser("merge", help="merge saved indexes (same encoders, type and --top-m; no shared ids) into a "
                                     "new sharded index, without re-encoding")
    mg.add_argument("out", type=Path, help="index directory to write (new, or an index with --overwrite)")
    mg.add_argument("inputs", nargs="+", type=Path, help="two or more saved index directories")
    mg.add_argument("--overwrite", action="store_true",
                    help="replace an index already at OUT (atomically; refused without it; never one of the inputs)")
    mg.set_defaults(func=cmd_index_merge, command="index merge")
    ad = ix.add_parser("add", help="encode documents with the index's own encoders and add them to it (--upsert: "
                                   "replace those whose ids are there); saved again atomically")
    ad.add_argument("dir", type=Path, help="index directory (from lens index build)")
    ad.add_argument("--corpus", required=True,
                    help="the documents to add, in any form `lens index build --corpus` takes")
    ad.add_argument("--upsert", action="store_true",
                    help="replace documents whose ids are already in the index (else that is an error)")
    ad.add_argument("--model", default=None, help="the LENS model directory, if it has moved since the build")
    ad.add_argument("--batch-size", type=positive_int, default=16)
    ad.add_argument("--resume", action="store_true", help="continue an interrupted addition from its last chunk")
    ad.add_argument("--chunk-size", type=positive_int, default=64,
                    help="documents per saved chunk (the unit of --resume)")
    ad.set_defaults(func=cmd_index_add, command="index add")
    rm = ix.add_parser("remove", help="remove documents by id or by a metadata filter from an index; saved "
                                      "again atomically")
    rm.add_argument("dir", type=Path, help="index directory (from lens index build)")
    rm.add_argument("ids", nargs="*", help="document ids to remove")
    rm.add_argument("--ids-file", type=Path, default=None, help="a file of document ids, one per line")
    rm.add_argument("--filter", type=filter_item_arg, action="append", metavar="FIELD=VALUE",
                    help="remove the documents whose metadata matches instead (as lens search --filter; repeat "
                         "for more fields)")
    rm.add_argument("--dry-run", action="store_true", help="say how many documents (and which) would be removed, "
                                                           "and change nothing")
    rm.add_argument("--allow-empty", action="store_true",
                    help="allow a removal of every document, which leaves the index empty (else it is refused and "
                         "nothing is removed)")
    rm.set_defaults(func=cmd_index_remove, command="index remove", more_positionals="ids")

    s = subparsers.add_parser("search", help="search a hybrid index")
    s.add_argument("dir", type=Path, help="index directory (from lens index build)")
    s.add_argument("query", nargs="*", help="one or more queries (or --queries-file)")
    s.add_argument("-k", "--top-k", dest="k", type=positive_int, default=10,
                   help="hits per query (default %(default)s)")
    s.add_argument("--queries-file", type=Path, default=None,
                   help="queries to answer: a BEIR queries.jsonl[.gz] or directory, a .tsv of id<TAB>text, or a .txt "
                        "of one query a line (ids: 0-based line numbers)")
    s.add_argument("--run", type=Path, default=None, metavar="FILE",
                   help="write the hits as a TREC run file (qid Q0 docid rank score tag: trec_eval, ranx, pytrec_eval) "
                        "instead of printing them; e.g. -k 1000 --queries-file queries.jsonl --run lens.trec")
    s.add_argument("--run-tag", default="lens", help="the run file's last column (default %(default)s)")
    s.add_argument("--batch-size", type=positive_int, default=64, help="queries encoded and searched together")
    s.add_argument("--weights", type=query_weights_arg, default=None, metavar="LEX,DENSE[,BM25]",
                   help="LEX,DENSE query weights, each >= 0; negative weights are not supported (default: the "
                        "index's, see `lens index info`, and BM25 at 0.1 where the index keeps a BM25 part, as `lens "
                        "index build` does unless --no-bm25); a third, BM25, weighs that part; two leave it out. A "
                        "value starting with '-' must be written --weights=VALUE")
    s.add_argument("--depth", type=positive_int, default=None, metavar="N",
                   help="with a BM25 weight: candidates taken from each of the vectors and BM25 (default max(k, 100))")
    _add_idf_argument(s)
    s.add_argument("--instruction", default=None,
                   help="task instruction for the queries (default: the model's, a web search one)")
    s.add_argument("--task", default=None, metavar="NAME",
                   help="use this task's instruction for the queries (lens.instructions, e.g. scifact, nfcorpus, "
                        "esnli), as `lens bench beir` does for that dataset")
    s.add_argument("--model", default=None, help="override the LENS model directory recorded in the index")
    fmt = s.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print hits as one JSON array, a query per element")
    fmt.add_argument("--jsonl", action="store_true",
                     help="print hits as JSON lines, one query per line (for jq, or a file of many queries)")
    s.add_argument("--filter", type=filter_item_arg, action="append", metavar="FIELD=VALUE",
                   help="search only documents whose metadata FIELD equals VALUE (or, for a list field, holds it; "
                        "a dotted FIELD such as metadata.author reaches into nested objects); VALUE is read as JSON "
                        "when it parses (2020, true, [\"a\",\"b\"]: any of them), else as "
                        "text; repeat for more fields (all must match; the same field twice: either value)")
    s.add_argument("--collapse", default=None, metavar="FIELD",
                   help="the best hit of each value of the metadata FIELD, k of them: in an index of `lens data "
                        "passages`, --collapse document ranks documents by their best passage (MaxP), and --run "
                        "writes the documents' ids")
    s.add_argument("--collapse-depth", type=positive_int, default=None, metavar="N",
                   help="with --collapse: the most hits looked at per query for its k groups (default: 10000, or "
                        "4 x k if more); a query with fewer groups there gets those, with a warning")
    add_quantize_argument(s, "; a warning if the index was built otherwise")
    s.set_defaults(func=cmd_search, more_positionals="query")

    sv = subparsers.add_parser("serve", help="serve a hybrid index over HTTP as JSON (POST /search, GET "
                                             "/search?q=, /health, /info); a save by lens index add or remove is "
                                             "picked up")
    sv.add_argument("dir", type=Path, nargs="?", default=None, help="index directory (from lens index build)")
    sv.add_argument("--backends", type=_urls, default=None, metavar="URL,URL,...",
                    help="instead of DIR: be the front end of indexes other `lens serve DIR` processes serve (one "
                         "part of a corpus each, e.g. a machine's), searched as one index of all their documents: "
                         "queries are encoded here and every part scores them with the whole corpus's idf and BM25 "
                         "statistics, so the merged hits are one index's")
    sv.add_argument("--timeout", type=float, default=60.0,
                    help="with --backends: seconds one search may take, all its requests to the backends "
                         "together (default %(default)s)")
    sv.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s: this machine "
                                                        "only; 0.0.0.0 for every interface)")
    sv.add_argument("--port", type=_port, default=8080, help="TCP port (default %(default)s; 0: any free one)")
    sv.add_argument("--model", default=None, help="override the LENS model directory recorded in the index")
    add_quantize_argument(sv, "; a warning if the index was built otherwise")
    sv.add_argument("--max-queries", type=positive_int, default=256, help="queries one request may hold")
    sv.add_argument("--max-k", type=positive_int, default=1000, help="largest k a request may ask for")
    sv.add_argument("--weights", type=query_weights_arg, default=None, metavar="LEX,DENSE[,BM25]",
                    help="query weights of a request that gives none (default: the index's, and BM25 at 0.1 where "
                         "the index keeps a BM25 part); a third, BM25, weighs that part; two leave it out")
    _add_idf_argument(sv, " of a request that does not say (its \"idf\" field)")
    sv.set_defaults(func=cmd_serve)


def _add_idf_argument(parser: argparse.ArgumentParser, what: str = "") -> None:
    parser.add_argument("--idf", action=argparse.BooleanOptionalAction, default=None,
                        help=f"weigh the query lexicon{what} by its clusters' inverse document frequencies in the "
                             "index (BM25's idf; default: the index's setting, `lens index build --idf`)")

