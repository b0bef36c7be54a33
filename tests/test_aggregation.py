"""Tests of course_lib.comm.aggregation (notebook 04, efficient aggregation).

The formulas against hand-computed values, the top-k compressor with error feedback in one
process, and one 2-rank training run of every method (all in one launch, a few seconds) where the
bytes counted at the collectives must equal the formulas exactly.
"""

from __future__ import annotations

import math

import pytest
import torch

from course_lib import models
from course_lib.comm import aggregation as agg

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


def test_momentum_correction_at_ratio_one_without_masking_is_momentum_sgd():
    """DGC's momentum correction keeps the velocity before compression: when everything is sent and the
    velocity is not masked, plain SGD on what was sent is exactly SGD with momentum on the raw gradients."""
    torch.manual_seed(0)
    grads = [torch.randn(20) for _ in range(6)]
    comp = agg.TopKCompressor(1.0, momentum=0.9, factor_masking=False)
    w_dgc = torch.nn.Parameter(torch.zeros(20))
    w_ref = torch.nn.Parameter(torch.zeros(20))
    sgd = torch.optim.SGD([w_dgc], lr=0.1)
    ref = torch.optim.SGD([w_ref], lr=0.1, momentum=0.9)
    for g in grads:
        values, indices = comp.compress(g.clone())
        w_dgc.grad = agg.TopKCompressor.decompress(values, indices, 20)
        w_ref.grad = g.clone()
        sgd.step()
        ref.step()
    torch.testing.assert_close(w_dgc.detach(), w_ref.detach())


def test_momentum_factor_masking_clears_the_velocity_of_what_was_sent():
    comp = agg.TopKCompressor(0.25, momentum=0.5)
    g = torch.tensor([4.0, 1.0, 0.5, 0.25])
    values, indices = comp.compress(g, "b")
    assert indices.tolist() == [0] and values.tolist() == [4.0]
    assert comp.velocities["b"].tolist() == [0.0, 1.0, 0.5, 0.25]  # the sent entry's velocity is cleared
    values, indices = comp.compress(g, "b")  # velocity 0.5 u + g = [4, 1.5, 0.75, 0.375]; residual adds [0, 1, .5, .25]
    assert indices.tolist() == [0] and comp.residuals["b"].tolist() == [0.0, 2.5, 1.25, 0.625]
    plain = agg.TopKCompressor(0.25)
    assert plain.momentum == 0.0 and not plain.velocities
    plain.compress(g)
    assert not plain.velocities  # without momentum nothing is kept but the residual


def test_topk_ratio_one_sends_everything_and_keeps_no_residual():
    comp = agg.TopKCompressor(1.0)
    g = torch.randn(50)
    values, indices = comp.compress(g)
    torch.testing.assert_close(agg.TopKCompressor.decompress(values, indices, 50), g)
    assert comp.residuals[0].abs().max() == 0


def test_ddp_buckets_follow_the_reverse_order_and_the_caps():
    # 4-byte elements: the first bucket closes at 1 MiB (262,144 elements), the others at 25 MiB
    assert agg.ddp_bucket_numels(SHAPES) == [N]  # the digits MLP fits the first bucket
    big = [(1024, 1024)] * 10  # 4 MiB each
    assert agg.ddp_bucket_numels(big) == [1024 * 1024] + [7 * 1024 * 1024] + [2 * 1024 * 1024]
    assert agg.ddp_bucket_numels([(10,), (300_000,)]) == [300_000, 10]  # the last parameter first
    gpt2 = agg.ddp_bucket_numels(GPT2)
    assert sum(gpt2) == sum(a * b for a, b in GPT2) and len(gpt2) == 14
    assert agg.ddp_bucket_numels(big, bucket_bytes=2**40) == [1024 * 1024, 9 * 1024 * 1024]


def test_collective_calls_and_the_latency_term():
    assert agg.collective_calls("none", 3) == {"all_reduce": 3.0, "all_gather": 0.0}
    assert agg.collective_calls("powersgd", 2)["all_reduce"] == 6.0  # uncompressed, P, Q per bucket
    assert agg.collective_calls("topk", 2) == {"all_reduce": 0.0, "all_gather": 4.0}
    assert agg.collective_calls("local_sgd", 5, period=8)["all_reduce"] == 1 / 8
    alpha = 50e-6
    t = agg.exchange_seconds("none", 4 * N, 8, "eth-1g", alpha_s=alpha, buckets=2)
    assert t["bandwidth_s"] == pytest.approx(agg.link_seconds("none", 4 * N, 8, "eth-1g"))
    assert t["latency_s"] == pytest.approx(2 * 2 * 7 * alpha) and t["calls"] == 2
    assert t["total_s"] == pytest.approx(t["bandwidth_s"] + t["latency_s"])
    g = agg.exchange_seconds("topk", 392, 8, "nvlink4", alpha_s=alpha)
    assert g["latency_s"] == pytest.approx(2 * 7 * alpha)  # two all-gathers, p - 1 steps each
    assert agg.exchange_seconds("none", 4 * N, 8, "eth-1g", alpha_s=0)["latency_s"] == 0.0
    # a compressed exchange on a fast link is latency-bound: PowerSGD's 3 calls cost more than its bytes
    p = agg.exchange_seconds("powersgd", 1.6e6, 8, "nvlink4", alpha_s=2e-6, buckets=14)
    assert p["latency_s"] > 10 * p["bandwidth_s"]


