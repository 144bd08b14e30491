"""The ``lens`` command: its parser, the commands on texts and models, and the output set-up. The commands over a
saved index are in ``lens.cli_index``, the training ones in ``lens.cli_train``, ``lens data`` in ``lens.cli_data``.
Heavy imports happen inside each subcommand so ``lens --help`` is instant."""

from __future__ import annotations

import argparse
import logging
import sys
import warnings
from contextlib import contextmanager, nullcontext
from pathlib import Path

from lens.cli_index import (build_weights_arg, cmd_index_add, cmd_index_build, cmd_index_info, cmd_index_merge,
                            cmd_index_remove, cmd_search, cmd_serve, filter_item_arg, weights_arg)
from lens.cli_train import add_time_limit_argument, cmd_merge, cmd_mntp, cmd_train
from lens.cmdline import check_quantize_workers, positive_int

logger = logging.getLogger("lens")


class LazyChoices:
    """The names of a registry (``module:attribute``), imported only when argparse checks a value or prints help.

    So ``lens --help`` stays instant while every choice the CLI offers comes from the library's own registry.
    """

    def __init__(self, target: str):
        self.target = target

    def _names(self) -> list[str]:
        import importlib

        module, attr = self.target.split(":")
        return list(getattr(importlib.import_module(module), attr))

    def __contains__(self, value) -> bool:
        return value in self._names()

    def __iter__(self):
        return iter(self._names())

    def __str__(self) -> str:  # for "%(names)s" in a help string
        return ", ".join(self._names())


def _loss_expression(value: str) -> str:
    from lens.train.objectives import parse_loss

    try:
        parse_loss(value, where="--loss")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


# ---------------------------------------------------------------------------------------------- cluster-vocab
def cmd_cluster_vocab(args: argparse.Namespace) -> None:
    from lens.atomic import DirectoryLock
    from lens.model_dir import check_model_target
    from lens.vocab import cluster_vocab

    check_model_target(args.out)  # before the clustering: never over a folder that is not a model
    with DirectoryLock(args.out, "model directory"):  # a second writer of --out fails now, not after KMeans
        r = cluster_vocab(args.out, args.model, args.clusters, iterations=args.iterations, seed=args.seed,
                          backend=args.backend, exclude_special=args.exclude_special, compact=args.compact,
                          attention=args.attention, show_progress_bar=True)
    s = r.sizes
    print(
        f"wrote {args.out}: k={r.num_clusters} from {r.backbone} ({r.num_excluded} tokens excluded) in "
        f"{r.seconds:.1f}s; cluster sizes min {s['min']} / median {s['median']:g} / max {s['max']}, "
        f"{s['singletons']} singletons, {s['empty']} empty; final objective {r.objective:.6g}"
    )


# ---------------------------------------------------------------------------------------------- encode
def read_texts(path: Path) -> list[str]:
    """Texts from a .txt (one per line) or .jsonl (objects with "text" and optional "title", or strings).

    An object's text is ``lens.corpus.document_text(title, text)``, as everywhere else."""
    from lens.corpus import document_text, iter_json_lines

    from lens.corpus import decode_error_message, invalid_unicode

    if not path.is_file():
        raise FileNotFoundError(f"input file not found: {path}")
    if path.suffix == ".txt":
        try:
            return path.read_bytes().decode("utf-8-sig").splitlines()
        except UnicodeDecodeError as e:
            raise ValueError(decode_error_message(path, e)) from None
    if path.suffix != ".jsonl":
        raise ValueError(f"input must be a .txt (one text per line) or .jsonl file, got {path.name}")
    texts = []
    for n, obj in iter_json_lines(path):
        if isinstance(obj, str):
            texts.append(obj)
        elif isinstance(obj, dict) and isinstance(obj.get("text"), str):
            title = obj.get("title")
            texts.append(document_text(title if isinstance(title, str) else "", obj["text"]))
        else:
            raise ValueError(f'{path}:{n}: expected a string or an object with a "text" string')
        problem = invalid_unicode(texts[-1])
        if problem is not None:
            raise ValueError(f"{path}:{n}: the text holds {problem}; fix that line")
    return texts


