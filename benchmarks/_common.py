"""What the benchmark scripts share: this checkout on ``sys.path``, the machine a run measured, where the data is,
and writing a result's JSON and Markdown (atomically, through ``lens.eval.report.write_benchmark``).

Every script imports it first (``from _common import ...``): run as ``python benchmarks/NAME.py``, the script's
folder is on ``sys.path``; ``tests/bench_helpers.load_script`` puts it there for the tests. The tiny models that
``reliability.py`` builds come from ``lens.testing``, which the tests use too.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import sys
from pathlib import Path
from typing import Callable, Mapping, Sequence

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
if sys.path[0] != str(REPO):
    sys.path.insert(0, str(REPO))  # run from a checkout without installing: this checkout's lens, not another
# lens is imported inside the functions: importing this module costs a measuring child process nothing

__all__ = ["REPO", "RESULTS", "add_data_dir_argument", "add_dev_study_arguments", "data_dir",
           "dev_study_encoders", "finish", "machine", "machine_description", "script_command", "start",
           "write_markdown", "write_results"]

LOG_FORMAT = "%(asctime)s %(name)s: %(message)s"


# ---------------------------------------------------------------------------------------------- the machine
def _mem_total_gb() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    return float("nan")


def machine(torch: bool = False) -> dict:
    """The machine a benchmark ran on, one fact a key: ``cpu`` (the model name), ``processor`` (``platform``'s
    name, else the architecture), ``cores``, ``mem_total_gb``, ``arch``, ``system``, ``release``, ``platform``,
    ``python``; with ``torch`` (which imports it), also ``torch``, ``torch_threads`` and ``quantized_engine``. Each
    script records the facts it always recorded, under its own keys."""
    from lens.host import cpu_name

    facts = {"cpu": cpu_name(), "processor": platform.processor() or platform.machine(), "cores": os.cpu_count(),
             "mem_total_gb": _mem_total_gb(), "arch": platform.machine(), "system": platform.system(),
             "release": platform.release(), "platform": platform.platform(), "python": platform.python_version()}
    if torch:
        import torch as t

        facts.update(torch=t.__version__, torch_threads=t.get_num_threads(),
                     quantized_engine=t.backends.quantized.engine)
    return facts


def proc_memory(field: str) -> int:
    """A ``/proc/self/status`` memory field (``VmRSS``, ``VmHWM``; kB there) of this process, in bytes (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def run_child(script: str | os.PathLike, mode: str, *args: str) -> dict:
    """Run ``script --child mode *args`` in a fresh Python process (a measurement of its own: nothing this process
    loaded counts) and return the JSON its last line of output prints."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, os.fspath(script), "--child", mode, *args], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def machine_description() -> str:
    """The machine in one line, as training's model card writes it (``lens.train.report.machine_description``):
    ``CPU, N cores, GPU; torch V, T threads``."""
    from lens.train.report import machine_description as description

    return description()


# ---------------------------------------------------------------------------------------------- the data
def data_dir(given: str | os.PathLike | None = None) -> Path:
    """Where the shared data is: ``given`` (``--data-dir``), else ``$LENS_DATA_DIR``, else ``shared/data`` beside
    this checkout (``../shared/data`` from the repository root, where the scripts are run)."""
    from lens.eval.beir import DATA_DIR_ENV

    return Path(given or os.environ.get(DATA_DIR_ENV) or REPO.parent / "shared" / "data").expanduser()


def add_data_dir_argument(parser: argparse.ArgumentParser) -> None:
    """``--data-dir`` (default None: ``data_dir`` picks)."""
    from lens.eval.beir import DATA_DIR_ENV

    parser.add_argument("--data-dir", type=Path, default=None,
                        help=f"the shared data (default: ${DATA_DIR_ENV}, else ../shared/data beside the checkout)")


def study_set_data(name: str, args: argparse.Namespace, resources):
    """What a study over a set's cached vectors starts from: ``(dataset, doc ids, doc texts, query ids, query texts,
    the LENS resource)`` for the set ``name`` (a name or a directory; ``args.data_dir``), its test split, the LENS
    resource int8 or float32 as ``args.quantize`` says (``lens.eval.systems.Resources``)."""
    from lens.eval.beir import load_dataset, resolve_dataset

    data = load_dataset(resolve_dataset(name, args.data_dir), "test")
    qids = list(data.queries)
    lens = resources.lens_int8 if args.quantize == "int8" else resources.lens
    return (data, [d.id for d in data.docs], [d.full_text for d in data.docs], qids,
            [data.queries[q] for q in qids], lens)


def add_suite_study_arguments(parser: argparse.ArgumentParser, out: Path) -> None:
    """The options every study over the suite's cached vectors takes (``term_floor.py``, ``feedback.py``,
    ``length_prior.py``): ``--sets``, ``--model``, ``--quantize`` (int8 by default: the suite's setting),
    ``--data-dir``, ``--cache-dir`` (the ``lens bench beir`` cache), ``--threads``, ``--out``."""
    from lens.eval.beir import DEFAULT_CACHE_DIR

    parser.add_argument("--sets", default="adi,cranfield,medline", help="comma-separated set names or directories")
    parser.add_argument("--model", default="default")
    parser.add_argument("--quantize", default="int8", choices=["int8", "none"])
    add_data_dir_argument(parser)
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=out)


def run_suite_study(args: argparse.Namespace, argv: Sequence[str] | None, script: str, study_set, render,
                    **meta) -> int:
    """Run ``study_set(set, args, resources)`` on each of ``args.sets`` over the cached vectors (``lens.eval.systems
    .Resources``) and write the rows with ``render`` to ``args.out`` (``meta``: more facts for the results)."""
    import torch

    from lens.eval.systems import Resources

    args.quantize = None if args.quantize == "none" else args.quantize
    torch.set_num_threads(args.threads)
    resources = Resources(model=args.model, cache_root=args.cache_dir, lens_batch_size=4)
    rows = [study_set(s, args, resources) for s in args.sets.split(",")]
    results = {"command": script_command(argv, script), "model": args.model, "quantize": args.quantize, **meta,
               "machine": machine(torch=True), "rows": rows}
    print(write_results(args.out, results, render(results)))
    return 0


def idf_lexicons(data, texts: Sequence[str], qtexts: Sequence[str], lens):
    """``(documents' lexicons, the corpus's cluster idf, the queries' lexicons weighed by it, unit)`` of a set
    (``study_set_data``'s): the documents from the cache, the queries behind the set's instruction, as a built index
    searches them (``lens search --idf``)."""
    import numpy as np

    from index.vectors import cluster_idf, l2_normalize
    from lens.instructions import lookup

    docs = lens.documents(list(texts)).arrays["lexicon"].astype(np.float32)
    idf = cluster_idf((docs > 0).sum(axis=0), docs.shape[0]).astype(np.float32)
    queries = l2_normalize(lens.encoder.encode_queries(list(qtexts), instruction=lookup(data.name).text,
                                                       batch_size=16, show_progress_bar=False) * idf)
    return docs, idf, queries


def set_label(given: str | os.PathLike, name: str) -> str:
    """How a study's table names the set given as ``given`` (a name, or a directory) whose dataset is ``name``: a
    variant's directory (``lens data variant``, ``.../VARIANT/SET`` as ``ood.py`` writes it) as ``SET (VARIANT)``."""
    path = Path(given)
    return f"{name} ({path.parent.name})" if path.is_dir() and path.name == name else name


# ---------------------------------------------------------------------------------------------- dev studies
def add_dev_study_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a study on held-out SciFact train queries over the benchmark cache (``doc_length.py``,
    ``hybrid_weights.py``): ``--model``, ``--data-dir``, ``--fraction``, ``--cache-dir``, ``--threads``."""
    parser.add_argument("--model", default="default", help="LENS model directory or 'default'")
    add_data_dir_argument(parser)
    parser.add_argument("--fraction", type=float, default=0.2, help="SciFact holdout fraction (the Makefile's)")
    parser.add_argument("--cache-dir", type=Path, default=Path(".cache/lens-bench"))
    parser.add_argument("--threads", type=int, default=None)


def dev_study_encoders(args: argparse.Namespace, **lens_options):
    """(LENS, MiniLM) resources of a study (``lens.eval.systems``; vectors through ``args.cache_dir``), torch at
    ``args.threads`` threads when given; ``lens_options`` go to ``LensResource`` (batch size 4 unless given)."""
    import torch

    from lens.eval.systems import LensResource, MiniLMResource

    if args.threads:
        torch.set_num_threads(args.threads)
    lens = LensResource(args.model, cache_root=args.cache_dir, **{"batch_size": 4, **lens_options})
    return lens, MiniLMResource(cache_root=args.cache_dir)


# ---------------------------------------------------------------------------------------------- results
def script_command(argv: Sequence[str] | None, script: str) -> str:
    """The command line that reproduces a run of ``script`` (its ``main(argv)``; the process's own without argv)."""
    from lens.cmdline import command_line

    return command_line(None if argv is None else [script, *argv])


def write_results(out: str | os.PathLike, meta: Mapping, markdown: str | Sequence[str], *,
                  sort_keys: bool = True) -> str:
    """``out.json`` (``meta``) and ``out.md`` through ``write_benchmark``, atomically; ``markdown`` is the text or
    its lines. ``sort_keys=False`` keeps the key order (the JSON of the scripts that always wrote it so). Returns the
    Markdown."""
    from lens.eval.report import write_benchmark

    if isinstance(markdown, str):
        markdown = [markdown[:-1] if markdown.endswith("\n") else markdown]
    return write_benchmark(out, meta, markdown, sort_keys=sort_keys)


def write_markdown(path: str | os.PathLike, text: str) -> Path:
    """A Markdown file alone (a table re-rendered from saved results, a report with no JSON), atomically."""
    from lens.atomic import atomic_write_bytes

    atomic_write_bytes(path, text.encode("utf-8"))
    return Path(path)


def start(parser: argparse.ArgumentParser, argv: Sequence[str] | None, name: str,
          render: Callable[[dict], Sequence[str]], level: int = logging.INFO, fmt: str | None = LOG_FORMAT):
    """Parse a script's arguments with ``--output`` (default ``benchmarks/results/NAME``), ``--markdown-only`` and
    ``--note`` added, and set up logging. Returns the arguments, or None when ``--markdown-only`` re-rendered the
    saved results (nothing to measure)."""
    from lens.eval.report import add_markdown_only_arguments, markdown_only

    add_markdown_only_arguments(parser, output=RESULTS / name)
    args = parser.parse_args(argv)
    logging.basicConfig(level=level, **({"format": fmt} if fmt else {}))
    try:
        return None if markdown_only(args, args.output, render) else args
    except FileNotFoundError as e:  # no saved results to re-render: the message, status 1
        raise SystemExit(str(e)) from None


def finish(args: argparse.Namespace, results: dict, render: Callable[[dict], Sequence[str]], **meta) -> int:
    """Record the run in ``results["_meta"]`` (the command, ``args.note``, the machine, ``meta``), write both files
    and print the Markdown; returns 0."""
    from lens.cmdline import command_line

    results["_meta"] = {"command": command_line(), "notes": args.note, "machine": machine_description(), **meta}
    print(write_results(args.output, results, render(results)), end="")
    return 0
