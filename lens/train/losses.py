"""Contrastive, sigmoid and distillation losses for fine-tuning, as pure functions over tensors.

Shapes: B queries, D candidate documents (in-batch positives plus hard negatives), H hidden size. Query ``i``'s
positive is column ``positive_index[i]``; every other column is a negative unless ``valid[i, j]`` is False
(e.g. a duplicate of the positive, or an unlabelled relevant document). A positive is never masked. Every loss
returns a scalar mean over queries and is computed in at least float32, whatever the input dtype.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "binary_targets", "cosine_scores", "exact_match", "fitted_bias", "flops", "graded_targets", "improved_info_nce",
    "info_nce", "initial_bias", "kl_distillation", "mask_tokens", "masked_next_token_loss", "pairwise_bce",
    "teacher_targets",
]

IGNORE = -100  # a target position that no loss counts (PyTorch's cross-entropy convention)


def _float(x: Tensor) -> Tensor:
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def _check_matrix(x: Tensor, name: str) -> None:
    if x.dim() != 2:
        raise ValueError(f"{name} must be 2-D, got shape {tuple(x.shape)}")


def _check_temperature(t: float, name: str = "temperature") -> None:
    if not t > 0:
        raise ValueError(f"{name} must be > 0, got {t}")


def _check_index(positive_index: Tensor, B: int, D: int) -> None:
    if positive_index.shape != (B,):
        raise ValueError(f"positive_index must have shape ({B},), got {tuple(positive_index.shape)}")
    if B and (int(positive_index.min()) < 0 or int(positive_index.max()) >= D):
        raise ValueError(f"positive_index must lie in [0, {D}), got values in "
                         f"[{int(positive_index.min())}, {int(positive_index.max())}]")


def _mask(valid: Tensor | None, shape: tuple[int, int], device: torch.device) -> Tensor:
    """``valid`` as a bool (B, D) mask, all True when None."""
    if valid is None:
        return torch.ones(shape, dtype=torch.bool, device=device)
    if tuple(valid.shape) != shape:
        raise ValueError(f"valid must have shape {shape}, got {tuple(valid.shape)}")
    return valid.bool()


def _keep_positives(mask: Tensor, positive_index: Tensor) -> Tensor:
    """``mask`` with each row's positive column forced True."""
    rows = torch.arange(mask.shape[0], device=mask.device)
    out = mask.clone()
    out[rows, positive_index] = True
    return out


def cosine_scores(q: Tensor, d: Tensor, eps: float = 1e-12) -> Tensor:
    """Cosine similarities (B, D) of rows of ``q`` (B, H) and ``d`` (D, H); a zero row scores 0, not NaN."""
    _check_matrix(q, "q")
    _check_matrix(d, "d")
    if q.shape[1] != d.shape[1]:
        raise ValueError(f"q and d must share the hidden size, got {q.shape[1]} and {d.shape[1]}")
    return F.normalize(_float(q), dim=-1, eps=eps) @ F.normalize(_float(d), dim=-1, eps=eps).t()


def info_nce(scores: Tensor, positive_index: Tensor, temperature: float = 0.02,
             valid: Tensor | None = None) -> Tensor:
    """Cross-entropy of ``scores / temperature`` (B, D) against ``positive_index`` (B,).

    Every other column is a negative; cells with ``valid`` (B, D) False are dropped (set to -inf), the positive
    always kept.
    """
    _check_matrix(scores, "scores")
    _check_temperature(temperature)
    B, D = scores.shape
    _check_index(positive_index, B, D)
    keep = _keep_positives(_mask(valid, (B, D), scores.device), positive_index)
    logits = (_float(scores) / temperature).masked_fill(~keep, float("-inf"))
    return F.cross_entropy(logits, positive_index)


