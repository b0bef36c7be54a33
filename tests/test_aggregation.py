"""Tests of course_lib.distributed.aggregation (notebook 04, efficient aggregation).

The formulas against hand-computed values, the top-k compressor with error feedback in one
process, and one 2-rank training run of every method (all in one launch, a few seconds) where the
bytes counted at the collectives must equal the formulas exactly.
"""
from __future__ import annotations

import math

import pytest
import torch

from course_lib import models
from course_lib.distributed import aggregation as agg

N = 4810  # the digits MLP 64 -> 64 -> 10: 64*64 + 64 + 10*64 + 10
SHAPES = [(64, 64), (64,), (10, 64), (10,)]
STEPS = 120
PERIOD = 8


# ----------------------------------------------------------------------------------------------
# formulas (hand-computed)

def test_the_model_has_the_parameters_the_formulas_assume():
    model = models.MLP(64, 64, 10)
    assert models.count_parameters(model) == N
    assert [tuple(p.shape) for p in model.parameters()] == SHAPES


def test_bytes_per_step_by_hand():
    assert agg.bytes_per_step("none", N) == 4 * N == 19240
    assert agg.bytes_per_step("fp16", N) == 2 * N
    # PowerSGD rank 2: P = 64*2 + 10*2, Q = 64*2 + 64*2, biases 64 + 10 uncompressed
    assert agg.powersgd_payload(SHAPES, 2) == {"uncompressed": 74, "p": 148, "q": 256, "total": 478}
    assert agg.bytes_per_step("powersgd", N, powersgd_rank=2, shapes=SHAPES) == 4 * 478
    # top-k 1%: ceil(48.1) = 49 entries, 4 bytes of value + 4 of int32 index each
    assert agg.topk_count(N, 0.01) == 49
    assert agg.bytes_per_step("topk", N, ratio=0.01) == 8 * 49
    assert agg.bytes_per_step("topk", N, ratio=0.01) / (4 * N) < 0.05
    assert agg.bytes_per_step("topk", N, ratio=0.01, bucket_numels=[810, 4000]) == 8 * (9 + 40)
    assert agg.bytes_per_step("local_sgd", N, period=8) == 4 * N / 8
    assert agg.bytes_total("local_sgd", N, 20, period=8) == 3 * 4 * N  # after 8, 16 and the last step
    assert agg.bytes_total("powersgd", N, 10, powersgd_rank=2, shapes=SHAPES) == 2 * 4 * N + 8 * 4 * 478


def test_powersgd_leaves_matrices_uncompressed_when_it_would_not_save_2x():
    # 64x64 at rank 16: (64 + 64) * 16 * 2 = 4096, not < 4096 -> sent whole
    assert agg.powersgd_payload([(64, 64)], 16) == {"uncompressed": 4096, "p": 0, "q": 0, "total": 4096}
    # rank above min(n, m) is clipped; a conv weight is viewed as out x (in * k * k)
    assert agg.powersgd_payload([(8, 3, 3, 3)], 100)["total"] == 8 * 27  # r = 8: 2*(8+27)*8 > 216
    assert agg.powersgd_payload([(256, 3, 3, 3)], 1) == {"uncompressed": 0, "p": 256, "q": 27, "total": 283}


def test_wire_factor_and_link_seconds():
    assert agg.wire_factor("none", 2) == 1.0 and agg.wire_factor("fp16", 4) == 1.5
    assert agg.wire_factor("topk", 2) == 1.0 and agg.wire_factor("topk", 4) == pytest.approx(3.0)
    assert agg.bytes_per_step("none", N, 4, wire=True) == pytest.approx(1.5 * 4 * N)
    assert agg.link_seconds("none", 4 * N, 2, "eth-1g") == pytest.approx(4 * N / 125e6)
    assert agg.link_seconds("topk", 392, 4, "eth-1g") == pytest.approx(3 * 392 / 125e6)
    assert agg.link_seconds("none", 4 * N, 2, "nvlink4") < agg.link_seconds("none", 4 * N, 2, "eth-1g") / 100


# ----------------------------------------------------------------------------------------------
# top-k with error feedback, one process

def test_topk_compressor_conserves_and_eventually_sends_everything():
    """Error feedback: what is not sent waits in the residual, so a coordinate that is small every
    step (here 10x smaller than the largest, always the same sign) still gets sent in the end."""
    torch.manual_seed(0)
    numel, ratio, k = 100, 0.1, 10
    comp = agg.TopKCompressor(ratio)
    scale = torch.linspace(0.1, 1.0, numel)
    ever_sent = torch.zeros(numel, dtype=torch.bool)
    previous = torch.zeros(numel)
    for step in range(200):
        g = scale * (1 + 0.3 * torch.randn(numel))
        values, indices = comp.compress(g, key="b")
        assert indices.dtype == torch.int32 and len(values) == len(indices) == agg.topk_count(numel, ratio) == k
        sent = agg.TopKCompressor.decompress(values, indices, numel)
        residual = comp.residuals["b"]
        torch.testing.assert_close(sent + residual, g + previous)  # nothing lost, nothing invented
        assert torch.all(residual[indices.long()] == 0) and int((sent != 0).sum()) == k  # sent left the residual
        assert values.abs().min() >= residual.abs().max()  # the largest magnitudes were sent
        ever_sent[indices.long()] = True
        previous = residual.clone()
    assert ever_sent.all(), f"{int((~ever_sent).sum())} coordinates never sent in 200 steps"
    assert previous.abs().max() < 20, "the residual should stay bounded, not grow with the steps"


