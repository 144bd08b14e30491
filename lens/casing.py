"""Case restoration ("truecasing") of texts written in capitals, from a table of each word's usual form.

A cased vocabulary reads "HEART FAILURE IN NASA ASTRONAUTS" as tokens it rarely saw in training. Lower-casing the
text helps but loses what case carried for a model trained on ordinary text ("NASA", "Parkinson", a sentence's first
capital: lower-casing every text cost the default 0.037 nDCG@10 on SciFact). Truecasing brings such a text back to
the form it would most likely have had: each word in its most frequent written form, and a capital at the start of
each sentence (the classic frequency truecaser of statistical machine translation).

The table (``CasingTable``) is built from ordinary mixed-case texts (``build_casing_table``; the packaged one from
the training sets' texts, ``lens data casing``) and lists only the words whose usual form is not all lower-case;
every other word is written in lower case. It is one gzipped JSON file with its format version, settings and
sources; ``load_casing_table`` is its one reader.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Iterable

from lens.atomic import atomic_write_bytes

CASING_FORMAT = 1
PACKAGED_TABLE = Path(__file__).parent / "resources" / "casing-en.json.gz"

SHOUTED_SHARE = 0.7  # a text is shouted when at least this share of its cased letters are capitals ...
SHOUTED_MIN_CAPITALS = 6  # ... and it has at least this many: "DNA" or "HIV-1" alone stay as they are

MIN_COUNT = 2  # a word's usual form must be seen at least this often, away from a sentence's start ...
MIN_SHARE = 0.6  # ... and be at least this share of the word's occurrences there

WORD = re.compile(r"[^\W\d_]+(?:['\u2019][^\W\d_]+)*")  # letters, with inner apostrophes ("don't", "O'Neill")
# A sentence starts at the text's start or after . ! ? (and closing quotes or brackets) and white space; what
# follows up to the first letter (opening quotes, brackets, digits) is kept as it is.
_SENTENCE_START = re.compile(r"(^|[.!?]['\"\u2019\u201d)\]]*\s+)([^\w]*)([^\W\d_])")
_GAP_ENDS_SENTENCE = re.compile(r"[.!?:]['\"\u2019\u201d)\]]*\s")  # between two words: a sentence ended


def is_shouted(text: str) -> bool:
    """Whether ``text`` is written in capitals: at least 70% of its cased letters, and at least 6 of them."""
    upper = sum(c.isupper() for c in text)
    if upper < SHOUTED_MIN_CAPITALS:
        return False
    lower = sum(c.islower() for c in text)
    return upper >= SHOUTED_SHARE * (upper + lower)


def is_uncased(text: str) -> bool:
    """Whether ``text``'s case says nothing: written in capitals (``is_shouted``) or without a single capital (at
    least 6 letters: a record or query typed in lower case, "dna repair in yeast")."""
    if is_shouted(text):
        return True
    return not any(c.isupper() for c in text) and sum(c.islower() for c in text) >= SHOUTED_MIN_CAPITALS


@dataclass
class CasingTable:
    """Each word's usual written form, keyed by its lower-case form; only the forms that are not all lower-case."""

    forms: dict[str, str]
    min_count: int = MIN_COUNT
    min_share: float = MIN_SHARE
    texts: int = 0  # how many distinct mixed-case texts were counted
    sources: list[str] = field(default_factory=list)
    format: int = CASING_FORMAT

    def truecase(self, text: str) -> str:
        """``text`` with every word in its usual form (lower case unless the table says otherwise) and a capital
        at the start of each sentence."""
        forms = self.forms
        out = WORD.sub(lambda m: forms.get(m.group().lower(), m.group().lower()), text)
        return _SENTENCE_START.sub(lambda m: m.group(1) + m.group(2) + m.group(3).upper(), out)

    def truecase_shouted(self, text: str) -> str:
        """``text`` truecased when it is written in capitals (``is_shouted``), else unchanged."""
        return self.truecase(text) if is_shouted(text) else text

    def truecase_uncased(self, text: str) -> str:
        """``text`` truecased when its case says nothing (``is_uncased``: in capitals or all lower case)."""
        return self.truecase(text) if is_uncased(text) else text

    def save(self, path: str | os.PathLike) -> None:
        """Write the table atomically as gzipped JSON (sorted, so the same table gives the same bytes)."""
        payload = {"format": self.format, "min_count": self.min_count, "min_share": self.min_share,
                   "texts": self.texts, "sources": self.sources, "forms": dict(sorted(self.forms.items()))}
        raw = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
        atomic_write_bytes(Path(path), gzip.compress(raw, mtime=0))