def improved_info_nce(q_emb: Tensor, d_emb: Tensor, positive_index: Tensor, temperature: float = 0.02,
                      valid: Tensor | None = None) -> Tensor:
    """GTE's improved contrastive loss (Li et al. 2023): queries (B, H), documents (D, H), positives (B,).

    With s the cosine over ``temperature`` and p = ``positive_index[i]``, query i's loss is
    ``log Z_i - s(q_i, d_p)`` where Z_i sums exp of:

    1. s(q_i, d_j) for every document j with ``valid[i, j]`` (the numerator included; the positive never masked);
    2. s(q_i, q_j) for every query j != i;
    3. s(q_j, d_p) for every query j whose own positive is not d_p (so j != i) and with ``valid[j, p]``;
    4. s(d_p, d_j) for every document j != p with ``valid[i, j]`` (a document that must not be a negative for
       q_i, e.g. a duplicate of d_p, is not pushed away from d_p either).
    """
    scores = cosine_scores(q_emb, d_emb)  # (B, D)
    _check_temperature(temperature)
    B, D = scores.shape
    _check_index(positive_index, B, D)
    keep = _keep_positives(_mask(valid, (B, D), scores.device), positive_index)
    rows = torch.arange(B, device=scores.device)
    neg_inf = float("-inf")

    qd = scores / temperature  # (B, D)
    qq = cosine_scores(q_emb, q_emb) / temperature  # (B, B)
    dpq = qd[:, positive_index].t()  # (B, B): [i, j] = s(q_j, d_{p_i})
    dd = cosine_scores(d_emb[positive_index], d_emb) / temperature  # (B, D): [i, j] = s(d_{p_i}, d_j)

    not_self = ~torch.eye(B, dtype=torch.bool, device=scores.device)
    other_pos = positive_index[None, :] != positive_index[:, None]  # [i, j]: p_j != p_i
    dd_keep = keep & (torch.arange(D, device=scores.device)[None, :] != positive_index[:, None])
    logits = torch.cat([
        qd.masked_fill(~keep, neg_inf),
        qq.masked_fill(~not_self, neg_inf),
        dpq.masked_fill(~(other_pos & keep[:, positive_index].t()), neg_inf),
        dd.masked_fill(~dd_keep, neg_inf),
    ], dim=1)
    return (torch.logsumexp(logits, dim=1) - qd[rows, positive_index]).mean()


def graded_targets(labels: Tensor, max_label: float, floor: float = 0.7) -> Tensor:
    """Soft targets ``floor + (1 - floor) * r / max_label`` for a grade r > 0, else 0 (BiXSE's graded targets).

    Any relevant document gets at least ``floor``, so a low grade is still a positive rather than a near-negative.
    """
    if not max_label > 0:
        raise ValueError(f"max_label must be > 0, got {max_label}")
    if not 0 <= floor <= 1:
        raise ValueError(f"floor must lie in [0, 1], got {floor}")
    r = _float(labels)
    if r.numel() and float(r.max()) > max_label:
        raise ValueError(f"labels must be <= max_label={max_label}, got {float(r.max())}")
    return torch.where(r > 0, floor + (1 - floor) * r / max_label, torch.zeros_like(r))


def binary_targets(positive_index: Tensor, num_docs: int, labels: Tensor | None = None,
                   max_label: float | None = None, floor: float = 0.7) -> Tensor:
    """Target matrix (B, D): row i is 0 except at ``positive_index[i]``, which is 1 or ``graded(labels[i])``."""
    if positive_index.dim() != 1:
        raise ValueError(f"positive_index must be 1-D, got shape {tuple(positive_index.shape)}")
    B = positive_index.shape[0]
    _check_index(positive_index, B, num_docs)
    if labels is None:
        values = torch.ones(B, device=positive_index.device)
    else:
        if max_label is None:
            raise ValueError("max_label is required when labels are given")
        if labels.shape != (B,):
            raise ValueError(f"labels must have shape ({B},), got {tuple(labels.shape)}")
        values = graded_targets(labels, max_label, floor)
    out = torch.zeros(B, num_docs, dtype=values.dtype, device=positive_index.device)
    out[torch.arange(B, device=out.device), positive_index] = values
    return out


# A teacher cosine becomes a probability around this centre and width (MiniLM's cosines: unrelated pairs ~0.1,
# relevant ones ~0.6); TrainConfig.teacher_center / teacher_width default to these.
TEACHER_CENTER, TEACHER_WIDTH = 0.5, 0.1


