"""How many words fit the model's texts, and how many documents `lens data passages` saves from being cut.

For each corpus (the first ``--max-docs`` documents): the tokens of each document as the model encodes it (its text
rule, BOS and EOS: ``lens.inputs.encode_model_texts`` without a length limit) against its ``max_seq_length``, the
tokens a word (whitespace-separated words of the text the model reads, title included), and, for each ``--words``,
the passages ``lens.corpus.split_passages`` makes and the share of them still cut. Tokenizer only: no forward pass.

    python benchmarks/passage_length.py --sets beir/scifact,classic/cranfield,classic/medline,classic/adi
"""

from __future__ import annotations

import itertools
import logging
import sys

from _common import add_data_dir_argument, data_dir, finish, start

from lens.cmdline import int_list
from lens.cli_args import Parser

logger = logging.getLogger("passage_length")

word_list = int_list("--words", minimum=1, example="100,128,160")


def token_counts(encoder, texts: list[str]) -> list[int]:
    """Each text's tokens as the model encodes it as a document (text rule, BOS, EOS), uncut."""
    from lens.inputs import encode_model_texts

    return [len(item.ids) for item in encode_model_texts(encoder.tokenizer, encoder.config, texts, 10**9)]


def study(encoder, docs, words: list[int], overlap: int) -> dict:
    """The set's row: documents, tokens a word, documents cut; per passage length, passages and those cut."""
    from lens.corpus import split_passages

    limit = encoder.max_seq_length
    texts = [d.full_text for d in docs]
    tokens = token_counts(encoder, texts)
    n_words = [len(t.split()) for t in texts]
    row = {"documents": len(docs), "max_seq_length": limit, "words_mean": sum(n_words) / len(docs),
           "tokens_per_word": (sum(tokens) - 2 * len(docs)) / max(sum(n_words), 1),
           "documents_cut": sum(t > limit for t in tokens), "passages": {}}
    for w in words:
        passages = [p for d in docs for p in split_passages(d, w, min(overlap, w - 1))]
        counts = token_counts(encoder, [p.full_text for p in passages])
        row["passages"][str(w)] = {"passages": len(passages), "cut": sum(t > limit for t in counts),
                                   "tokens_max": max(counts)}
    return row


def render(results: dict) -> list[str]:
    meta = results["_meta"]
    words = meta["words"]
    lines = ["# Passage length: words that fit the model's texts", "", f"Command: `{meta['command']}`", "",
             f"Model `{meta['model']}`; the first {meta['max_docs']} documents of each set; tokens as the model encodes "
             f"a document (its text rule, BOS and EOS); a text is cut when it has more than `max_seq_length`; passages "
             f"of `lens data passages --words W --overlap {meta['overlap']}` (the overlap at most W - 1).", "",
             "| set | documents | words a document | tokens a word | documents cut | "
             + " | ".join(f"{w} words: passages, cut" for w in words) + " |",
             "|---|---|---|---|---|" + "---|" * len(words)]
    for name, r in results.items():
        if name.startswith("_"):
            continue
        cells = [f"{r['passages'][str(w)]['passages']}, {r['passages'][str(w)]['cut']}" for w in words]
        lines.append(f"| {name} | {r['documents']} | {r['words_mean']:.1f} | {r['tokens_per_word']:.3f} | "
                     f"{r['documents_cut']} ({r['documents_cut'] / r['documents']:.1%}) | " + " | ".join(cells) + " |")
    lines += ["", f"max_seq_length {next(r['max_seq_length'] for n, r in results.items() if not n.startswith('_'))}"
              f"; {meta['machine']}."]
    return lines


def main(argv=None) -> int:
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--sets", default="beir/scifact,classic/cranfield,classic/medline,classic/adi",
                   help="corpora under the data dir, comma-separated (default %(default)s)")
    p.add_argument("--words", type=word_list, default=[100, 128, 160], help="passage lengths (default 100,128,160)")
    p.add_argument("--overlap", type=int, default=20, help="words shared by neighbouring passages (default 20)")
    p.add_argument("--max-docs", type=int, default=2000, help="documents read from each corpus (default 2000)")
    p.add_argument("--model", default="default", help="the LENS model whose tokenizer and length count")
    add_data_dir_argument(p)
    args = start(p, argv, "passage_length", render)
    if args is None:  # --markdown-only
        return 0
    from lens.corpus import iter_corpus
    from lens.encoder import LensEncoder

    encoder = LensEncoder.from_pretrained(args.model)
    results = {}
    for name in [s for s in args.sets.split(",") if s]:
        docs = list(itertools.islice(iter_corpus(data_dir(args.data_dir) / name), args.max_docs))
        results[name] = study(encoder, docs, args.words, args.overlap)
        logger.info("%s: %s", name, results[name])
    return finish(args, results, render, model=args.model, words=args.words, overlap=args.overlap,
                  max_docs=args.max_docs)


if __name__ == "__main__":
    sys.exit(main())
