"""``lens bench beir``: run every retrieval system on BEIR-layout datasets in one process and write the results.

For each dataset (a BEIR directory, or a name found under ``<data dir>/beir`` or ``<data dir>/classic``, where the
data dir is ``--data-dir``, else ``$LENS_DATA_DIR``, else ``../shared/data`` from the working directory): load corpus, queries and the split's qrels; build each system (document vectors come from
the embedding cache when they are there); answer each query on its own, timed; evaluate; write
``<output>/<dataset>/results.json`` (+ ``results.md``, ``ndcg.png``, ``per_query.json.gz``, ``run_info.json``); then
regenerate ``<output>/README.md`` from every dataset present.

Wire it into a CLI with ``add_arguments(parser)`` and ``run(args)``; ``benchmarks/beir.py`` does that.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import functools
import logging
import os
import platform
import resource
import shlex
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from lens.cmdline import command_line, positive_int

logger = logging.getLogger(__name__)

__all__ = ["Dataset", "add_arguments", "data_dir", "evaluate_system", "load_dataset", "resolve_dataset", "run",
           "run_dataset"]

QUERY_WARMUP = 1


# ------------------------------------------------------------------------------------------- locations
DATA_DIR_ENV = "LENS_DATA_DIR"
DEFAULT_DATA_DIR = Path("..") / "shared" / "data"  # the project's layout: the data beside the checkout
DEFAULT_CACHE_DIR = Path(".cache") / "lens-bench"
DEFAULT_OUTPUT_DIR = Path("benchmarks") / "results" / "beir"
DATA_GROUPS = ("beir", "classic")
# How a set name resolves, for the help of every flag that takes one (``resolve_dataset``).
DATA_DIR_HELP = (f"a name is looked up under DATA_DIR/beir and DATA_DIR/classic, DATA_DIR being --data-dir, else "
                 f"${DATA_DIR_ENV}, else {DEFAULT_DATA_DIR} (relative to the current folder)")


def data_dir(given: str | os.PathLike | None = None) -> Path:
    """Where dataset names are looked up: ``given``, else ``$LENS_DATA_DIR``, else ``../shared/data``."""
    return Path(given or os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR).expanduser()


def resolve_dataset(arg: str | os.PathLike, data: str | os.PathLike | None = None) -> Path:
    """A BEIR directory: ``arg`` itself, else ``<data dir>/{beir,classic}/<arg>`` (see ``data_dir``)."""
    p = Path(arg).expanduser()
    if p.is_dir():
        return p
    root = data_dir(data)
    for group in DATA_GROUPS:
        candidate = root / group / os.fspath(arg)
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"dataset {os.fspath(arg)!r} not found: it is not a directory, nor a name under "
        f"{root / 'beir'} or {root / 'classic'}; give a path, --data-dir DIR or set {DATA_DIR_ENV} "
        f"(the data dir when neither is given: {DEFAULT_DATA_DIR}, relative to the current folder)"
        + ("; a variant of a set is written first by `lens data variant SET --variant NAME --out DIR`"
           if len(p.parts) > 1 else "")
    )


# ------------------------------------------------------------------------------------------- data
@dataclass
class Dataset:
    name: str
    path: Path
    split: str
    docs: list
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    subsample: dict | None = None


def check_layout(d: Path, split: str) -> None:
    """Name the missing file (and the splits that exist) before the loader runs."""
    if not any((d / n).is_file() for n in ("corpus.jsonl", "corpus.jsonl.gz")):
        raise FileNotFoundError(f"{d / 'corpus.jsonl.gz'} not found (nor corpus.jsonl): {d} is not a BEIR directory")
    if not any((d / n).is_file() for n in ("queries.jsonl", "queries.jsonl.gz")):
        raise FileNotFoundError(f"{d / 'queries.jsonl.gz'} not found (nor queries.jsonl) in BEIR directory {d}")
    qrels = d / "qrels" / f"{split}.tsv"
    if not qrels.is_file() and not qrels.with_name(qrels.name + ".gz").is_file():
        have = sorted(p.name.split(".")[0] for p in (d / "qrels").glob("*.tsv*")) if (d / "qrels").is_dir() else []
        raise FileNotFoundError(f"{qrels} not found: no qrels for split {split!r}"
                                + (f" (splits present: {', '.join(have)})" if have else " (no qrels folder)"))


def subsample(docs, queries, qrels, max_docs: int | None, max_queries: int | None):
    """SMOKE TESTS ONLY: the first ``max_queries`` queries (qrels order) and at most ``max_docs`` documents,
    their judged documents first, then others in corpus order. Returns (docs, queries, qrels)."""
    qids = list(qrels)[: max_queries] if max_queries else list(qrels)
    qrels = {q: qrels[q] for q in qids}
    queries = {q: queries[q] for q in qids}
    if max_docs and max_docs < len(docs):
        judged = {d for q in qids for d, g in qrels[q].items() if g > 0}
        keep = [d for d in docs if d.id in judged][:max_docs]
        ids = {d.id for d in keep}
        keep += [d for d in docs if d.id not in ids][: max_docs - len(keep)]
        order = {d.id: i for i, d in enumerate(docs)}
        docs = sorted(keep, key=lambda d: order[d.id])
    return docs, queries, qrels


def load_dataset(path: str | os.PathLike, split: str = "test", max_docs: int | None = None,
                 max_queries: int | None = None, data: str | os.PathLike | None = None) -> Dataset:
    from lens.corpus import load_beir

    d = resolve_dataset(path, data)
    check_layout(d, split)
    docs, queries, qrels = load_beir(d, split)
    ids = {doc.id for doc in docs}
    missing = {doc for grades in qrels.values() for doc, g in grades.items() if g > 0 and doc not in ids}
    if missing:
        logger.warning("%s: qrels/%s names %d relevant documents the corpus lacks (e.g. %s): no system can find "
                       "them, so recall and nDCG stay under 1", d.name, split, len(missing),
                       ", ".join(sorted(missing)[:3]))
    unjudged = sum(1 for grades in qrels.values() if not any(g > 0 for g in grades.values()))
    if unjudged:
        logger.warning("%s: %d of %d queries have no relevant document in qrels/%s: each scores 0 on every measure "
                       "and counts in the means (as pytrec_eval and trec_eval -c count it)", d.name, unjudged,
                       len(qrels), split)
    info = None
    if max_docs or max_queries:
        n_docs, n_q = len(docs), len(queries)
        docs, queries, qrels = subsample(docs, queries, qrels, max_docs, max_queries)
        info = {"docs": len(docs), "queries": len(queries), "of_docs": n_docs, "of_queries": n_q,
                "note": "SUBSAMPLE for smoke testing only; numbers are not comparable"}
        logger.warning("SUBSAMPLE (smoke test only): %d of %d documents, %d of %d queries",
                       len(docs), n_docs, len(queries), n_q)
    return Dataset(d.name.lower(), d, split, docs, queries, qrels, info)


# ------------------------------------------------------------------------------------------- measuring
def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (ru_maxrss is KiB on Linux, bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024


def loadavg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:  # pragma: no cover - not on every platform
        return None


def percentile_ms(seconds: Sequence[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(seconds, dtype=np.float64) * 1000.0, q)) if len(seconds) else float("nan")


@contextlib.contextmanager
def torch_threads(n: int | None):
    """Run the body with ``n`` torch intra-op threads (None: leave the setting alone), then restore it."""
    if n is None:
        yield
        return
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def evaluate_system(system, data: Dataset, depth: int, drop_self: bool = False, show_progress_bar: bool = True,
                    threads: int | None = None, query_threads: int | None = 1) -> dict:
    """Build ``system`` on the dataset (``threads`` torch threads), answer each query alone, timed, with
    ``query_threads`` torch threads; evaluate. Returns ``{"summary": {...results.json entry...},
    "per_query": {qid: {...}}}``."""
    from tqdm.auto import tqdm

    from lens.encoder import count_truncations, reported_truncations
    from lens.metrics import drop_self_hits, evaluate

    load_before = loadavg()
    t0 = time.perf_counter()
    with torch_threads(threads):
        system.build(data.docs)
    build_total = time.perf_counter() - t0
    items = list(data.queries.items())
    run, times = {}, []
    with torch_threads(query_threads):
        with count_truncations():  # the warm-up repeats the first queries: counted below, not here
            for _, text in items[:QUERY_WARMUP]:
                system.search(text, depth)
        # one truncation warning for the whole loop, with the count, not one per query
        with reported_truncations("queries", f"{data.name} {system.name}"):
            # the query loop's own bar, left on screen like the build's (one bar per job, none inside another)
            for qid, text in tqdm(items, desc=f"{system.name} queries", unit="query", disable=not show_progress_bar):
                t = time.perf_counter()
                hits = system.search(text, depth)
                times.append(time.perf_counter() - t)
                run[qid] = hits
    if drop_self:
        run = drop_self_hits(run)
    ev = evaluate(data.qrels, run)
    costs = dict(system.costs)
    docs_per_s = costs.pop("docs_per_s", None)
    summary = {
        **{m: float(v) for m, v in ev.mean.items()},
        "docs_per_s": float(docs_per_s) if docs_per_s is not None else float("nan"),
        "query_ms_p50": percentile_ms(times, 50),
        "query_ms_p95": percentile_ms(times, 95),
        "query_ms_mean": 1000.0 * sum(times) / len(times) if times else float("nan"),
        **costs,
        "build_total_s": build_total,
        "peak_rss_mb": peak_rss_mb(),
        "load_avg_1m": [load_before, loadavg()],
        "queries": len(items),
        "query_threads": query_threads,
        "queries_without_hits": sum(1 for h in run.values() if not h),
        "description": system.describe(),
    }
    if data.subsample:
        summary["subsample"] = data.subsample
    qtimes = {q: t * 1000.0 for (q, _), t in zip(items, times)}
    per_query = {q: ({**v, "query_ms": qtimes[q]} if q in qtimes else dict(v)) for q, v in ev.per_query.items()}
    return {"summary": summary, "per_query": per_query, "run": run}


@functools.lru_cache(maxsize=1)
def source_commit() -> str | None:
    """The git commit of the checkout ``lens`` runs from (``+dirty`` with uncommitted changes to tracked files), so
    a result names the code that measured it; None for an installed package or without git. Read once a process
    (two git calls), not at every set's run."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def machine_info() -> dict:
    """The machine a run measured on: CPUs, their model and the int8 instruction sets they have (quantized
    encodings differ between hosts: ``lens.host``), platform, Python, torch and its quantized engine, and the lexlens
    release and checkout commit that measured (``source_commit``)."""
    from importlib.metadata import PackageNotFoundError, version

    from lens.host import cpu_name, int8_features

    try:
        release = version("lexlens")
    except PackageNotFoundError:  # run from a checkout without installing
        release = None
    info = {"cpus": os.cpu_count(), "cpu": cpu_name(), "int8_features": int8_features(),
            "platform": platform.platform(), "python": platform.python_version(), "lens": release,
            "lens_commit": source_commit()}
    try:
        import torch

        info.update(torch=torch.__version__, torch_threads=torch.get_num_threads(),
                    quantized_engine=torch.backends.quantized.engine)
    except ImportError:  # pragma: no cover
        pass
    return info