def task_instruction(args: argparse.Namespace, query: bool) -> str | None:
    """The query instruction of ``--task NAME`` (``lens.instructions``), else ``--instruction``.

    ``--task`` applies to queries only and cannot be combined with ``--instruction``; an unknown name is an error
    listing the advanced tasks (``lens.instructions.ATEB_INSTRUCTIONS``)."""
    task = getattr(args, "task", None)
    if task is None:
        return args.instruction
    from lens.instructions import ATEB_INSTRUCTIONS, GENERIC, lookup

    if args.instruction is not None:
        raise ValueError("give --task NAME or --instruction TEXT, not both (--task sets the task's instruction)")
    if not query:
        raise ValueError("--task sets a query instruction: add --queries for encode, --query for explain "
                         "(documents, e.g. label documents, are encoded without one)")
    found = lookup(task)
    if found.source == GENERIC:
        known = ", ".join(sorted(ATEB_INSTRUCTIONS))
        raise ValueError(f"no instruction is known for task {task!r}; known: {known} (and the BEIR and training set "
                         "names of lens.instructions)")
    return found.text


def export_options(args: argparse.Namespace):
    """The ``--format`` of ``lens encode`` and its options, checked before the model loads (``lens.export``)."""
    from lens.export import FORMATS, ExportOptions, check_format

    fmt = check_format(args.format, args.output)
    given = {name: getattr(args, name) for name in ("scale", "field") if getattr(args, name) is not None}
    for name in given:
        if name not in fmt.options:
            takers = ", ".join(n for n, f in FORMATS.items() if name in f.options)
            raise ValueError(f"--{name} applies to --format {takers}, not to --format {args.format}")
    if args.kind != "lexicon" and (fmt.sparse or args.top_m is not None):
        what = f"--format {args.format}" if fmt.sparse else "--top-m"
        raise ValueError(f"{what} works on lexicon vectors (one weight per cluster); drop --kind {args.kind}")
    return fmt, ExportOptions(**given)


def read_records(path: Path, with_ids: bool) -> tuple[list[str] | None, list[str]]:
    """(ids, texts) of ``lens encode``'s input; ids only ``with_ids`` (the sparse formats).

    A .jsonl's ids are its records' ``_id`` / ``id`` (``lens.corpus.load_corpus``, which refuses duplicates); a
    .txt's are its 0-based line numbers."""
    if with_ids and path.suffix == ".jsonl" and path.is_file():
        from lens.corpus import load_corpus

        docs = load_corpus(path)
        return [d.id for d in docs], [d.full_text for d in docs]
    texts = read_texts(path)
    return ([str(i) for i in range(len(texts))] if with_ids else None), texts


def cmd_encode(args: argparse.Namespace) -> None:
    from lens.atomic import check_output_file
    from lens.encoder import LensEncoder
    from lens.export import LABEL_TOKENS, cluster_labels, write_export

    check_output_file(args.output, "--output")  # before any work: a directory or an unwritable place fails now
    fmt, options = export_options(args)  # so is a wrong --format, --scale or --field
    instruction = task_instruction(args, args.queries)  # before the model loads
    ids, texts = read_records(Path(args.input), fmt.sparse)
    if not texts:
        raise ValueError(f"{args.input} holds no texts")
    check_quantize_workers(args.quantize, args.workers > 1)
    encoder = LensEncoder.from_pretrained(args.model, quantize=args.quantize)
    kwargs = dict(batch_size=args.batch_size, show_progress_bar=True, normalize=not args.no_normalize,
                  output=args.kind)
    from lens.sharding import encode_texts

    vectors = encode_texts(encoder, texts, queries=args.queries, instruction=instruction, workers=args.workers,
                           **kwargs)
    if args.top_m is not None:
        from index.vectors import prune_top_m

        vectors = prune_top_m(vectors, args.top_m)
    labels = None
    if fmt.sparse:  # the labels of the model's clusters: the same for its queries and documents
        labels = cluster_labels([encoder.cluster_tokens(c, LABEL_TOKENS) for c in range(encoder.num_clusters)])
    write_export(args.output, args.format, vectors, ids, labels, texts, options)
    if fmt.sparse:
        kept = float((vectors > 0).sum(axis=1).mean())
        print(f"wrote {args.output}: {vectors.shape[0]} {args.format} records; on average {kept:.1f} of "
              f"{vectors.shape[1]} cluster weights per vector are non-zero")
    else:
        print(f"wrote {args.output}: {vectors.shape[0]} x {vectors.shape[1]} float32 ({args.kind})")


