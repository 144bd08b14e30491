"""Command lines: how this process was started, written as a user would retype it (the one rule for the commands
that results, model cards and benchmark READMEs record), and the argparse types the commands share."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Sequence

__all__ = ["check_quantize_workers", "command_line", "int_list", "positive_int"]


def command_line(argv: Sequence[str] | None = None) -> str:
    """``sys.argv`` (or ``argv``) as a command: the ``lens`` entry point and ``python -m lens.cli`` (as torchrun and
    accelerate start it) are both ``lens ...``; a script is ``python <its path from the working directory> ...``."""
    argv = list(sys.argv if argv is None else argv)
    if not argv:
        return "lens"
    path = Path(argv[0])
    if path.name == "lens" or (path.name in ("cli.py", "__main__.py") and path.parent.name == "lens"):
        return shlex.join(["lens", *argv[1:]])
    if path.name.endswith(".py"):
        try:
            rel = os.path.relpath(path.resolve(), Path.cwd())
        except ValueError:  # pragma: no cover - another drive on Windows
            rel = argv[0]
        return shlex.join(["python", rel, *argv[1:]])
    return shlex.join(argv)


def positive_int(value: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}")
    return n


def seed_int(value: str) -> int:
    """argparse type: a random seed, an integer >= 0 (what numpy's generators take)."""
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a seed, an integer >= 0, got {value!r}")
    return n


def positive_float(value: str) -> float:
    """argparse type: a number > 0."""
    try:
        x = float(value)
    except ValueError:
        x = 0.0
    if not x > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {value!r}")
    return x


def int_list(flag: str, minimum: int = 1, example: str = "64,128"):
    """argparse type for ``flag``: comma-separated integers >= ``minimum``, duplicates dropped, order kept."""

    def parse(value: str) -> list[int]:
        try:
            out = [int(v) for v in value.split(",") if v.strip()]
        except ValueError:
            out = []
        if not out or min(out) < minimum:
            raise argparse.ArgumentTypeError(f"{flag} takes comma-separated integers >= {minimum} such as {example}; "
                                             f"got {value!r}")
        return list(dict.fromkeys(out))

    return parse


def check_quantize_workers(quantize: str | None, several: bool) -> None:
    """--quantize runs in this process only: worker processes (--workers, --devices, torchrun) load float32."""
    if quantize and several:
        raise ValueError("--quantize applies to a single CPU process; drop --workers / --devices (or torchrun), "
                         "or drop --quantize")
