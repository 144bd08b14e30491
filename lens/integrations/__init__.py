"""LENS inside other libraries, each behind its optional extra (nothing is imported here).

- ``lens.integrations.sentence_transformers`` (extra ``st``): a LENS model directory as a sentence-transformers
  ``SparseEncoder``;
- ``lens.integrations.mteb`` (extra ``mteb``): a LENS encoder for MTEB's evaluation, with the paper's instructions.
"""