def load_casing_table(path: str | os.PathLike) -> CasingTable:
    """Read a table written by ``CasingTable.save``; a file of another format or shape is refused by name."""
    p = Path(path)
    try:
        obj = json.loads(gzip.decompress(p.read_bytes()))
    except (OSError, EOFError, ValueError) as e:
        raise ValueError(f"{p}: not a casing table (gzipped JSON written by `lens data casing`): {e}") from None
    if not isinstance(obj, dict) or obj.get("format") != CASING_FORMAT or not isinstance(obj.get("forms"), dict):
        raise ValueError(f"{p}: not a casing table of format {CASING_FORMAT} (format {obj.get('format')!r} "
                         "found); rebuild it with `lens data casing`" if isinstance(obj, dict) else
                         f"{p}: not a casing table (expected a JSON object)")
    return CasingTable(forms=obj["forms"], min_count=obj.get("min_count", MIN_COUNT),
                       min_share=obj.get("min_share", MIN_SHARE), texts=obj.get("texts", 0),
                       sources=list(obj.get("sources", [])))


@lru_cache(maxsize=1)
def packaged_casing_table() -> CasingTable:
    """The table shipped with the package (``lens/resources/casing-en.json.gz``), read once per process."""
    return load_casing_table(PACKAGED_TABLE)


def truecase_shouted(text: str) -> str:
    """``text`` truecased with the packaged table when it is written in capitals, else unchanged."""
    return packaged_casing_table().truecase_shouted(text)


def truecase_uncased(text: str) -> str:
    """``text`` truecased with the packaged table when it is in capitals or all lower case, else unchanged."""
    return packaged_casing_table().truecase_uncased(text)


def count_forms(texts: Iterable[str]) -> tuple[dict[str, Counter], int]:
    """How often each written form of each word occurs away from a sentence's start, over the distinct
    mixed-case texts of ``texts`` (texts without a capital, or in capitals, carry no evidence of case)."""
    counts: dict[str, Counter] = defaultdict(Counter)
    seen: set[str] = set()
    for text in texts:
        if text in seen or not any(c.isupper() for c in text) or is_shouted(text):
            continue
        seen.add(text)
        end = None  # where the previous word ended; None before the first
        for m in WORD.finditer(text):
            # a sentence's first word says nothing about case: its capital is the sentence's
            if end is not None and not _GAP_ENDS_SENTENCE.search(text, end, m.start()):
                counts[m.group().lower()][m.group()] += 1
            end = m.end()
    return counts, len(seen)


def build_casing_table(texts: Iterable[str], *, min_count: int = MIN_COUNT, min_share: float = MIN_SHARE,
                       sources: Iterable[str] = ()) -> CasingTable:
    """The table of the words whose most frequent form in ``texts`` is not all lower-case, seen at least
    ``min_count`` times and in at least ``min_share`` of the word's occurrences (away from a sentence's start)."""
    if min_count < 1 or not 0 < min_share <= 1:
        raise ValueError(f"min_count must be >= 1 and min_share in (0, 1]; got {min_count}, {min_share}")
    counts, n = count_forms(texts)
    forms = {}
    for lower, seen in counts.items():
        form, k = seen.most_common(1)[0]
        if form != lower and k >= min_count and k >= min_share * sum(seen.values()):
            forms[lower] = form
    return CasingTable(forms=forms, min_count=min_count, min_share=min_share, texts=n, sources=list(sources))
