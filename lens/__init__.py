"""LENS: lexicon-based text embeddings from causal LLMs.

The vocabulary's output embeddings are clustered, the clusters replace the LM head, the decoder attends both
ways, and a text's vector is the max over its positions of ``log(1 + relu(cluster logits))``.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["LensEncoder", "LensConfig", "Searcher", "__version__"]


def _check_store_package() -> None:
    """Refuse at once a module of the user's named ``index`` (an ``index.py`` beside a script, a package in the
    working folder) that would stand in for LENS's own ``index`` package, the FAISS store installed beside
    ``lens``: every later import of it would fail in a confusing way (a circular import, when that ``index.py``
    itself imports ``lens``)."""
    import importlib.util
    from pathlib import Path

    ours = Path(__file__).resolve().parent.parent / "index" / "__init__.py"
    try:
        spec = importlib.util.find_spec("index")
    except (ImportError, ValueError):  # a half-imported module of that name: its own error follows
        return
    if spec is None:  # no store at all: a broken install, whose own import error follows
        return
    origin = spec.origin if spec.origin not in (None, "namespace") else None
    if origin is not None and Path(origin).resolve() == ours:
        return
    if origin is None:  # a folder named index without __init__.py (an editable install finds ours after it)
        if not ours.is_file():
            return
        folders = ", ".join(str(p) for p in (spec.submodule_search_locations or []))
        raise ImportError(f"the folder {folders} (named index, in the working folder or on sys.path) takes the place "
                          f"of LENS's own 'index' package (its FAISS store, {ours.parent}): run from another folder, "
                          "or rename that one")
    raise ImportError(f"the module 'index' is {origin}, which takes the place of LENS's own 'index' package (its "
                      f"FAISS store, {ours.parent}): rename {origin} (e.g. to build_index.py), or run from another "
                      "folder")


_check_store_package()


def __getattr__(name: str):
    # Lazy: `import lens` (e.g. for the CLI's --help) must not pay for torch/transformers.
    if name == "LensEncoder":
        from lens.encoder import LensEncoder

        return LensEncoder
    if name == "LensConfig":
        from lens.config import LensConfig

        return LensConfig
    if name == "Searcher":  # a saved index with the encoders it records: lens.search
        from lens.search import Searcher

        return Searcher
    raise AttributeError(f"module 'lens' has no attribute {name!r}")
