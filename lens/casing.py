"""Case restoration ("truecasing") of texts written in capitals, from a table of each word's usual form.

A cased vocabulary reads "HEART FAILURE IN NASA ASTRONAUTS" as tokens it rarely saw in training. Lower-casing the
text helps but loses what case carried for a model trained on ordinary text ("NASA", "Parkinson", a sentence's first
capital: lower-casing every text cost the default 0.037 nDCG@10 on SciFact). Truecasing brings such a text back to
the form it would most likely have had: each word in its most frequent written form, and a capital at the start of
each sentence (the classic frequency truecaser of statistical machine translation).

The table (``CasingTable``) is built from ordinary mixed-case texts (``build_casing_table``; the packaged one from
the training sets' texts, ``lens data casing``) and lists only the words whose usual form is not all lower-case;
every other word is written in lower case. Two refinements (format 2) come from the same counts: a word's usual
form after or before a given word where it differs from its own ("t" alone is lower case, "t" before "cells" is
"T"), and the vocabulary of every word seen, so that a short word in capitals the table never saw ("KRAS", "YAP")
is kept as an acronym instead of being lower-cased. It is one gzipped JSON file with its format version, settings
and sources; ``read_casing_table`` is its one reader (format 1 files, without the refinements, still read). An
index keeps its corpus's own table (``own_casing_table``) and truecases queries with it over the packaged one
(``corpus_casing_table``).
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Sequence

from lens.atomic import atomic_write_bytes

CASING_FORMAT = 2
READABLE_FORMATS = (1, 2)  # format 1: forms only (no pairs, no vocabulary)
PACKAGED_TABLE = Path(__file__).parent / "resources" / "casing-en.json.gz"

SHOUTED_SHARE = 0.7  # a text is shouted when at least this share of its cased letters are capitals ...
SHOUTED_MIN_CAPITALS = 6  # ... and it has at least this many: "DNA" or "HIV-1" alone stay as they are

MIN_COUNT = 2  # a word's usual form must be seen at least this often, away from a sentence's start ...
MIN_SHARE = 0.6  # ... and be at least this share of the word's occurrences there
PAIR_MIN_COUNT = 3  # a form next to a given word overrides the word's own only when seen this often there ...
PAIR_MIN_SHARE = 0.8  # ... and in this share of the word's occurrences there (pairs are sparse: stricter)
ACRONYM_MAX_LETTERS = 4  # a word in capitals the vocabulary never saw, this short or shorter, stays in capitals
# A corpus's own table is counted over at most this many of its texts, evenly spaced: usual forms settle long before,
# and the pair counts of a whole large corpus would not fit in memory.
CORPUS_MAX_TEXTS = 20_000

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
    """Each word's usual written form, keyed by its lower-case form; only the forms that are not all lower-case.

    ``after`` (key ``"<previous word> <word>"``, both lower case) holds a word's usual form after a given word
    where it differs from the word's own, ``before`` (key ``"<word> <next word>"``) its form before one.
    ``known`` is every word (lower case) seen at least ``min_count`` times in any form, or None for a format-1
    table that did not count them (then no word is kept in capitals).
    """

    forms: dict[str, str]
    after: dict[str, str] = field(default_factory=dict)
    before: dict[str, str] = field(default_factory=dict)
    known: frozenset[str] | None = None
    min_count: int = MIN_COUNT
    min_share: float = MIN_SHARE
    pair_min_count: int = PAIR_MIN_COUNT
    pair_min_share: float = PAIR_MIN_SHARE
    texts: int = 0  # how many distinct mixed-case texts were counted
    sources: list[str] = field(default_factory=list)
    format: int = CASING_FORMAT

    def form(self, word: str, previous: str | None = None, next: str | None = None, code: bool = False) -> str:
        """``word``'s usual form between the words ``previous`` and ``next`` (lower case; None at a text's ends):
        its form after ``previous``, else before ``next``, else its own; else ``word`` itself if it is in capitals
        and either a short word the table never saw (an acronym: "KRAS") or part of a code (``code``: a digit
        right after it, "CX3CR1", "G6PD"); else lower case. Only a table that counted its vocabulary (format 2)
        keeps words in capitals."""
        lower = word.lower()
        pair = None
        if previous is not None and self.after:
            pair = self.after.get(f"{previous} {lower}")
        if pair is None and next is not None and self.before:
            pair = self.before.get(f"{lower} {next}")
        if pair is not None:
            return pair
        usual = self.forms.get(lower)
        if usual is not None:
            return usual
        if (self.known is not None and word.isupper()
                and (code or (len(word) <= ACRONYM_MAX_LETTERS and lower not in self.known))):
            return word
        return lower

    def truecase(self, text: str) -> str:
        """``text`` with every word in its usual form (``form``: lower case unless the table says otherwise) and a
        capital at the start of each sentence."""
        words = list(WORD.finditer(text))
        lower = [m.group().lower() for m in words]
        parts, last = [], 0
        for i, m in enumerate(words):
            parts += [text[last:m.start()], self.form(m.group(), lower[i - 1] if i else None,
                                                      lower[i + 1] if i + 1 < len(words) else None,
                                                      code=text[m.end():m.end() + 1].isdigit())]
            last = m.end()
        out = "".join(parts) + text[last:]
        return _SENTENCE_START.sub(lambda m: m.group(1) + m.group(2) + m.group(3).upper(), out)

    def truecase_shouted(self, text: str) -> str:
        """``text`` truecased when it is written in capitals (``is_shouted``), else unchanged."""
        return self.truecase(text) if is_shouted(text) else text

    def truecase_uncased(self, text: str) -> str:
        """``text`` truecased when its case says nothing (``is_uncased``: in capitals or all lower case)."""
        return self.truecase(text) if is_uncased(text) else text

    def overruled_by(self, other: CasingTable) -> CasingTable:
        """This table with ``other``'s evidence first: its pairs, then its forms (lower-case ones included, as a
        corpus's table keeps them), then this table's pairs and forms; the two vocabularies together. A word
        ``other`` has a form for loses this table's pairs, so a corpus's "t" is not overruled by a general text's
        "T cells"."""
        known = (None if self.known is None and other.known is None
                 else (self.known or frozenset()) | (other.known or frozenset()))
        forms = {**self.forms, **other.forms}
        after = {k: v for k, v in self.after.items() if k.split(" ", 1)[1] not in other.forms}
        before = {k: v for k, v in self.before.items() if k.split(" ", 1)[0] not in other.forms}
        return replace(self, forms=forms, after={**after, **other.after},
                       before={**before, **other.before}, known=known, texts=self.texts + other.texts,
                       sources=[*self.sources, *other.sources])

    def extended_by(self, other: CasingTable) -> CasingTable:
        """This table with ``other``'s evidence only for the words it has no form for (their pairs with them), the
        two vocabularies together; this table's settings and sources. What an index's table becomes when documents
        are added or another index merged in: a table keeps forms, not the counts behind them, so a word it already
        has keeps its form, and only a rebuild (``lens index build``) weighs old and new documents together."""
        if other is self or other == self:
            return self
        grown = other.overruled_by(self)
        return replace(self, forms=grown.forms, after=grown.after, before=grown.before, known=grown.known,
                       texts=grown.texts)

    def save(self, path: str | os.PathLike) -> None:
        """Write the table atomically as gzipped JSON (``to_bytes``)."""
        atomic_write_bytes(Path(path), self.to_bytes())

    def to_bytes(self) -> bytes:
        """The table as gzipped JSON, sorted, so the same table gives the same bytes (``read_casing_table``)."""
        payload = {"format": self.format, "min_count": self.min_count, "min_share": self.min_share,
                   "pair_min_count": self.pair_min_count, "pair_min_share": self.pair_min_share,
                   "texts": self.texts, "sources": self.sources, "forms": dict(sorted(self.forms.items())),
                   "after": dict(sorted(self.after.items())), "before": dict(sorted(self.before.items())),
                   "known": None if self.known is None else sorted(self.known)}
        raw = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
        return gzip.compress(raw, mtime=0)


def load_casing_table(path: str | os.PathLike) -> CasingTable:
    """Read a table written by ``CasingTable.save`` (format 1 or 2); a file of another format or shape is refused
    by name."""
    p = Path(path)
    return read_casing_table(p.read_bytes(), p)


def read_casing_table(data: bytes, path: str | os.PathLike) -> CasingTable:
    """Parse the bytes of a table file (``CasingTable.to_bytes``; ``path`` names it in errors): the one reader,
    for a table file and for an index's ``casing.json.gz`` alike."""
    p = Path(path)
    try:
        obj = json.loads(gzip.decompress(data))
    except (OSError, EOFError, ValueError) as e:
        raise ValueError(f"{p}: not a casing table (gzipped JSON written by `lens data casing`): {e}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{p}: not a casing table (expected a JSON object)")
    fmt = obj.get("format")
    shapes = [isinstance(obj.get("forms"), dict), isinstance(obj.get("after", {}), dict),
              isinstance(obj.get("before", {}), dict), isinstance(obj.get("known", []), (list, type(None)))]
    if fmt not in READABLE_FORMATS or not all(shapes):
        raise ValueError(f"{p}: not a casing table of format {' or '.join(map(str, READABLE_FORMATS))} (format "
                         f"{fmt!r} found, or a malformed one); rebuild it with `lens data casing`")
    known = obj.get("known")
    return CasingTable(forms=obj["forms"], after=obj.get("after", {}), before=obj.get("before", {}),
                       known=None if known is None else frozenset(known),
                       min_count=obj.get("min_count", MIN_COUNT), min_share=obj.get("min_share", MIN_SHARE),
                       pair_min_count=obj.get("pair_min_count", PAIR_MIN_COUNT),
                       pair_min_share=obj.get("pair_min_share", PAIR_MIN_SHARE), texts=obj.get("texts", 0),
                       sources=list(obj.get("sources", [])), format=fmt)


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