def contention_note(summaries: dict, cpus: int | None) -> str | None:
    """A sentence when the 1-minute load average went above the CPU count while systems ran."""
    cpus = cpus or 1
    busy = {n: max(x for x in s.get("load_avg_1m", [None]) if x is not None)
            for n, s in summaries.items() if any(x is not None for x in s.get("load_avg_1m", []))}
    over = {n: v for n, v in busy.items() if v > cpus + 0.5}
    if not over:
        return None
    worst = max(over.values())
    return (f"the 1-minute load average reached {worst:.1f} on {cpus} CPUs while "
            f"{', '.join(over)} ran: other jobs shared the cores, so throughput and latency of those systems are "
            "pessimistic.")


# BEIR's sets whose queries are corpus documents under their own ids: a query's own document is dropped from its hits
# (BEIR's EvaluateRetrieval ignores identical ids, and its maintainers name these two sets). Not the classic sets
# (Cranfield, MEDLINE, ADI), whose query and document ids merely share the numbers 1, 2, ... (and where document n
# is sometimes relevant to query n): BEIR's default would drop those too, so re-score their runs with
# ignore_identical_ids=False to compare (ADI BM25 nDCG@10: 0.4938 kept, 0.4840 dropped).
SELF_HIT_SETS = frozenset({"arguana", "quora"})


