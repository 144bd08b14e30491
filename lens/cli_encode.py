"""`lens cluster-vocab`, `lens encode` and `lens explain`: the commands that make a model directory and turn texts
into vectors, and their parsers (``register``). Heavy imports happen inside each command."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Sequence

from lens.cli_args import add_overwrite_argument, add_quantize_argument, add_registry_argument
from lens.cmdline import check_quantize_workers, positive_int

logger = logging.getLogger("lens")


# ---------------------------------------------------------------------------------------------- cluster-vocab
def cmd_cluster_vocab(args: argparse.Namespace) -> None:
    from lens.atomic import DirectoryLock
    from lens.model_dir import check_model_output
    from lens.vocab import cluster_vocab

    check_model_output(args.out, [args.model], overwrite=args.overwrite)  # before the clustering
    with DirectoryLock(args.out, "model directory"):  # a second writer of --out fails now, not after KMeans
        r = cluster_vocab(args.out, args.model, args.clusters, iterations=args.iterations, seed=args.seed,
                          backend=args.backend, exclude_special=args.exclude_special, compact=args.compact,
                          attention=args.attention, text_normalization=args.text_normalization,
                          term_floor=args.term_floor, logit_position=args.logit_position,
                          term_channel=args.term_channel, echo=args.echo, show_progress_bar=True)
    s = r.sizes
    print(
        f"wrote {args.out}: k={r.num_clusters} from {r.backbone} ({r.num_excluded} tokens excluded) in "
        f"{r.seconds:.1f}s; cluster sizes min {s['min']} / median {s['median']:g} / max {s['max']}, "
        f"{s['singletons']} singletons, {s['empty']} empty; final objective {r.objective:.6g}"
    )


# ---------------------------------------------------------------------------------------------- encode
def read_numbered_texts(path: Path) -> list[tuple[str, str]]:
    """(id, text) of a .txt (one text per line) or a .jsonl without ids (objects with "text" and optional "title",
    or strings): each text's id is its 0-based line number, blank .jsonl lines skipped but counted, so an id points
    at the line in both. A record with an ``_id`` / ``id`` is refused (its id would be lost): give every record one.

    An object's text is ``lens.corpus.document_text(title, text)``, as everywhere else."""
    from lens.corpus import document_text, invalid_unicode, iter_json_lines, read_text_lines

    if path.is_dir():
        raise IsADirectoryError(f"input {path} is a directory: give a .txt or .jsonl[.gz] file")
    if not path.is_file():
        raise FileNotFoundError(f"input file not found: {path}")
    if path.suffix == ".txt":
        return [(str(i), line) for i, line in enumerate(read_text_lines(path))]
    if not path.name.endswith((".jsonl", ".jsonl.gz")):
        raise ValueError(f"input must be a .txt (one text per line) or .jsonl[.gz] file, got {path.name}")
    texts = []
    for n, obj in iter_json_lines(path):
        if isinstance(obj, str):
            text = obj
        elif isinstance(obj, dict) and isinstance(obj.get("text"), str):
            if _has_id(obj):
                raise ValueError(f"{path}:{n}: this record has an id but the first record has none, so the texts "
                                 "are numbered by line and its id would be lost: give every record an '_id' (or "
                                 "none)")
            title = obj.get("title")
            text = document_text(title if isinstance(title, str) else "", obj["text"])
        else:
            raise ValueError(f'{path}:{n}: expected a string or an object with a "text" string')
        problem = invalid_unicode(text)
        if problem is not None:
            raise ValueError(f"{path}:{n}: the text holds {problem}; fix that line")
        texts.append((str(n - 1), text))
    return texts


def task_instruction(args: argparse.Namespace, query: bool) -> str | None:
    """The query instruction of ``--task NAME`` (``lens.instructions``), else ``--instruction``.

    ``--task`` applies to queries only and cannot be combined with ``--instruction``; an unknown name is an error
    listing the advanced tasks (``lens.instructions.ATEB_INSTRUCTIONS``)."""
    task = getattr(args, "task", None)
    if task is None:
        if args.instruction is not None and not query:
            raise ValueError("--instruction is a query instruction: add --queries for encode, --query for explain "
                             "(documents are encoded without one)")
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


