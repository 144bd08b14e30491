"""Optional dependencies: one error that names the extra to install, wherever an optional package is needed."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["MissingExtraError", "MissingPackageError", "require", "require_installed"]

DISTRIBUTION = "lens-embed"


class MissingExtraError(ImportError):
    """An optional package is missing; the message names the extra and the pip command."""


class MissingPackageError(MissingExtraError):
    """An optional package outside the extras (e.g. model files shipped as a wheel) is missing; the message names
    the make target and the pip command that install it."""


def require(module: str, extra: str, *, what: str, package: str | None = None) -> ModuleType:
    """Import ``module`` or raise ``MissingExtraError`` saying that ``what`` needs the ``extra``."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingExtraError(
            f"{what} needs the optional package {package or module!r} (extra {extra!r}): "
            f"pip install '{DISTRIBUTION}[{extra}]'"
        ) from e


def require_installed(found: bool, *, what: str, packages: str, target: str | None = None) -> None:
    """Raise ``MissingPackageError`` unless ``found``: ``what`` needs ``packages`` (``pip install --no-deps``),
    installed by ``make <target>`` when given."""
    if not found:
        how = f"make {target} (or: pip install --no-deps {packages})" if target else f"pip install --no-deps {packages}"
        raise MissingPackageError(f"{what} needs the optional package(s) {packages}, not installed: {how}")