def run_dataset(data: Dataset, systems, *, depth: int, out_dir: Path, command: str, model: str,
                extra_info: dict | None = None, drop_self: bool | None = None, plot: bool = True,
                show_progress_bar: bool = True, release_each: bool = False, threads: int | None = None,
                query_threads: int | None = 1, save_runs: bool = False, overwrite: bool = False) -> dict:
    """Evaluate ``systems`` on ``data`` and write the dataset's result files into ``out_dir``; returns results.

    ``release_each`` frees each system (index, and an encoder it owns) as soon as it is evaluated; otherwise all
    are freed at the end (fusions reuse their components' indexes). ``save_runs``: each system's ranking also as a
    TREC run file, ``out_dir/runs/<system>.trec`` (``lens.trec``), the hits it was judged on. An earlier run in
    ``out_dir`` is refused before any work, or with ``overwrite`` replaced whole once this one is done."""
    from lens.eval import report
    from lens.trec import write_run

    report.check_run_target(out_dir, overwrite=overwrite)  # a user's files, or an earlier run: refused before work
    if drop_self is None:
        drop_self = data.name.lower() in SELF_HIT_SETS
    started = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
    summaries, per_query = {}, {}
    staged = out_dir / f".{report.RUNS_FOLDER}.partial"  # this run's TREC files, moved in when it is done
    if staged.exists():
        shutil.rmtree(staged)
    for system in systems:
        logger.info("%s: running %s", data.name, system.name)
        out = evaluate_system(system, data, depth, drop_self, show_progress_bar, threads, query_threads)
        summaries[system.name], per_query[system.name] = out["summary"], out["per_query"]
        if save_runs:
            write_run(staged / f"{system.name}.trec", out["run"], tag=system.name)
        logger.info("%s %s: nDCG@10 %.4f", data.name, system.name, out["summary"]["ndcg@10"])
        if release_each:
            system.release()
    for system in systems:
        system.release()
    results = {"dataset": data.name, "split": data.split, "command": command, "model": model, "systems": summaries}
    with torch_threads(threads):
        machine = machine_info()
    machine["query_torch_threads"] = query_threads
    info = {
        "dataset_path": str(data.path.resolve()), "docs": len(data.docs), "queries": len(data.queries), "depth": depth,
        "drop_self_hits": drop_self, "started": started,
        "finished": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": machine, "subsample": data.subsample,
        "contention": contention_note(summaries, machine.get("cpus")),
        **(extra_info or {}),
    }
    report.clear_run_files(out_dir)  # an earlier run's files (overwrite): none of them stays beside this run's
    if staged.is_dir():
        (out_dir / report.RUNS_FOLDER).mkdir(exist_ok=True)
        for f in staged.iterdir():
            f.replace(out_dir / report.RUNS_FOLDER / f.name)
        staged.rmdir()
    report.write_dataset_results(out_dir, results, per_query, info, plot=plot)
    return results