def teacher_targets(teacher: Tensor, labels: Tensor, center: float = TEACHER_CENTER, width: float = TEACHER_WIDTH,
                    floor: float = 0.7) -> Tensor:
    """Soft BCE targets blending a label (1 relevant, 0 not) with a teacher's cosine turned into a probability.

    ``p = sigmoid((teacher - center) / width)``; target ``floor * label + (1 - floor) * p``. A labelled positive
    lands in ``[floor, 1]`` and a mined negative in ``[0, 1 - floor]``: the teacher grades within each side (as
    BiXSE's graded labels do) but never turns a positive into a negative, so a false negative is pushed down
    less. Shapes of ``teacher`` and ``labels`` match; any shape.
    """
    if not width > 0:
        raise ValueError(f"width must be > 0, got {width}")
    if not 0 <= floor <= 1:
        raise ValueError(f"floor must lie in [0, 1], got {floor}")
    if teacher.shape != labels.shape:
        raise ValueError(f"teacher and labels must have one shape, got {tuple(teacher.shape)} and "
                         f"{tuple(labels.shape)}")
    p = torch.sigmoid((_float(teacher) - center) / width)
    return floor * _float(labels) + (1 - floor) * p


def initial_bias(num_candidates: int) -> float:
    """SigLIP's bias initialisation ``-log(N - 1)``: one positive among N candidates starts at balanced loss."""
    if num_candidates < 2:
        raise ValueError(f"num_candidates must be >= 2, got {num_candidates}")
    return -math.log(num_candidates - 1)


def fitted_bias(num_candidates: int, scores: Tensor, scale: float = 20.0, valid: Tensor | None = None) -> float:
    """``initial_bias(N)`` for cosines that do not start near 0: minus ``scale`` x the mean valid cosine of a first
    batch ``scores`` (B, D), so the average cell starts at SigLIP's balanced logit ``-log(N - 1)``.

    SigLIP's start assumes unrelated pairs near cosine 0. Non-negative vectors (a lexicon's ``log1p(relu)``) start
    with every pair well above 0, so with ``-log(N - 1)`` alone every negative starts as a confident positive and
    the BCE gradient swamps the other terms (the collapse of ``retrieval-only-bce-teacher`` in the training study).
    """
    _check_matrix(scores, "scores")
    keep = _mask(valid, tuple(scores.shape), scores.device)
    if not bool(keep.any()):
        raise ValueError("scores has no valid cell to fit the bias to")
    mean = float((_float(scores) * keep).sum() / keep.sum())
    return initial_bias(num_candidates) - float(scale) * mean


def pairwise_bce(scores: Tensor, targets: Tensor, scale: float | Tensor = 20.0, bias: float | Tensor = 0.0,
                 valid: Tensor | None = None) -> Tensor:
    """SigLIP-style sigmoid loss on cosines (B, D) with soft targets (B, D) in [0, 1].

    ``logits = scale * scores + bias``; binary cross-entropy summed over each row's valid cells, then averaged
    over rows (SigLIP's normalisation). Start ``bias`` at ``initial_bias(D)``, or at ``fitted_bias`` for
    vectors whose cosines do not start near 0.
    """
    _check_matrix(scores, "scores")
    if targets.shape != scores.shape:
        raise ValueError(f"targets must have the shape of scores {tuple(scores.shape)}, got {tuple(targets.shape)}")
    keep = _mask(valid, tuple(scores.shape), scores.device)
    logits = scale * _float(scores) + bias
    cells = F.binary_cross_entropy_with_logits(logits, targets.to(logits.dtype), reduction="none")
    return (cells * keep).sum(dim=1).mean()


def kl_distillation(student_scores: Tensor, teacher_scores: Tensor, temperature: float = 0.02,
                    teacher_temperature: float = 1.0, valid: Tensor | None = None) -> Tensor:
    """KL(teacher || student) over each row's candidates (B, D), averaged over rows.

    Teacher: ``softmax(teacher / teacher_temperature)``; student: ``log_softmax(student / temperature)``; cells
    with ``valid`` False are left out of both. Every row must keep at least one cell. The teacher is detached.
    """
    _check_matrix(student_scores, "student_scores")
    if teacher_scores.shape != student_scores.shape:
        raise ValueError(f"teacher_scores must have the shape of student_scores {tuple(student_scores.shape)}, "
                         f"got {tuple(teacher_scores.shape)}")
    _check_temperature(temperature)
    _check_temperature(teacher_temperature, "teacher_temperature")
    keep = _mask(valid, tuple(student_scores.shape), student_scores.device)
    if not bool(keep.any(dim=1).all()):
        raise ValueError("valid must keep at least one candidate in every row")
    student = _float(student_scores) / temperature
    teacher = _float(teacher_scores).detach() / teacher_temperature
    log_q = F.log_softmax(student.masked_fill(~keep, float("-inf")), dim=1)
    p = F.softmax(teacher.masked_fill(~keep, float("-inf")), dim=1)
    log_q = log_q.masked_fill(~keep, 0.0)  # p is 0 there: avoids 0 * -inf
    return F.kl_div(log_q, p.to(log_q.dtype), reduction="sum", log_target=False) / student.shape[0]


