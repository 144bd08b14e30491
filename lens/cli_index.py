"""`lens index`, `lens search` and `lens serve`: the commands over a saved hybrid index (their parsers are in
``lens.cli``). Heavy imports happen inside each command."""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import NoReturn

from lens.cmdline import check_quantize_workers

logger = logging.getLogger("lens")


def cmd_index_build(args: argparse.Namespace) -> None:
    import contextlib

    from lens.corpus import load_corpus
    from lens.indexing import build_saved, check_build_options, partial_dir
    from lens.search import model_reference
    from lens.sharding import EncoderSpec, torchrun_rank, worker_devices

    from index.store import check_save_target
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
    # a second build of the same output fails now, not after loading
    with DirectoryLock(args.output, "index") if first else contextlib.nullcontext():
        docs = load_corpus(args.corpus)
        check_build_options(args.workers, args.shards, args.top_m, len(docs))  # before the model loads
        if ranked is not None or args.workers > 1 or devices:
            encoder = EncoderSpec(str(args.model), args.dense)  # each worker (rank) loads its own, on its device
        else:
            from lens.hybrid import HybridEncoder

            encoder = HybridEncoder.from_pretrained(args.model, args.dense, quantize=args.quantize)
        info = {"lens_model": model_reference(args.model), "dense": args.dense, "corpus": str(args.corpus)}
        if args.quantize:
            info["lens_quantize"] = args.quantize  # `lens search` warns when the queries' differ
        try:
            manifest = build_saved(docs, args.output, encoder, index_type=args.index, chunk_size=args.chunk_size,
                                   batch_size=args.batch_size, resume=args.resume, info=info, workers=args.workers,
                                   devices=devices, shards=args.shards, top_m=args.top_m, weights=args.weights)
        except KeyboardInterrupt:
            _interrupted(partial_dir(args.output))
    if manifest is None:  # a torchrun rank other than 0: rank 0 wrote the index and reports it
        return
    shards = f", {len(manifest['shards'])} shards" if manifest.get("layout") == "sharded" else ""
    print(f"indexed {manifest['count']} documents into {args.output} ({manifest['mode']}, {args.index}{shards}) "
          f"in {time.perf_counter() - start:.1f}s")


def cmd_index_info(args: argparse.Namespace) -> None:
    import os

    from index.manifest import data_files, open_index, verify_stream
    from index.ondisk import DATA_FILE

    m, gen = open_index(args.dir)
    with gen:
        if not args.no_verify:  # damage is an error (exit 2), printed before any summary
            for name in data_files(m):
                verify_stream(gen.files.get(name), args.dir / name, m["files"][name])
        size = sum(os.fstat(f.fileno()).st_size for f in gen.files.values() if f is not None)
    print(f"{args.dir}: {m['count']} documents, {m.get('mode', 'hybrid')} ({m['index_type']}), "
          f"dims lexicon={m['lexicon_dim']} dense={m['dense_dim']}, weights={m['weights']}, "
          f"{size / 1e6:.1f} MB on disk")
    names = ", ".join(data_files(m)) if len(m["files"]) <= 3 else f"all {len(m['files'])} files"
    print(f"  checked: sizes and sha256 of {names} match the manifest" if not args.no_verify
          else "  NOT checked (--no-verify): sizes and sha256 of the data files")
    if m.get("layout") == "sharded":
        counts = ", ".join(f"{s['dir']}: {s['count']}" for s in m["shards"])
        print(f"  shards: {len(m['shards'])} searched together ({counts})")
    if any(name.split("/")[-1] == DATA_FILE for name in m["files"]):
        print(f"  inverted lists: {DATA_FILE}, memory-mapped when loaded (read-only)")
    if m.get("top_m") is not None:
        print(f"  top-m: each document keeps its {m['top_m']} heaviest lexicon weights (queries are not pruned)")
    for key, value in sorted((m.get("info") or {}).items()):
        print(f"  {key}: {value}")
    for key, value in sorted((m.get("fingerprint") or {}).items()):
        print(f"  fingerprint.{key}: {value}")


def cmd_index_merge(args: argparse.Namespace) -> None:
    from index.shards import merge_indexes

    manifest = merge_indexes(args.out, args.inputs)
    print(f"merged {len(args.inputs)} indexes into {args.out}: {manifest['count']} documents in "
          f"{len(manifest['shards'])} shards ({manifest['mode']}, {manifest['index_type']})")


def _interrupted(work: Path) -> NoReturn:
    """Re-raise Ctrl-C, saying where the chunks encoded so far are kept for ``--resume`` (when there are some)."""
    if any(work.glob("chunk-*.npz")):
        raise KeyboardInterrupt(f"the chunks encoded so far are kept in {work}; run the same command with "
                                "--resume to continue") from None
    raise KeyboardInterrupt


