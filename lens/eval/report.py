"""Writing benchmark results: per dataset ``results.json`` / ``results.md`` / ``ndcg.png`` (+ ``per_query.json.gz``,
``run_info.json``), and the top-level ``README.md`` gathering every dataset present.

``results.json`` has exactly this shape (each system may carry extra keys, e.g. costs)::

    {"dataset": str, "split": str, "command": str, "model": str,
     "systems": {name: {"ndcg@10": float, "recall@100": float, "mrr@10": float,
                        "docs_per_s": float, "query_ms_p50": float, "query_ms_p95": float, ...}}}
"""

from __future__ import annotations

import io
import json
import logging
import math
import os
import shlex
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from lens.atomic import atomic_write_bytes, read_json, write_json

logger = logging.getLogger(__name__)

__all__ = ["GENERATED_MARKER", "REQUIRED_SYSTEM_KEYS", "RESULT_KEYS", "check_readme_target", "check_results",
           "check_run_target", "clear_run_files", "add_result_overwrite_argument",
           "readme_text", "results_markdown", "write_dataset_results", "write_readme"]

PER_QUERY_FILE = "per_query.json.gz"  # each system's value for each query, for paired tests (lens.eval.significance)
LEGACY_PER_QUERY_FILE = "per_query.json"  # its name in runs saved before 2026-11-27, still read
RESULT_KEYS = ("dataset", "split", "command", "model", "systems")
GENERATED_MARKER = "do not edit by hand"  # in every README a runner writes: one without it is a user's, never replaced
REQUIRED_SYSTEM_KEYS = ("ndcg@10", "recall@100", "mrr@10", "docs_per_s", "query_ms_p50", "query_ms_p95")


def check_results(obj: Mapping) -> None:
    """Raise ValueError unless ``obj`` has the results.json shape."""
    if not isinstance(obj, Mapping) or set(obj) != set(RESULT_KEYS):
        raise ValueError(f"results must have exactly the keys {RESULT_KEYS}, got {sorted(obj) if isinstance(obj, Mapping) else obj!r}")
    for key in ("dataset", "split", "command", "model"):
        if not isinstance(obj[key], str):
            raise ValueError(f"results[{key!r}] must be a string")
    if not isinstance(obj["systems"], Mapping) or not obj["systems"]:
        raise ValueError("results['systems'] must be a non-empty mapping")
    for name, values in obj["systems"].items():
        for key in REQUIRED_SYSTEM_KEYS:
            v = values.get(key)
            if not isinstance(v, float) or (key != "docs_per_s" and not math.isfinite(v)):
                raise ValueError(f"results['systems'][{name!r}][{key!r}] must be a float, got {v!r}")


def _fmt(v, digits=3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float):
        if abs(v) >= 100:
            return f"{v:,.0f}"
        return f"{v:.{digits}f}"
    return str(v)


def _mb(n) -> str:
    return "–" if n is None else f"{n / 2**20:.2f}"


def machine_q(info: Mapping):
    return (info.get("machine") or {}).get("query_torch_threads", "?")


