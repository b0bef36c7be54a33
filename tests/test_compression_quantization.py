"""course_lib.compression.fake_quant (fake quantization by hand, QAT) and course_lib.compression.quantization
(torchao int8, compiled and timed): notebook 05.2."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch
from torch import nn

from course_lib import data, models, train
from course_lib.compression import fake_quant as F
from course_lib.compression import quantization as Q
from course_lib.compression import size


# ---------------------------------------------------------------------------------------------- by hand


def test_symmetric_int8_by_hand():
    x = torch.tensor([-1.0, 0.5, 0.25, 1.0, 0.0])
    q, scale, zp = F.quantize(x, 8, "symmetric")
    assert q.dtype == torch.int8 and zp.item() == 0 and scale.dim() == 0
    assert scale.item() == pytest.approx(1 / 127)
    assert q.tolist() == [-127, 64, 32, 127, 0]  # 63.5 rounds to the even 64, 31.75 to 32
    assert torch.allclose(F.dequantize(q, scale, zp), q.float() / 127)


def test_ranges_and_dtypes_for_every_bit_width():
    for bits in range(2, 17):
        lo, hi = F.qrange(bits, "symmetric")
        assert (lo, hi) == (-(2 ** (bits - 1) - 1), 2 ** (bits - 1) - 1)
        assert F.qrange(bits, "affine") == (0, 2**bits - 1)
        x = torch.randn(50, 7, generator=torch.Generator().manual_seed(bits))
        for scheme in F.SCHEMES:
            q, _, _ = F.quantize(x, bits, scheme)
            lo, hi = F.qrange(bits, scheme)
            assert int(q.min()) >= lo and int(q.max()) <= hi
            assert not q.is_floating_point()
    assert F.quantize(torch.randn(4), 8, "affine")[0].dtype == torch.uint8
    assert F.quantize(torch.randn(4), 16, "symmetric")[0].dtype == torch.int16
    assert F.quantize(torch.randn(4), 16, "affine")[0].dtype == torch.int32


def test_two_bits_is_ternary():
    q, scale, _ = F.quantize(torch.tensor([-0.9, -0.2, 0.1, 0.6, 1.0]), 2)
    assert q.tolist() == [-1, 0, 0, 1, 1] and scale.item() == pytest.approx(1.0)


def test_affine_uses_every_level_on_a_one_sided_tensor_and_keeps_zero_exact():
    x = torch.linspace(0, 3, 1000)
    q, scale, zp = F.quantize(x, 4, "affine")
    assert zp.item() == 0 and scale.item() == pytest.approx(3 / 15)
    assert q.unique().numel() == 16
    x = torch.tensor([-1.0, 0.0, 3.0])
    q, scale, zp = F.quantize(x, 8, "affine")
    assert F.dequantize(q, scale, zp)[1].item() == 0.0  # zero is a grid point
    assert torch.allclose(F.fake_quantize(x, 8, "affine"), x, atol=scale.item() / 2 + 1e-6)


def test_per_channel_scales_broadcast_and_match_each_row():
    w = torch.randn(6, 5) * torch.arange(1, 7).float()[:, None]
    q, scale, zp = F.quantize(w, 8, granularity="per_channel", axis=0)
    assert scale.shape == (6, 1) and zp.shape == (6, 1)
    assert torch.allclose(scale[:, 0], w.abs().amax(1) / 127)
    _, scale_cols, _ = F.quantize(w, 8, granularity="per_channel", axis=1)
    assert scale_cols.shape == (1, 5)
    _, scale_neg, _ = F.quantize(w, 8, granularity="per_channel", axis=-1)
    assert torch.equal(scale_neg, scale_cols)
    for row in range(6):  # each row quantized alone gives the same result
        assert torch.equal(F.fake_quantize(w, 8, granularity="per_channel")[row], F.fake_quantize(w[row], 8))


def test_zeros_quantize_to_zeros_without_dividing_by_zero():
    for scheme in F.SCHEMES:
        for granularity in F.GRANULARITIES:
            z = torch.zeros(3, 4)
            q, scale, zp = F.quantize(z, 8, scheme, granularity)
            assert torch.isfinite(scale).all() and (scale > 0).all()
            assert torch.equal(F.dequantize(q, scale, zp), z)
            err = F.quantization_error(z, 8, scheme, granularity)
            assert err.rms == 0 and err.relative == 0 and not math.isnan(err.sqnr_db)
    w = torch.randn(3, 4)
    w[1] = 0  # one dead row among live ones
    assert torch.equal(F.fake_quantize(w, 4, granularity="per_channel")[1], torch.zeros(4))


def test_round_trip_error_is_at_most_half_a_step():
    x = torch.randn(2000, generator=torch.Generator().manual_seed(0))
    for bits in (2, 3, 8, 16):
        for scheme in F.SCHEMES:
            err = (F.fake_quantize(x.double(), bits, scheme) - x.double()).abs().max()
            assert err <= F.step_size(x.double(), bits, scheme).max() / 2 * (1 + 1e-9)


def test_measured_error_follows_step_over_sqrt12_and_six_db_per_bit():
    x = torch.randn(100_000, generator=torch.Generator().manual_seed(0))
    sweep = F.error_sweep(x, range(4, 13))
    assert all(0.95 < e.measured_over_predicted < 1.05 for e in sweep)
    slope = (sweep[-1].sqnr_db - sweep[0].sqnr_db) / (sweep[-1].bits - sweep[0].bits)
    steps = 20 * math.log10(F.qrange(12)[1] / F.qrange(4)[1]) / 8  # about 20 log10(2) = 6.02 dB per bit
    assert abs(slope - steps) < 0.05
    e = F.quantization_error(x, 8)
    assert e.predicted_rms == pytest.approx(float(x.abs().max()) / 127 / math.sqrt(12))
    assert e.relative == pytest.approx(e.rms / float(x.pow(2).mean().sqrt()))


def test_per_channel_wins_on_rows_of_different_scales():
    w = torch.randn(64, 32, generator=torch.Generator().manual_seed(0)) * torch.logspace(-2, 0, 64)[:, None]
    tensor, channel = (F.quantization_error(w, 8, granularity=g) for g in F.GRANULARITIES)
    assert channel.rms < 0.5 * tensor.rms


def test_bad_arguments_name_what_is_accepted():
    x = torch.randn(4, 3)
    for bits in (1, 17, 0, -3):
        with pytest.raises(ValueError, match="bits"):
            F.quantize(x, bits)
    with pytest.raises(TypeError, match="bits"):
        F.quantize(x, 8.0)
    with pytest.raises(ValueError, match="scheme.*accepted values.*symmetric.*affine"):
        F.quantize(x, 8, "asymmetric")
    with pytest.raises(ValueError, match="granularity.*per_tensor.*per_channel"):
        F.quantize(x, 8, granularity="per_row")
    with pytest.raises(ValueError, match="axis"):
        F.quantize(x, 8, granularity="per_channel", axis=2)
    with pytest.raises(ValueError, match="scalar"):
        F.quantize(torch.tensor(1.0), 8, granularity="per_channel")
    with pytest.raises(TypeError, match="floating"):
        F.quantize(torch.arange(4), 8)
    with pytest.raises(TypeError, match="torch.Tensor"):
        F.quantize([1.0, 2.0], 8)
    with pytest.raises(TypeError, match="integers"):
        F.dequantize(torch.randn(3), torch.tensor(1.0), 0)
    with pytest.raises(ValueError, match="bits"):
        F.qrange(1)
    with pytest.raises(ValueError, match="bits"):
        F.to_qat(models.MLP(), bits=20)
    with pytest.raises(ValueError, match="scheme"):
        F.post_training_quantize(models.MLP(), 4, scheme="log")
    assert F.quantize(x, 8, "SYMMETRIC", "Per-Channel")[1].shape == (4, 1)  # names ignore case


def test_relu_activations_are_one_sided_and_affine_halves_their_error():
    m = models.MLP(64, 32, 10)
    a = F.relu_activations(m, torch.randn(200, 64))
    assert a.shape == (200, 32) and float(a.min()) >= 0
    ratio = F.quantization_error(a, 8).rms / F.quantization_error(a, 8, "affine").rms
    assert 1.8 < ratio < 2.2  # symmetric leaves the negative half of its levels unused
    with pytest.raises(ValueError, match="ReLU"):
        F.relu_activations(nn.Linear(3, 3), torch.randn(2, 3))


# ---------------------------------------------------------------------------------------------- QAT / PTQ


def test_straight_through_estimator_passes_the_gradient_unchanged():
    x = torch.randn(10, requires_grad=True)
    y = F.ste_fake_quantize(x, 3)
    assert torch.equal(y.detach(), F.fake_quantize(x.detach(), 3))
    (y * torch.arange(10.0)).sum().backward()
    assert torch.equal(x.grad, torch.arange(10.0))


def test_to_qat_swaps_every_linear_and_computes_with_rounded_weights():
    torch.manual_seed(0)
    m = models.MLP(8, [16, 16], 3)
    qat = F.to_qat(m, bits=4, act_bits=8)
    layers = [l for l in qat.modules() if isinstance(l, nn.Linear)]
    assert len(layers) == 3 and all(isinstance(l, F.FakeQuantLinear) for l in layers)
    assert not any(isinstance(l, F.FakeQuantLinear) for l in m.modules())  # the original is untouched
    assert "bits=4" in repr(qat) and "act_bits=8" in repr(qat)
    x = torch.randn(5, 8)
    frozen = F.post_training_quantize(F.to_qat(m, bits=4), 4)
    assert torch.allclose(F.to_qat(m, bits=4)(x), frozen(x), atol=1e-6)  # QAT's forward = its weights rounded
    assert not torch.allclose(m(x), frozen(x), atol=1e-4)


def test_qat_trains_through_the_shared_fit_and_updates_float_weights():
    split = data.load_digits(fraction=0.2)
    qat = F.to_qat(models.MLP(64, 32, 10), bits=3)
    before = qat[0].weight.detach().clone()
    history = train.fit(qat, split.train, epochs=2, lr=1e-2, progress=False)
    assert history.last["train_loss"] < math.log(10)
    assert not torch.equal(before, qat[0].weight)


def test_post_training_quantize_rounds_weights_and_keeps_biases():
    m = models.MLP(8, 16, 3)
    q = F.post_training_quantize(m, 2)
    linears = [[layer for layer in net.modules() if isinstance(layer, nn.Linear)] for net in (m, q)]
    for a, b in zip(*linears):
        assert torch.equal(b.bias, a.bias)
        assert b.weight.unique().numel() <= 3 * a.out_features  # ternary per row
    with pytest.raises(TypeError, match="nn.Module"):
        F.post_training_quantize("model", 4)


def test_qat_vs_ptq_reports_one_row_per_seed():
    rows = F.qat_vs_ptq(data.load_digits(fraction=0.2), 2, seeds=[0], hidden=16, epochs=1, qat_epochs=1)
    assert len(rows) == 1 and set(rows[0]) == {"seed", "fp32", "ptq", "qat"}
    assert all(0 <= rows[0][k] <= 1 for k in ("fp32", "ptq", "qat"))


def test_rescaled_units_keep_the_outputs_and_spread_the_rows():
    torch.manual_seed(0)
    m = models.MLP(8, 16, 3)
    factors = torch.logspace(-1, 1, 16)
    r = F.rescale_units(m, factors)
    x = torch.randn(20, 8)
    assert torch.allclose(r(x), m(x), atol=1e-5)
    rows = r[0].weight.abs().amax(1) / m[0].weight.abs().amax(1)
    assert torch.allclose(rows, factors, rtol=1e-5)
    for bad in (-factors, torch.ones(3)):
        with pytest.raises(ValueError, match=r"shape \(16,\) of numbers > 0"):
            F.rescale_units(m, bad)
    with pytest.raises(ValueError, match="layer"):
        F.rescale_units(m, factors, layer=1)
    with pytest.raises(TypeError, match="Sequential"):
        F.rescale_units(nn.Linear(2, 2), factors)


# ---------------------------------------------------------------------------------------------- torchao

needs_torchao = pytest.mark.skipif(Q.torchao_problem() is not None, reason=str(Q.torchao_problem()))


@pytest.mark.slow
def test_importing_torchao_prints_nothing():
    code = "from course_lib.compression import quantization as Q; print(Q.torchao_problem())"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_missing_or_old_torchao_says_what_to_install(monkeypatch, capsys):
    import importlib.metadata

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    for fake, words in ((missing, "not installed"), (lambda name: "0.9.0", "too old")):
        monkeypatch.setattr(Q, "_TORCHAO", [])
        monkeypatch.setattr(importlib.metadata, "version", fake)
        problem = Q.torchao_problem()
        assert words in problem and "pip install" in problem and "torchao" in problem
        with pytest.raises(RuntimeError, match="pip install"):
            Q.int8_dynamic(models.MLP())
        assert Q.torchao_ready() is False and "Skipped" in capsys.readouterr().out
    assert Q._version("0.18.0+cpu") == (0, 18, 0) and Q._version("0.10.0.dev20250101") == (0, 10, 0)


@needs_torchao
def test_int8_copies_are_quarter_size_and_close_to_fp32():
    assert Q.torchao_ready()
    torch.manual_seed(0)
    m = models.MLP(64, [256, 256], 10).eval()
    x = torch.randn(32, 64)
    for make in (Q.int8_dynamic, Q.int8_weight_only):
        q = make(m)
        assert q is not m and type(m[0].weight) is nn.Parameter  # a copy; the original keeps fp32
        assert 0.24 < size.state_dict_bytes(q) / size.state_dict_bytes(m) < 0.3
        # one byte a weight; per row, what this torchao stores: 5 (fp32 scale, int8 zero point), or on the torchao
        # releases for torch 2.6, 12 (int64 zero point, weight-only) or 4 (no zero point, dynamic)
        assert Q.row_bytes(q) in (4, 5, 12)
        assert size.memory_bytes(q) == Q.predicted_int8_bytes(m, row_bytes=Q.row_bytes(q))
        with torch.no_grad():
            assert ((q(x) - m(x)).norm() / m(x).norm()).item() < 0.05
        hand = [
            F.fake_quantize(layer.weight.detach(), 8, granularity="per_channel")
            for layer in m
            if isinstance(layer, nn.Linear)
        ]
        for w, h, ref in zip(Q.dequantized_weights(q), hand, Q.dequantized_weights(m)):
            ratio = (w - ref).pow(2).mean().sqrt() / (h - ref).pow(2).mean().sqrt()
            assert 0.9 < ratio < 1.1  # torchao's rounding error is the hand-written one's


@pytest.mark.slow
def test_compile_timed_and_latency_report_per_shape():
    m = models.MLP(16, 32, 4).eval()
    c = Q.compile_timed(m, [torch.randn(2, 16)], backend="eager")  # the timing logic, without inductor's minutes
    assert set(c.compile_s) == {(2, 16)} and c.total_compile_s > 0 and c.call_s[(2, 16)] > 0
    x = torch.randn(2, 16)
    with torch.no_grad():
        assert torch.allclose(c(x), m(x), atol=1e-5)
    out = Q.latency({"eager": m, "compiled": c}, [2, 3], 16, threads={2: 1}, rounds=1, min_run_time=0.01)
    assert set(out) == {2, 3} and set(out[2]) == {"eager", "compiled"} and out[2]["eager"].seconds > 0
    assert out[2]["eager"].num_threads == 1 and out[3]["eager"].num_threads == torch.get_num_threads()
    before = torch.get_num_threads()
    Q.compile_timed(m, [torch.randn(3, 16)], threads=1, backend="eager")
    assert torch.get_num_threads() == before  # the thread count is restored
    with pytest.raises(TypeError, match="example_inputs"):
        Q.compile_timed(m, [])
    with pytest.raises(ValueError, match="batch_sizes"):
        Q.latency({"eager": m}, [0], 16)


def test_per_channel_protects_rows_rescaled_100x_apart():
    """Notebook 05.2 prints this as computed: rescaling hidden units keeps a ReLU network's outputs, and on rows 100x
    apart per-channel int8 keeps every row's error small where per-tensor drowns the small rows."""
    torch.manual_seed(0)
    m = models.MLP(64, [256, 256], 10)
    factors = 10 ** (2 * torch.rand(256, generator=torch.Generator().manual_seed(1)) - 1)
    twin = F.rescale_units(m, factors)
    x = torch.randn(100, 64)
    with torch.no_grad():
        assert torch.allclose(twin(x), m(x), rtol=1e-4, atol=1e-4)
    (pt, pt_pred), (pc, pc_pred) = (
        F.row_errors(twin[0].weight.detach(), 8, granularity=g) for g in ("per_tensor", "per_channel")
    )
    assert pc.max() < 0.2 * pt.max()
    for measured, predicted in ((pt, pt_pred), (pc, pc_pred)):
        assert 0.9 < (measured / predicted).median().item() < 1.1


def test_rounding_error_follows_step_over_sqrt12_on_trained_like_weights():
    """Notebook 05.2 prints this as computed: from 3 to 16 bits, measured / predicted error within 10 %."""
    w = torch.randn(256, 256, generator=torch.Generator().manual_seed(0)) * 0.05
    for g in F.GRANULARITIES:
        for e in F.error_sweep(w, range(3, 17), granularity=g):
            assert 0.9 < e.measured_over_predicted < 1.1, (g, e.bits)


def test_row_bytes_and_predicted_bytes_check_their_input():
    m = models.MLP(8, [4], 2)
    assert Q.predicted_int8_bytes(m, row_bytes=0) == 8 * 4 + 4 * 4 + 4 * 2 + 2 * 4  # weights 1 byte, biases fp32
    assert Q.predicted_int8_bytes(m) - Q.predicted_int8_bytes(m, row_bytes=0) == Q.ROW_BYTES * (4 + 2)
    with pytest.raises(ValueError, match="row_bytes"):
        Q.predicted_int8_bytes(m, row_bytes=-1)
    with pytest.raises(ValueError, match="no quantized Linear"):
        Q.row_bytes(m)
    with pytest.raises(TypeError, match="model"):
        Q.row_bytes("model")
