"""What an index records about the encoders that built it, and the one way to open them again.

The build (``lens.indexing``, whichever entry point calls it: ``lens index build`` or ``build_index`` from Python)
writes :class:`EncoderRecord` into the index's manifest (``info``); ``lens.search.Searcher.open`` (hence ``lens
search``, ``lens serve`` and ``lens index add``) reads it back. The keys in ``info``:

=========================== ====================================================================================
``lens_model``              ``"default"``, the absolute path of the LENS model directory, or null when the encoder
                            was built in memory and cannot be loaded again (then pass the encoder to open the index)
``dense``                   the dense kind (``lens.hybrid.DENSE_KINDS``): ``minilm``, ``mpnet``, ``lens`` or ``none``
``lens_quantize``           the quantisation the documents were encoded in: ``"int8"``, or null (float32)
``text_normalization``      the model's text rule (its config's ``text_normalization``), null for none
=========================== ====================================================================================

These are the keys ``lens index build`` wrote before the build recorded them itself, so older indexes read the same
way. An index that records none of them (built from Python before this record existed, or a bare ``HybridIndex``)
is read as the default model with the dense kind its fingerprint names.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

logger = logging.getLogger(__name__)

__all__ = ["RECORD_KEYS", "EncoderRecord", "model_reference"]

RECORD_KEYS = ("lens_model", "dense", "lens_quantize", "text_normalization")
_DEFAULT = "default"


def model_reference(model: str | os.PathLike) -> str:
    """How an index records a LENS model given by name or path: ``"default"``, or the directory's absolute path
    (the packaged default's own directory is recorded as ``"default"``)."""
    from lens.model_dir import DEFAULT_MODEL_DIR

    if os.fspath(model) == _DEFAULT:
        return _DEFAULT
    path = Path(model).expanduser().resolve()
    return _DEFAULT if path == DEFAULT_MODEL_DIR.resolve() else str(path)


def _text_rule(config: Any) -> str | None:
    return getattr(config, "text_normalization", None)


def _spec_text_rule(model: str | os.PathLike) -> str | None:
    """The text rule of the model directory a spec names, read from its config (None if it cannot be read: the
    workers that load it then say why)."""
    from lens.config import LensConfig
    from lens.model_dir import resolve_model_dir

    try:
        return _text_rule(LensConfig.load(resolve_model_dir(model)))
    except (FileNotFoundError, ValueError):
        return None


@dataclass(frozen=True)
class EncoderRecord:
    """The encoders an index was built with, as its manifest records them."""

    lens_model: str | None  # "default", an absolute directory, or None: built in memory, cannot be loaded again
    dense: str | None  # a lens.hybrid.DENSE_KINDS name (None: an encoder of no known kind)
    quantize: str | None = None  # the documents' quantisation: "int8", or None (float32)
    text_normalization: str | None = None  # the LENS model's text rule
    recorded: bool = True  # False: the index records none of this (read from its fingerprint)
    text_rule_recorded: bool = True  # False: an index from before the text rule was recorded (nothing to check)

    # ------------------------------------------------------------------ writing (the build)
    @classmethod
    def of_encoder(cls, encoder: Any) -> "EncoderRecord":
        """The record of a build's encoder: a ``lens.hybrid.HybridEncoder`` or a ``lens.sharding.EncoderSpec``
        (its quantisation is what the build's chunks say, set by :meth:`with_quantize`). Any other encoder (a
        stand-in with ``encode_documents`` and ``fingerprint``) names no model: it is recorded as one that cannot
        be loaded again."""
        from lens.sharding import EncoderSpec

        if isinstance(encoder, EncoderSpec):  # a model reference and a dense kind, loaded by the workers
            return cls(model_reference(encoder.model), encoder.dense, None, _spec_text_rule(encoder.model))
        lens = getattr(encoder, "lens", None)
        source = getattr(lens, "source_dir", None)
        if source is None:
            logger.warning("the LENS encoder was built in memory, not loaded from a model directory, so the index "
                           "cannot name a model to load again: open it with Searcher.open(directory, "
                           "encoder=...) (or save the model with save_pretrained and build from that directory)")
        return cls(None if source is None else model_reference(source), getattr(encoder, "dense_kind", None),
                   getattr(lens, "quantize", None), _text_rule(getattr(lens, "config", None)))

    def with_quantize(self, quantize: str | None) -> "EncoderRecord":
        """This record with the quantisation the documents were actually encoded in."""
        return EncoderRecord(self.lens_model, self.dense, quantize, self.text_normalization, self.recorded,
                             self.text_rule_recorded)

    def to_info(self) -> dict[str, Any]:
        """The manifest ``info`` entries of this record."""
        return {"lens_model": self.lens_model, "dense": self.dense, "lens_quantize": self.quantize,
                "text_normalization": self.text_normalization}

    # ------------------------------------------------------------------ reading (search, add, serve)
    @classmethod
    def of_index(cls, index: Any) -> "EncoderRecord":
        """The record in a loaded index's ``info`` (a ``HybridIndex`` or ``ShardedIndex``); for an index that
        records none, the default model and the dense kind its fingerprint names."""
        info: Mapping[str, Any] = index.info or {}
        if not any(key in info for key in RECORD_KEYS):
            dense = (index.fingerprint or {}).get("dense_model") or "none"
            dense = dense if dense in ("lens", "none") else "minilm"
            return cls(_DEFAULT, dense, None, None, recorded=False, text_rule_recorded=False)
        return cls(info.get("lens_model"), info.get("dense") or "none", info.get("lens_quantize"),
                   info.get("text_normalization"), text_rule_recorded="text_normalization" in info)

    def same_encoders(self, other: "EncoderRecord") -> bool:
        """Whether ``other`` names the same models to load (a searcher's loaded encoders can then be reused)."""
        return (self.lens_model, self.dense) == (other.lens_model, other.dense) and self.lens_model is not None

    def load(self, directory: str | os.PathLike, model: str | os.PathLike | None = None):
        """The ``HybridEncoder`` this record names (``model``: another LENS model directory instead, e.g. one that
        has moved), with the text rule the index's documents were encoded under. Raises ValueError when the index
        names no model that can be loaded again."""
        from lens.hybrid import HybridEncoder

        if model is None and self.lens_model is None:
            raise ValueError(f"the index {directory} was built with a LENS encoder made in memory, so it names no "
                             "model to load: pass that encoder (Searcher.open(directory, encoder=...)), or the "
                             "model directory it was saved to (model=..., --model)")
        # the documents were encoded under the recorded text rule (none before the record had one), so the queries
        # are too, whatever the model directory says now (the shipped default gained a rule after indexes were built)
        from lens.inputs import NO_TEXT_RULE

        rule = self.text_normalization if self.text_rule_recorded else None
        return HybridEncoder.from_pretrained(model if model is not None else self.lens_model, self.dense,
                                             text_normalization=rule or NO_TEXT_RULE)

    def check_text_rule(self, encoder: Any, directory: str | os.PathLike) -> None:
        """Refuse an encoder whose LENS model normalises text otherwise than the index's documents were (an index
        that predates the recorded rule is not checked)."""
        if not self.text_rule_recorded:
            return
        rule = _text_rule(getattr(getattr(encoder, "lens", None), "config", None))
        if rule != self.text_normalization:
            raise ValueError(f"the index {directory} was built by a model whose text rule is "
                             f"{self.text_normalization!r}, but this encoder's is {rule!r}: queries would not be "
                             "normalised as the documents were; open it with the model it was built with")
