"""How `lens` is put together: every ``lens.cli_*`` module registers its own subcommands, each leaf dispatches to a
command function, and building the parser (all of `lens --help`) reads no registry and imports no model code."""

import argparse
import subprocess
import sys
import types
from pathlib import Path

import pytest

from lens.cli import COMMAND_MODULES, build_parser
from lens.cli_args import add_quantize_argument, add_registry_argument


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command path, parser) of every subcommand that takes no further subcommand."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for action in subs:
        for name, child in action.choices.items():
            yield from _leaves(child, path + (name,))


def test_subcommands_come_from_their_modules_in_help_order():
    top = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert list(top.choices) == ["cluster-vocab", "encode", "explain", "convert", "index", "search", "serve", "bench",
                                 "train", "mntp", "merge", "data"]
    owners = {}
    for module in COMMAND_MODULES:
        sub = argparse.ArgumentParser().add_subparsers()
        module.register(sub)
        owners.update(dict.fromkeys(sub.choices, module.__name__))
    assert owners["encode"] == "lens.cli_encode" and owners["index"] == "lens.cli_index"
    assert owners["bench"] == "lens.cli_bench" and owners["mntp"] == "lens.cli_train"
    assert owners["data"] == "lens.cli_data"
    assert list(owners) == list(top.choices)  # nothing registered twice, nothing outside a module


def test_every_leaf_dispatches_and_names_itself():
    leaves = dict(_leaves(build_parser()))
    assert ("index", "build") in leaves and ("bench", "sts") in leaves and ("data", "teacher") in leaves
    for path, parser in leaves.items():
        assert callable(parser.get_default("func")), path
        if len(path) > 1:  # errors read "lens index build: error: ..."; a top-level command gets its name from argparse
            assert parser.get_default("command") == " ".join(path), path


def test_parser_reads_no_registry_until_asked(monkeypatch):
    p = argparse.ArgumentParser(prog="x")
    add_registry_argument(p, "--kind", registry="fake_lens_registry:NAMES", default=None, help="a kind")
    add_registry_argument(p, "--mode", registry="fake_lens_registry:NAMES", metavar="M", help="%(choices)s")
    assert "fake_lens_registry" not in sys.modules  # the module does not even exist yet
    monkeypatch.setitem(sys.modules, "fake_lens_registry", types.SimpleNamespace(NAMES={"alpha": 1, "beta": 2}))
    text = p.format_help()
    assert "--kind {alpha,beta}" in text and "--mode M" in text and "alpha, beta" in text
    assert p.parse_args(["--kind", "beta"]).kind == "beta"
    with pytest.raises(SystemExit):
        p.parse_args(["--kind", "gamma"])


def test_quantize_choices_come_from_the_library():
    from lens.quantize import QUANTIZE_MODES

    p = argparse.ArgumentParser(prog="x")
    add_quantize_argument(p, "; said last")
    text = " ".join(p.format_help().split())
    assert "--quantize {" + ",".join(QUANTIZE_MODES) + "}" in text and "not equal); said last" in text


def test_help_imports_no_model_code():
    code = ("import sys\nfrom lens.cli import main\nassert main(['--help']) == 0\n"
            "heavy = sorted(m for m in ('torch', 'transformers', 'faiss', 'lens.quantize') if m in sys.modules)\n"
            "print('HEAVY', heavy)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in out


@pytest.mark.parametrize("given,want", [
    ("year=2020", ("year", 2020)), ("tags=[\"a\", \"b\"]", ("tags", ["a", "b"])), ('id="007"', ("id", "007")),
    ("source=wiki", ("source", "wiki")), ("flag=true", ("flag", True)), ("a.b=x=y", ("a.b", "x=y")),
    # what a filter cannot match as JSON is the word itself
    ("source=null", ("source", "null")), ("x=NaN", ("x", "NaN")), ("x=Infinity", ("x", "Infinity")),
    ('x={"a": 1}', ("x", '{"a": 1}')),
])
def test_a_filter_value_is_json_where_a_filter_can_match_it(given, want):
    from lens.cli_index import filter_item_arg

    assert filter_item_arg(given) == want


def test_every_parser_wants_options_spelled_in_full(capsys):
    """``--ids`` is not taken for ``--ids-file`` (nor any prefix for its option) on any subcommand."""
    for path, parser in _leaves(build_parser()):
        assert parser.allow_abbrev is False, path
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["index", "remove", "IDX", "--ids", "ids.txt"])
    assert e.value.code == 2 and "unrecognized arguments: --ids" in capsys.readouterr().err
    args = build_parser().parse_args(["index", "remove", "IDX", "--ids-file", "ids.txt"])
    assert str(args.ids_file) == "ids.txt"


def test_a_users_index_module_is_named_instead_of_failing_later(tmp_path):
    """A script named index.py (a natural name for one that builds an index) would stand in for LENS's own `index`
    package: `import lens` says so and what to do, where the imports failed as a circular import before. A data
    folder named index (no __init__.py) changes nothing where lens is installed in site-packages, and is named the
    same way where an editable install (this checkout's) finds the package after it."""
    (tmp_path / "index.py").write_text("from lens.search import Searcher\n")
    run = subprocess.run([sys.executable, "index.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1
    assert f"the module 'index' is {tmp_path / 'index.py'}, which takes the place of LENS's own 'index'" in run.stderr
    assert "rename" in run.stderr and "circular" not in run.stderr
    (tmp_path / "index.py").unlink()
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "manifest.json").write_text("{}")
    run = subprocess.run([sys.executable, "-c", "import lens.search, index; print(index.__file__)"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    import index

    home = Path(index.__file__).resolve().parent.parent  # where the package lies: site-packages, or this checkout
    probe = subprocess.run([sys.executable, "-c", "import sys, pathlib; print(any(pathlib.Path(p).resolve() == "
                            f"pathlib.Path({str(home)!r}) for p in sys.path if p))"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    if probe.stdout.strip() == "True":  # on sys.path: the regular package wins over a folder without __init__.py
        assert run.returncode == 0 and run.stdout.strip() == index.__file__, run.stderr
    else:  # an editable install's finder comes after the folder: named, with what to do
        assert run.returncode == 1
        assert f"the folder {tmp_path / 'index'} (named index" in run.stderr and "run from another folder" in run.stderr
