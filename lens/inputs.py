"""Turn texts (and an optional prompt such as an instruction) into model inputs and pooling masks.

Each sequence is ``[BOS] + prompt + text + [EOS]``. The prompt and the text are tokenised separately, so the
tokens that belong to the text are known exactly: the pooling mask covers the text's tokens and the appended
EOS, never the BOS or the prompt (a query's instruction shapes its vector but is not part of it).

With echo (``LensConfig.echo``) the text is written twice, ``[BOS] + prompt + text + text + [EOS]``, and only the
second copy and the EOS are pooled: under causal attention every position of the second copy has read the whole
text, so the position that stands for a token has seen that token (echo embeddings, Springer et al. 2024; the
Mistral-SPLADE recipe).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from lens.casing import CasingTable, is_shouted, packaged_casing_table, truecase_shouted, truecase_uncased


def lowercase_shouted(text: str) -> str:
    """``text`` lower-cased when it is written in capitals (a shouted query, a legacy record), else unchanged.

    Mixed-case text keeps its case, so a model trained on ordinary text sees exactly what it was trained on (the
    rule leaves every text of a normal corpus alone), while a text in capitals, whose tokens a cased vocabulary
    scatters into other clusters, is brought to the lower-case form.
    """
    return text.lower() if is_shouted(text) else text


# The text rules a model config may name (``LensConfig.text_normalization``), applied to a text before tokenising.
# None (no entry) keeps the text as it is. Case matters to a cased vocabulary: "HEART" and "heart" are different
# tokens in different clusters, so a corpus or query in capitals gets other vectors unless the model folds case.
TEXT_NORMALIZATIONS: dict[str, Callable[[str], str]] = {
    "lowercase": str.lower,
    "casefold": str.casefold,  # lowercase plus Unicode folds ("Straße" -> "strasse")
    "lowercase-shouted": lowercase_shouted,  # only texts written in capitals (lowercase_shouted)
    # only texts written in capitals, each word back in its usual form (lens.casing.truecase_shouted)
    "truecase-shouted": truecase_shouted,
    # likewise, and texts without a capital ("dna repair in yeast" -> "DNA repair in yeast")
    "truecase-uncased": truecase_uncased,
}


# The rules above that truecase with a casing table (the packaged one), by the table's method: a caller with a table
# of its own (an index's corpus: lens.casing.corpus_casing_table) passes it to normalize_texts / encode_texts.
CASING_RULES: dict[str, Callable[[CasingTable, str], str]] = {
    "truecase-shouted": CasingTable.truecase_shouted,
    "truecase-uncased": CasingTable.truecase_uncased,
}


NO_TEXT_RULE = "none"  # where a rule is given to override a model's (from_pretrained): texts as they are


def check_text_normalization(rule: str | None) -> str | None:
    """``rule`` if it names a text rule (or is None), else a ValueError listing the valid names."""
    if rule is not None and rule not in TEXT_NORMALIZATIONS:
        raise ValueError(f"unknown text_normalization {rule!r}; valid: None, {', '.join(map(repr, TEXT_NORMALIZATIONS))}")
    return rule


def normalize_texts(texts: list[str], rule: str | None, casing: CasingTable | None = None) -> list[str]:
    """``texts`` under the text rule ``rule`` (None: unchanged); a truecasing rule uses ``casing`` if given, else
    the packaged table."""
    if check_text_normalization(rule) is None:
        return texts
    if rule in CASING_RULES:
        method, table = CASING_RULES[rule], casing or packaged_casing_table()
        return [method(table, t) for t in texts]
    fold = TEXT_NORMALIZATIONS[rule]
    return [fold(t) for t in texts]


@dataclass
class Encoded:
    """One tokenised text: ``ids`` and ``pool`` (1 where the token is pooled) of equal length."""

    ids: list[int]
    pool: list[int]
    truncated: bool


def query_prompt(template: str, prompt: str | None) -> str | None:
    """The one rule for a ``prompt`` (``LensEncoder.encode``'s and sentence-transformers'): none for ``None`` or
    ``""``, the prompt itself when it already has the template's form (or the template takes no instruction), else
    the template around it: a prompt is an instruction, as the model was trained to read one."""
    if not prompt:
        return None
    head, found, tail = template.partition("{instruction}")
    if not found:
        return prompt
    if len(prompt) >= len(head) + len(tail) and prompt.startswith(head) and prompt.endswith(tail):
        return prompt
    return template.format(instruction=prompt)


def special_ids(tokenizer) -> tuple[int, int]:
    """(start id, EOS id): the start is the tokenizer's BOS, or EOS for tokenizers without one (e.g. Qwen2)."""
    eos = tokenizer.eos_token_id
    bos = tokenizer.bos_token_id
    return (eos if bos is None else bos), eos