# ---------------------------------------------------------------------------------------------- explain
def cmd_explain(args: argparse.Namespace) -> None:
    from lens.encoder import LensEncoder

    instruction = task_instruction(args, args.query)
    encoder = LensEncoder.from_pretrained(args.model)
    for text in args.text:
        print(f"\n{text!r}")
        rows = encoder.explain(text, top_k=args.top_k, query=args.query, instruction=instruction)
        for r in rows:
            toks = " ".join(repr(t) for t in r.tokens)
            print(f"  cluster {r.cluster:>5}  weight {r.weight:6.3f}  {toks}")



# ---------------------------------------------------------------------------------------------- parser
def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a TCP port is an integer from 0 to 65535, got {value!r}")
    return port


def _clusters_arg(value: str):
    if value == "vocab":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of clusters or 'vocab', got {value!r}") from None


_QUANTIZE_HELP = "int8: the decoder's linear layers in int8 on CPU (faster; vectors close to float32's, not equal)"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lens", description="Lexicon-based text embeddings from causal LLMs.")
    talk = p.add_mutually_exclusive_group()
    talk.add_argument("-v", "--verbose", action="count", default=0, dest="verbosity",
                      help="log progress details (-vv: debug), and show what transformers says while loading models")
    talk.add_argument("-q", "--quiet", action="store_true",
                      help="no progress bars and no info logs; warnings and errors still print")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("cluster-vocab", help="cluster the LM head's rows into k lexicon dimensions")
    c.add_argument("--model", default="default", help="'default', a local HF directory or a .gguf file")
    c.add_argument("--clusters", type=_clusters_arg, default=4000,
                   help="k, the lexicon dimension (paper: 2000-8000), or 'vocab' for no clustering (one per token)")
    c.add_argument("--iterations", type=int, default=20, help="KMeans iterations")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--backend", choices=LazyChoices("lens.clustering:BACKENDS"), default="faiss", metavar="NAME",
                   help="KMeans implementation: %(choices)s (default %(default)s)")
    c.add_argument("--exclude-special", action="store_true", help="leave special tokens out of every cluster")
    c.add_argument("--attention", choices=LazyChoices("lens.attention:MODES"), default="bidirectional",
                   metavar="MODE", help="the decoder's attention, saved in the model: %(choices)s (default %(default)s;"
                   " the paper's). SmolLM2 trains better causal (benchmarks/results/training_study.md)")
    c.add_argument("--compact", action="store_true",
                   help="omit the centroids (they are the cluster means, recomputed from the verified backbone)")
    c.add_argument("--out", required=True, type=Path, help="directory to write (LensEncoder.from_pretrained loads it)")
    c.set_defaults(func=cmd_cluster_vocab)

    e = sub.add_parser("encode", help="encode texts to a .npy matrix (rows in input order) or a sparse export")
    e.add_argument("--model", default="default", help="a LENS directory (from cluster-vocab) or 'default'")
    e.add_argument("--input", required=True, type=Path,
                   help=".txt (one text per line; ids are 0-based line numbers) or .jsonl (ids from '_id' / 'id')")
    e.add_argument("--output", required=True, type=Path,
                   help="the file to write: .npy, or .jsonl for the sparse formats (checked before encoding)")
    e.add_argument("--format", choices=LazyChoices("lens.export:FORMATS"), default="npy", metavar="NAME",
                   help="%(choices)s (default %(default)s): pyserini = JsonVectorCollection with integer impacts, "
                        "qdrant = {id, indices, values} (also Milvus), rank-features = Elasticsearch/OpenSearch "
                        "rank_features; the sparse ones take lexicon vectors, and --queries writes queries in the "
                        "same shape")
    e.add_argument("--top-m", type=positive_int, default=None, metavar="M",
                   help="keep only the M heaviest clusters of each vector (after normalising; not renormalised)")
    e.add_argument("--scale", type=float, default=None,
                   help="--format pyserini: impact = round(weight * SCALE), entries rounding to 0 dropped "
                        "(default 100)")
    e.add_argument("--field", default=None,
                   help="--format rank-features: the rank_features field's name (default 'features')")
    e.add_argument("--queries", action="store_true", help="encode as queries, behind the instruction")
    e.add_argument("--instruction", default=None, help="task instruction for --queries")
    e.add_argument("--task", default=None, metavar="NAME",
                   help="use this task's instruction for --queries (lens.instructions, e.g. esnli, piqa, scifact)")
    e.add_argument("--kind", choices=["lexicon", "dense"], default="lexicon")
    e.add_argument("--batch-size", type=int, default=32)
    e.add_argument("--no-normalize", action="store_true", help="keep raw (not unit-length) vectors")
    e.add_argument("--workers", type=positive_int, default=1, metavar="N",
                   help="encode in N processes, each a contiguous share of the texts (CPU threads split between them)")
    e.add_argument("--quantize", choices=LazyChoices("lens.quantize:QUANTIZE_MODES"), default=None,
                   help=_QUANTIZE_HELP)
    e.set_defaults(func=cmd_encode)

    x = sub.add_parser("explain", help="print the heaviest clusters of texts' lexicon vectors")
    x.add_argument("text", nargs="+")
    x.add_argument("--model", default="default", help="a LENS directory (from cluster-vocab) or 'default'")
    x.add_argument("--top-k", type=int, default=10)
    x.add_argument("--query", action="store_true", help="encode as a query, behind the instruction")
    x.add_argument("--instruction", default=None)
    x.add_argument("--task", default=None, metavar="NAME",
                   help="use this task's instruction for --query (lens.instructions, e.g. esnli, piqa, scifact)")
    x.set_defaults(func=cmd_explain)

    ix = sub.add_parser("index", help="build or inspect a hybrid FAISS index").add_subparsers(
        dest="index_command", required=True)
    b = ix.add_parser("build", help="encode a corpus and save a hybrid index")
    b.add_argument("--corpus", required=True,
                   help="a BEIR directory, a corpus.jsonl[.gz], a JSONL of {id, text[, title]}, or 'pydoc-topics'")
    b.add_argument("--output", required=True, type=Path, help="index directory to write")
    b.add_argument("--model", default="default", help="LENS model directory or 'default'")
    b.add_argument("--dense", choices=LazyChoices("lens.hybrid:DENSE_KINDS"), default="minilm", metavar="KIND",
                   help="dense part: %(choices)s (default %(default)s; minilm = the packaged all-MiniLM-L6-v2, "
                        "lens = the LENS model's own dense vector)")
    b.add_argument("--index", choices=LazyChoices("index.factory:INDEX_TYPES"), default="flat", metavar="TYPE",
                   help="FAISS index type: %(choices)s (default %(default)s)")
    b.add_argument("--resume", action="store_true", help="continue an interrupted build from its last chunk")
    b.add_argument("--chunk-size", type=int, default=64, help="documents per saved chunk (the unit of --resume)")
    b.add_argument("--batch-size", type=int, default=16)
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
    b.add_argument("--quantize", choices=LazyChoices("lens.quantize:QUANTIZE_MODES"), default=None,
                   help=_QUANTIZE_HELP + "; recorded in the index")
    b.add_argument("--weights", type=build_weights_arg, default=None, metavar="LEX,DENSE|balanced",
                   help="the index's default query weights (`lens search --weights` overrides them per search): two "
                        "numbers (default 0.5,0.5), or 'balanced': each part weighted inversely to the spread of its "
                        "cosines over a sample of the corpus (see benchmarks/results/hybrid_weights.md)")
    b.set_defaults(func=cmd_index_build, command="index build")
    i = ix.add_parser("info", help="describe a saved index after checking its files (exit 2 if damaged)")
    i.add_argument("dir", type=Path)
    i.add_argument("--no-verify", action="store_true",
                   help="skip reading the data files to check their sizes and sha256 (faster on a large index)")
    i.set_defaults(func=cmd_index_info, command="index info")
    mg = ix.add_parser("merge", help="merge saved indexes (same encoders, type and --top-m; no shared ids) into a "
                                     "new sharded index, without re-encoding")
    mg.add_argument("out", type=Path, help="index directory to write (new or an index; replaced atomically)")
    mg.add_argument("inputs", nargs="+", type=Path, help="two or more saved index directories")
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
    rm.set_defaults(func=cmd_index_remove, command="index remove", more_positionals="ids")

    s = sub.add_parser("search", help="search a hybrid index")
    s.add_argument("dir", type=Path, help="index directory (from lens index build)")
    s.add_argument("query", nargs="*", help="one or more queries (or --queries-file)")
    s.add_argument("-k", type=positive_int, default=10)
    s.add_argument("--queries-file", type=Path, default=None,
                   help="queries to answer: a BEIR queries.jsonl[.gz] or directory, or a .tsv of id<TAB>text")
    s.add_argument("--run", type=Path, default=None, metavar="FILE",
                   help="write the hits as a TREC run file (qid Q0 docid rank score tag: trec_eval, ranx, pytrec_eval) "
                        "instead of printing them; e.g. -k 1000 --queries-file queries.jsonl --run lens.trec")
    s.add_argument("--run-tag", default="lens", help="the run file's last column (default %(default)s)")
    s.add_argument("--batch-size", type=positive_int, default=64, help="queries encoded and searched together")
    s.add_argument("--weights", type=weights_arg, default=None,
                   help="LEX,DENSE query weights, each >= 0; negative weights are not supported (default: the "
                        "index's: see `lens index info`). A value starting with '-' must be written --weights=VALUE")
    s.add_argument("--instruction", default=None, help="task instruction for the query")
    s.add_argument("--model", default=None, help="override the LENS model directory recorded in the index")
    s.add_argument("--json", action="store_true", help="print hits as JSON")
    s.add_argument("--filter", type=filter_item_arg, action="append", metavar="FIELD=VALUE",
                   help="search only documents whose metadata FIELD equals VALUE (or, for a list field, holds it); "
                        "VALUE is read as JSON when it parses (2020, true, [\"a\",\"b\"]: any of them), else as "
                        "text; repeat for more fields (all must match; the same field twice: either value)")
    s.add_argument("--quantize", choices=LazyChoices("lens.quantize:QUANTIZE_MODES"), default=None,
                   help=_QUANTIZE_HELP + "; a warning if the index was built otherwise")
    s.set_defaults(func=cmd_search, more_positionals="query")

    sv = sub.add_parser("serve", help="serve a hybrid index over HTTP as JSON (POST /search, GET /search?q=, "
                                      "/health, /info); a save by lens index add or remove is picked up")
    sv.add_argument("dir", type=Path, help="index directory (from lens index build)")
    sv.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s: this machine "
                                                        "only; 0.0.0.0 for every interface)")
    sv.add_argument("--port", type=_port, default=8080, help="TCP port (default %(default)s; 0: any free one)")
    sv.add_argument("--model", default=None, help="override the LENS model directory recorded in the index")
    sv.add_argument("--quantize", choices=LazyChoices("lens.quantize:QUANTIZE_MODES"), default=None,
                    help=_QUANTIZE_HELP + "; a warning if the index was built otherwise")
    sv.add_argument("--max-queries", type=positive_int, default=256, help="queries one request may hold")
    sv.add_argument("--max-k", type=positive_int, default=1000, help="largest k a request may ask for")
    sv.set_defaults(func=cmd_serve)

    bench = sub.add_parser("bench", help="retrieval benchmarks").add_subparsers(dest="bench_command", required=True)
    bb = bench.add_parser("beir", help="BEIR-style evaluation of LENS against BM25, MiniLM and their fusions")
    _lazy_arguments(bb, "lens.eval.beir")
    bb.set_defaults(func=_lazy_run("lens.eval.beir"), command="bench beir")
    bt = bench.add_parser("ateb", help="advanced tasks as retrieval (ATEB / RAR-b development sets): reasoning, NLI, "
                                       "factuality, safety preference")
    _lazy_arguments(bt, "lens.eval.ateb")
    bt.set_defaults(func=_lazy_run("lens.eval.ateb"), command="bench ateb")
    ba = bench.add_parser("ablation", help="the paper's ablations on SciFact (clusters; attention x pooling)")
    _lazy_arguments(ba, "lens.eval.ablations")
    ba.set_defaults(func=_lazy_run("lens.eval.ablations"), command="bench ablation")
    bs = bench.add_parser("significance", help="paired t-test and randomization test between the systems of a saved "
                                               "`lens bench beir` run (its per_query.json; encodes nothing)")
    _lazy_arguments(bs, "lens.eval.significance")
    bs.set_defaults(func=_lazy_run("lens.eval.significance"), command="bench significance")
    br = bench.add_parser("runs", help="judge TREC run files against qrels (nDCG@10, MAP, recall, ...) and test each "
                                       "against a baseline, query by query (encodes nothing)")
    _lazy_arguments(br, "lens.eval.runs")
    br.set_defaults(func=_lazy_run("lens.eval.runs"), command="bench runs")
    bx = bench.add_parser("lexicality", help="how much of a lexicon vector is exact match and how much expansion, "
                                             "and what each part retrieves on its own")
    _lazy_arguments(bx, "lens.eval.lexicality")
    bx.set_defaults(func=_lazy_run("lens.eval.lexicality"), command="bench lexicality")
    bq = bench.add_parser("sts", help="STS Spearman of the lexicon and dense vectors against MiniLM, on STS-B, SICK-R "
                                      "or any sentence1/sentence2/score TSV; --by-stratum per group of pairs")
    _lazy_arguments(bq, "lens.eval.sts_bench")
    bq.set_defaults(func=_lazy_run("lens.eval.sts_bench"), command="bench sts")

    t = sub.add_parser("train", help="fine-tune a LENS model (LoRA + cluster head) on JSONL pairs; runs unchanged "
                                     "under torchrun / accelerate launch (data parallel)")
    t.add_argument("--config", type=Path, default=None,
                   help="a training config JSON (stages, LoRA, optimiser); the flags below override it")
    t.add_argument("--out", required=True, type=Path, help="output directory: the trained LENS model + logs")
    t.add_argument("--model", default=None, help="LENS clustering directory to start from (default: 'default')")
    t.add_argument("--data", nargs="+", default=None, help="JSONL(.gz) training files (one stage, without --config)")
    loss = t.add_argument("--loss", type=_loss_expression, default=None,
                          help="a loss name (%(names)s) or a weighted sum such as infonce+0.5*bce")
    loss.names = LazyChoices("lens.train.objectives:OBJECTIVES")
    t.add_argument("--steps", type=int, default=None)
    t.add_argument("--epochs", type=float, default=None)
    t.add_argument("--lora-layers", type=int, default=None, help="train the top N layers only (cache the rest)")
    t.add_argument("--batch-size", type=int, default=None)
    t.add_argument("--lr", type=float, default=None)
    t.add_argument("--seed", type=int, default=None)
    t.add_argument("--threads", type=int, default=None)
    t.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present; under torchrun "
                                                   "each process takes cuda:LOCAL_RANK)")
    t.add_argument("--cache-chunk", type=int, default=None, metavar="N",
                   help="cached contrastive loss (GradCache): embed N texts at a time, so a big batch needs the "
                        "activation memory of N texts only")
    t.add_argument("--prefix-cache", type=Path, default=None,
                   help="where to keep the frozen layers' outputs (default: OUT/prefix-cache); share it between runs")
    t.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint")
    add_time_limit_argument(t)
    t.set_defaults(func=cmd_train)

    w = sub.add_parser("mntp", help="MNTP warm-up (LLM2Vec): adapt the decoder to bidirectional attention by "
                                    "predicting masked tokens' clusters, before `lens train` (torchrun: "
                                    "data parallel)")
    w.add_argument("--out", required=True, type=Path, help="directory to write: the warmed, merged LENS model")
    w.add_argument("--model", default=None, help="LENS clustering directory to start from (default: 'default')")
    w.add_argument("--data", nargs="+", type=Path, default=None,
                   help="training JSONL(.gz) files; their distinct documents are the masked texts")
    w.add_argument("--config", type=Path, default=None, help="an mntp_config.json; the flags override it")
    w.add_argument("--steps", type=positive_int, default=None, help="optimiser steps (default 100)")
    w.add_argument("--batch-size", type=positive_int, default=None, help="texts per step (default 8)")
    w.add_argument("--max-length", type=positive_int, default=None, help="tokens per text (default 128)")
    w.add_argument("--mask-rate", type=float, default=None, help="share of a text's tokens masked (default 0.2)")
    w.add_argument("--lr", type=float, default=None, help="LoRA learning rate (default 2e-4)")
    w.add_argument("--max-texts", type=positive_int, default=None, help="a seeded sample of the documents (20000)")
    w.add_argument("--seed", type=int, default=None)
    w.add_argument("--threads", type=positive_int, default=None)
    w.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present; under torchrun each "
                                                  "process takes cuda:LOCAL_RANK)")
    w.add_argument("--checkpoint-every", type=positive_int, default=None, help="steps between checkpoints (100)")
    w.add_argument("--resume", action="store_true",
                   help="continue from OUT/checkpoint (with OUT's saved settings unless --config is given)")
    w.add_argument("--micro-batch-size", type=positive_int, default=None,
                   help="texts per forward on a process (default: its whole share of the batch); same gradients")
    w.add_argument("--gradient-checkpointing", action="store_true",
                   help="recompute each layer in the backward pass: less memory, more time (large backbones)")
    add_time_limit_argument(w)
    w.set_defaults(func=cmd_mntp)

    m = sub.add_parser("merge", help="fold a trained model's LoRA adapter into a standalone directory")
    m.add_argument("model", help="a trained LENS directory (with adapter/)")
    m.add_argument("--out", required=True, type=Path, help="directory to write: merged backbone + clusters + config")
    m.set_defaults(func=cmd_merge)

    from lens.cli_data import add_data_parser

    add_data_parser(sub)
    return p


