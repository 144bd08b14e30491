"""Which texts a model's text rule changes (issue 39): for each set and variant, the documents and queries that
each rule of ``lens.inputs.TEXT_NORMALIZATIONS`` rewrites, so a rule's effect on a collection is known exactly
before anything is encoded (a rule that changes no text of a set leaves its vectors, and its nDCG, as they were).
It also measures how well each rule brings a text in capitals back to its original: the sentences of STS splits or a
retrieval set's queries (``--restore``; none of them counted into the packaged casing table), upper-cased, then put
through each rule; the share of words and of whole sentences that come back exactly as written (``--from lower``:
lower-cased instead, as people type queries and as some collections are stored). The packaged table's parts are
measured apart too (its forms alone, with the pairs, with the acronym rule: ``lens.casing``), and any table file
given (``--tables``, e.g. one that ``lens data casing --min-share`` counted with another threshold).

    python benchmarks/text_rule.py --sets scifact,adi,cranfield,medline
    python benchmarks/text_rule.py --sets adi --variants original --restore stsbenchmark:test,scifact:queries
    python benchmarks/text_rule.py --sets adi --variants original,upper-queries --rules lowercase-shouted
    python benchmarks/text_rule.py --sets adi --variants original --from lower --tables T1,T2 --output OUT
"""

from __future__ import annotations

import sys
from pathlib import Path

from _common import add_data_dir_argument, finish, start
from lens.cli_args import Parser

VARIANTS = "original,upper-queries,upper-corpus,upper-all,lower-queries,lower-all,title-only,typos"
RESTORE = "stsbenchmark:train,stsbenchmark:test,sick-r:test,scifact:queries,adi:queries"


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
        sources = restore if isinstance(restore, list) else [restore]  # one source before several were measured
        lower = results.get("from") == "lower"
        lines += ["", "## Texts in lower case brought back" if lower else "## Texts in capitals brought back", "",
                  f"Each text {'lower' if lower else 'upper'}-cased, then put through the rule: the share of its "
                  "words (letters, as "
                  "`lens.casing.WORD` finds them) and of whole texts equal to the original. The `table: ...` rows "
                  "truecase every text with parts of the packaged table (`lens.casing`): its forms alone, with the "
                  "forms after and before a given word (pairs), with the acronym rule (a short word in capitals the "
                  "table never saw stays in capitals, as does one right before a digit), and whole; for a retrieval "
                  "set's queries, also the table of its own corpus over the packaged one "
                  "(`lens.casing.corpus_casing_table`, `lens bench beir --corpus-casing`). Cells: words / texts.", "",
                  "| rule | " + " | ".join(f"{s['set']} {s['split']} ({s['sentences']} texts, {s['words']} words)"
                                          for s in sources) + " |",
                  "|---|" + "---:|" * len(sources)]
        names = list(dict.fromkeys(r["rule"] for s in sources for r in s["rules"]))
        for name in names:
            cells = []
            for s in sources:
                r = next((r for r in s["rules"] if r["rule"] == name), None)
                cells.append("-" if r is None else f"{r['words']:.3f} / {r['sentences']:.3f}")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def table_parts(others: list[str] = ()) -> dict[str, object]:
    """The packaged casing table's parts, each a function of a text: forms alone, + pairs, + acronyms, whole; and
    each table file of ``others`` whole (an earlier table, to compare)."""
    from dataclasses import replace

    from lens.casing import load_casing_table, packaged_casing_table

    table = packaged_casing_table()
    parts = {"forms": replace(table, after={}, before={}, known=None),
             "forms + pairs": replace(table, known=None),
             "forms + acronyms": replace(table, after={}, before={}),
             "whole": table}
    out = {f"table: {name}": part.truecase for name, part in parts.items()}
    for path in others:
        out[f"table file: {path}"] = load_casing_table(path).truecase
    return out


