"""``lens bench ateb``: advanced tasks as retrieval (ATEB / RAR-b development sets, ``lens.ateb``) for every
system in one process.

For each task (``lens.ateb.TASKS``, files under ``<data dir>/ateb`` where the data dir is ``--data-dir``, else
``$LENS_DATA_DIR``, else ``../shared/data``) and each of its formulations: every system scores each query against
its candidate texts; the task's measures (accuracy; nDCG@10 for the answer pool; AP for pair classification) are
written with the random baseline beside them, to ``<output>/<task>/results.json`` (+ ``results.md``,
``scores.png``, ``per_query.json.gz``, ``run_info.json``); then ``<output>/README.md`` gathers every task present.

Systems (the encoders and caches of ``lens.eval.systems``): ``bm25`` (``lens.bm25.BM25Index`` over the task's
documents; a query's score for a candidate is its BM25 score, 0 when they share no term), ``minilm``,
``lens-lexicon``, ``lens-dense``, ``lens-hybrid`` (``w_lex cos_lex + w_dense cos_MiniLM``, as ``index.HybridIndex``
scores), and the peers ``splade-tiny`` / ``mpnet`` when installed (``make peers``). Each distinct text is encoded
once per system and kept in the embedding cache (``lens.eval.cache``): documents as the BEIR harness stores them,
LENS queries under their instruction, so a rerun encodes nothing. Scores are computed for the candidates only.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import logging
import math
import os
import time
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from lens.cmdline import command_line, positive_int, seed_int
from lens.eval.beir import (DATA_DIR_ENV, DEFAULT_CACHE_DIR, loadavg, hybrid_weights_arg, recorded_weights,
                            add_data_argument, contention_note, data_dir, machine_info, peak_rss_mb, torch_threads)

logger = logging.getLogger(__name__)

__all__ = ["ATEB_SYSTEMS", "BM25Scorer", "DenseScorer", "LensHybridScorer", "LensQueries", "LensScorer", "Scorer",
           "add_arguments", "candidate_scores", "check_results", "default_systems", "make_scorers", "readme_text",
           "results_markdown", "run", "run_task", "write_task_results"]

DEFAULT_OUTPUT_DIR = Path("benchmarks") / "results" / "ateb"
ATEB_SYSTEMS = ("bm25", "minilm", "lens-lexicon", "lens-dense", "lens-hybrid", "splade-tiny", "mpnet")
PEERS = ("splade-tiny", "mpnet")
RESULT_KEYS = ("task", "file", "command", "model", "rows", "of_rows", "max_rows", "seed", "formulations")
BLOCK = 256  # queries scored per matrix product


# ------------------------------------------------------------------------------------------- scoring
def distinct(texts: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """(the distinct texts in first-seen order, the row of each input text among them)."""
    rows: dict[str, int] = {}
    index = np.fromiter((rows.setdefault(t, len(rows)) for t in texts), dtype=np.int64, count=len(texts))
    return list(rows), index


def candidate_scores(q_mat, q_rows: np.ndarray, d_mat, d_rows: np.ndarray, candidates: Sequence[Sequence[int]],
                     block: int = BLOCK, show_progress_bar: bool = False) -> list[np.ndarray]:
    """``scores[i] = d_mat[d_rows[candidates[i]]] . q_mat[q_rows[i]]`` for every query ``i`` (numpy arrays or
    scipy sparse matrices): per block of queries, one product with the union of their candidates only."""
    from tqdm.auto import tqdm

    out: list[np.ndarray] = []
    for start in tqdm(range(0, len(candidates), block), desc="scoring", disable=not show_progress_bar, leave=False):
        stop = min(start + block, len(candidates))
        lists = {id(c): c for c in candidates[start:stop]}  # a shared pool is gathered once
        cols = np.unique(np.concatenate([d_rows[np.asarray(c, dtype=np.int64)] for c in lists.values()]))
        block_scores = q_mat[q_rows[start:stop]] @ d_mat[cols].T
        if hasattr(block_scores, "toarray"):
            block_scores = block_scores.toarray()
        block_scores = np.asarray(block_scores, dtype=np.float64)
        for j, i in enumerate(range(start, stop)):
            pos = np.searchsorted(cols, d_rows[np.asarray(candidates[i], dtype=np.int64)])
            out.append(block_scores[j, pos])
    return out


class Scorer:
    """A system: ``score(task)`` gives, per query, one score per candidate; ``costs`` describe the last call."""

    name = "scorer"

    def __init__(self, show_progress_bar: bool = False):
        self.costs: dict = {}
        self.show_progress_bar = show_progress_bar

    def score(self, task) -> list[np.ndarray]:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> str:
        return self.name

    def release(self) -> None:
        """Free what the system holds once every task is done."""

    @staticmethod
    def _encode_costs(results) -> dict:
        return {"encode_s": sum(r.encode_seconds for r in results), "texts_encoded": sum(r.encoded for r in results),
                "texts_cached": sum(r.cached for r in results)}


class BM25Scorer(Scorer):
    """BM25 (``lens.bm25``, the benchmark's one set-up) over the task's documents; each distinct query retrieves
    every document once, and its candidates' scores are read off (0 = no shared term)."""

    name = "bm25"
    chunk = 64  # queries per search call: (chunk x documents) scores in memory

    def score(self, task):
        from tqdm.auto import tqdm

        from lens.bm25 import BM25Index

        t0 = time.perf_counter()
        index = BM25Index(task.documents)
        build_s = time.perf_counter() - t0
        texts, rows = distinct(task.queries)
        users: list[list[int]] = [[] for _ in texts]
        for i, r in enumerate(rows):
            users[r].append(i)
        n = len(task.documents)
        out: list = [None] * len(task)
        for start in tqdm(range(0, len(texts), self.chunk), desc="bm25 queries", disable=not self.show_progress_bar,
                          leave=False):
            for j, (ids, scores) in enumerate(index.search(texts[start:start + self.chunk], n)):
                full = np.zeros(n, dtype=np.float64)
                full[ids] = scores
                for i in users[start + j]:
                    out[i] = full[np.asarray(task.candidates[i], dtype=np.int64)]
        self.costs = {"encode_s": 0.0, "index_build_s": build_s, "texts_encoded": 0, "texts_cached": 0}
        return out

    def describe(self):
        from lens.bm25 import BM25_CONFIG

        return "bm25s " + ", ".join(f"{k}={v}" for k, v in BM25_CONFIG.items()) + ", over the task's documents"


class DenseScorer(Scorer):
    """A dense encoder's cosine (``minilm``, the ``mpnet`` peer): queries and documents encoded alike, so both go
    through the resource's document cache in one call."""

    def __init__(self, resource, name: str, show_progress_bar: bool = False):
        super().__init__(show_progress_bar)
        self.resource, self.name = resource, name

    def vectors(self, task):
        """(vectors, query rows, document rows, cache result) of the task's distinct texts."""
        texts, rows = distinct(list(task.documents) + list(task.queries))
        result = self.resource.documents(texts)
        nd = len(task.documents)
        return result.arrays["vectors"], rows[nd:], rows[:nd], result

    def score(self, task):
        vecs, q_rows, d_rows, result = self.vectors(task)
        self.costs = self._encode_costs([result])
        return candidate_scores(vecs, q_rows, vecs, d_rows, task.candidates, show_progress_bar=self.show_progress_bar)

    def describe(self):
        enc = self.resource.encoder
        return f"{enc.name}, max {enc.max_seq_length} tokens, mean pooling, cosine (queries encoded like documents)"


class SpladeScorer(DenseScorer):
    """The SPLADE-tiny peer: dot product of sparse vectors (queries and documents encoded alike, cached as their
    nonzero weights)."""

    def score(self, task):
        from lens.peers import padded_to_csr

        texts, rows = distinct(list(task.documents) + list(task.queries))
        result = self.resource.documents(texts)
        mat = padded_to_csr(result.arrays["indices"], result.arrays["values"], self.resource.encoder.vocab_size)
        nd = len(task.documents)
        self.costs = self._encode_costs([result])
        return candidate_scores(mat, rows[nd:], mat, rows[:nd], task.candidates,
                                show_progress_bar=self.show_progress_bar)

    def describe(self):
        enc = self.resource.encoder
        return f"{enc.name}, max {enc.max_seq_length} tokens, SPLADE max pooling, dot product"


class LensQueries:
    """LENS query vectors (lexicon + dense, unit) behind an instruction, through the embedding cache; the LENS
    systems of a run share one instance, so each distinct query is encoded once per instruction."""

    def __init__(self, lens):
        self.lens = lens
        self._memo: tuple[tuple, object] | None = None

    def get(self, texts: list[str], instruction: str):
        from lens.eval.cache import EmbeddingCache
        from lens.inputs import normalize_texts

        # keyed by the texts the model encodes, as the documents are (LensResource.documents): the cache
        # fingerprint leaves the text rule out, so raw texts would share vectors across rules
        texts = normalize_texts(texts, self.lens.encoder.config.text_normalization, self.lens.encoder.casing_table)
        key = (instruction, len(texts), hash(tuple(texts)))
        if self._memo is None or self._memo[0] != key:
            enc = self.lens.encoder
            fingerprint = {**self.lens.cache_fingerprint(), "kind": "lens-queries", "instruction": instruction,
                           "query_template": enc.config.query_template}
            cache = EmbeddingCache(self.lens.cache_root, fingerprint, chunk_size=self.lens.texts_per_call)

            def encode(chunk):
                return enc.encode_queries(chunk, instruction=instruction, batch_size=self.lens.batch_size,
                                          output="both", show_progress_bar=False)

            result = cache.get(texts, encode, show_progress_bar=self.lens.show_progress_bar, desc="LENS queries")
            self._memo = (key, result)
        return self._memo[1]

    def release(self) -> None:
        self._memo = None


class LensScorer(Scorer):
    """The LENS model's lexicon (``lens-lexicon``) or dense (``lens-dense``) vectors, cosine; queries behind the
    task's instruction, documents as they are."""

    def __init__(self, lens, queries: LensQueries, part: str, show_progress_bar: bool = False):
        super().__init__(show_progress_bar)
        self.lens, self.queries, self.part = lens, queries, part
        self.name = f"lens-{part}"

    def score(self, task):
        docs = self.lens.documents(list(task.documents))
        texts, q_rows = distinct(task.queries)
        queries = self.queries.get(texts, task.instruction)
        self.costs = self._encode_costs([docs, queries])
        return candidate_scores(queries.arrays[self.part], q_rows, docs.arrays[self.part],
                                np.arange(len(task.documents)), task.candidates,
                                show_progress_bar=self.show_progress_bar)

    def describe(self):
        c = self.lens.encoder.config
        what = (f"lexicon (k={c.num_clusters}, {c.attention} attention, {c.pooling} pooling)" if self.part == "lexicon"
                else "dense vector (mean of last hidden states)")
        return f"LENS {self.lens.model_path} {what}, cosine"

    def release(self):
        self.lens.release()
        self.queries.release()


class LensHybridScorer(Scorer):
    """``w_lex`` x LENS lexicon cosine + ``w_dense`` x MiniLM cosine: the score ``index.HybridIndex`` gives.
    ``weights="balanced"`` resolves them for each task from its documents' vectors, as ``lens index build --weights
    balanced`` does for a corpus."""

    name = "lens-hybrid"

    def __init__(self, lens, queries: LensQueries, minilm: DenseScorer, weights=(0.5, 0.5),
                 show_progress_bar: bool = False):
        from index.vectors import BALANCED, weights_spec

        super().__init__(show_progress_bar)
        self.lex = LensScorer(lens, queries, "lexicon", show_progress_bar)
        self.minilm = minilm
        spec = weights_spec(weights)
        self.balanced = spec == BALANCED
        self.weights = None if self.balanced else spec

    def score(self, task):
        from index.vectors import balanced_weights

        lex = self.lex.score(task)
        costs = dict(self.lex.costs)
        dense = self.minilm.score(task)
        costs = {k: costs[k] + self.minilm.costs[k] for k in costs}
        self.costs = costs
        if self.balanced:  # from this task's documents (both parts come from the caches the scores filled)
            vectors, _, doc_rows, _ = self.minilm.vectors(task)
            lexicon = self.lex.lens.documents(list(task.documents)).arrays["lexicon"]
            self.weights = balanced_weights(lexicon, vectors[doc_rows])
        w_lex, w_dense = self.weights
        return [w_lex * a + w_dense * b for a, b in zip(lex, dense)]

    def describe(self):
        w = "unresolved" if self.weights is None else f"({self.weights[0]:.3f}, {self.weights[1]:.3f})"
        how = " (balanced on this task's documents: index.vectors.balanced_weights)" if self.balanced else ""
        return f"LENS {self.lex.lens.model_path} lexicon + MiniLM dense, weights (lex, dense) = {w}{how}"

    def release(self):
        self.lex.release()
        self.minilm.release()


def default_systems() -> list[str]:
    """Every system whose packages are installed (the peers only when ``make peers`` ran; one warning names the
    skipped ones)."""
    from lens.eval.systems import missing_peers

    missing = missing_peers(list(PEERS))
    if missing:
        logger.warning("skipping peer system(s) %s: not installed (make peers)", ", ".join(missing))
    return [n for n in ATEB_SYSTEMS if n not in missing]


def make_scorers(names: Sequence[str], resources, weights=(0.5, 0.5), show_progress_bar: bool = False) -> list[Scorer]:
    """The named systems over one ``lens.eval.systems.Resources`` (each encoder loaded at most once). A peer named
    but not installed fails here, naming ``make peers``."""
    from lens.eval.systems import missing_peers

    unknown = [n for n in names if n not in ATEB_SYSTEMS]
    if unknown:
        raise ValueError(f"unknown system {unknown[0]!r}; valid: {', '.join(ATEB_SYSTEMS)}")
    for n in missing_peers([n for n in names if n in PEERS]):
        from lens.peers import mpnet_parts, splade_model_path

        (splade_model_path if n == "splade-tiny" else mpnet_parts)()  # raises, naming the install command
    queries = LensQueries(resources.lens)
    minilm = DenseScorer(resources.minilm, "minilm", show_progress_bar)
    made = {
        "bm25": lambda: BM25Scorer(show_progress_bar),
        "minilm": lambda: minilm,
        "lens-lexicon": lambda: LensScorer(resources.lens, queries, "lexicon", show_progress_bar),
        "lens-dense": lambda: LensScorer(resources.lens, queries, "dense", show_progress_bar),
        "lens-hybrid": lambda: LensHybridScorer(resources.lens, queries, minilm, weights, show_progress_bar),
        "splade-tiny": lambda: SpladeScorer(resources.splade, "splade-tiny", show_progress_bar),
        "mpnet": lambda: DenseScorer(resources.mpnet, "mpnet", show_progress_bar),
    }
    return [made[n]() for n in names]


# ------------------------------------------------------------------------------------------- one task
def check_formulations(name: str, rows: list[dict], ateb_dir: str | os.PathLike) -> None:
    """Build every formulation of task ``name`` on ``rows`` (cheap: no encoding), so that a row one cannot take
    fails before any model loads, naming the task and its file."""
    from lens.ateb import TASKS, formulate

    for kind in TASKS[name].kinds:
        try:
            formulate(name, kind, rows)
        except ValueError as e:
            raise ValueError(f"task {name!r} ({Path(ateb_dir) / TASKS[name].file}), {kind}: {e} (label documents: "
                             "lens.ateb.LABEL_DOCUMENTS)") from None


def run_task(name: str, rows: list[dict], of_rows: int, scorers: Sequence[Scorer], *, threads: int | None = None,
             ) -> tuple[dict, dict]:
    """Every formulation of task ``name`` on ``rows`` by every scorer: (``formulations`` entry of results.json,
    per-query outcomes)."""
    from lens.ateb import METRICS, TASKS, formulate, per_query_values, random_baseline, task_metrics

    formulations, per_query = {}, {}
    for kind in TASKS[name].kinds:
        task = formulate(name, kind, rows)
        systems, outcomes = {}, {}
        for scorer in scorers:
            logger.info("%s %s: running %s", name, kind, scorer.name)
            load_before = loadavg()
            t0 = time.perf_counter()
            with torch_threads(threads):
                scores = scorer.score(task)
            seconds = time.perf_counter() - t0
            values = task_metrics(task, scores)
            systems[scorer.name] = {**{m: float(v) for m, v in values.items()}, **scorer.costs,
                                    "seconds": seconds, "peak_rss_mb": peak_rss_mb(),
                                    "load_avg_1m": [load_before, loadavg()], "description": scorer.describe()}
            outcomes[scorer.name] = per_query_values(task, scores)
            logger.info("%s %s %s: %s", name, kind, scorer.name,
                        ", ".join(f"{m} {v:.4f}" for m, v in values.items()))
        formulations[kind] = {
            "instruction": task.instruction, "queries": len(task), "documents": len(task.documents),
            "mean_candidates": float(np.mean([len(c) for c in task.candidates])),
            "metrics": list(METRICS[kind]), "random": random_baseline(task), "systems": systems,
        }
        per_query[kind] = {"ids": task.ids, "gold": task.gold if kind == "pair-classification"
                           else task.gold_positions(), "systems": outcomes}
    return formulations, per_query


# ------------------------------------------------------------------------------------------- result files
def check_results(obj: Mapping) -> None:
    """Raise ValueError unless ``obj`` has the shape of an ATEB results.json."""
    if not isinstance(obj, Mapping) or set(obj) != set(RESULT_KEYS):
        got = sorted(obj) if isinstance(obj, Mapping) else obj
        raise ValueError(f"ATEB results must have exactly the keys {RESULT_KEYS}, got {got!r}")
    if not isinstance(obj["formulations"], Mapping) or not obj["formulations"]:
        raise ValueError("results['formulations'] must be a non-empty mapping")
    for kind, f in obj["formulations"].items():
        for key in ("metrics", "random", "systems"):
            if key not in f:
                raise ValueError(f"results['formulations'][{kind!r}] has no {key!r}")
        for m in f["metrics"]:
            if not isinstance(f["random"].get(m), float):
                raise ValueError(f"results['formulations'][{kind!r}]['random'][{m!r}] must be a float")
            for name, s in f["systems"].items():
                if not isinstance(s.get(m), float):
                    raise ValueError(f"results['formulations'][{kind!r}]['systems'][{name!r}][{m!r}] must be a float")


def _fmt(v, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def results_markdown(results: Mapping, info: Mapping) -> str:
    """``results.md``: per formulation, every system's measures with the random baseline as the first row."""
    from lens.eval.report import machine_lines

    lines = [f"# {results['task']} (`{results['file']}`)", ""]
    if results["max_rows"]:
        lines += [f"> **SUBSAMPLE — smoke test only:** {results['rows']} of {results['of_rows']} rows (seed "
                  f"{results['seed']}).", ""]
    lines += ["Reproduce:", "", "```bash", results["command"], "```", "", f"LENS model: `{results['model']}`.", ""]
    for kind, f in results["formulations"].items():
        metrics = f["metrics"]
        lines += [f"## {kind}", "",
                  f"{f['queries']} queries, {f['documents']} distinct candidate texts, {f['mean_candidates']:.1f} "
                  f"candidates per query. Query instruction: \"{f['instruction']}\".", "",
                  "| system | " + " | ".join(metrics) + " | seconds | texts encoded / cached |",
                  "|---" * (len(metrics) + 3) + "|",
                  "| random (chance) | " + " | ".join(_fmt(f["random"][m]) for m in metrics) + " | – | – |"]
        for name, s in f["systems"].items():
            cost = f"{_fmt(s.get('seconds'), 1)} | {s.get('texts_encoded', 0)} / {s.get('texts_cached', 0)}"
            lines.append(f"| {name} | " + " | ".join(_fmt(s[m]) for m in metrics) + f" | {cost} |")
        lines.append("")
    lines += ["## How these were measured", "",
              "- accuracy: share of queries whose correct candidate scores strictly highest (a tie is wrong); chance "
              "is the mean of 1/candidates.",
              "- nDCG@10 (answer pool): one relevant candidate, gain 1, its rank counting ties against it; chance "
              "is exact for a random order.",
              "- AP (pair classification): average precision of the pair scores over all pairs, no threshold "
              "(MTEB); chance is the positive rate.",
              "", "| system | what |", "|---|---|"]
    first = next(iter(results["formulations"].values()))
    lines += [f"| {name} | {s.get('description', '')} |" for name, s in first["systems"].items()]
    lines += machine_lines(info)
    return "\n".join(lines) + "\n"


def plot_scores(results: Mapping, path: str | os.PathLike) -> None:
    """One panel per formulation: each system's main measure as a bar, chance as a dashed line (Agg backend)."""
    from lens.eval.report import agg_pyplot, save_figure

    plt = agg_pyplot("the ATEB plot (or pass --no-plot)")
    kinds = list(results["formulations"])
    fig, axes = plt.subplots(1, len(kinds), figsize=(4.2 * len(kinds), 3.6), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        f = results["formulations"][kind]
        main = f["metrics"][0]
        names = list(f["systems"])
        values = [f["systems"][n][main] for n in names]
        bars = ax.bar(range(len(names)), [0.0 if math.isnan(v) else v for v in values], color="#4c72b0")
        ax.bar_label(bars, labels=[_fmt(v) for v in values], fontsize=7, padding=2)
        ax.axhline(f["random"][main], color="#c44e52", linestyle="--", linewidth=1, label="random")
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
        ax.set_ylim(0, 1.05)
        ax.set_title(f"{kind}: {main}", fontsize=9)
        ax.legend(fontsize=7, loc="upper right")
    fig.suptitle(f"{results['task']}, LENS model {results['model']}", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def write_task_results(directory: str | os.PathLike, results: Mapping, per_query: Mapping, info: Mapping,
                       plot: bool = True) -> Path:
    """Write results.json, per_query.json.gz, run_info.json, results.md and scores.png into ``directory``."""
    from lens.eval.report import write_result_files

    check_results(results)
    d = write_result_files(directory, results, per_query, info, results_markdown(results, info))
    if plot:
        plot_scores(results, d / "scores.png")
    return d


def readme_text(root: str | os.PathLike) -> str:
    """The README of every ``*/results.json`` under ``root``: one row per task, formulation and measure, chance
    beside the systems."""
    from lens.ateb import KINDS
    from lens.eval.report import result_folders

    entries = result_folders(root, check_results, "ATEB results")
    lines = ["# Advanced tasks as retrieval (ATEB / RAR-b development sets)", "",
             "Generated by `lens bench ateb` from every `*/results.json` below this folder; do not edit by hand. "
             "Each folder's `results.md` has the details (instructions, costs, how each number is measured).", ""]
    if not entries:
        return "\n".join(lines + ["No results yet.", ""])
    lines += ["```bash", *dict.fromkeys(r["command"] for _, r in entries), "```", ""]
    systems = list(dict.fromkeys(n for _, r in entries for f in r["formulations"].values() for n in f["systems"]))
    systems.sort(key=lambda n: (ATEB_SYSTEMS.index(n) if n in ATEB_SYSTEMS else len(ATEB_SYSTEMS), n))
    lines += ["| task | formulation | measure | random | " + " | ".join(systems) + " |",
              "|---" * (4 + len(systems)) + "|"]
    for folder, r in entries:
        label = folder + (f" ({r['rows']} of {r['of_rows']} rows)" if r["max_rows"] else "")
        for kind in sorted(r["formulations"], key=lambda k: KINDS.index(k) if k in KINDS else len(KINDS)):
            f = r["formulations"][kind]
            for m in f["metrics"]:
                cells = [_fmt(f["systems"][n][m]) if n in f["systems"] else "" for n in systems]
                lines.append(f"| {label} | {kind} | {m} | {_fmt(f['random'][m])} | " + " | ".join(cells) + " |")
    models = sorted({r["model"] for _, r in entries})
    lines += ["", "Accuracy counts a tie for the top as wrong, so a system that scores the choices alike falls below "
              "random: BM25 does where every choice shares the query's words (a WinoGrande sentence holds both "
              "options).", "", f"LENS model(s): {', '.join(f'`{m}`' for m in models)}."]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------- CLI
def _tasks(value: str) -> list[str]:
    from lens.ateb import TASKS

    names = [s.strip() for s in value.split(",") if s.strip()]
    bad = [n for n in names if n not in TASKS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown task {bad[0] if bad else value!r}; valid: {', '.join(TASKS)}")
    return list(dict.fromkeys(names))


def _systems(value: str) -> list[str]:
    names = [s.strip() for s in value.split(",") if s.strip()]
    bad = [n for n in names if n not in ATEB_SYSTEMS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown system {bad[0] if bad else value!r}; "
                                         f"valid: {', '.join(ATEB_SYSTEMS)}")
    return list(dict.fromkeys(names))


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ATEB runner's options to ``parser`` (the ``lens bench ateb`` subparser)."""
    from lens.eval.report import add_result_overwrite_argument

    from lens.ateb import TASKS

    parser.add_argument("--tasks", type=_tasks, default=list(TASKS),
                        help=f"comma-separated, of: {','.join(TASKS)} (default: all); files under DATA_DIR/ateb")
    add_data_argument(parser)
    parser.add_argument("--systems", type=_systems, default=None,
                        help=f"comma-separated, of: {','.join(ATEB_SYSTEMS)}; default: every one whose packages are "
                             "installed (the peers splade-tiny, mpnet need `make peers`)")
    parser.add_argument("--model", default="default", help="LENS model directory or 'default'")
    parser.add_argument("--weights", type=hybrid_weights_arg, default=(0.5, 0.5),
                        help="lens-hybrid weights LEX,DENSE (default 0.5,0.5), or 'balanced': each part weighted "
                             "inversely to the spread of its cosines over each task's documents")
    parser.add_argument("--max-rows", type=positive_int, default=None,
                        help="SMOKE TESTS ONLY: a seeded random subset of N rows per task (recorded in results.json)")
    parser.add_argument("--seed", type=seed_int, default=0, help="seed of the --max-rows subset (default 0)")
    parser.add_argument("--output", "--output-dir", dest="output", type=Path, default=None,
                        help=f"results root (default: {DEFAULT_OUTPUT_DIR} in the working directory)")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help=f"embedding cache (default: {DEFAULT_CACHE_DIR} in the working directory)")
    parser.add_argument("--lens-batch-size", type=positive_int, default=4, help="LENS texts per forward pass")
    from lens.eval.beir import add_lens_device_arguments

    add_lens_device_arguments(parser)
    parser.add_argument("--threads", type=positive_int, default=None,
                        help="torch threads for encoding (default: torch's default, one per core)")
    parser.add_argument("--no-plot", action="store_true", help="skip scores.png")
    add_result_overwrite_argument(
        parser, "replace a task's earlier run in the results root (refused without it, before any work)")
    return parser


def run(args: argparse.Namespace) -> int:
    """Run the ATEB benchmark described by ``args`` (from :func:`add_arguments`); returns an exit code."""
    from lens.ateb import TASKS, load_rows, sample_rows
    from lens.bm25 import BM25_CONFIG
    from lens.eval.systems import Resources

    command = getattr(args, "bench_command_line", None) or command_line()
    quiet = getattr(args, "quiet", False)
    if not args.no_plot:
        from lens.eval.report import require_bench_extras

        require_bench_extras(metrics=False)  # scores.png: a missing extra fails before any encoding
    root = data_dir(args.data_dir) / "ateb"
    if not root.is_dir():
        raise FileNotFoundError(f"{root} not found: the ATEB sets live in <data dir>/ateb; give --data-dir DIR or "
                                f"set {DATA_DIR_ENV}")
    cache_dir = Path(args.cache_dir or DEFAULT_CACHE_DIR)
    out_root = Path(args.output or DEFAULT_OUTPUT_DIR)
    from lens.eval.report import check_readme_target, check_run_target, clear_run_files

    check_readme_target(out_root, "--output", kind="ateb")  # a user's README, or BEIR runs: refused before work
    loaded = {name: load_rows(name, root) for name in args.tasks}  # fail early on a missing or malformed file
    sampled = {name: sample_rows(rows, args.max_rows, args.seed) for name, rows in loaded.items()}
    for name, rows in sampled.items():  # and on rows a formulation cannot take (a label without a document)
        check_formulations(name, rows, root)
    folders = {name: name + ("-subsample" if args.max_rows else "") for name in args.tasks}
    for folder in folders.values():  # a user's files, or (without --overwrite) an earlier run: before any work
        check_run_target(out_root / folder, "--output", overwrite=args.overwrite)
    names = args.systems or default_systems()
    from lens.eval.beir import lens_device, precision_name

    resources = Resources(model=args.model, cache_root=cache_dir, lens_batch_size=args.lens_batch_size,
                          show_progress_bar=not quiet, lens_device=lens_device(args),
                          lens_dtype=getattr(args, "dtype", None))
    scorers = make_scorers(names, resources, args.weights, show_progress_bar=not quiet)
    summaries = []
    for name, all_rows in loaded.items():
        rows = sampled[name]
        if args.max_rows:
            logger.warning("%s: SUBSAMPLE (smoke test only): %d of %d rows", name, len(rows), len(all_rows))
        folder = folders[name]
        started = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
        formulations, per_query = run_task(name, rows, len(all_rows), scorers, threads=args.threads)
        results = {"task": name, "file": TASKS[name].file, "command": command, "model": args.model,
                   "rows": len(rows), "of_rows": len(all_rows), "max_rows": args.max_rows, "seed": args.seed,
                   "formulations": formulations}
        with torch_threads(args.threads):
            machine = machine_info()
        systems_flat = {f"{k}/{n}": s for k, f in formulations.items() for n, s in f["systems"].items()}
        info = {"data_path": str(root / TASKS[name].file), "started": started,
                "finished": _dt.datetime.now().astimezone().isoformat(timespec="seconds"), "machine": machine,
                "cache_dir": str(cache_dir), "bm25": BM25_CONFIG, "weights_lens_hybrid": recorded_weights(args.weights),
                "contention": contention_note(systems_flat, machine.get("cpus"))}
        if any(n.startswith("lens") for n in names):
            enc = resources.lens.encoder
            info["lens"] = {"fingerprint": enc.fingerprint(), "num_clusters": enc.num_clusters,
                            "backbone": enc.config.backbone, "load_s": resources.lens.load_seconds,
                            "device": str(enc.device), "dtype": precision_name(enc)}
        clear_run_files(out_root / folder)  # an earlier run's (--overwrite): none of its files stays
        write_task_results(out_root / folder, results, per_query, info, plot=not args.no_plot)
        summaries.append(summary_table(results))
    for scorer in scorers:
        scorer.release()
    readme = out_root / "README.md"
    from lens.atomic import atomic_write_bytes

    check_readme_target(out_root, "--output", kind="ateb")
    atomic_write_bytes(readme, readme_text(out_root).encode("utf-8"))
    print("\n\n".join(summaries) + f"\n\nresults in {out_root} (README: {readme})")
    return 0


def summary_table(results: Mapping) -> str:
    """A plain-text table of one task's results for the terminal."""
    names = list(dict.fromkeys(n for f in results["formulations"].values() for n in f["systems"]))
    w = max([14, *(len(n) for n in names)])
    rows = [f"{results['task']} ({results['rows']} of {results['of_rows']} rows)",
            f"{'formulation':<20} {'measure':<9} {'random':>7} " + " ".join(f"{n:>{w}}" for n in names)]
    for kind, f in results["formulations"].items():
        for m in f["metrics"]:
            cells = " ".join(f"{_fmt(f['systems'][n][m]) if n in f['systems'] else '':>{w}}" for n in names)
            rows.append(f"{kind:<20} {m:<9} {_fmt(f['random'][m]):>7} {cells}")
    return "\n".join(rows)