def _lazy_arguments(parser: argparse.ArgumentParser, module: str) -> None:
    import importlib

    importlib.import_module(module).add_arguments(parser)  # the bench modules import heavy code lazily


def _lazy_run(module: str):
    def func(args: argparse.Namespace) -> None:
        import importlib

        rc = importlib.import_module(module).run(args)
        if rc:
            raise SystemExit(rc)

    return func


# options whose value may start with '-' (argparse would take "-1,2" for an option): "--opt -1,2" -> "--opt=-1,2"
_DASH_VALUE_OPTIONS = ("--weights",)


def _join_dash_values(argv: list[str]) -> list[str]:
    import re

    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] in _DASH_VALUE_OPTIONS and i + 1 < len(argv) and re.match(r"-[\d.]", argv[i + 1]):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


# ---------------------------------------------------------------------------------------------- output
OWN_LOGGERS = ("lens", "index")  # -v shows their INFO records, -vv their DEBUG ones; other libraries' stay hidden


def _verbosity(args: argparse.Namespace) -> int:
    """-1 with --quiet, 0 normally, 1 with -v (or a subcommand's own -v), 2 with -vv."""
    if args.quiet:
        return -1
    return max(args.verbosity, int(bool(getattr(args, "verbose", False))))


@contextmanager
def command_output(verbosity: int):
    """What a command prints on stderr besides its result, restored on exit (tests run ``main`` many times).

    Normally: our warnings and errors, and the progress bars the command asks for; transformers' and PEFT's
    load chatter is hidden (``lens.backbone.quiet_loading`` at each load, and their own warnings for the whole
    command). ``-v``: our INFO logs, and transformers' output back; ``-vv``: our DEBUG logs, other libraries'
    INFO logs. ``-q``: no progress bar at all.
    """
    from lens.backbone import hide_library_warnings

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    level = logging.DEBUG if verbosity >= 2 else logging.INFO if verbosity == 1 else logging.WARNING
    loggers = [logging.getLogger(name) for name in OWN_LOGGERS] + [logging.getLogger()]
    saved = [lg.level for lg in loggers]
    for lg in loggers[:-1]:
        lg.setLevel(level)
    if verbosity >= 2:
        loggers[-1].setLevel(logging.INFO)
    try:
        with warnings.catch_warnings():
            if verbosity <= 0:
                hide_library_warnings()
            with no_progress_bars() if verbosity < 0 else logs_above_bars():
                yield
    finally:
        for lg, lvl in zip(loggers, saved):
            lg.setLevel(lvl)


