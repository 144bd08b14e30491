"""Training objectives: the registry of loss names, loss expressions, and a batch's loss from its embeddings.

The trainer runs the model; this module takes the embeddings it returns and the batch's layout (which document
is whose positive, which pairs are not negatives) and gives the weighted loss. ``OBJECTIVES`` is the one list of
loss names: ``TrainConfig`` validates against it and the CLI's help reads it.

A loss expression is a sum of weighted names: ``"infonce"``, ``"infonce+0.5*bce"``. ``"hybrid"`` trains the
lexicon for the hybrid index it will serve in: InfoNCE over ``w_lex cos_lex + w_dense cos_dense``, the dense cosines
from a frozen peer (MiniLM), so the lexicon learns what the dense side misses (as CLEAR trains a residual to BM25). ``"bm25"`` distils BM25: the KL divergence from BM25's softmax over each query's
candidates (its scores divided by the row's highest, at temperature ``BM25_TEACHER_TEMPERATURE``) to the lexicon's,
so the lexicon learns the exact match BM25 ranks by (issue 39: out of domain the lexicon lost to BM25).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from lens.train import losses as L

__all__ = ["BM25_TEACHER_TEMPERATURE", "BatchLayout", "OBJECTIVES", "Objective", "batch_layout", "needs_bm25",
           "needs_dense", "parse_loss"]

# The bm25 loss's teacher: softmax(score / row max / this). 0.05 spreads a row's best and a document with a third of
# its score by ~13 logits, about what the student's cosines / 0.02 spread a positive and a hard negative.
BM25_TEACHER_TEMPERATURE = 0.05


@dataclass
class BatchLayout:
    """Where each query's candidates sit among the batch's documents."""

    doc_texts: list[str]  # every query's positive then its hard negatives, query after query
    positive_index: list[int]  # column of query i's positive
    counts: list[int]  # 1 + hard negatives of query i (its own block of columns)
    valid: list[list[bool]]  # (B, D): False where a column is a copy of query i's positive (not a negative)


def batch_layout(examples: Sequence, negatives: Callable[[object], list[str]]) -> BatchLayout:
    """The columns of a batch: each example's positive and ``negatives(example)``; a copy of query i's positive
    elsewhere in the batch (a label description, a repeated paragraph) is masked, never counted as a negative."""
    doc_texts: list[str] = []
    positive_index, counts = [], []
    for e in examples:
        negs = negatives(e)
        positive_index.append(len(doc_texts))
        doc_texts += [e.positive, *negs]
        counts.append(1 + len(negs))
    valid = [[doc_texts[j] != e.positive or j == positive_index[i] for j in range(len(doc_texts))]
             for i, e in enumerate(examples)]
    return BatchLayout(doc_texts, positive_index, counts, valid)


@dataclass
class LossInputs:
    """Everything a loss term may read: embeddings, cosine scores, the layout, the examples, the settings."""

    q: Tensor  # (B, K) query vectors (unnormalised)
    d: Tensor  # (D, K) document vectors
    scores: Tensor  # (B, D) cosine similarities
    positive_index: Tensor  # (B,)
    valid: Tensor  # (B, D) bool
    layout: BatchLayout
    examples: Sequence
    temperature: float
    bce_scale: float
    graded_floor: float
    bias: Tensor  # the learned BCE logit bias
    teacher_center: float  # bce-teacher: a teacher cosine c is the probability sigmoid((c - center) / width)
    teacher_width: float
    dense_scores: Tensor | None = None  # (B, D) a frozen dense peer's cosines (the ``hybrid`` loss)
    hybrid_weights: tuple[float, float] = (0.5, 0.5)  # (w_lex, w_dense) of the hybrid score
    own_q: Tensor | None = None  # (B, K) bool: the clusters of each query's pooled tokens (the ``exact`` loss)
    own_d: Tensor | None = None  # (D, K) bool: the same for each document
    bm25_scores: Tensor | None = None  # (B, D) BM25's scores of the bare queries (the ``bm25`` loss)


def _infonce(x: LossInputs) -> Tensor:
    return L.info_nce(x.scores, x.positive_index, x.temperature, x.valid)


def _hybrid(x: LossInputs) -> Tensor:
    w_lex, w_dense = x.hybrid_weights  # dense_scores is set: Objective refuses a hybrid loss without a peer
    fused = w_lex * x.scores + w_dense * x.dense_scores.to(x.scores.dtype)
    return L.info_nce(fused, x.positive_index, x.temperature, x.valid)


def _gte(x: LossInputs) -> Tensor:
    return L.improved_info_nce(x.q, x.d, x.positive_index, x.temperature, x.valid)


def _bce(x: LossInputs, graded: bool = False) -> Tensor:
    labels = max_label = None
    if graded:
        max_label = x.examples[0].max_score or 1.0
        labels = torch.tensor([e.score if e.score is not None else max_label for e in x.examples],
                              device=x.positive_index.device)  # index_put_ into targets on that device
    targets = L.binary_targets(x.positive_index, len(x.layout.doc_texts), labels, max_label, x.graded_floor)
    return L.pairwise_bce(x.scores, targets.to(x.scores.device), x.bce_scale, x.bias, x.valid)


def _teacher_blocks(x: LossInputs, name: str):
    """(row, its columns [positive, hard negatives...], the teacher's scores for them) per query."""
    if any(e.teacher is None for e in x.examples):
        raise ValueError(f"loss {name!r} needs teacher scores on every example of its stage: add them with "
                         "`lens data teacher FILE --out SCORED`")
    for i, (e, start, n) in enumerate(zip(x.examples, x.layout.positive_index, x.layout.counts)):
        yield i, slice(start, start + n), torch.tensor(e.teacher[:n])


def _bce_teacher(x: LossInputs) -> Tensor:
    targets = torch.zeros_like(x.scores, dtype=torch.float32)
    for i, cols, teacher in _teacher_blocks(x, "bce-teacher"):
        labels = torch.zeros_like(teacher)
        labels[0] = 1.0  # the block's first column is the positive
        targets[i, cols] = L.teacher_targets(teacher, labels, x.teacher_center, x.teacher_width,
                                             x.graded_floor).to(targets.device)
    return L.pairwise_bce(x.scores, targets, x.bce_scale, x.bias, x.valid)


def _kl(x: LossInputs) -> Tensor:
    teacher = torch.zeros_like(x.scores)
    own = torch.zeros_like(x.valid)
    for i, cols, scores in _teacher_blocks(x, "kl"):
        teacher[i, cols] = scores.to(teacher.dtype)
        own[i, cols] = True
    return L.kl_distillation(x.scores, teacher, x.temperature, valid=own)


def _bm25(x: LossInputs) -> Tensor:
    # bm25_scores is set: Objective refuses a bm25 loss without a scorer
    teacher = x.bm25_scores.to(torch.float32)
    top = teacher.masked_fill(~x.valid, 0.0).amax(dim=1, keepdim=True)
    rows = top[:, 0] > 0  # a query sharing no term with any candidate has no BM25 ranking to teach
    if not bool(rows.any()):
        return x.scores.sum() * 0.0
    return L.kl_distillation(x.scores[rows], (teacher / top.clamp_min(1e-12))[rows], x.temperature,
                             BM25_TEACHER_TEMPERATURE, valid=x.valid[rows])


def _flops(x: LossInputs) -> Tensor:
    return L.flops(x.q) + L.flops(x.d)


def _exact(x: LossInputs) -> Tensor:
    # own_q/own_d are set: Objective refuses an exact loss without the batch's token clusters
    return (L.exact_match(x.q, x.own_q) + L.exact_match(x.d, x.own_d)) / 2


# name -> loss from LossInputs. Every name here is accepted in a loss expression.
OBJECTIVES: dict[str, Callable[[LossInputs], Tensor]] = {
    "infonce": _infonce,  # cosine / temperature over the positive, hard and in-batch negatives
    "hybrid": _hybrid,  # InfoNCE over the hybrid score w_lex cos_lex + w_dense cos_dense (the dense peer frozen)
    "gte": _gte,  # GTE's improved contrastive loss (adds query-query and document-document negatives)
    "bce": _bce,  # SigLIP-style pointwise sigmoid loss with a learned bias
    "bce-graded": lambda x: _bce(x, graded=True),  # BiXSE: targets from graded labels
    "bce-teacher": _bce_teacher,  # BiXSE with a teacher's grades: positive and hard negatives get soft targets
    "kl": _kl,  # distillation from teacher scores
    "bm25": _bm25,  # distillation from BM25's in-batch ranking (exact match)
    "flops": _flops,  # sparsity: SPLADE's FLOPS regulariser on the unit query and document vectors (add it: infonce+0.5*flops)
    "exact": _exact,  # lexicality: each vector's share of weight off its own tokens' clusters (infonce+exact)
}
USES_BIAS = ("bce", "bce-graded", "bce-teacher")
USES_DENSE = ("hybrid",)
USES_BM25 = ("bm25",)
USES_OWN = ("exact",)  # losses that read the clusters of each text's own tokens
PairScores = Callable[[list[str], list[str]], np.ndarray]  # (query texts, document texts) -> (B, D) scores
DenseCosines = PairScores


def parse_loss(expression: str, where: str = "loss") -> dict[str, float]:
    """``"infonce+0.5*bce"`` -> ``{"infonce": 1.0, "bce": 0.5}``; errors list the valid names."""
    weights: dict[str, float] = {}
    for term in expression.replace(" ", "").split("+"):
        weight, _, name = term.rpartition("*")
        if not name:
            raise ValueError(f"{where}: {expression!r} has a term without a loss name ({term!r}); write each term as "
                             "NAME or WEIGHT*NAME, e.g. infonce+0.5*bce")
        if name not in OBJECTIVES:
            raise ValueError(f"{where}: unknown loss {name!r}; choose from {', '.join(OBJECTIVES)} "
                             "or a sum such as infonce+0.5*bce")
        try:
            weights[name] = float(weight) if weight else 1.0
        except ValueError:
            raise ValueError(f"{where}: bad loss weight in {term!r}") from None
    return weights


def needs_dense(weights: dict[str, float]) -> bool:
    """Whether a loss (``parse_loss``'s weights) scores with a dense peer, so the trainer must build one."""
    return any(n in USES_DENSE for n in weights)


def needs_bm25(weights: dict[str, float]) -> bool:
    """Whether a loss scores with BM25, so the trainer must index its documents."""
    return any(n in USES_BM25 for n in weights)


class Objective:
    """A weighted sum of registered losses, evaluated on a batch's embeddings."""

    def __init__(self, expression: str | dict[str, float], *, temperature: float, bce_scale: float,
                 graded_floor: float, teacher_center: float = L.TEACHER_CENTER,
                 teacher_width: float = L.TEACHER_WIDTH, dense: DenseCosines | None = None,
                 hybrid_weights: tuple[float, float] = (0.5, 0.5), bm25: PairScores | None = None):
        self.weights = parse_loss(expression) if isinstance(expression, str) else dict(expression)
        self.temperature, self.bce_scale, self.graded_floor = temperature, bce_scale, graded_floor
        self.teacher_center, self.teacher_width = teacher_center, teacher_width
        self.dense, self.hybrid_weights = dense, tuple(hybrid_weights)
        if self.uses_dense and dense is None:
            raise ValueError(f"loss {expression!r} needs a dense peer (the trainer builds it from hybrid_peer)")
        self.bm25 = bm25
        if self.uses_bm25 and bm25 is None:
            raise ValueError(f"loss {expression!r} needs BM25 scores (the trainer indexes its documents)")

    @property
    def uses_bias(self) -> bool:
        return any(n in USES_BIAS for n in self.weights)

    @property
    def uses_dense(self) -> bool:
        return needs_dense(self.weights)

    @property
    def uses_bm25(self) -> bool:
        return needs_bm25(self.weights)

    @property
    def uses_own(self) -> bool:
        return any(n in USES_OWN for n in self.weights)

    def __call__(self, q: Tensor, d: Tensor, layout: BatchLayout, examples: Sequence, bias: Tensor,
                 own: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, dict[str, float]]:
        """The weighted loss and each term's value. The dense peer sees the bare queries (no instruction), as in
        the hybrid index. ``own``: (queries', documents') bool masks of their own tokens' clusters, for ``exact``."""
        if self.uses_own and own is None:
            raise ValueError("the exact loss needs each text's own token clusters (the trainer passes them)")
        dense = self._pair_scores(self.dense, "the dense peer", examples, layout, q.device) if self.uses_dense else None
        bm25 = self._pair_scores(self.bm25, "BM25", examples, layout, q.device) if self.uses_bm25 else None
        x = LossInputs(q, d, L.cosine_scores(q, d), torch.tensor(layout.positive_index, device=q.device),
                       torch.tensor(layout.valid, device=q.device), layout, examples, self.temperature,
                       self.bce_scale, self.graded_floor, bias, self.teacher_center, self.teacher_width,
                       dense, self.hybrid_weights, *(own or (None, None)), bm25)
        terms = {name: OBJECTIVES[name](x) for name in self.weights}
        loss = sum(self.weights[n] * t for n, t in terms.items())
        return loss, {n: float(t.detach()) for n, t in terms.items()}

    @staticmethod
    def _pair_scores(scorer: PairScores, what: str, examples: Sequence, layout: BatchLayout, device) -> Tensor:
        scores = torch.as_tensor(np.asarray(scorer([e.query for e in examples], layout.doc_texts), dtype=np.float32),
                                 device=device)
        if scores.shape != (len(examples), len(layout.doc_texts)):
            raise ValueError(f"{what} gave scores of shape {tuple(scores.shape)}; expected "
                             f"{(len(examples), len(layout.doc_texts))}")
        return scores