def encode_texts(tokenizer, texts: list[str], max_length: int, prompt: str | None = None, *,
                 normalization: str | None = None, convention: str = "lens",
                 casing: CasingTable | None = None, echo: bool = False) -> list[Encoded]:
    """Tokenise ``texts`` behind an optional ``prompt``; texts are cut so ``[BOS] prompt text [EOS]`` fits
    ``max_length``.

    ``normalization`` names the model's text rule (``TEXT_NORMALIZATIONS``), applied to the texts, not the prompt:
    every path that tokenises for a model (encoding, training, MNTP, integrations) passes its config's rule here;
    ``casing`` is the truecasing rules' table when not the packaged one (``normalize_texts``). ``echo`` writes the
    (cut) text twice and pools the second copy (the module's docstring): the text is cut as without echo, so a
    sequence holds up to ``2 * max_length - len(prompt) - 2`` tokens and costs about twice the compute.
    """
    if convention != "lens":  # the released checkpoints' own rule (lens.config.CONVENTIONS)
        if echo:
            raise ValueError(f"echo needs the LENS convention; this model uses {convention!r}")
        return encode_texts_paper(tokenizer, normalize_texts(list(texts), normalization, casing), max_length,
                                  prompt, convention)
    start, eos = special_ids(tokenizer)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"] if prompt else []
    budget = max_length - len(prompt_ids) - 2
    if budget < 1:
        raise ValueError(
            f"the prompt takes {len(prompt_ids)} tokens, leaving no room for text within max_length={max_length}: "
            "shorten the instruction or raise max_length"
        )
    text_ids = tokenizer(normalize_texts(list(texts), normalization, casing), add_special_tokens=False)["input_ids"]
    out = []
    for ids in text_ids:
        kept = ids[:budget]
        first = [*kept] if echo else []  # the copy that is read, not pooled
        seq = [start, *prompt_ids, *first, *kept, eos]
        pool = [0] * (1 + len(prompt_ids) + len(first)) + [1] * (len(kept) + 1)
        out.append(Encoded(seq, pool, truncated=len(ids) > budget))
    return out


def encode_model_texts(tokenizer, config, texts: list[str], max_length: int, prompt: str | None = None, *,
                       casing: CasingTable | None = None) -> list[Encoded]:
    """``encode_texts`` as the model whose ``LensConfig`` is ``config`` reads its texts: its text rule, convention
    and echo, so every path that encodes or trains for a model tokenises the same way (the MNTP warm-up, whose
    masked tokens an echo would give away, calls ``encode_texts`` itself)."""
    return encode_texts(tokenizer, texts, max_length, prompt, normalization=config.text_normalization,
                        convention=config.convention, casing=casing, echo=config.echo)


PAPER_QUERY_MARKER = "<query>"  # convention "paper": a query is pooled from its last <query> token on
PADDING_SIDE = {"lens": "right", "paper": "left"}  # how each convention pads a batch (lens.config.CONVENTIONS)


def encode_texts_paper(tokenizer, texts: list[str], max_length: int, prompt: str | None = None,
                       convention: str = "paper") -> list[Encoded]:
    """Convention "paper", the released LENS checkpoints' reference tokenisation.

    Each sequence is BOS + the tokens of the one string ``prompt + text + eos_token``, cut to ``max_length`` (a cut
    text loses its EOS). Pooled logit positions run from the last ``<query>`` token (with a prompt) or BOS
    (without) to the third-to-last position; ``pool`` marks tokens, so it marks the positions after those (the
    model reads a token's feature at its left neighbour): every token after the start but the last one.
    """
    if convention != "paper":
        raise ValueError(f"unknown convention {convention!r}; valid: 'lens', 'paper'")
    start, eos = tokenizer.bos_token_id, tokenizer.eos_token
    if start is None or eos is None:
        raise ValueError("the paper convention needs a tokenizer with BOS and EOS tokens (the Mistral tokenizer of "
                         "the released checkpoints)")
    marker = None
    if prompt:
        marker = tokenizer.convert_tokens_to_ids(PAPER_QUERY_MARKER)
        if marker is None or marker == tokenizer.unk_token_id:
            raise ValueError(f"the tokenizer has no {PAPER_QUERY_MARKER} token, which the paper convention pools "
                             "queries from; load the released checkpoint's own tokenizer")
    pieces = tokenizer([f"{prompt or ''}{t}{eos}" for t in texts], add_special_tokens=False)["input_ids"]
    out = []
    for i, ids in enumerate(pieces):
        seq = [start, *ids[: max_length - 1]]
        first = 1
        if marker is not None:
            hits = [j for j, t in enumerate(seq) if t == marker]
            if not hits:
                raise ValueError(f"text {i}: no {PAPER_QUERY_MARKER} token within its first {max_length} tokens (the "
                                 "prompt is too long, or lacks it); use the query template "
                                 "'<instruct>{instruction}\\n<query>' with a shorter instruction")
            first = hits[-1] + 1
        pool = [1 if first <= j <= len(seq) - 2 else 0 for j in range(len(seq))]
        out.append(Encoded(seq, pool, truncated=len(ids) > max_length - 1))
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
