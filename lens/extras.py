"""Optional dependencies: one error that names the extra to install, wherever an optional package is needed."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["MissingExtraError", "require"]

DISTRIBUTION = "lens-embed"


class MissingExtraError(ImportError):
    """An optional package is missing; the message names the extra and the pip command."""


def require(module: str, extra: str, *, what: str, package: str | None = None) -> ModuleType:
    """Import ``module`` or raise ``MissingExtraError`` saying that ``what`` needs the ``extra``."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingExtraError(
            f"{what} needs the optional package {package or module!r} (extra {extra!r}): "
            f"pip install '{DISTRIBUTION}[{extra}]'"
        ) from e