def logs_above_bars():
    """Log lines printed above a running progress bar instead of through it (``tqdm.write``), when the root
    logger prints to the console (under pytest it does not, and nothing changes)."""
    from tqdm.contrib.logging import logging_redirect_tqdm

    console = any(isinstance(h, logging.StreamHandler) and h.stream in (sys.stdout, sys.stderr)
                  for h in logging.getLogger().handlers)
    return logging_redirect_tqdm() if console else nullcontext()


@contextmanager
def no_progress_bars():
    """Every tqdm bar disabled, whatever its caller asked for (ours, transformers', bm25s'), restored on exit."""
    from tqdm import std

    original = std.tqdm.__dict__["__init__"]
    init = std.tqdm.__init__

    def disabled(self, *args, **kwargs):
        kwargs["disable"] = True
        init(self, *args, **kwargs)

    std.tqdm.__init__ = disabled
    try:
        yield
    finally:
        std.tqdm.__init__ = original


def _storage_oserror(e: OSError) -> bool:
    from lens.atomic import STORAGE_ERRNOS

    return e.errno in STORAGE_ERRNOS


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``parse_args``, except that a command whose positional list may be empty (``lens search DIR [QUERY ...]``,
    ``lens index remove DIR [ID ...]``, marked by ``more_positionals``) also takes the words after its options
    (``lens search DIR -k 3 q1 q2``): argparse alone gives a ``*`` positional nothing once an option follows the
    one before it."""
    args, extras = parser.parse_known_args(argv)
    dest = getattr(args, "more_positionals", None)
    if extras and (dest is None or any(e.startswith("-") for e in extras)):
        parser.error(f"unrecognized arguments: {' '.join(extras)}")
    if extras:
        getattr(args, dest).extend(extras)
    return args


def main(argv: list[str] | None = None) -> int:
    from lens.atomic import StorageError, storage_error
    from lens.extras import MissingExtraError
    try:
        args = _parse(build_parser(), _join_dash_values(list(sys.argv[1:] if argv is None else argv)))
    except SystemExit as e:  # argparse printed the usage error (or --help); its code is ours
        return e.code if isinstance(e.code, int) else 2
    try:
        with command_output(_verbosity(args)):
            code = args.func(args)
    except (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, StorageError, ValueError,
            TypeError, NotImplementedError, MissingExtraError) as e:
        print(f"lens {args.command}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a full disk or a permission met outside the library's writers: still one line
        if not _storage_oserror(e):
            raise
        print(f"lens {args.command}: error: {storage_error(e.filename or '(unknown path)', e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print(f"lens {args.command}: interrupted" + (f": {e}" if str(e) else ""), file=sys.stderr)
        return 130
    return code if isinstance(code, int) else 0  # a command's own status (75: stopped, resumable), else 0


if __name__ == "__main__":
    sys.exit(main())
