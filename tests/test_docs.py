"""The documentation's relative links resolve, and the README stays a short front door.

Checked: every Markdown link ``[text](target)`` outside code in README.md, docs/*.md and benchmarks/README.md whose
target is relative (not ``http(s):``, ``mailto:``) names a file or folder that exists, and, where it carries a
``#fragment``, a heading of that Markdown file (GitHub's anchors: lower case, punctuation dropped, spaces to
hyphens, ``-1``, ``-2`` for repeats). Reads text only: no model, no network.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 250

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)((?:(?!\1).)+?)\1", re.S)  # group 2: the span's text
LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)


def doc_files() -> list[Path]:
    """The Markdown files whose links are checked."""
    files = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [f for f in files if f.exists()]


def strip_code(text: str) -> str:
    """``text`` without fenced code blocks and inline code spans (a link-like string there is not a link)."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def links(text: str) -> list[str]:
    """Every link target in Markdown ``text`` outside code, in order."""
    return LINK.findall(strip_code(text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (before the numbering of repeats)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading anchors on its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of every heading in Markdown ``text`` (outside code blocks)."""
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(FENCE.sub("", text)):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(path: Path) -> list[str]:
    """The relative links of the Markdown file ``path`` that resolve to no file, folder or heading."""
    text = path.read_text(encoding="utf-8")
    bad = []
    for target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        file_part, _, fragment = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            bad.append(f"{target} (no such file: {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest})")
            continue
        if fragment and dest.suffix == ".md" and fragment not in anchors(dest.read_text(encoding="utf-8")):
            bad.append(f"{target} (no heading with anchor #{fragment} in {dest.name})")
    return bad


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path):
    assert broken_links(path) == [], f"{path.relative_to(ROOT)} has broken links; fix the path or the heading"


def test_readme_is_short():
    n = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, (f"README.md has {n} lines (at most {README_MAX_LINES}): move reference material "
                                   "into a guide under docs/ and link it from the README's map")


def test_every_guide_is_in_the_readme_map():
    readme_links = {target.partition("#")[0] for target in links((ROOT / "README.md").read_text(encoding="utf-8"))}
    missing = [f"docs/{p.name}" for p in sorted((ROOT / "docs").glob("*.md")) if f"docs/{p.name}" not in readme_links]
    assert missing == [], f"guides not linked from README.md's documentation map: {missing}"


def test_checker_finds_broken_links_and_anchors(tmp_path: Path):
    (tmp_path / "other.md").write_text("# Other page\n\n## What fits, for Mistral-7B on an 80 GB GPU\n## Twice\n"
                                       "## Twice\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md) [ok anchor](other.md#what-fits-for-mistral-7b-on-an-80-gb-gpu) [repeat](other.md#twice-1)\n"
        "[gone](missing.md) [bad anchor](other.md#nowhere) [web](https://example.org/x.md) [self](#local)\n"
        "`[in code](nope.md)`\n```\n[in a block](nope2.md)\n```\n## Local\n",
        encoding="utf-8")
    bad = broken_links(page)
    assert len(bad) == 2, bad
    assert bad[0].startswith("missing.md (no such file")
    assert bad[1].startswith("other.md#nowhere (no heading")


# ------------------------------------------------------------------ the commands the documentation shows
CODE_FENCE = re.compile(r"^(```|~~~)[^\n]*\n(.*?)^\1", re.M | re.S)
LENS_CALL = re.compile(r"(?:^|[\s(;&|])(?:\S*/)?lens((?:[ \t]+[^\s|;&>]+)+)")
SCRIPT_CALL = re.compile(r"python3?\s+benchmarks/(\w+)\.py((?:[ \t]+[^\s|;&>]+)+)")
SCRIPT_MAIN = re.compile(r'script_main\(\s*"(lens\.eval\.\w+)"')


def code_lines(text: str) -> list[str]:
    """The lines of ``text``'s fenced blocks and inline code spans, continuation backslashes joined, shell
    comments cut."""
    chunks = [m.group(2) for m in CODE_FENCE.finditer(text)]
    chunks += [m.group(2) for m in CODE_SPAN.finditer(FENCE.sub("", text))]
    lines = [line for chunk in chunks for line in chunk.replace("\\\n", " ").splitlines()]
    return [re.split(r"\s#", line, maxsplit=1)[0] for line in lines]


def unknown_options(parser, tokens: list[str]) -> list[str]:
    """The ``--options`` among ``tokens`` that ``parser`` does not define by that exact name (``lens`` takes no
    abbreviations); shell variables (``--$f``) are skipped."""
    opts = (re.sub(r"[,.)\]]+$", "", t.split("=")[0]) for t in tokens if t.startswith("--") and len(t) > 2)
    return [o for o in opts if "$" not in o and o not in parser._option_string_actions]


def lens_subparser(parser, words: list[str]):
    """The parser of the (nested) subcommand ``words`` start with, and how many words named it."""
    import argparse

    depth = 0
    for word in words:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or word not in subs[0].choices:
            break
        parser, depth = subs[0].choices[word], depth + 1
    return parser, depth


@functools.cache
def lens_parser():
    """The ``lens`` command's parser, built once for every file checked."""
    from lens.cli import build_parser

    return build_parser()


@functools.cache
def script_parser(name: str):
    """The parser of ``benchmarks/NAME.py`` when it is a ``script_main`` wrapper of a ``lens.eval`` module, else
    None (a script with its own parser is not checked here); built once per script."""
    import argparse
    import importlib

    script = ROOT / "benchmarks" / f"{name}.py"
    found = SCRIPT_MAIN.search(script.read_text(encoding="utf-8")) if script.exists() else None
    if found is None:
        return None
    parser = argparse.ArgumentParser()
    importlib.import_module(found.group(1)).add_arguments(parser)
    parser.add_argument("-v", "--verbose")
    return parser


def documented_command_errors(path: Path) -> list[str]:
    """Each ``lens ...`` or ``python benchmarks/X.py ...`` command in ``path``'s code that names an option its
    (sub)command does not have."""
    import shlex

    lens = lens_parser()
    bad = []
    for line in code_lines(path.read_text(encoding="utf-8")):
        for m in LENS_CALL.finditer(line):
            try:
                tokens = shlex.split(m.group(1))
            except ValueError:  # an unbalanced quote in prose-like code: read it by whitespace
                tokens = m.group(1).split()
            parser, depth = lens_subparser(lens, [t for t in tokens if not t.startswith("-")][:2])
            if depth:
                bad += [f"lens {' '.join(tokens[:depth])}: {o}" for o in unknown_options(parser, tokens)]
        for m in SCRIPT_CALL.finditer(line):
            parser = script_parser(m.group(1))
            if parser is not None:
                bad += [f"benchmarks/{m.group(1)}.py: {o}" for o in unknown_options(parser, m.group(2).split())]
    return bad


def command_docs() -> list[Path]:
    """The Markdown files whose commands are checked: the docs and every committed result."""
    return doc_files() + sorted((ROOT / "benchmarks" / "results").rglob("*.md"))


def test_documented_commands_name_real_options():
    """A renamed or removed option leaves no documented command or committed result's command behind it."""
    bad = {str(p.relative_to(ROOT)): errs for p in command_docs() if (errs := documented_command_errors(p))}
    assert bad == {}, "commands in the docs name options their command lacks (rename them there): " + str(bad)


def test_documented_command_check_catches_a_bad_option(tmp_path: Path):
    """The check above is not vacuous: an abbreviated, a misspelt and an unknown option are each reported (of a
    lens subcommand and of a benchmark script), and options a command has are not."""
    doc = tmp_path / "x.md"
    doc.write_text("```\nlens index remove IDX --ids a.txt\n```\n`lens search IDX --wieghts 1,0`\n"
                   "`lens encode --input a.txt --output b.npy --top-m 5 --bogus`\n"
                   "`python benchmarks/beir.py adi --systems bm25 --no-such-flag`\n", encoding="utf-8")
    assert documented_command_errors(doc) == ["lens index remove: --ids", "lens search: --wieghts",
                                              "lens encode: --bogus", "benchmarks/beir.py: --no-such-flag"]