def results_markdown(results: Mapping, info: Mapping) -> str:
    """``results.md``: a table of every system and the exact command."""
    lines = [f"# {results['dataset']} ({results['split']})", ""]
    sub = info.get("subsample")
    if sub:
        lines += [f"> **SUBSAMPLE — smoke test only, not comparable with published numbers:** {sub['docs']} documents, "
                  f"{sub['queries']} queries.", ""]
    lines += ["Reproduce:", "", "```bash", results["command"], "```", "",
              f"LENS model: `{results['model']}`. {info.get('docs', '?')} documents, {info.get('queries', '?')} queries. "
              f"Query instruction ({info.get('instruction_source', '?')}): \"{info.get('instruction', '')}\".", ""]
    lines += ["| system | nDCG@10 | Recall@100 | MRR@10 | docs/s | query p50 ms | query p95 ms | index MB | "
              "index build s | peak RSS MB |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for name, s in results["systems"].items():
        lines.append(
            f"| {name} | {_fmt(s['ndcg@10'])} | {_fmt(s['recall@100'])} | {_fmt(s['mrr@10'])} | "
            f"{_fmt(s['docs_per_s'], 1)} | {_fmt(s['query_ms_p50'], 1)} | {_fmt(s['query_ms_p95'], 1)} | "
            f"{_mb(s.get('index_bytes'))} | {_fmt(s.get('index_build_s'), 2)} | {_fmt(s.get('peak_rss_mb'), 0)} |")
    lines += ["", "## How these were measured", "",
              "- nDCG@10, Recall@100: pytrec_eval (`ndcg_cut.10`, `recall.100`); MRR@10: `recip_rank` on each run cut "
              "to its top 10. Mean over all queries of the qrels (a query with no hits counts 0); relevant = grade > 0; "
              "nDCG gains are the grades.",
              f"- Each system retrieves {info.get('depth', '?')} hits per query (fusions fuse their components' runs at "
              "that depth).",
              "- docs/s: documents encoded (or, for bm25, tokenised and indexed) per second, measured when the vectors "
              "were actually encoded; where they came from the cache, the rate stored with them. A system using two "
              "encoders gets 1/(1/r1 + 1/r2).",
              "- query p50/p95: each query timed on its own (query encoding + search + fusion), after one untimed "
              f"warm-up query, with {machine_q(info)} torch thread(s).",
              "- peak RSS: the process's peak (ru_maxrss) after the system ran; systems run in this order in one "
              "process, so it is cumulative.",
              ""]
    lines += ["| system | what | docs/s source | load avg (1 min) before → after |", "|---|---|---|---|"]
    for name, s in results["systems"].items():
        la = s.get("load_avg_1m") or [None, None]
        lines.append(f"| {name} | {s.get('description', '')} | {s.get('docs_per_s_source', '')} | "
                     f"{_fmt(la[0], 2)} → {_fmt(la[1], 2)} |")
    documents = info.get("machine", {}).get("torch_threads", "?")
    lines += machine_lines(info, f"{documents} threads for documents, {machine_q(info)} for queries")
    return "\n".join(lines) + "\n"


def machine_lines(info: Mapping, threads: str | None = None) -> list[str]:
    """The end of a ``results.md``: the machine and the run's start and end from ``info`` (``run_info.json``), with
    ``threads`` (how many torch threads did what) after the torch version, and the contention seen, if any."""
    machine = info.get("machine", {})
    torch = f"torch {machine.get('torch', '?')}" + (f" ({threads})" if threads else "")
    cpu = ""
    if machine.get("cpu"):  # runs recorded before the CPU was named have none
        features = ", ".join(machine.get("int8_features") or ["none"])
        engine = f", int8 engine {machine['quantized_engine']}" if machine.get("quantized_engine") else ""
        cpu = f" ({machine['cpu']}; int8 instruction sets: {features}{engine})"
    lines = ["", f"Machine: {machine.get('cpus', '?')} CPUs{cpu}, {torch}, {machine.get('platform', '')}. "
             f"Run {info.get('started', '?')} → {info.get('finished', '?')}."]
    if info.get("contention"):
        lines += ["", f"**Contention:** {info['contention']}"]
    return lines


def require_bench_extras(*, metrics: bool = True, plot: bool = True) -> None:
    """Fail at once, naming the ``eval`` extra, when the metrics or the plots a benchmark will need are missing, so
    that a missing extra is found before its encoding, not after."""
    if metrics:
        from lens.metrics import require_metrics

        require_metrics()
    if plot:
        agg_pyplot("the benchmark's plots (or pass --no-plot)")


def agg_pyplot(what: str):
    """``matplotlib.pyplot`` on the Agg backend (files only, no display); without matplotlib the error names the
    ``eval`` extra and ``what`` needed it."""
    from lens.extras import require

    matplotlib = require("matplotlib", "eval", what=what)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_ndcg(results: Mapping, path: str | os.PathLike) -> None:
    """Bar chart of nDCG@10 per system (Agg backend), written atomically."""
    plt = agg_pyplot("the nDCG plot (or pass --no-plot)")
    names = list(results["systems"])
    values = [results["systems"][n]["ndcg@10"] for n in names]
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(names) + 1.5), 3.8))
    bars = ax.bar(range(len(names)), values, color="#4c72b0")
    ax.bar_label(bars, labels=[f"{v:.3f}" for v in values], fontsize=8, padding=2)
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("nDCG@10")
    ax.set_ylim(0, max(1.0, max(values) * 1.15) if values else 1.0)
    ax.set_title(f"{results['dataset']} ({results['split']}), LENS model {results['model']}", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


def save_figure(fig, path: str | os.PathLike, dpi: int = 120) -> None:
    """Write a matplotlib figure as PNG atomically and close it."""
    from lens.extras import require

    plt = require("matplotlib.pyplot", "eval", what="saving a plot", package="matplotlib")

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


RUN_FILES = ("results.json", PER_QUERY_FILE, LEGACY_PER_QUERY_FILE, "run_info.json", "results.md")  # a run folder's


PLOT_FILES = ("ndcg.png", "scores.png")  # a BEIR run's plot, an ATEB task's
RUNS_FOLDER = "runs"  # a BEIR run's TREC files (--save-runs), one per system


def _check_parents(path: Path, flag: str) -> None:
    """Refuse a path under a file (the write would fail after all the work, with a bare errno)."""
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise NotADirectoryError(f"{parent} is a file, so {path} cannot be written: choose another {flag}")
            return


def check_run_target(directory: str | os.PathLike, flag: str = "--output-dir", overwrite: bool = False) -> Path:
    """Refuse, before a set's work starts, a run folder that holds files: a user's (never replaced), or an earlier
    run's, replaced only with ``overwrite`` (``--overwrite``). A folder is a run's when its ``results.json`` is a
    JSON object holding ``command`` and ``systems`` (a BEIR run) or ``formulations`` (ATEB)."""
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise FileExistsError(f"{d} is a file where the run's folder goes: choose another {flag}")
    _check_parents(d, flag)
    present = [name for name in RUN_FILES if (d / name).exists()]
    if not present:
        return d
    problem = None
    try:
        if not _is_run(json.loads((d / "results.json").read_text(encoding="utf-8"))):
            problem = "its results.json is not a benchmark run's"
    except FileNotFoundError:
        problem = f"it holds {', '.join(present)} but no results.json"
    except (OSError, ValueError) as e:  # a folder named results.json, unreadable, not UTF-8, not JSON
        problem = f"its results.json cannot be read as a run's ({type(e).__name__})"
    if problem is not None:
        raise FileExistsError(f"{d} holds files the benchmark runner did not write ({problem}); writing the run "
                              f"there would replace them: choose another {flag}")
    if not overwrite:
        raise FileExistsError(f"{d} holds an earlier run's results ({', '.join(present)}): add --overwrite to "
                              f"replace them, or choose another {flag}")
    return d


def _is_run(results: Any) -> bool:
    """Whether a parsed ``results.json`` is a run's: an object with ``command`` and ``systems`` (BEIR) or
    ``formulations`` (ATEB)."""
    return isinstance(results, dict) and "command" in results and ("systems" in results or "formulations" in results)


def clear_run_files(directory: str | os.PathLike) -> None:
    """Remove an earlier run's own files from a run folder that ``check_run_target`` let be replaced (its results,
    plot and TREC runs, by name), so that nothing of it stays beside the new run's; any other file is left, and a
    folder without a run's ``results.json`` (new, or a user's plot alone) is not touched."""
    d = Path(directory)
    try:
        if not _is_run(json.loads((d / "results.json").read_text(encoding="utf-8"))):
            return
    except (OSError, ValueError):
        return
    for name in (*RUN_FILES, *PLOT_FILES):
        if (d / name).is_file():
            (d / name).unlink()
    runs = d / RUNS_FOLDER
    if runs.is_dir():
        for f in runs.glob("*.trec"):
            f.unlink()
        if not any(runs.iterdir()):
            runs.rmdir()


def write_result_files(directory: str | os.PathLike, results: Mapping, per_query: Mapping, info: Mapping,
                       markdown: str) -> Path:
    """The files every harness writes per run: results.json, per_query.json.gz, run_info.json and results.md."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    write_json(d / "results.json", results)
    write_json(d / PER_QUERY_FILE, per_query)
    legacy = d / LEGACY_PER_QUERY_FILE
    if legacy.is_file():  # an earlier run's, in the old name: the new file replaces it, so no reader sees both
        legacy.unlink()
    write_json(d / "run_info.json", info)
    atomic_write_bytes(d / "results.md", markdown.encode("utf-8"))
    return d


def per_query_path(directory: str | os.PathLike) -> Path:
    """Where a run folder keeps its per-query values: ``per_query.json.gz``, or ``per_query.json`` in a run saved
    before they were compressed (about a tenth of the size: the committed results' bulk); the former if neither."""
    d = Path(directory)
    if not (d / PER_QUERY_FILE).is_file() and (d / LEGACY_PER_QUERY_FILE).is_file():
        return d / LEGACY_PER_QUERY_FILE
    return d / PER_QUERY_FILE


def read_per_query(directory: str | os.PathLike, what: str = "per-query results", run: str = "lens bench beir") -> Any:
    """A run folder's per-query values (``per_query_path``; a BEIR run's ``{system: {query id: {measure:
    value}}}``): the reader of what ``write_result_files`` writes; a missing file says which run (``run``) makes it."""
    path = per_query_path(directory)
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: run `{run}` for that set (it writes {PER_QUERY_FILE})")
    return read_json(path, what)


def write_dataset_results(directory: str | os.PathLike, results: Mapping, per_query: Mapping, info: Mapping,
                          plot: bool = True) -> Path:
    """Write results.json, per_query.json.gz, run_info.json, results.md and ndcg.png into ``directory``."""
    check_results(results)
    d = write_result_files(directory, results, per_query, info, results_markdown(results, info))
    if plot:
        plot_ndcg(results, d / "ndcg.png")
    return d


def rerender(directory: str | os.PathLike, plot: bool = True) -> None:
    """Rewrite a dataset folder's results.md (and ndcg.png) from its results.json and run_info.json, e.g. after
    this module's layout changed; the measured values are read, never recomputed."""
    d = Path(directory)
    results = read_json(d / "results.json", "benchmark results")
    check_results(results)
    info = read_json(d / "run_info.json", "run info") if (d / "run_info.json").is_file() else {}
    atomic_write_bytes(d / "results.md", results_markdown(results, info).encode("utf-8"))
    if plot:
        plot_ndcg(results, d / "ndcg.png")


# -------------------------------------------------------------------------------------------- README
def result_folders(root: str | os.PathLike, check: Callable[[Mapping], None] = check_results,
                   what: str = "benchmark results") -> list[tuple[str, dict]]:
    """(folder name, results) of every ``*/results.json`` under ``root`` in name order; a file that cannot be read
    or that ``check`` refuses (ValueError) is skipped with a warning, so one bad folder never hides the others."""
    found = []
    for path in sorted(Path(root).glob("*/results.json")):
        try:
            results = read_json(path, what)
            check(results)
        except ValueError as e:
            logger.warning("skipping %s: %s", path, e)
            continue
        found.append((path.parent.name, results))
    return found


def _gather(root: Path) -> list[tuple[str, dict, dict]]:
    found = []
    for folder, results in result_folders(root):
        info_path = root / folder / "run_info.json"
        info = read_json(info_path, "run info") if info_path.is_file() else {}
        found.append((folder, results, info))
    return found


def combined_command(infos: list[Mapping]) -> str | None:
    """One command running every dataset of ``infos`` (each recorded with ``reproduce`` = {prog, dataset, options}),
    when they were run with the same program and options; None otherwise."""
    reps = [i.get("reproduce") for i in infos]
    if not reps or any(not r for r in reps):
        return None
    first = reps[0]
    if any(r["prog"] != first["prog"] or r["options"] != first["options"] for r in reps):
        return None
    datasets = []
    for r in reps:
        if r["dataset"] not in datasets:
            datasets.append(r["dataset"])
    return " ".join([first["prog"], *map(shlex.quote, datasets), *map(shlex.quote, first["options"])])


def _system_order(name: str):
    from lens.eval.systems import ALL_SYSTEMS

    return (ALL_SYSTEMS.index(name), "") if name in ALL_SYSTEMS else (len(ALL_SYSTEMS), name)


def readme_text(root: str | os.PathLike) -> str:
    entries = _gather(Path(root))
    lines = ["# BEIR-style retrieval benchmarks", "",
             "Generated by the benchmark runner from every `*/results.json` below this folder; do not edit by hand.",
             "Each folder's `results.md` has the details (costs, instruction, machine, how each number is measured).",
             ""]
    if not entries:
        return "\n".join(lines + ["No results yet.", ""])
    main = [e for e in entries if (e[2].get("reproduce") or {}).get("kind", "beir") == "beir"]
    others = [e for e in entries if e not in main]
    cmd = combined_command([e[2] for e in main]) if main else None
    if main:
        lines += ["Reproduce the main table:", "", "```bash"]
        lines += [cmd] if cmd else list(dict.fromkeys(e[1]["command"] for e in main))  # each command once
        lines += ["```", ""]
    if others:
        lines += ["Other folders (ablations, subsamples) were made by:", "", "```bash"]
        lines += [e[1]["command"] for e in others]
        lines += ["```", ""]
    lines += ["| dataset | split | system | nDCG@10 | Recall@100 | MRR@10 | docs/s | query p50 ms | query p95 ms |",
              "|---|---|---|---|---|---|---|---|---|"]
    for folder, results, info in main + others:
        label = folder + (" (SUBSAMPLE)" if info.get("subsample") else "")
        for name, s in sorted(results["systems"].items(), key=lambda kv: _system_order(kv[0])):
            lines.append(f"| {label} | {results['split']} | {name} | {_fmt(s['ndcg@10'])} | {_fmt(s['recall@100'])} | "
                         f"{_fmt(s['mrr@10'])} | {_fmt(s['docs_per_s'], 1)} | {_fmt(s['query_ms_p50'], 1)} | "
                         f"{_fmt(s['query_ms_p95'], 1)} |")
    models = sorted({r["model"] for _, r, _ in entries if any(n.startswith("lens") for n in r["systems"])})
    if models:  # a run of other systems only (bm25, minilm) used no LENS model
        lines += ["", f"LENS model(s): {', '.join(f'`{m}`' for m in models)}."]
    return "\n".join(lines) + "\n"


def check_readme_target(root: str | os.PathLike, flag: str = "--output-dir", kind: str = "beir") -> Path:
    """Refuse, before any work starts, an output folder whose ``README.md`` the runner did not write (it lacks
    ``GENERATED_MARKER``): the runner replaces its own README, never a user's; and a folder holding runs of the
    other runner (``kind``: "beir" runs hold ``systems``, "ateb" runs ``formulations``), whose README would lose
    the other's table each time one of them ran."""
    path = Path(root) / "README.md"
    if path.is_dir() or (path.exists() and GENERATED_MARKER not in path.read_text(encoding="utf-8", errors="replace")):
        raise FileExistsError(f"{path} exists and was not written by the benchmark runner (no "
                              f"'{GENERATED_MARKER}' line); writing would replace it: choose another {flag}")
    other = {"beir": ("formulations", "lens bench ateb"), "ateb": ("systems", "lens bench beir")}[kind]
    for results in sorted(Path(root).glob("*/results.json")):
        try:
            saved = json.loads(results.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(saved, dict) and other[0] in saved:
            raise FileExistsError(f"{root} holds runs of {other[1]} ({results.parent.name}), whose README this one "
                                  f"would replace: give each benchmark its own {flag}")
    return path


def write_readme(root: str | os.PathLike) -> Path:
    path = check_readme_target(root)
    atomic_write_bytes(path, readme_text(root).encode("utf-8"))
    return path


def output_file(out: str | os.PathLike, ext: str) -> Path:
    """``OUT.json`` / ``OUT.md`` of a benchmark's ``--output OUT``: ``ext`` added to the name (so a name with a dot
    in it, "study-f0.5", keeps it), or put in place of a ``.json`` / ``.md`` it already ends in."""
    out = Path(out)
    return out.with_suffix(ext) if out.suffix in (".json", ".md") else out.with_name(out.name + ext)


def check_benchmark_target(out: str | os.PathLike, flag: str = "--output", overwrite: bool = True) -> None:
    """Refuse, before any work starts, an ``OUT.json`` / ``OUT.md`` that is not a saved benchmark result (a result
    is ``OUT.json`` holding a JSON object with ``_meta`` or ``command``, as every benchmark writes, beside
    ``OUT.md``), one inside a run folder of ``lens bench beir`` / ``ateb`` (whose ``results.json`` it would
    replace), and, unless ``overwrite``, an earlier result. ``lens bench`` passes its ``--overwrite``; the
    repository's benchmark scripts update their own committed results (the default)."""
    json_path, md_path = output_file(out, ".json"), output_file(out, ".md")
    _check_parents(json_path, flag)
    folder = json_path.parent
    if any((folder / name).exists() for name in RUN_FILES if name not in (json_path.name, md_path.name)):
        raise FileExistsError(f"{folder} is a benchmark run's folder (it holds its results and run_info.json); "
                              f"writing {json_path.name} there would replace the run's files: choose another {flag}")
    if not (json_path.exists() or md_path.exists()):
        return
    ours = False
    if json_path.is_file():
        try:
            saved = json.loads(json_path.read_text(encoding="utf-8"))
            ours = isinstance(saved, dict) and ("_meta" in saved or "command" in saved)
        except (OSError, UnicodeDecodeError, ValueError):
            ours = False
    if not ours or md_path.is_dir():
        found = json_path if json_path.exists() else md_path
        raise FileExistsError(f"{found} exists and is not a saved benchmark result ({json_path.name} with a JSON "
                              f"object holding _meta or command, beside {md_path.name}); writing would replace it: "
                              f"choose another {flag}")
    if not overwrite:
        raise FileExistsError(f"{json_path} holds an earlier result: add --overwrite to replace it (and "
                              f"{md_path.name}), or choose another {flag}")


def write_benchmark(out: str | os.PathLike, meta: Mapping, markdown_lines: Sequence[str], *,
                    sort_keys: bool = True, overwrite: bool = True) -> str:
    """``out.json`` (``meta``) and ``out.md`` (the lines) of a benchmark script, atomically; returns the markdown.
    ``sort_keys=False`` writes the JSON in ``meta``'s own key order, ASCII-escaped (``json.dumps(meta, indent=2)``:
    the format of the scripts that always wrote theirs so)."""
    out = Path(out)
    check_benchmark_target(out, overwrite=overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    if sort_keys:
        write_json(output_file(out, ".json"), meta)
    else:
        atomic_write_bytes(output_file(out, ".json"), (json.dumps(meta, indent=2) + "\n").encode("utf-8"))
    text = "\n".join(markdown_lines) + "\n"
    atomic_write_bytes(output_file(out, ".md"), text.encode("utf-8"))
    return text


def add_markdown_only_arguments(parser, output: str | os.PathLike | None = None) -> None:
    """``--markdown-only`` and ``--note``: re-render a benchmark's table from its saved results, with notes; with
    ``output``, also ``--output`` (default ``output``), where the results are written and re-read."""
    if output is not None:
        parser.add_argument("--output", type=Path, default=Path(output),
                            help=f"writes OUTPUT.json and OUTPUT.md (default {output})")
    parser.add_argument("--markdown-only", action="store_true", help="re-render the .md from the saved .json")
    parser.add_argument("--note", action="append", default=[],
                        help="a note (after reading the results) to keep in the saved results; with --markdown-only, "
                             "added to the saved ones")


def add_result_overwrite_argument(parser, help: str | None = None) -> None:
    """``--overwrite`` of a benchmark: an earlier result is replaced only with it (``check_benchmark_target``,
    ``check_run_target``); ``help`` says what it replaces (default: ``OUTPUT.json`` / ``OUTPUT.md``)."""
    parser.add_argument("--overwrite", action="store_true",
                        help=help or "replace an earlier OUTPUT.json / OUTPUT.md (refused without it, before any work; "
                                     "never a file the benchmark did not write)")


def markdown_only(args, out: str | os.PathLike, render: Callable[[dict], Sequence[str]]) -> bool:
    """With ``args.markdown_only``: ``rerender_benchmark`` (a missing results file is a ``FileNotFoundError`` that
    says to run the benchmark first) and True, so the caller measures nothing; otherwise False."""
    if not args.markdown_only:
        return False
    rerender_benchmark(out, render, args.note)
    return True


def rerender_benchmark(out: str | os.PathLike, render: Callable[[dict], Sequence[str]],
                       notes: Sequence[str] = ()) -> str:
    """Rewrite ``out.md`` from the saved ``out.json`` with ``render`` (after a change of the table), first adding
    ``notes`` (written after reading the results) to its ``_meta``; returns the markdown. A missing ``out.json`` is a
    ``FileNotFoundError`` that says to run the benchmark first."""
    path = output_file(out, ".json")
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: run without --markdown-only first")
    results = read_json(path)
    if notes:
        results.setdefault("_meta", {})
        results["_meta"]["notes"] = list(results["_meta"].get("notes") or []) + list(notes)
    return write_benchmark(out, results, render(results))
