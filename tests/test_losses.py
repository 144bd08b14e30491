"""Losses against hand-computed values and naive loop references."""

from __future__ import annotations

import math

import pytest
import torch

from lens.train.losses import (
    teacher_targets,
    binary_targets,
    cosine_scores,
    graded_targets,
    improved_info_nce,
    info_nce,
    fitted_bias,
    initial_bias,
    kl_distillation,
    pairwise_bce,
)


def _rand(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def _cos(a, b):
    return float(a @ b) / (float(a.norm()) * float(b.norm()))


def _log_sigmoid(x):
    return -math.log1p(math.exp(-x))


def naive_info_nce(scores, pos, t, valid=None):
    B, D = scores.shape
    total = 0.0
    for i in range(B):
        cols = [j for j in range(D) if j == pos[i] or valid is None or valid[i][j]]
        z = sum(math.exp(float(scores[i, j]) / t) for j in cols)
        total += -(float(scores[i, pos[i]]) / t - math.log(z))
    return total / B


def naive_improved(q, d, pos, t, valid=None):
    B, D = q.shape[0], d.shape[0]
    ok = [[valid is None or bool(valid[i][j]) or j == pos[i] for j in range(D)] for i in range(B)]
    total = 0.0
    for i in range(B):
        p = pos[i]
        terms = [_cos(q[i], d[j]) for j in range(D) if ok[i][j]]
        terms += [_cos(q[i], q[j]) for j in range(B) if j != i]
        terms += [_cos(q[j], d[p]) for j in range(B) if pos[j] != p and ok[j][p]]
        terms += [_cos(d[p], d[j]) for j in range(D) if j != p and ok[i][j]]
        z = sum(math.exp(s / t) for s in terms)
        total += math.log(z) - _cos(q[i], d[p]) / t
    return total / B


def naive_bce(scores, targets, scale, bias, valid=None):
    B, D = scores.shape
    total = 0.0
    for i in range(B):
        for j in range(D):
            if valid is not None and not valid[i][j]:
                continue
            x, y = scale * float(scores[i, j]) + bias, float(targets[i, j])
            total += -(y * _log_sigmoid(x) + (1 - y) * _log_sigmoid(-x))
    return total / B


# --- cosine ---------------------------------------------------------------------------------------------------

def test_cosine_scores_values_and_zero_row():
    q = torch.tensor([[3.0, 4.0], [0.0, 0.0]])
    d = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    s = cosine_scores(q, d)
    assert torch.allclose(s, torch.tensor([[0.6, 0.8], [0.0, 0.0]]))
    with pytest.raises(ValueError, match="hidden size"):
        cosine_scores(q, torch.ones(2, 3))


# --- info_nce -------------------------------------------------------------------------------------------------

def test_info_nce_hand_2x3():
    scores = torch.tensor([[1.0, 0.5, -1.0], [0.2, 0.3, 0.9]])
    pos = torch.tensor([0, 2])
    row0 = -(1.0 - math.log(math.exp(1.0) + math.exp(0.5) + math.exp(-1.0)))
    row1 = -(0.9 - math.log(math.exp(0.2) + math.exp(0.3) + math.exp(0.9)))
    assert info_nce(scores, pos, temperature=1.0).item() == pytest.approx((row0 + row1) / 2, rel=1e-6)


def test_info_nce_matches_naive_and_mask_deletes_column():
    scores = torch.rand(5, 15, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 2 - 1
    pos = torch.tensor([0, 3, 7, 7, 14])
    assert info_nce(scores, pos, 0.02).item() == pytest.approx(naive_info_nce(scores, pos.tolist(), 0.02), rel=1e-9)
    valid = torch.ones(5, 15, dtype=torch.bool)
    valid[:, 5] = False
    keep = [j for j in range(15) if j != 5]
    pos_kept = torch.tensor([keep.index(p) for p in pos.tolist()])
    got = info_nce(scores, pos, 0.02, valid=valid).item()
    assert got == pytest.approx(info_nce(scores[:, keep], pos_kept, 0.02).item(), rel=1e-9)
    # the positive is never masked
    valid[1, 3] = False
    assert info_nce(scores, pos, 0.02, valid=valid).item() == pytest.approx(got, rel=1e-9)


# --- improved_info_nce ----------------------------------------------------------------------------------------

def test_improved_info_nce_matches_naive():
    q, d = _rand(4, 8, seed=2), _rand(10, 8, seed=3)
    pos = [0, 1, 2, 2]  # a shared positive: q_3 vs d_2 is not a negative for q_2
    valid = torch.rand(4, 10, generator=torch.Generator().manual_seed(4)) > 0.3
    for t in (0.05, 0.5):
        for v in (None, valid):
            got = improved_info_nce(q, d, torch.tensor(pos), t, valid=v).item()
            want = naive_improved(q, d, pos, t, None if v is None else v.tolist())
            assert got == pytest.approx(want, rel=1e-9)


def test_improved_info_nce_reduces_to_info_nce_when_other_pairs_are_far():
    # q_i = u_i, positive u_i + 2 v_i, hard negative u_i - v_i (orthonormal u, v): q-q and cross pairs score 0,
    # the positive and its hard negative score -0.32, while q-d scores are 0.45 and 0.71.
    B = 3
    basis = torch.eye(2 * B, dtype=torch.float64)
    u, v = basis[:B], basis[B:]
    q = u
    d = torch.cat([u + 2 * v, u - v])
    pos = torch.arange(B)
    got = improved_info_nce(q, d, pos, 0.02).item()
    want = info_nce(cosine_scores(q, d), pos, 0.02).item()
    assert want > 1.0
    assert got == pytest.approx(want, rel=1e-9)
    assert got >= want  # the extra terms only add to the partition


# --- targets --------------------------------------------------------------------------------------------------

def test_graded_targets_hand_values_and_errors():
    z = graded_targets(torch.tensor([0.0, 3.0, 1.5]), max_label=3, floor=0.7)
    assert torch.allclose(z, torch.tensor([0.0, 1.0, 0.85]))
    with pytest.raises(ValueError, match="max_label"):
        graded_targets(torch.tensor([1.0]), max_label=0)
    with pytest.raises(ValueError, match="floor"):
        graded_targets(torch.tensor([1.0]), max_label=3, floor=1.5)


def test_teacher_targets_against_the_formula_and_errors():
    teacher = torch.tensor([[0.9, 0.5, 0.1], [0.2, 0.6, 0.5]])
    labels = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    got = teacher_targets(teacher, labels, center=0.5, width=0.1, floor=0.7)
    for i in range(2):
        for j in range(3):
            p = 1 / (1 + math.exp(-(float(teacher[i, j]) - 0.5) / 0.1))
            assert float(got[i, j]) == pytest.approx(0.7 * float(labels[i, j]) + 0.3 * p, abs=1e-6)
    assert float(got[0, 1]) == pytest.approx(0.15)  # a negative as close as the centre: half its share
    assert bool((got[labels == 1] >= 0.7).all()) and bool((got[labels == 0] <= 0.3).all())
    with pytest.raises(ValueError, match="width"):
        teacher_targets(teacher, labels, width=0.0)
    with pytest.raises(ValueError, match="floor"):
        teacher_targets(teacher, labels, floor=-0.1)
    with pytest.raises(ValueError, match="shape"):
        teacher_targets(teacher, labels[:, :2])


def test_binary_targets():
    t = binary_targets(torch.tensor([2, 0]), 3)
    assert torch.equal(t, torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]))
    g = binary_targets(torch.tensor([2, 0, 1]), 3, labels=torch.tensor([2, 0, 1]), max_label=2)
    assert torch.allclose(g, torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 0.85, 0.0]]))
    with pytest.raises(ValueError, match="max_label"):
        binary_targets(torch.tensor([0]), 3, labels=torch.tensor([1]))
    with pytest.raises(ValueError, match="positive_index"):
        binary_targets(torch.tensor([3]), 3)


