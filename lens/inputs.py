"""Turn texts (and an optional prompt such as an instruction) into model inputs and pooling masks.

Each sequence is ``[BOS] + prompt + text + [EOS]``. The prompt and the text are tokenised separately, so the
tokens that belong to the text are known exactly: the pooling mask covers the text's tokens and the appended
EOS, never the BOS or the prompt (a query's instruction shapes its vector but is not part of it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Encoded:
    """One tokenised text: ``ids`` and ``pool`` (1 where the token is pooled) of equal length."""

    ids: list[int]
    pool: list[int]
    truncated: bool


def special_ids(tokenizer) -> tuple[int, int]:
    """(start id, EOS id): the start is the tokenizer's BOS, or EOS for tokenizers without one (e.g. Qwen2)."""
    eos = tokenizer.eos_token_id
    bos = tokenizer.bos_token_id
    return (eos if bos is None else bos), eos


def encode_texts(tokenizer, texts: list[str], max_length: int, prompt: str | None = None) -> list[Encoded]:
    """Tokenise ``texts`` behind an optional ``prompt``; texts are cut so each sequence fits ``max_length``."""
    start, eos = special_ids(tokenizer)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"] if prompt else []
    budget = max_length - len(prompt_ids) - 2
    if budget < 1:
        raise ValueError(
            f"the prompt takes {len(prompt_ids)} tokens, leaving no room for text within max_length={max_length}: "
            "shorten the instruction or raise max_length"
        )
    text_ids = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    out = []
    for ids in text_ids:
        kept = ids[:budget]
        seq = [start, *prompt_ids, *kept, eos]
        pool = [0] * (1 + len(prompt_ids)) + [1] * (len(kept) + 1)
        out.append(Encoded(seq, pool, truncated=len(ids) > budget))
    return out


def text_ids(item: Encoded) -> list[int]:
    """The ids of the text's own tokens in ``item``: its pooled tokens without the appended EOS (the tokens an exact
    match is about; the training ``exact`` loss and ``lens bench lexicality`` read them)."""
    return [t for t, p in zip(item.ids[:-1], item.pool[:-1]) if p]


def pad_batch(items: list[Encoded], pad_id: int, side: str = "right") -> dict[str, Tensor]:
    """Pad to the longest item: ``input_ids``, ``attention_mask`` and ``pool_mask`` as (B, L) int64 tensors."""
    if side not in ("right", "left"):
        raise ValueError(f"padding side must be 'right' or 'left', got {side!r}")
    L = max(len(it.ids) for it in items)
    ids = torch.full((len(items), L), pad_id, dtype=torch.long)
    att = torch.zeros((len(items), L), dtype=torch.long)
    pool = torch.zeros((len(items), L), dtype=torch.long)
    for i, it in enumerate(items):
        n = len(it.ids)
        sl = slice(0, n) if side == "right" else slice(L - n, L)
        ids[i, sl] = torch.tensor(it.ids)
        att[i, sl] = 1
        pool[i, sl] = torch.tensor(it.pool)
    return {"input_ids": ids, "attention_mask": att, "pool_mask": pool}


def length_sorted_batches(lengths: list[int], batch_size: int, max_tokens: int | None = None) -> list[list[int]]:
    """Indices grouped into batches of similar length (longest first), so padding is minimal.

    ``max_tokens`` also caps a batch's padded size (its longest length times its rows; a longer text goes alone):
    on a CPU a bigger batch computes no faster per token, so rows past that only add padding and attention over
    it. Callers write each batch's rows back to these indices, which restores the input order.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    if max_tokens is None:
        return [order[s : s + batch_size] for s in range(0, len(order), batch_size)]
    batches: list[list[int]] = []
    for i in order:  # the first index of a batch is its longest
        if batches and len(batches[-1]) < batch_size and lengths[batches[-1][0]] * (len(batches[-1]) + 1) <= max_tokens:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def position_ids(attention_mask: Tensor) -> Tensor:
    """Positions counted over real tokens only, so left padding does not shift a text's rotary positions."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
