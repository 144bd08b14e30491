"""Cache of the frozen lower layers' output, one entry per token sequence.

With LoRA on the top layers only, the layers below the split never change during training, so each text's
hidden states entering the first trained layer are computed once (``no_grad``, length-sorted batches) and kept
in float32 (SmolLM2's residual stream reaches ~6e3, where float16
rounding moved outputs by up to 0.1) in memory and in safetensors shards on disk. A rerun or ``--resume`` reads the shards instead of
recomputing them; the key covers the token ids, the split, the backbone and the attention mode.

A shard's file name is a hash of the keys it holds, so processes sharing a directory (the ranks of a torchrun job,
or two runs) never write the same name with different contents: each rank writes the shards of the sequences it
computed, and a later run reads them all.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import torch
from torch import Tensor

from lens.atomic import atomic_write_bytes
from lens.inputs import pad_batch, Encoded
from lens.layers import lower

logger = logging.getLogger(__name__)


def sequence_key(ids: list[int], namespace: str) -> str:
    h = hashlib.sha1(namespace.encode())
    h.update(torch.tensor(ids, dtype=torch.int64).numpy().tobytes())
    return h.hexdigest()


class PrefixCache:
    """Hidden states entering layer ``split`` for token sequences, keyed by ``sequence_key``."""

    def __init__(self, decoder, split: int, namespace: str, directory: str | Path | None = None,
                 shard_size: int = 1024):
        self.decoder, self.split, self.shard_size = decoder, split, shard_size
        self.namespace = f"{namespace}|split={split}"
        self.directory = Path(directory) if directory is not None else None
        self._states: dict[str, Tensor] = {}
        if self.directory is not None and self.directory.is_dir():
            self._read_shards()

    def key(self, ids: list[int]) -> str:
        return sequence_key(ids, self.namespace)

    def __contains__(self, ids: list[int]) -> bool:
        return self.key(ids) in self._states

    def __len__(self) -> int:
        return len(self._states)

    def get(self, ids: list[int]) -> Tensor:
        try:
            return self._states[self.key(ids)]
        except KeyError:
            raise KeyError(f"a sequence of {len(ids)} tokens is not in the prefix cache; fill() it first") from None

    def _read_shards(self) -> None:
        from safetensors.torch import load_file

        for shard in sorted(self.directory.glob("shard-*.safetensors")):
            try:
                self._states.update(load_file(shard))
            except Exception as e:  # a damaged shard is recomputed, never trusted
                logger.warning("ignoring unreadable prefix-cache shard %s (%s)", shard, e)
        if self._states:
            logger.info("prefix cache: %d sequences from %s", len(self._states), self.directory)

    def fill(self, items: list[Encoded], pad_id: int, batch_size: int = 16, show_progress_bar: bool = True) -> int:
        """Compute the states of every sequence not cached yet; returns how many were computed."""
        from tqdm.auto import tqdm

        todo: dict[str, Encoded] = {}
        for it in items:
            k = self.key(it.ids)
            if k not in self._states:
                todo.setdefault(k, it)
        if not todo:
            return 0
        keys = sorted(todo, key=lambda k: -len(todo[k].ids))
        device = next(self.decoder.parameters()).device
        fresh: dict[str, Tensor] = {}
        bar = tqdm(total=len(keys), desc=f"Caching layers 0-{self.split - 1}", unit="text", disable=not show_progress_bar)
        with torch.inference_mode():
            for s in range(0, len(keys), batch_size):
                chunk = keys[s : s + batch_size]
                batch = pad_batch([todo[k] for k in chunk], pad_id)
                att = batch["attention_mask"].to(device)
                hidden = lower(self.decoder, batch["input_ids"].to(device), att, self.split)
                for row, k in enumerate(chunk):
                    n = len(todo[k].ids)
                    fresh[k] = hidden[row, :n].to("cpu", torch.float32).clone()
                bar.update(len(chunk))
                if len(fresh) >= self.shard_size:
                    self._flush(fresh)
                    fresh = {}
        bar.close()
        self._flush(fresh)
        return len(keys)

    def _flush(self, fresh: dict[str, Tensor]) -> None:
        self._states.update(fresh)
        if self.directory is None or not fresh:
            return
        from safetensors.torch import save

        self.directory.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha1("\n".join(sorted(fresh)).encode()).hexdigest()[:20]
        atomic_write_bytes(self.directory / f"shard-{name}.safetensors", save(fresh))

    def hidden(self, items: list[Encoded], dtype: torch.dtype, device) -> Tensor:
        """Right-padded (B, L, H) cached hidden states of ``items``, zeros past each one's length: the rows of
        ``lens.inputs.pad_batch(items, ...)``, whose masks go with them."""
        L = max(len(it.ids) for it in items)
        states = [self.get(it.ids) for it in items]
        hidden = torch.zeros(len(items), L, states[0].shape[-1], dtype=dtype)
        for i, (it, state) in enumerate(zip(items, states)):
            hidden[i, :len(it.ids)] = state.to(dtype)
        return hidden.to(device)
