"""Indexes on separate machines searched as one (``lens serve --backends``, ``index.remote``): what the front end
costs against one index holding every document, and whether its answers are that index's.

A corpus is split into ``--parts`` contiguous parts; each part is indexed with the shipped default
(``lens index build``'s defaults: LENS lexicon + MiniLM, idf and a BM25 part; cached under ``--cache-dir``) and the
parts merged into one index (``lens index merge``: every document, each part's corpus casing table). Each part is
served by ``lens.serve`` on a local port, and a front end (``SearchService(None, backends=...)``) searches them;
the merged index is searched by ``SearchService`` in the process. After a warm-up pass, each query is
searched alone by both, taking turns query by query. Reported: median and 95th percentile latency, their ratio, and
how many queries got the same hits and scores (float32, exactly) from the front end as from the merged index.

Here every part runs on this machine, in this process's threads: this measures the exchange (one encode on the
front end, then per part a BM25 statistics, a BM25 maximum and a search request over HTTP), not what spreading a
corpus over machines saves.

    python benchmarks/remote_search.py --corpus adi --parts 2 --threads 2
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from pathlib import Path

from _common import finish, start
from serve_speed import add_search_arguments, built_index, corpus_and_queries, interleaved, summary
from lens.cli_args import Parser


def render(results: dict) -> list[str]:
    meta = results["_meta"]
    lines = ["# Indexes on separate machines searched as one: the front end against one index", "",
             f"- Command: `{meta['command']}`", f"- Machine: {meta['machine']}",
             f"- Corpus: {meta['documents']:,} documents of `{meta['corpus']}` in {meta['parts']} contiguous parts "
             f"({', '.join(str(n) for n in meta['part_sizes'])} documents), each indexed by `lens index build` with the "
             f"shipped default ({meta['settings']}) and served by `lens.serve` on 127.0.0.1; the parts merged into one "
             f"index (`lens index merge`). {meta['queries']} of its queries, each searched alone {meta['repeat']}x, k {meta['k']}.",
             "- One index: `SearchService(merged).search` in the process. Front end: `SearchService(None, "
             "backends=parts).search` in the process, which encodes the query once and asks every part over HTTP "
             "(BM25 statistics, BM25 maximum, search).", "",
             "| path | requests | p50 ms | p95 ms | p50 / one index |", "|---|---:|---:|---:|---:|"]
    base = results["one_index"]["p50_ms"]
    for key, name in (("one_index", "one index of every document"),
                      ("front_end", f"front end over {meta['parts']} parts")):
        r = results[key]
        lines.append(f"| {name} | {r['requests']} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | "
                     f"{r['p50_ms'] / base:.2f} |")
    same = results["same_answers"]
    lines += ["", f"Same hits and scores (ids, float32 scores and metadata, in order) as the one index: "
                  f"{same['same']} of {same['queries']} queries."]
    for note in meta.get("notes") or []:
        lines += ["", f"- {note}"]
    return lines


def write_parts(corpus: Path, out: Path, parts: int) -> list[Path]:
    """``corpus`` cut into ``parts`` contiguous JSONL files (ids, titles and texts as they are)."""
    from lens.corpus import load_corpus

    docs = load_corpus(corpus)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for p in range(parts):
        path = out / f"part-{p}.jsonl"
        with open(path, "w", encoding="utf-8") as f:
            for d in docs[p * len(docs) // parts:(p + 1) * len(docs) // parts]:
                f.write(json.dumps({"_id": d.id, "title": d.title, "text": d.text}, ensure_ascii=False) + "\n")
        files.append(path)
    return files


def main(argv=None) -> int:
    p = Parser(description=__doc__.split("\n")[0])
    add_search_arguments(p, "remote")
    p.add_argument("--parts", type=int, default=2)
    args = start(p, argv, "remote_search", render, level=logging.WARNING, fmt=None)
    if args is None:  # --markdown-only
        return 0
    from lens.cli import main as lens_main
    from lens.serve import SearchService, make_server

    corpus, queries = corpus_and_queries(args)
    work = args.cache_dir / Path(str(args.corpus)).name / f"{args.parts}-parts"
    dirs = [built_index(source, work / f"part-{i}")
            for i, source in enumerate(write_parts(corpus, work / "corpus", args.parts))]
    merged = work / "merged"  # one index of every document, as the parts make it (their own casing tables)
    if not (merged / "manifest.json").is_file() and lens_main(["-q", "index", "merge", str(merged), *map(str, dirs)]):
        raise SystemExit("lens index merge failed")
    whole = SearchService(merged)
    part_services = [SearchService(d) for d in dirs]  # each loads its own encoders, as on its own machine
    servers = [make_server(s, "127.0.0.1", 0) for s in part_services]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        urls = ["http://127.0.0.1:%d" % s.server_address[1] for s in servers]
        front = SearchService(None, backends=urls)
        same = 0
        for q in queries:  # warm-up, and the answers compared
            a, b = (s.search({"query": q, "k": args.k})["results"][0]["hits"] for s in (whole, front))
            same += a == b
        one, remote = interleaved([lambda q: whole.search({"query": q, "k": args.k}),
                                   lambda q: front.search({"query": q, "k": args.k})], queries, args.repeat)
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
    index = whole.searcher.index
    settings = "LENS lexicon + MiniLM" + (", idf" if index.idf else "") + (
        ", its BM25 part at weight 0.1" if getattr(index, "has_bm25", False) else "") + ", flat"
    results = {"one_index": summary(one), "front_end": summary(remote),
               "same_answers": {"queries": len(queries), "same": same}}
    return finish(args, results, render, corpus=str(args.corpus), documents=len(index), parts=args.parts,
                  part_sizes=[len(s.searcher.index) for s in part_services], settings=settings,
                  queries=len(queries), repeat=args.repeat, k=args.k)


if __name__ == "__main__":
    sys.exit(main())