def read_records(path: Path) -> Sequence:
    """The texts of ``lens encode``'s input with their ids, as ``lens.encode_job.encode_to_file`` reads them.

    A .jsonl's ids are its records' ``_id`` / ``id`` when its first record has one: its documents as
    ``lens.corpus.open_corpus`` gives them (which refuses a repeated id; a plain .jsonl is read where it lies, a
    chunk at a time); else, as a .txt's, its texts' 0-based line numbers (``read_numbered_texts``)."""
    from lens.encode_job import TextRecord

    if path.name.endswith((".jsonl", ".jsonl.gz")) and path.is_file() and _first_has_id(path):
        from lens.corpus import open_corpus

        return open_corpus(path)
    return [TextRecord(i, text) for i, text in read_numbered_texts(path)]


def _first_has_id(path: Path) -> bool:
    from lens.corpus import iter_json_lines

    for _, obj in iter_json_lines(path):
        return isinstance(obj, dict) and _has_id(obj)
    return False


def _has_id(record: dict) -> bool:
    """Whether a JSONL record names its id (``_id``, or ``id``), as a corpus record does."""
    return "_id" in record or "id" in record


def _check_encode_output(input_path: Path, output: Path, overwrite: bool) -> None:
    """Refuse an --output that is the --input (always) or an existing file (unless --overwrite), before any work."""
    if output.exists() and input_path.exists() and output.resolve() == input_path.resolve():
        raise ValueError(f"--output {output} is the --input: writing would replace the texts; choose another file")
    if output.is_file() and not overwrite:
        raise FileExistsError(f"--output {output} exists: pass --overwrite to replace it, or choose another file")


def cmd_encode(args: argparse.Namespace) -> None:
    from lens.atomic import check_output_file
    from lens.encode_job import CHUNK_SIZE, encode_to_file
    from lens.encoder import LensEncoder
    from lens.export import LABEL_TOKENS, cluster_labels

    check_output_file(args.output, "--output")  # before any work: a directory or an unwritable place fails now
    _check_encode_output(Path(args.input), Path(args.output), args.overwrite)  # and a file a user has there
    fmt, options = export_options(args)  # so is a wrong --format, --scale or --field
    instruction = task_instruction(args, args.queries)  # before the model loads
    docs = read_records(Path(args.input))
    if not len(docs):
        raise ValueError(f"{args.input} holds no texts")
    check_quantize_workers(args.quantize, args.workers > 1)
    device = getattr(args, "device", None)
    if device is not None:
        from lens.sharding import check_devices

        device = check_devices([device])[0]  # a wrong name or a missing GPU fails before the model loads
    if device is not None and device != "cpu" and args.workers > 1:
        raise ValueError(f"--workers splits the texts between CPU processes; with --device {device} leave --workers "
                         "out (one process encodes on the device)")
    encoder = LensEncoder.from_pretrained(args.model, quantize=args.quantize, device=device)
    labels = None
    if fmt.sparse:  # the labels of the model's clusters: the same for its queries and documents
        labels = cluster_labels([encoder.cluster_tokens(c, LABEL_TOKENS) for c in range(encoder.num_clusters)])
    done = encode_to_file(encoder, docs, args.output, args.format, labels=labels, options=options,
                          queries=args.queries, instruction=instruction, kind=args.kind,
                          normalize=not args.no_normalize, top_m=args.top_m, batch_size=args.batch_size,
                          workers=args.workers, chunk_size=args.chunk_size or CHUNK_SIZE,
                          resume=args.resume)
    if done.entries is not None:
        print(f"wrote {args.output}: {done.rows} {args.format} records; on average {done.entries / done.rows:.1f} of "
              f"{done.dim} cluster weights per record")
    else:
        print(f"wrote {args.output}: {done.rows} x {done.dim} float32 ({args.kind})")
    if done.blank:
        logger.warning("%d of %d texts are blank (empty or whitespace): their vectors are all zero and match "
                       "nothing", done.blank, done.rows)
    rounded = (done.empty or 0) - done.blank  # records a text gave weight to, all of it rounded away
    if rounded > 0:
        hint = " (every weight rounded to 0: raise --scale)" if args.format == "pyserini" else ""
        logger.warning("%d of %d records of non-blank texts hold no weight%s; they match nothing", rounded,
                       done.rows, hint)


