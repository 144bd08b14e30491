"""The ``lens`` command: the top-level parser (-v, -q), dispatch and the output set-up.

Each ``lens.cli_*`` module in ``COMMAND_MODULES`` owns its subcommands: their functions, and a
``register(subparsers)`` that adds their parsers and sets each one's ``func`` (and ``command``, for nested ones);
a new subcommand is a change to its module alone. Heavy imports happen inside each command function, and choices
are read from the library's registries only when needed, so ``lens --help`` is instant and imports no torch."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from contextlib import contextmanager, nullcontext

from lens import cli_bench, cli_data, cli_encode, cli_index, cli_train

# the modules that declare lens's subcommands, in the order `lens --help` lists them
COMMAND_MODULES = (cli_encode, cli_index, cli_bench, cli_train, cli_data)


def build_parser() -> argparse.ArgumentParser:
    """``lens``'s parser: the global flags, then every ``COMMAND_MODULES`` module's subcommands."""
    from lens.cli_args import Parser

    p = Parser(prog="lens", description="Lexicon-based text embeddings from causal LLMs.")
    talk = p.add_mutually_exclusive_group()
    talk.add_argument("-v", "--verbose", action="count", default=0, dest="verbosity",
                      help="log progress details (-vv: debug), and show what transformers says while loading models")
    talk.add_argument("-q", "--quiet", action="store_true",
                      help="no progress bars and no info logs; warnings and errors still print")
    sub = p.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        module.register(sub)
    return p


# options whose value may start with '-' (argparse would take "-1,2" for an option): "--opt -1,2" -> "--opt=-1,2"
_DASH_VALUE_OPTIONS = ("--weights",)


def _join_dash_values(argv: list[str]) -> list[str]:
    import re

    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] in _DASH_VALUE_OPTIONS and i + 1 < len(argv) and re.match(r"-[\d.]", argv[i + 1]):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


# ---------------------------------------------------------------------------------------------- output
OWN_LOGGERS = ("lens", "index")  # -v shows their INFO records, -vv their DEBUG ones; other libraries' stay hidden


def _verbosity(args: argparse.Namespace) -> int:
    """-1 with --quiet, 0 normally, 1 with -v (or a subcommand's own -v), 2 with -vv."""
    if args.quiet:
        return -1
    return max(args.verbosity, int(bool(getattr(args, "verbose", False))))


@contextmanager
def command_output(verbosity: int):
    """What a command prints on stderr besides its result, restored on exit (tests run ``main`` many times).

    Normally: our warnings and errors, and the progress bars the command asks for; transformers' and PEFT's
    load chatter is hidden (``lens.backbone.quiet_loading`` at each load, and their own warnings for the whole
    command). ``-v``: our INFO logs, and transformers' output back; ``-vv``: our DEBUG logs, other libraries'
    INFO logs. ``-q``: no progress bar at all.
    """
    from lens.backbone import hide_library_warnings

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    level = logging.DEBUG if verbosity >= 2 else logging.INFO if verbosity == 1 else logging.WARNING
    loggers = [logging.getLogger(name) for name in OWN_LOGGERS] + [logging.getLogger()]
    saved = [lg.level for lg in loggers]
    for lg in loggers[:-1]:
        lg.setLevel(level)
    if verbosity >= 2:
        loggers[-1].setLevel(logging.INFO)
    try:
        with warnings.catch_warnings():
            if verbosity <= 0:
                hide_library_warnings()
            with no_progress_bars() if verbosity < 0 else logs_above_bars():
                yield
    finally:
        for lg, lvl in zip(loggers, saved):
            lg.setLevel(lvl)


def logs_above_bars():
    """Log lines printed above a running progress bar instead of through it (``tqdm.write``), when the root
    logger prints to the console (under pytest it does not, and nothing changes)."""
    from tqdm.contrib.logging import logging_redirect_tqdm

    console = any(isinstance(h, logging.StreamHandler) and h.stream in (sys.stdout, sys.stderr)
                  for h in logging.getLogger().handlers)
    return logging_redirect_tqdm() if console else nullcontext()


@contextmanager
def no_progress_bars():
    """Every tqdm bar disabled, whatever its caller asked for (ours, transformers', bm25s'), restored on exit."""
    from tqdm import std

    original = std.tqdm.__dict__["__init__"]
    init = std.tqdm.__init__

    def disabled(self, *args, **kwargs):
        kwargs["disable"] = True
        init(self, *args, **kwargs)

    std.tqdm.__init__ = disabled
    try:
        yield
    finally:
        std.tqdm.__init__ = original


def _storage_oserror(e: OSError) -> bool:
    from lens.atomic import STORAGE_ERRNOS

    return e.errno in STORAGE_ERRNOS


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``parse_args``, except that a command whose positional list may be empty (``lens search DIR [QUERY ...]``,
    ``lens index remove DIR [ID ...]``, marked by ``more_positionals``) also takes the words after its options
    (``lens search DIR -k 3 q1 q2``): argparse alone gives a ``*`` positional nothing once an option follows the
    one before it."""
    args, extras = parser.parse_known_args(argv)
    dest = getattr(args, "more_positionals", None)
    if extras and (dest is None or any(e.startswith("-") for e in extras)):
        parser.error(f"unrecognized arguments: {' '.join(extras)}")
    if extras:
        getattr(args, dest).extend(extras)
    return args


def main(argv: list[str] | None = None) -> int:
    """Run ``lens ARGV``; its exit status. A reader that stops reading early (``lens index info DIR | head -1``)
    ends the command quietly instead of with a traceback."""
    try:
        code = _run(argv)
        sys.stdout.flush()  # what is still buffered fails here, where it is caught, not in the interpreter's exit
    except BrokenPipeError:
        return _stdout_closed()
    return code


def _stdout_closed() -> int:
    """Status 1 for a closed stdout, the rest of the output sent to devnull so that the interpreter's last flush
    does not fail again (Python's recipe: the ``signal`` module's "Note on SIGPIPE")."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's stand-in): nothing is flushed at exit
        return 1
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
    return 1


def _run(argv: list[str] | None) -> int:
    from lens.atomic import StorageError, storage_error
    from lens.extras import MissingExtraError
    try:
        args = _parse(build_parser(), _join_dash_values(list(sys.argv[1:] if argv is None else argv)))
    except SystemExit as e:  # argparse printed the usage error (or --help); its code is ours
        return e.code if isinstance(e.code, int) else 2
    try:
        with command_output(_verbosity(args)):
            code = args.func(args)
    except (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, StorageError, ValueError,
            TypeError, NotImplementedError, MissingExtraError) as e:
        print(f"lens {args.command}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a full disk or a permission met outside the library's writers: still one line
        if not _storage_oserror(e):
            raise
        print(f"lens {args.command}: error: {storage_error(e.filename or '(unknown path)', e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print(f"lens {args.command}: interrupted" + (f": {e}" if str(e) else ""), file=sys.stderr)
        return 130
    return code if isinstance(code, int) else 0  # a command's own status (75: stopped, resumable), else 0


if __name__ == "__main__":
    sys.exit(main())