# ------------------------------------------------------------------------------------------- CLI
def hybrid_weights_arg(value: str) -> tuple[float, float] | str:
    """``--weights`` of the BEIR runner: ``balanced`` (resolved per corpus) or a pair LEX,DENSE."""
    from index.vectors import weights_spec

    try:
        return weights_spec(value, "--weights")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def recorded_weights(weights: tuple[float, float] | str) -> list[float] | str:
    """``--weights`` as run_info.json records it: ``"balanced"`` or ``[LEX, DENSE]``."""
    return weights if isinstance(weights, str) else list(weights)


def weights_arg(value: str) -> tuple[float, float]:
    from index.vectors import weight_pair

    try:
        return weight_pair(value, "--weights")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _systems(value: str) -> list[str]:
    from lens.eval.systems import ALL_SYSTEMS

    names = [s.strip() for s in value.split(",") if s.strip()]
    bad = [n for n in names if n not in ALL_SYSTEMS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown system {bad[0] if bad else value!r}; valid: {', '.join(ALL_SYSTEMS)}")
    return names


def add_run_location_arguments(parser: argparse.ArgumentParser, cache: str, depth: str) -> None:
    """``--cache-dir`` (what it caches: ``cache``), ``--output-dir`` and ``--depth`` (``depth`` says what it
    counts) of the runners that write a set's run folder (``run_dataset``: this one and the ablations)."""
    from lens.eval.systems import DEFAULT_DEPTH

    parser.add_argument("--cache-dir", type=Path, default=None,
                        help=f"{cache} (default: {DEFAULT_CACHE_DIR} in the working directory)")
    parser.add_argument("--output-dir", type=Path, default=None,
                        help=f"results root (default: {DEFAULT_OUTPUT_DIR} in the working directory)")
    parser.add_argument("--depth", type=positive_int, default=DEFAULT_DEPTH, help=f"{depth} (default {DEFAULT_DEPTH})")


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the runner's options to ``parser`` (e.g. the ``lens bench beir`` subparser)."""
    from lens.eval.report import add_result_overwrite_argument

    from lens.eval.systems import ALL_SYSTEMS, PEER_SYSTEMS

    parser.add_argument("datasets", nargs="+",
                        help="BEIR-layout directories, or set names (e.g. scifact cranfield medline): "
                             + DATA_DIR_HELP)
    add_data_argument(parser)
    parser.add_argument("--split", default="test", help="qrels split to evaluate (default: test)")
    parser.add_argument("--model", default="default", help="LENS model directory or 'default'")
    parser.add_argument("--systems", type=_systems, default=None,
                        help=f"comma-separated, of: {','.join(ALL_SYSTEMS)}; default: every one whose packages are "
                             f"installed (the peers {', '.join(PEER_SYSTEMS)} need `make peers`)")
    parser.add_argument("--max-length", type=positive_int, default=None, metavar="TOKENS",
                        help="LENS max_seq_length (documents and queries), overriding the model's "
                             "(benchmarks/doc_length.py)")
    parser.add_argument("--weights", type=hybrid_weights_arg, default=(0.5, 0.5),
                        help="lens-hybrid weights LEX,DENSE (default 0.5,0.5), or 'balanced': each part's weight "
                             "inversely proportional to the spread of its cosines over the corpus, as `lens index "
                             "build --weights balanced`")
    parser.add_argument("--instruction", default=None,
                        help="query instruction for the LENS systems, overriding the dataset's (Table 8 of the paper)")
    add_run_location_arguments(parser, "embedding cache", "hits retrieved per query and per fused component")
    parser.add_argument("--lens-batch-size", type=positive_int, default=None,
                        help="LENS documents per forward pass (default: 4 on a CPU, where per-document throughput "
                             "drops at 16; on a GPU as many as its free memory holds)")
    add_lens_device_arguments(parser)
    parser.add_argument("--corpus-casing", action="store_true",
                        help="a truecasing text rule brings the queries back to the case of each corpus's own words "
                             "(lens.casing.corpus_casing_table, counted over the documents) instead of the packaged "
                             "table's alone")
    parser.add_argument("--max-docs", type=positive_int, default=None,
                        help="SMOKE TESTS ONLY: keep at most this many documents (judged ones first)")
    parser.add_argument("--max-queries", "--queries", dest="max_queries", type=positive_int, default=None,
                        help="SMOKE TESTS ONLY: keep the first N queries")
    parser.add_argument("--no-plot", action="store_true", help="skip ndcg.png")
    add_result_overwrite_argument(
        parser, "replace a set's earlier run in the results root (refused without it, before any work; never a "
        "folder of other files)")
    parser.add_argument("--self-hits", choices=("auto", "drop", "keep"), default="auto",
                        help="a query's hit whose document id is the query's own: auto (default) drops it on "
                             f"{' and '.join(sorted(SELF_HIT_SETS))}, whose queries are corpus documents (BEIR's "
                             "convention), and keeps it elsewhere; drop / keep on every set")
    parser.add_argument("--save-runs", action="store_true",
                        help="also write each system's ranking as a TREC run file, OUTPUT/DATASET/runs/SYSTEM.trec "
                             "(for trec_eval, ranx, significance tests)")
    add_thread_arguments(parser)
    return parser


LENS_DTYPES = ("float32", "bfloat16", "float16")


def add_lens_device_arguments(parser: argparse.ArgumentParser) -> None:
    """``--device`` and ``--dtype``: where and in what precision a benchmark's LENS model runs (one spelling for
    every ``lens bench`` command; :func:`lens_device` reads the first)."""
    parser.add_argument("--device", default=None, metavar="DEVICE",
                        help="where the LENS systems encode: cpu, cuda or cuda:N (default: cuda when present, else "
                             "cpu; the int8 systems always run on the CPU)")
    parser.add_argument("--dtype", choices=LENS_DTYPES, default=None,
                        help="the LENS weights' precision (default: float32 on a CPU, bfloat16 on CUDA); vectors of "
                             "each precision are cached apart, so bfloat16 and float32 compare in two runs")


def precision_name(encoder) -> str:
    """The dtype a loaded LENS encoder's decoder runs in ("float32", "bfloat16", ...), as a run records it."""
    return str(next(encoder.model.decoder.parameters()).dtype).removeprefix("torch.")


def lens_device(args: argparse.Namespace) -> str | None:
    """``--device`` checked (a wrong name or a missing GPU fails before any data loads); None: the loader's choice."""
    device = getattr(args, "device", None)
    if device is None:
        return None
    from lens.sharding import check_devices

    return check_devices([device])[0]
CPU_LENS_BATCH_SIZE = 4  # the runner's CPU default: per-document CPU throughput drops at 16


def lens_batch_size(given: int | None, device: str | None) -> int | None:
    """LENS documents per forward: ``given``, else 4 where the encoder will run on the CPU (``device``, or no GPU
    present), else None (the encoder chooses from the GPU's free memory)."""
    if given is not None:
        return given
    import torch

    on_cpu = device == "cpu" if device is not None else not torch.cuda.is_available()
    return CPU_LENS_BATCH_SIZE if on_cpu else None


def add_data_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, default=None,
                        help=f"where dataset names are looked up (default: ${DATA_DIR_ENV}, else {DEFAULT_DATA_DIR} "
                             "relative to the current folder)")