# ---------------------------------------------------------------------------------------------- explain
def cmd_explain(args: argparse.Namespace) -> None:
    from lens.encoder import LensEncoder

    match = args.match is not None
    instruction = task_instruction(args, args.query or match)
    encoder = LensEncoder.from_pretrained(args.model)
    for text in args.text:
        print(f"\n{text!r}")
        if match:
            why = encoder.explain_match(text, args.match, top_k=args.top_k, instruction=instruction)
            print(f"  lexicon cosine {why.score:.4f} with {args.match!r}; " + (
                "its heaviest shared clusters:" if why.clusters else "no cluster is weighed by both"))
            for r in why.clusters:
                toks = " ".join(repr(t) for t in r.tokens)
                print(f"  cluster {r.cluster:>5}  adds {r.contribution:6.4f}  (query {r.query_weight:.3f}, "
                      f"document {r.document_weight:.3f})  {toks}")
            continue
        rows = encoder.explain(text, top_k=args.top_k, query=args.query, instruction=instruction)
        for r in rows:
            toks = " ".join(repr(t) for t in r.tokens)
            print(f"  cluster {r.cluster:>5}  weight {r.weight:6.3f}  {toks}")


# ---------------------------------------------------------------------------------------------- parsers
def _clusters_arg(value: str):
    if value == "vocab":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of clusters or 'vocab', got {value!r}") from None


def cmd_convert(args: argparse.Namespace) -> None:
    from lens.model_dir import check_model_output, convert_released

    if args.out.resolve().is_relative_to(args.src.resolve()):
        raise ValueError(f"--out {args.out} is inside the released folder {args.src}: keep the download as it came "
                         "(a re-download or an update would meet files it does not know); choose a folder beside it")
    check_model_output(args.out, [args.src], overwrite=args.overwrite)
    out = convert_released(args.src, args.out)
    print(f"wrote {out}: the paper convention, backbone {args.src.resolve()} (load it with --model {out})")