# --- pairwise_bce ---------------------------------------------------------------------------------------------

def test_pairwise_bce_hand_1x2():
    scores = torch.tensor([[0.5, -0.2]])
    targets = torch.tensor([[1.0, 0.0]])
    x0, x1 = 10 * 0.5 - 1.0, 10 * -0.2 - 1.0
    want = -math.log(1 / (1 + math.exp(-x0))) - math.log(1 - 1 / (1 + math.exp(-x1)))
    assert pairwise_bce(scores, targets, scale=10.0, bias=-1.0).item() == pytest.approx(want, rel=1e-6)


def test_pairwise_bce_matches_naive_and_masking():
    scores = torch.tanh(_rand(4, 6, seed=5))
    targets = torch.rand(4, 6, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    got = pairwise_bce(scores, targets, scale=20.0, bias=-2.0).item()
    assert got == pytest.approx(naive_bce(scores, targets, 20.0, -2.0), rel=1e-9)
    valid = torch.ones(4, 6, dtype=torch.bool)
    valid[:, 4] = False
    valid[2, 1] = False
    got = pairwise_bce(scores, targets, 20.0, torch.tensor(-2.0, dtype=torch.float64), valid=valid).item()
    assert got == pytest.approx(naive_bce(scores, targets, 20.0, -2.0, valid.tolist()), rel=1e-9)
    keep = [0, 1, 2, 3, 5]
    cols = pairwise_bce(scores[:, keep], targets[:, keep], 20.0, -2.0, valid=valid[:, keep]).item()
    assert cols == pytest.approx(got, rel=1e-9)


def test_initial_bias():
    assert initial_bias(8) == pytest.approx(-math.log(7))
    with pytest.raises(ValueError, match="num_candidates"):
        initial_bias(1)


def test_fitted_bias_centres_the_mean_valid_cell_on_siglips_logit():
    scores = 0.4 + 0.3 * _rand(3, 5, seed=11)  # non-negative vectors: every pair well above cosine 0
    valid = torch.ones(3, 5, dtype=torch.bool)
    valid[0, 4] = valid[2, 1] = False
    cells = [scores[i, j].item() for i in range(3) for j in range(5) if valid[i, j]]
    want = -math.log(7) - 20.0 * sum(cells) / len(cells)
    got = fitted_bias(8, scores, 20.0, valid)
    assert got == pytest.approx(want, rel=1e-9)
    assert sum(20.0 * c + got for c in cells) / len(cells) == pytest.approx(initial_bias(8), abs=1e-9)
    assert fitted_bias(8, torch.zeros(2, 3)) == pytest.approx(initial_bias(8))  # cosines at 0: SigLIP's start
    with pytest.raises(ValueError, match="no valid cell"):
        fitted_bias(8, scores, 20.0, torch.zeros(3, 5, dtype=torch.bool))


# --- kl_distillation ------------------------------------------------------------------------------------------

def test_kl_distillation_zero_hand_and_positive():
    s = _rand(3, 5, seed=7)
    assert kl_distillation(s, s.clone(), temperature=0.5, teacher_temperature=0.5).item() == pytest.approx(0, abs=1e-12)
    student, teacher = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 2.0]])
    p = [1 / (1 + math.exp(2)), 1 / (1 + math.exp(-2))]
    q = [1 / (1 + math.exp(-1)), 1 / (1 + math.exp(1))]
    want = sum(pi * math.log(pi / qi) for pi, qi in zip(p, q))
    assert kl_distillation(student, teacher, 1.0, 1.0).item() == pytest.approx(want, rel=1e-6)
    assert kl_distillation(s, _rand(3, 5, seed=8), 0.02, 1.0).item() > 0


