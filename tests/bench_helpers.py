"""Helpers of the bench tests: tiny BEIR-layout datasets written on the fly, and benchmark scripts loaded as
modules (imported by tests/test_bench_*.py and the tests of benchmarks/*.py)."""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

# BM25 finds d1 for q1 and d2 for q2 only (their words appear nowhere else); q3's words appear nowhere.
DOCS = [
    {"_id": "d1", "title": "Statins", "text": "statins lower cholesterol in patients"},
    {"_id": "d2", "title": "Photosynthesis", "text": "chlorophyll turns light into sugar"},
    {"_id": "d3", "title": "", "text": "the protein binds to the gene"},
    {"_id": "d4", "title": "Mice", "text": "the mouse brain shows increased expression"},
    {"_id": "d5", "title": "Trial", "text": "a clinical trial of a new drug dose"},
]
QUERIES = [
    {"_id": "q1", "text": "do statins lower cholesterol"},
    {"_id": "q2", "text": "chlorophyll and light"},
    {"_id": "q3", "text": "zebra xylophone"},
    {"_id": "q9", "text": "a query judged only in train"},
]
TEST_QRELS = [("q1", "d1", 1), ("q2", "d2", 2), ("q3", "d3", 1)]


def write_beir(directory: Path, docs=DOCS, queries=QUERIES, qrels=TEST_QRELS, split="test", gz=True, crlf=True) -> Path:
    """A BEIR directory: corpus.jsonl(.gz), queries.jsonl(.gz), qrels/<split>.tsv with a header (CRLF lines)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, rows in (("corpus.jsonl", docs), ("queries.jsonl", queries)):
        blob = "".join(json.dumps(r) + "\n" for r in rows).encode()
        if gz:
            (directory / f"{name}.gz").write_bytes(gzip.compress(blob))
        else:
            (directory / name).write_bytes(blob)
    end = "\r\n" if crlf else "\n"
    lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{g}" for q, d, g in qrels]
    (directory / "qrels").mkdir(exist_ok=True)
    (directory / "qrels" / f"{split}.tsv").write_bytes((end.join(lines) + end).encode())
    return directory


def load_script(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as a module (the scripts are not a package), to test their pure parts; their folder
    goes on ``sys.path`` first, as when a script runs, so that ``import _common`` (and one script importing another)
    works."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(f"{name}_bench", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