def register(subparsers) -> None:
    """Add ``cluster-vocab``, ``encode``, ``explain`` and ``convert`` to ``lens``'s subcommands."""
    c = subparsers.add_parser("cluster-vocab", help="cluster the LM head's rows into k lexicon dimensions")
    c.add_argument("--model", default="default", help="'default', a local HF directory or a .gguf file")
    c.add_argument("--clusters", type=_clusters_arg, default=4000,
                   help="k, the lexicon dimension (paper: 2000-8000), or 'vocab' for no clustering (one per token)")
    c.add_argument("--iterations", type=int, default=20, help="KMeans iterations")
    c.add_argument("--seed", type=int, default=0)
    add_registry_argument(c, "--backend", registry="lens.clustering:BACKENDS", default="faiss", metavar="NAME",
                          help="KMeans implementation: %(choices)s (default %(default)s)")
    c.add_argument("--exclude-special", action="store_true", help="leave special tokens out of every cluster")
    add_registry_argument(c, "--attention", registry="lens.attention:MODES", default="bidirectional",
                          metavar="MODE", help="the decoder's attention, saved in the model: %(choices)s (default "
                          "%(default)s; the paper's). SmolLM2 trains better causal "
                          "(benchmarks/results/training_study.md)")
    add_registry_argument(c, "--text-normalization", registry="lens.inputs:TEXT_NORMALIZATIONS", default=None,
                          metavar="RULE", help="fold every text (not the instruction) before tokenising, saved in the "
                          "model so an index and its queries agree: %(choices)s (default: texts as they are)")
    c.add_argument("--term-floor", type=float, default=None, metavar="SHARE",
                   help="each of a text's own token clusters weighs at least SHARE (0-1) of its heaviest weight "
                        "(exact match kept beside expansion; lens.pooling.term_floor), saved in the model")
    add_registry_argument(c, "--logit-position", registry="lens.pooling:LOGIT_POSITIONS", default="next",
                          metavar="WHERE", help="which position's logits stand for a token: %(choices)s (next: the "
                          "paper's, the position that predicts it; own: its own position), saved in the model")
    c.add_argument("--term-channel", action="store_true",
                   help="give the model the explicit term channel: each of a text's own tokens' clusters gets a "
                        "learned weight from the token's own position, merged by max with the pooled weights "
                        "(lens.pooling.merge_terms); `lens train` learns it (untrained, every token weighs 0.69)")
    c.add_argument("--echo", action="store_true",
                   help="echo input: each text written twice and only the second copy pooled, so under causal "
                        "attention the position standing for a token has read it (lens.inputs; about twice the "
                        "compute per text), saved in the model; train it with `lens train`")
    c.add_argument("--compact", action="store_true",
                   help="omit the centroids (they are the cluster means, recomputed from the verified backbone)")
    c.add_argument("--out", required=True, type=Path, help="directory to write (LensEncoder.from_pretrained loads it)")
    add_overwrite_argument(c)
    c.set_defaults(func=cmd_cluster_vocab)

    e = subparsers.add_parser("encode", help="encode texts to a .npy matrix (rows in input order) or a sparse export")
    e.add_argument("--model", default="default", help="a LENS directory (from cluster-vocab) or 'default'")
    e.add_argument("--input", required=True, type=Path,
                   help=".txt (one text per line; ids are 0-based line numbers) or .jsonl[.gz] (ids from '_id' / "
                        "'id', else numbers as a .txt's)")
    e.add_argument("--output", required=True, type=Path,
                   help="the file to write: .npy, or .jsonl for the sparse formats (checked before encoding)")
    add_registry_argument(e, "--format", registry="lens.export:FORMATS", default="npy", metavar="NAME",
                          help="%(choices)s (default %(default)s): pyserini = JsonVectorCollection with integer "
                               "impacts, qdrant = {id, indices, values} (also Milvus), rank-features = "
                               "Elasticsearch/OpenSearch rank_features; the sparse ones take lexicon vectors, and "
                               "--queries writes queries in the same shape")
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
    e.add_argument("--batch-size", type=positive_int, default=None,
                   help="texts per forward (default: 32 on a CPU; on a GPU as many as its free memory holds)")
    e.add_argument("--device", default=None, metavar="DEVICE",
                   help="cpu, cuda or cuda:N (default: cuda when present, else cpu); on CUDA the model runs in "
                        "bfloat16 (a released paper checkpoint: float16, as its authors ran it) with its pooling "
                        "in float32")
    e.add_argument("--no-normalize", action="store_true", help="keep raw (not unit-length) vectors")
    e.add_argument("--workers", type=positive_int, default=1, metavar="N",
                   help="encode in N processes, each a contiguous share of the texts (CPU threads split between them)")
    add_quantize_argument(e)
    e.add_argument("--chunk-size", type=positive_int, default=None, metavar="N",
                   help="texts each worker encodes before they are written (default 1024, lens.encode_job.CHUNK_SIZE):"
                        " what memory holds and what an interruption can lose")
    e.add_argument("--resume", action="store_true",
                   help="continue an interrupted encode of the same input, model and options (kept beside --output "
                        "in .NAME.partial until the output is whole)")
    e.add_argument("--overwrite", action="store_true",
                   help="replace an existing --output file (refused without it; never the --input)")
    e.set_defaults(func=cmd_encode)

    x = subparsers.add_parser("explain", help="print the heaviest clusters of texts' lexicon vectors, or with --match "
                                              "what a query shares with a document")
    x.add_argument("text", nargs="+")
    x.add_argument("--model", default="default", help="a LENS directory (from cluster-vocab) or 'default'")
    x.add_argument("--top-k", type=positive_int, default=10, help="clusters shown per text (default 10)")
    x.add_argument("--query", action="store_true", help="encode as a query, behind the instruction")
    x.add_argument("--match", default=None, metavar="DOCUMENT",
                   help="explain each text's match, as a query (behind the instruction), with this document: their "
                        "lexicon cosine and the shared clusters that make it up, heaviest first")
    x.add_argument("--instruction", default=None)
    x.add_argument("--task", default=None, metavar="NAME",
                   help="use this task's instruction for --query (lens.instructions, e.g. esnli, piqa, scifact)")
    x.set_defaults(func=cmd_explain)

    v = subparsers.add_parser("convert", help="a LENS model directory for one of the paper's released checkpoints "
                                              "(LENS-d4000 / LENS-d8000 folder; lens.paper_models)")
    v.add_argument("src", type=Path, help="the released folder (config.json, safetensors shards, lm_head.pth)")
    v.add_argument("--out", required=True, type=Path,
                   help="directory to write (the head as safetensors; the 7B weights stay in SRC, named by path)")
    add_overwrite_argument(v)
    v.set_defaults(func=cmd_convert)
