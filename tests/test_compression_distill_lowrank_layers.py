"""course_lib.compression.distillation, .lowrank and .layers (notebook 05.3)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from course_lib import data, models, timing, train
from course_lib.compression import distillation, layers, lowrank
from course_lib.memory import meters

# ------------------------------------------------------------------------------------ distillation


def _logits(seed: int, batch: int = 6, classes: int = 5) -> torch.Tensor:
    return torch.randn(batch, classes, generator=torch.Generator().manual_seed(seed)) * 3


def test_distillation_loss_follows_the_documented_convention():
    s, t = _logits(0), _logits(1)
    y = torch.tensor([0, 1, 2, 3, 4, 0])
    for temp, alpha in ((1.0, 0.5), (4.0, 0.5), (2.0, 0.9), (3.0, 0.0), (4.0, 1.0)):
        p = torch.softmax(t / temp, -1)
        log_q = torch.log_softmax(s / temp, -1)
        kl = (p * (p.log() - log_q)).sum(-1).mean()  # KL(teacher || student), batch mean
        expected = alpha * temp**2 * kl + (1 - alpha) * F.cross_entropy(s, y)
        got = distillation.distillation_loss(s, t, y, temperature=temp, alpha=alpha)
        assert got.item() == pytest.approx(expected.item(), rel=1e-5)
    # alpha = 0 is plain cross-entropy; a student equal to its teacher pays no soft loss
    assert distillation.distillation_loss(s, t, y, alpha=0.0).item() == pytest.approx(F.cross_entropy(s, y).item())
    assert distillation.distillation_loss(t, t, y, alpha=1.0).item() == pytest.approx(0.0, abs=1e-6)


def test_gradients_reach_the_student_only():
    s, t = _logits(0).requires_grad_(), _logits(1).requires_grad_()
    distillation.distillation_loss(s, t, torch.zeros(6, dtype=torch.long)).backward()
    assert s.grad is not None and s.grad.abs().sum() > 0 and t.grad is None


def test_soft_targets_flatten_with_temperature():
    z = _logits(2)
    p1, p4 = distillation.soft_targets(z, 1.0), distillation.soft_targets(z, 4.0)
    assert torch.allclose(p1, torch.softmax(z, -1)) and torch.allclose(p4.sum(-1), torch.ones(6))
    assert (p4.max(-1).values < p1.max(-1).values).all()


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"temperature": 0.0}, ValueError),
        ({"temperature": -1.0}, ValueError),
        ({"alpha": 1.5}, ValueError),
        ({"alpha": -0.1}, ValueError),
        ({"temperature": "4"}, TypeError),
    ],
)
def test_distillation_bad_arguments(kwargs, error):
    s = _logits(0)
    with pytest.raises(error, match="temperature|alpha"):
        distillation.distillation_loss(s, s, torch.zeros(6, dtype=torch.long), **kwargs)
    with pytest.raises(error, match="temperature|alpha"):
        distillation.DistillationLoss(nn.Linear(2, 2), **kwargs)


def test_distillation_bad_inputs():
    s = _logits(0)
    with pytest.raises(ValueError, match="same shape"):
        distillation.distillation_loss(s, _logits(1, classes=4), torch.zeros(6, dtype=torch.long))
    with pytest.raises(ValueError, match="batch, classes"):
        distillation.distillation_loss(s[0], s[0], torch.zeros(1, dtype=torch.long))
    with pytest.raises(TypeError, match="teacher"):
        distillation.DistillationLoss("teacher")
    with pytest.raises(ValueError, match="field"):
        distillation.summary([], "accuracy")


def test_the_loss_object_runs_its_teacher_inside_the_shared_training_step():
    torch.manual_seed(0)
    teacher, student = models.MLP(8, 16, 3), models.MLP(8, 4, 3)
    teacher.train()
    calls = []
    teacher.register_forward_hook(lambda m, i, o: calls.append((m.training, torch.is_grad_enabled())))
    before = [p.detach().clone() for p in teacher.parameters()]
    start = models.MLP(8, 4, 3)
    start.load_state_dict(student.state_dict())
    loss_fn = distillation.DistillationLoss(teacher, temperature=2.0, alpha=0.7)
    assert loss_fn.wants_inputs is True
    x, y = torch.randn(10, 8), torch.randint(0, 3, (10,))
    opt = train.make_optimizer("sgd", student.parameters(), lr=0.1)
    result = train.train_step(student, (x, y), opt, loss_fn=loss_fn)
    expected = distillation.distillation_loss(student(x), teacher(x), y, 2.0, 0.7)  # after the step: differs
    assert calls[0] == (False, False), "the teacher runs in eval mode without gradients"
    assert all(torch.equal(a, b) for a, b in zip(before, teacher.parameters())), "the teacher is never updated"
    assert math.isfinite(result.loss) and result.loss != pytest.approx(expected.item(), rel=1e-9)
    # the step's loss is the documented one, computed before the update
    assert result.loss == pytest.approx(
        distillation.distillation_loss(start(x), teacher(x), y, 2.0, 0.7).item(), rel=1e-5
    )


def test_compare_students_reports_every_seed():
    full = data.load_digits(fraction=0.2)
    runs = distillation.compare_students(
        full, seeds=[0, 1], teacher_hidden=32, student_hidden=4, epochs=2, teacher_epochs=3
    )
    assert [r.seed for r in runs] == [0, 1]
    for r in runs:
        assert 0 <= r.alone_acc <= 1 and 0 <= r.distilled_acc <= 1 and r.gain == r.distilled_acc - r.alone_acc
        assert r.teacher_params == 64 * 32 + 32 + 32 * 10 + 10 and r.student_params == 64 * 4 + 4 + 4 * 10 + 10
    mean, spread = distillation.summary(runs, "gain")
    assert mean == pytest.approx((runs[0].gain + runs[1].gain) / 2) and spread >= 0
    with pytest.raises(TypeError, match="split"):
        distillation.compare_students(full.train)


def test_shuffled_batches_repeat_with_the_seed():
    ds = data.load_digits(fraction=0.1).train
    a = [y.tolist() for _, y in distillation.shuffled_batches(ds, 16, 3)]
    b = [y.tolist() for _, y in distillation.shuffled_batches(ds, 16, 3)]
    assert a == b and sum(len(x) for x in a) == len(ds) and len(a[0]) == 16


# ---------------------------------------------------------------------------------------- low rank


def _layer(out_f: int = 40, in_f: int = 24, seed: int = 0) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(in_f, out_f)


def test_factorised_layer_shapes_parameters_and_bias():
    layer = _layer()
    f = lowrank.factorize_linear(layer, rank=5)
    assert isinstance(f, lowrank.LowRankLinear) and f.rank == 5
    assert f[0].weight.shape == (5, 24) and f[0].bias is None and f[1].weight.shape == (40, 5)
    assert torch.equal(f[1].bias, layer.bias)
    assert sum(p.numel() for p in f.parameters()) == lowrank.lowrank_parameters(24, 40, 5) == 5 * 64 + 40
    assert lowrank.linear_parameters(24, 40) == sum(p.numel() for p in layer.parameters())
    x = torch.randn(7, 24)
    assert torch.allclose(f(x), x @ f.weight().T + layer.bias, atol=1e-5)


def test_measured_error_equals_eckart_young_and_full_rank_is_exact():
    layer = _layer()
    s = lowrank.singular_values(layer)
    assert torch.allclose(s, torch.linalg.svdvals(layer.weight.double()))
    for r in (1, 3, 10, 24):
        f = lowrank.factorize_linear(layer, rank=r)
        assert f.predicted_error == pytest.approx(lowrank.predicted_error(s, r))
        assert lowrank.measured_error(layer, f) == pytest.approx(f.predicted_error, abs=1e-6)
    assert lowrank.predicted_error(layer, 24) == 0.0
    # the truncated SVD beats any other rank-3 matrix, e.g. a random factorisation's best fit
    a = torch.randn(40, 3, dtype=torch.float64)
    w = layer.weight.detach().double()
    coef = torch.linalg.lstsq(a, w).solution
    other = torch.linalg.matrix_norm(w - a @ coef) / torch.linalg.matrix_norm(w)
    assert lowrank.predicted_error(layer, 3) < float(other)


def test_energy_picks_the_smallest_sufficient_rank():
    s = torch.tensor([3.0, 2.0, 1.0, 1.0])  # squares 9, 4, 1, 1: total 15
    assert lowrank.rank_for_energy(s, 0.6) == 1 and lowrank.rank_for_energy(s, 0.61) == 2
    assert lowrank.rank_for_energy(s, 13 / 15) == 2 and lowrank.rank_for_energy(s, 1.0) == 4
    layer = _layer()
    f = lowrank.factorize_linear(layer, energy=0.9)
    assert f.predicted_error <= math.sqrt(0.1) + 1e-12
    assert lowrank.predicted_error(layer, f.rank - 1) > math.sqrt(0.1)


def test_factorize_model_replaces_named_layers_of_a_copy():
    torch.manual_seed(0)
    m = models.MLP(16, [32, 32], 4)
    x = torch.randn(5, 16)
    f = lowrank.factorize_model(m, ["2"], rank=8)
    assert isinstance(f[2], lowrank.LowRankLinear) and isinstance(m[2], nn.Linear), "the original stays"
    assert isinstance(f[0], nn.Linear) and f[2].rank == 8
    full = lowrank.factorize_model(m, rank=100)  # capped at each layer's min(in, out): exact
    assert [full[i].rank for i in (0, 2, 4)] == [16, 32, 4]
    assert torch.allclose(full(x), m(x), atol=1e-5)
    nested = nn.Sequential(nn.Sequential(nn.Linear(8, 8)))
    assert isinstance(lowrank.factorize_model(nested, ["0.0"], rank=2)[0][0], lowrank.LowRankLinear)


def test_break_even_rank():
    assert lowrank.break_even_rank(256, 256) == 127
    assert lowrank.lowrank_parameters(256, 256, 127, bias=False) < 256 * 256
    assert lowrank.lowrank_parameters(256, 256, 128, bias=False) >= 256 * 256
    assert lowrank.break_even_rank(1, 5) == 0


@pytest.mark.parametrize(
    "kwargs", [{"rank": 0}, {"rank": 25}, {"energy": 0.0}, {"energy": 1.2}, {}, {"rank": 2, "energy": 0.5}]
)
def test_lowrank_bad_ranks_and_energies(kwargs):
    with pytest.raises(ValueError, match="rank|energy"):
        lowrank.factorize_linear(_layer(), **kwargs)


def test_lowrank_bad_inputs():
    with pytest.raises(TypeError, match="nn.Linear"):
        lowrank.factorize_linear(nn.Conv2d(1, 1, 1), rank=1)
    with pytest.raises(ValueError, match="rank"):
        lowrank.lowrank_parameters(10, 20, 11)
    with pytest.raises(ValueError, match="rank"):
        lowrank.predicted_error(_layer(), 0)
    with pytest.raises(ValueError, match="Linear layers"):
        lowrank.factorize_model(models.MLP(), ["5"], rank=2)
    with pytest.raises(ValueError, match="rank"):
        lowrank.factorize_model(models.MLP(), rank=0)
    with pytest.raises(ValueError, match="sorted"):
        lowrank.rank_for_energy(torch.tensor([1.0, 2.0]), 0.5)


# ------------------------------------------------------------------------------------------ layers


def test_depthwise_separable_parameters_and_flops_match_torch():
    for ci, co, k, hw, stride, pad in ((16, 32, 3, 10, 1, 1), (8, 8, 5, 12, 2, 0), (3, 7, 1, 4, 1, 0)):
        sep = layers.DepthwiseSeparableConv2d(ci, co, k, stride, pad)
        std = nn.Conv2d(ci, co, k, stride, pad)
        assert sep.depthwise.groups == ci and sep.pointwise.kernel_size == (1, 1)
        assert sum(p.numel() for p in sep.parameters()) == layers.separable_parameters(ci, co, k)
        assert sum(p.numel() for p in std.parameters()) == layers.conv_parameters(ci, co, k)
        x = torch.randn(2, ci, hw, hw)
        assert sep(x).shape == std(x).shape
        assert timing.count_flops(sep, x) == layers.separable_flops(ci, co, k, hw, hw, 2, stride, pad)
        assert timing.count_flops(std, x) == layers.conv_flops(ci, co, k, hw, hw, 2, stride, pad)
    ratio = layers.separable_flops(64, 128, 3, 32, 32, padding=1) / layers.conv_flops(64, 128, 3, 32, 32, padding=1)
    assert ratio == pytest.approx(1 / 128 + 1 / 9)
    assert layers.separable_parameters(4, 4, 3, bias=False) == 4 * 9 + 16


def test_conv_bad_inputs():
    with pytest.raises(ValueError, match="in_channels"):
        layers.DepthwiseSeparableConv2d(0, 4)
    with pytest.raises(ValueError, match="smaller than the kernel"):
        layers.conv_flops(1, 1, 5, 3, 3)
    with pytest.raises(TypeError, match="bias"):
        layers.conv_parameters(1, 1, 3, bias=1)


def test_linear_attention_equals_its_quadratic_form_and_softmax_equals_torch():
    torch.manual_seed(0)
    lin, soft = layers.LinearAttention(16, heads=2), layers.SoftmaxAttention(16, heads=2)
    soft.load_state_dict(lin.state_dict())
    x = torch.randn(3, 7, 16)
    q, k, v = lin.qkv(x).view(3, 7, 3, 2, 8).permute(2, 0, 3, 1, 4)
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    weights = fq @ fk.transpose(-2, -1)  # the n x n form linear attention never builds
    mixed = (weights / weights.sum(-1, keepdim=True)) @ v
    assert torch.allclose(lin(x), lin.out(mixed.transpose(1, 2).reshape(3, 7, 16)), atol=1e-5)
    ref = F.scaled_dot_product_attention(q, k, v)
    assert torch.allclose(soft(x), soft.out(ref.transpose(1, 2).reshape(3, 7, 16)), atol=1e-5)
    assert soft(x).shape == lin(x).shape == x.shape
    out = lin(x.requires_grad_())  # both train: gradients flow
    out.sum().backward()
    assert x.grad is not None


@pytest.mark.parametrize("dim, heads, batch", [(32, 1, 1), (32, 4, 2)])
def test_attention_flop_and_byte_formulas_match_the_counters(dim, heads, batch):
    torch.manual_seed(0)
    for n in (4, 32, 80):
        x = torch.randn(batch, n, dim)
        for kind in layers.ATTENTION_KINDS:
            m = layers.make_attention(kind, dim, heads)
            assert timing.count_flops(m, x) == layers.attention_flops(kind, n, dim, heads, batch), (kind, n)
            with torch.no_grad():
                peak = meters.measure_peak_memory(lambda: m(x)).increment_bytes
            assert peak == layers.attention_bytes(kind, n, dim, heads, batch), (kind, n)
    assert layers.score_matrix_bytes(100, heads, batch) == 4 * batch * heads * 100 * 100
    assert layers.state_bytes(dim, heads, batch) == 4 * batch * heads * (dim // heads) ** 2


def test_crossovers():
    flops = lambda kind, n: layers.attention_flops(kind, n, 64)  # noqa: E731
    n = layers.crossover_length(flops)
    assert flops("linear", n) < flops("softmax", n) and flops("linear", n - 1) >= flops("softmax", n - 1)
    assert n == 65  # 4 n^2 d vs 4 n d^2 + 2 n d: equal at n = d + 1/2
    assert layers.measured_crossover([16, 32, 64], [2.0, 1.5, 0.5]) == pytest.approx(
        math.exp(math.log(32) + math.log(1.5) / (math.log(1.5) - math.log(0.5)) * math.log(2))
    )
    assert layers.measured_crossover([16, 32], [0.9, 0.5]) == 16.0
    assert layers.measured_crossover([16, 32], [1.9, 1.5]) is None
    with pytest.raises(ValueError, match="not cheaper"):
        layers.crossover_length(lambda kind, n: 1.0, high=100)
    with pytest.raises(ValueError, match="increase"):
        layers.measured_crossover([32, 16], [2.0, 0.5])


def test_attention_sweep_measures_both_kinds():
    points = layers.attention_sweep([8, 64], dim=16, rounds=1, min_run_time=0.001)
    for p in points:
        assert p.softmax_bytes == p.predicted_softmax_bytes and p.linear_bytes == p.predicted_linear_bytes
        assert p.softmax.seconds > 0 and p.time_ratio > 0
        assert p.softmax_flops == layers.attention_flops("softmax", p.seq_len, 16)


def test_attention_bad_inputs():
    with pytest.raises(ValueError, match="divisible"):
        layers.SoftmaxAttention(10, heads=3)
    with pytest.raises(ValueError, match="kind"):
        layers.make_attention("sparse", 8)
    with pytest.raises(ValueError, match="shape"):
        layers.LinearAttention(8)(torch.randn(2, 3, 4))
    with pytest.raises(ValueError, match="seq_len"):
        layers.attention_flops("softmax", 0, 8)


def test_notebook_05_3_counts():
    """What notebook 05.3 prints as computed: the conv layers' parameters and FLOPs (formula = module = counter), the
    attention crossovers at d = 64, and the rank-16 parameter share of its wide MLP."""
    std, sep = nn.Conv2d(128, 256, 3, padding=1), layers.DepthwiseSeparableConv2d(128, 256, 3, padding=1)
    x = torch.randn(8, 128, 16, 16)
    assert models.count_parameters(std) == layers.conv_parameters(128, 256, 3)
    assert models.count_parameters(sep) == layers.separable_parameters(128, 256, 3)
    assert timing.count_flops(std, x) == layers.conv_flops(128, 256, 3, 16, 16, 8, padding=1)
    assert timing.count_flops(sep, x) == layers.separable_flops(128, 256, 3, 16, 16, 8, padding=1)
    assert layers.crossover_length(lambda k, n: layers.attention_flops(k, n, 64)) == 65
    for kind in layers.ATTENTION_KINDS:
        assert timing.count_flops(layers.make_attention(kind, 64), torch.randn(1, 256, 64)) == layers.attention_flops(
            kind, 256, 64
        )
    torch.manual_seed(0)
    wide = models.MLP(64, [256, 256, 256], 10)
    assert (
        lowrank.lowrank_parameters(256, 256, 16) * 2 + models.count_parameters(wide) - 2 * 65_792
        < models.count_parameters(wide) / 3
    )


def test_fused_attention_equals_the_explicit_one_and_stores_no_scores():
    torch.manual_seed(0)
    explicit, fused = layers.make_attention("softmax", 32), layers.make_attention("fused", 32)
    fused.load_state_dict(explicit.state_dict())
    x = torch.randn(2, 50, 32)
    with torch.no_grad():
        assert torch.allclose(explicit(x), fused(x), atol=1e-5)
    assert layers.attention_flops("fused", 50, 32) == layers.attention_flops("softmax", 50, 32)
    with pytest.raises(ValueError):
        layers.attention_bytes("fused", 50, 32)  # kernel-dependent: measured only
    point = layers.attention_sweep([512], dim=32, rounds=1, min_run_time=0.001, fused=True, num_threads=1)[0]
    assert point.fused is not None and point.fused_bytes < point.softmax_bytes / 4
    assert layers.attention_sweep([8], dim=32, rounds=1, min_run_time=0.001)[0].fused is None
    with pytest.raises((ValueError, TypeError)):
        layers.attention_sweep([8], dim=32, num_threads=0)