def flops(vectors: Tensor, eps: float = 1e-12) -> Tensor:
    """SPLADE's FLOPS regulariser, ``sum_j (mean_i |w_ij|)^2``, on L2-normalised rows (N, K).

    SPLADE penalises the raw weights; under a cosine loss that would only shrink every vector's norm, which the
    cosine ignores. On unit rows it is scale-free: 1 when every row spreads evenly over all K dimensions, 1/N when
    the N rows are one-hot on distinct dimensions, so it pushes each vector onto few dimensions that other vectors
    do not share (the dimensions common to every text carry no signal for ranking or similarity).
    """
    _check_matrix(vectors, "vectors")
    w = F.normalize(_float(vectors).abs(), dim=1, eps=eps)
    return (w.mean(dim=0) ** 2).sum()


def exact_match(vectors: Tensor, own: Tensor, eps: float = 1e-12) -> Tensor:
    """The share of each non-negative row's weight (N, K) that is *not* on its text's own dimensions ``own``
    (N, K bool: the clusters of the text's tokens), averaged over the rows: 0 when every vector sits on its own
    tokens (pure exact match), 1 when all of it is expansion. Added to a contrastive loss it keeps the lexicon
    lexical, as SPLADE's MLM start does (``lens bench lexicality`` measures the same share). A row with no weight
    counts 1 and passes no gradient."""
    _check_matrix(vectors, "vectors")
    if own.shape != vectors.shape:
        raise ValueError(f"own must match vectors' shape {tuple(vectors.shape)}, got {tuple(own.shape)}")
    v = _float(vectors)
    share = (v * own.to(v.dtype)).sum(dim=1) / (v.sum(dim=1) + eps)
    return (1.0 - share).mean()



# ------------------------------------------------------------------------------ masked next-token prediction
def mask_tokens(input_ids: Tensor, maskable: Tensor, rate: float, mask_id: int,
                generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """LLM2Vec's MNTP corruption: each ``maskable`` position is replaced by ``mask_id`` with probability ``rate``
    (at least one per row that has a maskable position). Returns (corrupted ids, targets): the original id where a
    token was masked, ``IGNORE`` elsewhere."""
    if not 0.0 < rate < 1.0:
        raise ValueError(f"mask rate must be in (0, 1), got {rate}")
    maskable = maskable.bool()
    draw = torch.rand(input_ids.shape, generator=generator, device=input_ids.device)
    masked = (draw < rate) & maskable
    # rows the draw left empty: mask their maskable position with the smallest draw
    empty = ~masked.any(dim=1) & maskable.any(dim=1)
    if empty.any():
        pick = draw.masked_fill(~maskable, 2.0).argmin(dim=1)
        masked[empty, pick[empty]] = True
    corrupted = input_ids.masked_fill(masked, mask_id)
    targets = input_ids.masked_fill(~masked, IGNORE)
    return corrupted, targets


def masked_next_token_loss(logits: Tensor, targets: Tensor, reduction: str = "mean") -> Tensor:
    """MNTP's loss (LLM2Vec): a masked token at position i is predicted by the logits at i - 1, as a causal LM
    predicts its next token (and as the lexicon reads a token's feature at its left neighbour). Cross-entropy over
    the classes of ``logits`` (B, L, C), averaged over the masked positions of ``targets`` (B, L; class ids, or
    ``IGNORE``); ``reduction="sum"`` sums them instead (0 when none: a slice of a batch split over processes)."""
    if logits.ndim != 3 or targets.shape != logits.shape[:2]:
        raise ValueError(f"expected logits (B, L, C) and targets (B, L), got {tuple(logits.shape)} and "
                         f"{tuple(targets.shape)}")
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    if reduction == "mean" and not (targets[:, 1:] != IGNORE).any():
        raise ValueError("no masked position after the first: nothing to predict")
    return F.cross_entropy(_float(logits[:, :-1]).reshape(-1, logits.shape[-1]), targets[:, 1:].reshape(-1),
                           ignore_index=IGNORE, reduction=reduction)