def add_thread_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=positive_int, default=None,
                        help="torch threads for document encoding (default: torch's default, one per core)")
    parser.add_argument("--query-threads", type=positive_int, default=1,
                        help="torch threads while queries are answered and timed one at a time (default 1: a "
                             "server answering one query per core; several threads on a busy machine spin-wait)")


def _split_command(command: str, dataset_args: Sequence[str]) -> dict:
    """``{"prog", "dataset", "options"}`` so that the README can merge runs of several datasets into one command."""
    words = shlex.split(command)
    datasets = set(dataset_args)
    prog_len = 3 if words[:3] == ["lens", "bench", "beir"] else 2 if words[:1] == ["python"] else 1
    # --overwrite says how a run was written, not what it measured: runs differing only by it still merge
    options = [w for w in words[prog_len:] if w not in datasets and w != "--overwrite"]
    return {"kind": "beir", "prog": shlex.join(words[:prog_len]), "options": options}


def run_folder(path: Path, split: str, subsample: bool, suffix: str = "") -> str:
    """The results folder of a set's run: its name (lower case), then ``suffix`` (an ablation's), ``-SPLIT`` for
    a split other than test, and ``-subsample`` for a smoke test's subsample, so no two kinds of run share one."""
    return (path.name.lower() + suffix + ("" if split == "test" else f"-{split}")
            + ("-subsample" if subsample else ""))