def test_kl_distillation_mask_deletes_column():
    s, t = _rand(3, 5, seed=9), _rand(3, 5, seed=10)
    valid = torch.ones(3, 5, dtype=torch.bool)
    valid[:, 1] = False
    keep = [0, 2, 3, 4]
    got = kl_distillation(s, t, 0.1, 0.5, valid=valid).item()
    assert math.isfinite(got)
    assert got == pytest.approx(kl_distillation(s[:, keep], t[:, keep], 0.1, 0.5).item(), rel=1e-9)
    with pytest.raises(ValueError, match="at least one"):
        kl_distillation(s, t, valid=torch.zeros(3, 5, dtype=torch.bool))


# --- gradients and validation ---------------------------------------------------------------------------------

def _grad_ok(x):
    return x.grad is not None and bool(torch.isfinite(x.grad).all()) and bool(x.grad.abs().sum() > 0)


def test_gradients_flow():
    pos = torch.tensor([0, 2, 1])
    valid = torch.ones(3, 5, dtype=torch.bool)
    valid[0, 3] = False
    losses = [
        lambda s: info_nce(s, pos, 0.05, valid=valid),
        lambda s: pairwise_bce(s, binary_targets(pos, 5), 20.0, initial_bias(5), valid=valid),
        lambda s: kl_distillation(s, _rand(3, 5, seed=11), 0.05, 1.0, valid=valid),
    ]
    for loss_fn in losses:
        s = torch.tanh(_rand(3, 5, seed=12)).requires_grad_()
        loss_fn(s).backward()
        assert _grad_ok(s)
    q, d = _rand(3, 4, seed=13).requires_grad_(), _rand(5, 4, seed=14).requires_grad_()
    improved_info_nce(q, d, pos, 0.05, valid=valid).backward()
    assert _grad_ok(q) and _grad_ok(d)


