"""How much exact matching the lexicon's space can hold: BM25 over words, over the backbone's tokens and over the
k clusters those tokens fall into, against the lexicon itself (issue 39).

    python benchmarks/exact_space.py --sets adi,cranfield,medline --threads 2

The lexicon can only match a query's words through the clusters of their tokens: a word split into sub-word pieces,
cased or spaced differently, or sharing its cluster with other tokens, is matched as that. This study asks how much
of BM25's exact matching survives that space, with no model in the way: the same BM25 (an index's BM25 part,
``index.bm25_part``: Lucene's idf and saturated tf, k1 1.5, b 0.75) over

- ``words``: bm25s's terms, stemmed, without stopwords (the ``bm25`` baseline's terms);
- ``words, unstemmed``: the same terms without the stemmer;
- ``tokens``: the backbone's tokens of each text as the model reads it (its text rule, cut at its max length,
  no instruction);
- ``token forms``: each token taken as its form: without its space marker, lower-cased and, if alphabetic,
  stemmed (``" Flows"``, ``"flow"`` and ``"FLOW"`` are one form); what a vocabulary that merged case, spacing and
  inflection could match, with the tokenizer's sub-word splits kept;
- ``clusters``: the tokens mapped to their clusters (``encoder.assignment``);
- ``clusters, form-expanded``: each token counted in every cluster that holds a token of its form (the
  clusters kept, the forms' siblings added: a rule that would match forms across the existing clusters);
- ``clusters of forms``: the forms clustered instead of the tokens (KMeans, the same k and seed, over each form's
  mean LM-head row weighed by its tokens): the vocabulary ``lens cluster-vocab`` would build if it kept a form's
  tokens together;
- ``clusters, presence``: the exact-match half of what the lexicon's cosine can express: a query's clusters
  weighed by their BM25 idf, a document's clusters present or not, both L2-normalised (no tf, no model weights);

and, from the cached vectors of the ``lens bench beir`` run of the same model (``--quantize``), the lexicon with
idf (as an index searches it), its query cut to its own clusters, and the lexicon and ``clusters, presence`` fused
0.5 / 0.5 on cosines. Every row is paired with ``words`` query by query (``lens.metrics.paired_test``).

Writes ``benchmarks/results/exact_space.json`` and ``.md``.
"""

from __future__ import annotations

import functools
import sys
from typing import Sequence

import numpy as np
from _common import RESULTS, add_suite_study_arguments, run_suite_study, set_label, study_set_data
from lens.cli_args import Parser

OUT = RESULTS / "exact_space"
DEPTH = 100
ROWS = ("words", "words, unstemmed", "tokens", "token forms", "clusters", "clusters, form-expanded",
        "clusters of forms", "clusters, presence", "lexicon (idf)", "lexicon (idf), own clusters of the query",
        "lexicon (idf) + clusters, presence")


def bm25_matrix(doc_terms: Sequence[Sequence], query_terms: Sequence[Sequence]) -> np.ndarray:
    """(queries, documents) BM25 scores of terms of any kind (words, token ids, cluster ids), scored by an index's
    BM25 part (``index.bm25_part.BM25Part``: Lucene's idf and saturated tf, a repeated query term counted as often
    as it occurs, as bm25s scores the ``bm25`` baseline); each term is taken as its ``str``."""
    from index.bm25_part import BM25Part

    part = BM25Part.empty()
    part.add_terms([[str(t) for t in terms] for terms in doc_terms], list(range(len(doc_terms))))
    return np.stack([part.scores([str(t) for t in terms]) for terms in query_terms])


@functools.lru_cache(maxsize=2)  # one tokenizer per run: its forms once, not once per set
def token_forms(tokenizer) -> np.ndarray:
    """(V,) int64: each token's form (see the module docstring), numbered in sorted order of the forms."""
    import Stemmer

    stem = Stemmer.Stemmer("english").stemWord
    keys = []
    for token in tokenizer.convert_ids_to_tokens(list(range(len(tokenizer)))):
        word = (token or "").replace("\u0120", "").replace("\u2581", "").lower()  # byte-level and sentencepiece
        keys.append("w:" + stem(word) if word.isalpha() else "t:" + (token or ""))
    return np.unique(np.asarray(keys, dtype=str), return_inverse=True)[1].astype(np.int64)


