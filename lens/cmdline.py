"""How this process was started, written as a user would retype it: the one rule for the commands that results,
model cards and benchmark READMEs record."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Sequence

__all__ = ["command_line"]


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