def spaced_sample(items: Sequence, max_items: int = CORPUS_MAX_TEXTS) -> Sequence:
    """At most ``max_items`` of ``items``, evenly spaced (all of them when there are no more)."""
    return items[::max(1, -(-len(items) // max_items))]  # ceil: at most max_items


def own_casing_table(texts: Sequence[str], max_texts: int = CORPUS_MAX_TEXTS) -> CasingTable:
    """A corpus's own table: its texts' usual forms, lower-case ones too (so that it overrules a general table's
    where the corpus writes a word in lower case); what an index keeps (``index.store``, ``casing.json.gz``).
    Counted over at most ``max_texts`` of ``texts``, evenly spaced through the corpus (``spaced_sample``)."""
    texts = texts if isinstance(texts, Sequence) else list(texts)
    return build_casing_table(spaced_sample(texts, max_texts), sources=["corpus"], lower_forms=True)


def corpus_casing_table(texts: Iterable[str] | CasingTable, base: CasingTable | None = None) -> CasingTable:
    """The casing table for a corpus's queries: the corpus's own usual forms (``texts``, or their
    ``own_casing_table``) over ``base`` (the packaged table by default). A collection writes its own words its own
    way ("YAP", "miRNA", "iPSC"), which a table counted over general training texts cannot know; a query in capitals
    is best brought back to them."""
    own = texts if isinstance(texts, CasingTable) else own_casing_table(texts)
    return (packaged_casing_table() if base is None else base).overruled_by(own)


@dataclass
class FormCounts:
    """What ``count_forms`` counted over the distinct mixed-case texts."""

    forms: dict[str, Counter]  # lower-case word -> how often each written form occurs away from a sentence's start
    after: dict[tuple[str, str], Counter]  # (previous word, word), lower case -> likewise, after that word
    before: dict[tuple[str, str], Counter]  # (word, next word), lower case -> likewise, before that word
    words: Counter  # lower-case word -> how often it occurs anywhere, in any form
    texts: int  # how many distinct mixed-case texts were counted


def count_forms(texts: Iterable[str]) -> FormCounts:
    """How often each written form of each word occurs away from a sentence's start (alone, after the word before
    it and before the word after it), and how often each word occurs at all, over the distinct mixed-case texts of
    ``texts`` (texts without a capital, or in capitals, carry no evidence of case)."""
    forms: dict[str, Counter] = defaultdict(Counter)
    after: dict[tuple[str, str], Counter] = defaultdict(Counter)
    before: dict[tuple[str, str], Counter] = defaultdict(Counter)
    words: Counter = Counter()
    seen: set[str] = set()
    for text in texts:
        if text in seen or not any(c.isupper() for c in text) or is_shouted(text):
            continue
        seen.add(text)
        found = list(WORD.finditer(text))
        lower = [m.group().lower() for m in found]
        words.update(lower)
        for i, m in enumerate(found):
            # a sentence's first word says nothing about case: its capital is the sentence's
            if i and not _GAP_ENDS_SENTENCE.search(text, found[i - 1].end(), m.start()):
                forms[lower[i]][m.group()] += 1
                after[(lower[i - 1], lower[i])][m.group()] += 1
                if i + 1 < len(found):
                    before[(lower[i], lower[i + 1])][m.group()] += 1
    return FormCounts(forms=forms, after=after, before=before, words=words, texts=len(seen))


def _usual(seen: Counter, min_count: int, min_share: float) -> str | None:
    """The most frequent form in ``seen`` if it has at least ``min_count`` sightings and ``min_share`` of all."""
    form, k = seen.most_common(1)[0]
    return form if k >= min_count and k >= min_share * sum(seen.values()) else None


def build_casing_table(texts: Iterable[str], *, min_count: int = MIN_COUNT, min_share: float = MIN_SHARE,
                       pair_min_count: int = PAIR_MIN_COUNT, pair_min_share: float = PAIR_MIN_SHARE,
                       sources: Iterable[str] = (), lower_forms: bool = False) -> CasingTable:
    """The table of the words whose most frequent form in ``texts`` is not all lower-case, seen at least
    ``min_count`` times and in at least ``min_share`` of the word's occurrences (away from a sentence's start;
    ``lower_forms``: the lower-case ones too, so that the table can overrule another's, as a corpus's does);
    the pairs whose word's usual form after the previous word, or before the next, differs from the word's own
    (``pair_min_count``, ``pair_min_share``); and every word seen at least ``min_count`` times."""
    for mc, ms in ((min_count, min_share), (pair_min_count, pair_min_share)):
        if mc < 1 or not 0 < ms <= 1:
            raise ValueError(f"min_count must be >= 1 and min_share in (0, 1]; got {mc}, {ms}")
    counts = count_forms(texts)
    forms = {}
    for lower, seen in counts.forms.items():
        form = _usual(seen, min_count, min_share)
        if form is not None and (lower_forms or form != lower):
            forms[lower] = form
    after, before = {}, {}
    for pairs, counted, word_at in ((after, counts.after, 1), (before, counts.before, 0)):
        for pair, seen in counted.items():
            form = _usual(seen, pair_min_count, pair_min_share)
            if form is not None and form != forms.get(pair[word_at], pair[word_at]):
                pairs[" ".join(pair)] = form
    known = frozenset(w for w, k in counts.words.items() if k >= min_count)
    return CasingTable(forms=forms, after=after, before=before, known=known, min_count=min_count, min_share=min_share,
                       pair_min_count=pair_min_count, pair_min_share=pair_min_share, texts=counts.texts,
                       sources=list(sources))
