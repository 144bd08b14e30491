"""The argparse pieces that several ``cli_*`` modules share: options whose choices are a library registry's names,
read only when argparse checks a value or prints help (so ``lens --help`` imports no model code)."""

from __future__ import annotations

import argparse

QUANTIZE_HELP = ("auto: int8 where a one-time probe on this CPU runs it >= 1.15x float32 (cached per host), else "
                 "float32; int8: the decoder's linear layers in int8 on CPU (faster; vectors close to float32's, not "
                 "equal)")


class Parser(argparse.ArgumentParser):
    """``lens``'s parsers: an option must be spelled in full (``allow_abbrev=False``).

    With argparse's default a prefix stands for the one option it starts (``--ids`` for ``--ids-file``), so a typo
    or a shortened name silently means another option, and a command line that works today breaks when a new option
    shares the prefix. Subcommand parsers inherit the class (``add_subparsers`` makes them of their parent's type).
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


class LazyChoices:
    """The names of a registry (``module:attribute``), imported only when argparse checks a value or prints help.

    So ``lens --help`` stays instant while every choice the CLI offers comes from the library's own registry.
    """

    def __init__(self, target: str):
        self.target = target

    def _names(self) -> list[str]:
        import importlib

        module, attr = self.target.split(":")
        return list(getattr(importlib.import_module(module), attr))

    def __contains__(self, value) -> bool:
        return value in self._names()

    def __iter__(self):
        return iter(self._names())

    def __str__(self) -> str:  # for "%(names)s" in a help string
        return ", ".join(self._names())


def add_registry_argument(parser: argparse.ArgumentParser, *flags: str, registry: str,
                          **kwargs) -> argparse.Action:
    """``parser.add_argument(*flags, choices=LazyChoices(registry), **kwargs)``, the registry left unread.

    ``add_argument`` formats the new option's metavar once to check it; without a ``metavar`` that lists the
    choices, which would import the registry's module (``lens.quantize`` imports torch) while the parser is built.
    A stand-in metavar passes that check and is dropped again, so help still shows ``{name,...}`` from the registry.
    """
    if "metavar" in kwargs:
        return parser.add_argument(*flags, choices=LazyChoices(registry), **kwargs)
    action = parser.add_argument(*flags, choices=LazyChoices(registry), metavar="CHOICE", **kwargs)
    action.metavar = None
    return action


def add_quantize_argument(parser: argparse.ArgumentParser, help_suffix: str = "") -> argparse.Action:
    """``--quantize`` (choices: ``lens.quantize.QUANTIZE_MODES``; default: float32), its help ending in
    ``help_suffix``."""
    return add_registry_argument(parser, "--quantize", registry="lens.quantize:QUANTIZE_MODES", default=None,
                                 help=QUANTIZE_HELP + help_suffix)


def add_overwrite_argument(parser: argparse.ArgumentParser, what: str = "a LENS model") -> None:
    """``--overwrite``: a command that writes a model directory replaces one already at ``--out`` only when asked."""
    parser.add_argument("--overwrite", action="store_true",
                        help=f"replace {what} already at --out (refused without it; never one of the inputs)")