def cmd_index_add(args: argparse.Namespace) -> None:
    from lens.corpus import load_corpus
    from lens.indexing import adding_dir
    from lens.updating import add_documents

    start = time.perf_counter()
    docs = load_corpus(args.corpus)
    try:
        change = add_documents(args.dir, docs, upsert=args.upsert, model=args.model, batch_size=args.batch_size,
                               chunk_size=args.chunk_size, resume=args.resume)
    except KeyboardInterrupt:
        _interrupted(adding_dir(args.dir))
    replaced = f" ({change.replaced} replaced)" if change.replaced else ""
    print(f"added {change.added + change.replaced} documents to {args.dir}{replaced}: {change.count} documents now, "
          f"in {time.perf_counter() - start:.1f}s")


def cmd_index_remove(args: argparse.Namespace) -> None:
    from lens.updating import remove_documents

    ids = list(args.ids)
    if args.ids_file is not None:
        ids += [line.strip() for line in args.ids_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    flt = _filter_of(args.filter)
    if flt is not None and ids:
        raise ValueError("give ids (or --ids-file) or --filter, not both")
    if flt is None and not ids:
        raise ValueError("no document ids to remove: give them as arguments, in --ids-file (one per line), or "
                         "choose them by --filter FIELD=VALUE")
    if args.dry_run:
        from index import HybridIndex

        index = HybridIndex.load(args.dir)
        found = index.ids_matching(flt) if flt is not None else [i for i in dict.fromkeys(ids) if i in index]
        shown = ", ".join(found[:10]) + (f", ... ({len(found) - 10} more)" if len(found) > 10 else "")
        print(f"would remove {len(found)} of {len(index)} documents from {args.dir}" + (f": {shown}" if found else ""))
        return
    try:
        change = remove_documents(args.dir, None if flt is not None else ids, filter=flt)
    except KeyError as e:  # an unknown id: nothing was removed
        raise ValueError(e.args[0]) from None
    print(f"removed {change.removed} documents from {args.dir}: {change.count} documents left")


def build_weights_arg(value: str) -> tuple[float, float] | str:
    return weights_arg(value, balanced=True)


def weights_arg(value: str, balanced: bool = False) -> tuple[float, float] | str:
    from index.vectors import weight_pair, weights_spec

    try:
        return (weights_spec if balanced else weight_pair)(value, "--weights")
    except ValueError as e:  # argparse puts "argument --weights: " in front already
        raise argparse.ArgumentTypeError(str(e).removeprefix("--weights: ").removeprefix("--weights ")) from None


def filter_item_arg(value: str) -> tuple[str, object]:
    """``FIELD=VALUE`` of ``--filter``: the value read as JSON when it parses (2020, true, ["a", "b"], "007"), else
    as a string."""
    field, sep, raw = value.partition("=")
    if not sep or not field:
        raise argparse.ArgumentTypeError(f"expected FIELD=VALUE (e.g. source=wiki), got {value!r}")
    try:
        parsed = json.loads(raw)
    except ValueError:
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
    from lens.corpus import load_queries

    if args.queries_file is not None:
        if args.query:
            raise ValueError("give queries as arguments or in --queries-file, not both")
        queries = load_queries(args.queries_file)
        if not queries:
            raise ValueError(f"{args.queries_file} holds no queries")
        return queries
    if not args.query:
        raise ValueError("no query: give one or more as arguments, or a file of them with --queries-file")
    return {str(i): q for i, q in enumerate(args.query, 1)}


def cmd_search(args: argparse.Namespace) -> None:
    from lens.search import Searcher, check_queries, hit_records

    queries = _search_queries(args)
    check_queries(list(queries.values()))  # before the models load
    if args.run is not None:
        _run_target(args.run)
    searcher = Searcher.open(args.dir, args.model, args.quantize)
    _quantize_mismatch(searcher.index, args.quantize)
    results = searcher.search(list(queries.values()), k=args.k, weights=args.weights, instruction=args.instruction,
                              filter=_filter_of(args.filter), batch_size=args.batch_size,
                              show_progress_bar=len(queries) > args.batch_size)
    if args.run is not None:
        from lens.trec import write_run

        write_run(args.run, {qid: list(zip(h.ids, h.scores)) for qid, h in zip(queries, results)}, tag=args.run_tag)
        print(f"wrote the top {args.k} of {len(queries)} queries to {args.run} (TREC run, tag {args.run_tag})")
        return
    if args.json:
        print(json.dumps([{"query_id": qid, "query": q, "hits": hit_records(h)}
                          for (qid, q), h in zip(queries.items(), results)], indent=2, ensure_ascii=False))
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

    service = SearchService(args.dir, args.model, quantize=args.quantize, max_queries=args.max_queries,
                            max_k=args.max_k)
    _quantize_mismatch(service.searcher.index, args.quantize)
    service.search({"query": "warm up"})  # the first encode is slow: pay it before the first user
    try:
        server = make_server(service, args.host, args.port)
    except OSError as e:  # a port in use, a privileged port, an address not of this machine: say which
        raise ValueError(f"cannot listen on {args.host}:{args.port} ({e.strerror or e}); choose another --port "
                         "(0: any free one) or --host") from e
    host, port = server.server_address[:2]
    print(f"serving {args.dir} ({len(service.searcher.index)} documents) on http://{host}:{port} "
          f"(POST /search, GET /search?q=..., /health, /info); Ctrl-C stops", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopped")
    finally:
        server.server_close()
    return 0