_FORM_CLUSTERS: dict = {}


def form_clusters(enc, forms: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """(V,) int64: each token's cluster when the forms, not the tokens, are clustered (KMeans over each form's mean
    LM-head row, weighed by its number of tokens; ``lens.clustering``'s FAISS settings, 20 iterations)."""
    key = (enc.config.backbone, k, seed)
    if key not in _FORM_CLUSTERS:
        import faiss

        from lens.backbone import load_lm_head, resolve_backbone
        from lens.clustering import centroids_from_assignment, nearest_centroid

        head = load_lm_head(resolve_backbone(enc.config.backbone)).astype(np.float32)
        if len(head) != len(forms):
            raise ValueError(f"the LM head has {len(head)} rows and the tokenizer {len(forms)} tokens")
        n = int(forms.max()) + 1
        means = centroids_from_assignment(head, forms, n)
        counts = np.bincount(forms, minlength=n).astype(np.float32)
        km = faiss.Kmeans(head.shape[1], k, niter=20, seed=seed, max_points_per_centroid=1 << 30,
                          min_points_per_centroid=1, verbose=False)
        km.train(means, weights=counts)
        _FORM_CLUSTERS[key] = nearest_centroid(means, km.centroids)[forms]
    return _FORM_CLUSTERS[key]


def presence_cosine(doc_mask: np.ndarray, query_mask: np.ndarray, idf: np.ndarray) -> np.ndarray:
    """(queries, documents) cosines of idf-weighed query clusters against present / absent document clusters (the
    texts' own clusters as ``index.vectors.support_mask`` marks them)."""
    from index.vectors import l2_normalize

    d = l2_normalize(doc_mask.astype(np.float32))
    q = l2_normalize(query_mask.astype(np.float32) * idf.astype(np.float32))
    return q @ d.T


def study_set(name: str, args, resources) -> dict:
    import bm25s

    from index.vectors import cluster_idf, l2_normalize, support_mask
    from lens.bm25 import tokenize
    from lens.eval.dev import top_run
    from lens.inputs import encode_texts, text_ids
    from lens.instructions import lookup
    from lens.metrics import evaluate, paired_test

    data, ids, texts, qids, qtexts, lens = study_set_data(name, args, resources)
    enc = lens.encoder
    k = int(enc.assignment.max()) + 1

    def tokens(batch: list[str]) -> list[np.ndarray]:
        items = encode_texts(enc.tokenizer, batch, enc.max_seq_length, normalization=enc.config.text_normalization)
        return [np.asarray(text_ids(it), dtype=np.int64) for it in items]  # int64 even for an empty text

    doc_tokens, q_tokens = tokens(texts), tokens(qtexts)
    doc_clusters = [enc.assignment[t] for t in doc_tokens]
    q_clusters = [enc.assignment[t] for t in q_tokens]
    forms = token_forms(enc.tokenizer)
    grouped = form_clusters(enc, forms, k)
    members: dict[int, set[int]] = {}  # form -> the clusters of its tokens
    for token, form in enumerate(forms.tolist()):
        members.setdefault(form, set()).add(int(enc.assignment[token]))
    siblings = {form: sorted(clusters) for form, clusters in members.items()}

    def expanded(ids: np.ndarray) -> list[int]:
        return [c for t in ids.tolist() for c in siblings[int(forms[t])]]

    unstemmed = [bm25s.tokenize(list(x), stopwords="en", show_progress=False, return_ids=False)
                 for x in (texts, qtexts)]
    scores = {
        "words": bm25_matrix(tokenize(texts), tokenize(qtexts)),
        "words, unstemmed": bm25_matrix(*unstemmed),
        "tokens": bm25_matrix([t.tolist() for t in doc_tokens], [t.tolist() for t in q_tokens]),
        "token forms": bm25_matrix([forms[t].tolist() for t in doc_tokens], [forms[t].tolist() for t in q_tokens]),
        "clusters": bm25_matrix([c.tolist() for c in doc_clusters], [c.tolist() for c in q_clusters]),
        "clusters, form-expanded": bm25_matrix([expanded(t) for t in doc_tokens], [expanded(t) for t in q_tokens]),
        "clusters of forms": bm25_matrix([grouped[t].tolist() for t in doc_tokens],
                                         [grouped[t].tolist() for t in q_tokens]),
    }
    docs = lens.documents(texts).arrays["lexicon"].astype(np.float32)
    idf = cluster_idf((docs > 0).sum(axis=0), docs.shape[0])
    doc_mask, own = support_mask(doc_clusters, k), support_mask(q_clusters, k)  # the texts' own clusters
    # the presence row's idf: BM25's over the clusters the texts' own tokens fall in
    token_idf = cluster_idf(doc_mask.sum(axis=0), len(doc_clusters))
    scores["clusters, presence"] = presence_cosine(doc_mask, own, token_idf)
    raw_q = enc.encode_queries(qtexts, instruction=lookup(data.name).text, batch_size=16, show_progress_bar=False)
    q = l2_normalize(raw_q * idf.astype(np.float32))
    scores["lexicon (idf)"] = q @ docs.T
    scores["lexicon (idf), own clusters of the query"] = l2_normalize(np.where(own, q, 0.0).astype(np.float32)) @ docs.T
    scores["lexicon (idf) + clusters, presence"] = 0.5 * scores["lexicon (idf)"] + 0.5 * scores["clusters, presence"]

    per_query = {}
    row = {"set": set_label(name, data.name), "documents": len(ids), "queries": len(qids),
           "doc_tokens_mean": float(np.mean([len(t) for t in doc_tokens])),
           "distinct": {"tokens": int(len(np.unique(np.concatenate(doc_tokens)))),
                        "forms": int(len(np.unique(forms[np.concatenate(doc_tokens)]))),
                        "clusters": int(len(np.unique(np.concatenate(doc_clusters))))},
           "systems": {}}
    for system, matrix in scores.items():
        result = evaluate(data.qrels, top_run(matrix, qids, ids, k=DEPTH), ("ndcg@10",))
        per_query[system] = result.per_query
        row["systems"][system] = {"ndcg@10": result.mean["ndcg@10"]}
    base = per_query["words"]
    for system in scores:
        if system == "words":
            continue
        other = per_query[system]
        t = paired_test([other[qid]["ndcg@10"] for qid in base], [base[qid]["ndcg@10"] for qid in base])
        row["systems"][system]["vs_words"] = {"diff": t.diff, "wins": t.wins, "losses": t.losses,
                                              "p_randomization": t.p_randomization}
    print(row, flush=True)
    return row


def _p(p: float) -> str:
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def render(meta: dict) -> list[str]:
    sets = [r["set"] for r in meta["rows"]]
    lines = ["# Exact matching in the lexicon's space: BM25 over words, tokens and clusters", "",
             f"Command: `{meta['command']}`", "",
             f"Model `{meta['model']}` ({meta['quantize'] or 'float32'} for its cached vectors); nDCG@10 on each "
             "set's test queries, every document scored. Under each number: its difference from `words` (the BM25 "
             "baseline's terms), queries better / worse, and the p of the paired randomization test.", "",
             "| system | " + " | ".join(sets) + " |", "|---|" + "---:|" * len(sets)]
    for system in ROWS:
        cells = []
        for r in meta["rows"]:
            s = r["systems"][system]
            cell = f"{s['ndcg@10']:.3f}"
            if "vs_words" in s:
                v = s["vs_words"]
                cell += f" ({v['diff']:+.3f}, {v['wins']}/{v['losses']}, p {_p(v['p_randomization'])})"
            cells.append(cell)
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    lines += ["", "| set | documents | queries | model tokens per document | distinct tokens | distinct forms | "
              "distinct clusters |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in meta["rows"]:
        lines.append(f"| {r['set']} | {r['documents']} | {r['queries']} | {r['doc_tokens_mean']:.0f} | "
                     f"{r['distinct']['tokens']} | {r['distinct']['forms']} | {r['distinct']['clusters']} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__.split("\n\n")[0])
    add_suite_study_arguments(parser, OUT)
    args = parser.parse_args(argv)
    return run_suite_study(args, argv, "exact_space.py", study_set, render)


if __name__ == "__main__":
    sys.exit(main())