def check_run_folders(paths: Sequence[Path], split: str, subsample: bool, out_root: Path, overwrite: bool,
                      suffix: str = "", data_root: Path | None = None) -> list[str]:
    """Each set's results folder under ``out_root`` (``run_folder``), every check that can fail made before any
    work: each set has the split (``check_layout``), no two sets share a folder, no folder lies in a dataset or
    in ``data_root`` (the data dir names are looked up in), and each is free or (``overwrite``) an earlier run's
    (``report.check_run_target``)."""
    from lens.eval import report

    if data_root is not None and data_root.is_dir() and out_root.resolve().is_relative_to(data_root.resolve()):
        raise ValueError(f"--output-dir {out_root} lies in the data dir {data_root}: results go outside the data "
                         "(choose another --output-dir)")
    folders = [run_folder(p, split, subsample, suffix) for p in paths]
    for path in paths:
        check_layout(path, split)
    seen: dict[str, Path] = {}
    for path, folder in zip(paths, folders):
        if folder in seen:
            raise ValueError(f"{seen[folder]} and {path} would both write their results to {out_root / folder}: "
                             "run them with different --output-dir")
        seen[folder] = path
    datasets = [(path, path.resolve()) for path in paths]
    for folder in folders:
        target = (out_root / folder).resolve()
        for path, resolved in datasets:
            if target.is_relative_to(resolved):  # the dataset itself, or inside it
                raise ValueError(f"--output-dir {out_root} would write a run's results into the dataset {path}: "
                                 "choose a results root outside the data")
        report.check_run_target(out_root / folder, overwrite=overwrite)
    return folders


