"""The ``lens`` command. Heavy imports happen inside each subcommand so ``lens --help`` is instant."""

from __future__ import annotations

import argparse
import io
import json
import logging
import sys
import time
from pathlib import Path

logger = logging.getLogger("lens")


# ---------------------------------------------------------------------------------------------- cluster-vocab
def cmd_cluster_vocab(args: argparse.Namespace) -> None:
    import numpy as np
    from safetensors.numpy import save

    from lens._io import atomic_dir, atomic_write_bytes
    from lens.backbone import load_lm_head, load_tokenizer, matrix_sha256, resolve_backbone
    from lens.clustering import cluster_rows, clusters_tsv, size_summary
    from lens.config import CLUSTERS_NAME, CLUSTERS_TSV, ClusteringConfig, LensConfig

    start = time.perf_counter()
    ref = resolve_backbone(args.model)
    matrix = load_lm_head(ref)
    tokenizer = load_tokenizer(ref)
    exclude: list[int] = []
    if args.exclude_special:
        special = {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
        exclude = sorted((special | set(tokenizer.all_special_ids)) & set(range(len(matrix))))
    print(f"LM head {matrix.shape[0]} x {matrix.shape[1]} from {ref.reference}; excluding {len(exclude)} tokens",
          file=sys.stderr)
    result = cluster_rows(
        matrix, args.clusters, iterations=args.iterations, seed=args.seed, backend=args.backend,
        exclude=exclude, show_progress_bar=True,
    )
    config = LensConfig(
        backbone=ref.reference,
        clustering=ClusteringConfig(
            num_clusters=args.clusters, vocab_size=int(matrix.shape[0]), hidden_size=int(matrix.shape[1]),
            lm_head_sha256=matrix_sha256(matrix), seed=args.seed, iterations=args.iterations,
            backend=args.backend, exclude_special=args.exclude_special, num_excluded=len(exclude),
        ),
    )
    tensors = {"assignment": result.assignment.astype(np.int32)}
    if not args.compact:
        tensors["centroids"] = result.centroids
    blob = save(tensors)
    with atomic_dir(args.out) as tmp:
        config.save(tmp)
        atomic_write_bytes(tmp / CLUSTERS_NAME, blob)
        atomic_write_bytes(tmp / CLUSTERS_TSV, clusters_tsv(result.assignment, args.clusters, tokenizer).encode())
    s = size_summary(result.sizes)
    print(
        f"wrote {args.out}: k={args.clusters} in {time.perf_counter() - start:.1f}s; cluster sizes "
        f"min {s['min']} / median {s['median']:g} / max {s['max']}, {s['singletons']} singletons, "
        f"{s['empty']} empty; final objective {result.objective[-1]:.6g}"
    )


# ---------------------------------------------------------------------------------------------- encode
def read_texts(path: Path) -> list[str]:
    """Texts from a .txt (one per line) or .jsonl (objects with "text" and optional "title", or strings)."""
    if not path.is_file():
        raise FileNotFoundError(f"input file not found: {path}")
    lines = path.read_text(encoding="utf-8").splitlines()
    if path.suffix == ".txt":
        return lines
    if path.suffix != ".jsonl":
        raise ValueError(f"input must be a .txt (one text per line) or .jsonl file, got {path.name}")
    texts = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{n}: not valid JSON ({e.msg})") from None
        if isinstance(obj, str):
            texts.append(obj)
        elif isinstance(obj, dict) and isinstance(obj.get("text"), str):
            title = obj.get("title")
            texts.append(f"{title}\n{obj['text']}" if isinstance(title, str) and title else obj["text"])
        else:
            raise ValueError(f'{path}:{n}: expected a string or an object with a "text" string')
    return texts


def cmd_encode(args: argparse.Namespace) -> None:
    import numpy as np

    from lens._io import atomic_write_bytes
    from lens.encoder import LensEncoder

    texts = read_texts(Path(args.input))
    if not texts:
        raise ValueError(f"{args.input} holds no texts")
    encoder = LensEncoder.from_pretrained(args.model)
    kwargs = dict(batch_size=args.batch_size, show_progress_bar=True, normalize=not args.no_normalize,
                  output=args.kind)
    if args.queries:
        vectors = encoder.encode_queries(texts, instruction=args.instruction, **kwargs)
    else:
        vectors = encoder.encode_documents(texts, **kwargs)
    buf = io.BytesIO()
    np.save(buf, vectors)
    atomic_write_bytes(args.output, buf.getvalue())
    print(f"wrote {args.output}: {vectors.shape[0]} x {vectors.shape[1]} float32 ({args.kind})")


# ---------------------------------------------------------------------------------------------- explain
def cmd_explain(args: argparse.Namespace) -> None:
    from lens.encoder import LensEncoder

    encoder = LensEncoder.from_pretrained(args.model)
    for text in args.text:
        print(f"\n{text!r}")
        rows = encoder.explain(text, top_k=args.top_k, query=args.query, instruction=args.instruction)
        for r in rows:
            toks = " ".join(repr(t) for t in r.tokens)
            print(f"  cluster {r.cluster:>5}  weight {r.weight:6.3f}  {toks}")


# ---------------------------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lens", description="Lexicon-based text embeddings from causal LLMs.")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("cluster-vocab", help="cluster the LM head's rows into k lexicon dimensions")
    c.add_argument("--model", default="default", help="'default', a local HF directory or a .gguf file")
    c.add_argument("--clusters", type=int, default=4000, help="k, the lexicon dimension (paper: 2000-8000)")
    c.add_argument("--iterations", type=int, default=20, help="KMeans iterations")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--backend", choices=["faiss", "sklearn"], default="faiss")
    c.add_argument("--exclude-special", action="store_true", help="leave special tokens out of every cluster")
    c.add_argument("--compact", action="store_true",
                   help="omit the centroids (they are the cluster means, recomputed from the verified backbone)")
    c.add_argument("--out", required=True, type=Path, help="directory to write (LensEncoder.from_pretrained loads it)")
    c.set_defaults(func=cmd_cluster_vocab)

    e = sub.add_parser("encode", help="encode texts to a .npy matrix (rows in input order)")
    e.add_argument("--model", default="default", help="a LENS directory (from cluster-vocab) or 'default'")
    e.add_argument("--input", required=True, type=Path, help=".txt (one text per line) or .jsonl")
    e.add_argument("--output", required=True, type=Path, help="the .npy file to write")
    e.add_argument("--queries", action="store_true", help="encode as queries, behind the instruction")
    e.add_argument("--instruction", default=None, help="task instruction for --queries")
    e.add_argument("--kind", choices=["lexicon", "dense"], default="lexicon")
    e.add_argument("--batch-size", type=int, default=32)
    e.add_argument("--no-normalize", action="store_true", help="keep raw (not unit-length) vectors")
    e.set_defaults(func=cmd_encode)

    x = sub.add_parser("explain", help="print the heaviest clusters of texts' lexicon vectors")
    x.add_argument("text", nargs="+")
    x.add_argument("--model", default="default", help="a LENS directory (from cluster-vocab) or 'default'")
    x.add_argument("--top-k", type=int, default=10)
    x.add_argument("--query", action="store_true", help="encode as a query, behind the instruction")
    x.add_argument("--instruction", default=None)
    x.set_defaults(func=cmd_explain)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        args.func(args)
    except (FileNotFoundError, ValueError, TypeError, NotImplementedError) as e:
        print(f"lens {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
