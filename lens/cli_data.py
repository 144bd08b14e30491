"""``lens data``: build and inspect training-example files (see ``lens.train.data`` for the format).

``register(subparsers)`` adds the subcommands (``lens.cli`` calls it); each sets ``func`` and ``command`` like the
others, so ``lens.cli.main`` dispatches and reports errors unchanged. Also runnable on its own as
``python -m lens.cli_data data ...``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lens.cli_args import add_overwrite_argument, add_registry_argument
from lens.cmdline import positive_int


def _summary(out: Path, examples) -> str:
    from collections import Counter

    tasks = Counter(e.task for e in examples)
    negs = sum(len(e.negatives) for e in examples) / max(len(examples), 1)
    scored = sum(e.score is not None for e in examples)
    task_text = ", ".join(f"{t} {n}" for t, n in sorted(tasks.items()))
    return f"wrote {out}: {len(examples)} examples ({task_text}); mean negatives {negs:.2f}; {scored} with score"


def check_outputs(args: argparse.Namespace, *inputs) -> None:
    """Before any work: ``--out`` (and ``--holdout-out``) must be writable files, neither an input file nor inside an
    input directory (a file added to a dataset's folder could be read as part of it next time; one there replaced
    would be lost), and not each other; an existing one is replaced only with --overwrite."""
    from lens.atomic import check_output_file

    outs = [("--out", Path(args.out))]
    if getattr(args, "holdout_out", None) is not None:
        outs.append(("--holdout-out", Path(args.holdout_out)))
        if outs[0][1].resolve() == outs[1][1].resolve():
            raise ValueError(f"--out and --holdout-out are the same file {args.out}: the held-out examples would "
                             "replace the training ones; give two files")
    for flag, out in outs:
        check_output_file(out, flag)
        target = out.resolve()
        for source in map(Path, inputs):
            if source.is_dir() and target.is_relative_to(source.resolve()):
                raise ValueError(f"{flag} {out} is inside the input directory {source}: write it beside the data, not "
                                 "into it (a file there could be read as part of the set, or be one of its files); "
                                 "choose another place")
            if source.exists() and target == source.resolve():
                raise ValueError(f"{flag} {out} is this command's input: writing would replace it, even with "
                                 "--overwrite; choose another file")
        if out.exists() and not args.overwrite:
            raise FileExistsError(f"{flag} {out} exists: pass --overwrite to replace it, or choose another file")


def _write(args: argparse.Namespace, examples, out: Path | None = None) -> None:
    from lens.train.data import write_examples

    out = args.out if out is None else out
    if not examples and out == args.out:
        raise ValueError(f"no examples to write to {out}: every input row was skipped (see the messages above) "
                         "or the input holds none")
    write_examples(out, examples)
    print(_summary(out, examples))


def cmd_beir(args: argparse.Namespace) -> None:
    from lens.train.data import beir_pairs, refuse_test

    refuse_test(args.split, "--split")
    if not Path(args.dir).is_dir():
        raise (NotADirectoryError if Path(args.dir).exists() else FileNotFoundError)(
            f"{args.dir} is not a BEIR directory (corpus.jsonl, queries.jsonl, qrels/<split>.tsv): give the folder "
            "that holds them")
    check_outputs(args, args.dir)
    instruction = args.instruction
    if instruction == "auto":  # the benchmark's instruction for this dataset, so training matches evaluation
        from lens.instructions import GENERIC, lookup

        found = lookup(Path(args.dir).resolve().name)
        if found.source == GENERIC:  # what `lens bench beir` asks this set's queries too, so training still matches
            print(f"lens data beir: no instruction is known for {Path(args.dir).resolve().name!r}; using the generic "
                  f"one ({found.text!r}), as `lens bench beir` does for it; pass --instruction TEXT to choose",
                  file=sys.stderr)
        instruction = found.text
    miner = "bm25"
    if args.miner != "bm25":  # a LENS model ranks the corpus (re-mining with a model trained one stage)
        from lens.encoder import LensEncoder
        from lens.train.mining import encoder_miner

        encoder = LensEncoder.from_pretrained(args.miner, quantize=args.quantize)
        miner = encoder_miner(encoder, instruction=instruction, batch_size=args.batch_size)
    elif args.quantize:
        raise ValueError("--quantize applies to a model miner: pass --miner MODEL")
    _write(args, beir_pairs(args.dir, split=args.split, num_negatives=args.negatives, seed=args.seed,
                            instruction=instruction, max_queries=args.max_queries, holdout=args.holdout,
                            miner=miner))


def cmd_weak(args: argparse.Namespace) -> None:
    from lens.train.data import weak_pairs

    check_outputs(args, args.corpus)
    corpus, name = args.corpus, None
    if args.from_positives:  # a training file's distinct positives as the corpus (e.g. SQuAD's paragraphs)
        from lens.corpus import Document
        from lens.train.data import read_examples

        examples = read_examples(args.corpus)
        texts = list(dict.fromkeys(e.positive for e in examples))
        corpus = [Document(id=str(i), text=t) for i, t in enumerate(texts)]
        name = examples[0].task if examples else None
    try:
        pairs = weak_pairs(corpus, mode=args.mode, max_pairs=args.max_pairs, seed=args.seed, min_chars=args.min_chars,
                           name=name)
    except ValueError as e:
        if "has no id" in str(e) and not args.from_positives:  # a training file's records: query, positive
            raise ValueError(f"{e}; if CORPUS is a training file (query/positive records), add --from-positives to "
                             "take its positives as the documents") from None
        raise
    _write(args, pairs)


def cmd_sts(args: argparse.Namespace) -> None:
    from lens.train.data import refuse_test, sts_pairs

    refuse_test(args.split, "--split")
    check_outputs(args, args.file)
    _write(args, sts_pairs(args.file, split=args.split, min_score=args.min_score, task=args.task))


def cmd_shared(args: argparse.Namespace) -> None:
    from lens.train.data import pairs_file, shared_pairs_split

    instruction = args.instruction
    if instruction == "auto":  # ours for the shared training sets, by directory name
        from lens.instructions import GENERIC, lookup

        p = Path(args.path).resolve()
        found = lookup((p if p.is_dir() else p.parent).name)
        if found.source == GENERIC:
            raise ValueError(f"no instruction is known for {p.name!r}; pass --instruction TEXT")
        instruction = found.text
    if args.holdout_out is not None and not args.holdout:
        raise ValueError("--holdout-out needs --holdout FRACTION (the share of queries to hold out)")
    check_outputs(args, args.path, pairs_file(args.path))
    kept, held = shared_pairs_split(args.path, instruction=instruction, max_pairs=args.max_pairs, seed=args.seed,
                                    holdout=args.holdout)
    _write(args, kept)
    if args.holdout_out is not None:  # the held-out queries' examples: all of them, never sampled
        _write(args, held, args.holdout_out)


def cmd_labels(args: argparse.Namespace) -> None:
    from lens.train.data import NLI_TRIPLET_SETS, label_pairs, pairs_file, sample_examples, split_holdout

    if args.holdout_out is not None and not args.holdout:
        raise ValueError("--holdout-out needs --holdout FRACTION (the share of queries to hold out)")
    check_outputs(args, args.path, pairs_file(args.path))
    name = args.task or pairs_file(args.path).resolve().parent.name
    instruction = args.instruction
    if instruction == "auto":  # an NLI triplet set is asked its labels' task's question; the others their own
        from lens.instructions import GENERIC, lookup

        nli = args.nli or NLI_TRIPLET_SETS.get(name)
        found = lookup(nli or name)
        if found.source == GENERIC:
            raise ValueError(f"no instruction is known for {name!r}; pass --instruction TEXT")
        instruction = found.text
    examples = label_pairs(args.path, args.task, num_negatives=args.negatives, seed=args.seed,
                           instruction=instruction, nli=args.nli)
    held = []
    if args.holdout:
        examples, held = split_holdout(examples, args.holdout)
    if args.max_pairs is not None:
        examples = sample_examples(examples, args.seed, max_examples=args.max_pairs)
    _write(args, examples)
    if args.holdout_out is not None:
        _write(args, held, args.holdout_out)


def cmd_teacher(args: argparse.Namespace) -> None:
    from lens.dense import DenseEncoder
    from lens.train.data import read_examples, sample_examples
    from lens.train.teacher import add_teacher_scores

    check_outputs(args, args.input)
    examples = read_examples(args.input)
    if args.max_per_task is not None:
        examples = sample_examples(examples, args.seed, max_per_task=args.max_per_task)
    _write(args, add_teacher_scores(examples, DenseEncoder.from_pretrained(args.model), batch_size=args.batch_size))


def cmd_variant(args: argparse.Namespace) -> None:
    from lens.variants import write_variant

    rec = write_variant(args.dir, args.out, args.variant, seed=args.seed, overwrite=args.overwrite)
    print(f"{args.out}: {rec['description']}; {rec['documents_changed']} of {rec['documents']} documents and "
          f"{rec['queries_changed']} of {rec['queries']} queries changed")


def cmd_passages(args: argparse.Namespace) -> None:
    from lens.atomic import atomic_file
    from lens.corpus import PYDOC_TOPICS, check_passage_sizes, corpus_file, iter_corpus, split_passages, write_json_lines

    check_passage_sizes(args.words, args.overlap)  # before any work
    inputs = [] if str(args.corpus) == PYDOC_TOPICS else [corpus_file(args.corpus), args.corpus]
    check_outputs(args, *inputs)
    counts = {"documents": 0, "passages": 0, "split": 0}
    seen: set[str] = set()

    def records():
        for doc in iter_corpus(args.corpus):
            if doc.id in seen:
                raise ValueError(f"corpus {args.corpus}: document id {doc.id!r} appears twice")
            seen.add(doc.id)
            passages = split_passages(doc, args.words, args.overlap)
            counts["documents"] += 1
            counts["passages"] += len(passages)
            counts["split"] += len(passages) > 1
            for p in passages:
                yield {"_id": p.id, "title": p.title, "text": p.text, **p.extra}

    with atomic_file(args.out) as tmp:
        write_json_lines(tmp, records(), gz=str(args.out).endswith(".gz"))
    print(f"wrote {args.out}: {counts['passages']} passages of at most {args.words} words from {counts['documents']} "
          f"documents ({counts['split']} split, {args.overlap} words shared by neighbours)")


def cmd_casing(args: argparse.Namespace) -> None:
    from itertools import chain

    from lens.casing import MIN_COUNT, MIN_SHARE, build_casing_table
    from lens.train.data import shared_texts

    if not str(args.out).endswith(".gz"):
        raise ValueError(f"--out {args.out}: the table is gzipped JSON; give a name ending in .gz (e.g. "
                         "casing.json.gz)")
    check_outputs(args, *args.sets)
    sources = sorted(str(p) for p in args.sets)
    texts = chain.from_iterable(shared_texts(p) for p in sources)
    table = build_casing_table(texts, min_count=MIN_COUNT if args.min_count is None else args.min_count,
                               min_share=MIN_SHARE if args.min_share is None else args.min_share,
                               sources=[Path(p).resolve().name for p in sources])
    table.save(args.out)
    print(f"{args.out}: {len(table.forms)} words with a usual form other than lower case, {len(table.after)} "
          f"forms after and {len(table.before)} before a given word, {len(table.known)} words known, from {table.texts} distinct mixed-case texts "
          f"of {len(sources)} set(s)")


def cmd_stats(args: argparse.Namespace) -> None:
    from lens.train.data import read_examples

    seen: dict[Path, Path] = {}
    for f in args.files:
        if Path(f).resolve() in seen:
            raise ValueError(f"{f} is given twice (as {seen[Path(f).resolve()]} too): its examples would be counted "
                             "twice; give each file once")
        seen[Path(f).resolve()] = f
    rows: dict[str, list] = {}
    empty = []
    for f in args.files:
        examples = read_examples(f)
        empty += [] if examples else [str(f)]
        for e in examples:
            rows.setdefault(e.task, []).append(e)
    if len(empty) == len(args.files):
        raise ValueError(f"{', '.join(empty)} hold(s) no examples")
    if empty:  # e.g. a small set's --holdout-out, which held out no query
        print(f"lens data stats: {', '.join(empty)} hold(s) no examples", file=sys.stderr)
    print(f"{'task':<28} {'examples':>9} {'mean negs':>10} {'score':>7} {'teacher':>8} {'instr':>6}")
    total = [e for t in sorted(rows) for e in rows[t]]
    for task, ex in [*sorted(rows.items()), ("(all)", total)]:
        n = len(ex)
        share = lambda pred: f"{100 * sum(map(pred, ex)) / max(n, 1):.0f}%"  # noqa: E731
        print(f"{task:<28} {n:>9} {sum(len(e.negatives) for e in ex) / max(n, 1):>10.2f} "
              f"{share(lambda e: e.score is not None):>7} {share(lambda e: e.teacher is not None):>8} "
              f"{share(lambda e: e.instruction is not None):>6}")


def register(subparsers) -> argparse.ArgumentParser:
    """Add ``data {beir,weak,sts,shared,labels,teacher,variant,casing,stats}`` to a parser's subcommands; returns
    the ``data`` parser."""
    data = subparsers.add_parser("data", help="build training-example files (JSONL) from BEIR, corpora, STS")
    sub = data.add_subparsers(dest="data_command", required=True)

    b = sub.add_parser("beir", help="(query, judged positive) pairs with BM25-mined hard negatives")
    b.add_argument("dir", type=Path, help="BEIR directory (corpus, queries, qrels/<split>.tsv)")
    b.add_argument("--split", default="train", help="qrels split, a name under qrels/ (never a test split)")
    b.add_argument("--negatives", type=int, default=7,
                   help="hard negatives per example (default 7; 0: in-batch negatives only)")
    b.add_argument("--seed", type=int, default=0,
                   help="the negatives' sampling seed (default 0; each query's draw is seeded by the seed and the "
                        "query's position among the kept queries)")
    b.add_argument("--max-queries", type=positive_int, default=None, help="use the split's first N judged queries")
    b.add_argument("--holdout", type=float, default=0.0,
                   help="fraction of the split's queries left out of training, to judge runs on "
                        "(lens.train.data.holdout_queries picks the same ones every time)")
    b.add_argument("--instruction", default=None,
                   help="query instruction stored with each example; 'auto' = the benchmark's for this dataset")
    b.add_argument("--miner", default="bm25",
                   help="'bm25' or a LENS model (directory, 'default') whose ranking gives the negatives "
                        "(re-mining with a model trained one stage)")
    b.add_argument("--quantize", choices=["int8"], default=None, help="the model miner in int8 (CPU)")
    b.add_argument("--batch-size", type=positive_int, default=16, help="the model miner's encoding batch")
    b.set_defaults(func=cmd_beir, command="data beir")

    w = sub.add_parser("weak", help="weak (title, text) or (first sentence, rest) pairs from any corpus")
    w.add_argument("corpus", help="a BEIR directory or a corpus JSONL of {id, text[, title]}")
    w.add_argument("--mode", choices=["title", "first-sentence"], default="title")
    w.add_argument("--max-pairs", type=positive_int, default=None, help="keep a seeded random subset of this size")
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--min-chars", type=int, default=20,
                   help="skip pairs whose positive is shorter (default 20); the skipped documents are counted")
    w.add_argument("--from-positives", action="store_true",
                   help="CORPUS is a training JSONL (from `lens data`): its distinct positives are the documents "
                        "(use --mode first-sentence), e.g. weak pairs from SQuAD's paragraphs")
    w.set_defaults(func=cmd_weak, command="data weak")

    s = sub.add_parser("sts", help="scored sentence pairs from an STS TSV (STS-B, SICK-R)")
    s.add_argument("file", type=Path, help="TSV[.gz] with sentence1, sentence2, score, split")
    s.add_argument("--split", default="train", help="train or dev (never a test split)")
    s.add_argument("--min-score", type=float, default=None, help="drop pairs scored below this")
    s.add_argument("--task", default=None,
                   help="the examples' task name (default: sts); batches hold one task each, so give STS-B and "
                        "SICK-R their own to keep them apart")
    s.set_defaults(func=cmd_sts, command="data sts")

    h = sub.add_parser("shared", help="a shared training set (query, positive[, negative]) JSONL or directory")
    h.add_argument("path", type=Path)
    h.add_argument("--instruction", default=None,
                   help="query instruction stored with each example; 'auto' = ours for this set (lens.instructions)")
    h.add_argument("--max-pairs", type=positive_int, default=None, help="keep a seeded random subset of this size")
    h.add_argument("--seed", type=int, default=0)
    h.add_argument("--holdout", type=float, default=0.0,
                   help="fraction of queries left out of --out (by a stable hash of the query text), to judge runs on")
    h.add_argument("--holdout-out", type=Path, default=None, help="where to write the held-out examples")
    h.set_defaults(func=cmd_shared, command="data shared")

    lb = sub.add_parser("labels", help="classification as retrieval of label documents (ATEB label augmentation): "
                                       "a label-description set or NLI triplets")
    lb.add_argument("path", type=Path, help="a shared set's directory or JSONL (tweeteval, clinc150, banking77, "
                                            "trec-qc, snli-cad)")
    lb.add_argument("--negatives", type=int, default=3, help="other labels of the same task per example (default 3)")
    lb.add_argument("--task", default=None, help="the task name of the examples and label ids (default: directory)")
    lb.add_argument("--nli", default=None, metavar="TASK",
                    help="read NLI triplets and use TASK's label documents (default: esnli for snli-cad)")
    lb.add_argument("--instruction", default=None,
                    help="query instruction stored with each example; 'auto' = ours for this set (lens.instructions)")
    lb.add_argument("--max-pairs", type=positive_int, default=None, help="keep a seeded random subset of this size")
    lb.add_argument("--seed", type=int, default=0)
    lb.add_argument("--holdout", type=float, default=0.0,
                    help="fraction of queries left out of --out (by a stable hash of the query text), to judge runs on")
    lb.add_argument("--holdout-out", type=Path, default=None, help="where to write the held-out examples")
    lb.set_defaults(func=cmd_labels, command="data labels")

    for p in (b, w, s, h, lb):
        p.add_argument("--out", required=True, type=Path, help="the .jsonl or .jsonl.gz file to write")
        add_overwrite_argument(p, "a file")

    te = sub.add_parser("teacher", help="add a dense teacher's cosines (query vs positive and negatives) for the "
                        "bce-teacher and kl losses")
    te.add_argument("input", type=Path, help="a training-example file (JSONL or JSONL.gz)")
    te.add_argument("--out", type=Path, required=True, help="the scored copy to write")
    te.add_argument("--model", default="minilm",
                    help="'minilm' (the packaged all-MiniLM-L6-v2) or a local sentence-transformers directory")
    te.add_argument("--max-per-task", type=positive_int, default=None,
                    help="keep a seeded subset of at most this many examples per task, scored (the others are "
                         "left out of --out)")
    te.add_argument("--seed", type=int, default=0)
    te.add_argument("--batch-size", type=positive_int, default=64)
    add_overwrite_argument(te, "a file")
    te.set_defaults(func=cmd_teacher, command="data teacher")

    va = sub.add_parser("variant", help="a BEIR-layout variant of a retrieval set for out-of-domain checks: "
                                        "texts rewritten, ids and qrels kept (lens.variants)")
    va.add_argument("dir", type=Path, help="BEIR directory (corpus, queries, qrels/)")
    add_registry_argument(va, "--variant", registry="lens.variants:VARIANTS", required=True,
                          help="the rewrite: %(choices)s")
    va.add_argument("--out", type=Path, required=True, help="the directory to write (with variant.json)")
    va.add_argument("--seed", type=int, default=0, help="the typos' seed (default 0)")
    va.add_argument("--overwrite", action="store_true",
                    help="replace --out if it is an earlier variant (has variant.json) or empty")
    va.set_defaults(func=cmd_variant, command="data variant")

    pa = sub.add_parser("passages", help="a corpus with each long document cut into passages of a few words (ids "
                                         "ID#N; each keeps its title and metadata, with its document's id and place)")
    pa.add_argument("--corpus", required=True,
                    help="what lens index build reads: a BEIR directory, a .jsonl / .tsv (plain or gzipped), pydoc-topics")
    pa.add_argument("--out", type=Path, required=True, help="the passages' corpus to write (.jsonl or .jsonl.gz)")
    pa.add_argument("--words", type=positive_int, default=100,
                    help="words per passage at most (default 100, DPR's passages: with its title, 1.3%% of SciFact's "
                         "and none of Cranfield's or MEDLINE's passages pass the shipped default's 256 tokens, "
                         "benchmarks/results/passage_length.md)")
    pa.add_argument("--overlap", type=int, default=20, help="words a passage shares with the next (default 20)")
    add_overwrite_argument(pa, "a file")
    pa.set_defaults(func=cmd_passages, command="data passages")

    ca = sub.add_parser("casing", help="the casing table of the truecase-shouted text rule (lens.casing): each "
                                       "word's usual written form, counted over training sets' texts")
    ca.add_argument("sets", nargs="+", type=Path,
                    help="shared training sets (a directory with pairs.jsonl[.gz], or the file itself)")
    ca.add_argument("--out", type=Path, required=True, help="the table to write (gzipped JSON, .json.gz)")
    add_overwrite_argument(ca, "a file")
    ca.add_argument("--min-count", type=int, default=None, help="fewest sightings of a word's usual form (default 2)")
    ca.add_argument("--min-share", type=float, default=None,
                    help="least share of a word's sightings its usual form must have (default 0.6)")
    ca.set_defaults(func=cmd_casing, command="data casing")

    st = sub.add_parser("stats", help="examples per task, mean negatives, share with score/teacher/instruction")
    st.add_argument("files", nargs="+", type=Path)
    st.set_defaults(func=cmd_stats, command="data stats")
    return data


def main(argv: list[str] | None = None) -> int:
    """Standalone entry (``python -m lens.cli_data data ...``), with ``lens``'s error handling."""
    from lens.cli_args import Parser

    parser = Parser(prog="lens")
    parser.add_argument("-v", "--verbose", action="store_true")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, ValueError) as e:
        print(f"lens {args.command}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
