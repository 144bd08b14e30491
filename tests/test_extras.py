"""Optional dependencies: a missing one gives one error naming the extra and the pip command; extras and the
distribution name agree with pyproject.toml; every import of an optional package goes through ``require``."""

import ast
import sys
import tomllib
from pathlib import Path

import pytest

from lens.extras import DISTRIBUTION, EXTRAS, MissingExtraError, install_command, require

ROOT = Path(__file__).resolve().parents[1]
# import name -> extra whose packages provide it
OPTIONAL = {"pytrec_eval": "eval", "matplotlib": "eval",
            "sentence_transformers": "st", "mteb": "mteb"}


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_a_missing_module_names_the_extra_and_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "pytrec_eval", None)  # `import pytrec_eval` now raises, as if not installed
    with pytest.raises(MissingExtraError) as e:
        require("pytrec_eval", "eval", what="metrics", package="pytrec-eval-terrier")
    message = str(e.value)
    assert "metrics needs the optional package 'pytrec-eval-terrier' (extra 'eval')" in message
    assert f"pip install '{DISTRIBUTION}[eval]'" in message and "pip install -e '.[eval]'" in message
    assert isinstance(e.value.__cause__, ImportError)


def test_the_library_call_sites_raise_the_extras_error(monkeypatch):
    from lens.metrics import evaluate

    monkeypatch.setitem(sys.modules, "pytrec_eval", None)
    with pytest.raises(MissingExtraError, match="'pytrec-eval-terrier' .*lexlens"):
        evaluate({"q": {"d": 1}}, {"q": {"d": 1.0}})


def test_a_present_module_is_returned():
    import json

    assert require("json", "eval", what="x") is json


def test_an_unknown_extra_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown extra 'evl'; known: eval, st"):
        install_command("evl")


def test_extras_and_distribution_agree_with_pyproject():
    project = _pyproject()["project"]
    assert project["name"] == DISTRIBUTION
    assert set(project["optional-dependencies"]) == set(EXTRAS)
    assert project["optional-dependencies"]["peers"] == []  # `make peers` installs them (--no-deps)
    listed = {extra: " ".join(pkgs).lower() for extra, pkgs in project["optional-dependencies"].items()}
    for module, extra in OPTIONAL.items():  # each optional import is provided by the extra its errors name
        package = {"Stemmer": "pystemmer", "pytrec_eval": "pytrec-eval-terrier",
                   "sentence_transformers": "sentence-transformers"}.get(module, module)
        assert package in listed[extra], (module, extra)


def test_bm25_is_a_core_dependency():
    """An index keeps a BM25 part by default (`lens index build`), so its packages come with every install."""
    core = " ".join(_pyproject()["project"]["dependencies"]).lower()
    assert "bm25s>=" in core and "pystemmer>=" in core


def test_constraints_pin_one_release_inside_every_range():
    """pyproject.toml gives ranges (a library must install beside others); constraints.txt pins the tested release of
    each, inside its range, and nothing else."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = _pyproject()["project"]
    ranges = {}
    for line in project["dependencies"] + [r for reqs in project["optional-dependencies"].values() for r in reqs]:
        req = Requirement(line)
        assert str(req.specifier), f"{line}: no version range"
        assert not any(s.operator == "==" for s in req.specifier), f"{line}: an exact pin belongs in constraints.txt"
        ranges.setdefault(canonicalize_name(req.name), []).append(req.specifier)
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", line
            pins[canonicalize_name(req.name)] = spec.version
    assert set(pins) == set(ranges)
    for name, specs in ranges.items():
        assert all(s.contains(pins[name]) for s in specs), (name, pins[name], [str(s) for s in specs])


def test_the_installed_distribution_has_the_new_name():
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution(DISTRIBUTION)
    except PackageNotFoundError:
        pytest.skip(f"{DISTRIBUTION} is not installed (running from a bare checkout)")
    assert dist.metadata["Name"] == DISTRIBUTION
    assert any(ep.name == "lens" and ep.value == "lens.cli:main" for ep in dist.entry_points)
    assert not list(ROOT.glob("lens_embed.egg-info")), "stale egg-info of the old distribution name"


def _imported_tops(node: ast.AST) -> list[tuple[str, ast.AST]]:
    if isinstance(node, ast.Import):
        return [(a.name.split(".")[0], node) for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [(node.module.split(".")[0], node)]
    return []


def _guarded_by_try(tree: ast.AST) -> set[int]:
    """ids of import nodes inside a ``try`` whose handlers catch ImportError (an optional feature skipped)."""
    out = set()
    for t in ast.walk(tree):
        if isinstance(t, ast.Try) and any(
            h.type is not None and "ImportError" in ast.unparse(h.type) for h in t.handlers
        ):
            out |= {id(n) for stmt in t.body for n in ast.walk(stmt)}
    return out


def _requires(tree: ast.AST) -> list[tuple[str, int]]:
    """(top-level module, line) of each ``require("name", ...)`` call under ``tree``."""
    return [(c.args[0].value.split(".")[0], c.lineno) for c in ast.walk(tree) if isinstance(c, ast.Call)
            and getattr(c.func, "id", None) == "require" and c.args and isinstance(c.args[0], ast.Constant)]


def test_optional_packages_are_imported_only_through_require():
    bad, extras_used = [], set()
    for path in sorted([*ROOT.glob("lens/**/*.py"), *ROOT.glob("index/**/*.py")]):
        tree = ast.parse(path.read_text(), filename=str(path))
        guarded = _guarded_by_try(tree)
        functions = [f for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for call in ast.walk(tree):
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "require" and len(call.args) > 1:
                extras_used.add(call.args[1].value)
        # a module-level require() before the import guards the rest of the module; else the enclosing function's
        module_level = [(top, line) for top, line in _requires(tree)
                        if not any(f.lineno <= line <= f.end_lineno for f in functions)]
        for top, node in (t for n in ast.walk(tree) for t in _imported_tops(n)):
            if top not in OPTIONAL or id(node) in guarded:
                continue
            if any(t == top and line < node.lineno for t, line in module_level):
                continue
            owner = [f for f in functions if f.lineno <= node.lineno <= f.end_lineno]
            innermost = max(owner, key=lambda f: f.lineno) if owner else None
            if innermost is None or top not in {t for t, _ in _requires(innermost)}:
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {top} without require()")
    assert not bad, "\n".join(bad)
    assert extras_used and extras_used <= set(EXTRAS)
