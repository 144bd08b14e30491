"""Benchmark harness: BEIR-style retrieval evaluation of LENS against BM25 and MiniLM baselines.

Modules: ``instructions`` (per-dataset query instructions), ``cache`` (on-disk embedding cache), ``systems``
(the retrieval systems), ``report`` (result files), ``beir`` (the runner: ``add_arguments``/``run``),
``ablations`` (the paper's cluster-count and attention x pooling ablations). Metrics live in ``lens.metrics``.
"""