def test_float32_and_bfloat16_inputs():
    s = torch.tanh(_rand(2, 4, seed=15)).to(torch.bfloat16)
    out = info_nce(s, torch.tensor([0, 1]))
    assert out.dtype == torch.float32 and torch.isfinite(out)


def test_validation_errors():
    s = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="2-D"):
        info_nce(torch.zeros(3), torch.tensor([0]))
    with pytest.raises(ValueError, match="positive_index"):
        info_nce(s, torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="positive_index"):
        info_nce(s, torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="temperature"):
        info_nce(s, torch.tensor([0, 1]), temperature=0.0)
    with pytest.raises(ValueError, match="valid"):
        info_nce(s, torch.tensor([0, 1]), valid=torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="temperature"):
        improved_info_nce(torch.ones(2, 4), torch.ones(3, 4), torch.tensor([0, 1]), temperature=-1)
    with pytest.raises(ValueError, match="positive_index"):
        improved_info_nce(torch.ones(2, 4), torch.ones(3, 4), torch.tensor([0, 5]))
    with pytest.raises(ValueError, match="targets"):
        pairwise_bce(s, torch.zeros(2, 2))
    with pytest.raises(ValueError, match="teacher_scores"):
        kl_distillation(s, torch.zeros(3, 2))
    with pytest.raises(ValueError, match="teacher_temperature"):
        kl_distillation(s, s, teacher_temperature=0)


def test_flops_matches_naive_and_is_scale_free():
    from lens.train.losses import flops

    g = torch.Generator().manual_seed(0)
    w = torch.rand(5, 7, generator=g)
    unit = [[v / math.sqrt(sum(x * x for x in row)) for v in row] for row in w.tolist()]
    naive = sum((sum(unit[i][j] for i in range(5)) / 5) ** 2 for j in range(7))
    assert float(flops(w)) == pytest.approx(naive, rel=1e-6)
    assert float(flops(3.0 * w)) == pytest.approx(naive, rel=1e-6)  # a cosine loss cannot dodge it by scaling
    assert float(flops(torch.eye(4))) == pytest.approx(1 / 4)  # one-hot on distinct dimensions: the minimum 1/N
    assert float(flops(torch.ones(4, 9))) == pytest.approx(1.0)  # every row even over every dimension: the maximum
    with pytest.raises(ValueError, match="2-D"):
        flops(torch.ones(3))


def test_flops_objective_trains_towards_sparse_vectors():
    from lens.train.objectives import Objective, batch_layout
    from lens.train.data import TrainExample

    examples = [TrainExample(f"q{i}", f"p{i}") for i in range(3)]
    layout = batch_layout(examples, lambda e: [])
    q = torch.rand(3, 6, requires_grad=True)
    d = torch.rand(3, 6, requires_grad=True)
    loss, terms = Objective("infonce+0.5*flops", temperature=0.05, bce_scale=20.0, graded_floor=0.7)(
        q, d, layout, examples, torch.zeros(()))
    assert set(terms) == {"infonce", "flops"} and float(loss.detach()) == pytest.approx(terms["infonce"] + 0.5 * terms["flops"])
    loss.backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()
