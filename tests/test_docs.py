"""The documentation's relative links resolve, and the README stays a short front door.

Checked: every Markdown link ``[text](target)`` outside code in README.md, docs/*.md and benchmarks/README.md whose
target is relative (not ``http(s):``, ``mailto:``) names a file or folder that exists, and, where it carries a
``#fragment``, a heading of that Markdown file (GitHub's anchors: lower case, punctuation dropped, spaces to
hyphens, ``-1``, ``-2`` for repeats). Reads text only: no model, no network.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 250

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
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