def run(args: argparse.Namespace) -> int:
    """Run the benchmark described by ``args`` (from :func:`add_arguments`); returns an exit code."""
    from lens.eval import report
    from lens.instructions import lookup
    from lens.bm25 import BM25_CONFIG
    from lens.eval.systems import Resources, default_systems, make_systems

    command = getattr(args, "bench_command_line", None) or command_line()
    cache_dir = Path(args.cache_dir or DEFAULT_CACHE_DIR)
    out_root = Path(args.output_dir or DEFAULT_OUTPUT_DIR)
    report.require_bench_extras(plot=not args.no_plot)  # a missing extra fails before any encoding
    paths = [resolve_dataset(d, args.data_dir) for d in args.datasets]  # fail early on a wrong name
    if args.depth < 100:
        logger.warning("--depth %d is under 100: recall@100 counts only the top %d hits of each system",
                       args.depth, args.depth)
    report.check_readme_target(out_root)  # and on a user's README where ours would go
    folders = check_run_folders(paths, args.split, bool(args.max_docs or args.max_queries), out_root,
                                args.overwrite, data_root=data_dir(args.data_dir))  # a missing split, a bad output
    device = lens_device(args)
    resources = Resources(model=args.model, cache_root=cache_dir,
                          lens_batch_size=lens_batch_size(args.lens_batch_size, device),
                          show_progress_bar=not getattr(args, "quiet", False), lens_max_length=args.max_length,
                          lens_device=device, lens_dtype=getattr(args, "dtype", None),
                          corpus_casing=getattr(args, "corpus_casing", False))
    split = _split_command(command, args.datasets)
    names = args.systems or default_systems()
    if not any(n.startswith("lens") for n in names):
        unused = [flag for flag, given in (("--model", args.model != "default"), ("--instruction", args.instruction),
                                           ("--weights", args.weights != (0.5, 0.5)),
                                           ("--max-length", args.max_length)) if given]
        if unused:
            logger.warning("%s set%s the LENS systems, and --systems %s runs none: %s nothing here",
                           ", ".join(unused), "" if len(unused) > 1 else "s", ",".join(names),
                           "they change" if len(unused) > 1 else "it changes")
    lines = []
    for arg, path, folder in zip(args.datasets, paths, folders):
        data = load_dataset(path, args.split, args.max_docs, args.max_queries)
        instruction = lookup(data.name, args.instruction)
        systems = make_systems(names, resources, instruction.text, weights=args.weights, depth=args.depth)
        extra = {"instruction": instruction.text, "instruction_source": instruction.source,
                 "weights_lens_hybrid": recorded_weights(args.weights), "bm25": BM25_CONFIG, "cache_dir": str(cache_dir),
                 "reproduce": {**split, "dataset": arg}}
        if any(s.startswith("lens") for s in names):
            enc = resources.lens.encoder
            extra["lens"] = {"fingerprint": enc.fingerprint(), "num_clusters": enc.num_clusters,
                             "backbone": enc.config.backbone, "load_s": resources.lens.load_seconds,
                             "max_seq_length": enc.max_seq_length, "device": str(enc.device),
                             "dtype": str(enc.model.head.weight.dtype).removeprefix("torch."),
                             "batch_size": resources.lens.batch_size}
        results = run_dataset(data, systems, depth=args.depth, out_dir=out_root / folder, command=command,
                              model=args.model, extra_info=extra, plot=not args.no_plot,
                              show_progress_bar=not getattr(args, "quiet", False), threads=args.threads,
                              query_threads=args.query_threads, save_runs=args.save_runs, overwrite=args.overwrite,
                              drop_self={"auto": None, "drop": True, "keep": False}[args.self_hits])
        lines.append(summary_table(results))
    readme = report.write_readme(out_root)
    print("\n\n".join(lines) + f"\n\nresults in {out_root} (README: {readme})")
    return 0


def summary_table(results: dict) -> str:
    w = max([18, *(len(n) for n in results["systems"])])
    rows = [f"{results['dataset']} ({results['split']})",
            f"{'system':<{w}} {'nDCG@10':>8} {'R@100':>8} {'MRR@10':>8} {'docs/s':>9} {'p50 ms':>8} {'p95 ms':>8}"]
    for name, s in results["systems"].items():
        rows.append(f"{name:<{w}} {s['ndcg@10']:8.4f} {s['recall@100']:8.4f} {s['mrr@10']:8.4f} "
                    f"{s['docs_per_s']:9.1f} {s['query_ms_p50']:8.1f} {s['query_ms_p95']:8.1f}")
    return "\n".join(rows)
