"""Optional dependencies: one error that names the extra to install, wherever an optional package is needed."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["EXTRAS", "MissingExtraError", "MissingPackageError", "install_command", "require", "require_installed"]

DISTRIBUTION = "lexlens"  # the distribution ("lens" and "lens-embed" on PyPI are other projects)


class MissingExtraError(ImportError):
    """An optional package is missing; the message names the extra and the pip command."""


class MissingPackageError(MissingExtraError):
    """An optional package outside the extras (e.g. model files shipped as a wheel) is missing; the message names
    the make target and the pip command that install it."""


# extra -> what it enables; pyproject.toml's [project.optional-dependencies] lists the packages (a test checks both
# name the same extras)
EXTRAS = {
    "eval": "lens bench (trec_eval metrics, plots)",
    "st": "sentence-transformers",
    "mteb": "MTEB",
    "peers": "nothing: the benchmark peers need pip install --no-deps, which `make peers` runs",
    "test": "the test suite",
}


def install_command(extra: str) -> str:
    """The pip command that installs ``extra``: from the package index, or from a checkout."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}; known: {', '.join(EXTRAS)}")
    return f"pip install '{DISTRIBUTION}[{extra}]' (in a checkout: pip install -e '.[{extra}]')"


def require(module: str, extra: str, *, what: str, package: str | None = None) -> ModuleType:
    """Import ``module`` or raise ``MissingExtraError`` saying that ``what`` needs the ``extra``."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingExtraError(
            f"{what} needs the optional package {package or module!r} (extra {extra!r}): {install_command(extra)}"
        ) from e


def require_installed(found: bool, *, what: str, packages: str, target: str | None = None) -> None:
    """Raise ``MissingPackageError`` unless ``found``: ``what`` needs ``packages`` (``pip install --no-deps``),
    installed by ``make <target>`` when given."""
    if not found:
        how = f"make {target} (or: pip install --no-deps {packages})" if target else f"pip install --no-deps {packages}"
        raise MissingPackageError(f"{what} needs the optional package(s) {packages}, not installed: {how}")