def test_topk_all_gather_grows_with_ranks_while_all_reduce_does_not():
    n = 10**8
    for p in (2, 8, 64):
        dense = agg.bytes_per_step("none", n, p, wire=True)
        assert dense < 8 * n  # 2(p-1)/p x 4n
    sparse = {p: agg.bytes_per_step("topk", n, p, ratio=0.01, wire=True) for p in (2, 8, 64, 128)}
    assert sparse[8] == pytest.approx(7 * sparse[2]) and sparse[64] == pytest.approx(63 * sparse[2])
    assert sparse[64] < agg.bytes_per_step("none", n, 64, wire=True) < sparse[128]  # crossover near p = 1 / ratio


# ----------------------------------------------------------------------------------------------
# bad input


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: agg.method_name("gzip"), r"method 'gzip' is not known; accepted values are \('none', 'fp16'"),
        (lambda: agg.bytes_per_step("topk", N, ratio=0.0), r"ratio.*> 0 and <= 1"),
        (lambda: agg.bytes_per_step("topk", N, ratio=1.5), r"ratio.*> 0 and <= 1"),
        (lambda: agg.TopKCompressor(-0.1), r"ratio.*> 0 and <= 1"),
        (
            lambda: agg.bytes_per_step("powersgd", N, powersgd_rank=0, shapes=SHAPES),
            r"powersgd_rank must be an int >= 1",
        ),
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
        (lambda: agg.TopKCompressor(0.1, momentum=1.0), r"momentum must be a number >= 0 and < 1"),
        (lambda: agg.TopKCompressor(0.1, momentum=-0.5), r"momentum"),
        (lambda: agg.compare_variants({}), r"non-empty dict"),
        (lambda: agg.compare_variants({"a": {"method": "none", "speed": 3}}), r"unknown option.*speed"),
        (lambda: agg.compare_variants({"a": {"method": "gzip"}}), r"accepted values"),
        (
            lambda: agg.compare_variants({"a": {"method": "dgc", "momentum": 0.9, "optimizer": "adam"}}),
            r"optimizer='sgd'",
        ),
        (lambda: agg.compare_variants({"a": {"method": "none", "momentum": 2}}), r"momentum"),
        (lambda: agg.ddp_bucket_numels([]), r"at least one"),
        (lambda: agg.ddp_bucket_numels([(0, 3)]), r"every dimension"),
        (lambda: agg.collective_calls("none", 0), r"buckets"),
        (lambda: agg.exchange_seconds("none", 1.0, 2, "eth-1g", alpha_s=-1), r"alpha_s"),
    ],
)
def test_bad_input_names_the_argument(call, match):
    with pytest.raises((ValueError, KeyError, TypeError), match=match):
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
    return {
        r["method"]: r
        for r in agg.compare_methods(agg.METHODS, world_size=2, steps=STEPS, ratio=0.01, powersgd_rank=2, period=PERIOD)
    }


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
def test_counted_collective_calls_equal_the_latency_model(rows):
    """The number of messages exchange_seconds charges latency for, against the calls the hooks really made."""
    start = agg.POWERSGD_START_ITER
    for method in ("none", "fp16", "topk"):
        calls = agg.collective_calls(method, 1)
        assert rows[method]["calls_per_step"] == calls["all_reduce"] + calls["all_gather"], method
    assert rows["powersgd"]["calls_per_step"] * STEPS == start + 3 * (STEPS - start)
    assert rows["local_sgd"]["calls_per_step"] * STEPS == math.ceil(STEPS / PERIOD)


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
    """Notebook 04's table for GPT-2 small on 8 GPUs with DDP's buckets: MB per step, calls, and seconds on 1 GbE
    and NVLink 4 (bandwidth term, and latency at the notebook's assumed 50 us and 2 us per message)."""
    n = sum(a * b for a, b in GPT2)
    assert n == 124_318_464
    buckets = agg.ddp_bucket_numels(GPT2)
    assert len(buckets) == 14
    table = {
        "none": (497.3, 14, 6.96, 9.8, 1.93, 0.39),
        "fp16": (248.6, 14, 3.48, 9.8, 0.97, 0.39),
        "powersgd": (1.6, 42, 0.022, 29.4, 0.01, 1.18),
        "topk": (9.9, 28, 0.56, 9.8, 0.15, 0.39),
        "local_sgd": (62.2, 0.125, 0.87, 0.1, 0.24, 0.0),
    }
    for method, (mb, calls, eth, eth_lat_ms, nvl_ms, nvl_lat_ms) in table.items():
        b = agg.bytes_per_step(method, n, 8, shapes=GPT2, bucket_numels=buckets)
        assert b / 1e6 == pytest.approx(mb, abs=0.051)
        e = agg.exchange_seconds(method, b, 8, "eth-1g", alpha_s=50e-6, buckets=len(buckets))
        v = agg.exchange_seconds(method, b, 8, "nvlink4", alpha_s=2e-6, buckets=len(buckets))
        assert e["calls"] == v["calls"] == pytest.approx(calls)
        assert e["bandwidth_s"] == pytest.approx(eth, abs=0.0051 if eth > 0.1 else 0.00051)
        assert e["latency_s"] * 1e3 == pytest.approx(eth_lat_ms, abs=0.051)
        assert v["bandwidth_s"] * 1e3 == pytest.approx(nvl_ms, abs=0.0051)
        assert v["latency_s"] * 1e3 == pytest.approx(nvl_lat_ms, abs=0.0051)
