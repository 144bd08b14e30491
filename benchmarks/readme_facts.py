"""The README's own figures, measured: first use, sizes on disk, the quickstart's scores, the pydoc index build.

    python benchmarks/readme_facts.py

Each figure the README states about using LENS on this machine, each measured as a user meets it:
- the first ``LensEncoder.from_pretrained("default")`` on a machine (the GGUF converted into an empty
  ``$LENS_CACHE_DIR``, in a fresh process) and a later one (the same cache, another fresh process), in seconds,
  and what the cache then holds;
- the Python quickstart's ``queries @ docs.T`` (``encode_documents`` / ``encode_queries`` of its texts, as written)
  and ``explain_match`` of its first query and document;
- ``save_pretrained`` of the default: the directory's size;
- the README's ``lens index build --corpus pydoc-topics --model default --output DIR``, wall seconds in a fresh
  process (the model cached already, as after the first use);
- the benchmark peer all-mpnet-base-v2 unpacked by ``make peers`` (``lens.peers``), its size, when it is there;
- the wheel ``pip wheel --no-deps .`` builds (docs/install.md), its size.
Sizes are bytes of the files (MB = 10^6 bytes). Timings are one run each, beside whatever else the machine runs:
the load average is recorded with them.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import finish, start

from lens.cli_args import Parser

logger = logging.getLogger("readme_facts")

DOCS = ["Statins lower LDL cholesterol and the risk of a heart attack.",
        "The Eiffel Tower was finished in 1889 for the World's Fair."]
QUERIES = ["do statins prevent heart attacks", "when was the eiffel tower built"]
INSTRUCTION = "Given a question, retrieve passages that answer it"
LOAD = "from lens import LensEncoder; LensEncoder.from_pretrained('default')"


def tree_bytes(path: Path) -> int:
    """The bytes of every file below ``path``."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def timed(cmd: list[str], env: dict[str, str] | None = None) -> dict:
    """Wall seconds of ``cmd`` in a fresh process, with the load average before and after; it must succeed."""
    before = os.getloadavg()[0]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return {"seconds": round(seconds, 1), "load_before": round(before, 2), "load_after": round(os.getloadavg()[0], 2)}


def first_use(work: Path) -> dict:
    """The default's first load on a machine (an empty cache) and a later one, each in its own process."""
    cache = work / "cache"
    env = {"LENS_CACHE_DIR": str(cache)}
    first = timed([sys.executable, "-c", LOAD], env)
    later = timed([sys.executable, "-c", LOAD], env)
    return {"first": first, "later": later, "cache_bytes": tree_bytes(cache)}


def quickstart(work: Path, model: str = "default") -> dict:
    """The quickstart's scores, and the size of the model saved whole."""
    from lens import LensEncoder

    enc = LensEncoder.from_pretrained(model)
    docs = enc.encode_documents(DOCS)
    queries = enc.encode_queries(QUERIES, instruction=INSTRUCTION)
    scores = queries @ docs.T
    why = enc.explain_match(QUERIES[0], DOCS[0], top_k=5, instruction=INSTRUCTION)
    enc.save_pretrained(work / "copy")
    return {"scores": [[round(float(x), 3) for x in row] for row in scores], "quantize": enc.quantize,
            "match": {"score": round(why.score, 4), "clusters": [
                {"cluster": r.cluster, "adds": round(r.contribution, 4), "tokens": r.tokens[:4]} for r in why.clusters]},
            "saved_bytes": tree_bytes(work / "copy")}


def pydoc_build(work: Path) -> dict:
    """The README's pydoc index build, in a fresh process."""
    out = work / "pydoc"
    row = timed([sys.executable, "-m", "lens.cli", "-q", "index", "build", "--corpus", "pydoc-topics", "--model",
                 "default", "--output", str(out)])
    return {**row, "index_bytes": tree_bytes(out)}


def wheel_bytes(work: Path) -> int:
    """The size of the wheel of this checkout's commit (``pip wheel --no-deps --no-build-isolation``: the build
    backend of the environment, nothing fetched), built from a copy (``git archive``) so that the build leaves
    no ``build/`` or ``*.egg-info`` in the checkout."""
    root, src = Path(__file__).resolve().parent.parent, work / "src"
    src.mkdir()
    archive = subprocess.run(["git", "-C", str(root), "archive", "HEAD"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    timed([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(work / "wheel"),
           str(src)])
    (wheel,) = (work / "wheel").glob("*.whl")
    return wheel.stat().st_size


def mpnet_bytes() -> int | None:
    """all-mpnet-base-v2 as ``make peers`` unpacked it, or None when it is not there."""
    from lens.peers import mpnet_available, mpnet_dir

    return tree_bytes(mpnet_dir()) if mpnet_available() else None


def render(results: dict) -> list[str]:
    meta, r = results["_meta"], results
    mb = lambda n: "not installed" if n is None else f"{n / 1e6:.0f} MB"  # noqa: E731
    t = lambda row: f"{row['seconds']:.1f} s (load {row['load_before']} -> {row['load_after']})"  # noqa: E731
    return ["# The README's figures, measured", "", f"Command: `{meta['command']}`", "",
            "| figure | measured |", "|---|---|",
            f"| first `from_pretrained(\"default\")` on a machine (GGUF converted into an empty cache) | "
            f"{t(r['first_use']['first'])} |",
            f"| a later one (cache warm), a fresh process | {t(r['first_use']['later'])} |",
            f"| the cache the first use writes | {mb(r['first_use']['cache_bytes'])} |",
            f"| the quickstart's `queries @ docs.T` ({r['quickstart']['quantize'] or 'float32'}) | "
            f"{r['quickstart']['scores']} |",
            f"| `explain_match` of the quickstart's first query and document: the cosine, then its heaviest shared "
            f"clusters (what each adds; first tokens) | {r['quickstart']['match']['score']}: " + "; ".join(
                f"{c['adds']} ({'|'.join(t.strip() for t in c['tokens'])})" for c in r['quickstart']['match']['clusters'])
            + " |",
            f"| `save_pretrained` of the default | {mb(r['quickstart']['saved_bytes'])} |",
            f"| `lens index build --corpus pydoc-topics --model default` | {t(r['pydoc'])}, index "
            f"{mb(r['pydoc']['index_bytes'])} |",
            f"| all-mpnet-base-v2 unpacked by `make peers` | {mb(r['mpnet_bytes'])} |",
            f"| the wheel (`pip wheel --no-deps .`) | {mb(r['wheel_bytes'])} |",
            "", f"{meta['machine']}; one run each."]


def main(argv: list[str] | None = None) -> int:
    p = Parser(description=__doc__.split("\n")[0])
    args = start(p, argv, "readme_facts", render)
    if args is None:  # --markdown-only
        return 0
    with tempfile.TemporaryDirectory(prefix="lens-readme-facts-") as tmp:
        work = Path(tmp)
        results = {"first_use": first_use(work)}
        logger.info("first use: %s", results["first_use"])
        results["quickstart"] = quickstart(work)
        logger.info("quickstart: %s", results["quickstart"])
        results["pydoc"] = pydoc_build(work)
        logger.info("pydoc build: %s", results["pydoc"])
        results["mpnet_bytes"] = mpnet_bytes()
        results["wheel_bytes"] = wheel_bytes(work)
    return finish(args, results, render)


if __name__ == "__main__":
    sys.exit(main())