def restoration(sentences: list[str], rules: list[str], functions: dict | None = None,
                case: str = "upper") -> list[dict]:
    """For each rule (and each of ``functions``, name -> text function): the shares of words and of sentences that
    ``rule(upper(sentence))`` (``case="lower"``: ``rule(lower(sentence))``) gives back as written."""
    from lens.casing import WORD
    from lens.inputs import normalize_texts

    if case not in ("upper", "lower"):
        raise ValueError(f"case must be 'upper' or 'lower', got {case!r}")
    shouted = [t.upper() if case == "upper" else t.lower() for t in sentences]
    written = [WORD.findall(t) for t in sentences]  # the originals' words, found once for every rule
    out = []
    todo = [(rule, None) for rule in ["none", *rules]] + list((functions or {}).items())
    for rule, fn in todo:
        if fn is not None:
            back = [fn(t) for t in shouted]
        else:
            back = shouted if rule == "none" else normalize_texts(shouted, rule)
        words = [(a == b) for x, y in zip(written, back) for a, b in zip(x, WORD.findall(y))]
        out.append({"rule": rule, "words": sum(words) / max(len(words), 1),
                    "sentences": sum(x == y for x, y in zip(sentences, back)) / max(len(sentences), 1)})
    return out


def main(argv: list[str] | None = None) -> int:
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--sets", default="scifact,adi,cranfield,medline", help="comma-separated set names or directories")
    p.add_argument("--variants", default=VARIANTS, help="lens data variant names ('original': the set as it is)")
    p.add_argument("--rules", default=None, help="comma-separated rules (default: every rule)")
    p.add_argument("--work-dir", default=".cache/ood-variants", help="where variants are written (as benchmarks/ood.py)")
    p.add_argument("--restore", default=RESTORE,
                   help="comma-separated sources of the restoration table: STS SET:SPLIT (both sentences of each "
                        f"pair) or a retrieval set's NAME:queries ('' to skip; default {RESTORE})")
    p.add_argument("--tables", default="", help="comma-separated casing table files (lens data casing) to measure "
                                                "beside the packaged one in the restoration table, e.g. an earlier one")
    p.add_argument("--from", dest="case", choices=("upper", "lower"), default="upper",
                   help="the restoration table starts from each text upper-cased (default) or lower-cased")
    add_data_dir_argument(p)
    args = start(p, argv, "ood/text_rule", render)
    if args is None:
        return 0
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
        tables = args.tables.split(",") if args.tables else []
        results["restore"] = [restore_source(source, rules, args.data_dir, tables, args.case)
                              for source in args.restore.split(",")]
        results["from"] = args.case
    return finish(args, results, render)


def restore_source(source: str, rules: list[str], data_dir, tables: list[str] = (), case: str = "upper") -> dict:
    """The restoration rows of one source: ``STS:SPLIT`` (every sentence of the split's pairs, each once) or
    ``RETRIEVAL-SET:queries`` (every query of the set's queries file)."""
    from lens.casing import WORD

    name, _, split = source.partition(":")
    split = split or "train"
    if split == "queries":
        from lens.casing import corpus_casing_table
        from lens.corpus import load_corpus, load_queries
        from lens.eval.beir import resolve_dataset

        d = resolve_dataset(name, data_dir)
        sentences = list(load_queries(d).values())
        # a set's queries can also be brought back to its own documents' forms (lens.casing.corpus_casing_table)
        extra = {"table: the set's corpus over the packaged": corpus_casing_table(doc.full_text for doc in
                                                                               load_corpus(d)).truecase}
    else:
        from lens.eval.sts import load_sts
        from lens.eval.sts_bench import resolve_sts_file

        s1, s2, _ = load_sts(resolve_sts_file(name, data_dir), split)
        sentences = list(dict.fromkeys(s1 + s2))
        extra = {}
    return {"set": Path(name).name, "split": split, "sentences": len(sentences),
            "words": sum(len(WORD.findall(t)) for t in sentences),
            "rules": restoration(sentences, rules, {**table_parts(tables), **extra}, case)}


if __name__ == "__main__":
    sys.exit(main())
