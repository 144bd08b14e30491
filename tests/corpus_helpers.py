"""Small seeded random corpora for the indexing, scale and reliability tests, now in ``lens.testing`` (shared with
benchmarks/reliability.py, which may not import tests/); kept so the tests' imports stay as they are."""

from lens.testing import CORPUS_WORDS as WORDS, write_corpus  # noqa: F401