def test_topk_ratio_one_sends_everything_and_keeps_no_residual():
    comp = agg.TopKCompressor(1.0)
    g = torch.randn(50)
    values, indices = comp.compress(g)
    torch.testing.assert_close(agg.TopKCompressor.decompress(values, indices, 50), g)
    assert comp.residuals[0].abs().max() == 0


# ----------------------------------------------------------------------------------------------
# bad input

@pytest.mark.parametrize("call, match", [
    (lambda: agg.method_name("gzip"), r"method 'gzip' is not known; accepted values are \('none', 'fp16'"),
    (lambda: agg.bytes_per_step("topk", N, ratio=0.0), r"ratio.*> 0 and <= 1"),
    (lambda: agg.bytes_per_step("topk", N, ratio=1.5), r"ratio.*> 0 and <= 1"),
    (lambda: agg.TopKCompressor(-0.1), r"ratio.*> 0 and <= 1"),
    (lambda: agg.bytes_per_step("powersgd", N, powersgd_rank=0, shapes=SHAPES), r"powersgd_rank must be an int >= 1"),
    (lambda: agg.bytes_per_step("powersgd", N), r"needs shapes="),
    (lambda: agg.bytes_per_step("powersgd", N + 1, shapes=SHAPES), r"n_params=4811"),
    (lambda: agg.bytes_per_step("local_sgd", N, period=0), r"period.*>= 1"),
    (lambda: agg.bytes_per_step("none", 0), r"n_params must be an int >= 1"),
    (lambda: agg.link_seconds("none", 1.0, 2, "carrier-pigeon"), r"carrier-pigeon"),
    (lambda: agg.compare_methods(["none", "zip"]), r"accepted values"),
    (lambda: agg.compare_methods(ratio=2), r"ratio"),
    (lambda: agg.compare_methods(period=0), r"period"),
    (lambda: agg.compare_methods(powersgd_rank=0), r"powersgd_rank"),
    (lambda: agg.compare_methods(world_size=1), r"world_size must be an int >= 2"),
])
def test_bad_input_names_the_argument(call, match):
    with pytest.raises((ValueError, KeyError), match=match):
        call()


def test_method_names_ignore_case_and_accept_common_spellings():
    assert agg.method_name(" TopK ") == "topk" and agg.method_name("top-k") == "topk"
    assert agg.method_name("fp32") == "none" and agg.method_name("Local-SGD") == "local_sgd"
    with pytest.raises(TypeError):
        agg.method_name(3)


# ----------------------------------------------------------------------------------------------
# one real 2-rank run of every method

@pytest.fixture(scope="module")
def rows():
    return {r["method"]: r for r in agg.compare_methods(agg.METHODS, world_size=2, steps=STEPS, ratio=0.01,
                                                        powersgd_rank=2, period=PERIOD)}


@pytest.mark.slow
def test_measured_bytes_equal_the_formulas(rows):
    assert set(rows) == set(agg.METHODS)
    for method, row in rows.items():
        assert row["bytes_total"] == row["predicted_bytes_total"], method
        assert row["same_weights"], f"{method}: ranks ended with different weights"
    per_step = {m: r["step_bytes"] for m, r in rows.items()}
    assert per_step["none"] == [4 * N] * STEPS
    assert per_step["fp16"] == [2 * N] * STEPS
    assert per_step["topk"] == [8 * 49] * STEPS
    start = agg.POWERSGD_START_ITER
    assert per_step["powersgd"] == [4 * N] * start + [4 * 478] * (STEPS - start)
    assert per_step["local_sgd"] == [4 * N if (s % PERIOD == 0 or s == STEPS) else 0 for s in range(1, STEPS + 1)]


@pytest.mark.slow
def test_compressed_methods_learn_about_as_well_with_far_fewer_bytes(rows):
    base = rows["none"]["accuracy"]
    assert base > 0.85, f"uncompressed training reached only {base:.3f} on digits"
    for method, row in rows.items():
        assert row["accuracy"] > base - 0.06, f"{method}: {row['accuracy']:.3f} vs uncompressed {base:.3f}"
    assert rows["topk"]["fraction_of_uncompressed"] < 0.05
    assert rows["fp16"]["fraction_of_uncompressed"] == 0.5
    assert rows["powersgd"]["fraction_of_uncompressed"] < 0.15
    assert math.isclose(rows["none"]["fraction_of_uncompressed"], 1.0)


GPT2 = [(768, 2304), (768, 768), (768, 3072), (3072, 768)] * 12 + [(50257, 768), (1024, 768)]


def test_gpt2_exchange_table_of_notebook_04():
    """Notebook 04's table for GPT-2 small on 8 GPUs: MB per step, seconds on 1 GbE, ms on NVLink 4."""
    n = sum(a * b for a, b in GPT2)
    assert n == 124_318_464
    table = {"none": (497.3, 6.96, 1.93), "fp16": (248.6, 3.48, 0.97), "powersgd": (1.6, 0.02, 0.01),
             "topk": (9.9, 0.56, 0.15), "local_sgd": (62.2, 0.87, 0.24)}
    for method, (mb, eth, nvl) in table.items():
        b = agg.bytes_per_step(method, n, 8, shapes=GPT2, bucket_numels=[n])
        assert b / 1e6 == pytest.approx(mb, abs=0.051)
        assert agg.link_seconds(method, b, 8, "eth-1g") == pytest.approx(eth, abs=0.0051)
        assert agg.link_seconds(method, b, 8, "nvlink4") * 1e3 == pytest.approx(nvl, abs=0.0051)
