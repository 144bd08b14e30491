"""Which texts a model's text rule changes (issue 39): for each set and variant, the documents and queries that
each rule of ``lens.inputs.TEXT_NORMALIZATIONS`` rewrites, so a rule's effect on a collection is known exactly
before anything is encoded (a rule that changes no text of a set leaves its vectors, and its nDCG, as they were).
It also measures how well each rule brings a text in capitals back to its original: the sentences of an STS split
(STS-B's train split by default: a training split, never judged), upper-cased, then put through each rule; the share
of words and of whole sentences that come back exactly as written.

    python benchmarks/text_rule.py --sets scifact,adi,cranfield,medline
    python benchmarks/text_rule.py --sets adi --variants original,upper-queries --rules lowercase-shouted
"""

from __future__ import annotations

import argparse
import sys

from _common import add_data_dir_argument, finish, start

VARIANTS = "original,upper-queries,upper-corpus,upper-all,lower-all,title-only,typos"


def render(results: dict) -> list[str]:
    rules = results["rules"]
    lines = ["# Texts a model's text rule changes (documents and queries, per set and variant)", "",
             f"Command: `{results['_meta']['command']}`", "",
             "Cells: documents changed / documents, queries changed / queries (the document text is title + text, as "
             "it is encoded: `lens.corpus.document_text`). A rule that changes no text of a set gives it exactly the "
             "vectors the model gives without the rule.", "",
             "| set | variant | " + " | ".join(f"{r}: docs | {r}: queries" for r in rules) + " |",
             "|---|---|" + "---:|---:|" * len(rules)]
    for row in results["rows"]:
        cells = []
        for r in rules:
            c = row["changed"][r]
            cells += [f"{c['docs']} / {row['docs']}", f"{c['queries']} / {row['queries']}"]
        lines.append(f"| {row['set']} | {row['variant']} | " + " | ".join(cells) + " |")
    restore = results.get("restore")
    if restore:
        lines += ["", f"## Texts in capitals brought back ({restore['set']}, {restore['split']} split, "
                  f"{restore['sentences']} sentences, {restore['words']} words)", "",
                  "Each sentence upper-cased, then put through the rule: the share of its words (letters, as "
                  "`lens.casing.WORD` finds them) and of whole sentences equal to the original.", "",
                  "| rule | words restored | sentences restored |", "|---|---:|---:|"]
        lines += [f"| {r['rule']} | {r['words']:.3f} | {r['sentences']:.3f} |" for r in restore["rules"]]
    return lines


def restoration(sentences: list[str], rules: list[str]) -> list[dict]:
    """For each rule: the shares of words and of sentences that ``rule(upper(sentence))`` gives back as written."""
    from lens.casing import WORD
    from lens.inputs import normalize_texts

    shouted = [t.upper() for t in sentences]
    written = [WORD.findall(t) for t in sentences]  # the originals' words, found once for every rule
    out = []
    for rule in ["none", *rules]:
        back = shouted if rule == "none" else normalize_texts(shouted, rule)
        words = [(a == b) for x, y in zip(written, back) for a, b in zip(x, WORD.findall(y))]
        out.append({"rule": rule, "words": sum(words) / max(len(words), 1),
                    "sentences": sum(x == y for x, y in zip(sentences, back)) / max(len(sentences), 1)})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sets", default="scifact,adi,cranfield,medline", help="comma-separated set names or directories")
    p.add_argument("--variants", default=VARIANTS, help="lens data variant names ('original': the set as it is)")
    p.add_argument("--rules", default=None, help="comma-separated rules (default: every rule)")
    p.add_argument("--work-dir", default=".cache/ood-variants", help="where variants are written (as benchmarks/ood.py)")
    p.add_argument("--restore", default="stsbenchmark:train",
                   help="SET:SPLIT of STS sentences for the restoration table ('' to skip; default stsbenchmark:train)")
    add_data_dir_argument(p)
    args = start(p, argv, "ood/text_rule", render)
    if args is None:
        return 0
    from pathlib import Path

    from ood import make_variants

    from lens.eval.beir import load_dataset, resolve_dataset
    from lens.inputs import TEXT_NORMALIZATIONS, normalize_texts

    rules = args.rules.split(",") if args.rules else list(TEXT_NORMALIZATIONS)
    sets = [resolve_dataset(s, args.data_dir) for s in args.sets.split(",")]
    rows = []
    for variant, dirs in make_variants(sets, args.variants.split(","), Path(args.work_dir)).items():
        for d in dirs:
            data = load_dataset(d)
            docs = [doc.full_text for doc in data.docs]
            queries = list(data.queries.values())
            changed = {r: {"docs": sum(a != b for a, b in zip(docs, normalize_texts(docs, r))),
                           "queries": sum(a != b for a, b in zip(queries, normalize_texts(queries, r)))}
                       for r in rules}
            rows.append({"set": d.name, "variant": variant, "docs": len(docs), "queries": len(queries),
                         "changed": changed})
    results = {"rules": rules, "rows": rows}
    if args.restore:
        from lens.eval.sts import load_sts
        from lens.eval.sts_bench import resolve_sts_file

        from lens.casing import WORD

        name, _, split = args.restore.partition(":")
        s1, s2, _ = load_sts(resolve_sts_file(name, args.data_dir), split or "train")
        sentences = s1 + s2
        results["restore"] = {"set": name, "split": split or "train", "sentences": len(sentences),
                              "words": sum(len(WORD.findall(t)) for t in sentences),
                              "rules": restoration(sentences, rules)}
    return finish(args, results, render)


if __name__ == "__main__":
    sys.exit(main())
